//! BitVLA files (`convert_bitvla_to_gguf.py`), told by `bitvla.quant.int2_packed`. Most
//! names are ours (ours were taken from it); what differs:
//!
//! - keys: `lm.vocab_size` (ours `lm.vocab`), `action.num_actions_chunk` (`action.chunk`),
//!   `action.ln_eps` (`action.head_ln_eps`); no `vit.num_images` (vla.cpp takes the views a
//!   request brings; we compile for [`VLACPP_IMAGES`]), `action.head_hidden` or
//!   `action.head_blocks` (read from the head's tensors); `statistics_json` (ours: tensors);
//! - the ternary matrices: CUDA "Ladder" int2 tiles of 16 rows x 128 columns, each code
//!   stored as code + 2, in a 1-D I8 tensor (K padded to a multiple of 128 where it is not
//!   one: the tower's `fc2`), repacked here into [`crate::ops::ternary`]'s layout (the same
//!   16-code words, placed row by row, each code stored as code + 1); the `.scale` (the step)
//!   is ours;
//! - the language model's gate and up projections fused (`ffn_gate_up`, gate rows first,
//!   a step each: `.scale` `[2]`), split here;
//! - `vit.patch_embd.weight` flattened to `[hidden, 3 * patch * patch]` (ours 4-D, the same
//!   order); the head's blocks' `fc` (ours `lin`).
//!
//! vla.cpp ships no tokenizer (its client tokenizes with the checkpoint's): requests carry
//! token ids, as vla.cpp's do.

use super::VLACPP_IMAGES;
use crate::gguf::{GgmlType, GgufFile, Value};
use crate::models::bitvla::ARCH;
use crate::{Error, Result};

/// The Ladder tile: rows and columns.
const TILE_N: usize = 16;
const TILE_K: usize = 128;

fn bad(why: impl std::fmt::Display) -> Error {
    Error::InvalidArgument(format!("vla.cpp's {ARCH} file: {why}"))
}

/// `file` in our layout when it is vla.cpp's (`bitvla.quant.int2_packed` set); otherwise as
/// it is.
pub(crate) fn translate(mut file: GgufFile) -> Result<GgufFile> {
    let key = |k: &str| format!("{ARCH}.{k}");
    if file.get_u64(&key("quant.int2_packed")).unwrap_or(0) == 0 {
        return Ok(file);
    }
    tracing::info!("vla.cpp {ARCH} file: names, int2 tiles and statistics translated at load");
    for (theirs, ours) in [
        ("lm.vocab_size", "lm.vocab"),
        ("action.num_actions_chunk", "action.chunk"),
        ("action.ln_eps", "action.head_ln_eps"),
    ] {
        let v = file
            .get(&key(theirs))
            .cloned()
            .ok_or_else(|| bad(format!("no {}", key(theirs))))?;
        file.set_metadata(key(ours), v);
    }
    if file.get(&key("vit.num_images")).is_none() {
        file.set_metadata(key("vit.num_images"), Value::U32(VLACPP_IMAGES as u32));
    }
    let u = |f: &GgufFile, k: &str| -> Result<usize> { Ok(f.get_u64(&key(k))? as usize) };
    let (vh, vi, vl) = (
        u(&file, "vit.hidden")?,
        u(&file, "vit.inter")?,
        u(&file, "vit.layers")?,
    );
    let (h, inter, layers) = (
        u(&file, "lm.hidden")?,
        u(&file, "lm.inter")?,
        u(&file, "lm.layers")?,
    );
    let (kv, hd, p) = (
        u(&file, "lm.kv_heads")?,
        u(&file, "lm.head_dim")?,
        u(&file, "vit.patch_size")?,
    );
    let head_hidden = file
        .tensor_info("aex.head.fc1.weight")?
        .dims
        .get(1)
        .copied()
        .unwrap_or(0);
    let mut blocks = 0;
    while file
        .tensor_info(&format!("aex.head.blk.{blocks}.fc.weight"))
        .is_ok()
    {
        let b = format!("aex.head.blk.{blocks}");
        for x in ["weight", "bias"] {
            file.rename_tensor(&format!("{b}.fc.{x}"), &format!("{b}.lin.{x}"))?;
        }
        blocks += 1;
    }
    file.set_metadata(key("action.head_hidden"), Value::U32(head_hidden as u32));
    file.set_metadata(key("action.head_blocks"), Value::U32(blocks as u32));
    file.reshape_tensor("vit.patch_embd.weight", &[p as u64, p as u64, 3, vh as u64])?;
    for i in 0..vl {
        let b = format!("vit.blk.{i}");
        for s in ["attn_q", "attn_k", "attn_v", "attn_o"] {
            repack(&mut file, &format!("{b}.{s}"), vh, vh, vh)?;
        }
        repack(&mut file, &format!("{b}.fc1"), vi, vh, vh)?;
        repack(
            &mut file,
            &format!("{b}.fc2"),
            vh,
            vi.div_ceil(TILE_K) * TILE_K,
            vi,
        )?;
    }
    for i in 0..layers {
        let b = format!("lm.blk.{i}");
        repack(&mut file, &format!("{b}.attn_q"), h, h, h)?;
        repack(&mut file, &format!("{b}.attn_k"), kv * hd, h, h)?;
        repack(&mut file, &format!("{b}.attn_v"), kv * hd, h, h)?;
        repack(&mut file, &format!("{b}.attn_o"), h, h, h)?;
        repack(&mut file, &format!("{b}.ffn_down"), h, inter, inter)?;
        split_gate_up(&mut file, &b, inter, h)?;
    }
    super::prismatic::statistics(&mut file, ARCH)?;
    Ok(file)
}

/// Ternary matrix `<site>` (`n` x `k` stored, the first `keep` columns real) from Ladder
/// tiles to ours, its step kept.
fn repack(file: &mut GgufFile, site: &str, n: usize, k: usize, keep: usize) -> Result<()> {
    let name = format!("{site}.weight");
    let packed = ladder_to_rows(tile_bytes(file, &name, n, k)?, n, k, keep, 0..n)?;
    replace_codes(file, &name, n, keep, packed)
}

/// The fused `ffn_gate_up` (`[2 inter, hidden]`, a step each) as `ffn_gate` and `ffn_up`.
fn split_gate_up(file: &mut GgufFile, blk: &str, inter: usize, h: usize) -> Result<()> {
    let fused = format!("{blk}.ffn_gate_up");
    let steps = file.dequantize(&format!("{fused}.scale"))?;
    let [gate_step, up_step] = steps[..] else {
        return Err(bad(format!(
            "{fused}.scale holds {} values, not 2",
            steps.len()
        )));
    };
    let bytes = tile_bytes(file, &format!("{fused}.weight"), 2 * inter, h)?.to_vec();
    for (part, rows, step) in [
        ("ffn_gate", 0..inter, gate_step),
        ("ffn_up", inter..2 * inter, up_step),
    ] {
        let codes = ladder_to_rows(&bytes, 2 * inter, h, h, rows)?;
        let name = format!("{blk}.{part}");
        file.add_tensor(
            &format!("{name}.weight"),
            GgmlType::I8,
            &[(h / 4) as u64, inter as u64],
            codes,
        )?;
        file.add_tensor_f32(&format!("{name}.scale"), &[1], &[step])?;
    }
    file.retain_tensors(|t| !t.starts_with(&format!("{fused}.")));
    Ok(())
}

/// The I8 bytes of a Ladder-packed `[n, k]` matrix, checked.
fn tile_bytes<'f>(file: &'f GgufFile, name: &str, n: usize, k: usize) -> Result<&'f [u8]> {
    let t = file.tensor_info(name)?;
    if t.ty != GgmlType::I8 || t.n_bytes() != (n * k / 4) as u64 {
        return Err(bad(format!(
            "{name}: {} {:?}, expected I8 int2 tiles of a [{n}, {k}] matrix ({} bytes)",
            t.ty,
            t.dims,
            n * k / 4
        )));
    }
    if !n.is_multiple_of(TILE_N) || !k.is_multiple_of(TILE_K) {
        return Err(bad(format!(
            "{name}: [{n}, {k}] is no whole number of {TILE_N} x {TILE_K} int2 tiles"
        )));
    }
    Ok(file.tensor_bytes(t))
}

/// Rows `rows` of the Ladder-packed `[n, k]` matrix `src`, their first `keep` columns, in our
/// layout. A tile's 4-byte word holds 16 consecutive columns of one row, the layout within
/// a word being ours; word (row `r`, columns `16 t..`) sits at byte `(r / 16) 4k + (t / 8)
/// 512 + (t % 8 / 2) 128 + (r % 16 / 8) 64 + (t % 2) 32 + (r % 8) 4`. Each 2-bit field goes
/// from code + 2 to code + 1; a field 0 (no code) is an error.
fn ladder_to_rows(
    src: &[u8],
    n: usize,
    k: usize,
    keep: usize,
    rows: std::ops::Range<usize>,
) -> Result<Vec<u8>> {
    debug_assert_eq!(src.len(), n * k / 4);
    if !keep.is_multiple_of(16) || keep > k {
        return Err(bad(format!(
            "{keep} columns of {k}: not whole 16-column words"
        )));
    }
    let mut out = Vec::with_capacity(rows.len() * keep / 4);
    for r in rows {
        for t in 0..keep / 16 {
            let at = (r / 16) * 4 * k
                + (t / 8) * 512
                + (t % 8 / 2) * 128
                + (r % 16 / 8) * 64
                + (t % 2) * 32
                + (r % 8) * 4;
            for &b in &src[at..at + 4] {
                let mut o = 0u8;
                for j in 0..4 {
                    let f = (b >> (2 * j)) & 3;
                    if f == 0 {
                        return Err(bad(format!(
                            "an int2 code 0 at row {r}: not a ternary code"
                        )));
                    }
                    o |= (f - 1) << (2 * j);
                }
                out.push(o);
            }
        }
    }
    Ok(out)
}

/// `name` replaced by our packed codes of a `[n, k]` matrix.
fn replace_codes(
    file: &mut GgufFile,
    name: &str,
    n: usize,
    k: usize,
    codes: Vec<u8>,
) -> Result<()> {
    file.retain_tensors(|t| t != name);
    file.add_tensor(name, GgmlType::I8, &[(k / 4) as u64, n as u64], codes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::ternary;

    /// Ladder tiles made from the closed form of vla.cpp's `pack_ladder_int2`, element by
    /// element, read back as our layout of the same codes.
    #[test]
    fn ladder_tiles_repack_to_our_layout() {
        let (n, k, keep) = (32, 256, 240);
        let code = |r: usize, c: usize| ((r * 7 + c * 3 + r * c) % 3) as i8 - 1;
        let mut tiles = vec![0u8; n * k / 4];
        for r in 0..n {
            for c in 0..k {
                let byte = (r / 16) * 4 * k
                    + (c / 128) * 512
                    + (c % 128 / 32) * 128
                    + (r % 16 / 8) * 64
                    + (c % 32 / 16) * 32
                    + (r % 8) * 4
                    + c % 4;
                let v = if c < keep { code(r, c) } else { 0 };
                tiles[byte] |= ((v + 2) as u8) << (2 * ((c % 16) / 4));
            }
        }
        let ours = ladder_to_rows(&tiles, n, k, keep, 0..n).unwrap();
        let want: Vec<i8> = (0..n)
            .flat_map(|r| (0..keep).map(move |c| code(r, c)))
            .collect();
        assert_eq!(ternary::unpack(&ours).unwrap(), want);
        let upper = ladder_to_rows(&tiles, n, k, keep, 16..32).unwrap();
        assert_eq!(ternary::unpack(&upper).unwrap(), want[16 * keep..]);
        tiles[5] &= !0b11;
        assert!(ladder_to_rows(&tiles, n, k, keep, 0..n).is_err());
    }
}
