//! Architectures: each is a config (nested [`crate::config::Section`]s), the composition of
//! [`crate::modules`] into graphs, and the hooks of a driver ([`flow::FlowPolicy`] for
//! flow-matching VLM + expert policies). docs/ARCHITECTURE.md says how to add one.

pub mod act;
pub mod batch;
pub mod bitvla;
pub mod common;
pub mod embodiment;
pub mod evo1;
pub mod flow;
pub mod gr00t;
pub mod gr00t_n1_6;
pub mod gr00t_n1_7;
pub mod octo;
pub mod openvla;
pub mod openvla_oft;
pub mod pi0;
pub mod predict;
pub mod prefix;
pub mod presets;
pub mod prompt;
pub mod smolvla;
pub mod turbovla;
pub mod vla_adapter;
pub mod vla_jepa;
pub mod vlacpp;

use crate::gguf::{GgmlType, GgufFile, GgufWriter};
use crate::policy::{Policy, RuntimeOptions};
use crate::{Error, Result};
use std::collections::BTreeMap;

/// A served arch: its `general.architecture`, how a file of it opens, and its
/// random-weight models (`vla-gguf demo`, benchmarks).
pub struct Arch {
    pub name: &'static str,
    pub open: fn(GgufFile, &RuntimeOptions) -> Result<Box<dyn Policy>>,
    /// A random-weight GGUF ([`presets::random_writer`], matmul weights of the type given,
    /// no tokenizer): the small config, or with `full` the released sizes.
    pub random: fn(full: bool, seed: u64, ty: GgmlType) -> Result<GgufWriter<'static>>,
}

/// Every arch served, one entry each.
pub const ARCHS: &[Arch] = &[
    Arch {
        name: smolvla::ARCH,
        open: open::<smolvla::SmolVlaConfig>,
        random: |full, seed, ty| match full {
            true => random(&presets::smolvla_base_config(), seed, ty),
            false => random(&presets::demo_config(), seed, ty),
        },
    },
    Arch {
        name: pi0::ARCH_PI0,
        open: open::<pi0::Pi0Config>,
        random: |full, seed, ty| match full {
            true => random(&presets::full_config(pi0::Variant::Pi0), seed, ty),
            false => random(&presets::small_config(pi0::Variant::Pi0), seed, ty),
        },
    },
    Arch {
        name: pi0::ARCH_PI05,
        open: open::<pi0::Pi0Config>,
        random: |full, seed, ty| match full {
            true => random(&presets::full_config(pi0::Variant::Pi05), seed, ty),
            false => random(&presets::small_config(pi0::Variant::Pi05), seed, ty),
        },
    },
    Arch {
        name: gr00t::ARCH,
        open: open::<gr00t::Gr00tConfig>,
        random: |full, seed, ty| match full {
            true => random(&presets::gr00t_full_config(), seed, ty),
            false => random(&presets::gr00t_small_config(), seed, ty),
        },
    },
    Arch {
        name: gr00t_n1_6::ARCH,
        open: open::<gr00t_n1_6::Gr00tN16Config>,
        random: |full, seed, ty| match full {
            true => random(&presets::gr00t_n1_6_full_config(), seed, ty),
            false => random(&presets::gr00t_n1_6_small_config(), seed, ty),
        },
    },
    Arch {
        name: gr00t_n1_7::ARCH,
        open: open::<gr00t_n1_7::Gr00tN17Config>,
        random: |full, seed, ty| match full {
            true => random(&presets::gr00t_n1_7_full_config(), seed, ty),
            false => random(&presets::gr00t_n1_7_small_config(), seed, ty),
        },
    },
    Arch {
        name: vla_jepa::ARCH,
        open: open::<vla_jepa::VlaJepaConfig>,
        random: |full, seed, ty| match full {
            true => random(&presets::vla_jepa_full_config(), seed, ty),
            false => random(&presets::vla_jepa_small_config(), seed, ty),
        },
    },
    Arch {
        name: evo1::ARCH,
        open: open::<evo1::Evo1Config>,
        random: |full, seed, ty| match full {
            true => random(&presets::evo1_full_config(), seed, ty),
            false => random(&presets::evo1_small_config(), seed, ty),
        },
    },
    Arch {
        name: act::ARCH,
        open: |file, opts| Ok(Box::new(act::ActPolicy::new(file, opts)?)),
        random: |full, seed, ty| match full {
            true => act::random_writer(&presets::act_full_config(), seed, ty),
            false => act::random_writer(&presets::act_small_config(), seed, ty),
        },
    },
    Arch {
        name: openvla_oft::ARCH,
        open: |file, opts| Ok(Box::new(openvla_oft::OpenVlaOftPolicy::new(file, opts)?)),
        random: |full, seed, ty| match full {
            true => openvla::random_writer(&presets::openvla_oft_full_config(), seed, ty, None),
            false => openvla::random_writer(&presets::openvla_oft_small_config(), seed, ty, None),
        },
    },
    Arch {
        name: bitvla::ARCH,
        open: |file, opts| Ok(Box::new(bitvla::BitvlaPolicy::new(file, opts)?)),
        random: |full, seed, ty| match full {
            true => bitvla::random_writer(&presets::bitvla_full_config(), seed, ty),
            false => bitvla::random_writer(&presets::bitvla_small_config(), seed, ty),
        },
    },
    Arch {
        name: vla_adapter::ARCH,
        open: |file, opts| Ok(Box::new(vla_adapter::VlaAdapterPolicy::new(file, opts)?)),
        random: |full, seed, ty| match full {
            true => openvla::random_writer(&presets::vla_adapter_full_config(), seed, ty, None),
            false => openvla::random_writer(&presets::vla_adapter_small_config(), seed, ty, None),
        },
    },
    Arch {
        name: octo::ARCH,
        open: |file, opts| Ok(Box::new(octo::OctoPolicy::new(file, opts)?)),
        random: |full, seed, ty| match full {
            true => octo::random_writer(&presets::octo_full_config(), seed, ty),
            false => octo::random_writer(&presets::octo_small_config(), seed, ty),
        },
    },
    Arch {
        name: turbovla::ARCH,
        open: |file, opts| Ok(Box::new(turbovla::TurboPolicy::new(file, opts)?)),
        random: |full, seed, ty| match full {
            true => turbovla::demo_writer(&presets::turbovla_full_config(), seed, ty),
            false => turbovla::demo_writer(&presets::turbovla_small_config(), seed, ty),
        },
    },
];

/// The served arch `name` (a `general.architecture`).
pub fn arch(name: &str) -> Option<&'static Arch> {
    ARCHS.iter().find(|a| a.name == name)
}

/// The names of the served archs, for messages.
pub fn arch_names() -> Vec<&'static str> {
    ARCHS.iter().map(|a| a.name).collect()
}

fn open<A: flow::FlowArch + 'static>(
    file: GgufFile,
    opts: &RuntimeOptions,
) -> Result<Box<dyn Policy>> {
    Ok(Box::new(flow::FlowPolicy::<A>::new(file, opts)?))
}

fn random<A: flow::FlowArch>(cfg: &A, seed: u64, ty: GgmlType) -> Result<GgufWriter<'static>> {
    presets::random_writer(cfg, seed, ty, None)
}

/// Opens the GGUF at `path` and builds the policy its `general.architecture` names.
pub fn load(path: &std::path::Path, opts: &RuntimeOptions) -> Result<Box<dyn Policy>> {
    from_gguf(GgufFile::open(path)?, opts)
}

pub fn from_gguf(file: GgufFile, opts: &RuntimeOptions) -> Result<Box<dyn Policy>> {
    let arch = file.architecture()?.to_owned();
    let file = vlacpp::translate(file, opts)?;
    // FoldQuant files: as integers on the cpu and wgpu backends, in dequant mode on ggml
    // (every site back to an f32 matrix: no integer kernels there).
    let file = match crate::foldquant::FoldQuant::read(&file)? {
        Some(fq) => {
            let sites = fq.sites(&file)?;
            let integer = !opts.backend.starts_with("ggml");
            let how = if integer {
                "as integers"
            } else {
                "as dequantized f32 weights"
            };
            tracing::info!("FoldQuant file: {} sites, run {how}", sites.len());
            match integer {
                true => crate::foldquant::integer_form(file, &fq, &sites)?,
                false => crate::foldquant::dequantized(file, &fq, &sites)?,
            }
        }
        None => file,
    };
    match self::arch(&arch) {
        Some(a) => (a.open)(file, opts),
        None => Err(Error::InvalidArgument(format!(
            "unsupported architecture {arch:?} (supported: {})",
            arch_names().join(", ")
        ))),
    }
}

/// A `--weight-dtype` must be a float type.
pub(crate) fn check_weight_dtype(ty: GgmlType) -> Result<()> {
    match ty {
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => Ok(()),
        _ => Err(Error::InvalidArgument(format!(
            "weight dtype {ty}: expected f32, f16 or bf16 (use vla-quantize for block types)"
        ))),
    }
}

/// `file` with the float tensors `is_target` names re-encoded to `ty` (F32, F16 or BF16) in
/// place; block-quantized tensors stay as stored.
pub(crate) fn with_weight_dtype(
    file: GgufFile,
    ty: GgmlType,
    is_target: impl Fn(&str) -> bool,
) -> Result<GgufFile> {
    check_weight_dtype(ty)?;
    let float = |t: GgmlType| matches!(t, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16);
    crate::gguf::retyped(file, |t| (float(t.ty) && is_target(&t.name)).then_some(ty))
}

/// The backend `opts` names, with its options.
pub(crate) fn open_backend(opts: &RuntimeOptions) -> Result<Box<dyn crate::backend::Backend>> {
    let backend_opts = crate::backend::BackendOptions {
        flash_attn: opts.flash_attn,
        threads: opts.threads,
        act_dtype: opts.act_dtype,
    };
    crate::backend::open_with(&opts.backend, &backend_opts)
}

/// The demo model `vla-server --demo` serves: SmolVLA-shaped, small, random weights from a
/// fixed seed, so every build serves the same model.
pub fn demo_gguf() -> Result<Vec<u8>> {
    smolvla::random_gguf(&smolvla::demo_config(), 0x5eed, GgmlType::F32)
}

/// Tensor dtypes and counts, most common first: `"f32 (120), bf16 (40)"`.
pub fn dtype_summary(file: &GgufFile) -> String {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for t in file.tensors() {
        *counts.entry(t.ty.to_string()).or_default() += 1;
    }
    let mut v: Vec<_> = counts.into_iter().collect();
    v.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
    v.iter()
        .map(|(t, n)| format!("{t} ({n})"))
        .collect::<Vec<_>>()
        .join(", ")
}
