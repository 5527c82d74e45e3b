//! FoldQuant GGUFs (vla.cpp's integer-quantized files, docs/FOLDQUANT.md): the
//! `<arch>.quant.*` metadata, the sites (`<site>.weight` I8 codes, `<site>.wscale` per
//! output row, optional `<site>.ascale`) with their load checks, the uncalibrated export
//! that `vla-quantize --type fq-*` writes, and dequant mode (every site back to an f32
//! matrix, run by the float graph; what vla.cpp does on Vulkan, Metal and OpenCL).
//! The exact per-site arithmetic is [`crate::ops::foldquant`].

mod export;
mod forms;

pub use export::{export, Scheme};
pub use forms::{dequantize_site, dequantized, integer_form, ternary_form, ternary_sites};

use crate::gguf::{GgmlType, GgufFile, TensorInfo, Value};
use crate::ops::foldquant::{qmax, rotation_block_for, unpack_int4, FoldOrder};
use crate::{Error, Result};

/// Which half of the model a site is in: `vlm.*` (the language model) or `aex.*` (the
/// action expert / head).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Module {
    Llm,
    Action,
}

impl Module {
    fn of(name: &str) -> Option<Module> {
        if name.starts_with("vlm.") || name.starts_with("lm.") {
            Some(Module::Llm)
        } else if name.starts_with("aex.") {
            Some(Module::Action)
        } else {
            None
        }
    }

    fn key(self) -> &'static str {
        match self {
            Module::Llm => "llm",
            Module::Action => "action",
        }
    }
}

/// One module's widths and nominal rotation block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Widths {
    pub weight_bits: u32,
    pub act_bits: u32,
    pub rot_block: usize,
}

/// A file's FoldQuant settings (`<arch>.quant.*`).
#[derive(Clone, Debug, PartialEq)]
pub struct FoldQuant {
    pub llm: Widths,
    pub action: Widths,
    pub fold_order: FoldOrder,
    /// `act_clip_ratio`: LLM sites with 4-bit activations only.
    pub clip: f32,
    /// `site_bits` overrides (`qkv`, `o`, `gateup`, `down`: LLM only), weight and
    /// activation width both.
    pub site_bits: Vec<(String, u32)>,
}

/// One quantized matrix of a file, checked.
#[derive(Clone, Debug, PartialEq)]
pub struct Site {
    /// `<site>` (the tensors are `<site>.weight`, `.wscale`, `.ascale`).
    pub name: String,
    pub module: Module,
    /// Inputs and outputs: the matrix is `[n, k]`.
    pub k: usize,
    pub n: usize,
    pub weight_bits: u32,
    pub act_bits: u32,
    /// The rotation block for `k` (1: none).
    pub block: usize,
    pub ascale: bool,
}

/// The projections that are quantized together (vla.cpp's group rule) for a site kind.
fn group(kind: &str) -> &'static [&'static str] {
    match kind {
        "qkv" => &["attn_q", "attn_k", "attn_v"],
        "gateup" => &["ffn_gate", "ffn_up"],
        _ => &[],
    }
}

/// `vlm.blk.0.attn_q` -> `vlm.blk.0`.
fn layer_of(site: &str) -> &str {
    site.rsplit_once('.').map_or(site, |(base, _)| base)
}

/// The kind of a site (vla.cpp's): `qkv`, `o`, `gateup`, `down` for a decoder layer's
/// projections (`site_bits` names those), `ffn0`, `ffn2` for a GR00T DiT block's FF.
fn site_kind(name: &str) -> Option<&'static str> {
    let last = name.rsplit('.').next()?;
    Some(match last {
        "attn_q" | "attn_k" | "attn_v" => "qkv",
        "attn_o" => "o",
        "ffn_gate" | "ffn_up" => "gateup",
        "ffn_down" => "down",
        "ff0" => "ffn0",
        "ff2" => "ffn2",
        _ => return None,
    })
}

/// Whether `name` (`<site>`, without `.weight`) is where vla.cpp quantizes: the language
/// model's and an expert's decoder layers (`vlm.blk.{i}.*`, `aex.blk.{i}.*`, and the OpenVLA
/// family's `lm.blk.{i}.*`: q, k, v, o, gate, up, down) and GR00T's DiT blocks (`aex.dit.{i}.*`: q, k, v, o, ff0, ff2). Towers,
/// GR00T's VL self-attention, adaLN and encoders stay float.
fn is_site_name(name: &str) -> bool {
    let mut parts = name.split('.');
    let (Some(module), Some(stack), Some(i), Some(last), None) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return false;
    };
    let kind = site_kind(last);
    i.parse::<usize>().is_ok()
        && match (module, stack) {
            ("vlm" | "aex" | "lm", "blk") => matches!(kind, Some("qkv" | "o" | "gateup" | "down")),
            ("aex", "dit") => matches!(kind, Some("qkv" | "o" | "ffn0" | "ffn2")),
            _ => false,
        }
}

fn bad(reason: String) -> Error {
    Error::InvalidArgument(format!("FoldQuant file: {reason}"))
}

impl FoldQuant {
    /// The settings of `file`, or `None` when it is no FoldQuant file (no
    /// `<arch>.quant.method`, and no I8 weight). Unknown methods, widths other than 4 and
    /// 8, rotation blocks that are not a power of two up to 64, and malformed `site_bits`
    /// are errors.
    pub fn read(file: &GgufFile) -> Result<Option<FoldQuant>> {
        let arch = file.architecture()?;
        let key = |k: &str| format!("{arch}.quant.{k}");
        // ternary matrices (BitVLA's) are not FoldQuant sites
        let ternary = ternary_sites(file);
        let has_i8 = (file.tensors().iter()).any(|t| {
            let site = t.name.strip_suffix(".weight").unwrap_or(&t.name);
            t.ty == GgmlType::I8 && !ternary.iter().any(|s| s == site)
        });
        match file.get(&key("method")) {
            // vla.cpp's BitVLA files say so
            Some(Value::String(m)) if m == "absmean_ternary+per_token_int8" && !has_i8 => {
                return Ok(None)
            }
            None if has_i8 => {
                return Err(bad(format!(
                    "I8 weights without {} (not a FoldQuant file)",
                    key("method")
                )))
            }
            None => return Ok(None),
            Some(_) => {
                let m = file.get_str(&key("method"))?;
                if m != "foldquant" {
                    return Err(bad(format!(
                        "{} is {m:?}, not \"foldquant\"",
                        key("method")
                    )));
                }
            }
        }
        let u32_or = |k: &str, default: u64| -> Result<u64> {
            match file.get(&key(k)) {
                Some(_) => file.get_u64(&key(k)),
                None => Ok(default),
            }
        };
        let widths = |m: Module| -> Result<Widths> {
            let p = m.key();
            let bits = |k: String| -> Result<u32> {
                match u32_or(&k, 8)? {
                    b @ (4 | 8) => Ok(b as u32),
                    // a module left out says 16 / 32; it has no sites (checked in `sites`)
                    b @ (16 | 32) => Ok(b as u32),
                    b => Err(bad(format!("{} = {b}: expected 4 or 8", key(&k)))),
                }
            };
            let rot = u32_or(&format!("{p}_rot_block_size"), 64)?;
            if rot > 64 || (rot > 1 && !rot.is_power_of_two()) {
                return Err(bad(format!(
                    "{} = {rot}: expected a power of two up to 64",
                    key(&format!("{p}_rot_block_size"))
                )));
            }
            Ok(Widths {
                weight_bits: bits(format!("{p}_weight_bits"))?,
                act_bits: bits(format!("{p}_act_bits"))?,
                rot_block: rot as usize,
            })
        };
        let fold_order = match file.get(&key("action_fold_order")) {
            Some(_) if file.get_str(&key("action_fold_order"))? == "before" => FoldOrder::Before,
            _ => FoldOrder::After,
        };
        let clip = match file.get(&key("act_clip_ratio")) {
            Some(_) => file.get_f64(&key("act_clip_ratio"))? as f32,
            None => 1.0,
        };
        let clip = if clip > 0.0 && clip.is_finite() {
            clip
        } else {
            1.0
        };
        let mut site_bits = Vec::new();
        if file.get(&key("site_bits")).is_some() {
            for item in file.get_str(&key("site_bits"))?.split(',') {
                let item = item.trim();
                if item.is_empty() {
                    continue;
                }
                let parsed = item.split_once(':').and_then(|(k, b)| {
                    let b = b
                        .trim()
                        .parse::<u32>()
                        .ok()
                        .filter(|b| [4, 8].contains(b))?;
                    let k = k.trim();
                    ["qkv", "o", "gateup", "down"]
                        .contains(&k)
                        .then(|| (k.to_owned(), b))
                });
                match parsed {
                    Some(p) => site_bits.push(p),
                    None => {
                        return Err(bad(format!(
                            "{}: {item:?} is not <qkv|o|gateup|down>:<4|8>",
                            key("site_bits")
                        )))
                    }
                }
            }
        }
        Ok(Some(FoldQuant {
            llm: widths(Module::Llm)?,
            action: widths(Module::Action)?,
            fold_order,
            clip,
            site_bits,
        }))
    }

    /// Every site of `file`, checked: I8 codes `[n, k]` (INT4: `[n, k / 2]`) with k and n
    /// multiples of 64, codes in `+-qmax` (vla.cpp does not check; -128 and the nibble 0x8
    /// are refused here), `wscale` `[n]` F32 finite, `ascale` `[k]` F32 finite and nonzero on
    /// action sites only, and q/k/v and gate/up of a layer all quantized or all float.
    pub fn sites(&self, file: &GgufFile) -> Result<Vec<Site>> {
        let mut sites = Vec::new();
        for t in file.tensors() {
            if t.ty != GgmlType::I8 {
                continue;
            }
            let name = t
                .name
                .strip_suffix(".weight")
                .ok_or_else(|| bad(format!("I8 tensor {:?} is no <site>.weight", t.name)))?;
            sites.push(self.site(file, name, t)?);
        }
        for s in &sites {
            let Some(kind) = site_kind(&s.name) else {
                continue;
            };
            for member in group(kind) {
                let w = format!("{}.{member}.weight", layer_of(&s.name));
                if let Ok(info) = file.tensor_info(&w) {
                    if info.ty != GgmlType::I8 {
                        return Err(bad(format!(
                            "{} is quantized but {w} is {}: a layer's {kind} are all quantized or all float",
                            s.name, info.ty
                        )));
                    }
                }
            }
        }
        Ok(sites)
    }

    /// The widths of a site: the module's, or the `site_bits` override (LLM).
    fn widths(&self, module: Module, name: &str) -> Widths {
        let mut w = match module {
            Module::Llm => self.llm,
            Module::Action => self.action,
        };
        if module == Module::Llm {
            let kind = site_kind(name);
            if let Some((_, b)) = self
                .site_bits
                .iter()
                .find(|(k, _)| Some(k.as_str()) == kind)
            {
                (w.weight_bits, w.act_bits) = (*b, *b);
            }
        }
        w
    }

    fn site(&self, file: &GgufFile, name: &str, t: &TensorInfo) -> Result<Site> {
        let module = Module::of(name).ok_or_else(|| {
            bad(format!("site {name:?} is in neither the language model (vlm.) nor the action module (aex.)"))
        })?;
        let w = self.widths(module, name);
        if ![4, 8].contains(&w.weight_bits) || ![4, 8].contains(&w.act_bits) {
            return Err(bad(format!(
                "site {name:?}: its module's widths are {} / {} bits (a module left out has no sites)",
                w.weight_bits, w.act_bits
            )));
        }
        let [packed, n] = t.dims[..] else {
            return Err(bad(format!(
                "{}: {} dims, expected 2",
                t.name,
                t.dims.len()
            )));
        };
        let (n, k) = (
            n as usize,
            packed as usize * if w.weight_bits == 4 { 2 } else { 1 },
        );
        if k % 64 != 0 || n % 64 != 0 {
            return Err(bad(format!(
                "site {name:?} is {n} x {k}: both must be multiples of 64"
            )));
        }
        let q = qmax(w.weight_bits);
        let bytes = file.tensor_bytes(t);
        let codes: Vec<i8> = match w.weight_bits {
            4 => unpack_int4(bytes),
            _ => bytes.iter().map(|&b| b as i8).collect(),
        };
        if let Some(c) = codes.iter().find(|&&c| i32::from(c).abs() > q) {
            return Err(bad(format!(
                "site {name:?}: code {c} outside +-{q} for {} bits",
                w.weight_bits
            )));
        }
        let vector = |suffix: &str, len: usize, required: bool| -> Result<bool> {
            let tname = format!("{name}.{suffix}");
            let Ok(info) = file.tensor_info(&tname) else {
                return match required {
                    true => Err(bad(format!("site {name:?} has no {tname}"))),
                    false => Ok(false),
                };
            };
            if info.ty != GgmlType::F32 || info.dims != [len as u64] {
                return Err(bad(format!(
                    "{tname} is {} {:?}, expected F32 [{len}]",
                    info.ty, info.dims
                )));
            }
            let v = file.dequantize(&tname)?;
            let ok = |x: &f32| x.is_finite() && (suffix == "wscale" || *x != 0.0);
            if let Some(x) = v.iter().find(|x| !ok(x)) {
                return Err(bad(format!("{tname} holds {x}")));
            }
            Ok(true)
        };
        vector("wscale", n, true)?;
        let ascale = vector("ascale", k, false)?;
        if ascale && module == Module::Llm {
            return Err(bad(format!(
                "{name}.ascale: language-model sites carry no ascale (their smoothing is folded into the norms)"
            )));
        }
        Ok(Site {
            name: name.to_owned(),
            module,
            k,
            n,
            weight_bits: w.weight_bits,
            act_bits: w.act_bits,
            block: rotation_block_for(k, w.rot_block.max(1)),
            ascale,
        })
    }
}
