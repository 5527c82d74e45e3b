//! Scaled dot-product attention with GQA and None / Causal / Allowed masks, q, k, v and
//! the output with their heads inside positions (`[S, H, D]`).
//!
//! Portable kernel set (`shaders/attention.wgsl`), one workgroup per query row: the
//! score-row kernel (all `Sk` scores in workgroup memory) and the flash-style kernel
//! (online softmax over key tiles). [`WgpuOptions::flash_attn`] picks; by default flash
//! runs when `Sk > FLASH_ATTN_MIN_SK` or when the score row does not fit workgroup memory.
//!
//! GPU kernel set: the fused tiled flash kernel (`shaders/attention_tiled.wgsl`; K/V
//! tiles in workgroup memory shared by the query heads of a kv head), or with `flash_attn`
//! off the scores GEMM -> in-place softmax -> P V GEMM composition.
//!
//! [`WgpuOptions::flash_attn`]: crate::backend::wgpu::WgpuOptions::flash_attn

use super::gemm::Gemm;
use super::{dispatch, grid_1d, u32_of, Bind, Dispatch, NodeBuffers};
use crate::backend::wgpu::shader::Variant;
use crate::backend::wgpu::{GpuContext, KernelSet, FLASH_ATTN_MIN_SK};
use crate::backend::ActDtype;
use crate::graph::{AttentionMask, Node, Op};
use crate::{Error, Result};

const SOURCE: &str = concat!(
    include_str!("../../../../shaders/attention.wgsl"),
    include_str!("../../../../shaders/reduce.wgsl")
);
const TILED_SOURCE: &str = include_str!("../../../../shaders/attention_tiled.wgsl");
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
    let (sq, hq, d) = (qs[0], qs[1], qs[2]);
    let (sk0, hkv) = (ks[0], ks[1]);
    let sk = match node.kv_parts() {
        2 => sk0 + bufs.inputs[3].shape()[0],
        _ => sk0,
    };
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
    let dims = Dims {
        sq,
        hq,
        d,
        sk,
        sk0,
        hkv,
        dv,
    };
    if ctx.kernels() == KernelSet::Gpu {
        let scores = 4 * (hq * sq * sk) as u64;
        let gemm = ctx.options.flash_attn == Some(false)
            && scores <= ctx.limits.max_storage_buffer_binding_size;
        return match gemm {
            true => gemm_attention(ctx, node, bufs, dims, scores),
            false => tiled_attention(ctx, node, bufs, dims),
        };
    }
    let params = [
        u32_of(hq * sq, "attention rows")?,
        u32_of(sq, "Sq")?,
        u32_of(sk, "Sk")?,
        u32_of(d, "D")?,
        u32_of(dv, "Dv")?,
        u32_of(hq / hkv, "GQA group")?,
        scale.to_bits(),
        u32_of(hq, "Hq")?,
        u32_of(sk0, "keys in the first part")?,
        0,
        0,
        0,
    ];
    let wg_bytes = ctx.limits.max_compute_workgroup_storage_size as usize;
    let choice = choose(ctx.options.flash_attn, sk, wg_bytes);
    let (entry, rows_kernel) = match choice {
        Some(_) => ("attn_rows", true),
        None => ("attn_flash", false),
    };
    let mut v = Variant::new("attention", SOURCE, entry)
        .define("ROWS", rows_kernel)
        .define("PARTS2", node.kv_parts() == 2)
        .define("CAUSAL", mask == AttentionMask::Causal)
        .define("ALLOWED", mask == AttentionMask::Allowed)
        .define("SUBGROUPS", ctx.caps.subgroups)
        .constant("WG", WG as f64);
    if let Some(cap) = choice {
        v = v.constant("SK_CAP", cap as f64);
    }
    Ok(vec![dispatch(
        ctx,
        &v,
        &params,
        &bindings(node, bufs),
        grid_1d(ctx, hq * sq, 1),
    )?])
}

/// The shapes of one attention node: q `[Sq, Hq, D]`, k `[Sk, Hkv, D]`, v `[Sk, Hkv, Dv]`,
/// the first `Sk0` keys in the first part.
#[derive(Clone, Copy)]
struct Dims {
    sq: usize,
    hq: usize,
    d: usize,
    sk: usize,
    sk0: usize,
    hkv: usize,
    dv: usize,
}

/// q, k, v, the output, (Allowed) the mask and (two parts) the second k and v, at the
/// bindings both attention shaders use.
fn bindings<'a>(node: &Node, bufs: &NodeBuffers<'a>) -> Vec<(u32, Bind<'a>)> {
    let mut buffers = vec![
        (1, bufs.inputs[0].act()),
        (2, bufs.inputs[1].act()),
        (3, bufs.inputs[2].act()),
        (5, bufs.output),
    ];
    if matches!(
        node.op,
        Op::Attention {
            mask: AttentionMask::Allowed,
            ..
        }
    ) {
        buffers.push((4, bufs.inputs[bufs.inputs.len() - 1].act()));
    }
    if node.kv_parts() == 2 {
        buffers.push((7, bufs.inputs[3].act()));
        buffers.push((8, bufs.inputs[4].act()));
    }
    buffers
}

/// The fused kernel splits the keys when its query blocks make fewer workgroups than this
/// (a GPU of ~100 compute units wants a few waves of them); not tuned on a GPU yet.
const SPLIT_MIN_GROUPS: usize = 256;
/// Key tiles a split takes at least (each split costs its rows a partial result).
const SPLIT_MIN_TILES: usize = 4;

/// How the fused kernel cuts the keys: `(splits, keys per split)`; one split when the
/// `groups` workgroups of its query blocks are enough or `sk` is short.
fn key_splits(groups: usize, sk: usize, bk: usize) -> (usize, usize) {
    let tiles = sk.div_ceil(bk).max(1);
    let want = match groups >= SPLIT_MIN_GROUPS {
        true => 1,
        false => SPLIT_MIN_GROUPS.div_ceil(groups.max(1)),
    };
    let chunk = tiles.div_ceil(want.min(tiles / SPLIT_MIN_TILES).max(1)) * bk;
    (sk.div_ceil(chunk).max(1), chunk)
}

/// The fused flash kernel of the GPU kernel set (`shaders/attention_tiled.wgsl`): a
/// workgroup per block of query rows that share a kv head, K and V tiles through workgroup
/// memory, tiles sized by the head dim (at most 64, 128 or 256). One dispatch; two (the
/// splits' partial results in scratch, then their merge) when few query blocks would leave
/// a GPU idle and the keys are long enough to split.
fn tiled_attention(
    ctx: &GpuContext,
    node: &Node,
    bufs: &NodeBuffers,
    Dims {
        sq,
        hq,
        d,
        sk,
        sk0,
        hkv,
        dv,
    }: Dims,
) -> Result<Vec<Dispatch>> {
    let Op::Attention { mask, scale } = node.op else {
        unreachable!("routed by encode")
    };
    let group = hq / hkv;
    // (define, query rows, keys) of a tile; as the shader's constants
    let (class, bq, bk) = match d.max(dv) {
        0..=64 => ("D64", 16, 32),
        65..=128 => ("D128", 8, 16),
        _ => ("D256", 4, 8),
    };
    let rows = sq * group;
    let blocks = rows.div_ceil(bq);
    let (splits, chunk) = key_splits(blocks * hkv, sk, bk);
    let split = splits > 1;
    let v = Variant::new("attention_tiled", TILED_SOURCE, "attn_tiled")
        .define(class, true)
        .define("CAUSAL", mask == AttentionMask::Causal)
        .define("ALLOWED", mask == AttentionMask::Allowed)
        .define("SPLIT", split)
        .define("PARTS2", node.kv_parts() == 2)
        // qs, kv, ps and alpha are written (whole or where later read) before a barrier
        // and their first read
        .written_before_read()
        // Indices in range without runtime checks: q and o (or part) are read / written
        // only for block rows below n_rows (rows = Sq * group from the node's shapes),
        // keys and values only below the visible end (<= Sk), the mask at [i < Sq, j < Sk];
        // workgroup arrays at r < BQ, j < BK, c < D or Dv <= PITCH - 1 (the class).
        .indices_proven();
    let params = [
        u32_of(rows, "attention rows")?,
        u32_of(sq, "Sq")?,
        u32_of(sk, "Sk")?,
        u32_of(d, "D")?,
        u32_of(dv, "Dv")?,
        u32_of(group, "GQA group")?,
        u32_of(hq, "Hq")?,
        u32_of(hkv, "Hkv")?,
        scale.to_bits(),
        u32_of(chunk, "keys per split")?,
        u32_of(splits, "key splits")?,
        u32_of(sk0, "keys in the first part")?,
    ];
    let grid = [
        u32_of(blocks, "query row blocks")?,
        u32_of(hkv, "kv heads")?,
        u32_of(splits, "key splits")?,
    ];
    let mut buffers = bindings(node, bufs);
    if !split {
        return Ok(vec![dispatch(ctx, &v, &params, &buffers, grid)?]);
    }
    let part = bufs
        .scratch
        .get(ctx, 4 * (splits * hkv * rows * (dv + 2)) as u64);
    buffers.retain(|(b, _)| *b != 5);
    buffers.push((6, Bind::f32(&part)));
    let tiles = dispatch(ctx, &v, &params, &buffers, grid)?;
    let merge = Variant::new("attention_tiled", TILED_SOURCE, "attn_combine")
        .define(class, true)
        .define("COMBINE", true);
    let combine = dispatch(
        ctx,
        &merge,
        &params,
        &[(5, bufs.output), (6, Bind::f32(&part))],
        grid_1d(ctx, hkv * rows * dv, WG),
    )?;
    Ok(vec![tiles, combine])
}

/// Attention as three dispatches (GPU kernel set, `flash_attn` off): the scaled, masked
/// scores `Q K^T` of every head into a scratch buffer `[Hq, Sq, Sk]` by the tiled GEMM
/// (masked: -f32::MAX), the softmax of each score row in place (norm.wgsl), then `P V` by
/// the tiled GEMM; query heads index the GEMMs' batches, `group` of them per kv head, and
/// q, k, v and the output are read and written with their heads inside positions (rows
/// `H * D` apart). Keys and values in two parts are first copied together into scratch.
fn gemm_attention(
    ctx: &GpuContext,
    node: &Node,
    bufs: &NodeBuffers,
    Dims {
        sq,
        hq,
        d,
        sk,
        sk0,
        hkv,
        dv,
    }: Dims,
    scores_bytes: u64,
) -> Result<Vec<Dispatch>> {
    let Op::Attention { mask, scale } = node.op else {
        unreachable!("routed by encode")
    };
    let group = hq / hkv;
    let s = bufs.scratch.get(ctx, scores_bytes);
    let allowed =
        (mask == AttentionMask::Allowed).then(|| bufs.inputs[bufs.inputs.len() - 1].act());
    let mut out = Vec::new();
    // keys and values: each the GEMM's raw B operand, decoded by its dtype (a second part
    // is copied after the first, into the first's dtype)
    let (k_dtype, v_dtype) = (bufs.inputs[1].act().dtype, bufs.inputs[2].act().dtype);
    let (mut keys, mut values) = (
        bufs.inputs[1].act().buffer.clone(),
        bufs.inputs[2].act().buffer.clone(),
    );
    if node.kv_parts() == 2 {
        let kv = [
            (1, 1, d, k_dtype, &mut keys),
            (2, 2, dv, v_dtype, &mut values),
        ];
        for (slot, first, width, dtype, joined) in kv {
            let bytes = dtype.size() * sk * hkv * width;
            *joined = bufs.scratch.get_slot(ctx, slot, bytes as u64);
            let n0 = sk0 * hkv * width;
            let parts = [(first, 0, n0), (first + 2, n0, (sk - sk0) * hkv * width)];
            for (input, at, n) in parts {
                let (src, dst) = (bufs.inputs[input].act(), Bind::of(joined, dtype));
                out.extend(super::copy::copy_into(ctx, node, src, dst, n, at)?);
            }
        }
    }
    let causal = (mask == AttentionMask::Causal).then_some(sk as i64 - sq as i64);
    let scores = Gemm {
        m: sq,
        n: sk,
        k: d,
        n_off: 0,
        rows: sk,
        batches: hq,
        strides: [d, d, sq * sk],
        lda: hq * d,
        ldb: hkv * d,
        group,
        b_define: decoder_define(k_dtype),
        b_kn: false,
        scores: Some((scale, causal, allowed)),
        addend: None,
        gated: None,
        norm: None,
        scratch: None,
        a: bufs.inputs[0].act(),
        b: &keys,
        c: Bind::f32(&s),
        parts: Default::default(),
    }
    .dispatch(ctx)?;
    let softmax = super::norm::softmax_in_place(ctx, Bind::f32(&s), hq * sq, sk)?;
    let pv = Gemm {
        m: sq,
        n: hq * dv,
        k: sk,
        n_off: 0,
        rows: dv,
        batches: hq,
        strides: [sq * sk, dv, dv],
        lda: sk,
        ldb: hkv * dv,
        group,
        b_define: decoder_define(v_dtype),
        b_kn: true,
        scores: None,
        addend: None,
        gated: None,
        norm: None,
        scratch: None,
        a: Bind::f32(&s),
        b: &values,
        c: bufs.output,
        parts: Default::default(),
    }
    .dispatch(ctx)?;
    out.extend(scores);
    out.push(softmax);
    out.extend(pv);
    Ok(out)
}

/// The weight decoder (`weight_decode.wgsl`) that reads activations stored in `dtype`.
fn decoder_define(dtype: ActDtype) -> &'static str {
    match dtype {
        ActDtype::F32 => "W_F32",
        ActDtype::F16 => "W_F16",
        ActDtype::Bf16 => "W_BF16",
    }
}

#[cfg(test)]
mod tests {
    use super::choose;

    #[test]
    fn key_splits_cover_the_keys_in_whole_tiles() {
        use super::key_splits;
        // enough workgroups, or too few keys: one split
        assert_eq!(key_splits(256, 5000, 32), (1, 5024));
        assert_eq!(key_splits(5, 100, 32), (1, 128));
        // SmolVLA's expert over its prefix: 50 workgroups, 11 tiles -> 2 splits of 6 tiles
        assert_eq!(key_splits(50, 350, 32), (2, 192));
        // one workgroup over 5000 keys (157 tiles): at most 39 splits of 4 -> 32 of 5
        assert_eq!(key_splits(1, 5000, 32), (32, 160));
        for (groups, sk, bk) in [(3, 777, 8), (100, 64, 32), (7, 1, 16)] {
            let (splits, chunk) = key_splits(groups, sk, bk);
            assert!(chunk % bk == 0 && splits * chunk >= sk && (splits - 1) * chunk < sk);
        }
    }

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
