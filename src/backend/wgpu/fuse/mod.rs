//! What the wgpu executable fuses across graph nodes (the graph itself is unchanged: the cpu
//! and ggml backends run it as built); [`WgpuOptions::fuse_nodes`](super::WgpuOptions::fuse_nodes)
//! turns it all off.
//!
//! - Sibling products: matmuls of the same input rows (read through the same norm, if any),
//!   each by its own weight of one dtype and depth, with no addend or each with its bias - a
//!   layer's query, key and value projections. Their weights (and biases) are uploaded
//!   concatenated along the output columns; the first product's dispatches compute all of
//!   them and write each one's columns to its own output (`shaders/product_out.wgsl`), the
//!   others dispatch nothing.
//! - Gated residuals: an `Op::AddGated` (`x + y * gate`, pi0.5's adaptive layers) whose `y`
//!   is a matmul nothing else reads: the matmul's dispatches write `x + acc * gate` into the
//!   residual's output (`C_GATE` in `weight_decode.wgsl`), the residual dispatches nothing.
//! - Rope pairs: two `Op::Rope`s of the same positions and settings in one stage (a
//!   layer's queries and keys) rotated by one dispatch (`TWO` in `rope.wgsl`).
//!
//! In the execution order ([`order`]) what a node's dispatches also compute moves up beside
//! it, so the buffer plan sees those outputs written there.

mod siblings;

pub(crate) use siblings::{Fused, Siblings};

use super::kernels::{
    self, Bind, Dispatch, MatmulFusion, NodeBuffers, OutParts, SecondRope, TensorBuf,
};
use super::GpuContext;
use crate::backend::WeightStore;
use crate::graph::{Graph, Node, NodeId, Op};
use crate::Result;

/// A node's part in what the executable fuses.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Role {
    /// Its dispatches compute sibling group `k`'s products.
    Leads(usize),
    /// Its dispatches write the gated residual node `r` (and not its own value).
    Gates(usize),
    /// Its dispatch rotates rope node `r` too.
    Rotates(usize),
    /// Its value is written by another node's dispatches.
    Follows,
}

/// What the fusion checks ask of every node: how many inputs of other nodes it is (its
/// readers, a node listed twice counting twice) and the index of its stage (0 before the
/// first).
pub(super) struct NodeFacts {
    pub readers: Vec<usize>,
    pub stage: Vec<usize>,
}

impl NodeFacts {
    pub fn of(graph: &Graph) -> Self {
        let nodes = graph.nodes();
        let mut readers = vec![0; nodes.len()];
        for i in nodes.iter().flat_map(|n| &n.inputs) {
            readers[i.0] += 1;
        }
        let starts = graph.stages();
        let stage = (0..nodes.len())
            .map(|i| starts.partition_point(|s| s.1 <= i))
            .collect();
        NodeFacts { readers, stage }
    }
}

/// Each node's position in `order`.
pub(super) fn positions(order: &[usize]) -> Vec<usize> {
    let mut at = vec![0; order.len()];
    for (k, &i) in order.iter().enumerate() {
        at[i] = k;
    }
    at
}

/// What an executable fuses: the sibling groups and their uploads (one for all the groups
/// of the same weights: each denoising step's), each node's [`Role`], and the fused sets
/// (each a node, then the nodes its dispatches also compute).
#[derive(Default)]
pub(super) struct Plan {
    pub groups: Vec<Siblings>,
    uploads: Vec<std::sync::Arc<Fused>>,
    /// per group, its upload
    upload_of: Vec<usize>,
    role: Vec<Option<Role>>,
    pub fused_nodes: Vec<Vec<usize>>,
    /// bytes of the uploads
    pub uploaded_bytes: u64,
}

impl Plan {
    /// Finds what `graph` fuses and uploads the sibling groups' weights.
    pub fn new(ctx: &GpuContext, graph: &Graph, weights: &dyn WeightStore) -> Result<Self> {
        let facts = NodeFacts::of(graph);
        let mut plan = Plan {
            groups: siblings::find(graph, &facts),
            role: vec![None; graph.nodes().len()],
            ..Plan::default()
        };
        for (k, g) in plan.groups.iter().enumerate() {
            match plan.groups[..k].iter().position(|h| h.params == g.params) {
                Some(j) => plan.upload_of.push(plan.upload_of[j]),
                None => {
                    let key = g.shared_key(graph, weights);
                    let make = || g.upload(ctx, graph, weights);
                    let (f, now) = ctx.shared.fused.get_or(key, make)?;
                    if now {
                        plan.uploaded_bytes += f.bytes();
                    }
                    plan.upload_of.push(plan.uploads.len());
                    plan.uploads.push(f);
                }
            }
            plan.role[g.members[0]] = Some(Role::Leads(k));
            for &m in &g.members[1..] {
                plan.role[m] = Some(Role::Follows);
            }
            plan.fused_nodes.push(g.members.clone());
        }
        for r in gated_residuals(graph, &facts, &plan.groups) {
            plan.role[r.product] = Some(Role::Gates(r.residual));
            plan.role[r.residual] = Some(Role::Follows);
            plan.fused_nodes.push(vec![r.product, r.residual]);
        }
        // ropes pair up where the order so far computes both inputs before the first
        let at = positions(&order(graph, &plan.fused_nodes));
        for [a, b] in rope_pairs(graph, &facts, &at) {
            plan.role[a] = Some(Role::Rotates(b));
            plan.role[b] = Some(Role::Follows);
            plan.fused_nodes.push(vec![a, b]);
        }
        Ok(plan)
    }

    /// Node `i`'s part in the plan (none when nothing fuses).
    pub fn role(&self, i: usize) -> Option<Role> {
        self.role.get(i).copied().flatten()
    }

    /// The groups' uploads, which the executable keeps (for executables compiled later to
    /// share while it lives).
    pub fn uploads(&self) -> &[std::sync::Arc<Fused>] {
        &self.uploads
    }

    /// Group `k`'s weights (and biases) as uploaded.
    pub fn upload(&self, k: usize) -> &Fused {
        &self.uploads[self.upload_of[k]]
    }

    /// Input `k` of node `i` where the plan replaces it: a sibling group's first product
    /// reads the group's weights (and biases) concatenated.
    pub fn fused_input(&self, node: &Node, i: usize, k: usize) -> Option<TensorBuf<'_>> {
        let Some(Role::Leads(g)) = self.role(i) else {
            return None;
        };
        let upload = self.upload(g);
        match k {
            1 => Some(upload.weight()),
            _ if Some(node.inputs[k]) == node.addend() => Some(upload.bias()),
            _ => None,
        }
    }

    /// The node whose output node `i`'s dispatches write: a gated residual's, else its own.
    pub fn writes(&self, i: usize) -> usize {
        match self.role(i) {
            Some(Role::Gates(r)) => r,
            _ => i,
        }
    }

    /// (node, the node whose output its dispatches write instead of its own value): each
    /// gated residual's product and residual.
    pub fn writes_instead(&self) -> Vec<(usize, usize)> {
        let gates = self.role.iter().enumerate();
        gates
            .filter_map(|(i, r)| match r {
                Some(Role::Gates(r)) => Some((i, *r)),
                _ => None,
            })
            .collect()
    }

    /// Node `i`'s dispatches, with what the plan fuses into them; `out` gives a node's
    /// output buffer, `act` any node's value as kernels read it.
    pub fn encode<'a>(
        &self,
        ctx: &GpuContext,
        graph: &'a Graph,
        i: usize,
        bufs: &NodeBuffers,
        out: &dyn Fn(usize) -> Bind<'a>,
        act: &dyn Fn(NodeId) -> Result<Bind<'a>>,
    ) -> Result<Vec<Dispatch>> {
        let (nodes, node) = (graph.nodes(), graph.node(NodeId(i)));
        match self.role(i) {
            Some(Role::Leads(g)) => {
                let g = &self.groups[g];
                let mut parts = OutParts::default();
                for (p, (&m, at)) in g.members[1..].iter().zip(g.starts()).enumerate() {
                    parts.0[p] = Some((at, out(m)));
                }
                let fusion = MatmulFusion {
                    parts,
                    ..MatmulFusion::default()
                };
                kernels::encode_fused(ctx, node, bufs, fusion)
            }
            Some(Role::Gates(r)) => {
                let rn = &nodes[r];
                let Op::AddGated { part } = rn.op else {
                    unreachable!("gated residuals are AddGated nodes")
                };
                let width = rn.shape.last().copied().unwrap_or(0);
                let (x, gate) = (act(rn.inputs[0])?, act(rn.inputs[2])?);
                let fusion = MatmulFusion {
                    gated_residual: Some((x, gate, part * width)),
                    ..MatmulFusion::default()
                };
                kernels::encode_fused(ctx, node, bufs, fusion)
            }
            Some(Role::Rotates(r)) => {
                let second = SecondRope {
                    x: act(nodes[r].inputs[0])?,
                    y: out(r),
                    shape: &nodes[r].shape,
                };
                kernels::encode_rope_pair(ctx, node, bufs, second)
            }
            Some(Role::Follows) | None => kernels::encode(ctx, node, bufs),
        }
    }

    /// The weights and biases uploaded only inside the groups' concatenations.
    pub fn fused_params(&self) -> impl Iterator<Item = NodeId> + '_ {
        let params = self.groups.iter().flat_map(|g| &g.params);
        params.flat_map(|&(w, b)| std::iter::once(w).chain(b))
    }
}

/// A gated residual computed by the product it gates: `residual` an [`Op::AddGated`]
/// `x + y * m[part W..]` whose `y` is `product`, a matmul with no addend.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct GatedResidual {
    pub product: usize,
    pub residual: usize,
}

/// The gated residuals of `graph` whose product can write them: the product (not one of
/// `groups`) has no addend, nothing else reads it, and it comes after the residual's other
/// inputs, in the residual's stage; `x`, `y` and the output of one shape.
pub(super) fn gated_residuals(
    graph: &Graph,
    facts: &NodeFacts,
    groups: &[Siblings],
) -> Vec<GatedResidual> {
    let nodes = graph.nodes();
    let grouped = |i: usize| groups.iter().any(|g| g.members.contains(&i));
    let mut out = Vec::new();
    for (r, n) in nodes.iter().enumerate() {
        let Op::AddGated { .. } = n.op else { continue };
        let [x, y, m] = [n.inputs[0], n.inputs[1], n.inputs[2]];
        let p = graph.node(y);
        let fits = matches!(p.op, Op::MatMul { .. })
            && p.addend().is_none()
            && facts.readers[y.0] == 1
            && !graph.outputs().contains(&y)
            && !grouped(y.0)
            && x.0 < y.0
            && m.0 < y.0
            && facts.stage[y.0] == facts.stage[r]
            && graph.node(x).shape == p.shape
            && p.shape == n.shape;
        if fits {
            out.push(GatedResidual {
                product: y.0,
                residual: r,
            });
        }
    }
    out
}

/// Pairs of [`Op::Rope`]s one dispatch rotates: the same positions and settings, rank 3 of
/// one head dim, one stage, the second's input computed before the first at `at` (each
/// node's place in the execution order so far); each rope in one pair at most, the first
/// with the next rope that fits.
pub(super) fn rope_pairs(graph: &Graph, facts: &NodeFacts, at: &[usize]) -> Vec<[usize; 2]> {
    let nodes = graph.nodes();
    let ropes: Vec<usize> = (0..nodes.len())
        .filter(|&i| matches!(nodes[i].op, Op::Rope(_)) && nodes[i].shape.len() == 3)
        .collect();
    let mut taken = vec![false; nodes.len()];
    let mut out = Vec::new();
    for (k, &a) in ropes.iter().enumerate() {
        if taken[a] {
            continue;
        }
        let (na, stage) = (&nodes[a], facts.stage[a]);
        let fits = |b: usize| {
            let nb = &nodes[b];
            !taken[b]
                && nb.op == na.op
                && nb.inputs[1] == na.inputs[1]
                && nb.shape[2] == na.shape[2]
                && computed_at(graph, at, nb.inputs[0]) < at[a]
        };
        let mut later = ropes[k + 1..]
            .iter()
            .take_while(|&&b| facts.stage[b] == stage);
        if let Some(&b) = later.find(|&&b| fits(b)) {
            taken[a] = true;
            taken[b] = true;
            out.push([a, b]);
        }
    }
    out
}

/// The order nodes are planned and dispatched in: the graph's, with the nodes a node's
/// dispatches also compute (`fused`: each a node, then those) moved up right after it,
/// each after the reshape views it reads that came later (their inputs, shared with it,
/// weights or computed before it, are all there by then: [`computed_at`]).
pub(super) fn order(graph: &Graph, fused: &[Vec<usize>]) -> Vec<usize> {
    let nodes = graph.nodes();
    let mut follows: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    let mut moved = vec![false; nodes.len()];
    for g in fused {
        for &m in &g[1..] {
            // views of m's inputs not placed before g[0], deepest first
            let mut views = Vec::new();
            for &inp in &nodes[m].inputs {
                let mut v = inp.0;
                while matches!(nodes[v].op, Op::Reshape(_)) && v > g[0] && !moved[v] {
                    views.push(v);
                    v = nodes[v].inputs[0].0;
                }
            }
            for &v in views.iter().rev().chain([&m]) {
                follows[g[0]].push(v);
                moved[v] = true;
            }
        }
    }
    let mut out = Vec::with_capacity(nodes.len());
    for i in (0..nodes.len()).filter(|&i| !moved[i]) {
        out.push(i);
        out.extend_from_slice(&follows[i]);
    }
    out
}

/// Where a node's value is there in an execution order of places `at`: its own place, or a
/// reshape view's base's (views need no dispatch).
pub(super) fn computed_at(graph: &Graph, at: &[usize], mut id: NodeId) -> usize {
    while let Op::Reshape(_) = graph.node(id).op {
        id = graph.node(id).inputs[0];
    }
    at[id.0]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::GraphBuilder;
    use crate::Tensor;
    use std::collections::HashMap;

    /// A layer's q and k projections (fused), each split into heads by a reshape view and
    /// rotated: the ropes pair up once the projections are fused, and the order puts the
    /// keys' view and rope right after the queries' rope.
    #[test]
    fn ropes_pair_behind_their_views() {
        use crate::ops::{RopeConfig, RopeLayout, RopeMode};
        let w = |n: usize| Tensor::from_f32(vec![n, 8], vec![0.1; n * 8]).unwrap();
        let weights: HashMap<String, Tensor<'static>> =
            [("q".to_owned(), w(8)), ("k".to_owned(), w(4))].into();
        let cfg = RopeConfig {
            mode: RopeMode::Neox,
            theta: 10000.0,
            n_rot: None,
            freq_scale: 1.0,
            layout: RopeLayout::SeqHeadDim,
        };
        let mut g = GraphBuilder::new(&weights);
        let x = g.input("x", &[3, 8]);
        let pos = g.input("pos", &[3]);
        let rotated = |g: &mut GraphBuilder, name: &str, heads: usize| {
            let w = g.stored_weight(name).unwrap();
            let y = g.matmul(x, w).unwrap();
            let y = g.reshape(y, &[3, heads, 4]).unwrap();
            g.rope(y, pos, cfg).unwrap()
        };
        let q = rotated(&mut g, "q", 2);
        let k = rotated(&mut g, "k", 1);
        let out = g.add(q, q).unwrap();
        let out = g.concat(&[out, k], 1).unwrap();
        let graph = g.build(&[out]).unwrap();
        let facts = NodeFacts::of(&graph);
        let mut fused: Vec<Vec<usize>> = siblings::find(&graph, &facts)
            .into_iter()
            .map(|g| g.members)
            .collect();
        assert_eq!(fused.len(), 1);
        let without = rope_pairs(
            &graph,
            &facts,
            &(0..graph.nodes().len()).collect::<Vec<_>>(),
        );
        assert!(without.is_empty(), "keys projected after the queries' rope");
        let at = positions(&order(&graph, &fused));
        let pairs = rope_pairs(&graph, &facts, &at);
        assert_eq!(pairs, [[q.0, k.0]]);
        fused.push(pairs[0].to_vec());
        let order = order(&graph, &fused);
        let pos_of = |i: usize| order.iter().position(|&j| j == i).unwrap();
        let k_view = graph.node(k).inputs[0].0;
        assert_eq!(
            (pos_of(k_view), pos_of(k.0)),
            (pos_of(q.0) + 1, pos_of(q.0) + 2)
        );
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..graph.nodes().len()).collect::<Vec<_>>());
    }
}
