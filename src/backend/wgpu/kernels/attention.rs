//! Scaled dot-product attention with GQA and None / Causal / Allowed masks
//! (`shaders/attention.wgsl`). Two kernels, one workgroup per query row each: the
//! score-row kernel (all `Sk` scores in workgroup memory) and the fused flash-style kernel
//! (online softmax over key tiles). [`WgpuOptions::flash_attn`] picks; by default flash
//! runs when `Sk > FLASH_ATTN_MIN_SK` or when the score row does not fit workgroup memory.
//!
//! [`WgpuOptions::flash_attn`]: crate::backend::wgpu::WgpuOptions::flash_attn

use super::gemm::Gemm;
use super::{dispatch, grid_1d, u32_of, Dispatch, NodeBuffers};
use crate::backend::wgpu::shader::Variant;
use crate::backend::wgpu::{GpuContext, KernelSet, FLASH_ATTN_MIN_SK};
use crate::graph::{AttentionMask, Node, Op};
use crate::{Error, Result};

const SOURCE: &str = concat!(
    include_str!("../../../../shaders/attention.wgsl"),
    include_str!("../../../../shaders/reduce.wgsl")
);
/// Invocations per workgroup (and keys per flash tile).
const WG: usize = 64;
/// Largest head dims the kernels hold (`D_MAX`, `ACC * WG` in the shader).
const D_MAX: usize = 256;
const DV_MAX: usize = 4 * WG;

/// Workgroup memory the score-row kernel needs besides the scores.
const FIXED_BYTES: usize = 4 * (WG + D_MAX);

/// Which kernel runs for `sk` keys: `Some(sk_cap)` for the score-row kernel, `None` for flash.
pub(crate) fn choose(flash: Option<bool>, sk: usize, workgroup_bytes: usize) -> Option<usize> {
    let fits = workgroup_bytes.saturating_sub(FIXED_BYTES) / 4;
    let cap = sk.max(1).next_power_of_two().max(WG);
    let cap = if cap <= fits { cap } else { sk };
    let rows_ok = sk <= fits;
    let flash = match flash {
        Some(f) => f || !rows_ok,
        None => sk > FLASH_ATTN_MIN_SK || !rows_ok,
    };
    (!flash).then_some(cap)
}

pub(super) fn attention(
    ctx: &GpuContext,
    node: &Node,
    bufs: &NodeBuffers,
) -> Result<Vec<Dispatch>> {
    let Op::Attention { mask, scale } = node.op else {
        unreachable!("routed by encode")
    };
    let (qs, ks) = (bufs.inputs[0].shape(), bufs.inputs[1].shape());
    let (hq, sq, d) = (qs[0], qs[1], qs[2]);
    let (hkv, sk) = (ks[0], ks[1]);
    let dv = node.shape[2];
    if d > D_MAX || dv > DV_MAX {
        return Err(Error::NotImplemented {
            op: format!("attention with head dims {d}/{dv} (max {D_MAX}/{DV_MAX})"),
            backend: "wgpu",
        });
    }
    if node.numel() == 0 {
        return Ok(vec![]);
    }
    let rows = hq * sq;
    let params = [
        u32_of(rows, "attention rows")?,
        u32_of(sq, "Sq")?,
        u32_of(sk, "Sk")?,
        u32_of(d, "D")?,
        u32_of(dv, "Dv")?,
        u32_of(hq / hkv, "GQA group")?,
        scale.to_bits(),
        0,
    ];
    if ctx.kernels() == KernelSet::Gpu && ctx.options.flash_attn != Some(true) {
        let scores = 4 * (hq * sq * sk) as u64;
        if scores <= ctx.limits.max_storage_buffer_binding_size {
            let dims = [hq, sq, d, hkv, sk, dv];
            return gemm_attention(ctx, node, bufs, dims, scores);
        }
    }
    let wg_bytes = ctx.limits.max_compute_workgroup_storage_size as usize;
    let choice = choose(ctx.options.flash_attn, sk, wg_bytes);
    let (entry, rows_kernel) = match choice {
        Some(_) => ("attn_rows", true),
        None => ("attn_flash", false),
    };
    let mut v = Variant::new("attention", SOURCE, entry)
        .define("ROWS", rows_kernel)
        .define("CAUSAL", mask == AttentionMask::Causal)
        .define("ALLOWED", mask == AttentionMask::Allowed)
        .define("SUBGROUPS", ctx.caps.subgroups)
        .constant("WG", WG as f64);
    if let Some(cap) = choice {
        v = v.constant("SK_CAP", cap as f64);
    }
    let mut buffers = vec![
        (1, bufs.inputs[0].f32()),
        (2, bufs.inputs[1].f32()),
        (3, bufs.inputs[2].f32()),
        (5, bufs.output),
    ];
    if mask == AttentionMask::Allowed {
        buffers.push((4, bufs.inputs[3].f32()));
    }
    Ok(vec![dispatch(
        ctx,
        &v,
        &params,
        &buffers,
        grid_1d(ctx, rows, 1),
    )?])
}

/// Attention as three dispatches (GPU kernel set): the scaled, masked scores `Q K^T` of
/// every head into a scratch buffer by the tiled GEMM (masked: -f32::MAX), the softmax of
/// each score row in place (norm.wgsl), then `P V` by the tiled GEMM; query heads index
/// the GEMMs' batches, `group` of them per kv head. `dims`: `[Hq, Sq, D, Hkv, Sk, Dv]`.
fn gemm_attention(
    ctx: &GpuContext,
    node: &Node,
    bufs: &NodeBuffers,
    [hq, sq, d, hkv, sk, dv]: [usize; 6],
    scores_bytes: u64,
) -> Result<Vec<Dispatch>> {
    let Op::Attention { mask, scale } = node.op else {
        unreachable!("routed by encode")
    };
    let group = hq / hkv;
    let s = bufs.scratch.get(ctx, scores_bytes);
    let allowed = (mask == AttentionMask::Allowed).then(|| bufs.inputs[3].f32());
    let causal = (mask == AttentionMask::Causal).then_some(sk as i64 - sq as i64);
    let scores = Gemm {
        m: sq,
        n: sk,
        k: d,
        n_off: 0,
        rows: sk,
        batches: hq,
        strides: [sq * d, sk * d, sq * sk],
        group,
        b_define: "W_F32",
        b_kn: false,
        scores: Some((scale, causal, allowed)),
        addend: None,
        a: bufs.inputs[0].f32(),
        b: bufs.inputs[1].f32(),
        c: &s,
    }
    .dispatch(ctx)?;
    let softmax = super::norm::softmax_in_place(ctx, &s, hq * sq, sk)?;
    let pv = Gemm {
        m: sq,
        n: dv,
        k: sk,
        n_off: 0,
        rows: dv,
        batches: hq,
        strides: [sq * sk, sk * dv, sq * dv],
        group,
        b_define: "W_F32",
        b_kn: true,
        scores: None,
        addend: None,
        a: &s,
        b: bufs.inputs[2].f32(),
        c: bufs.output,
    }
    .dispatch(ctx)?;
    Ok(vec![scores, softmax, pv])
}

#[cfg(test)]
mod tests {
    use super::choose;

    #[test]
    fn kernel_choice() {
        let lim = 32 * 1024;
        assert_eq!(choose(None, 350, lim), Some(512));
        assert_eq!(choose(None, 1, lim), Some(64));
        assert_eq!(choose(None, 5000, lim), None);
        assert_eq!(choose(Some(true), 37, lim), None);
        assert_eq!(choose(Some(false), 5000, lim), Some(5000));
        // over workgroup memory: flash whatever was asked
        assert_eq!(choose(Some(false), 9000, lim), None);
    }
}
