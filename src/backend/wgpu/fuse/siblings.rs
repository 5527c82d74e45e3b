//! Sibling products: matmuls of the same input rows (read through the same norm, if any),
//! each by its own weight of one dtype and depth, with no addend or each with its bias (a
//! layer's query, key and value projections), found and uploaded as one product.

use super::super::kernels::{Chunk, TensorBuf};
use super::super::shared::WeightKey;
use super::super::upload::{upload, upload_rows};
use super::super::GpuContext;
use super::NodeFacts;
use crate::backend::{ActDtype, WeightStore};
use crate::gguf::GgmlType;
use crate::graph::{Graph, Node, NodeId, Op};
use crate::{Result, Tensor};

/// The most products one fused dispatch writes (`y`, `y1`, `y2`).
const MAX_SIBLINGS: usize = 3;

/// Products fused into one: node indices in graph order (the first leads), their output
/// columns, and the weight (and bias) of each.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Siblings {
    pub members: Vec<usize>,
    pub cols: Vec<usize>,
    pub params: Vec<(NodeId, Option<NodeId>)>,
}

/// The weight and bias of a product, when it may join siblings: a stored weight and a
/// stored `[n]` bias (or none), neither a graph output.
fn stored_params(graph: &Graph, node: &Node) -> Option<(NodeId, Option<NodeId>)> {
    let stored =
        |id: NodeId| matches!(graph.node(id).op, Op::Weight(_)) && !graph.outputs().contains(&id);
    let w = node.inputs[1];
    let bias = node.addend();
    let n = graph.node(w).shape[0];
    let bias_ok = bias.is_none_or(|b| stored(b) && graph.node(b).shape == [n]);
    (stored(w) && bias_ok).then_some((w, bias))
}

/// The groups of fusable sibling products of `graph`: two or three [`Op::MatMul`]s in one
/// stage reading the same input, the same norm and gain, weights of one dtype and depth,
/// all with a bias or none ([`stored_params`]), each read by something. Their weights and
/// biases must be read only by groups of the same weights and biases (the same layer's
/// products in every denoising step, every camera), which then share one upload.
pub(crate) fn find(graph: &Graph, facts: &NodeFacts) -> Vec<Siblings> {
    let nodes = graph.nodes();
    let readers = &facts.readers;
    // (what siblings share, the products so far)
    type Key = (
        usize,
        Option<(u32, u32, usize)>,
        GgmlType,
        usize,
        bool,
        usize,
    );
    let mut open: Vec<(Key, Vec<usize>)> = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        let Op::MatMul { norm } = n.op else { continue };
        let read = readers[i] > 0 || graph.outputs().contains(&NodeId(i));
        let Some((w, bias)) = stored_params(graph, n).filter(|_| read) else {
            continue;
        };
        let wn = graph.node(w);
        let norm = norm.map(|r| {
            let gain = n.norm_gain().expect("a norm has a gain");
            (r.eps.to_bits(), r.offset.to_bits(), gain.0)
        });
        let key = (
            n.inputs[0].0,
            norm,
            wn.dtype,
            wn.shape[1],
            bias.is_some(),
            facts.stage[i],
        );
        match open
            .iter_mut()
            .find(|(k, m)| *k == key && m.len() < MAX_SIBLINGS)
        {
            Some((_, members)) => members.push(i),
            None => open.push((key, vec![i])),
        }
    }
    let groups: Vec<Siblings> = open
        .into_iter()
        .filter(|(_, m)| m.len() > 1)
        .map(|(_, members)| {
            let params: Vec<_> = members
                .iter()
                .map(|&m| stored_params(graph, &nodes[m]).expect("a candidate"))
                .collect();
            Siblings {
                cols: params.iter().map(|p| graph.node(p.0).shape[0]).collect(),
                members,
                params,
            }
        })
        .collect();
    // every read of a group's parameters is by a group of the same parameters
    let sharing = |g: &Siblings| groups.iter().filter(|h| h.params == g.params).count();
    let only_theirs = |g: &Siblings| {
        let ids = g
            .params
            .iter()
            .flat_map(|&(w, b)| std::iter::once(w).chain(b));
        let count = |id: NodeId| ids.clone().filter(|&j| j == id).count();
        ids.clone()
            .all(|id| readers[id.0] == count(id) * sharing(g))
    };
    groups.iter().filter(|g| only_theirs(g)).cloned().collect()
}

/// A group's weights (and biases) as uploaded: concatenated along the output columns.
pub(crate) struct Fused {
    pub chunks: Vec<Chunk>,
    /// `[columns, depth]` of the concatenated weight.
    pub shape: Vec<usize>,
    pub dtype: GgmlType,
    /// The biases concatenated, as f32, and their shape `[columns]`.
    pub bias: Option<(wgpu::Buffer, Vec<usize>)>,
}

impl Fused {
    /// Bytes uploaded: the weights' chunks and the biases.
    pub fn bytes(&self) -> u64 {
        let bias = self.bias.as_ref().map_or(0, |(b, _)| b.size());
        self.chunks.iter().map(|c| c.buffer.size()).sum::<u64>() + bias
    }

    /// The concatenated weight as the matmul kernels take it.
    pub fn weight(&self) -> TensorBuf<'_> {
        TensorBuf::Raw {
            chunks: &self.chunks,
            shape: &self.shape,
            dtype: self.dtype,
        }
    }

    /// The concatenated biases as the matmul kernels take them (f32).
    pub fn bias(&self) -> TensorBuf<'_> {
        let (buffer, shape) = self.bias.as_ref().expect("the group has biases");
        TensorBuf::Act {
            buffer,
            shape,
            dtype: ActDtype::F32,
        }
    }
}

impl Siblings {
    /// Where each product after the first starts in the fused product's columns.
    pub fn starts(&self) -> impl Iterator<Item = usize> + '_ {
        self.cols.iter().scan(0, |at, c| {
            *at += c;
            Some(*at)
        })
    }

    /// The key its upload is shared under ([`crate::backend::wgpu`]'s `shared`): its
    /// weights' and biases' names in `store`; none where one is a constant of the graph.
    pub fn shared_key(&self, graph: &Graph, store: &dyn WeightStore) -> Option<WeightKey> {
        let mut names = Vec::new();
        for &m in &self.members {
            let node = graph.node(NodeId(m));
            let params = [Some(node.inputs[1]), node.addend()];
            for p in params.into_iter().flatten() {
                match &graph.node(p).op {
                    Op::Weight(name) if !graph.constants.contains_key(name) => names.push(name),
                    _ => return None,
                }
            }
        }
        let joined: Vec<&str> = names.iter().map(|n| n.as_str()).collect();
        Some(super::super::shared::key(
            store,
            &format!("fused {}", joined.join(" ")),
        ))
    }

    /// Uploads the group's weights and biases concatenated.
    pub fn upload(
        &self,
        ctx: &GpuContext,
        graph: &Graph,
        store: &dyn WeightStore,
    ) -> Result<Fused> {
        let param = |m: usize, k: usize| graph.node(graph.node(NodeId(m)).inputs[k]);
        let data = |node: &Node| match &node.op {
            Op::Weight(name) => graph.weight_data(store, name),
            _ => unreachable!("siblings' parameters are weights"),
        };
        let first = param(self.members[0], 1);
        let (dtype, depth) = (first.dtype, first.shape[1]);
        let mut bytes = Vec::new();
        let mut bias = Vec::new();
        // copied here, then uploaded: the file's pages may go (as exec.rs does per weight)
        let done = |node: &Node| {
            if let Op::Weight(name) = &node.op {
                store.read_for_now(name);
            }
        };
        for &m in &self.members {
            bytes.extend_from_slice(data(param(m, 1))?.raw_bytes());
            done(param(m, 1));
            if let Some(b) = graph.node(NodeId(m)).addend() {
                bias.extend(data(graph.node(b))?.to_vec_f32()?);
                done(graph.node(b));
            }
        }
        let columns = self.cols.iter().sum::<usize>();
        let name = match &first.op {
            Op::Weight(name) => format!("{name} and siblings"),
            _ => unreachable!("siblings' parameters are weights"),
        };
        let weight = Tensor::from_bytes(vec![columns, depth], dtype, bytes)?;
        let max_binding = ctx.limits.max_storage_buffer_binding_size;
        let chunks = upload_rows(ctx, &name, &weight, max_binding)?;
        let bias = (!bias.is_empty()).then(|| {
            (
                upload(ctx, &name, bytemuck::cast_slice(&bias)),
                vec![columns],
            )
        });
        let fused = Fused {
            chunks,
            shape: vec![columns, depth],
            dtype,
            bias,
        };
        Ok(fused)
    }
}

#[cfg(test)]
mod tests {
    use super::super::order;
    use super::*;
    use crate::graph::GraphBuilder;
    use crate::Tensor;
    use std::collections::HashMap;

    /// q, k, v of one normed input, then a rotation of q between k and v's projections in
    /// graph order, and an output projection reading their sum: q, k, v fuse, the output
    /// projection (another input) does not.
    #[test]
    fn a_layers_projections_fuse_and_move_up() {
        let w = |n: usize| Tensor::from_f32(vec![n, 8], vec![0.1; n * 8]).unwrap();
        let weights: HashMap<String, Tensor<'static>> = [
            ("q".to_owned(), w(8)),
            ("k".to_owned(), w(4)),
            ("v".to_owned(), w(4)),
            ("o".to_owned(), w(8)),
            (
                "g".to_owned(),
                Tensor::from_f32(vec![8], vec![1.0; 8]).unwrap(),
            ),
        ]
        .into();
        let mut g = GraphBuilder::new(&weights);
        let x = g.input("x", &[3, 8]);
        let gain = g.stored_weight("g").unwrap();
        let h = g.rms_norm(x, gain, 1e-6, 0.0).unwrap();
        let proj = |g: &mut GraphBuilder, name| {
            let w = g.stored_weight(name).unwrap();
            g.matmul(h, w).unwrap()
        };
        let q = proj(&mut g, "q");
        let q2 = g.scale(q, 2.0);
        let k = proj(&mut g, "k");
        let v = proj(&mut g, "v");
        let kv = g.concat(&[k, v], 1).unwrap();
        let s = g.add(q2, kv).unwrap();
        let wo = g.stored_weight("o").unwrap();
        let o = g.matmul(s, wo).unwrap();
        let graph = g.build(&[o]).unwrap();
        // (building drops the norm node, which the products read: ids move)
        let nodes = graph.nodes();
        let find_op = |f: &dyn Fn(&Node) -> bool| nodes.iter().position(f).unwrap();
        let product_of = |w: &str| {
            find_op(&|n| {
                n.inputs
                    .get(1)
                    .is_some_and(|&i| graph.node(i).op == Op::Weight(w.into()))
            })
        };
        let [q, k, v, o] = ["q", "k", "v", "o"].map(product_of);
        let q2 = find_op(&|n| matches!(n.op, Op::Scale(_)));
        let s = find_op(&|n| n.op == Op::Add);
        let groups = find(&graph, &NodeFacts::of(&graph));
        assert_eq!(groups.len(), 1, "{groups:?}");
        assert_eq!(groups[0].members, [q, k, v]);
        assert_eq!(groups[0].cols, [8, 4, 4]);
        let fused: Vec<Vec<usize>> = groups.iter().map(|g| g.members.clone()).collect();
        let order = order(&graph, &fused);
        let at = |id: usize| order.iter().position(|&i| i == id).unwrap();
        assert_eq!((at(k), at(v)), (at(q) + 1, at(q) + 2));
        assert!(at(q2) > at(v) && at(o) > at(s));
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..graph.nodes().len()).collect::<Vec<_>>());
    }
}
