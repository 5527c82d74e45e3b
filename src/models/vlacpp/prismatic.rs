//! What vla.cpp's Prismatic layouts share, VLA-Adapter's ([`super::vla_adapter`]) and
//! OpenVLA-OFT's ([`super::openvla_oft`]): their converters write the towers, projector and
//! language model with `gguf_blocks.write_prismatic_tower` / `write_prismatic_lm` under our
//! keys, and the checkpoint's `dataset_statistics.json` as `statistics_json`. What differs
//! from ours:
//!
//! - the towers (`vis.d`, `vis.s`): `patch.{weight,bias}` (ours `patch_embd.*`), `pos`,
//!   `cls`, `reg` with their leading 1 (ours `pos_embd.weight` `[n, hidden]`,
//!   `class_embd.weight` `[hidden]`, `reg_embd.weight` `[registers, hidden]`), per block the
//!   fused `qkv` (split where it lies into `attn_{q,k,v}`), `proj` (ours `attn_o`), `ls1` /
//!   `ls2` (ours `.weight`); only the blocks used are stored (`vit.<tower>.layers`), as ours;
//! - no register count (`vis.d.reg`'s rows; vla.cpp fixes 4), and VLA-Adapter's file no
//!   `vit.num_images` (vla.cpp takes the views a request brings; we compile for
//!   [`VLACPP_IMAGES`] where the file does not say);
//! - the statistics: `statistics_json`, the whole `dataset_statistics.json` (suite ->
//!   `action` / `proprio` -> `q01`, `q99`, `mask`, ...), as ours: every suite's
//!   `state_{q01,q99,mask}.<suite>` and `action_*.<suite>`, the mask all ones where absent (the
//!   references' default). vla.cpp takes the first suite (or an environment variable's); we
//!   take the only one, or the one `--embodiment` names where there are several, as for our
//!   own files (the references' `unnorm_key`);
//! - no tokenizer: clients send token ids (the reference's prompt, as vla.cpp's client builds
//!   it); a text prompt is refused with a clear error.
//!
//! The derived keys the file states (`vit.<tower>.head_dim`, `vit.n_patches`, `vit.vdim` and
//! an arch's own, [`Layout::ratios`]) are checked against ours.

use crate::gguf::{GgufFile, Value};
use crate::{Error, Result};

use super::{u32_of, VLACPP_IMAGES};

/// One arch's vla.cpp Prismatic layout.
pub(super) struct Layout<'a> {
    /// `general.architecture`, the keys' prefix.
    pub arch: &'a str,
    /// The model's name in errors.
    pub model: &'a str,
    /// The arch's own derived keys, each `(key, numerator, denominator)`: the key's value is
    /// the ratio of the two others.
    pub ratios: &'a [(&'a str, &'a str, &'a str)],
}

/// Tensors only a vla.cpp-layout file has (ours: `patch_embd`, `attn_q`).
const MARKERS: [&str; 2] = ["vis.d.patch.weight", "vis.d.blk.0.qkv.weight"];

/// Whether `file` is in vla.cpp's Prismatic layout.
pub(super) fn is_vlacpp(file: &GgufFile) -> bool {
    MARKERS.iter().any(|n| file.tensor_info(n).is_ok())
}

/// `file` in our layout when it is in vla.cpp's ([`is_vlacpp`]): the keys, the towers, `own`
/// (what the arch's layout alone names otherwise), the statistics; otherwise as it is.
pub(super) fn translate(
    mut file: GgufFile,
    layout: &Layout,
    own: impl FnOnce(&mut GgufFile) -> Result<()>,
) -> Result<GgufFile> {
    if !is_vlacpp(&file) {
        return Ok(file);
    }
    let arch = layout.arch;
    tracing::info!("vla.cpp {arch} file: names, tables and statistics translated at load");
    keys(&mut file, layout)?;
    for (prefix, tower, dino) in [("vis.d", "dino", true), ("vis.s", "sig", false)] {
        tower_tensors(&mut file, arch, prefix, tower, dino)?;
    }
    own(&mut file)?;
    statistics(&mut file, arch)?;
    Ok(file)
}

/// The keys vla.cpp's file may lack, and the derived ones it states checked against ours.
fn keys(file: &mut GgufFile, layout: &Layout) -> Result<()> {
    let arch = layout.arch;
    let key = |k: &str| format!("{arch}.{k}");
    let u = |k: &str| file.get_u64(&key(k)).ok();
    let per = |a: Option<u64>, b: Option<u64>| a.zip(b).and_then(|(a, b)| a.checked_div(b));
    let grid = per(u("vit.image_size"), u("vit.patch_size"));
    let sum = u("vit.dino.hidden")
        .zip(u("vit.sig.hidden"))
        .map(|(a, b)| a + b);
    let mut derived = vec![
        (
            "vit.dino.head_dim",
            per(u("vit.dino.hidden"), u("vit.dino.heads")),
        ),
        (
            "vit.sig.head_dim",
            per(u("vit.sig.hidden"), u("vit.sig.heads")),
        ),
        ("vit.n_patches", grid.map(|g| g * g)),
        ("vit.vdim", sum),
    ];
    for &(k, num, den) in layout.ratios {
        derived.push((k, per(u(num), u(den))));
    }
    super::check_keys(file, (arch, layout.model), &[], &[], &derived)?;
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
fn tower_tensors(
    file: &mut GgufFile,
    arch: &str,
    prefix: &str,
    tower: &str,
    dino: bool,
) -> Result<()> {
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
                "vla.cpp's {arch} file: tensor {name:?} of ggml dims {dims:?}: expected {rank} dimension(s) and leading 1s"
            )));
        }
        file.reshape_tensor(&name, &dims[..rank])?;
        file.rename_tensor(&name, &p(ours))?;
    }
    for i in 0..file.get_u64(&format!("{arch}.vit.{tower}.layers"))? {
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
pub(super) fn statistics(file: &mut GgufFile, arch: &str) -> Result<()> {
    let k = format!("{arch}.statistics_json");
    let bad = |why: String| Error::InvalidArgument(format!("vla.cpp's {arch} file: {k}: {why}"));
    let text = match file.get(&k) {
        Some(v) => v.as_str().ok_or_else(|| bad("not a string".into()))?,
        None => {
            return Err(Error::InvalidArgument(format!(
                "vla.cpp's {arch} file has no {k}: vla-rs needs the suites' q01 / q99 statistics to normalise the state and unnormalise the actions (reconvert with the checkpoint's dataset_statistics.json)"
            )))
        }
    };
    let json: serde_json::Value =
        serde_json::from_str(text).map_err(|e| bad(format!("invalid JSON: {e}")))?;
    let suites = json
        .as_object()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| bad("expected an object of suites".into()))?;
    let dim = |what: &str| file.get_u64(&format!("{arch}.action.{what}_dim"));
    let dims = [
        ("state", "proprio", dim("proprio")?),
        ("action", "action", dim("action")?),
    ];
    let mut tensors = Vec::new();
    for (suite, s) in suites {
        for &(ours, theirs, dim) in &dims {
            let at = format!("{suite}.{theirs}");
            let stats = s.get(theirs).ok_or_else(|| bad(format!("{at}: missing")))?;
            for stat in ["q01", "q99", "mask"] {
                let v = match (stats.get(stat), stat) {
                    (None, "mask") => vec![1.0; dim as usize],
                    (None, _) => return Err(bad(format!("{at}: no {stat}"))),
                    (Some(v), _) => values(v)
                        .ok_or_else(|| bad(format!("{at}.{stat}: expected an array of numbers")))?,
                };
                if v.len() as u64 != dim {
                    let why = format!("{at}.{stat}: {} values, the model has {dim}", v.len());
                    return Err(bad(why));
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

/// A small vla.cpp-layout Prismatic file for the layouts' tests.
#[cfg(test)]
pub(super) mod testing {
    use crate::gguf::{GgmlType, GgufFile, GgufWriter};

    /// Two suites: `b`'s proprio without a mask, `a`'s with one.
    pub const STATS: &str = r#"{"b": {"action": {"q01": [0, 1], "q99": [2, 3], "mask": [true, false]},
        "proprio": {"q01": [4], "q99": [5]}}, "a": {"action": {"q01": [0, 0], "q99": [1, 1]},
        "proprio": {"q01": [0], "q99": [1], "mask": [false]}}}"#;

    /// `arch`'s file: towers of width 2 (one block each, 4 patches, 3 registers), action 2,
    /// proprio 1, `keys` (u32; replacing those) and `tensors` (ggml dims) besides; `stats` as
    /// `statistics_json`; `skip` a tensor left out. Every tensor holds 0, 1, 2, ...
    pub fn file(
        arch: &str,
        keys: &[(&str, u32)],
        tensors: &[(&str, Vec<u64>)],
        stats: Option<&str>,
        skip: &str,
    ) -> GgufFile {
        let mut w = GgufWriter::new();
        w.add_metadata("general.architecture", arch).unwrap();
        let towers = [
            ("vit.dino.hidden", 2u32),
            ("vit.dino.heads", 1),
            ("vit.dino.head_dim", 2),
            ("vit.dino.layers", 1),
            ("vit.sig.hidden", 2),
            ("vit.sig.heads", 1),
            ("vit.sig.layers", 1),
            ("vit.image_size", 2),
            ("vit.patch_size", 1),
            ("action.action_dim", 2),
            ("action.proprio_dim", 1),
        ];
        let base = towers
            .iter()
            .filter(|(k, _)| keys.iter().all(|(o, _)| o != k));
        for &(k, v) in base.chain(keys) {
            w.add_metadata(format!("{arch}.{k}"), v).unwrap();
        }
        if let Some(s) = stats {
            w.add_metadata(format!("{arch}.statistics_json"), s)
                .unwrap();
        }
        let mut all: Vec<(String, Vec<u64>)> = vec![
            ("vis.d.cls".into(), vec![2, 1, 1]),
            ("vis.d.reg".into(), vec![2, 3, 1]),
            ("vis.d.blk.0.ls1".into(), vec![2]),
            ("vis.d.blk.0.ls2".into(), vec![2]),
        ];
        for t in ["vis.d", "vis.s"] {
            all.extend([
                (format!("{t}.patch.weight"), vec![1, 1, 3, 2]),
                (format!("{t}.patch.bias"), vec![2]),
                (format!("{t}.pos"), vec![2, 4, 1]),
                (format!("{t}.blk.0.qkv.weight"), vec![2, 6]),
                (format!("{t}.blk.0.qkv.bias"), vec![6]),
                (format!("{t}.blk.0.proj.weight"), vec![2, 2]),
                (format!("{t}.blk.0.proj.bias"), vec![2]),
            ]);
        }
        all.extend(tensors.iter().map(|(n, d)| (n.to_string(), d.clone())));
        for (name, dims) in all.into_iter().filter(|(n, _)| n != skip) {
            let n = dims.iter().product::<u64>() as usize;
            let v: Vec<f32> = (0..n).map(|i| i as f32).collect();
            w.add_f32(name, GgmlType::F32, &dims, &v).unwrap();
        }
        GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap()
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{file, STATS};
    use super::*;

    const LAYOUT: Layout = Layout {
        arch: "prismatic_test",
        model: "a test model",
        ratios: &[("action.head_dim", "lm.hidden", "action.head_heads")],
    };

    fn translated(keys: &[(&str, u32)], stats: Option<&str>, skip: &str) -> Result<GgufFile> {
        let f = file(LAYOUT.arch, keys, &[], stats, skip);
        translate(f, &LAYOUT, |_| Ok(()))
    }

    #[test]
    fn translates_towers_keys_and_every_suite() {
        let f = translated(&[], Some(STATS), "").unwrap();
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
        let key = |k: &str| format!("{}.{k}", LAYOUT.arch);
        assert_eq!(f.get_u64(&key("vit.dino.registers")).unwrap(), 3);
        assert_eq!(f.get_u64(&key("vit.num_images")).unwrap(), 2);
        let v = |n: &str| f.dequantize(n).unwrap();
        assert_eq!(v("action_mask.b"), [1.0, 0.0]);
        assert_eq!(v("action_q99.b"), [2.0, 3.0]);
        assert_eq!(v("state_mask.b"), [1.0], "absent: all ones");
        assert_eq!(v("state_mask.a"), [0.0]);
        assert_eq!(crate::preprocess::normalize::embodiments(&f), ["a", "b"]);
        // our own layout passes as it is
        let again = translate(f, &LAYOUT, |_| panic!("not a vla.cpp file")).unwrap();
        assert!(again.tensor_info("vis.d.blk.0.attn_q.weight").is_ok());
        // a stated camera count is kept
        let f = translated(&[("vit.num_images", 1)], Some(STATS), "").unwrap();
        assert_eq!(f.get_u64(&key("vit.num_images")).unwrap(), 1);
    }

    #[test]
    fn refuses_bad_statistics_keys_and_missing_tensors_by_name() {
        let err = |stats: Option<&str>, skip: &str| {
            translated(&[], stats, skip).err().unwrap().to_string()
        };
        let e = err(None, "");
        assert!(e.contains("no prismatic_test.statistics_json"), "{e}");
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
        for missing in [
            "vis.s.blk.0.qkv.bias",
            "vis.d.reg",
            "vis.s.pos",
            "vis.d.blk.0.ls1",
        ] {
            let e = err(Some(STATS), missing);
            assert!(e.contains(missing), "{e}");
        }
        // a derived key, the towers' or the layout's own, that is not ours
        for keys in [
            &[("vit.n_patches", 5)][..],
            &[
                ("lm.hidden", 4),
                ("action.head_heads", 2),
                ("action.head_dim", 3),
            ],
        ] {
            let e = translated(keys, Some(STATS), "").err().unwrap().to_string();
            assert!(e.contains("vla-rs runs a test model with"), "{e}");
        }
    }
}
