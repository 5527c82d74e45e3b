//! `vla-quantize`: repack a model's language-model weight matrices into a ggml block type,
//! or write an uncalibrated FoldQuant file (`--type fq-*`).

use anyhow::{bail, Context, Result};
use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;
use std::process::ExitCode;
use vla::gguf::{is_quantizable, retype, GgmlType, GgufFile, QuantScope};
use vla::policy::RuntimeOptions;

#[derive(Parser)]
#[command(
    name = "vla-quantize",
    version,
    about = "Quantize a VLA model's weight matrices to a ggml block type or FoldQuant",
    long_about = "Packs the language model's 2-D weight matrices (the vision tower's with --vision, the \
                  action expert's or head's with --expert) into Q8_0, Q4_0, Q4_1, Q5_0 or Q5_1. \
                  Embeddings, output heads, norms, positions and the action/state/time projections stay \
                  as they are; so does every matrix whose rows are not a whole number of 32-value \
                  blocks. Without --expert this is vla.cpp's rule. Metadata is copied, plus \
                  vla.quantize.{type,vision,expert,tensors} recording what was done.\n\n\
                  --type fq-w8a8 | fq-w4a8 | fq-w4a4 writes vla.cpp's FoldQuant format instead, \
                  uncalibrated (what vla.cpp's foldquant_fake_export.py writes): the language model's \
                  and the action module's decoder projections (attn_q/k/v/o, ffn_gate/up/down; both \
                  sides multiples of 64, a layer's q/k/v and gate/up together) rotated by a 64-block \
                  Hadamard and stored as INT8 or INT4 codes with per-row scales, plus \
                  <arch>.quant.* metadata (docs/FOLDQUANT.md). The vision tower stays float.",
    after_help = "Examples:\n  vla-quantize smolvla.gguf --out smolvla-q8_0.gguf --type Q8_0\n  \
                  vla-quantize pi05.gguf --out pi05-fq.gguf --type fq-w8a8"
)]
struct Args {
    /// The model file to quantize.
    #[arg(
        value_name = "MODEL.gguf",
        required_unless_present = "old_input",
        conflicts_with = "old_input"
    )]
    input: Option<PathBuf>,
    /// The model file, as earlier versions spelled it (MODEL.gguf is the same).
    #[arg(long = "in", hide = true)]
    old_input: Option<PathBuf>,
    /// The GGUF file to write.
    #[arg(long = "out", value_name = "OUT.gguf")]
    output: PathBuf,
    /// Q8_0 | Q4_0 | Q4_1 | Q5_0 | Q5_1 | fq-w8a8 | fq-w4a8 | fq-w4a4
    #[arg(long = "type", value_name = "TYPE")]
    ty: String,
    /// Quantize the vision tower's matrices too.
    #[arg(long)]
    vision: bool,
    /// Quantize the action expert's (or action head's) block matrices too; vla.cpp keeps
    /// them in float.
    #[arg(long)]
    expert: bool,
    /// Overwrite OUT.gguf if it exists.
    #[arg(long)]
    force: bool,
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("vla-quantize: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> Result<()> {
    let input = match (&args.input, &args.old_input) {
        (Some(p), _) | (None, Some(p)) => p.clone(),
        (None, None) => {
            bail!("give the model file: vla-quantize MODEL.gguf --out OUT.gguf --type TYPE")
        }
    };
    let scheme = vla::foldquant::Scheme::parse(&args.ty);
    if scheme.is_some() && (args.vision || args.expert) {
        bail!(
            "--type {}: --vision and --expert are for block types (FoldQuant keeps the vision \
             tower float and always takes the action module's qualifying projections)",
            args.ty
        );
    }
    let ty = GgmlType::from_name(&args.ty.to_ascii_uppercase())
        .ok()
        .filter(|t| {
            matches!(
                t,
                GgmlType::Q8_0 | GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q5_0 | GgmlType::Q5_1
            )
        });
    if ty.is_none() && scheme.is_none() {
        bail!(
            "--type {}: expected Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, fq-w8a8, fq-w4a8 or fq-w4a4",
            args.ty
        )
    }
    if args.output.exists() && !args.force {
        bail!(
            "{} exists: pass --force to overwrite it",
            args.output.display()
        );
    }
    if args
        .output
        .canonicalize()
        .ok()
        .is_some_and(|o| input.canonicalize().ok() == Some(o))
    {
        bail!("--out must differ from --in");
    }

    // Validate first: the file must load as a model before anything is written.
    let open = || GgufFile::open(&input).with_context(|| format!("reading {}", input.display()));
    vla::models::from_gguf(open()?, &RuntimeOptions::default())
        .with_context(|| format!("{} does not load as a model", input.display()))?;
    let file = open()?;

    let bar = ProgressBar::new(file.tensors().len() as u64).with_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} {msg}").expect("static template"),
    );
    let (writer, changed, what) = match (scheme, ty) {
        (Some(scheme), _) => {
            let (writer, sites) = vla::foldquant::export(&file, scheme, |i, n| {
                bar.set_length(n as u64);
                bar.set_position(i as u64);
                bar.set_message("sites");
            })?;
            (writer, sites, scheme.name().to_owned())
        }
        (None, Some(ty)) => block_types(&args, &file, ty, &bar)?,
        (None, None) => unreachable!("checked above"),
    };
    if changed.is_empty() {
        bar.finish_and_clear();
        bail!(
            "no tensor of {} qualifies for {what}: nothing to do",
            input.display()
        );
    }

    // Write beside the target and rename, so a failed run never leaves a half file under OUT.
    // Block types are encoded as they are written (the bar moves then).
    let tmp = args.output.with_extension("gguf.partial");
    let written = writer.write_to_file(&tmp);
    bar.finish_and_clear();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e).with_context(|| format!("writing {}", tmp.display()));
    }
    std::fs::rename(&tmp, &args.output)
        .with_context(|| format!("renaming to {}", args.output.display()))?;

    let size =
        |p: &PathBuf| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0) as f64 / (1 << 20) as f64;
    let (before, after) = (size(&input), size(&args.output));
    println!(
        "{}: {} of {} tensors as {what}; {before:.1} MiB -> {after:.1} MiB ({:.2}x)",
        args.output.display(),
        changed.len(),
        file.tensors().len(),
        before / after.max(1e-9)
    );
    Ok(())
}

/// The block-type path: the writer, the re-encoded tensors, and the type's name.
fn block_types<'f>(
    args: &Args,
    file: &'f GgufFile,
    ty: GgmlType,
    bar: &'f ProgressBar,
) -> Result<(vla::gguf::GgufWriter<'f>, Vec<String>, String)> {
    let scope = QuantScope {
        vision: args.vision,
        expert: args.expert,
    };
    let (mut writer, changed) = retype(
        file,
        |t| is_quantizable(t, ty, scope).then_some(ty),
        |i, t| {
            bar.set_position(i as u64);
            bar.set_message(t.name.clone());
        },
    )?;
    writer.set_metadata("vla.quantize.type", ty.name())?;
    writer.set_metadata("vla.quantize.vision", args.vision)?;
    writer.set_metadata("vla.quantize.expert", args.expert)?;
    writer.set_metadata("vla.quantize.tensors", changed.len() as u32)?;
    Ok((writer, changed, ty.name().to_owned()))
}
