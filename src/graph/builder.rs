//! Building a [`Graph`] with shape inference.

use super::{
    AttentionMask, FqParams, GateAct, Graph, Node, NodeId, Op, RowNorm, WeightStore, Window,
};
use crate::gguf::GgmlType;
use crate::ops::{RopeConfig, RopeLayout};
use crate::{Error, Result, Tensor};
use std::collections::{BTreeMap, HashMap};

/// Adds nodes one op at a time; each call checks its input shapes and returns the new node.
///
/// Weights are declared where the graph uses them, with the shape the model implies
/// ([`Self::weight`]). Against a weight store the declaration is checked against the stored
/// tensor; a [`Self::declaring`] builder has no store and records the declarations only, so
/// the finished graphs list every tensor a model reads ([`Graph::weights`]).
pub struct GraphBuilder<'w> {
    weights: Option<&'w dyn WeightStore>,
    nodes: Vec<Node>,
    /// Weight (and constant) nodes by name: one node per name.
    weight_nodes: HashMap<String, NodeId>,
    /// Input nodes by name (the last one made under each name).
    input_nodes: HashMap<String, NodeId>,
    constants: BTreeMap<String, Tensor<'static>>,
    stages: Vec<(String, usize)>,
    /// Nodes [`Self::inline`] made, by (op, inputs): an inlined node that computes what one
    /// of them computes is that node.
    inlined: HashMap<String, NodeId>,
}

fn err(op: &'static str, reason: String) -> Error {
    Error::Shape { op, reason }
}

impl<'w> GraphBuilder<'w> {
    /// `weights` answers the shapes and dtypes of weight nodes.
    pub fn new(weights: &'w dyn WeightStore) -> Self {
        GraphBuilder::over(Some(weights))
    }

    /// A builder over `store`, or a [`Self::declaring`] one without.
    pub fn over(store: Option<&'w dyn WeightStore>) -> Self {
        GraphBuilder {
            weights: store,
            nodes: Vec::new(),
            weight_nodes: HashMap::new(),
            input_nodes: HashMap::new(),
            constants: BTreeMap::new(),
            stages: Vec::new(),
            inlined: HashMap::new(),
        }
    }

    /// A builder without weights: every declared weight is taken as f32 of its declared
    /// shape. For listing a model's tensors (shape checks, random-weight models, converter
    /// coverage) without a file.
    pub fn declaring() -> GraphBuilder<'static> {
        GraphBuilder::over(None)
    }

    pub fn shape(&self, id: NodeId) -> &[usize] {
        &self.nodes[id.0].shape
    }

    fn push(&mut self, op: Op, inputs: Vec<NodeId>, shape: Vec<usize>, dtype: GgmlType) -> NodeId {
        let (least, most) = op.arity();
        debug_assert!(
            inputs.len() >= least && most.is_none_or(|m| inputs.len() <= m),
            "{} takes {least}..{most:?} inputs, given {}",
            op.kind(),
            inputs.len()
        );
        self.nodes.push(Node {
            op,
            inputs,
            shape,
            dtype,
        });
        NodeId(self.nodes.len() - 1)
    }

    fn activation(&mut self, op: Op, inputs: Vec<NodeId>, shape: Vec<usize>) -> NodeId {
        self.push(op, inputs, shape, GgmlType::F32)
    }

    /// An f32 operand: an activation, or a weight, which every backend reads as an f32 copy
    /// where no op takes it in stored form (16-bit tables in vla.cpp's bf16 files: position
    /// tables, class tokens); FoldQuant's I8 codes have no f32 reading.
    fn check_f32(&self, op: &'static str, id: NodeId) -> Result<()> {
        let node = &self.nodes[id.0];
        let weight = matches!(node.op, Op::Weight(_));
        match node.dtype {
            GgmlType::F32 => Ok(()),
            t if weight && t != GgmlType::I8 => Ok(()),
            t => Err(err(
                op,
                format!("this input must be f32, node {} is {t}", id.0),
            )),
        }
    }

    pub fn input(&mut self, name: impl Into<String>, shape: &[usize]) -> NodeId {
        let name = name.into();
        let id = self.activation(Op::Input(name.clone()), vec![], shape.to_vec());
        self.input_nodes.insert(name, id);
        id
    }

    /// A run-time input of bytes ([`Op::InputU8`]), read as f32 values.
    pub fn input_u8(&mut self, name: impl Into<String>, shape: &[usize]) -> NodeId {
        let name = name.into();
        let id = self.activation(Op::InputU8(name.clone()), vec![], shape.to_vec());
        self.input_nodes.insert(name, id);
        id
    }

    /// Starts the stage `name`: the nodes added from here on, up to the next stage, are
    /// timed together where the backend can tell stages apart ([`Graph::stages`]).
    pub fn stage(&mut self, name: &str) {
        self.stages.push((name.to_owned(), self.nodes.len()));
    }

    /// The input node last made under `name` (by [`Self::input`] or [`Self::inline`]).
    pub fn input_node(&self, name: &str) -> Option<NodeId> {
        self.input_nodes.get(name).copied()
    }

    /// A tensor the graph carries itself (backends upload it with the weights): values the
    /// model derives from its config, such as per-step time embeddings or mask structure.
    /// Named like a weight, but not in the weight store nor in [`Graph::weights`]; a name
    /// given twice must carry the same tensor, and gives the same node.
    pub fn constant(&mut self, name: &str, value: Tensor<'static>) -> Result<NodeId> {
        if let Some(&id) = self.weight_nodes.get(name) {
            return match self.constants.get(name) {
                Some(c) if c.shape() == value.shape() && c.raw_bytes() == value.raw_bytes() => {
                    Ok(id)
                }
                _ => Err(Error::InvalidArgument(format!(
                    "constant {name:?} is given twice with different values (or names a weight)"
                ))),
            };
        }
        let id = self.push(
            Op::Weight(name.to_owned()),
            vec![],
            value.shape().to_vec(),
            value.dtype(),
        );
        self.weight_nodes.insert(name.to_owned(), id);
        self.constants.insert(name.to_owned(), value);
        Ok(id)
    }

    /// Copies `graph`'s nodes into this graph and returns its outputs here. `bind(name)`
    /// gives the node that replaces input `name` (of the input's shape); an unbound input
    /// becomes the input `{namespace}.{name}`, one node shared by every graph inlined under
    /// that namespace. Weights and constants are shared by name, so a weight that several
    /// inlined graphs read is one node (one upload). An op whose inputs are the same nodes
    /// as those of an op inlined before is that node (every op is pure): what a graph
    /// inlined many times computes from its shared inputs alone (a mask from the request,
    /// say) is computed once.
    pub fn inline(
        &mut self,
        graph: &Graph,
        namespace: &str,
        bind: impl Fn(&str) -> Option<NodeId>,
    ) -> Result<Vec<NodeId>> {
        let mut map: Vec<NodeId> = Vec::with_capacity(graph.nodes.len());
        for n in &graph.nodes {
            let id = match &n.op {
                Op::Input(name) => match bind(name) {
                    Some(id) if self.shape(id) == n.shape.as_slice() => id,
                    Some(id) => {
                        return Err(err(
                            "inline",
                            format!(
                                "input {name:?} is {:?}, bound to a node of shape {:?}",
                                n.shape,
                                self.shape(id)
                            ),
                        ))
                    }
                    None => {
                        let full = format!("{namespace}.{name}");
                        match self.input_nodes.get(&full) {
                            Some(&id) if self.shape(id) == n.shape.as_slice() => id,
                            Some(_) => {
                                return Err(err(
                                    "inline",
                                    format!("input {full:?} is made with two shapes"),
                                ))
                            }
                            None => self.input(full, &n.shape),
                        }
                    }
                },
                Op::InputU8(name) => {
                    let full = format!("{namespace}.{name}");
                    match self.input_nodes.get(&full) {
                        Some(&id)
                            if matches!(self.nodes[id.0].op, Op::InputU8(_))
                                && self.shape(id) == n.shape =>
                        {
                            id
                        }
                        Some(_) => {
                            return Err(err(
                                "inline",
                                format!("input {full:?} is made twice, differently"),
                            ))
                        }
                        None => self.input_u8(full, &n.shape),
                    }
                }
                Op::Weight(name) => self.leaf_weight(graph, name, n)?,
                op => {
                    let inputs: Vec<NodeId> = n.inputs.iter().map(|i| map[i.0]).collect();
                    let key = format!("{op:?} {inputs:?} {:?}", n.shape);
                    match self.inlined.get(&key) {
                        Some(&id) => id,
                        None => {
                            let id = self.push(op.clone(), inputs, n.shape.clone(), n.dtype);
                            self.inlined.insert(key, id);
                            id
                        }
                    }
                }
            };
            map.push(id);
        }
        Ok(graph.outputs.iter().map(|o| map[o.0]).collect())
    }

    /// `graph`'s weight node `n` (named `name`) in this graph: its constant, or the store's
    /// weight of the same shape and dtype, one node per name.
    pub(super) fn leaf_weight(&mut self, graph: &Graph, name: &str, n: &Node) -> Result<NodeId> {
        if let Some(c) = graph.constants.get(name) {
            return self.constant(name, c.clone());
        }
        match self.weight_nodes.get(name) {
            Some(&id) if self.nodes[id.0].shape == n.shape => Ok(id),
            Some(_) => Err(Error::InvalidArgument(format!(
                "tensor {name:?} is declared with two shapes"
            ))),
            None => {
                let id = self.push(n.op.clone(), vec![], n.shape.clone(), n.dtype);
                self.weight_nodes.insert(name.to_owned(), id);
                Ok(id)
            }
        }
    }

    /// An op of another graph's kind on nodes of this one, its output `shape` worked out by
    /// the caller ([`Graph::batched`]).
    pub(super) fn push_op(&mut self, op: Op, inputs: Vec<NodeId>, shape: Vec<usize>) -> NodeId {
        self.activation(op, inputs, shape)
    }

    /// The weight `name`, which the model declares to be `shape` (row-major): the one place
    /// a model names a tensor. Declaring it again in the same graph gives the same node (one
    /// upload). Fails, naming the tensor, when the store lacks it or holds another shape, or
    /// when the graph already declared it with another shape.
    pub fn weight(&mut self, name: &str, shape: &[usize]) -> Result<NodeId> {
        if let Some(&id) = self.weight_nodes.get(name) {
            if self.constants.contains_key(name) || self.nodes[id.0].shape != shape {
                return Err(Error::InvalidArgument(format!(
                    "tensor {name:?} is declared as {:?} and as {shape:?}",
                    self.nodes[id.0].shape
                )));
            }
            return Ok(id);
        }
        let dtype = match self.weights {
            None => GgmlType::F32,
            Some(store) => {
                let t = store.weight(name)?;
                // FoldQuant's INT4 codes (I8, only integer sites store it) hold two a byte,
                // ternary codes four: a matrix declared [N, K] is stored [N, K / 2] or
                // [N, K / 4] (`fq_site` checks the bits)
                let packed = t.dtype() == GgmlType::I8
                    && shape.len() == 2
                    && [2, 4].iter().any(|&d| {
                        shape[1].is_multiple_of(d) && t.shape() == [shape[0], shape[1] / d]
                    });
                if t.shape() != shape && !packed {
                    return Err(Error::InvalidArgument(format!(
                        "tensor {name:?} has shape {:?}, the config implies {shape:?}",
                        t.shape()
                    )));
                }
                t.dtype()
            }
        };
        let id = self.push(Op::Weight(name.to_owned()), vec![], shape.to_vec(), dtype);
        self.weight_nodes.insert(name.to_owned(), id);
        Ok(id)
    }

    /// The weight `name` with whatever shape the store holds (op tests and benchmarks over
    /// ad-hoc stores; models declare their shapes with [`Self::weight`]).
    pub fn stored_weight(&mut self, name: &str) -> Result<NodeId> {
        let store = self.weights.ok_or_else(|| {
            Error::InvalidArgument(format!("weight {name:?}: a declaring builder has no store"))
        })?;
        let t = store.weight(name)?;
        let (shape, dtype) = (t.shape().to_vec(), t.dtype());
        let id = self.push(Op::Weight(name.to_owned()), vec![], shape, dtype);
        self.weight_nodes.insert(name.to_owned(), id);
        Ok(id)
    }

    /// `x [.., K] @ w^T` with `w` `[N, K]`. An RMSNorm `x` is read by the matmul itself
    /// ([`RowNorm`]); a FoldQuant site's codes (I8 `w`) make an [`Op::FqLinear`].
    pub fn matmul(&mut self, x: NodeId, w: NodeId) -> Result<NodeId> {
        self.check_f32("matmul", x)?;
        let (xs, ws) = (self.shape(x), self.shape(w));
        if xs.is_empty() || ws.len() != 2 || xs[xs.len() - 1] != ws[1] {
            return Err(err(
                "matmul",
                format!("x {xs:?} @ w^T with w {ws:?}: need x [.., K], w [N, K]"),
            ));
        }
        let mut shape = xs.to_vec();
        *shape.last_mut().expect("non-empty") = ws[0];
        if self.nodes[w.0].dtype == GgmlType::I8 {
            let (mut params, mut inputs, fuse_norm) = self.fq_site(w)?;
            let mut x = x;
            // vla.cpp fuses the RMSNorm before a language model's q/k/v and gate/up into
            // the site (its own summation order): read the norm's input and gain instead
            if let (true, Op::RmsNorm { eps, offset }) = (fuse_norm, &self.nodes[x.0].op) {
                params.norm = Some((*eps, *offset));
                let (pre, gain) = (self.nodes[x.0].inputs[0], self.nodes[x.0].inputs[1]);
                inputs.push(gain);
                x = pre;
            }
            inputs.insert(0, x);
            return Ok(self.activation(Op::FqLinear(params), inputs, shape));
        }
        let (x, norm, gain) = self.norm_read(x);
        let mut inputs = vec![x, w];
        inputs.extend(gain);
        Ok(self.activation(Op::MatMul { norm }, inputs, shape))
    }

    /// A matmul's input `x`: when it is an RMSNorm, the norm's input, settings and gain
    /// instead, for the matmul to normalise as it reads (the norm node is dropped at build
    /// when nothing else reads it).
    fn norm_read(&self, x: NodeId) -> (NodeId, Option<RowNorm>, Option<NodeId>) {
        match self.nodes[x.0].op {
            Op::RmsNorm { eps, offset } => {
                let inputs = &self.nodes[x.0].inputs;
                (inputs[0], Some(RowNorm { eps, offset }), Some(inputs[1]))
            }
            _ => (x, None, None),
        }
    }

    /// `act(x @ w_gate^T) * (x @ w_up^T)` as one [`Op::GatedMatMul`] (reading an RMSNorm `x`
    /// as [`Self::matmul`] does); FoldQuant sites (I8 codes) keep their own ops: two sites and
    /// a [`Op::Gated`].
    pub fn gated_matmul(
        &mut self,
        x: NodeId,
        w_gate: NodeId,
        w_up: NodeId,
        act: GateAct,
    ) -> Result<NodeId> {
        let fq = [w_gate, w_up].map(|w| self.nodes[w.0].dtype == GgmlType::I8);
        if fq.contains(&true) {
            let gate = self.matmul(x, w_gate)?;
            let up = self.matmul(x, w_up)?;
            return self.gated(gate, up, act);
        }
        self.check_f32("gated_matmul", x)?;
        let (xs, gs, us) = (self.shape(x), self.shape(w_gate), self.shape(w_up));
        if xs.is_empty() || gs.len() != 2 || gs != us || xs[xs.len() - 1] != gs[1] {
            return Err(err(
                "gated_matmul",
                format!("x {xs:?} with gate {gs:?} and up {us:?}: need x [.., K], both [N, K]"),
            ));
        }
        let mut shape = xs.to_vec();
        *shape.last_mut().expect("non-empty") = gs[0];
        let (x, norm, gain) = self.norm_read(x);
        let mut inputs = vec![x, w_gate, w_up];
        inputs.extend(gain);
        Ok(self.activation(Op::GatedMatMul { act, norm }, inputs, shape))
    }

    /// The integer site whose codes are the I8 weight `w` (`<site>.weight`): its settings
    /// from `<site>.fq` (`[weight_bits, act_bits, block, clip, fold, fuse_norm]`, fold 0
    /// none, 1 before, 2 after; written at load by `foldquant::integer_form`; a seventh
    /// value 1 selects BitNet's activation rule, which ternary sites use), the inputs
    /// after x: codes, `<site>.wscale`, and `<site>.ascale` when it folds one; and whether
    /// the site fuses the RMSNorm before it.
    fn fq_site(&mut self, w: NodeId) -> Result<(FqParams, Vec<NodeId>, bool)> {
        use crate::ops::foldquant::{ActRule, FoldOrder};
        let (n, k) = (self.nodes[w.0].shape[0], self.nodes[w.0].shape[1]);
        let site = match &self.nodes[w.0].op {
            Op::Weight(name) => name.strip_suffix(".weight").map(str::to_owned),
            _ => None,
        };
        let (Some(site), Some(store)) = (site, self.weights) else {
            return Err(err(
                "matmul",
                "an I8 matrix that is no FoldQuant <site>.weight".into(),
            ));
        };
        let f = store.weight(&format!("{site}.fq"))?.to_vec_f32()?;
        let ([wb, ab, block, clip, fold, fuse], rule) = (f.get(..6).unwrap_or(&[]), f.get(6))
        else {
            return Err(err(
                "matmul",
                format!("{site}.fq holds {} values, not 6 or 7", f.len()),
            ));
        };
        let (wb, ab, block, clip, fold, fuse) = (*wb, *ab, *block, *clip, *fold, *fuse);
        let act = match (f.len(), rule) {
            (6, _) | (7, Some(0.0)) => ActRule::FoldQuant,
            (7, Some(1.0)) => ActRule::BitNet,
            _ => {
                return Err(err(
                    "matmul",
                    format!("{site}.fq: {} values, activation rule {rule:?}", f.len()),
                ))
            }
        };
        let fold = match fold as u32 {
            0 => None,
            1 => Some(FoldOrder::Before),
            _ => Some(FoldOrder::After),
        };
        let stored = store.weight(&format!("{site}.weight"))?.shape()[1];
        let want = crate::ops::foldquant::row_bytes(k, wb as u32);
        // ternary rows are whole 16-code words (crate::ops::ternary)
        let whole = wb != 2.0 || k.is_multiple_of(crate::ops::ternary::CODES_PER_WORD);
        if ![2.0, 4.0, 8.0].contains(&wb) || stored != want || !whole {
            return Err(err(
                "matmul",
                format!(
                    "{site}: {wb}-bit codes stored {stored} a row for K = {k} (INT4 holds two a byte, ternary four in rows of whole 16-code words)"
                ),
            ));
        }
        let params = FqParams {
            weight_bits: wb as u32,
            act_bits: ab as u32,
            act,
            block: block as usize,
            clip,
            fold,
            norm: None,
            addend: false,
        };
        let mut inputs = vec![w, self.weight(&format!("{site}.wscale"), &[n])?];
        if fold.is_some() {
            inputs.push(self.weight(&format!("{site}.ascale"), &[k])?);
        }
        Ok((params, inputs, fuse != 0.0))
    }

    /// `x @ w^T + c` as one op: `c` is `[N]` (a bias, broadcast over rows) or has the
    /// output's shape (a residual).
    pub fn matmul_add(&mut self, x: NodeId, w: NodeId, c: NodeId) -> Result<NodeId> {
        let y = self.matmul(x, w)?;
        let (ys, cs) = (self.shape(y).to_vec(), self.shape(c));
        if cs != [ys[ys.len() - 1]] && cs != ys.as_slice() {
            return Err(err(
                "matmul_add",
                format!("addend {cs:?} must be [N] or the output's shape {ys:?}"),
            ));
        }
        self.nodes[y.0].inputs.push(c);
        if let Op::FqLinear(p) = &mut self.nodes[y.0].op {
            p.addend = true;
        }
        Ok(y)
    }

    pub fn bmm(&mut self, a: NodeId, b: NodeId, trans_b: bool) -> Result<NodeId> {
        self.check_f32("bmm", a)?;
        self.check_f32("bmm", b)?;
        let (as_, bs) = (self.shape(a), self.shape(b));
        let (n, k) = if trans_b { (1, 2) } else { (2, 1) };
        if as_.len() != 3 || bs.len() != 3 || as_[0] != bs[0] || as_[2] != bs[k] {
            return Err(err(
                "bmm",
                format!("a {as_:?}, b {bs:?} (trans_b {trans_b})"),
            ));
        }
        let shape = vec![as_[0], as_[1], bs[n]];
        Ok(self.activation(Op::Bmm { trans_b }, vec![a, b], shape))
    }

    fn binary(&mut self, op: Op, a: NodeId, b: NodeId) -> Result<NodeId> {
        let shape = crate::ops::broadcast_shape(self.shape(a), self.shape(b))?;
        Ok(self.activation(op, vec![a, b], shape))
    }

    pub fn add(&mut self, a: NodeId, b: NodeId) -> Result<NodeId> {
        self.binary(Op::Add, a, b)
    }

    pub fn mul(&mut self, a: NodeId, b: NodeId) -> Result<NodeId> {
        self.binary(Op::Mul, a, b)
    }

    fn unary(&mut self, op: Op, x: NodeId) -> NodeId {
        let shape = self.shape(x).to_vec();
        self.activation(op, vec![x], shape)
    }

    pub fn scale(&mut self, x: NodeId, s: f32) -> NodeId {
        self.unary(Op::Scale(s), x)
    }

    pub fn gelu_tanh(&mut self, x: NodeId) -> NodeId {
        self.unary(Op::GeluTanh, x)
    }

    pub fn gelu_erf(&mut self, x: NodeId) -> NodeId {
        self.unary(Op::GeluErf, x)
    }

    pub fn silu(&mut self, x: NodeId) -> NodeId {
        self.unary(Op::Silu, x)
    }

    /// `act(gate) * up` in one op (`gate` and `up` of the same shape).
    pub fn gated(&mut self, gate: NodeId, up: NodeId, act: GateAct) -> Result<NodeId> {
        let (gs, us) = (self.shape(gate), self.shape(up));
        if gs != us {
            return Err(err("gated", format!("gate {gs:?} and up {us:?} differ")));
        }
        let shape = gs.to_vec();
        Ok(self.activation(Op::Gated(act), vec![gate, up], shape))
    }

    pub fn relu(&mut self, x: NodeId) -> NodeId {
        self.unary(Op::Relu, x)
    }

    pub fn softmax(&mut self, x: NodeId) -> NodeId {
        self.unary(Op::Softmax, x)
    }

    fn check_last_dim(&self, op: &'static str, x: NodeId, params: &[NodeId]) -> Result<()> {
        let d = self.shape(x).last().copied().unwrap_or(0);
        for p in params {
            if self.shape(*p) != [d] {
                return Err(err(
                    op,
                    format!(
                        "parameter {:?} must be [{d}] for x {:?}",
                        self.shape(*p),
                        self.shape(x)
                    ),
                ));
            }
        }
        Ok(())
    }

    /// [`Op::AdaRmsNorm`]: `x / rms(x) * (1 + m[..W]) + m[W..2W]`, `m` a vector of a whole
    /// number (2 or more) of x's width `W`.
    pub fn ada_rms_norm(&mut self, x: NodeId, m: NodeId, eps: f32) -> Result<NodeId> {
        self.check_f32("ada_rms_norm", x)?;
        let (w, ms) = (self.shape(x).last().copied().unwrap_or(0), self.shape(m));
        if ms.len() != 1 || w == 0 || ms[0] % w != 0 || ms[0] < 2 * w {
            return Err(err(
                "ada_rms_norm",
                format!(
                    "modulation {ms:?} must be [k * {w}] with k >= 2 for x {:?}",
                    self.shape(x)
                ),
            ));
        }
        Ok(self.unary_with(Op::AdaRmsNorm { eps }, x, &[m]))
    }

    /// [`Op::AddGated`]: `x + y * m[part W..(part + 1) W]`, `x` and `y` of one shape with
    /// last dim `W`, `m` a vector of more than `part` times `W`.
    pub fn add_gated(&mut self, x: NodeId, y: NodeId, m: NodeId, part: usize) -> Result<NodeId> {
        self.check_f32("add_gated", x)?;
        let (xs, ys, ms) = (self.shape(x), self.shape(y), self.shape(m));
        let w = xs.last().copied().unwrap_or(0);
        if xs != ys || ms.len() != 1 || w == 0 || ms[0] % w != 0 || ms[0] / w <= part {
            return Err(err(
                "add_gated",
                format!("x {xs:?} and y {ys:?} must match and m {ms:?} hold part {part} of {w}"),
            ));
        }
        Ok(self.unary_with(Op::AddGated { part }, x, &[y, m]))
    }

    pub fn rms_norm(&mut self, x: NodeId, w: NodeId, eps: f32, offset: f32) -> Result<NodeId> {
        self.check_last_dim("rms_norm", x, &[w])?;
        Ok(self.unary_with(Op::RmsNorm { eps, offset }, x, &[w]))
    }

    pub fn layer_norm(&mut self, x: NodeId, w: NodeId, b: NodeId, eps: f32) -> Result<NodeId> {
        self.check_last_dim("layer_norm", x, &[w, b])?;
        Ok(self.unary_with(Op::LayerNorm { eps }, x, &[w, b]))
    }

    fn unary_with(&mut self, op: Op, x: NodeId, extra: &[NodeId]) -> NodeId {
        let shape = self.shape(x).to_vec();
        let mut inputs = vec![x];
        inputs.extend_from_slice(extra);
        self.activation(op, inputs, shape)
    }

    pub fn rope(&mut self, x: NodeId, positions: NodeId, cfg: RopeConfig) -> Result<NodeId> {
        let xs = self.shape(x);
        let seq_axis = match cfg.layout {
            RopeLayout::SeqHeadDim => 0,
            RopeLayout::HeadSeqDim => 1,
        };
        let n_rot = cfg.n_rot.unwrap_or(xs.get(2).copied().unwrap_or(0));
        if xs.len() != 3
            || self.shape(positions) != [xs[seq_axis]]
            || !n_rot.is_multiple_of(2)
            || n_rot > xs[2]
        {
            return Err(err(
                "rope",
                format!(
                    "x {xs:?} with positions {:?}, n_rot {n_rot}",
                    self.shape(positions)
                ),
            ));
        }
        Ok(self.unary_with(Op::Rope(cfg), x, &[positions]))
    }

    /// `q [Sq, Hq, D]` over keys and values `kv`, one or two `(k [Sk_i, Hkv, D], v [Sk_i,
    /// Hkv, Dv])` parts whose rows follow each other (a cache, then new rows) -> `[Sq, Hq, Dv]`
    /// (see [`Op::Attention`]); `allowed`: an `[Sq, Sk]` tensor (nonzero = may attend) when
    /// `mask` is `Allowed`, `Sk` the parts' rows together.
    pub fn attention(
        &mut self,
        q: NodeId,
        kv: &[(NodeId, NodeId)],
        mask: AttentionMask,
        allowed: Option<NodeId>,
        scale: Option<f32>,
    ) -> Result<NodeId> {
        let qs = self.shape(q).to_vec();
        let shapes: Vec<(&[usize], &[usize])> = kv
            .iter()
            .map(|&(k, v)| (self.shape(k), self.shape(v)))
            .collect();
        let dv = shapes
            .first()
            .map_or(0, |(_, vs)| vs.get(2).copied().unwrap_or(0));
        let ok = qs.len() == 3
            && (1..=2).contains(&kv.len())
            && shapes.iter().all(|(ks, vs)| {
                ks.len() == 3
                    && vs.len() == 3
                    && ks[2] == qs[2]
                    && vs[..2] == ks[..2]
                    && ks[1] == shapes[0].0[1]
                    && vs[2] == dv
            })
            && shapes[0].0[1] > 0
            && qs[1].is_multiple_of(shapes[0].0[1]);
        if !ok {
            return Err(err(
                "attention",
                format!("q {qs:?}, keys and values {shapes:?} (one or two parts)"),
            ));
        }
        let sk: usize = shapes.iter().map(|(ks, _)| ks[0]).sum();
        let shape = vec![qs[0], qs[1], dv];
        let scale = scale.unwrap_or(1.0 / (qs[2] as f32).sqrt());
        let mut inputs = vec![q];
        inputs.extend(kv.iter().flat_map(|&(k, v)| [k, v]));
        match (mask, allowed) {
            (AttentionMask::Allowed, Some(m)) if self.shape(m) == [qs[0], sk] => inputs.push(m),
            (AttentionMask::Allowed, _) => {
                return Err(err(
                    "attention",
                    format!("an Allowed mask needs an [{}, {sk}] mask input", qs[0]),
                ))
            }
            (_, Some(_)) => {
                return Err(err(
                    "attention",
                    "a mask input needs AttentionMask::Allowed".into(),
                ))
            }
            (_, None) => {}
        }
        Ok(self.activation(Op::Attention { mask, scale }, inputs, shape))
    }

    pub fn patch_embed(&mut self, image: NodeId, w: NodeId, b: NodeId) -> Result<NodeId> {
        let (is, ws, bs) = (self.shape(image), self.shape(w), self.shape(b));
        if is.len() != 3
            || ws.len() != 4
            || ws[1] != is[0]
            || bs != [ws[0]]
            || ws[2] == 0
            || ws[3] == 0
        {
            return Err(err(
                "patch_embed",
                format!("image {is:?}, w {ws:?}, b {bs:?}"),
            ));
        }
        let shape = vec![(is[1] / ws[2]) * (is[2] / ws[3]), ws[0]];
        Ok(self.activation(Op::PatchEmbed, vec![image, w, b], shape))
    }

    /// [`Op::Im2Col`]: `x [H, W, C]` -> `[OH * OW, C * KH * KW]`.
    pub fn im2col(&mut self, x: NodeId, win: Window) -> Result<NodeId> {
        let (_, _, c, oh, ow) = self.window_input("im2col", x, &win)?;
        let shape = vec![oh * ow, c * win.kernel.0 * win.kernel.1];
        Ok(self.activation(Op::Im2Col(win), vec![x], shape))
    }

    /// [`Op::MaxPool`]: `x [H, W, C]` -> `[OH, OW, C]`. As PyTorch's `MaxPool2d`, the
    /// padding is at most half the kernel (so no window lies wholly in it); no dilation.
    pub fn max_pool(&mut self, x: NodeId, win: Window) -> Result<NodeId> {
        let (_, _, c, oh, ow) = self.window_input("max_pool", x, &win)?;
        let ((kh, kw), (ph, pw)) = (win.kernel, win.padding);
        if ph > kh / 2 || pw > kw / 2 || win.dilation != (1, 1) {
            return Err(err(
                "max_pool",
                format!("padding at most half the kernel and no dilation: {win:?}"),
            ));
        }
        Ok(self.activation(Op::MaxPool(win), vec![x], vec![oh, ow, c]))
    }

    /// A channels-last feature map's sizes and the window's output, checked.
    fn window_input(
        &self,
        op: &'static str,
        x: NodeId,
        win: &Window,
    ) -> Result<(usize, usize, usize, usize, usize)> {
        self.check_f32(op, x)?;
        let xs = self.shape(x);
        let [h, w, c] = xs[..] else {
            return Err(err(op, format!("expected [H, W, C], got {xs:?}")));
        };
        let (oh, ow) = win.output(h, w).map_err(|e| err(op, e))?;
        Ok((h, w, c, oh, ow))
    }

    pub fn concat(&mut self, xs: &[NodeId], axis: usize) -> Result<NodeId> {
        let first = xs
            .first()
            .map(|x| self.shape(*x).to_vec())
            .unwrap_or_default();
        if axis >= first.len() {
            return Err(err("concat", format!("axis {axis} for shape {first:?}")));
        }
        let mut shape = first.clone();
        shape[axis] = 0;
        for x in xs {
            let s = self.shape(*x);
            let same_rest = s.len() == first.len()
                && s.iter()
                    .zip(&first)
                    .enumerate()
                    .all(|(i, (a, b))| i == axis || a == b);
            if !same_rest {
                return Err(err(
                    "concat",
                    format!("{s:?} does not match {first:?} off axis {axis}"),
                ));
            }
            shape[axis] += s[axis];
        }
        Ok(self.activation(Op::Concat { axis }, xs.to_vec(), shape))
    }

    pub fn slice(&mut self, x: NodeId, axis: usize, start: usize, len: usize) -> Result<NodeId> {
        let mut shape = self.shape(x).to_vec();
        if axis >= shape.len() || start.checked_add(len).is_none_or(|end| end > shape[axis]) {
            return Err(err(
                "slice",
                format!("axis {axis} [{start}, +{len}) of {shape:?}"),
            ));
        }
        shape[axis] = len;
        Ok(self.activation(Op::Slice { axis, start, len }, vec![x], shape))
    }

    pub fn permute(&mut self, x: NodeId, perm: &[usize]) -> Result<NodeId> {
        let xs = self.shape(x);
        let mut seen = vec![false; xs.len()];
        let valid = perm.len() == xs.len()
            && perm
                .iter()
                .all(|&p| p < xs.len() && !std::mem::replace(&mut seen[p], true));
        if !valid {
            return Err(err("permute", format!("{perm:?} for shape {xs:?}")));
        }
        let shape = perm.iter().map(|&p| xs[p]).collect();
        Ok(self.activation(Op::Permute(perm.to_vec()), vec![x], shape))
    }

    pub fn reshape(&mut self, x: NodeId, shape: &[usize]) -> Result<NodeId> {
        let n: usize = self.shape(x).iter().product();
        if shape.iter().product::<usize>() != n {
            return Err(err("reshape", format!("{:?} to {shape:?}", self.shape(x))));
        }
        self.check_f32("reshape", x)?;
        Ok(self.activation(Op::Reshape(shape.to_vec()), vec![x], shape.to_vec()))
    }

    pub fn embedding(&mut self, table: NodeId, ids: NodeId) -> Result<NodeId> {
        let (ts, is) = (self.shape(table), self.shape(ids));
        if ts.len() != 2 || is.len() != 1 {
            return Err(err("embedding", format!("table {ts:?}, ids {is:?}")));
        }
        let shape = vec![is[0], ts[1]];
        Ok(self.activation(Op::Embedding, vec![table, ids], shape))
    }

    /// Finishes the graph; `outputs` are read back after each run. Ops that no output
    /// depends on are dropped, so a builder's node ids past the first dropped op do not name
    /// the same nodes in the graph: find results through [`Graph::outputs`].
    pub fn build(self, outputs: &[NodeId]) -> Result<Graph> {
        for o in outputs {
            if o.0 >= self.nodes.len() {
                return Err(Error::InvalidArgument(format!(
                    "output node {} does not exist",
                    o.0
                )));
            }
            if self.nodes[o.0].dtype != GgmlType::F32 {
                return Err(Error::InvalidArgument(format!(
                    "output node {} is a non-f32 weight",
                    o.0
                )));
            }
        }
        // Ops no output depends on are dropped (a norm whose readers all fused it, say):
        // nothing would read what they compute. Inputs and weights stay, so the graph's
        // inputs and declared weights do not depend on what its ops read.
        let mut live = vec![false; self.nodes.len()];
        for o in outputs {
            live[o.0] = true;
        }
        for i in (0..self.nodes.len()).rev() {
            if live[i] {
                for inp in &self.nodes[i].inputs {
                    live[inp.0] = true;
                }
            }
        }
        let keep: Vec<bool> = (self.nodes.iter().zip(&live))
            .map(|(n, &l)| l || n.op.is_leaf())
            .collect();
        let mut new_index = vec![0usize; self.nodes.len()];
        let mut nodes = Vec::with_capacity(self.nodes.len());
        for (i, mut n) in self.nodes.into_iter().enumerate() {
            new_index[i] = nodes.len();
            if keep[i] {
                n.inputs
                    .iter_mut()
                    .for_each(|x| *x = NodeId(new_index[x.0]));
                nodes.push(n);
            }
        }
        let stages = (self.stages.into_iter())
            .map(|(name, start)| (name, new_index.get(start).copied().unwrap_or(nodes.len())))
            .collect();
        Ok(Graph {
            nodes,
            outputs: outputs.iter().map(|o| NodeId(new_index[o.0])).collect(),
            constants: self.constants,
            stages,
        })
    }
}
