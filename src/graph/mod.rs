//! A small compute graph: built once per model, then compiled by a [`crate::backend`] into
//! an executable that runs it many times.
//!
//! Nodes are in topological order by construction (an op can only name nodes built before
//! it). Every node's shape is inferred when it is added, so a backend can plan buffers
//! before any data exists; [`GraphBuilder::build`] drops the ops no output depends on. Activations are f32; weights keep their stored dtype.

mod batch;
mod builder;

pub use batch::{batch_input, request_part};
pub use builder::GraphBuilder;

use crate::gguf::{GgmlType, GgufFile};
use crate::ops::RopeConfig;
use crate::{Error, Result, Tensor};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Where a graph's weights come from: a GGUF file, or a map of tensors in tests.
pub trait WeightStore: Sync {
    /// The named tensor, borrowed where possible (zero-copy from a mapped GGUF).
    fn weight(&self, name: &str) -> Result<Tensor<'_>>;
    /// Says that a backend holding its own copy has read tensor `name` for now: a mapped
    /// file lets its pages go (read again if the tensor is); nothing for other stores.
    fn read_for_now(&self, _name: &str) {}
    /// Whether tensor `name` is a copy the store made and keeps (a weight re-encoded at
    /// load), which no [`Self::read_for_now`] lets go: a backend's own copy of it would
    /// hold its bytes twice.
    fn keeps_a_copy(&self, _name: &str) -> bool {
        false
    }
}

impl WeightStore for GgufFile {
    fn weight(&self, name: &str) -> Result<Tensor<'_>> {
        let info = self.tensor_info(name)?;
        Tensor::from_bytes(info.shape(), info.ty, self.tensor_bytes(info))
    }

    fn read_for_now(&self, name: &str) {
        if let Ok(info) = self.tensor_info(name) {
            self.release(info);
        }
    }

    fn keeps_a_copy(&self, name: &str) -> bool {
        self.is_substitute(name)
    }
}

impl WeightStore for HashMap<String, Tensor<'static>> {
    fn weight(&self, name: &str) -> Result<Tensor<'_>> {
        self.get(name)
            .map(Tensor::view)
            .ok_or_else(|| Error::TensorNotFound(name.to_owned()))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub(crate) usize);

impl NodeId {
    pub fn index(self) -> usize {
        self.0
    }
}

/// Which keys each query may attend to (see [`crate::ops::Mask`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum AttentionMask {
    None,
    Causal,
    /// The op's 4th input: an `[Sq, Sk]` f32 tensor, nonzero = may attend.
    Allowed,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// An f32 tensor supplied at run time by name. Integer data (token ids, positions) is
    /// passed as f32 holding exact integers.
    Input(String),
    /// Bytes supplied at run time by name ([`Tensor::from_u8`]), as the f32 values 0..=255:
    /// camera frames as they arrive, so that the host uploads one byte a pixel channel.
    InputU8(String),
    /// A constant tensor from the weight store, in its stored dtype.
    Weight(String),
    /// `[x [.., M, K], w [N, K]]` -> `x @ w^T`; with `norm`, x's rows RMS-normalised first
    /// by the gain input after `w` ([`RowNorm`]); with a last input `c` (`[N]`, a bias, or
    /// the output's shape), `x @ w^T + c` in one op (one dispatch on GPUs, no separate pass
    /// over the output on the cpu backend). [`Node::norm_gain`], [`Node::addend`].
    MatMul {
        norm: Option<RowNorm>,
    },
    /// `[a [B, M, K], b [B, N, K]]` (`trans_b`) or `b [B, K, N]` -> `[B, M, N]`.
    Bmm {
        trans_b: bool,
    },
    /// Broadcasting elementwise ops, `[a, b]`.
    Add,
    Mul,
    Scale(f32),
    GeluTanh,
    GeluErf,
    Silu,
    Relu,
    /// `[gate, up]` (same shape) -> `act(gate) * up`: a gated FFN's activation and product
    /// in one op.
    Gated(GateAct),
    /// `[x [.., K], w_gate [N, K], w_up [N, K]]` -> `act(x @ w_gate^T) * (x @ w_up^T)`: a
    /// gated FFN's two projections and activation in one op (one dispatch on GPUs for float
    /// weights, neither product written to memory); with `norm`, x's rows RMS-normalised
    /// first by a fourth input, the gain.
    GatedMatMul {
        act: GateAct,
        norm: Option<RowNorm>,
    },
    /// Over the last dimension.
    Softmax,
    /// `[x, w]`: `x / rms(x) * (w + offset)` over the last dim (offset 1 for Gemma).
    RmsNorm {
        eps: f32,
        offset: f32,
    },
    /// `[x [.., W], m [k W]]` (k >= 2) -> `x / rms(x) * (1 + m[..W]) + m[W..2W]` over the
    /// last dim: an adaptive RMSNorm (pi0.5) reading its scale and shift where the
    /// modulation vector holds them, with no slices.
    AdaRmsNorm {
        eps: f32,
    },
    /// `[x [.., W], y [.., W], m [k W]]` (k > part) -> `x + y * m[part W..(part + 1) W]`
    /// over the last dim: an adaptive layer's gated residual (pi0.5) reading its gate where
    /// the modulation vector holds it.
    AddGated {
        part: usize,
    },
    /// `[x, w, b]` over the last dim.
    LayerNorm {
        eps: f32,
    },
    /// `[x, positions [seq]]`.
    Rope(RopeConfig),
    /// `[q [Sq, Hq, D], k [Sk, Hkv, D], v [Sk, Hkv, Dv]]` (+ `allowed [Sq, Sk]`) ->
    /// `[Sq, Hq, Dv]`: heads inside each position, as the projections lay them out, so no
    /// permute is needed on either side. Query head `h` reads kv head `h / (Hq / Hkv)`.
    /// The keys and values may come in two parts, `[q, k0, v0, k1, v1]` (+ `allowed`), the
    /// keys being `k0` then `k1` (`Sk = Sk0 + Sk1`): a KV cache and the new rows, with no
    /// concatenation ([`Node::kv_parts`]).
    Attention {
        mask: AttentionMask,
        scale: f32,
    },
    /// `[image [C, H, W], w [O, C, P, P], b [O]]` -> `[patches, O]`.
    PatchEmbed,
    /// `[x [H, W, C]]` (channels last) -> `[OH * OW, C * KH * KW]`: each output position's
    /// window, zero in the padding, columns in (c, ky, kx) order ([`crate::ops::im2col`]).
    /// A matmul by a PyTorch conv weight read as `[O, C * KH * KW]` makes it a 2-D
    /// convolution whose output `[OH * OW, O]` is channels last again
    /// ([`crate::layers::conv2d`]).
    Im2Col(Window),
    /// `[x [H, W, C]]` -> `[OH, OW, C]`: each window's maximum, padding never winning
    /// ([`crate::ops::max_pool`]).
    MaxPool(Window),
    /// All inputs, along `axis`.
    Concat {
        axis: usize,
    },
    Slice {
        axis: usize,
        start: usize,
        len: usize,
    },
    Permute(Vec<usize>),
    Reshape(Vec<usize>),
    /// `[table [V, D], ids [n]]` -> `[n, D]`.
    Embedding,
    /// A FoldQuant site (docs/FOLDQUANT.md): `[x [.., K], codes [N, K] (I8, one code a
    /// byte), wscale [N]]`, then `ascale [K]` when `fold` is set, then the norm's gain `[K]`
    /// when `norm` is set (x is then the norm's input: vla.cpp's fused RMSNorm), then an
    /// addend (`[N]` bias or the output's shape) when `addend`: per row the activation
    /// quantized exactly as vla.cpp does ([`crate::ops::foldquant`]), an integer product,
    /// the f32 epilogue.
    FqLinear(FqParams),
}

/// An RMSNorm a matmul applies to its input rows as it reads them: `x / rms(x) * (gain +
/// offset)` over the last dim, as [`Op::RmsNorm`] (the norm's own node is then dropped when
/// nothing else reads it). GPUs fold the gain into the weight tile and the `1 / rms` into
/// the output, so the normalised rows are never written.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RowNorm {
    pub eps: f32,
    pub offset: f32,
}

/// The settings of one [`Op::FqLinear`] site.
pub use crate::ops::foldquant::FqParams;
/// The window of [`Op::Im2Col`] and [`Op::MaxPool`].
pub use crate::ops::Window;

impl Op {
    /// Inputs and weights: nodes with no inputs whose data comes from outside the graph.
    pub fn is_leaf(&self) -> bool {
        matches!(self, Op::Input(_) | Op::InputU8(_) | Op::Weight(_))
    }

    /// The inputs this op reads as weights: a product's right operand (both of a gated
    /// product's), a patch kernel, an embedding table, a FoldQuant site's codes. A backend
    /// may read these in the file's dtype (quantized, bf16) where others get an f32 copy;
    /// [`Op::is_float_product`] says which of them `--weight-dtype` re-encodes.
    pub fn weight_inputs(&self) -> &'static [usize] {
        match self {
            Op::MatMul { .. } | Op::PatchEmbed | Op::FqLinear(_) => &[1],
            Op::GatedMatMul { .. } => &[1, 2],
            Op::Embedding => &[0],
            Op::Input(_)
            | Op::InputU8(_)
            | Op::Weight(_)
            | Op::Bmm { .. }
            | Op::Add
            | Op::Mul
            | Op::Scale(_)
            | Op::GeluTanh
            | Op::GeluErf
            | Op::Silu
            | Op::Relu
            | Op::Gated(_)
            | Op::Softmax
            | Op::RmsNorm { .. }
            | Op::AdaRmsNorm { .. }
            | Op::AddGated { .. }
            | Op::LayerNorm { .. }
            | Op::Rope(_)
            | Op::Attention { .. }
            | Op::Im2Col(_)
            | Op::MaxPool(_)
            | Op::Concat { .. }
            | Op::Slice { .. }
            | Op::Permute(_)
            | Op::Reshape(_) => &[],
        }
    }

    /// A product by float weights ([`Op::weight_inputs`]): the ops whose weights
    /// `--weight-dtype` re-encodes and the cpu backend packs for its integer kernel.
    pub fn is_float_product(&self) -> bool {
        matches!(self, Op::MatMul { .. } | Op::GatedMatMul { .. })
    }

    /// How many inputs the op takes, fewest and most (`None`: any number more).
    pub fn arity(&self) -> (usize, Option<usize>) {
        match self {
            Op::Input(_) | Op::InputU8(_) | Op::Weight(_) => (0, Some(0)),
            Op::Scale(_)
            | Op::GeluTanh
            | Op::GeluErf
            | Op::Silu
            | Op::Relu
            | Op::Softmax
            | Op::Permute(_)
            | Op::Reshape(_)
            | Op::Im2Col(_)
            | Op::MaxPool(_)
            | Op::Slice { .. } => (1, Some(1)),
            Op::Add
            | Op::Mul
            | Op::Gated(_)
            | Op::Bmm { .. }
            | Op::RmsNorm { .. }
            | Op::AdaRmsNorm { .. }
            | Op::Rope(_)
            | Op::Embedding => (2, Some(2)),
            Op::AddGated { .. } | Op::LayerNorm { .. } | Op::PatchEmbed => (3, Some(3)),
            // [x, w] + the gain (norm) + the addend
            Op::MatMul { norm } => (2, Some(3 + usize::from(norm.is_some()))),
            Op::GatedMatMul { norm, .. } => {
                let n = 3 + usize::from(norm.is_some());
                (n, Some(n))
            }
            // [q, k, v], more (k, v) parts, then the mask
            Op::Attention { .. } => (3, None),
            Op::Concat { .. } => (1, None),
            // [x, codes, wscale] + ascale + gain + addend
            Op::FqLinear(p) => {
                let n = 3 + [p.fold.is_some(), p.norm.is_some(), p.addend]
                    .into_iter()
                    .filter(|&b| b)
                    .count();
                (n, Some(n))
            }
        }
    }

    /// A short name for logs, pipeline caches and test reports.
    pub fn kind(&self) -> &'static str {
        match self {
            Op::Input(_) => "input",
            Op::InputU8(_) => "input_u8",
            Op::Weight(_) => "weight",
            Op::MatMul { norm: None } => "matmul",
            Op::MatMul { norm: Some(_) } => "norm_matmul",
            Op::Bmm { .. } => "bmm",
            Op::Add => "add",
            Op::AddGated { .. } => "add_gated",
            Op::Mul => "mul",
            Op::Scale(_) => "scale",
            Op::GeluTanh => "gelu_tanh",
            Op::GeluErf => "gelu_erf",
            Op::Silu => "silu",
            Op::Relu => "relu",
            Op::Gated(GateAct::Silu) => "silu_mul",
            Op::Gated(GateAct::GeluTanh) => "gelu_tanh_mul",
            Op::GatedMatMul {
                act: GateAct::Silu, ..
            } => "swiglu_matmul",
            Op::GatedMatMul {
                act: GateAct::GeluTanh,
                ..
            } => "geglu_matmul",
            Op::Softmax => "softmax",
            Op::RmsNorm { .. } => "rms_norm",
            Op::AdaRmsNorm { .. } => "ada_rms_norm",
            Op::LayerNorm { .. } => "layer_norm",
            Op::Rope(_) => "rope",
            Op::Attention { .. } => "attention",
            Op::PatchEmbed => "patch_embed",
            Op::Im2Col(_) => "im2col",
            Op::MaxPool(_) => "max_pool",
            Op::Concat { .. } => "concat",
            Op::Slice { .. } => "slice",
            Op::Permute(_) => "permute",
            Op::Reshape(_) => "reshape",
            Op::Embedding => "embedding",
            Op::FqLinear(_) => "fq_linear",
        }
    }
}

/// The activation of [`Op::Gated`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GateAct {
    Silu,
    GeluTanh,
}

#[derive(Clone, Debug)]
pub struct Node {
    pub op: Op,
    pub inputs: Vec<NodeId>,
    /// Row-major output shape.
    pub shape: Vec<usize>,
    /// F32 for every activation; a weight's stored dtype.
    pub dtype: GgmlType,
}

impl Node {
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// A matmul's (or gated matmul's) RMSNorm gain, the input after its weights.
    pub fn norm_gain(&self) -> Option<NodeId> {
        match self.op {
            Op::MatMul { norm: Some(_) } => Some(self.inputs[2]),
            Op::GatedMatMul { norm: Some(_), .. } => Some(self.inputs[3]),
            _ => None,
        }
    }

    /// A matmul's fused addend, its last input after the weight and the gain.
    pub fn addend(&self) -> Option<NodeId> {
        match self.op {
            Op::MatMul { norm } => self.inputs.get(2 + usize::from(norm.is_some())).copied(),
            _ => None,
        }
    }

    /// An attention node's key / value parts (the `(k, v)` input pairs after `q`); 0 for
    /// any other op.
    pub fn kv_parts(&self) -> usize {
        match self.op {
            Op::Attention { mask, .. } => {
                let masks = usize::from(mask == AttentionMask::Allowed);
                (self.inputs.len() - 1 - masks) / 2
            }
            _ => 0,
        }
    }
}

/// A finished graph: nodes in topological order and the nodes to read back.
#[derive(Clone, Debug)]
pub struct Graph {
    pub(crate) nodes: Vec<Node>,
    pub(crate) outputs: Vec<NodeId>,
    /// Weight nodes whose data the graph carries ([`GraphBuilder::constant`]).
    pub(crate) constants: BTreeMap<String, Tensor<'static>>,
    /// Named stages as (name, first node), in node order ([`GraphBuilder::stage`]).
    pub(crate) stages: Vec<(String, usize)>,
}

impl Graph {
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id.0]
    }

    pub fn outputs(&self) -> &[NodeId] {
        &self.outputs
    }

    /// The graph's named stages: (name, index of its first node), in node order; each runs
    /// to the next one's start (the last to the end). Empty for an unstaged graph.
    pub fn stages(&self) -> &[(String, usize)] {
        &self.stages
    }

    /// Elements of the values that nodes of a stage named `from` compute and nodes of a later
    /// stage named `to` read (names matched by prefix, as [`Self::stages`] gives them): what
    /// one stage hands the next, e.g. the keys and values a prefill leaves for the denoise
    /// steps. Each value counted once.
    pub fn handed_over(&self, from: &str, to: &str) -> u64 {
        let mut stage = vec![""; self.nodes.len()];
        for (k, (name, start)) in self.stages.iter().enumerate() {
            let end = self.stages.get(k + 1).map_or(self.nodes.len(), |s| s.1);
            stage[*start..end].fill(name.as_str());
        }
        let mut handed = vec![false; self.nodes.len()];
        for (i, node) in self.nodes.iter().enumerate() {
            if !stage[i].starts_with(to) {
                continue;
            }
            for input in &node.inputs {
                if stage[input.0].starts_with(from) {
                    handed[input.0] = true;
                }
            }
        }
        (0..self.nodes.len())
            .filter(|&i| handed[i])
            .map(|i| self.nodes[i].shape.iter().product::<usize>() as u64)
            .sum()
    }

    /// Floating-point operations of one run per stage (`""` for an unstaged graph, or for
    /// work before the first stage): matrix products, attention and patch embedding at 2 per
    /// multiply-add; elementwise work is not counted. For GFLOP/s figures.
    pub fn flops_by_stage(&self) -> Vec<(String, u64)> {
        let mut out = vec![(String::new(), 0u64)];
        let mut next = 0;
        for i in 0..self.nodes.len() {
            while next < self.stages.len() && self.stages[next].1 <= i {
                out.push((self.stages[next].0.clone(), 0));
                next += 1;
            }
            if let Some(last) = out.last_mut() {
                last.1 += self.node_flops(i);
            }
        }
        // Nodes before the first stage (inputs, weights) do no work: no "" entry then.
        if out.len() > 1 && out[0].1 == 0 {
            out.remove(0);
        }
        out
    }

    /// Floating-point operations of node `i` (see [`Self::flops_by_stage`]).
    pub fn node_flops(&self, i: usize) -> u64 {
        let node = &self.nodes[i];
        let shape = |k: usize| &self.nodes[node.inputs[k].0].shape;
        let fma = match &node.op {
            // [.., M, N] from [.., M, K]; bmm [B, M, N] from [B, M, K]
            Op::MatMul { .. } | Op::Bmm { .. } | Op::FqLinear(_) => {
                node.numel() * shape(0).last().copied().unwrap_or(0)
            }
            // two products
            Op::GatedMatMul { .. } => 2 * node.numel() * shape(0).last().copied().unwrap_or(0),
            // q [Sq, Hq, D], keys [Sk, Hkv, D] in parts, out [Sq, Hq, Dv]
            Op::Attention { .. } => {
                let dv = node.shape[2];
                let sk: usize = (0..node.kv_parts()).map(|p| shape(1 + 2 * p)[0]).sum();
                node.numel() / dv.max(1) * sk * (shape(0)[2] + dv)
            }
            // [patches, out] from a [out, C, p, p] kernel
            Op::PatchEmbed => {
                let w = shape(1);
                node.numel() * (w.iter().product::<usize>() / w[0].max(1))
            }
            _ => 0,
        };
        2 * fma as u64
    }

    /// Bytes node `i` reads and writes at least once: each input in its stored dtype (a
    /// weight in its blocks, an activation as f32) plus the f32 output; views (reshape) and
    /// leaves move nothing. For GB/s figures.
    pub fn node_bytes(&self, i: usize) -> u64 {
        self.node_bytes_by(i, |_| 4)
    }

    /// [`Self::node_bytes`] with computed values (activations and inputs) taking
    /// `value_bytes(node)` bytes an element (a backend storing activations in 16 bits).
    pub fn node_bytes_by(&self, i: usize, value_bytes: impl Fn(usize) -> u64) -> u64 {
        let node = &self.nodes[i];
        if node.op.is_leaf() || matches!(node.op, Op::Reshape(_)) {
            return 0;
        }
        let stored = |k: usize| {
            let n = &self.nodes[k];
            match n.op {
                Op::Weight(_) => {
                    let ty = n.dtype;
                    (n.numel() / ty.block_size().max(1) * ty.type_size()) as u64
                }
                _ => value_bytes(k) * n.numel() as u64,
            }
        };
        let inputs: u64 = node.inputs.iter().map(|&k| stored(k.0)).sum();
        inputs + value_bytes(i) * node.numel() as u64
    }

    /// Names of the run-time inputs, in node order.
    pub fn input_names(&self) -> impl Iterator<Item = &str> {
        self.nodes.iter().filter_map(|n| match &n.op {
            Op::Input(name) | Op::InputU8(name) => Some(name.as_str()),
            _ => None,
        })
    }

    /// The weights the graph reads from its store, by name, with their declared row-major
    /// shapes (not the constants it carries).
    pub fn weights(&self) -> impl Iterator<Item = (&str, &[usize])> {
        self.nodes.iter().filter_map(|n| match &n.op {
            Op::Weight(name) if !self.constants.contains_key(name) => {
                Some((name.as_str(), n.shape.as_slice()))
            }
            _ => None,
        })
    }

    /// The stored weights that a matmul multiplies by (its right operand; both of a gated
    /// one's).
    pub fn matmul_weights(&self) -> impl Iterator<Item = &str> {
        self.nodes
            .iter()
            .filter(|n| n.op.is_float_product())
            .flat_map(|n| n.op.weight_inputs().iter().map(|&k| n.inputs[k]))
            .filter_map(|w| match &self.nodes[w.0].op {
                Op::Weight(name) if !self.constants.contains_key(name) => Some(name.as_str()),
                _ => None,
            })
    }

    /// The data of weight node `name`: the constant the graph carries, or the store's
    /// tensor. Backends load every weight node through this.
    pub fn weight_data<'w>(&self, store: &'w dyn WeightStore, name: &str) -> Result<Tensor<'w>> {
        match self.constants.get(name) {
            Some(c) => Ok(c.clone()),
            None => store.weight(name),
        }
    }

    /// The data of weight node `name` where it lives, borrowed: the graph's constant or the
    /// store's tensor.
    pub fn weight_view<'s>(&'s self, store: &'s dyn WeightStore, name: &str) -> Result<Tensor<'s>> {
        match self.constants.get(name) {
            Some(c) => Ok(c.view()),
            None => store.weight(name),
        }
    }

    /// For each node, the index of the last node that reads it (outputs live to the end).
    pub fn last_uses(&self) -> Vec<usize> {
        let mut last: Vec<usize> = (0..self.nodes.len()).collect();
        for (i, n) in self.nodes.iter().enumerate() {
            for inp in &n.inputs {
                last[inp.0] = last[inp.0].max(i);
            }
        }
        for o in &self.outputs {
            last[o.0] = usize::MAX;
        }
        last
    }
}

/// Every weight `graphs` read, with its shape, in first-use order (each once); an error
/// names a weight two graphs declare with different shapes.
pub fn declared_weights(graphs: &[Graph]) -> Result<Vec<(String, Vec<usize>)>> {
    let mut seen: BTreeMap<&str, &[usize]> = BTreeMap::new();
    let mut out = Vec::new();
    for (name, shape) in graphs.iter().flat_map(Graph::weights) {
        match seen.insert(name, shape) {
            None => out.push((name.to_owned(), shape.to_vec())),
            Some(prev) if prev != shape => {
                return Err(Error::InvalidArgument(format!(
                    "tensor {name:?} is declared as {prev:?} and as {shape:?}"
                )))
            }
            Some(_) => {}
        }
    }
    Ok(out)
}

/// The weights some matmul of `graphs` multiplies by.
pub fn matmul_weights(graphs: &[Graph]) -> BTreeSet<String> {
    graphs
        .iter()
        .flat_map(Graph::matmul_weights)
        .map(str::to_owned)
        .collect()
}
