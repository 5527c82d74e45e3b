//! FoldQuant sites, `Op::FqLinear` (`shaders/foldquant.wgsl`): `fq_act` quantizes every
//! token row (rotation, per-token scale, codes packed four a word) into scratch buffers,
//! `fq_gemm` multiplies the codes as integers (INT4 weights unpacked from their nibbles to
//! int8 lanes in the kernel) and applies the f32 epilogue. Bit-exact with
//! `ops::foldquant` where the adapter divides with correct rounding (lavapipe).

use super::{dispatch, grid_1d, u32_of, Bind, Dispatch, NodeBuffers, TensorBuf};
use crate::backend::wgpu::shader::Variant;
use crate::backend::wgpu::{GpuContext, KernelSet};
use crate::graph::{Node, Op};
use crate::ops::foldquant::{qmax, ActRule, FoldOrder};
use crate::{Error, Result};

const SOURCE: &str = concat!(
    include_str!("../../../../shaders/int_dot.wgsl"),
    include_str!("../../../../shaders/foldquant.wgsl")
);
const WG: usize = 64;

/// Scratch slots of the executable's pool (slot 0 is attention's).
const SLOT_ROTATED: usize = 1;
const SLOT_CODES: usize = 2;
const SLOT_SCALES: usize = 3;

fn not_impl(what: String) -> Error {
    Error::NotImplemented {
        op: what,
        backend: "wgpu",
    }
}

pub(super) fn fq_linear(
    ctx: &GpuContext,
    node: &Node,
    bufs: &NodeBuffers,
) -> Result<Vec<Dispatch>> {
    let Op::FqLinear(p) = node.op else {
        unreachable!("routed by encode")
    };
    let TensorBuf::Raw { chunks, shape, .. } = &bufs.inputs[1] else {
        return Err(not_impl(
            "fq_linear with codes that are no stored weight".into(),
        ));
    };
    let [chunk] = &chunks[..] else {
        return Err(not_impl(format!(
            "fq_linear with codes {shape:?} over one storage binding"
        )));
    };
    // K from x: INT4 codes are stored two a byte (`[N, K / 2]`), ternary codes four
    // (`[N, K / 4]`), unpacked in `fq_gemm`
    let (n, k) = (shape[0], *bufs.inputs[0].shape().last().unwrap_or(&0));
    if k % 4 != 0
        || (p.weight_bits == 4 && k % 8 != 0)
        || (p.weight_bits == 2 && k % 16 != 0)
        || !p.block.is_power_of_two()
        || p.block > 64
        || k % p.block != 0
    {
        return Err(not_impl(format!(
            "fq_linear with K = {k}, block {}",
            p.block
        )));
    }
    let rows = bufs.inputs[0].shape().iter().product::<usize>() / k;
    let x = bufs.inputs[0].act();
    let wscale = bufs.inputs[2].act();
    let ascale = p.fold.map(|_| bufs.inputs[3].act());
    let gain = p
        .norm
        .map(|_| bufs.inputs[3 + usize::from(p.fold.is_some())].act());
    let (eps, offset) = p.norm.unwrap_or((0.0, 0.0));
    let addend = p.addend.then(|| &bufs.inputs[bufs.inputs.len() - 1]);
    let residual = addend.is_some_and(|a| a.shape().iter().product::<usize>() != n);
    let c = (1.0 / (p.block as f64).sqrt()) as f32;
    let params = [
        u32_of(rows, "rows")?,
        u32_of(k, "K")?,
        u32_of(n, "N")?,
        p.block as u32,
        (qmax(p.act_bits) as f32).to_bits(),
        p.clip.to_bits(),
        c.to_bits(),
        0,
        p.block.trailing_zeros(),
        eps.to_bits(),
        offset.to_bits(),
    ];
    let rotated = bufs
        .scratch
        .get_slot(ctx, SLOT_ROTATED, 4 * (rows * k) as u64);
    let codes = bufs.scratch.get_slot(ctx, SLOT_CODES, (rows * k) as u64);
    let scales = bufs.scratch.get_slot(ctx, SLOT_SCALES, 4 * rows as u64);

    let act = Variant::new("foldquant", SOURCE, "fq_act")
        .define("BEFORE", p.fold == Some(FoldOrder::Before))
        .define("AFTER", p.fold == Some(FoldOrder::After))
        .define("NORM", p.norm.is_some())
        .define("BITNET", p.act == ActRule::BitNet);
    let f = Bind::f32;
    let mut b = vec![(1, x), (3, f(&rotated)), (4, f(&codes)), (5, f(&scales))];
    b.extend(ascale.map(|a| (2, a)));
    b.extend(gain.map(|g| (10, g)));
    let act = dispatch(ctx, &act, &params, &b, grid_1d(ctx, rows, 1))?;

    // the GPU kernel set tiles the integer GEMM (32 x 32 outputs a workgroup; K in steps of
    // 32 codes); the portable one (lavapipe's default) keeps one invocation per output
    let tiled = ctx.kernels() == KernelSet::Gpu && k % 32 == 0;
    let entry = if tiled { "fq_gemm_tiled" } else { "fq_gemm" };
    let gemm = Variant::new("foldquant", SOURCE, entry)
        .define("INT_DOT", ctx.caps.int_dot)
        .define("W4", p.weight_bits == 4)
        .define("W2", p.weight_bits == 2)
        .define("BIAS", addend.is_some() && !residual)
        .define("RESIDUAL", residual);
    let mut b = vec![
        (4, f(&codes)),
        (5, f(&scales)),
        (6, f(&chunk.buffer)),
        (7, wscale),
        (9, bufs.output),
    ];
    b.extend(addend.map(|a| (8, a.act())));
    let grid = match tiled {
        true => [
            u32_of(n.div_ceil(32), "N")?,
            u32_of(rows.div_ceil(32), "rows")?,
            1,
        ],
        false => grid_1d(ctx, rows * n, WG),
    };
    let gemm = dispatch(ctx, &gemm, &params, &b, grid)?;
    Ok(vec![act, gemm])
}
