//! Lowers a [`Graph`] to a ggml compute graph.
//!
//! Every activation is a contiguous F32 ggml tensor whose `ne` is our row-major shape
//! reversed (`ne[0]` = last dim), padded to 4 dims. Weights read by `mul_mat`, `get_rows`
//! and the patch-embed kernel keep their stored type (the GGUF block bytes are ggml's
//! layout); a weight read by any other op is dequantized to F32 on the host once.

use super::ctx::{CGraph, Ctx, T};
use super::ffi::{Build, Slot};
use crate::gguf::GgmlType;
use crate::graph::{AttentionMask, GateAct, Graph, NodeId, Op};
use crate::ops::foldquant::{unpack_codes, ActRule, FqParams};
use crate::ops::{RopeLayout, RopeMode};
use crate::{Error, Result, Tensor};
use llama_cpp_sys_2 as sys;

/// A masked attention score: finite, so a fully masked row stays finite (it is zeroed
/// afterwards); `x + MASKED == MASKED` in f32 for any score, and `exp(MASKED - max) == 0`.
const MASKED: f32 = -1e30;

// `#define`s of ggml.h that bindgen does not export.
const GGML_DEFAULT_GRAPH_SIZE: usize = 2048;
const GGML_ROPE_TYPE_NEOX: i32 = 2;

pub(crate) fn not_impl(op: impl Into<String>) -> Error {
    Error::NotImplemented {
        op: op.into(),
        backend: "ggml",
    }
}

pub(crate) fn ggml_type(t: GgmlType) -> Option<sys::ggml_type> {
    Some(match t {
        GgmlType::F32 => sys::GGML_TYPE_F32,
        GgmlType::F16 => sys::GGML_TYPE_F16,
        GgmlType::BF16 => sys::GGML_TYPE_BF16,
        GgmlType::Q8_0 => sys::GGML_TYPE_Q8_0,
        GgmlType::Q4_0 => sys::GGML_TYPE_Q4_0,
        GgmlType::Q4_1 => sys::GGML_TYPE_Q4_1,
        GgmlType::Q5_0 => sys::GGML_TYPE_Q5_0,
        GgmlType::Q5_1 => sys::GGML_TYPE_Q5_1,
        _ => return None,
    })
}

/// Our row-major shape as ggml `ne` (reversed, padded with 1s to 4 dims).
fn ne_of(shape: &[usize]) -> Option<[i64; 4]> {
    if shape.len() > 4 {
        return None;
    }
    let mut ne = [1i64; 4];
    for (i, &d) in shape.iter().rev().enumerate() {
        ne[i] = d as i64;
    }
    Some(ne)
}

/// An Input whose f32 values are converted on the host to an I32 tensor each run.
pub(crate) struct Shadow {
    pub input: String,
    pub tensor: Slot,
    /// `Some(vocab)` for embedding ids (checked `< vocab`), `None` for rope positions.
    pub vocab: Option<usize>,
}

/// Data to copy into a tensor once its buffer is allocated (`raw_bytes` of `data`).
pub(crate) struct Upload<'w, 'c> {
    pub tensor: T<'c>,
    pub data: Tensor<'w>,
    /// The store's tensor it comes from (none for graph constants).
    pub name: Option<String>,
}

/// The weight tensors (created in the weight context) and what to upload into them.
pub(crate) struct Weights<'w, 'c> {
    /// Stored-type tensor per weight node read raw.
    pub raw: Vec<Option<T<'c>>>,
    /// F32 tensor per weight node read as an activation (same as `raw` for F32 weights).
    pub f32: Vec<Option<T<'c>>>,
    pub uploads: Vec<Upload<'w, 'c>>,
}

/// Whether a node reads input `k` in the weight's stored type: every weight input
/// ([`Op::weight_inputs`]) but an [`Op::FqLinear`]'s codes, which go in as F16 integers.
fn reads_raw(op: &Op, k: usize) -> bool {
    !matches!(op, Op::FqLinear(_)) && op.weight_inputs().contains(&k)
}

/// Integer sites ggml runs: BitNet's (ternary, or any width) without rotation, `ascale` or
/// fused norm. FoldQuant's other sites load in dequant mode instead.
fn runs_site(p: &FqParams) -> bool {
    p.act == ActRule::BitNet && p.block == 1 && p.fold.is_none() && p.norm.is_none()
}

/// Pass 1: weight tensors in `ctx`, plus the constant masks of causal attention.
pub(crate) fn create_weights<'w, 'c>(
    graph: &Graph,
    store: &'w dyn crate::backend::WeightStore,
    ctx: Ctx<'c>,
) -> Result<Weights<'w, 'c>> {
    let n = graph.nodes().len();
    let (mut want_raw, mut want_f32) = (vec![false; n], vec![false; n]);
    // integer sites' codes, by weight node: their width
    let mut codes = vec![None; n];
    for node in graph.nodes() {
        for (k, inp) in node.inputs.iter().enumerate() {
            if matches!(graph.node(*inp).op, Op::Weight(_)) {
                if let (Op::FqLinear(p), 1) = (&node.op, k) {
                    if !runs_site(p) {
                        return Err(not_impl(
                            "fq_linear (FoldQuant files run dequantized on ggml)",
                        ));
                    }
                    codes[inp.0] = Some(p.weight_bits);
                } else if reads_raw(&node.op, k) {
                    want_raw[inp.0] = true;
                } else {
                    want_f32[inp.0] = true;
                }
            }
        }
    }
    for o in graph.outputs() {
        want_f32[o.0] = true;
    }
    let mut w = Weights {
        raw: vec![None; n],
        f32: vec![None; n],
        uploads: Vec::new(),
    };
    for (i, node) in graph.nodes().iter().enumerate() {
        let Op::Weight(name) = &node.op else { continue };
        if !want_raw[i] && !want_f32[i] && codes[i].is_none() {
            continue;
        }
        if let Some(bits) = codes[i] {
            // the codes as F16 integers [N, K] (exact): ggml's matmul sums them exactly
            let [rows, k] = node.shape[..] else {
                return Err(not_impl(format!(
                    "integer codes {name:?} of rank {}",
                    node.shape.len()
                )));
            };
            let stored = graph.weight_data(store, name)?;
            let codes = unpack_codes(stored.raw_bytes(), bits)?;
            if codes.len() != rows * k {
                return Err(Error::shape(
                    "fq_linear",
                    format!("{name:?}: {} codes for [{rows}, {k}]", codes.len()),
                ));
            }
            let f16: Vec<u8> = (codes.iter())
                .flat_map(|&c| half::f16::from_f32(f32::from(c)).to_le_bytes())
                .collect();
            let tt = ctx.new_tensor_4d(sys::GGML_TYPE_F16, [k as i64, rows as i64, 1, 1]);
            w.raw[i] = Some(tt);
            w.uploads.push(Upload {
                tensor: tt,
                data: Tensor::from_bytes(vec![rows, k], GgmlType::F16, f16)?,
                name: Some(name.clone()),
            });
            continue;
        }
        let t: Tensor<'w> = graph.weight_data(store, name)?;
        let ne = ne_of(t.shape())
            .ok_or_else(|| not_impl(format!("weight {name:?} of rank {}", t.rank())))?;
        if t.numel() == 0 {
            return Err(not_impl(format!("empty weight {name:?}")));
        }
        let ty = ggml_type(t.dtype())
            .ok_or_else(|| not_impl(format!("weight {name:?} of type {}", t.dtype())))?;
        let new = |ty| ctx.new_tensor_4d(ty, ne);
        if t.dtype() == GgmlType::F32 {
            let tt = new(sys::GGML_TYPE_F32);
            w.raw[i] = Some(tt);
            w.f32[i] = Some(tt);
            w.uploads.push(Upload {
                tensor: tt,
                data: t,
                name: Some(name.clone()),
            });
            continue;
        }
        if want_f32[i] {
            let tt = new(sys::GGML_TYPE_F32);
            w.f32[i] = Some(tt);
            w.uploads.push(Upload {
                tensor: tt,
                data: t.to_f32()?,
                name: Some(name.clone()),
            });
        }
        if want_raw[i] {
            let tt = new(ty);
            w.raw[i] = Some(tt);
            w.uploads.push(Upload {
                tensor: tt,
                data: t,
                name: Some(name.clone()),
            });
        }
    }
    Ok(w)
}

/// Pass 2 result besides the graph: where inputs and outputs live.
pub(crate) struct Lowered {
    /// One F32 tensor per Input node name that the graph reads.
    pub inputs: Vec<(String, Slot)>,
    /// One Q8_0 tensor per InputU8 node name ([`q8_bytes`] fills it).
    pub byte_inputs: Vec<(String, Slot)>,
    pub shadows: Vec<Shadow>,
    pub outputs: Vec<Slot>,
}

/// ggml has no unsigned byte type, and ggml-cpu cannot cast its I8: bytes travel as Q8_0
/// blocks of scale 1 holding `v - 128` (34 bytes a 32 values), cast to F32 in the graph and
/// shifted back by 128, exactly. The last block is padded with zeros.
pub(crate) fn q8_bytes(bytes: &[u8]) -> Vec<u8> {
    const ONE_F16: [u8; 2] = 0x3C00u16.to_le_bytes();
    let mut out = Vec::with_capacity(bytes.len().div_ceil(32) * 34);
    for block in bytes.chunks(32) {
        out.extend_from_slice(&ONE_F16);
        out.extend(block.iter().map(|&b| (i16::from(b) - 128) as u8));
        out.resize(out.len() + 32 - block.len(), 0);
    }
    out
}

pub(crate) fn graph_size(graph: &Graph) -> usize {
    (graph.nodes().len() * 16 + 64).max(GGML_DEFAULT_GRAPH_SIZE)
}

struct Lowerer<'a, 'c> {
    ctx: Ctx<'c>,
    /// Context for host-filled constants (causal masks): allocated with the weights.
    consts: Ctx<'c>,
    /// Keeps the inputs and outputs.
    build: &'a mut Build<'c>,
    const_uploads: Vec<Upload<'static, 'c>>,
    graph: &'a Graph,
    weights: &'a Weights<'a, 'c>,
    vals: Vec<Option<T<'c>>>,
    inputs: Vec<(String, Slot)>,
    byte_inputs: Vec<(String, Slot)>,
    /// With the I32 tensor each one fills.
    shadows: Vec<(Shadow, T<'c>)>,
    /// RMSNorms that matmuls read, by (input, gain) node: one ggml node for q, k and v.
    norms: std::collections::HashMap<(usize, usize), T<'c>>,
}

/// Pass 2: builds the compute graph in `ctx`, keeping its inputs and outputs in `build`.
/// Constants go into `consts` (returned as uploads: allocate `consts` before the graph runs).
pub(crate) fn lower<'a, 'c>(
    graph: &'a Graph,
    weights: &'a Weights<'a, 'c>,
    build: &'a mut Build<'c>,
    ctx: Ctx<'c>,
    consts: Ctx<'c>,
) -> Result<(Lowered, CGraph<'c>, Vec<Upload<'static, 'c>>)> {
    for (i, node) in graph.nodes().iter().enumerate() {
        if node.shape.len() > 4 {
            return Err(not_impl(format!(
                "{} of rank {} (ggml has 4 dims)",
                node.op.kind(),
                node.shape.len()
            )));
        }
        if node.numel() == 0 {
            return Err(not_impl(format!(
                "{} with an empty shape {:?} (node {i})",
                node.op.kind(),
                node.shape
            )));
        }
    }
    let mut l = Lowerer {
        ctx,
        consts,
        build,
        const_uploads: Vec::new(),
        graph,
        weights,
        vals: vec![None; graph.nodes().len()],
        inputs: Vec::new(),
        byte_inputs: Vec::new(),
        shadows: Vec::new(),
        norms: Default::default(),
    };
    for i in 0..graph.nodes().len() {
        let v = l.node(i)?;
        l.vals[i] = v;
    }
    let gf = l.ctx.new_graph_custom(graph_size(graph));
    let mut outputs = Vec::new();
    for o in graph.outputs() {
        let mut t = l.val(*o);
        if t.is_view() || t.op() == sys::GGML_OP_NONE {
            t = l.ctx.cont(t);
        }
        t.set_output();
        gf.build_forward_expand(t);
        outputs.push(l.build.keep(t));
    }
    let lowered = Lowered {
        inputs: l.inputs,
        byte_inputs: l.byte_inputs,
        shadows: l.shadows.into_iter().map(|(s, _)| s).collect(),
        outputs,
    };
    Ok((lowered, gf, l.const_uploads))
}

impl<'c> Lowerer<'_, 'c> {
    /// The F32 value of a node.
    fn val(&self, id: NodeId) -> T<'c> {
        match self.vals[id.0] {
            Some(t) => t,
            None => self.weights.f32[id.0].expect("every weight read as f32 has an f32 tensor"),
        }
    }

    /// The stored-type tensor of a weight node, or the F32 value of a computed one.
    fn raw(&self, id: NodeId) -> T<'c> {
        self.weights.raw[id.0].unwrap_or_else(|| self.val(id))
    }

    fn shape(&self, id: NodeId) -> &[usize] {
        &self.graph.node(id).shape
    }

    fn ne(&self, id: NodeId) -> [i64; 4] {
        ne_of(self.shape(id)).expect("ranks checked")
    }

    fn reshape(&self, t: T<'c>, shape: &[usize]) -> T<'c> {
        self.ctx.reshape_4d(t, ne_of(shape).expect("ranks checked"))
    }

    /// Matmul node `i`'s input as the `[K, rows]` matrix its weight (`[N, K]`) multiplies,
    /// with its row count; normalised first when the matmul reads an RMSNorm (one ggml node
    /// per input and gain, shared by the matmuls reading it).
    fn matmul_rows(&mut self, i: usize) -> (T<'c>, i64) {
        let node = &self.graph.nodes()[i];
        let (x, k) = (node.inputs[0], self.shape(node.inputs[1])[1]);
        let rows = (self.graph.node(x).numel() / k) as i64;
        let mut t = self.val(x);
        if let (Some(g), Op::MatMul { norm: Some(n) } | Op::GatedMatMul { norm: Some(n), .. }) =
            (node.norm_gain(), &node.op)
        {
            let (ctx, gain) = (self.ctx, self.val(g));
            t = *self
                .norms
                .entry((x.0, g.0))
                .or_insert_with(|| rms_norm(ctx, t, gain, n.eps, n.offset));
        }
        let t = self.ctx.reshape_2d(t, k as i64, rows);
        (t, rows)
    }

    /// A channels-last map `[H, W, C]` (ggml `[C, W, H]`) as planes, ggml `[W, H, C]`: the
    /// layout of ggml's im2col and pooling.
    fn planes(&self, id: NodeId) -> T<'c> {
        self.ctx.cont(self.ctx.permute(self.val(id), [2, 0, 1, 3]))
    }

    fn new_f32(&self, ne: [i64; 4]) -> T<'c> {
        self.ctx.new_tensor_4d(sys::GGML_TYPE_F32, ne)
    }

    /// A host-filled F32 constant with `ne`.
    fn constant(&mut self, ne: [i64; 4], data: Vec<f32>) -> T<'c> {
        let t = self.consts.new_tensor_4d(sys::GGML_TYPE_F32, ne);
        let shape: Vec<usize> = ne.iter().rev().map(|&d| d as usize).collect();
        let data = Tensor::from_f32(shape, data).expect("constant sized by its ne");
        self.const_uploads.push(Upload {
            tensor: t,
            data,
            name: None,
        });
        t
    }

    /// An I32 copy of an f32 input node (host-converted each run), or an in-graph cast.
    fn i32_of(&mut self, id: NodeId, vocab: Option<usize>, what: &str) -> Result<T<'c>> {
        if let Op::Input(name) = &self.graph.node(id).op {
            if let Some((_, t)) = self
                .shadows
                .iter()
                .find(|(s, _)| &s.input == name && s.vocab == vocab)
            {
                return Ok(*t);
            }
            let n = self.graph.node(id).numel() as i64;
            let t = self.ctx.new_tensor_1d(sys::GGML_TYPE_I32, n);
            t.set_input();
            let shadow = Shadow {
                input: name.clone(),
                tensor: self.build.keep(t),
                vocab,
            };
            self.shadows.push((shadow, t));
            return Ok(t);
        }
        if vocab.is_some() {
            // get_rows asserts (aborts) on an out-of-range id: only host-checked ids.
            return Err(not_impl(format!(
                "{what} from a computed node (ids must be a graph input)"
            )));
        }
        // F32 -> I32 copy (truncating), supported by ggml-cpu.
        Ok(self.ctx.cast(self.val(id), sys::GGML_TYPE_I32))
    }

    /// `a op b` with numpy broadcasting (ggml broadcasts only b into a).
    fn binary(&self, i: usize, add: bool) -> T<'c> {
        let node = &self.graph.nodes()[i];
        let out = ne_of(&node.shape).expect("ranks checked");
        let (mut a, mut b) = (self.val(node.inputs[0]), self.val(node.inputs[1]));
        let (na, nb) = (self.ne(node.inputs[0]), self.ne(node.inputs[1]));
        if na != out {
            if nb == out {
                // add and mul are commutative in IEEE arithmetic: swapping is exact.
                std::mem::swap(&mut a, &mut b);
            } else {
                a = self.ctx.repeat_4d(a, out);
            }
        }
        if add {
            self.ctx.add(a, b)
        } else {
            self.ctx.mul(a, b)
        }
    }

    fn node(&mut self, i: usize) -> Result<Option<T<'c>>> {
        let node = &self.graph.nodes()[i];
        let ctx = self.ctx;
        let inp = node.inputs.clone();
        let shape = node.shape.clone();
        // Every shape constraint ggml asserts is checked above or by the builder.
        let t = match &node.op {
            Op::Weight(_) => return Ok(None),
            Op::Input(name) => {
                let t = self.new_f32(ne_of(&shape).expect("ranks checked"));
                t.set_input();
                self.inputs.push((name.clone(), self.build.keep(t)));
                t
            }
            Op::InputU8(name) => {
                let n = node.numel() as i64;
                let q = ctx.new_tensor_1d(sys::GGML_TYPE_Q8_0, (n + 31) / 32 * 32);
                q.set_input();
                self.byte_inputs.push((name.clone(), self.build.keep(q)));
                let x = ctx.cast(q, sys::GGML_TYPE_F32);
                let x = ctx.scale_bias(x, 1.0, 128.0);
                let x = ctx.view_1d(x, n, 0);
                self.reshape(x, &shape)
            }
            Op::MatMul { .. } => {
                let (x, rows) = self.matmul_rows(i);
                let mut y = ctx.mul_mat(self.raw(inp[1]), x);
                if let Some(c) = self.graph.node(NodeId(i)).addend() {
                    // [N] broadcasts over the rows; a full addend as [N, rows]
                    let n = shape[shape.len() - 1] as i64;
                    let c = match self.shape(c).len() {
                        1 => self.val(c),
                        _ => ctx.reshape_2d(self.val(c), n, rows),
                    };
                    y = ctx.add(y, c);
                }
                self.reshape(y, &shape)
            }
            Op::Bmm { trans_b } => {
                let b = self.val(inp[1]);
                let b = if *trans_b {
                    b
                } else {
                    ctx.cont(ctx.transpose(b))
                };
                ctx.mul_mat(b, self.val(inp[0]))
            }
            Op::Add => self.binary(i, true),
            Op::Mul => self.binary(i, false),
            Op::Scale(s) => ctx.scale(self.val(inp[0]), *s),
            Op::GeluTanh => gelu_tanh(ctx, self.val(inp[0])),
            Op::GeluErf => ctx.gelu_erf(self.val(inp[0])),
            Op::Silu => ctx.silu(self.val(inp[0])),
            Op::Gated(act) => gated(ctx, *act, self.val(inp[0]), self.val(inp[1])),
            Op::GatedMatMul { act, .. } => {
                let (x, _) = self.matmul_rows(i);
                let gate = ctx.mul_mat(self.raw(inp[1]), x);
                let up = ctx.mul_mat(self.raw(inp[2]), x);
                self.reshape(gated(ctx, *act, gate, up), &shape)
            }
            Op::Relu => ctx.relu(self.val(inp[0])),
            Op::Softmax => ctx.soft_max(self.val(inp[0])),
            Op::RmsNorm { eps, offset } => {
                rms_norm(ctx, self.val(inp[0]), self.val(inp[1]), *eps, *offset)
            }
            Op::AdaRmsNorm { eps } => {
                // scale and shift as views of the modulation vector
                let (m, w) = (self.val(inp[1]), shape[shape.len() - 1]);
                let part = |k: usize| ctx.view_1d(m, w as i64, k * w * 4);
                let y = rms_norm(ctx, self.val(inp[0]), part(0), *eps, 1.0);
                ctx.add(y, part(1))
            }
            Op::AddGated { part } => {
                // the gate as a view of the modulation vector
                let w = shape[shape.len() - 1];
                let gate = ctx.view_1d(self.val(inp[2]), w as i64, part * w * 4);
                let y = ctx.mul(self.val(inp[1]), gate);
                ctx.add(self.val(inp[0]), y)
            }
            Op::LayerNorm { eps } => {
                let n = ctx.norm(self.val(inp[0]), *eps);
                let n = ctx.mul(n, self.val(inp[1]));
                ctx.add(n, self.val(inp[2]))
            }
            Op::Rope(cfg) => {
                let pos = self.i32_of(inp[1], None, "rope positions")?;
                let d = shape[2];
                let n_rot = cfg.n_rot.unwrap_or(d) as i32;
                let mode = match cfg.mode {
                    RopeMode::Normal => 0,
                    RopeMode::Neox => GGML_ROPE_TYPE_NEOX,
                };
                // ggml wants [D, heads, seq] (ne[2] = positions).
                let mut x = self.val(inp[0]);
                if cfg.layout == RopeLayout::HeadSeqDim {
                    x = ctx.cont(ctx.permute(x, [0, 2, 1, 3]));
                }
                let y = ctx.rope_ext(
                    x,
                    pos,
                    None,
                    n_rot,
                    mode,
                    0,
                    cfg.theta,
                    cfg.freq_scale,
                    0.0,
                    1.0,
                    32.0,
                    1.0,
                );
                if cfg.layout == RopeLayout::HeadSeqDim {
                    ctx.cont(ctx.permute(y, [0, 2, 1, 3]))
                } else {
                    y
                }
            }
            Op::Attention { mask, scale } => self.attention(i, *mask, *scale),
            Op::PatchEmbed => {
                let (img, w, b) = (self.val(inp[0]), self.raw(inp[1]), self.val(inp[2]));
                let ws = self.shape(inp[1]).to_vec(); // [O, C, P, Q]
                let cols = (ws[1] * ws[2] * ws[3]) as i64;
                let im = ctx.im2col(
                    w,
                    img,
                    ws[3] as i32,
                    ws[2] as i32,
                    0,
                    0,
                    1,
                    1,
                    true,
                    sys::GGML_TYPE_F32,
                );
                let patches = shape[0] as i64;
                let im = ctx.reshape_2d(im, cols, patches);
                let w2 = ctx.reshape_2d(w, cols, ws[0] as i64);
                ctx.add(ctx.mul_mat(w2, im), b)
            }
            Op::Im2Col(win) => {
                // ggml's im2col over the planes, its rows in (c, ky, kx) order as ours; the
                // kernel operand only gives the sizes
                let (x, [k, s, p, d]) = (self.planes(inp[0]), xy(win));
                let c = self.shape(inp[0])[2] as i64;
                let k = self.new_f32([k[0] as i64, k[1] as i64, c, 1]);
                let y = ctx.im2col(
                    k,
                    x,
                    s[0],
                    s[1],
                    p[0],
                    p[1],
                    d[0],
                    d[1],
                    true,
                    sys::GGML_TYPE_F32,
                );
                self.reshape(y, &shape)
            }
            Op::MaxPool(win) => {
                let (x, [k, s, p, _]) = (self.planes(inp[0]), xy(win));
                let y = ctx.pool_2d_max(x, k[0], k[1], s[0], s[1], p[0], p[1]);
                // [OW, OH, C] back to channels last
                ctx.cont(ctx.permute(y, [1, 2, 0, 3]))
            }
            Op::Concat { axis } => {
                let dim = (shape.len() - 1 - axis) as i32;
                let mut acc = self.val(inp[0]);
                for id in &inp[1..] {
                    acc = ctx.concat(acc, self.val(*id), dim);
                }
                if inp.len() == 1 {
                    acc = ctx.cont(acc);
                }
                acc
            }
            Op::Slice {
                axis,
                start,
                len: _,
            } => {
                let x = self.val(inp[0]);
                let g = shape.len() - 1 - axis;
                let ne = ne_of(&shape).expect("ranks checked");
                let nb = x.nb();
                let v = ctx.view_4d(x, ne, [nb[1], nb[2], nb[3]], start * nb[g]);
                ctx.cont(v)
            }
            Op::Permute(perm) => {
                let r = perm.len();
                // result dim i <- source dim perm[i]; ggml: ax[s] = where source dim s goes.
                let mut ax = [0i32, 1, 2, 3];
                for (i, &p) in perm.iter().enumerate() {
                    ax[r - 1 - p] = (r - 1 - i) as i32;
                }
                ctx.cont(ctx.permute(self.val(inp[0]), ax))
            }
            Op::Reshape(s) => self.reshape(self.val(inp[0]), s),
            Op::FqLinear(p) => self.int_site(i, p)?,
            Op::Embedding => {
                let vocab = self.shape(inp[0])[0];
                // ids from a graph input only, range-checked on the host each run.
                let ids = self.i32_of(inp[1], Some(vocab), "embedding ids")?;
                ctx.get_rows(self.raw(inp[0]), ids)
            }
        };
        Ok(Some(t))
    }

    /// A BitNet site ([`runs_site`]) as ggml ops, the cpu's arithmetic step for step: the
    /// row's `a = max(amax, 1e-5)` (a max pool over the row), codes `round_even(clamp(x *
    /// (127 / a), -128, 127))` (ties to even by adding and taking off 1.5 * 2^23), their
    /// product with the F16 integer codes (exact: integers, sums below 2^24), then
    /// `((acc * (a / 127)) * wscale) + bias`, or `+ 0` and the residual.
    fn int_site(&mut self, i: usize, p: &FqParams) -> Result<T<'c>> {
        let node = &self.graph.nodes()[i];
        let (inp, shape) = (node.inputs.clone(), node.shape.clone());
        let k = self.shape(inp[1])[1];
        let n = shape[shape.len() - 1] as i64;
        let rows = (self.graph.node(inp[0]).numel() / k) as i64;
        let ctx = self.ctx;
        let x = ctx.reshape_2d(self.val(inp[0]), k as i64, rows);
        let amax = ctx.pool_2d_max(ctx.abs(x), k as i32, 1, k as i32, 1, 0, 0);
        let a = ctx.clamp(amax, 1e-5, f32::MAX);
        let c127 = self.constant([1, rows, 1, 1], vec![127.0; rows as usize]);
        let s = ctx.div(c127, a);
        const EVEN: f32 = 12_582_912.0; // 1.5 * 2^23
        let q = ctx.clamp(ctx.mul(x, s), -128.0, 127.0);
        let q = ctx.scale_bias(ctx.scale_bias(q, 1.0, EVEN), 1.0, -EVEN);
        let acc = ctx.mul_mat(self.raw(inp[1]), q);
        let y = ctx.mul(ctx.mul(acc, ctx.div(a, c127)), self.val(inp[2]));
        let y = match p.addend.then(|| inp[inp.len() - 1]) {
            Some(c) if self.shape(c).len() == 1 => ctx.add(y, self.val(c)),
            Some(c) => ctx.add(y, ctx.reshape_2d(self.val(c), n, rows)),
            None => y,
        };
        Ok(self.reshape(y, &shape))
    }

    fn attention(&mut self, i: usize, mask: AttentionMask, scale: f32) -> T<'c> {
        let node = &self.graph.nodes()[i];
        let inp = node.inputs.clone();
        let parts = node.kv_parts();
        let sq = self.shape(inp[0])[0];
        let sk: usize = (0..parts).map(|p| self.shape(inp[1 + 2 * p])[0]).sum();
        let ctx = self.ctx;
        // keys and values in two parts joined along S (ggml's dim 2)
        let joined = |first: usize| {
            let mut t = self.val(inp[first]);
            for p in 1..parts {
                t = ctx.concat(t, self.val(inp[first + 2 * p]), 2);
            }
            t
        };
        // The op's [S, H, D] (ggml ne [D, H, S]) viewed as ne [D, S, H]: no copy.
        let heads = |t: T<'c>| ctx.permute(t, [0, 2, 1, 3]);
        let (q, k, v) = (heads(self.val(inp[0])), heads(joined(1)), heads(joined(2)));
        // [Sk, Sq, Hq]; query head h reads kv head h / (Hq / Hkv) (ggml's ne2 broadcast).
        let kq = ctx.mul_mat(k, q);
        let (add_mask, row_ok): (Option<T<'c>>, Option<T<'c>>) = match mask {
            AttentionMask::None => (None, None),
            AttentionMask::Causal => {
                let off = sk as i64 - sq as i64;
                let mut m = vec![0.0f32; sq * sk];
                let mut rows = vec![1.0f32; sq];
                for r in 0..sq {
                    let end = (r as i64 + off + 1).clamp(0, sk as i64) as usize;
                    m[r * sk + end..(r + 1) * sk].fill(MASKED);
                    if end == 0 {
                        rows[r] = 0.0;
                    }
                }
                let mt = self.constant([sk as i64, sq as i64, 1, 1], m);
                let ok = if rows.contains(&0.0) {
                    Some(self.constant([1, sq as i64, 1, 1], rows))
                } else {
                    None
                };
                (Some(mt), ok)
            }
            AttentionMask::Allowed => {
                // allowed != 0 -> 0, else MASKED; rows with no allowed key -> output 0.
                let m = self.val(inp[inp.len() - 1]);
                let allowed = ctx.step(ctx.abs(m));
                let m = ctx.scale_bias(allowed, -MASKED, MASKED);
                let ok = ctx.step(ctx.sum_rows(allowed));
                (Some(m), Some(ok))
            }
        };
        let p = ctx.soft_max_ext(kq, add_mask, scale, 0.0);
        let vt = ctx.cont(ctx.transpose(v)); // [Sk, Dv, Hkv]
        let o = ctx.mul_mat(vt, p); // [Dv, Sq, Hq]
        let o = match row_ok {
            Some(ok) => ctx.mul(o, ok),
            None => o,
        };
        ctx.cont(heads(o)) // [Dv, Hq, Sq]: the op's [Sq, Hq, Dv]
    }
}

/// `x / rms(x) * (w + offset)` over the last dim.
fn rms_norm<'c>(ctx: Ctx<'c>, x: T<'c>, w: T<'c>, eps: f32, offset: f32) -> T<'c> {
    let n = ctx.rms_norm(x, eps);
    let w = match offset {
        0.0 => w,
        _ => ctx.scale_bias(w, 1.0, offset),
    };
    ctx.mul(n, w)
}

/// `act(gate) * up`.
fn gated<'c>(ctx: Ctx<'c>, act: GateAct, gate: T<'c>, up: T<'c>) -> T<'c> {
    let a = match act {
        GateAct::Silu => ctx.silu(gate),
        GateAct::GeluTanh => gelu_tanh(ctx, gate),
    };
    ctx.mul(a, up)
}

/// `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))` from f32 ops: ggml_gelu reads a
/// table indexed by the f16-rounded input, which is ~1e-3 off.
fn gelu_tanh<'c>(ctx: Ctx<'c>, x: T<'c>) -> T<'c> {
    const C: f32 = std::f32::consts::FRAC_2_SQRT_PI * std::f32::consts::FRAC_1_SQRT_2;
    let x3 = ctx.mul(ctx.sqr(x), x);
    let inner = ctx.add(x, ctx.scale(x3, 0.044715));
    let t = ctx.tanh(ctx.scale(inner, C));
    let half = ctx.scale(x, 0.5);
    ctx.mul(half, ctx.scale_bias(t, 1.0, 1.0))
}

/// A window's kernel, stride, padding and dilation as ggml takes them: `[x, y]` (columns
/// first) each.
fn xy(win: &crate::graph::Window) -> [[i32; 2]; 4] {
    let xy = |(rows, cols): (usize, usize)| [cols as i32, rows as i32];
    [
        xy(win.kernel),
        xy(win.stride),
        xy(win.padding),
        xy(win.dilation),
    ]
}
