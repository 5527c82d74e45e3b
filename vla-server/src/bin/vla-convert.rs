//! `vla-convert`: published checkpoints to vla-rs GGUF files.
//!
//! ```sh
//! vla-convert auto --ckpt path/to/lerobot_ckpt --out model.gguf   # the arch from the checkpoint's config
//! vla-convert smolvla --ckpt path/to/lerobot_ckpt --out smolvla.gguf --vit-positions shifted|grid [--dtype f32|f16|bf16] [--force]
//! vla-convert pi0 --ckpt path/to/lerobot_pi0_ckpt --out pi0.gguf [--tokenizer tokenizer.json]
//! vla-convert pi05 --ckpt path/to/lerobot_pi05_ckpt --out pi05.gguf
//! vla-convert gr00t_n1_5 --ckpt path/to/lerobot_groot_ckpt --out gr00t.gguf [--eagle DIR] [--base DIR]
//! vla-convert gr00t_n1_6 --ckpt path/to/isaac_gr00t_n16_ckpt --out gr00t16.gguf [--backbone DIR] [--embodiment TAG]
//! vla-convert gr00t_n1_7 --ckpt path/to/lerobot_groot_n17_ckpt --out gr00t17.gguf [--base DIR] [--backbone DIR]
//! vla-convert vla_jepa --ckpt path/to/lerobot_vla_jepa_ckpt --out vla_jepa.gguf [--backbone DIR] [--jepa DIR]
//! vla-convert evo1 --ckpt path/to/lerobot_evo1_ckpt --out evo1.gguf [--backbone DIR]
//! vla-convert act --ckpt path/to/lerobot_act_ckpt --out act.gguf
//! vla-convert turbovla --ckpt turbovla_libero.pth --out turbovla.gguf --statistics libero [--bert DIR] [--dinov3 DIR]
//! ```

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};
use vla::convert::openvla;
use vla::convert::{
    act, bitvla, evo1, gr00t, gr00t_n1_6, gr00t_n1_7, octo, openvla_oft, pi0, smolvla, turbovla,
    vla_adapter, vla_jepa, Kind,
};
use vla::gguf::GgmlType;
use vla::models::flow::FlowArch;
use vla::models::openvla::OpenVlaArch;
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
    /// Any lerobot checkpoint folder (or an Isaac-GR00T N1.6 one, or a TurboVLA .pth): the
    /// arch is read from its config.json ("type"; GR00T N1.5 or N1.7 from its pre-processor;
    /// N1.6 from "model_type"; TurboVLA from its model_config) and the matching conversion
    /// runs. Takes every subcommand's options; one that does not apply to the checkpoint is
    /// refused.
    Auto(Box<AutoArgs>),
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
    /// An Isaac-GR00T N1.6 checkpoint folder (config.json of model_type Gr00tN1d6,
    /// model.safetensors, processor_config.json, statistics.json, embodiment_id.json), with
    /// the Eagle Block2A-2B-v2 folder (config, tokenizer).
    #[command(name = "gr00t_n1_6")]
    Gr00tN16(Gr00tN16Args),
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
    /// A lerobot ACT checkpoint folder (config.json, model.safetensors, processor files):
    /// written in vla.cpp's `act` layout, BatchNorm folded into the ResNet's convolutions.
    Act(ActArgs),
    /// A VLA-Adapter checkpoint folder as its LIBERO evaluation loads it (config.json,
    /// model.safetensors, action_head--*checkpoint.pt, proprio_projector--*checkpoint.pt,
    /// dataset_statistics.json, the tokenizer files). Every suite's statistics are kept: the
    /// server picks one with --embodiment.
    #[command(name = "vla_adapter")]
    VlaAdapter(VlaAdapterArgs),
    /// An OpenVLA-OFT checkpoint folder as its LIBERO evaluation loads it (config.json,
    /// model.safetensors, action_head--*checkpoint.pt, proprio_projector--*checkpoint.pt,
    /// dataset_statistics.json, the tokenizer files). Every suite's statistics are kept: the
    /// server picks one with --embodiment. At 7.5 B parameters, --dtype bf16 keeps the file
    /// at 15.3 GB (then `vla-quantize --type Q8_0 --vision --expert`: 8.5 GB).
    #[command(name = "openvla_oft")]
    OpenvlaOft(VlaAdapterArgs),
    /// A BitVLA checkpoint folder as its LIBERO evaluation loads it (config.json,
    /// model.safetensors of bf16 master weights, action_head--*checkpoint.pt,
    /// proprio_projector--*checkpoint.pt, dataset_statistics.json, the tokenizer files with
    /// the chat template). Every BitLinear is quantized as the reference's forward does
    /// (ternary, 2 bits a weight; --dtype applies to the float matrices); every suite's
    /// statistics are kept: the server picks one with --embodiment.
    Bitvla(VlaAdapterArgs),
    /// An Octo checkpoint folder as OctoModel.save_pretrained writes it (config.json,
    /// dataset_statistics.json, <step>/default/checkpoint), with the T5 tokenizer (the
    /// text processor's folder, a t5* folder beside config.json, or --tokenizer). Every
    /// dataset's statistics are kept: the server picks one with --embodiment.
    Octo(OctoArgs),
    /// A TurboVLA checkpoint (H-EmbodVis/TurboVLA): the released .pth
    /// (torch.save of model_state_dict + model_config), or a folder with model.safetensors
    /// and config.json (the model_config), with the BERT folder (config.json, vocab.txt or
    /// tokenizer.json) and the normalisation statistics, which the checkpoint does not carry.
    /// Written in vla.cpp's `turbovla` layout (DINOv3's LayerScale folded), plus the
    /// statistics and the BERT tokenizer, so the server takes text.
    Turbovla(TurbovlaArgs),
}

#[derive(clap::Args)]
struct TurbovlaArgs {
    /// The checkpoint: the .pth file (e.g. turbovla_libero.pth), a folder holding exactly one,
    /// or a folder with model.safetensors + config.json.
    #[arg(long, value_name = "FILE_OR_DIR")]
    ckpt: PathBuf,
    /// The GGUF file to write.
    #[arg(long, value_name = "MODEL.gguf")]
    out: PathBuf,
    /// Type of the matrices (norms, biases, tables, the patch kernel and statistics stay f32);
    /// default: every tensor as stored, as vla.cpp writes it (f32 and bf16 kept, f16 as f32).
    #[arg(long, value_enum)]
    dtype: Option<Dtype>,
    /// Overwrite --out if it exists.
    #[arg(long)]
    force: bool,
    #[command(flatten)]
    turbo: TurboOptions,
}

/// What a TurboVLA checkpoint does not hold.
#[derive(clap::Args, Clone)]
struct TurboOptions {
    /// The normalisation statistics, required (the reference's evaluation code holds them, not
    /// the checkpoint): `libero` for the released LIBERO model's numbers, or a JSON file with
    /// state_mean, state_std, action_min, action_max (arrays) and an optional
    /// gripper_sign_dim (the action dimension whose sign becomes the gripper command).
    #[arg(long, value_name = "libero|FILE.json")]
    statistics: Option<PathBuf>,
    /// The BERT folder (config.json for the head count; vocab.txt or tokenizer.json, shipped in
    /// the GGUF); default: model_config.text.model_name_or_path as a folder (beside the
    /// checkpoint, as written, or a hub repository in the Hugging Face cache).
    #[arg(long, value_name = "DIR")]
    bert: Option<PathBuf>,
    /// DINOv3's config.json or its folder (num_attention_heads, rope_theta,
    /// num_register_tokens); default: model_config.vision.model_name_or_path as a folder, else
    /// ViT-B/16's values where that name says dinov3-vitb16 (as vla.cpp).
    #[arg(long, value_name = "FILE_OR_DIR")]
    dinov3: Option<PathBuf>,
}

#[derive(clap::Args)]
struct OctoArgs {
    #[command(flatten)]
    common: Common,
    #[command(flatten)]
    tokenizer: TokenizerArgs,
    /// The checkpoint step to read (a <step> folder); default: the latest.
    #[arg(long, value_name = "N")]
    step: Option<u64>,
}

#[derive(clap::Args)]
struct ActArgs {
    #[command(flatten)]
    common: Common,
}

#[derive(clap::Args)]
struct VlaAdapterArgs {
    #[command(flatten)]
    common: Common,
    #[command(flatten)]
    head: OpenVlaArgs,
}

/// What an OpenVLA-family checkpoint does not record: its evaluation's settings.
#[derive(clap::Args, Clone, Copy)]
struct OpenVlaArgs {
    /// Cameras, each through the vision tower(s) (the evaluation's num_images_in_input). Default: 2,
    /// LIBERO's third-person and wrist views.
    #[arg(long, value_name = "N")]
    num_images: Option<usize>,
    /// Actions a predict returns (NUM_ACTIONS_CHUNK in the reference's constants). Default:
    /// the platform's the action and state widths name (LIBERO 8, BRIDGE 5, ALOHA 25).
    #[arg(long, value_name = "N")]
    chunk: Option<usize>,
}

/// What every converter takes.
#[derive(clap::Args)]
struct Common {
    /// The lerobot checkpoint folder (config.json, model.safetensors, policy_*processor*
    /// files: a training run's checkpoints/<step>/pretrained_model); `auto` also takes a
    /// TurboVLA .pth.
    #[arg(long, value_name = "DIR")]
    ckpt: PathBuf,
    /// The GGUF file to write.
    #[arg(long, value_name = "MODEL.gguf")]
    out: PathBuf,
    /// Type of the 2-D matmul weights (norms, biases, embeddings and statistics stay f32);
    /// default: f32 (for a TurboVLA checkpoint, `auto` keeps each tensor's stored type).
    #[arg(long, value_enum)]
    dtype: Option<Dtype>,
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
    /// Position rows of the vision tower, required: they depend on the transformers version
    /// the checkpoint was trained with, which it does not record. `shifted`: trained with
    /// transformers >= 4.55 (lerobot >= 0.4; SmolVLM's patch positions are bucketized one
    /// row down, transformers issue #41190); `grid`: trained before (plain SigLIP, e.g.
    /// checkpoints published before August 2025).
    #[arg(long, value_enum)]
    vit_positions: Option<Positions>,
    #[command(flatten)]
    tokenizer: TokenizerArgs,
}

/// The tokenizer options of archs whose GGUF can also serve token ids alone.
#[derive(clap::Args)]
struct TokenizerArgs {
    /// The tokenizer shipped in the GGUF so the server takes text: a tokenizer.json, or a
    /// folder holding one (or Qwen2's vocab.json + merges.txt); default: the one lerobot's
    /// pre-processor loads (its tokenizer_name: a folder, or a hub repository in the Hugging
    /// Face cache). None found is an error saying how to get it.
    #[arg(long, value_name = "FILE_OR_DIR", conflicts_with = "no_tokenizer")]
    tokenizer: Option<PathBuf>,
    /// Write a GGUF that takes token ids only, not text.
    #[arg(long)]
    no_tokenizer: bool,
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
    #[command(flatten)]
    tokenizer: TokenizerArgs,
}

#[derive(clap::Args)]
struct Gr00tArgs {
    #[command(flatten)]
    common: Common,
    /// The Eagle-2.5 processor folder (config.json, the tokenizer's files); default: <ckpt>/eagle,
    /// else lerobot's cache $HF_LEROBOT_HOME/lerobot/eagle2hg-processor-groot-n1p5.
    #[arg(long)]
    eagle: Option<PathBuf>,
    /// The GR00T model folder (its config.json has the head counts and select_layer);
    /// default: the checkpoint's base_model_path, relative to the checkpoint or as given.
    #[arg(long)]
    base: Option<PathBuf>,
    /// The Eagle tokenizer shipped in the GGUF: a tokenizer.json, or a folder holding one or
    /// Qwen2's vocab.json + merges.txt + tokenizer_config.json; default: the Eagle folder's,
    /// else <ckpt>/tokenizer.
    #[arg(long, value_name = "FILE_OR_DIR")]
    tokenizer: Option<PathBuf>,
}

#[derive(clap::Args)]
struct Gr00tN16Args {
    #[command(flatten)]
    common: Common,
    /// The Eagle Block2A-2B-v2 folder (config.json with the vision and text sizes, the
    /// tokenizer), shipped with Isaac-GR00T's code; default: <ckpt>/eagle.
    #[arg(long)]
    backbone: Option<PathBuf>,
    /// The embodiment whose statistics the file keeps; default: the only one
    /// statistics.json holds, else new_embodiment.
    #[arg(long)]
    embodiment: Option<String>,
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

#[derive(clap::Args)]
struct AutoArgs {
    #[command(flatten)]
    common: Common,
    /// As `smolvla --vlm-config`.
    #[arg(long)]
    vlm_config: Option<PathBuf>,
    /// As `smolvla --vit-positions` (required for SmolVLA).
    #[arg(long, value_enum)]
    vit_positions: Option<Positions>,
    /// As `pi0 --sizes`.
    #[arg(long)]
    sizes: Option<PathBuf>,
    /// As `gr00t_n1_5 --eagle`.
    #[arg(long)]
    eagle: Option<PathBuf>,
    /// As `gr00t_n1_5 --base` and `gr00t_n1_7 --base`.
    #[arg(long)]
    base: Option<PathBuf>,
    /// As `gr00t_n1_6`, `gr00t_n1_7`, `vla_jepa` and `evo1 --backbone`.
    #[arg(long)]
    backbone: Option<PathBuf>,
    /// As `gr00t_n1_6 --embodiment`.
    #[arg(long)]
    embodiment: Option<String>,
    /// As `vla_jepa --jepa`.
    #[arg(long)]
    jepa: Option<PathBuf>,
    /// As `smolvla`, `pi0`, `pi05` and `gr00t_n1_5 --tokenizer`.
    #[arg(long, value_name = "FILE_OR_DIR", conflicts_with = "no_tokenizer")]
    tokenizer: Option<PathBuf>,
    /// As `smolvla`, `pi0` and `pi05 --no-tokenizer`.
    #[arg(long)]
    no_tokenizer: bool,
    #[command(flatten)]
    openvla: OpenVlaArgs,
    #[command(flatten)]
    turbo: TurboOptions,
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
        Command::Auto(args) => convert_auto(*args),
        Command::Smolvla(args) => convert_smolvla(args),
        Command::Pi0(args) => convert_pi(args, Kind::Pi0),
        Command::Pi05(args) => convert_pi(args, Kind::Pi05),
        Command::Gr00tN15(args) => convert_gr00t(args),
        Command::Gr00tN16(args) => convert_gr00t_n1_6(args),
        Command::Gr00tN17(args) => convert_gr00t_n1_7(args),
        Command::VlaJepa(args) => convert_vla_jepa(args),
        Command::Evo1(args) => convert_evo1(args),
        Command::Act(args) => convert_act(args),
        Command::Octo(args) => convert_octo(args),
        Command::VlaAdapter(args) => convert_vla_adapter(args),
        Command::OpenvlaOft(args) => convert_openvla_oft(args),
        Command::Bitvla(args) => convert_bitvla(args),
        Command::Turbovla(args) => convert_turbovla(args),
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
        let dtype = self.dtype.unwrap_or(Dtype::F32);
        Ok((self.ckpt, self.out, dtype))
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

fn convert_pi(args: PiArgs, kind: Kind) -> Result<()> {
    let (ckpt, out, dtype) = args.common.checked()?;
    vla::convert::detect::expect(&ckpt, kind)?;
    let sizes = args
        .sizes
        .as_deref()
        .map(pi0::Sizes::from_json)
        .transpose()?;
    let opts = pi0::Options {
        dtype: Some(dtype.into()),
        sizes,
        tokenizer: args.tokenizer.tokenizer,
        no_tokenizer: args.tokenizer.no_tokenizer,
    };
    let converted = with_progress(|p| pi0::convert(&ckpt, &opts, p))?
        .with_context(|| format!("cannot convert {}", ckpt.display()))?;
    let c = &converted.config;
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
        c.embodiments.default,
        GgmlType::from(dtype),
    );
    Ok(())
}

fn convert_gr00t_n1_6(args: Gr00tN16Args) -> Result<()> {
    let (ckpt, out, dtype) = args.common.checked()?;
    let opts = gr00t_n1_6::Options {
        dtype: Some(dtype.into()),
        backbone: args.backbone,
        embodiment: args.embodiment,
    };
    let converted = with_progress(|p| gr00t_n1_6::convert(&ckpt, &opts, p))?
        .with_context(|| format!("cannot convert {}", ckpt.display()))?;
    let mb = finish(&converted.notes, &converted.writer, &out)?;
    let c = &converted.config;
    println!(
        "wrote {} ({mb:.1} MB): gr00t_n1_6, vision {}x{} ({}px, {} tokens a camera), LM {}x{}, DiT {}x{}, {} cameras, chunk {}x{} ({} returned), default embodiment {}, weights {}",
        out.display(),
        c.vision.hidden,
        c.vision.layers,
        c.vision.image_size,
        c.n_img_tokens(),
        c.lm.hidden,
        c.lm.n_layers,
        c.dit.width(),
        c.dit.layers,
        c.io.n_images,
        c.io.chunk_size,
        c.io.action_dim,
        c.valid_horizon,
        c.embodiments.default,
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
        c.embodiments.default,
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

fn convert_act(args: ActArgs) -> Result<()> {
    let (ckpt, out, dtype) = args.common.checked()?;
    let opts = act::Options {
        dtype: Some(dtype.into()),
    };
    let converted = with_progress(|p| act::convert(&ckpt, &opts, p))?
        .with_context(|| format!("cannot convert {}", ckpt.display()))?;
    let mb = finish(&converted.notes, &converted.writer, &out)?;
    let c = &converted.config;
    println!(
        "wrote {} ({mb:.1} MB): act, ResNet {:?} to {} channels, transformer {}x{} ({} encoder, {} decoder layers), {} cameras, chunk {}x{}, weights {}",
        out.display(),
        c.blocks,
        c.widths[4],
        c.dim_model,
        c.n_heads,
        c.n_encoder_layers,
        c.n_decoder_layers,
        c.num_views,
        c.chunk_size,
        c.action_dim,
        GgmlType::from(dtype),
    );
    Ok(())
}

fn convert_octo(args: OctoArgs) -> Result<()> {
    let (ckpt, out, dtype) = args.common.checked()?;
    let opts = octo::Options {
        dtype: Some(dtype.into()),
        tokenizer: args.tokenizer.tokenizer,
        no_tokenizer: args.tokenizer.no_tokenizer,
        step: args.step,
    };
    let converted = with_progress(|p| octo::convert(&ckpt, &opts, p))?
        .with_context(|| format!("cannot convert {}", ckpt.display()))?;
    let mb = finish(&converted.notes, &converted.writer, &out)?;
    let c = &converted.config;
    println!(
        "wrote {} ({mb:.1} MB): octo, transformer {}x{} ({} heads), T5 {}x{}, window {}, {} head {}x{}, weights {}",
        out.display(),
        c.d,
        c.layers,
        c.heads,
        c.t5_d,
        c.t5_layers,
        c.window,
        c.head.name(),
        c.horizon,
        c.action_dim,
        GgmlType::from(dtype),
    );
    Ok(())
}

fn convert_turbovla(args: TurbovlaArgs) -> Result<()> {
    let (ckpt, out) = (args.ckpt, args.out);
    if out.exists() && !args.force {
        bail!("{} exists; pass --force to overwrite it", out.display());
    }
    let opts = turbovla::Options {
        dtype: args.dtype.map(GgmlType::from),
        statistics: args.turbo.statistics,
        bert: args.turbo.bert,
        dinov3: args.turbo.dinov3,
    };
    let converted = with_progress(|p| turbovla::convert(&ckpt, &opts, p))?
        .with_context(|| format!("cannot convert {}", ckpt.display()))?;
    let mb = finish(&converted.notes, &converted.writer, &out)?;
    let c = &converted.config;
    println!(
        "wrote {} ({mb:.1} MB): turbovla, DINOv3 {}x{} ({}px, {} views), BERT {}x{}, fusion {}x{}, decoder {}x{}, chunk {}x{}, weights {}",
        out.display(),
        c.vit.hidden,
        c.vit.layers,
        c.vit.image_size,
        c.num_views,
        c.bert.hidden,
        c.bert.layers,
        c.hidden,
        c.fusion_layers,
        c.hidden,
        c.decoder_layers,
        c.horizon,
        c.action_dim,
        opts.dtype.map_or("as stored".to_owned(), |d| d.to_string()),
    );
    Ok(())
}

fn convert_vla_adapter(args: VlaAdapterArgs) -> Result<()> {
    convert_openvla(args, vla_adapter::convert, |c| {
        format!(
            "vla_adapter, {}, Qwen2.5 {}x{}, {} action queries",
            towers(&c.vision),
            c.lm.hidden,
            c.lm.layers,
            c.action.num_tokens
        )
    })
}

fn convert_openvla_oft(args: VlaAdapterArgs) -> Result<()> {
    convert_openvla(args, openvla_oft::convert, |c| {
        format!(
            "openvla_oft, {}, Llama {}x{} (bidirectional), L1 head {}x{}",
            towers(&c.vision),
            c.lm.hidden,
            c.lm.layers,
            c.head.head_hidden,
            c.head.head_blocks
        )
    })
}

fn convert_bitvla(args: VlaAdapterArgs) -> Result<()> {
    convert_openvla(args, bitvla::convert, |c| {
        format!(
            "bitvla, SigLIP {}x{} ({}px, {} cameras), BitNet b1.58 {}x{} (ternary, bidirectional), L1 head {}x{}",
            c.vision.hidden,
            c.vision.layers,
            c.vision.image_size,
            c.vision.num_images,
            c.lm.hidden,
            c.lm.layers,
            c.head.head_hidden,
            c.head.head_blocks
        )
    })
}

/// `vla::convert::{vla_adapter, openvla_oft, bitvla}::convert`.
type OpenVlaConvert<A> = fn(
    &Path,
    &openvla::Options,
    &mut dyn FnMut(usize, usize, &str),
) -> vla::Result<openvla::Converted<A>>;

/// An OpenVLA-family conversion: `convert` the checkpoint, write it, say what it holds
/// (`describe`, then the chunk and the weights' type).
fn convert_openvla<A: OpenVlaArch>(
    args: VlaAdapterArgs,
    convert: OpenVlaConvert<A>,
    describe: fn(&A) -> String,
) -> Result<()> {
    let (ckpt, out, dtype) = args.common.checked()?;
    let opts = openvla::Options {
        dtype: Some(dtype.into()),
        num_images: args.head.num_images,
        chunk: args.head.chunk,
    };
    let converted = with_progress(|p| convert(&ckpt, &opts, p))?
        .with_context(|| format!("cannot convert {}", ckpt.display()))?;
    let mb = finish(&converted.notes, &converted.writer, &out)?;
    let c = &converted.config;
    println!(
        "wrote {} ({mb:.1} MB): {}, chunk {}x{}, weights {}",
        out.display(),
        describe(c),
        c.io().chunk,
        c.io().action_dim,
        GgmlType::from(dtype),
    );
    Ok(())
}

/// Prismatic's towers as the summary line says them.
fn towers(v: &vla::modules::prismatic::PrismaticConfig) -> String {
    format!(
        "DINOv2 {}x{} + SigLIP {}x{} ({}px, {} cameras)",
        v.dino.hidden, v.dino.layers, v.sig.hidden, v.sig.layers, v.image_size, v.num_images
    )
}

fn convert_smolvla(args: SmolvlaArgs) -> Result<()> {
    let (ckpt, out, dtype) = args.common.checked()?;
    let positions = args.vit_positions.map(|p| match p {
        Positions::Shifted => PatchPositions::Shifted,
        Positions::Grid => PatchPositions::Grid,
    });
    let opts = smolvla::Options {
        dtype: dtype.into(),
        vlm_config: args.vlm_config,
        positions,
        tokenizer: args.tokenizer.tokenizer,
        no_tokenizer: args.tokenizer.no_tokenizer,
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

/// `auto`: the checkpoint's kind picks the conversion; options it does not take are refused.
fn convert_auto(a: AutoArgs) -> Result<()> {
    use Kind::*;
    let kind = vla::convert::detect(&a.common.ckpt)?;
    let given: [(&str, bool, &[Kind]); 15] = [
        ("--vlm-config", a.vlm_config.is_some(), &[Smolvla]),
        ("--vit-positions", a.vit_positions.is_some(), &[Smolvla]),
        ("--sizes", a.sizes.is_some(), &[Pi0, Pi05]),
        ("--eagle", a.eagle.is_some(), &[Gr00tN15]),
        ("--base", a.base.is_some(), &[Gr00tN15, Gr00tN17]),
        (
            "--backbone",
            a.backbone.is_some(),
            &[Gr00tN16, Gr00tN17, VlaJepa, Evo1],
        ),
        ("--embodiment", a.embodiment.is_some(), &[Gr00tN16]),
        ("--jepa", a.jepa.is_some(), &[VlaJepa]),
        (
            "--tokenizer",
            a.tokenizer.is_some(),
            &[Smolvla, Pi0, Pi05, Gr00tN15, Octo],
        ),
        (
            "--no-tokenizer",
            a.no_tokenizer,
            &[Smolvla, Pi0, Pi05, Octo],
        ),
        (
            "--num-images",
            a.openvla.num_images.is_some(),
            &[VlaAdapter],
        ),
        ("--chunk", a.openvla.chunk.is_some(), &[VlaAdapter]),
        ("--statistics", a.turbo.statistics.is_some(), &[Turbovla]),
        ("--bert", a.turbo.bert.is_some(), &[Turbovla]),
        ("--dinov3", a.turbo.dinov3.is_some(), &[Turbovla]),
    ];
    for (flag, set, takes) in given {
        if set && !takes.contains(&kind) {
            bail!(
                "{flag} does not apply to a {} checkpoint (`vla-convert {} --help` lists what does)",
                kind.display_name(),
                kind.subcommand()
            );
        }
    }
    eprintln!(
        "{}: a {} checkpoint (vla-convert {})",
        a.common.ckpt.display(),
        kind.display_name(),
        kind.subcommand()
    );
    let tokenizer = TokenizerArgs {
        tokenizer: a.tokenizer.clone(),
        no_tokenizer: a.no_tokenizer,
    };
    let common = a.common;
    match kind {
        Smolvla => convert_smolvla(SmolvlaArgs {
            common,
            vlm_config: a.vlm_config,
            vit_positions: a.vit_positions,
            tokenizer,
        }),
        Pi0 | Pi05 => convert_pi(
            PiArgs {
                common,
                sizes: a.sizes,
                tokenizer,
            },
            kind,
        ),
        Gr00tN15 => convert_gr00t(Gr00tArgs {
            common,
            eagle: a.eagle,
            base: a.base,
            tokenizer: a.tokenizer,
        }),
        Gr00tN16 => convert_gr00t_n1_6(Gr00tN16Args {
            common,
            backbone: a.backbone,
            embodiment: a.embodiment,
        }),
        Gr00tN17 => convert_gr00t_n1_7(Gr00tN17Args {
            common,
            base: a.base,
            backbone: a.backbone,
        }),
        VlaJepa => convert_vla_jepa(VlaJepaArgs {
            common,
            backbone: a.backbone,
            jepa: a.jepa,
        }),
        Evo1 => convert_evo1(Evo1Args {
            common,
            backbone: a.backbone,
        }),
        Act => convert_act(ActArgs { common }),
        Octo => convert_octo(OctoArgs {
            common,
            tokenizer,
            step: None,
        }),
        VlaAdapter => convert_vla_adapter(VlaAdapterArgs {
            common,
            head: a.openvla,
        }),
        OpenvlaOft => convert_openvla_oft(VlaAdapterArgs {
            common,
            head: a.openvla,
        }),
        Bitvla => convert_bitvla(VlaAdapterArgs {
            common,
            head: a.openvla,
        }),
        Turbovla => convert_turbovla(TurbovlaArgs {
            ckpt: common.ckpt,
            out: common.out,
            dtype: common.dtype,
            force: common.force,
            turbo: a.turbo,
        }),
    }
}
