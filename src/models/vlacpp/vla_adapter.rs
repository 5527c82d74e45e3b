//! VLA-Adapter files (`convert_vla_adapter_to_gguf.py` with `gguf_blocks.py`'s
//! `write_prismatic_tower` and `write_prismatic_lm`): the keys are ours (the same
//! `vla_adapter.` names, ours taken from vla.cpp), the language model, projector and head
//! tensors too; what differs:
//!
//! - the towers (`vis.d`, `vis.s`): `patch.{weight,bias}` (ours `patch_embd.*`), `pos`,
//!   `cls`, `reg` with their leading 1 (ours `pos_embd.weight` `[n, hidden]`,
//!   `class_embd.weight` `[hidden]`, `reg_embd.weight` `[registers, hidden]`), per block the
//!   fused `qkv` (split where it lies into `attn_{q,k,v}`), `proj` (ours `attn_o`), `ls1` /
//!   `ls2` (ours `.weight`); only the blocks used are stored (`vit.<tower>.layers`), as ours;
//! - the head's `aex.head.blk.{i}.gating` (ours `gating.weight`);
//! - no `vit.num_images` (vla.cpp takes the views a request brings; we compile for
//!   [`VLACPP_IMAGES`]) and no register count (`vis.d.reg`'s rows; vla.cpp fixes 4);
//! - the statistics: `statistics_json`, the checkpoint's whole `dataset_statistics.json`
//!   (suite -> `action` / `proprio` -> `q01`, `q99`, `mask`, ...), as ours: every suite's
//!   `state_{q01,q99,mask}.<suite>` and `action_*.<suite>`, the mask all ones where absent (the
//!   reference's default). vla.cpp takes the first suite (or `$VLA_ADAPTER_UNNORM_KEY`); we
//!   take the only one, or the one `--embodiment` names where there are several, as for our
//!   own files (the reference's `unnorm_key`);
//! - no tokenizer: clients send token ids (the reference's chat-templated prompt, as vla.cpp's
//!   client builds it); a text prompt is refused with a clear error.
//!
//! Tensors vla.cpp's file holds that the graphs do not read stay unread. vla.cpp itself
//! departs from the reference in two ways that we do not copy: it feeds the proprio state
//! raw, where the reference normalises it with the suite's q01 / q99 (we do), and it computes
//! the head's rotary table in f64, where the reference's bf16 head rounds it (we use the
//! reference's table, [`crate::models::vla_adapter::graphs::pair_tables`]). A vla.cpp file
//! served here therefore gives the reference's chunk, not vla.cpp's.

use crate::gguf::{GgufFile, Value};
use crate::models::vla_adapter::ARCH;
use crate::{Error, Result};

use super::{u32_of, VLACPP_IMAGES};

fn key(k: &str) -> String {
    format!("{ARCH}.{k}")
}

/// Tensors only a vla.cpp-layout file has (ours: `patch_embd`, `attn_q`).
const MARKERS: [&str; 2] = ["vis.d.patch.weight", "vis.d.blk.0.qkv.weight"];

/// Whether `file` is in vla.cpp's `vla_adapter` layout.
pub fn is_vlacpp(file: &GgufFile) -> bool {
    MARKERS.iter().any(|n| file.tensor_info(n).is_ok())
}

/// `file` in our layout when it is in vla.cpp's ([`is_vlacpp`]); otherwise as it is.
pub(crate) fn translate(mut file: GgufFile) -> Result<GgufFile> {
    if !is_vlacpp(&file) {
        return Ok(file);
    }
    tracing::info!("vla.cpp {ARCH} file: names, tables and statistics translated at load");
    keys(&mut file)?;
    for (prefix, tower, dino) in [("vis.d", "dino", true), ("vis.s", "sig", false)] {
        tower_tensors(&mut file, prefix, tower, dino)?;
    }
    for i in 0..file.get_u64(&key("action.head_blocks"))? {
        let blk = format!("aex.head.blk.{i}");
        let gate = format!("{blk}.gating");
        file.reshape_tensor(&gate, &[1])?;
        file.rename_tensor(&gate, &format!("{blk}.gating.weight"))?;
    }
    statistics(&mut file)?;
    Ok(file)
}

/// The keys vla.cpp's file lacks, and the derived ones it states checked against ours.
fn keys(file: &mut GgufFile) -> Result<()> {
    let u = |k: &str| file.get_u64(&key(k)).ok();
    let per = |a: Option<u64>, b: Option<u64>| a.zip(b).and_then(|(a, b)| a.checked_div(b));
    let grid = per(u("vit.image_size"), u("vit.patch_size"));
    let derived = [
        (
            "vit.dino.head_dim",
            per(u("vit.dino.hidden"), u("vit.dino.heads")),
        ),
        (
            "vit.sig.head_dim",
            per(u("vit.sig.hidden"), u("vit.sig.heads")),
        ),
        ("vit.n_patches", grid.map(|g| g * g)),
        (
            "vit.vdim",
            u("vit.dino.hidden")
                .zip(u("vit.sig.hidden"))
                .map(|(a, b)| a + b),
        ),
        (
            "action.head_dim",
            per(u("lm.hidden"), u("action.head_heads")),
        ),
    ];
    super::check_keys(file, (ARCH, "VLA-Adapter"), &[], &[], &derived)?;
    if file.get(&key("vit.num_images")).is_none() {
        let n = Value::U32(VLACPP_IMAGES as u32);
        file.set_metadata(key("vit.num_images"), n);
    }
    if file.get(&key("vit.dino.registers")).is_none() {
        let dims = &file.tensor_info("vis.d.reg")?.dims;
        let rows = match dims[..] {
            [_, r, ..] => r,
            _ => 1,
        };
        let rows = Value::U32(u32_of("vis.d.reg rows", rows)?);
        file.set_metadata(key("vit.dino.registers"), rows);
    }
    Ok(())
}

/// One tower's tensors under `prefix` as ours (`tower`: its keys' name; `dino`: the class
/// and register tokens and LayerScale).
fn tower_tensors(file: &mut GgufFile, prefix: &str, tower: &str, dino: bool) -> Result<()> {
    let p = |n: &str| format!("{prefix}.{n}");
    for x in ["weight", "bias"] {
        file.rename_tensor(&p(&format!("patch.{x}")), &p(&format!("patch_embd.{x}")))?;
    }
    // (vla.cpp's name, ours, our rank): stored with their leading 1s (`[1, rows, width]`)
    let mut tables = vec![("pos", "pos_embd.weight", 2)];
    if dino {
        tables.extend([
            ("cls", "class_embd.weight", 1),
            ("reg", "reg_embd.weight", 2),
        ]);
    }
    for (theirs, ours, rank) in tables {
        let name = p(theirs);
        let dims = file.tensor_info(&name)?.dims.clone();
        // ggml order: the leading 1s are the trailing dimensions
        if dims.len() < rank || dims[rank..].iter().any(|&d| d != 1) {
            return Err(Error::InvalidArgument(format!(
                "vla.cpp's {ARCH} file: tensor {name:?} of ggml dims {dims:?}: expected {rank} dimension(s) and leading 1s"
            )));
        }
        file.reshape_tensor(&name, &dims[..rank])?;
        file.rename_tensor(&name, &p(ours))?;
    }
    for i in 0..file.get_u64(&key(&format!("vit.{tower}.layers")))? {
        let blk = p(&format!("blk.{i}"));
        for x in ["weight", "bias"] {
            let parts = ["q", "k", "v"].map(|q| format!("{blk}.attn_{q}.{x}"));
            file.split_outer(&format!("{blk}.qkv.{x}"), &parts)?;
            file.rename_tensor(&format!("{blk}.proj.{x}"), &format!("{blk}.attn_o.{x}"))?;
        }
        if dino {
            for ls in ["ls1", "ls2"] {
                file.rename_tensor(&format!("{blk}.{ls}"), &format!("{blk}.{ls}.weight"))?;
            }
        }
    }
    Ok(())
}

/// `statistics_json` as every suite's `state_*.<suite>` and `action_*.<suite>` tensors.
fn statistics(file: &mut GgufFile) -> Result<()> {
    let k = key("statistics_json");
    let text = match file.get(&k) {
        Some(v) => v.as_str().ok_or_else(|| bad(&k, "not a string".into()))?,
        None => {
            return Err(Error::InvalidArgument(format!(
                "vla.cpp's {ARCH} file has no {k}: vla-rs needs the suites' q01 / q99 statistics to normalise the state and unnormalise the actions (reconvert with the checkpoint's dataset_statistics.json)"
            )))
        }
    };
    let json: serde_json::Value =
        serde_json::from_str(text).map_err(|e| bad(&k, format!("invalid JSON: {e}")))?;
    let suites = json
        .as_object()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| bad(&k, "expected an object of suites".into()))?;
    let dims = [
        (
            "state",
            "proprio",
            file.get_u64(&key("action.proprio_dim"))?,
        ),
        ("action", "action", file.get_u64(&key("action.action_dim"))?),
    ];
    let mut tensors = Vec::new();
    for (suite, s) in suites {
        for &(ours, theirs, dim) in &dims {
            let at = format!("{suite}.{theirs}");
            let stats = s
                .get(theirs)
                .ok_or_else(|| bad(&k, format!("{at}: missing")))?;
            for stat in ["q01", "q99", "mask"] {
                let v = match (stats.get(stat), stat) {
                    (None, "mask") => vec![1.0; dim as usize],
                    (None, _) => return Err(bad(&k, format!("{at}: no {stat}"))),
                    (Some(v), _) => values(v).ok_or_else(|| {
                        bad(&k, format!("{at}.{stat}: expected an array of numbers"))
                    })?,
                };
                if v.len() as u64 != dim {
                    let why = format!("{at}.{stat}: {} values, the model has {dim}", v.len());
                    return Err(bad(&k, why));
                }
                tensors.push((format!("{ours}_{stat}.{suite}"), v));
            }
        }
    }
    for (name, v) in tensors {
        file.add_tensor_f32(&name, &[v.len() as u64], &v)?;
    }
    Ok(())
}

/// A JSON array of numbers or booleans (a mask) as f32 values.
fn values(v: &serde_json::Value) -> Option<Vec<f32>> {
    v.as_array()?
        .iter()
        .map(|x| match x {
            serde_json::Value::Bool(b) => Some(f32::from(u8::from(*b))),
            _ => x.as_f64().map(|f| f as f32),
        })
        .collect()
}

fn bad(key: &str, why: String) -> Error {
    Error::InvalidArgument(format!("vla.cpp's {ARCH} file: {key}: {why}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::{GgmlType, GgufWriter};

    const STATS: &str = r#"{"b": {"action": {"q01": [0, 1], "q99": [2, 3], "mask": [true, false]},
        "proprio": {"q01": [4], "q99": [5]}}, "a": {"action": {"q01": [0, 0], "q99": [1, 1]},
        "proprio": {"q01": [0], "q99": [1], "mask": [false]}}}"#;

    /// A vla.cpp-layout file: towers of width 2 (one block), one head block; `skip` a tensor
    /// left out.
    fn file(stats: Option<&str>, skip: &str) -> GgufFile {
        let mut w = GgufWriter::new();
        w.add_metadata("general.architecture", ARCH).unwrap();
        for (k, v) in [
            ("vit.dino.hidden", 2u32),
            ("vit.dino.heads", 1),
            ("vit.dino.head_dim", 2),
            ("vit.dino.layers", 1),
            ("vit.sig.hidden", 2),
            ("vit.sig.heads", 1),
            ("vit.sig.layers", 1),
            ("vit.image_size", 2),
            ("vit.patch_size", 1),
            ("lm.hidden", 4),
            ("action.head_heads", 2),
            ("action.head_blocks", 1),
            ("action.action_dim", 2),
            ("action.proprio_dim", 1),
        ] {
            w.add_metadata(key(k), v).unwrap();
        }
        if let Some(s) = stats {
            w.add_metadata(key("statistics_json"), s).unwrap();
        }
        let mut tensors: Vec<(&str, Vec<u64>)> = vec![
            ("vis.d.cls", vec![2, 1, 1]),
            ("vis.d.reg", vec![2, 3, 1]),
            ("aex.head.blk.0.gating", vec![1]),
        ];
        for t in ["vis.d", "vis.s"] {
            let n = |s: &str| -> &'static str { Box::leak(format!("{t}.{s}").into_boxed_str()) };
            tensors.extend([
                (n("patch.weight"), vec![1, 1, 3, 2]),
                (n("patch.bias"), vec![2]),
                (n("pos"), vec![2, 4, 1]),
                (n("blk.0.qkv.weight"), vec![2, 6]),
                (n("blk.0.qkv.bias"), vec![6]),
                (n("blk.0.proj.weight"), vec![2, 2]),
                (n("blk.0.proj.bias"), vec![2]),
            ]);
        }
        tensors.extend([("vis.d.blk.0.ls1", vec![2]), ("vis.d.blk.0.ls2", vec![2])]);
        for (name, dims) in tensors.into_iter().filter(|(n, _)| *n != skip) {
            let n = dims.iter().product::<u64>() as usize;
            let v: Vec<f32> = (0..n).map(|i| i as f32).collect();
            w.add_f32(name.to_owned(), GgmlType::F32, &dims, &v)
                .unwrap();
        }
        GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap()
    }

    #[test]
    fn translates_names_tables_keys_and_every_suite() {
        let f = translate(file(Some(STATS), "")).unwrap();
        let shape = |n: &str| f.tensor_info(n).unwrap().shape();
        assert_eq!(shape("vis.d.class_embd.weight"), [2]);
        assert_eq!(shape("vis.d.reg_embd.weight"), [3, 2]);
        assert_eq!(shape("vis.s.pos_embd.weight"), [4, 2]);
        assert_eq!(shape("vis.s.patch_embd.weight"), [2, 3, 1, 1]);
        assert_eq!(
            f.dequantize("vis.d.blk.0.attn_k.weight").unwrap(),
            [4.0, 5.0, 6.0, 7.0]
        );
        assert_eq!(f.dequantize("vis.s.blk.0.attn_v.bias").unwrap(), [4.0, 5.0]);
        for n in ["vis.d.blk.0.attn_o.bias", "vis.d.blk.0.ls2.weight"] {
            assert!(f.tensor_info(n).is_ok(), "{n}");
        }
        assert_eq!(shape("aex.head.blk.0.gating.weight"), [1]);
        assert_eq!(f.get_u64(&key("vit.dino.registers")).unwrap(), 3);
        assert_eq!(f.get_u64(&key("vit.num_images")).unwrap(), 2);
        let v = |n: &str| f.dequantize(n).unwrap();
        assert_eq!(v("action_mask.b"), [1.0, 0.0]);
        assert_eq!(v("action_q99.b"), [2.0, 3.0]);
        assert_eq!(v("state_mask.b"), [1.0], "absent: all ones");
        assert_eq!(v("state_mask.a"), [0.0]);
        assert_eq!(crate::preprocess::normalize::embodiments(&f), ["a", "b"]);
        // our own layout passes as it is
        let again = translate(f).unwrap();
        assert!(again.tensor_info("vis.d.blk.0.attn_q.weight").is_ok());
    }

    #[test]
    fn refuses_bad_statistics_and_missing_tensors_by_name() {
        let err = |stats: Option<&str>, skip: &str| {
            translate(file(stats, skip)).err().unwrap().to_string()
        };
        let e = err(None, "");
        assert!(e.contains("no vla_adapter.statistics_json"), "{e}");
        let e = err(Some("{not json"), "");
        assert!(e.contains("statistics_json: invalid JSON"), "{e}");
        let e = err(Some("[1]"), "");
        assert!(e.contains("an object of suites"), "{e}");
        let short = STATS.replace("\"q99\": [2, 3]", "\"q99\": [2]");
        let e = err(Some(&short), "");
        assert!(e.contains("b.action.q99: 1 values, the model has 2"), "{e}");
        let e = err(
            Some(&STATS.replace("\"proprio\": {\"q01\": [4], \"q99\": [5]}", "\"x\": 1")),
            "",
        );
        assert!(e.contains("b.proprio: missing"), "{e}");
        let e = err(Some(&STATS.replace("[4]", "[\"4\"]")), "");
        assert!(
            e.contains("b.proprio.q01: expected an array of numbers"),
            "{e}"
        );
        let e = err(Some(STATS), "vis.s.blk.0.qkv.bias");
        assert!(e.contains("vis.s.blk.0.qkv.bias"), "{e}");
        let e = err(Some(STATS), "vis.d.reg");
        assert!(e.contains("vis.d.reg"), "{e}");
        let e = err(Some(STATS), "vis.s.pos");
        assert!(e.contains("vis.s.pos"), "{e}");
    }
}
