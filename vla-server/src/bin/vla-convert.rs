//! `vla-convert`: published checkpoints to vla-rs GGUF files.
//!
//! ```sh
//! vla-convert smolvla --ckpt path/to/lerobot_ckpt --out smolvla.gguf [--dtype f32|f16|bf16] [--force]
//! ```

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};
use vla::convert::smolvla;
use vla::gguf::GgmlType;
use vla::modules::vision::PatchPositions;

#[derive(Parser)]
#[command(name = "vla-convert", version, about = "Convert a published VLA checkpoint to a vla-rs GGUF file")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// A lerobot SmolVLA checkpoint folder: config.json, model.safetensors and the
    /// policy_preprocessor / policy_postprocessor files holding the normaliser statistics.
    Smolvla {
        /// Checkpoint folder.
        #[arg(long)]
        ckpt: PathBuf,
        /// GGUF file to write.
        #[arg(long)]
        out: PathBuf,
        /// Type of the 2-D matmul weights (norms, biases, embeddings and statistics stay f32).
        #[arg(long, value_enum, default_value_t = Dtype::F32)]
        dtype: Dtype,
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
        /// Overwrite --out if it exists.
        #[arg(long)]
        force: bool,
    },
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
        Command::Smolvla { ckpt, out, dtype, vlm_config, vit_positions, tokenizer, force } => {
            let positions = match vit_positions {
                Positions::Shifted => PatchPositions::Shifted,
                Positions::Grid => PatchPositions::Grid,
            };
            convert_smolvla(&ckpt, &out, smolvla::Options { dtype: dtype.into(), vlm_config, positions, tokenizer }, force)
        }
    };
    if let Err(e) = result {
        eprintln!("vla-convert: {e:#}");
        std::process::exit(1);
    }
}

fn convert_smolvla(ckpt: &Path, out: &Path, opts: smolvla::Options, force: bool) -> Result<()> {
    if out.exists() && !force {
        bail!("{} exists; pass --force to overwrite it", out.display());
    }
    let bar = ProgressBar::new(0);
    bar.set_style(ProgressStyle::with_template("{bar:40} {pos}/{len} tensors {msg}").context("progress template")?);
    let converted = smolvla::convert(ckpt, &opts, &mut |done, total, name| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
        bar.set_message(name.to_owned());
    })
    .with_context(|| format!("cannot convert {}", ckpt.display()))?;
    bar.finish_and_clear();
    for note in &converted.notes {
        eprintln!("note: {note}");
    }
    converted.writer.write_to_file(out).with_context(|| format!("cannot write {}", out.display()))?;
    let c = &converted.config;
    let bytes = std::fs::metadata(out).map(|m| m.len()).unwrap_or(0);
    println!(
        "wrote {} ({:.1} MB): smolvla, vision {}x{} ({}px), decoder {}x{}, expert {}, {} cameras, chunk {}x{}, weights {}",
        out.display(),
        bytes as f64 / 1e6,
        c.vision.hidden,
        c.vision.layers,
        c.vision.image_size,
        c.hidden,
        c.n_layers,
        c.expert_hidden,
        c.n_images,
        c.chunk_size,
        c.action_dim,
        opts.dtype,
    );
    Ok(())
}
