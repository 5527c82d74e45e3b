//! One graph for several requests ([`Graph::batched`]): the graph of one request copied for
//! each, its weights shared, and, where `stack` asks, each product made one product over the
//! requests' rows stacked (one weight read for all of them, the GPU's matrices `n` times
//! taller). Ops that read along rows of one request (attention, a concat or slice of rows,
//! patch and window ops) run on each request's rows apart.

use super::builder::GraphBuilder;
use super::{Graph, NodeId, Op};
use crate::{Error, Result};

/// The name of request `b`'s copy of input `name` in a batched graph.
pub fn batch_input(b: usize, name: &str) -> String {
    format!("{b}:{name}")
}

/// How the batched graph holds one value of the template.
#[derive(Clone)]
enum Value {
    /// One node serves every request: weights, constants and what they alone compute.
    Shared(NodeId),
    /// Each request's own node.
    Each(Vec<NodeId>),
    /// The requests' values stacked along axis 0: request `b`'s rows `[b d0, (b + 1) d0)`.
    Stacked(NodeId),
}

/// What [`Graph::batched`] builds over: the template's values as they stand and their
/// other forms made so far (each made once).
struct Batcher<'g> {
    g: GraphBuilder<'static>,
    t: &'g Graph,
    n: usize,
    values: Vec<Value>,
    each: Vec<Option<Vec<NodeId>>>,
    stacked: Vec<Option<NodeId>>,
}

impl Graph {
    /// This graph for `n` requests at once: request `b`'s inputs are named
    /// [`batch_input`]`(b, name)`; each output is the requests' outputs stacked along axis 0
    /// (request `b`'s `[b d0, (b + 1) d0)` of the template's `[d0, ..]`). With `stack`, the
    /// products (and the row-wise ops between them) run once over the stacked rows; without,
    /// every op runs on each request's rows as in the template (the same ops on the same
    /// shapes: each request's outputs are the template's bit for bit). Stages are kept.
    pub fn batched(&self, n: usize, stack: bool) -> Result<Graph> {
        if n == 0 {
            return Err(Error::InvalidArgument("a batch of 0 requests".into()));
        }
        let len = self.nodes.len();
        let mut b = Batcher {
            g: GraphBuilder::declaring(),
            t: self,
            n,
            values: Vec::with_capacity(len),
            each: vec![None; len],
            stacked: vec![None; len],
        };
        let mut stages = self.stages.iter().peekable();
        for i in 0..len {
            while let Some((name, _)) = stages.next_if(|s| s.1 <= i) {
                b.g.stage(name);
            }
            let v = b.node(i, stack)?;
            b.values.push(v);
        }
        for (name, _) in stages {
            b.g.stage(name);
        }
        let outputs = (self.outputs.iter())
            .map(|o| b.stacked_of(o.0))
            .collect::<Result<Vec<_>>>()?;
        b.g.build(&outputs)
    }
}

impl Batcher<'_> {
    fn shape(&self, i: usize) -> &[usize] {
        &self.t.nodes[i].shape
    }

    /// Template node `i` in the batched graph.
    fn node(&mut self, i: usize, stack: bool) -> Result<Value> {
        let node = &self.t.nodes[i];
        match &node.op {
            Op::Weight(name) => {
                let id = self.g.leaf_weight(self.t, name, node)?;
                return Ok(Value::Shared(id));
            }
            Op::Input(name) => {
                let ids = (0..self.n)
                    .map(|b| self.g.input(batch_input(b, name), &node.shape))
                    .collect();
                return Ok(Value::Each(ids));
            }
            Op::InputU8(name) => {
                let ids = (0..self.n)
                    .map(|b| self.g.input_u8(batch_input(b, name), &node.shape))
                    .collect();
                return Ok(Value::Each(ids));
            }
            _ => {}
        }
        let inputs: Vec<usize> = node.inputs.iter().map(|x| x.0).collect();
        let shared: Option<Vec<NodeId>> = (inputs.iter())
            .map(|&k| match self.values[k] {
                Value::Shared(id) => Some(id),
                _ => None,
            })
            .collect();
        if let Some(ids) = shared {
            let id = self.g.push_op(node.op.clone(), ids, node.shape.clone());
            return Ok(Value::Shared(id));
        }
        if let Some(roles) = self.stack_roles(i, stack) {
            let mut ids = Vec::with_capacity(inputs.len());
            for (&k, stacked) in inputs.iter().zip(roles) {
                ids.push(match stacked {
                    true => self.stacked_of(k)?,
                    false => self.shared_of(k),
                });
            }
            let (op, shape) = self.stacked_op(i);
            return Ok(Value::Stacked(self.g.push_op(op, ids, shape)));
        }
        // each request's rows apart; a slice of one request's rows reads the stacked rows
        if let (
            Op::Slice {
                axis: 0,
                start,
                len,
            },
            Value::Stacked(s),
        ) = (&node.op, &self.values[inputs[0]])
        {
            let (s, rows) = (*s, self.shape(inputs[0])[0]);
            let ids = (0..self.n)
                .map(|b| self.g.slice(s, 0, b * rows + start, *len))
                .collect::<Result<_>>()?;
            return Ok(Value::Each(ids));
        }
        let per_input = (inputs.iter())
            .map(|&k| self.each_of(k))
            .collect::<Result<Vec<_>>>()?;
        let ids = (0..self.n)
            .map(|b| {
                let ids = per_input.iter().map(|e| e[b]).collect();
                self.g.push_op(node.op.clone(), ids, node.shape.clone())
            })
            .collect();
        Ok(Value::Each(ids))
    }

    /// Whether template node `i` runs once over the stacked rows: per input, whether it is
    /// read stacked (else shared as it is). Products stack when `stack` asks; a row-wise op
    /// stacks when a per-request input of it is stacked already (so no rows are copied for
    /// it alone).
    fn stack_roles(&self, i: usize, stack: bool) -> Option<Vec<bool>> {
        if !stack {
            return None;
        }
        let node = &self.t.nodes[i];
        let out = &node.shape;
        let per_request = |k: usize| !matches!(self.values[node.inputs[k].0], Value::Shared(_));
        let already = |k: usize| matches!(self.values[node.inputs[k].0], Value::Stacked(_));
        // rows of the output are rows of input 0 (a row-wise op over [d0, ..])
        let rows_of_input = |k: usize| self.shape(node.inputs[k].0).first() == out.first();
        let only_first = |len: usize| (0..len).map(|k| k == 0).collect::<Vec<_>>();
        let shared_rest = |from: usize| (from..node.inputs.len()).all(|k| !per_request(k));
        match &node.op {
            Op::MatMul { .. } | Op::GatedMatMul { .. } | Op::FqLinear(_) => {
                // [x, weights.., addend]: the weights shared; an addend of the output's
                // shape (a residual) stacked with x, a bias [N] shared
                let last = node.inputs.len() - 1;
                let addend = match &node.op {
                    Op::MatMul { .. } => node.addend().map(|_| last),
                    Op::FqLinear(p) => p.addend.then_some(last),
                    _ => None,
                };
                let full = |k: usize| self.shape(node.inputs[k].0) == out.as_slice();
                let roles: Vec<bool> = (0..node.inputs.len())
                    .map(|k| k == 0 || (Some(k) == addend && full(k)))
                    .collect();
                let ok = out.len() >= 2
                    && rows_of_input(0)
                    && (1..node.inputs.len()).all(|k| roles[k] || !per_request(k));
                ok.then_some(roles)
            }
            Op::Add | Op::Mul => {
                // each operand the output's rows (stacked) or broadcast over them (shared)
                let mut roles = Vec::new();
                for k in 0..2 {
                    let s = self.shape(node.inputs[k].0);
                    let broadcast = s.len() < out.len() || s.first() == Some(&1);
                    match (per_request(k), broadcast) {
                        (false, true) => roles.push(false),
                        (_, _) if s == out.as_slice() => roles.push(true),
                        _ => return None,
                    }
                }
                (out.len() >= 2 && (0..2).any(|k| roles[k] && already(k))).then_some(roles)
            }
            Op::Gated(_) => {
                let ok = out.len() >= 2 && (already(0) || already(1));
                ok.then(|| vec![true, true])
            }
            Op::Scale(_)
            | Op::GeluTanh
            | Op::GeluErf
            | Op::Silu
            | Op::Relu
            | Op::Softmax
            | Op::RmsNorm { .. }
            | Op::LayerNorm { .. }
            | Op::AdaRmsNorm { .. } => {
                let ok = out.len() >= 2 && already(0) && shared_rest(1);
                ok.then(|| only_first(node.inputs.len()))
            }
            Op::AddGated { .. } => {
                let ok = out.len() >= 2 && (already(0) || already(1)) && shared_rest(2);
                ok.then(|| vec![true, true, false])
            }
            Op::Rope(cfg) => {
                // the positions stacked with the rows (shared ones repeated)
                let seq_first = matches!(cfg.layout, crate::ops::RopeLayout::SeqHeadDim);
                (seq_first && already(0)).then(|| vec![true, true])
            }
            Op::Embedding => (already(1) && !per_request(0)).then(|| vec![false, true]),
            Op::Slice { axis, .. } => (*axis > 0 && already(0)).then(|| vec![true]),
            Op::Permute(perm) => (perm[0] == 0 && already(0)).then(|| vec![true]),
            Op::Reshape(to) => {
                let from = self.shape(node.inputs[0].0);
                let ok = already(0) && from.len() >= 2 && to.len() >= 2 && from[0] == to[0];
                ok.then(|| vec![true])
            }
            Op::Concat { axis } => {
                let ok = *axis > 0 && (0..node.inputs.len()).any(already);
                ok.then(|| vec![true; node.inputs.len()])
            }
            _ => None,
        }
    }

    /// Node `i`'s op and output shape over the stacked rows.
    fn stacked_op(&self, i: usize) -> (Op, Vec<usize>) {
        let node = &self.t.nodes[i];
        let mut shape = node.shape.clone();
        shape[0] *= self.n;
        let op = match &node.op {
            Op::Reshape(_) => Op::Reshape(shape.clone()),
            op => op.clone(),
        };
        (op, shape)
    }

    fn shared_of(&self, k: usize) -> NodeId {
        match &self.values[k] {
            Value::Shared(id) => *id,
            _ => unreachable!("stack_roles reads only shared inputs as they are"),
        }
    }

    /// Template value `k` for each request.
    fn each_of(&mut self, k: usize) -> Result<Vec<NodeId>> {
        if let Some(ids) = &self.each[k] {
            return Ok(ids.clone());
        }
        let ids = match self.values[k].clone() {
            Value::Shared(id) => vec![id; self.n],
            Value::Each(ids) => ids,
            Value::Stacked(s) => {
                let rows = self.shape(k)[0];
                (0..self.n)
                    .map(|b| self.g.slice(s, 0, b * rows, rows))
                    .collect::<Result<_>>()?
            }
        };
        self.each[k] = Some(ids.clone());
        Ok(ids)
    }

    /// Template value `k` stacked along axis 0 over the requests.
    fn stacked_of(&mut self, k: usize) -> Result<NodeId> {
        if let Value::Stacked(s) = self.values[k] {
            return Ok(s);
        }
        if let Some(id) = self.stacked[k] {
            return Ok(id);
        }
        let ids = self.each_of(k)?;
        let id = match self.n {
            // one request: its value is the stack (no copy)
            1 => ids[0],
            _ => self.g.concat(&ids, 0)?,
        };
        self.stacked[k] = Some(id);
        Ok(id)
    }
}

/// Request `b`'s part of a batched graph's output ([`Graph::batched`]): the `b`-th of `n`
/// equal runs of `values`.
pub fn request_part(values: &[f32], n: usize, b: usize) -> &[f32] {
    let each = values.len() / n.max(1);
    &values[b * each..(b + 1) * each]
}
