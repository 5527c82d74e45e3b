//! `x @ w^T` with f32 / f16 / bf16 activations and F32 / F16 / BF16 or Q8_0 / Q4_0 / Q4_1 /
//! Q5_0 / Q5_1 weights. A weight split into row chunks gets one dispatch per chunk, each writing its
//! columns.
//!
//! - float weights, M > 16: the tiled GEMM (`gemm.rs`, `shaders/gemm_tiled.wgsl`:
//!   workgroup-memory tiles) with the GPU kernel set, `shaders/matmul.wgsl` (register-blocked
//!   4x4 per invocation, no workgroup memory) with the portable one ([`KernelSet`]);
//! - quantized weights: `shaders/matmul_quant.wgsl`, never dequantizing the weight: a
//!   pre-pass quantizes x per 32-block to int8 (Q8_1-style, scale and scaled sum) into
//!   scratch buffers made here (the bind groups keep them alive), then integer block dot
//!   products (`dot4I8Packed` when `caps.int_dot`): `matmul_q` (4x4 registers) with the
//!   portable kernel set, `gemm_q` (the same arithmetic on workgroup-memory tiles, weight
//!   blocks decoded once per workgroup) with the GPU one;
//! - M <= 16, any weight type: the `matvec` entry of `matmul_quant.wgsl`, one workgroup
//!   per weight row splitting K, reduced with subgroups when `caps.subgroups`; with float
//!   weights it reads a norm and runs a gated pair itself ([`FloatMatvec`]).

use super::gemm::Gemm;
use super::norm::rms_norm_into;
use super::{
    dispatch, grid_1d, u32_of, Addend, Bind, Chunk, Dispatch, MatmulFusion, NodeBuffers, OutParts,
    ScratchPool, TensorBuf,
};
use crate::backend::wgpu::shader::Variant;
use crate::backend::wgpu::{GpuContext, KernelSet};
use crate::gguf::GgmlType;
use crate::graph::{GateAct, Node, Op, RowNorm};
use crate::{Error, Result};

const SOURCE: &str = concat!(
    include_str!("../../../../shaders/weight_decode.wgsl"),
    include_str!("../../../../shaders/product_out.wgsl"),
    include_str!("../../../../shaders/matmul.wgsl")
);
const QUANT_SOURCE: &str = concat!(
    include_str!("../../../../shaders/weight_decode.wgsl"),
    include_str!("../../../../shaders/activation.wgsl"),
    include_str!("../../../../shaders/int_dot.wgsl"),
    include_str!("../../../../shaders/product_out.wgsl"),
    include_str!("../../../../shaders/matmul_quant.wgsl")
);
/// Output tile per workgroup: 8x8 threads, 4x4 outputs each.
const TILE: usize = 32;
/// Rows of x up to which the matvec kernel is used (its `MAX_M`).
pub(super) const MATVEC_MAX_M: usize = 16;
/// Invocations per `quantize_x` workgroup.
const QUANTIZE_WG: usize = 64;

/// The template define(s) for a weight dtype: (type define, is quantized).
pub(super) fn weight_define(dtype: GgmlType, what: &str) -> Result<(&'static str, bool)> {
    Ok(match dtype {
        GgmlType::F32 => ("W_F32", false),
        GgmlType::F16 => ("W_F16", false),
        GgmlType::BF16 => ("W_BF16", false),
        GgmlType::Q8_0 => ("Q8_0", true),
        GgmlType::Q4_0 => ("Q4_0", true),
        GgmlType::Q4_1 => ("Q4_1", true),
        GgmlType::Q5_0 => ("Q5_0", true),
        GgmlType::Q5_1 => ("Q5_1", true),
        t => {
            return Err(Error::NotImplemented {
                op: format!("{what} with {t} weights"),
                backend: "wgpu",
            })
        }
    })
}

/// The matmul kernels' params for one weight chunk of an `[m, n, k]` product: `m, n, k,
/// n_off, rows, n0, n01, gate_off`, then `matmul_quant.wgsl`'s `eps, offset` (zero; the
/// float matvec sets them): every word of the largest `Params`, which the uniform must cover.
fn chunk_params(
    [m, n, k]: [usize; 3],
    c: &Chunk,
    parts: OutParts,
    addend: Option<Addend>,
) -> Result<[u32; 10]> {
    let [n0, n01] = parts.words(n)?;
    Ok([
        u32_of(m, "M")?,
        u32_of(n, "N")?,
        u32_of(k, "K")?,
        u32_of(c.row_start, "row offset")?,
        u32_of(c.rows, "rows")?,
        n0,
        n01,
        Addend::gate_off(addend)?,
        0,
        0,
    ])
}

/// `buffers` plus the output (and its parts) and the fused addend, if any.
fn with_outputs<'b>(
    mut buffers: Vec<(u32, Bind<'b>)>,
    (output, parts): (Bind<'b>, OutParts<'b>),
    addend: Option<Addend<'b>>,
) -> Vec<(u32, Bind<'b>)> {
    buffers.push((3, output));
    buffers.extend(parts.bindings());
    buffers.extend(Addend::bindings(addend));
    buffers
}

fn scratch(ctx: &GpuContext, label: &str, size: u64) -> wgpu::Buffer {
    ctx.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some(label),
        size: size.max(4).next_multiple_of(4),
        usage: wgpu::BufferUsages::STORAGE,
        mapped_at_creation: false,
    })
}

/// [`Op::MatMul`], with what the executable fuses into it: sibling products (the node
/// their first: its weight and bias inputs are theirs concatenated, the columns after its
/// own go to `parts`) or a gated residual (the node has no addend; `bufs.output` is the
/// residual's).
pub(super) fn matmul(
    ctx: &GpuContext,
    node: &Node,
    bufs: &NodeBuffers,
    fusion: MatmulFusion,
) -> Result<Vec<Dispatch>> {
    let Op::MatMul { norm } = node.op else {
        unreachable!("routed by encode")
    };
    let norm = norm.map(|n| NormRead::of(n, node, bufs));
    let (x, w) = (&bufs.inputs[0], &bufs.inputs[1]);
    let n = w.shape()[0];
    let addend = match (node.addend(), fusion.gated_residual) {
        (None, Some((c, gate, off))) => Some(Addend {
            c,
            full: true,
            gate: Some((gate, off)),
        }),
        (Some(_), None) => {
            let c = &bufs.inputs[bufs.inputs.len() - 1];
            Some(Addend {
                c: c.act(),
                full: c.shape() != [n],
                gate: None,
            })
        }
        (None, None) => None,
        (Some(_), Some(_)) => unreachable!("fuse/ gates only products without an addend"),
    };
    let output = (bufs.output, fusion.parts);
    matmul_into(ctx, x, w, norm, addend, bufs.scratch, output)
}

/// A weight's row chunks, dtype and the product's `[m, n, k]` with `x` (`[.., k]`).
fn product<'a>(x: &TensorBuf, w: &'a TensorBuf) -> (&'a [Chunk], GgmlType, [usize; 3]) {
    let TensorBuf::Raw {
        chunks,
        shape: ws,
        dtype,
    } = w
    else {
        unreachable!("matmul weights are raw")
    };
    let (n, k) = (ws[0], ws[1]);
    (
        chunks,
        *dtype,
        [x.shape().iter().product::<usize>() / k.max(1), n, k],
    )
}

/// Whether a product runs on the GPU kernel set's tiled GEMM (`gemm.rs`), where a norm, a
/// gate and an addend fuse: float weights, more than [`MATVEC_MAX_M`] rows.
fn on_tiled_gemm(ctx: &GpuContext, quant: bool, m: usize) -> bool {
    !quant && m > MATVEC_MAX_M && ctx.kernels() == KernelSet::Gpu
}

/// A matmul's RMSNorm read: its settings, the gain, and the (input, gain) node pair.
#[derive(Clone, Copy)]
struct NormRead<'a> {
    norm: RowNorm,
    gain: Bind<'a>,
    key: (usize, usize),
}

impl<'a> NormRead<'a> {
    fn of(norm: RowNorm, node: &Node, bufs: &NodeBuffers<'a>) -> Self {
        let gain = node.norm_gain().expect("a norm has a gain");
        let at = node
            .inputs
            .iter()
            .position(|&i| i == gain)
            .expect("an input");
        NormRead {
            norm,
            gain: bufs.inputs[at].act(),
            key: (node.inputs[0].index(), gain.index()),
        }
    }

    /// The tiled GEMM's form: settings and gain.
    fn fused(self) -> (RowNorm, Bind<'a>) {
        (self.norm, self.gain)
    }

    /// The `m` x `k` rows of `x` normalised into scratch ([`ScratchPool::normed_rows`], f32
    /// whatever the activation dtype): the norm kernel's dispatch unless an earlier node's
    /// wrote these rows, and the buffer.
    fn rows(
        self,
        ctx: &GpuContext,
        pool: &ScratchPool,
        x: Bind,
        (m, k): (usize, usize),
    ) -> Result<(Option<Dispatch>, wgpu::Buffer)> {
        let (buf, write) = pool.normed_rows(ctx, self.key, 4 * (m * k) as u64);
        let d = match write {
            true => {
                let out = Bind::f32(&buf);
                Some(rms_norm_into(ctx, [x, self.gain, out], m, k, self.norm)?)
            }
            false => None,
        };
        Ok((d, buf))
    }
}

/// `x @ w^T (+ addend)` into `output` (and its [`OutParts`]), x's rows RMS-normalised
/// first with `norm`: by the tiled GEMM or the float matvec as they read them, otherwise
/// into scratch by the norm kernel ([`NormRead::rows`]).
fn matmul_into(
    ctx: &GpuContext,
    x: &TensorBuf,
    w: &TensorBuf,
    norm: Option<NormRead>,
    addend: Option<Addend>,
    pool: &ScratchPool,
    (output, parts): (Bind, OutParts),
) -> Result<Vec<Dispatch>> {
    let (chunks, dtype, [m, n, k]) = product(x, w);
    let (define, quant) = weight_define(dtype, "matmul")?;
    if m == 0 || n == 0 {
        return Ok(vec![]);
    }
    let matvec = m <= MATVEC_MAX_M;
    let gemm = on_tiled_gemm(ctx, quant, m);
    if matvec && !quant {
        let mv = FloatMatvec {
            dims: [m, n, k],
            x: x.act(),
            chunks,
            define,
            norm,
            addend,
        };
        return mv.dispatches(ctx, None, (output, parts));
    }
    let mut out = Vec::new();
    let normed;
    let (x, norm) = match norm {
        Some(r) if !gemm => {
            let d;
            (d, normed) = r.rows(ctx, pool, x.act(), (m, k))?;
            out.extend(d);
            (Bind::f32(&normed), None)
        }
        norm => (x.act(), norm.map(NormRead::fused)),
    };
    let add_c = |v: Variant| Addend::define(addend, parts.define(v));
    let params = |c: &Chunk| chunk_params([m, n, k], c, parts, addend);
    if gemm {
        let dims = [m, n, k];
        return chunks
            .iter()
            .map(|c| {
                Gemm {
                    addend,
                    norm,
                    scratch: Some(pool),
                    parts,
                    ..Gemm::weight_chunk(dims, c, define, x, output)
                }
                .dispatch(ctx)
            })
            .collect::<Result<Vec<_>>>()
            .map(|d| d.into_iter().flatten().collect());
    }
    if !quant && !matvec {
        let v = add_c(Variant::new("matmul", SOURCE, "matmul").define(define, true));
        for c in chunks.iter() {
            let grid = [c.rows.div_ceil(TILE) as u32, m.div_ceil(TILE) as u32, 1];
            let b = vec![(1, x), (2, Bind::f32(&c.buffer))];
            let buffers = with_outputs(b, (output, parts), addend);
            out.push(dispatch(ctx, &v, &params(c)?, &buffers, grid)?);
        }
        return Ok(out);
    }
    let variant = |entry| {
        Variant::new("matmul_quant", QUANT_SOURCE, entry)
            .define(define, true)
            .define("QUANT", quant)
            .define("INT_DOT", quant && ctx.caps.int_dot)
            .define("SUBGROUPS", entry == "matvec" && ctx.caps.subgroups)
    };
    let (xq, xds);
    let mut act: Vec<(u32, Bind)> = vec![(1, x)];
    if quant {
        if k % 32 != 0 {
            return Err(Error::Gpu(format!(
                "matmul: {dtype} weight rows of {k} are not whole blocks"
            )));
        }
        let blocks = m * k / 32;
        xq = scratch(ctx, "matmul xq", 32 * blocks as u64);
        xds = scratch(ctx, "matmul xds", 8 * blocks as u64);
        // (the whole Params struct: the uniform must cover it)
        let mut qp = [0; 10];
        qp[..3].copy_from_slice(&[u32_of(m, "M")?, u32_of(n, "N")?, u32_of(k, "K")?]);
        let grid = grid_1d(ctx, blocks, QUANTIZE_WG);
        out.push(dispatch(
            ctx,
            &variant("quantize_x"),
            &qp,
            &[(1, x), (4, Bind::f32(&xq)), (5, Bind::f32(&xds))],
            grid,
        )?);
        act = vec![(4, Bind::f32(&xq)), (5, Bind::f32(&xds))];
    }
    let gemm_q = !matvec && ctx.kernels() == KernelSet::Gpu;
    let (entry, tile) = match (matvec, gemm_q) {
        (true, _) => ("matvec", (0, 0)),
        (false, true) => ("gemm_q", if m <= 64 { (16, 64) } else { (64, 64) }),
        (false, false) => ("matmul_q", (TILE, TILE)),
    };
    let mut v = add_c(variant(entry));
    if gemm_q {
        v = v
            .define("GEMM_Q", true)
            .define("TILE_S", tile.0 == 16)
            // gemm_q fills its tiles, then a barrier, then reads
            .written_before_read()
            // Indices in range without runtime checks: activation blocks are read at rows
            // min(m, M - 1) and blocks b < K / 32 of the quantize_x scratch (M x K / 32
            // blocks), weight blocks at rows min(n, rows - 1) of the chunk, repacked into
            // whole words of codes and scales (repack.rs: block b's codes and scale word
            // inside the chunk's rows x K / 32 blocks);
            // workgroup tiles at e < BM * 8 / BN * PITCH, r < BM, c < BN, q < 8; y and the
            // addend only at m < M and n < rows.
            .indices_proven();
    }
    for c in chunks.iter() {
        let grid = if matvec {
            grid_1d(ctx, c.rows, 1)
        } else {
            [c.rows.div_ceil(tile.1) as u32, m.div_ceil(tile.0) as u32, 1]
        };
        let mut b = act.clone();
        b.push((2, Bind::f32(&c.buffer)));
        let b = with_outputs(b, (output, parts), addend);
        out.push(dispatch(ctx, &v, &params(c)?, &b, grid)?);
    }
    Ok(out)
}

/// [`Op::GatedMatMul`]: with float weights, M > 16 and the GPU kernel set, one tiled GEMM a
/// weight chunk with both weights' tiles, the norm (if any) and the activation fused (neither
/// product is written); otherwise the normalised rows (if any) and the two products into
/// scratch, then the gated elementwise kernel.
pub(super) fn gated_matmul(
    ctx: &GpuContext,
    node: &Node,
    bufs: &NodeBuffers,
) -> Result<Vec<Dispatch>> {
    let Op::GatedMatMul { act, norm } = node.op else {
        unreachable!("routed by encode")
    };
    let norm = norm.map(|n| NormRead::of(n, node, bufs));
    let (x, wg, wu) = (&bufs.inputs[0], &bufs.inputs[1], &bufs.inputs[2]);
    let ((chunks, dtype, [m, n, k]), (up_chunks, up_dtype, _)) = (product(x, wg), product(x, wu));
    let (define, quant) = weight_define(dtype, "gated matmul")?;
    if m == 0 || n == 0 {
        return Ok(vec![]);
    }
    let same_chunks = chunks.len() == up_chunks.len()
        && chunks
            .iter()
            .zip(up_chunks.iter())
            .all(|(g, u)| (g.row_start, g.rows) == (u.row_start, u.rows));
    if !quant && m <= MATVEC_MAX_M && dtype == up_dtype && same_chunks {
        let mv = FloatMatvec {
            dims: [m, n, k],
            x: x.act(),
            chunks,
            define,
            norm,
            addend: None,
        };
        let output = (bufs.output, OutParts::default());
        return mv.dispatches(ctx, Some((up_chunks, act)), output);
    }
    let fused = on_tiled_gemm(ctx, quant, m) && dtype == up_dtype && same_chunks;
    if fused {
        return chunks
            .iter()
            .zip(up_chunks.iter())
            .map(|(g, u)| {
                Gemm {
                    gated: Some((&u.buffer, act)),
                    norm: norm.map(NormRead::fused),
                    scratch: Some(bufs.scratch),
                    ..Gemm::weight_chunk([m, n, k], g, define, x.act(), bufs.output)
                }
                .dispatch(ctx)
            })
            .collect::<Result<Vec<_>>>()
            .map(|d| d.into_iter().flatten().collect());
    }
    let mut out = Vec::new();
    let bytes = 4 * (m * n) as u64;
    let (gate, up) = (
        bufs.scratch.get_slot(ctx, 0, bytes),
        bufs.scratch.get_slot(ctx, 1, bytes),
    );
    // (the up product reads the rows the gate product normalised: `normed_rows`)
    let pool = bufs.scratch;
    let (gate, up) = (Bind::f32(&gate), Bind::f32(&up));
    let (gate_out, up_out) = ((gate, OutParts::default()), (up, OutParts::default()));
    out.extend(matmul_into(ctx, x, wg, norm, None, pool, gate_out)?);
    out.extend(matmul_into(ctx, x, wu, norm, None, pool, up_out)?);
    out.push(super::elementwise::gated(
        ctx,
        act,
        m * n,
        gate,
        up,
        bufs.output,
    )?);
    Ok(out)
}

/// A float-weight product of few rows (M <= [`MATVEC_MAX_M`]) on `matvec`, with its norm
/// read (the rows normalised as they are read) and, gated, both weights in one pass.
struct FloatMatvec<'a> {
    dims: [usize; 3],
    x: Bind<'a>,
    chunks: &'a [Chunk],
    define: &'static str,
    norm: Option<NormRead<'a>>,
    addend: Option<Addend<'a>>,
}

impl FloatMatvec<'_> {
    /// One dispatch a weight chunk; `up`: a gated product's up weight (the same chunking)
    /// and activation.
    fn dispatches(
        &self,
        ctx: &GpuContext,
        up: Option<(&[Chunk], GateAct)>,
        (output, parts): (Bind, OutParts),
    ) -> Result<Vec<Dispatch>> {
        let [m, n, k] = self.dims;
        let v = Variant::new("matmul_quant", QUANT_SOURCE, "matvec");
        let v = Addend::define(self.addend, parts.define(v))
            .define(self.define, true)
            .define("SUBGROUPS", ctx.caps.subgroups)
            .define("NORM", self.norm.is_some())
            .define("GATED", up.is_some())
            .define("SILU", matches!(up, Some((_, GateAct::Silu))));
        let (eps, offset) = self
            .norm
            .map_or((0.0, 0.0), |r| (r.norm.eps, r.norm.offset));
        let mut out = Vec::with_capacity(self.chunks.len());
        for (i, c) in self.chunks.iter().enumerate() {
            let mut params = chunk_params([m, n, k], c, parts, self.addend)?;
            params[8..].copy_from_slice(&[eps.to_bits(), offset.to_bits()]);
            let b = vec![(1, self.x), (2, Bind::f32(&c.buffer))];
            let mut b = with_outputs(b, (output, parts), self.addend);
            b.extend(up.map(|(u, _)| (7, Bind::f32(&u[i].buffer))));
            b.extend(self.norm.map(|r| (8, r.gain)));
            out.push(dispatch(ctx, &v, &params, &b, grid_1d(ctx, c.rows, 1))?);
        }
        Ok(out)
    }
}
