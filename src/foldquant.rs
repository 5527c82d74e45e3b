//! FoldQuant GGUFs (vla.cpp's integer-quantized files, docs/FOLDQUANT.md): the
//! `<arch>.quant.*` metadata, the sites (`<site>.weight` I8 codes, `<site>.wscale` per
//! output row, optional `<site>.ascale`) with their load checks, the uncalibrated export
//! that `vla-quantize --type fq-*` writes, and dequant mode (every site back to an f32
//! matrix, run by the float graph; what vla.cpp does on Vulkan, Metal and OpenCL).
//! The exact per-site arithmetic is [`crate::ops::foldquant`].

use crate::gguf::{GgmlType, GgufFile, GgufWriter, TensorInfo};
use crate::ops::foldquant::{
    export_weight, pack_int4, qmax, rotate, rotation_block_for, unpack_int4, FoldOrder,
};
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
        if name.starts_with("vlm.") {
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

/// The `site_bits` kind of a site: `qkv`, `o`, `gateup`, `down`.
fn site_kind(name: &str) -> Option<&'static str> {
    let last = name.rsplit('.').next()?;
    Some(match last {
        "attn_q" | "attn_k" | "attn_v" => "qkv",
        "attn_o" => "o",
        "ffn_gate" | "ffn_up" => "gateup",
        "ffn_down" => "down",
        _ => return None,
    })
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
        let has_i8 = file.tensors().iter().any(|t| t.ty == GgmlType::I8);
        match file.get(&key("method")) {
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
            let Some(kind @ ("qkv" | "gateup")) = site_kind(&s.name) else {
                continue;
            };
            let base = &s.name[..s.name.rfind('.').expect("a site kind has a dot")];
            let group: &[&str] = match kind {
                "qkv" => &["attn_q", "attn_k", "attn_v"],
                _ => &["ffn_gate", "ffn_up"],
            };
            for member in group {
                let w = format!("{base}.{member}.weight");
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

/// The f32 `[n, k]` matrix a site stands for (dequant mode): per row `code * wscale`, then
/// back to the float frame: the rotation (its own inverse), and the division by `ascale`
/// on the side of the rotation the fold order says.
pub fn dequantize_site(file: &GgufFile, site: &Site, order: FoldOrder) -> Result<Vec<f32>> {
    let t = file.tensor_info(&format!("{}.weight", site.name))?;
    let bytes = file.tensor_bytes(t);
    let codes: Vec<i8> = match site.weight_bits {
        4 => unpack_int4(bytes),
        _ => bytes.iter().map(|&b| b as i8).collect(),
    };
    let wscale = file.dequantize(&format!("{}.wscale", site.name))?;
    let ascale = match site.ascale {
        true => Some(file.dequantize(&format!("{}.ascale", site.name))?),
        false => None,
    };
    let divide = |row: &mut [f32]| {
        if let Some(a) = &ascale {
            row.iter_mut().zip(a).for_each(|(v, s)| *v /= s);
        }
    };
    let mut out = Vec::with_capacity(site.n * site.k);
    for (row, &ws) in codes.chunks(site.k).zip(&wscale) {
        let mut r: Vec<f32> = row.iter().map(|&c| f32::from(c) * ws).collect();
        if order == FoldOrder::After {
            divide(&mut r);
        }
        rotate(&mut r, site.block);
        if order == FoldOrder::Before {
            divide(&mut r);
        }
        out.extend(r);
    }
    Ok(out)
}

/// `file` with every FoldQuant site replaced by its f32 matrix ([`dequantize_site`]) and
/// the `wscale` / `ascale` vectors dropped: a float file the ordinary graphs run.
pub fn dequantized(file: &GgufFile, fq: &FoldQuant) -> Result<GgufFile> {
    let sites = fq.sites(file)?;
    let mut w = GgufWriter::new();
    for (k, v) in file.metadata() {
        w.add_metadata(k.clone(), v.clone())?;
    }
    let site_of = |tensor: &str| {
        sites
            .iter()
            .find(|s| tensor.starts_with(&format!("{}.", s.name)))
    };
    for t in file.tensors() {
        match site_of(&t.name) {
            Some(s) if t.name == format!("{}.weight", s.name) => {
                let v = dequantize_site(file, s, fq.fold_order)?;
                w.add_f32(t.name.clone(), GgmlType::F32, &[s.k as u64, s.n as u64], &v)?;
            }
            Some(s) if t.name == format!("{}.wscale", s.name) => {}
            Some(s) if t.name == format!("{}.ascale", s.name) => {}
            _ => w.add_tensor(t.name.clone(), t.ty, &t.dims, file.tensor_bytes(t))?,
        }
    }
    GgufFile::from_bytes(w.to_bytes()?)
}

/// `file` in the form the integer path runs ([`crate::graph::Op::FqLinear`]): every site's
/// codes one a byte (`[n, k]` I8; INT4 unpacked), its `wscale` and `ascale` as stored, and
/// `<site>.fq` F32 `[weight_bits, act_bits, block, clip, fold]` (fold 0: no `ascale`, 1:
/// before, 2: after), which the graph builder reads when a matmul meets an I8 matrix.
pub fn integer_form(file: &GgufFile, fq: &FoldQuant) -> Result<GgufFile> {
    let sites = fq.sites(file)?;
    let mut w = GgufWriter::new();
    for (k, v) in file.metadata() {
        w.add_metadata(k.clone(), v.clone())?;
    }
    for t in file.tensors() {
        let site = t
            .name
            .strip_suffix(".weight")
            .and_then(|n| sites.iter().find(|s| s.name == n));
        let Some(s) = site else {
            w.add_tensor(t.name.clone(), t.ty, &t.dims, file.tensor_bytes(t))?;
            continue;
        };
        let bytes = match s.weight_bits {
            4 => unpack_int4(file.tensor_bytes(t))
                .into_iter()
                .map(|c| c as u8)
                .collect(),
            _ => file.tensor_bytes(t).to_vec(),
        };
        w.add_tensor(
            t.name.clone(),
            GgmlType::I8,
            &[s.k as u64, s.n as u64],
            bytes,
        )?;
        let fold = match (s.ascale, fq.fold_order) {
            (false, _) => 0.0,
            (true, FoldOrder::Before) => 1.0,
            (true, FoldOrder::After) => 2.0,
        };
        // clip applies to language-model sites with 4-bit activations only
        let clip = if s.module == Module::Llm && s.act_bits == 4 {
            fq.clip
        } else {
            1.0
        };
        let params = [
            s.weight_bits as f32,
            s.act_bits as f32,
            s.block as f32,
            clip,
            fold,
        ];
        w.add_f32(format!("{}.fq", s.name), GgmlType::F32, &[5], &params)?;
    }
    GgufFile::from_bytes(w.to_bytes()?)
}

/// What `vla-quantize --type fq-*` writes: weight and activation widths.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    W8A8,
    W4A8,
    W4A4,
}

impl Scheme {
    /// `fq-w8a8`, `fq-w4a8`, `fq-w4a4` (any case).
    pub fn parse(s: &str) -> Option<Scheme> {
        match s.to_ascii_lowercase().as_str() {
            "fq-w8a8" => Some(Scheme::W8A8),
            "fq-w4a8" => Some(Scheme::W4A8),
            "fq-w4a4" => Some(Scheme::W4A4),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Scheme::W8A8 => "fq-w8a8",
            Scheme::W4A8 => "fq-w4a8",
            Scheme::W4A4 => "fq-w4a4",
        }
    }

    fn bits(self) -> (u32, u32) {
        match self {
            Scheme::W8A8 => (8, 8),
            Scheme::W4A8 => (4, 8),
            Scheme::W4A4 => (4, 4),
        }
    }
}

/// The sites an export quantizes: the float `<site>.weight` matrices of the language model
/// and the action module named like decoder projections, `k` and `n` multiples of 64, and
/// a layer's q/k/v (gate/up) only when all of them qualify (vla.cpp's group rule).
fn export_sites(file: &GgufFile) -> Vec<(String, usize, usize)> {
    let float = |t: &TensorInfo| matches!(t.ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16);
    let qualifies = |name: &str| -> Option<(usize, usize)> {
        let t = file.tensor_info(&format!("{name}.weight")).ok()?;
        let [k, n] = t.dims[..] else { return None };
        (float(t) && k % 64 == 0 && n % 64 == 0).then_some((k as usize, n as usize))
    };
    let mut out = Vec::new();
    for t in file.tensors() {
        let Some(name) = t.name.strip_suffix(".weight") else {
            continue;
        };
        let (Some(_), Some(kind)) = (Module::of(name), site_kind(name)) else {
            continue;
        };
        let base = &name[..name.rfind('.').expect("a site kind has a dot")];
        let group: &[&str] = match kind {
            "qkv" => &["attn_q", "attn_k", "attn_v"],
            "gateup" => &["ffn_gate", "ffn_up"],
            _ => &[],
        };
        let members_ok = group.iter().all(|m| {
            let member = format!("{base}.{m}");
            file.tensor_info(&format!("{member}.weight")).is_err() || qualifies(&member).is_some()
        });
        if let (Some((k, n)), true) = (qualifies(name), members_ok) {
            out.push((name.to_owned(), k, n));
        }
    }
    out
}

/// An uncalibrated FoldQuant file of `file` (vla.cpp's `foldquant_fake_export.py`):
/// each site rotated at block 64 and quantized per row ([`export_weight`]), no `ascale`,
/// norms unchanged; metadata `<arch>.quant.*` for `scheme`. `progress(i, n)` after each
/// site. Returns the writer and the sites' names.
pub fn export<'a>(
    file: &'a GgufFile,
    scheme: Scheme,
    mut progress: impl FnMut(usize, usize),
) -> Result<(GgufWriter<'a>, Vec<String>)> {
    let arch = file.architecture()?.to_owned();
    let sites = export_sites(file);
    let (wbits, abits) = scheme.bits();
    let mut w = GgufWriter::new();
    for (k, v) in file.metadata() {
        w.add_metadata(k.clone(), v.clone())?;
    }
    let key = |k: &str| format!("{arch}.quant.{k}");
    w.set_metadata(key("method"), "foldquant")?;
    w.set_metadata(key("applied_at"), "vla-quantize")?;
    w.set_metadata(
        key("provenance"),
        "vla-rs uncalibrated export (rotation + per-row scales)",
    )?;
    for m in ["llm", "action"] {
        w.set_metadata(key(&format!("scheme_{m}")), scheme.name())?;
        w.set_metadata(key(&format!("{m}_weight_bits")), wbits)?;
        w.set_metadata(key(&format!("{m}_act_bits")), abits)?;
        w.set_metadata(key(&format!("{m}_rot_block_size")), 64u32)?;
    }
    w.set_metadata(key("action_fold_order"), "before")?;
    w.set_metadata(key("act_clip_ratio"), 1.0f32)?;
    w.set_metadata(key("site_bits"), "")?;
    let mut done = 0;
    for t in file.tensors() {
        let site = t
            .name
            .strip_suffix(".weight")
            .and_then(|n| sites.iter().find(|s| s.0 == n));
        let Some((name, k, n)) = site else {
            w.add_tensor(t.name.clone(), t.ty, &t.dims, file.tensor_bytes(t))?;
            continue;
        };
        let values = file.dequantize(&t.name)?;
        let (codes, scales) = export_weight(&values, *k, rotation_block_for(*k, 64), wbits);
        let (bytes, packed) = match wbits {
            4 => (pack_int4(&codes), k / 2),
            _ => (codes.iter().map(|&c| c as u8).collect(), *k),
        };
        w.add_tensor(
            t.name.clone(),
            GgmlType::I8,
            &[packed as u64, *n as u64],
            bytes,
        )?;
        w.add_f32(
            format!("{name}.wscale"),
            GgmlType::F32,
            &[*n as u64],
            &scales,
        )?;
        done += 1;
        progress(done, sites.len());
    }
    Ok((w, sites.into_iter().map(|s| s.0).collect()))
}
