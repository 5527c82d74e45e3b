//! `vla-convert`: published checkpoints to vla-rs GGUF files.
//!
//! ```sh
//! vla-convert smolvla --ckpt path/to/lerobot_ckpt --out smolvla.gguf [--dtype f32|f16|bf16] [--force]
//! vla-convert pi0 --ckpt path/to/lerobot_pi0_ckpt --out pi0.gguf [--tokenizer tokenizer.json]
//! vla-convert pi05 --ckpt path/to/lerobot_pi05_ckpt --out pi05.gguf
//! vla-convert gr00t_n1_5 --ckpt path/to/lerobot_groot_ckpt --out gr00t.gguf [--eagle DIR] [--base DIR]
//! vla-convert gr00t_n1_7 --ckpt path/to/lerobot_groot_n17_ckpt --out gr00t17.gguf [--base DIR] [--backbone DIR]
//! vla-convert vla_jepa --ckpt path/to/lerobot_vla_jepa_ckpt --out vla_jepa.gguf [--backbone DIR] [--jepa DIR]
//! vla-convert evo1 --ckpt path/to/lerobot_evo1_ckpt --out evo1.gguf [--backbone DIR]
//! ```

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};
use vla::convert::{evo1, gr00t, gr00t_n1_7, pi0, smolvla, vla_jepa};
use vla::gguf::GgmlType;
use vla::models::flow::FlowArch;
use vla::modules::vision::PatchPositions;

#[derive(Parser)]
#[command(
    name = "vla-convert",
    version,
    about = "Convert a published VLA checkpoint to a vla-rs GGUF file"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// A lerobot SmolVLA checkpoint folder: config.json, model.safetensors and the
    /// policy_preprocessor / policy_postprocessor files holding the normaliser statistics.
    Smolvla(SmolvlaArgs),
    /// A lerobot pi0 checkpoint folder (config.json, model.safetensors, processor files).
    Pi0(PiArgs),
    /// A lerobot pi0.5 checkpoint folder (config.json, model.safetensors, processor files).
    Pi05(PiArgs),
    /// A lerobot GR00T N1.5 checkpoint folder (config.json, model.safetensors, processor
    /// files), with the GR00T model config its base_model_path names and the Eagle-2.5
    /// processor folder (config, tokenizer).
    #[command(name = "gr00t_n1_5")]
    Gr00tN15(Gr00tArgs),
    /// A lerobot GR00T N1.7 checkpoint folder (config.json, model.safetensors, processor
    /// files), with the GR00T N1.7 model folder its base_model_path names and the Qwen3-VL
    /// folder (config, preprocessor config, tokenizer) that folder's model_name names.
    #[command(name = "gr00t_n1_7")]
    Gr00tN17(Gr00tN17Args),
    /// A lerobot VLA-JEPA checkpoint folder (config.json, model.safetensors, processor
    /// files), with the Qwen3-VL folder its qwen_model_name names and the V-JEPA 2 config its
    /// jepa_encoder_name names (the world model itself is not converted).
    #[command(name = "vla_jepa")]
    VlaJepa(VlaJepaArgs),
    /// A lerobot Evo-1 checkpoint folder (config.json, model.safetensors, processor files),
    /// with the InternVL3 folder (config.json, tokenizer.json) its vlm_model_name names.
    Evo1(Evo1Args),
}

/// What every converter takes.
#[derive(clap::Args)]
struct Common {
    /// Checkpoint folder.
    #[arg(long)]
    ckpt: PathBuf,
    /// GGUF file to write.
    #[arg(long)]
    out: PathBuf,
    /// Type of the 2-D matmul weights (norms, biases, embeddings and statistics stay f32).
    #[arg(long, value_enum, default_value_t = Dtype::F32)]
    dtype: Dtype,
    /// Overwrite --out if it exists.
    #[arg(long)]
    force: bool,
}

#[derive(clap::Args)]
struct SmolvlaArgs {
    #[command(flatten)]
    common: Common,
    /// SmolVLM config.json (or its folder) for head counts and epsilons; default: the
    /// checkpoint's vlm_model_name if it is a local folder, else the Hugging Face cache.
    #[arg(long)]
    vlm_config: Option<PathBuf>,
    /// Position rows of the vision tower: `shifted` reproduces lerobot 0.4.4 (from
    /// transformers 4.55 on, SmolVLM's patch positions are bucketized one row down,
    /// transformers issue #41190); `grid` is plain SigLIP, what checkpoints trained before
    /// that saw.
    #[arg(long, value_enum, default_value_t = Positions::Shifted)]
    vit_positions: Positions,
    /// The language model's tokenizer.json, shipped in the GGUF so the server takes text;
    /// default: the one beside the SmolVLM config.
    #[arg(long)]
    tokenizer: Option<PathBuf>,
}

#[derive(clap::Args)]
struct PiArgs {
    #[command(flatten)]
    common: Common,
    /// JSON with what tensor shapes do not fix, for non-standard sizes:
    /// {"vision": {"heads", "ln_eps"}, "vlm": {"head_dim", "rms_eps", "rope_theta"}};
    /// default: openpi's (16 vision heads, head_dim 256, eps 1e-6, theta 10000).
    #[arg(long)]
    sizes: Option<PathBuf>,
    /// PaliGemma's tokenizer.json, shipped in the GGUF so the server takes text; default:
    /// <ckpt>/tokenizer/tokenizer.json if present.
    #[arg(long)]
    tokenizer: Option<PathBuf>,
}

#[derive(clap::Args)]
struct Gr00tArgs {
    #[command(flatten)]
    common: Common,
    /// The Eagle-2.5 processor folder (config.json, tokenizer.json); default: <ckpt>/eagle,
    /// else lerobot's cache $HF_LEROBOT_HOME/lerobot/eagle2hg-processor-groot-n1p5.
    #[arg(long)]
    eagle: Option<PathBuf>,
    /// The GR00T model folder (its config.json has the head counts and select_layer);
    /// default: the checkpoint's base_model_path, relative to the checkpoint or as given.
    #[arg(long)]
    base: Option<PathBuf>,
    /// The Eagle tokenizer.json, shipped in the GGUF; default: the one in the Eagle folder,
    /// else <ckpt>/tokenizer/tokenizer.json.
    #[arg(long)]
    tokenizer: Option<PathBuf>,
}

#[derive(clap::Args)]
struct Gr00tN17Args {
    #[command(flatten)]
    common: Common,
    /// The GR00T N1.7 model folder (config.json: head sizes, select_layer, frame transform,
    /// model_name); default: the checkpoint's base_model_path, relative to it or as given.
    #[arg(long)]
    base: Option<PathBuf>,
    /// The Qwen3-VL folder (config.json, preprocessor_config.json, tokenizer.json), e.g. a
    /// download of nvidia/Cosmos-Reason2-2B; default: the base config's model_name as a
    /// folder relative to the checkpoint or the base folder.
    #[arg(long)]
    backbone: Option<PathBuf>,
}

#[derive(clap::Args)]
struct VlaJepaArgs {
    #[command(flatten)]
    common: Common,
    /// The Qwen3-VL folder (config.json, preprocessor_config.json, tokenizer.json), e.g. a
    /// download of Qwen/Qwen3-VL-2B-Instruct; default: qwen_model_name as a folder.
    #[arg(long)]
    backbone: Option<PathBuf>,
    /// The V-JEPA 2 encoder folder (its config.json's tubelet_size); default:
    /// jepa_encoder_name as a folder.
    #[arg(long)]
    jepa: Option<PathBuf>,
}

#[derive(clap::Args)]
struct Evo1Args {
    #[command(flatten)]
    common: Common,
    /// The InternVL3 folder (config.json, tokenizer.json), e.g. a download of
    /// OpenGVLab/InternVL3-1B-hf; default: vlm_model_name as a folder.
    #[arg(long)]
    backbone: Option<PathBuf>,
}

#[derive(Clone, Copy, ValueEnum)]
enum Positions {
    Shifted,
    Grid,
}

#[derive(Clone, Copy, ValueEnum)]
enum Dtype {
    F32,
    F16,
    Bf16,
}

impl From<Dtype> for GgmlType {
    fn from(d: Dtype) -> Self {
        match d {
            Dtype::F32 => GgmlType::F32,
            Dtype::F16 => GgmlType::F16,
            Dtype::Bf16 => GgmlType::BF16,
        }
    }
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Smolvla(args) => convert_smolvla(args),
        Command::Pi0(args) => convert_pi(args, pi0::Variant::Pi0),
        Command::Pi05(args) => convert_pi(args, pi0::Variant::Pi05),
        Command::Gr00tN15(args) => convert_gr00t(args),
        Command::Gr00tN17(args) => convert_gr00t_n1_7(args),
        Command::VlaJepa(args) => convert_vla_jepa(args),
        Command::Evo1(args) => convert_evo1(args),
    };
    if let Err(e) = result {
        eprintln!("vla-convert: {e:#}");
        std::process::exit(1);
    }
}

/// A progress bar for `convert(progress)`, cleared when it returns.
fn with_progress<T>(convert: impl FnOnce(&mut dyn FnMut(usize, usize, &str)) -> T) -> Result<T> {
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} tensors {msg}")
            .context("progress template")?,
    );
    let out = convert(&mut |done, total, name| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
        bar.set_message(name.to_owned());
    });
    bar.finish_and_clear();
    Ok(out)
}

impl Common {
    /// Checkpoint, output and dtype, once --out is known not to be overwritten unasked.
    fn checked(self) -> Result<(PathBuf, PathBuf, Dtype)> {
        if self.out.exists() && !self.force {
            bail!(
                "{} exists; pass --force to overwrite it",
                self.out.display()
            );
        }
        Ok((self.ckpt, self.out, self.dtype))
    }
}

/// Prints the notes, writes the file, returns its size in MB.
fn finish(notes: &[String], writer: &vla::gguf::GgufWriter, out: &Path) -> Result<f64> {
    for note in notes {
        eprintln!("note: {note}");
    }
    writer
        .write_to_file(out)
        .with_context(|| format!("cannot write {}", out.display()))?;
    Ok(std::fs::metadata(out).map(|m| m.len()).unwrap_or(0) as f64 / 1e6)
}

fn convert_pi(args: PiArgs, variant: pi0::Variant) -> Result<()> {
    let (ckpt, out, dtype) = args.common.checked()?;
    let sizes = args
        .sizes
        .as_deref()
        .map(pi0::Sizes::from_json)
        .transpose()?;
    let opts = pi0::Options {
        dtype: Some(dtype.into()),
        sizes,
        tokenizer: args.tokenizer,
    };
    let converted = with_progress(|p| pi0::convert(&ckpt, &opts, p))?
        .with_context(|| format!("cannot convert {}", ckpt.display()))?;
    let c = &converted.config;
    if c.variant != variant {
        bail!(
            "{} is a {} checkpoint: run `vla-convert {}`",
            ckpt.display(),
            c.arch(),
            c.arch()
        );
    }
    let mb = finish(&converted.notes, &converted.writer, &out)?;
    println!(
        "wrote {} ({mb:.1} MB): {}, vision {}x{} ({}px), decoder {}x{}, expert {}, {} cameras, chunk {}x{}, weights {}",
        out.display(),
        c.arch(),
        c.vision.hidden,
        c.vision.layers,
        c.vision.image_size,
        c.lm.hidden,
        c.lm.n_layers,
        c.expert.hidden,
        c.io.n_images,
        c.io.chunk_size,
        c.io.action_dim,
        GgmlType::from(dtype),
    );
    Ok(())
}

fn convert_gr00t(args: Gr00tArgs) -> Result<()> {
    let (ckpt, out, dtype) = args.common.checked()?;
    let opts = gr00t::Options {
        dtype: Some(dtype.into()),
        eagle: args.eagle,
        base: args.base,
        tokenizer: args.tokenizer,
    };
    let converted = with_progress(|p| gr00t::convert(&ckpt, &opts, p))?
        .with_context(|| format!("cannot convert {}", ckpt.display()))?;
    let mb = finish(&converted.notes, &converted.writer, &out)?;
    let c = &converted.config;
    println!(
        "wrote {} ({mb:.1} MB): gr00t_n1_5, vision {}x{} ({}px), LM {}x{}, VL self-attention {}, DiT {}x{}, {} cameras, chunk {}x{}, default embodiment {}, weights {}",
        out.display(),
        c.vision.hidden,
        c.vision.layers,
        c.vision.image_size,
        c.lm.hidden,
        c.lm.n_layers,
        c.vlsa.layers,
        c.dit.width(),
        c.dit.layers,
        c.io.n_images,
        c.io.chunk_size,
        c.io.action_dim,
        c.default_embodiment,
        GgmlType::from(dtype),
    );
    Ok(())
}

fn convert_gr00t_n1_7(args: Gr00tN17Args) -> Result<()> {
    let (ckpt, out, dtype) = args.common.checked()?;
    let opts = gr00t_n1_7::Options {
        dtype: Some(dtype.into()),
        base: args.base,
        backbone: args.backbone,
    };
    let converted = with_progress(|p| gr00t_n1_7::convert(&ckpt, &opts, p))?
        .with_context(|| format!("cannot convert {}", ckpt.display()))?;
    let mb = finish(&converted.notes, &converted.writer, &out)?;
    let c = &converted.config;
    println!(
        "wrote {} ({mb:.1} MB): gr00t_n1_7, vision {}x{} ({}x{}px, deepstack {:?}), LM {}x{}, VL self-attention {}, DiT {}x{}, {} cameras, chunk {}x{} ({} returned), default embodiment {}, weights {}",
        out.display(),
        c.vision.hidden,
        c.vision.layers,
        c.vision.image_h,
        c.vision.image_w,
        c.vision.deepstack,
        c.lm.hidden,
        c.lm.n_layers,
        c.vlsa.layers,
        c.dit.width(),
        c.dit.layers,
        c.io.n_images,
        c.io.chunk_size,
        c.io.action_dim,
        c.valid_horizon,
        c.default_embodiment,
        GgmlType::from(dtype),
    );
    Ok(())
}

fn convert_vla_jepa(args: VlaJepaArgs) -> Result<()> {
    let (ckpt, out, dtype) = args.common.checked()?;
    let opts = vla_jepa::Options {
        dtype: Some(dtype.into()),
        backbone: args.backbone,
        jepa: args.jepa,
    };
    let converted = with_progress(|p| vla_jepa::convert(&ckpt, &opts, p))?
        .with_context(|| format!("cannot convert {}", ckpt.display()))?;
    let mb = finish(&converted.notes, &converted.writer, &out)?;
    let c = &converted.config;
    println!(
        "wrote {} ({mb:.1} MB): vla_jepa, vision {}x{} ({}x{}px), LM {}x{}, {} embodied tokens, DiT {}x{}, {} cameras, chunk {}x{}, weights {}",
        out.display(),
        c.vision.hidden,
        c.vision.layers,
        c.vision.image_h,
        c.vision.image_w,
        c.lm.hidden,
        c.lm.n_layers,
        c.n_embodied(),
        c.dit.width(),
        c.dit.layers,
        c.io.n_images,
        c.io.chunk_size,
        c.io.action_dim,
        GgmlType::from(dtype),
    );
    Ok(())
}

fn convert_evo1(args: Evo1Args) -> Result<()> {
    let (ckpt, out, dtype) = args.common.checked()?;
    let opts = evo1::Options {
        dtype: Some(dtype.into()),
        backbone: args.backbone,
    };
    let converted = with_progress(|p| evo1::convert(&ckpt, &opts, p))?
        .with_context(|| format!("cannot convert {}", ckpt.display()))?;
    let mb = finish(&converted.notes, &converted.writer, &out)?;
    let c = &converted.config;
    println!(
        "wrote {} ({mb:.1} MB): evo1, vision {}x{} ({}px), LM {}x{}, head {}x{}, {} cameras of {} views, chunk {}x{}, {} steps, weights {}",
        out.display(),
        c.vision.hidden,
        c.vision.layers,
        c.vision.image_size,
        c.lm.hidden,
        c.lm.n_layers,
        c.head.embed,
        c.head.layers,
        c.io.n_images,
        c.max_views,
        c.io.chunk_size,
        c.io.action_dim,
        c.io.num_steps,
        GgmlType::from(dtype),
    );
    Ok(())
}

fn convert_smolvla(args: SmolvlaArgs) -> Result<()> {
    let (ckpt, out, dtype) = args.common.checked()?;
    let positions = match args.vit_positions {
        Positions::Shifted => PatchPositions::Shifted,
        Positions::Grid => PatchPositions::Grid,
    };
    let opts = smolvla::Options {
        dtype: dtype.into(),
        vlm_config: args.vlm_config,
        positions,
        tokenizer: args.tokenizer,
    };
    let converted = with_progress(|p| smolvla::convert(&ckpt, &opts, p))?
        .with_context(|| format!("cannot convert {}", ckpt.display()))?;
    let mb = finish(&converted.notes, &converted.writer, &out)?;
    let c = &converted.config;
    println!(
        "wrote {} ({mb:.1} MB): smolvla, vision {}x{} ({}px), decoder {}x{}, expert {}, {} cameras, chunk {}x{}, weights {}",
        out.display(),
        c.vision.hidden,
        c.vision.layers,
        c.vision.image_size,
        c.lm.hidden,
        c.lm.n_layers,
        c.expert.hidden,
        c.io.n_images,
        c.io.chunk_size,
        c.io.action_dim,
        opts.dtype,
    );
    Ok(())
}
