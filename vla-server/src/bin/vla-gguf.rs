//! `vla-gguf`: inspect GGUF files.

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use vla::gguf::GgufFile;

#[derive(Parser)]
#[command(name = "vla-gguf", version, about = "Inspect GGUF model files")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the header, every metadata entry and a table of tensors
    /// (name, type, dims in ggml order with ne[0] first, bytes).
    Info {
        /// The model file.
        #[arg(value_name = "MODEL.gguf")]
        file: PathBuf,
        /// Print arrays in full instead of their first items.
        #[arg(long)]
        full: bool,
    },
    /// Write one tensor, dequantized, as raw little-endian f32 (row-major, ggml's ne[0]
    /// fastest) to stdout or to --out.
    Dequant {
        /// The model file.
        #[arg(value_name = "MODEL.gguf")]
        file: PathBuf,
        /// The tensor's name (`vla-gguf info` lists them).
        tensor: String,
        /// Write here instead of stdout.
        #[arg(short, long)]
        out: Option<PathBuf>,
    },
    /// Write the built-in demo model (what `vla-server --demo` serves), or a small
    /// random-weight model of another arch, to a file.
    Demo {
        /// The GGUF file to write.
        #[arg(value_name = "OUT.gguf")]
        out: PathBuf,
        /// smolvla (the demo) or another served arch (a small random-weight config, no
        /// tokenizer).
        #[arg(long, default_value = "smolvla", value_parser = served_archs())]
        arch: String,
        /// The released sizes, for benchmarks (files in f32: smolvla: smolvla_base, ~1.6 GB;
        /// pi0, pi05: SigLIP So400m, Gemma 2B + 300M, ~13 GB; gr00t_n1_5: Eagle-2.5 + DiT,
        /// ~10 GB; gr00t_n1_6: SigLIP2 + Qwen3 cut to 16 layers + DiT, ~12 GB; gr00t_n1_7:
        /// Qwen3-VL-2B cut to 16 layers + DiT, ~13 GB; vla_jepa: Qwen3-VL-2B + DiT-B, ~9 GB;
        /// evo1: InternViT-300M + Qwen2.5-0.5B cut to 14 layers + its head, ~3 GB; act:
        /// ResNet-18 + lerobot's default transformer, two cameras at 480 x 640, ~0.2 GB;
        /// vla_adapter: DINOv2 + SigLIP + Qwen2.5-0.5B + its head, ~5.6 GB; openvla_oft: DINOv2 +
        /// SigLIP + Llama 2 7B, ~30 GB, 15.3 GB with --dtype bf16; bitvla: ternary SigLIP +
        /// BitNet b1.58 2B (2 bits a weight) + its head, ~2.2 GB; octo: octo-small-1.5 with
        /// T5-base, ~0.55 GB).
        #[arg(long)]
        full: bool,
        /// Type of the matmul weights: f32, f16 or bf16 (a smolvla model other than the f32
        /// demo has no tokenizer).
        #[arg(long, default_value = "f32")]
        dtype: String,
        /// Overwrite OUT if it exists.
        #[arg(long)]
        force: bool,
    },
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Info { file, full } => info(&file, full),
        Command::Dequant { file, tensor, out } => dequant(&file, &tensor, out.as_deref()),
        Command::Demo {
            out,
            arch,
            full,
            dtype,
            force,
        } => demo(&out, &arch, full, &dtype, force),
    };
    if let Err(e) = result {
        // A closed pipe (`vla-gguf info f | head`) is not an error worth reporting.
        if e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
        {
            std::process::exit(0);
        }
        eprintln!("vla-gguf: {e:#}");
        std::process::exit(1);
    }
}

fn open(file: &std::path::Path) -> Result<GgufFile> {
    GgufFile::open(file).with_context(|| format!("cannot read {}", file.display()))
}

fn info(file: &std::path::Path, full: bool) -> Result<()> {
    let f = open(file)?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    writeln!(
        out,
        "{}: GGUF v{}, {} metadata entries, {} tensors, alignment {}, data at byte {}, {} bytes",
        file.display(),
        f.version(),
        f.metadata().len(),
        f.tensors().len(),
        f.alignment(),
        f.data_offset(),
        f.file_size()
    )?;
    writeln!(out, "\nmetadata:")?;
    // Columns fit the usual names; a longer one (or a hostile 1 MiB key) just runs over,
    // instead of padding every line to it.
    const MAX_COLUMN: usize = 60;
    let key_width = f
        .metadata()
        .iter()
        .map(|(k, _)| k.len())
        .max()
        .unwrap_or(0)
        .min(MAX_COLUMN);
    for (key, value) in f.metadata() {
        let shown = if full {
            format!("{value:?}")
        } else {
            value.to_string()
        };
        writeln!(
            out,
            "  {key:key_width$}  {:<22} {shown}",
            value.type_description()
        )?;
    }
    writeln!(out, "\ntensors:")?;
    let name_width = f
        .tensors()
        .iter()
        .map(|t| t.name.len())
        .max()
        .unwrap_or(4)
        .clamp(4, MAX_COLUMN);
    writeln!(
        out,
        "  {:name_width$}  {:<7} {:<24} {:>12}",
        "name", "type", "dims", "bytes"
    )?;
    let mut total = 0u64;
    for t in f.tensors() {
        let dims = t
            .dims
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(" x ");
        writeln!(
            out,
            "  {:name_width$}  {:<7} {dims:<24} {:>12}",
            t.name,
            t.ty.name(),
            t.n_bytes()
        )?;
        total += t.n_bytes();
    }
    let params: u64 = f.tensors().iter().map(|t| t.n_elements()).sum();
    writeln!(
        out,
        "\n{} tensors, {params} elements, {total} bytes of tensor data",
        f.tensors().len()
    )?;
    foldquant_sites(&f, &mut out)?;
    out.flush()?;
    Ok(())
}

/// A FoldQuant file's sites (docs/FOLDQUANT.md), or why they do not load.
fn foldquant_sites(f: &GgufFile, out: &mut impl Write) -> Result<()> {
    let fq = match f
        .architecture()
        .ok()
        .map(|_| vla::foldquant::FoldQuant::read(f))
    {
        None | Some(Ok(None)) => return Ok(()),
        Some(Err(e)) => return Ok(writeln!(out, "\nFoldQuant: does not load: {e}")?),
        Some(Ok(Some(fq))) => fq,
    };
    let sites = match fq.sites(f) {
        Ok(s) => s,
        Err(e) => return Ok(writeln!(out, "\nFoldQuant: does not load: {e}")?),
    };
    writeln!(
        out,
        "\nFoldQuant sites ({}; fold order {:?}, clip {}):",
        sites.len(),
        fq.fold_order,
        fq.clip
    )?;
    writeln!(
        out,
        "  {:<32} {:<7} {:>6} {:>6} {:>5} {:>5} {:>6} ascale",
        "site", "module", "n", "k", "w", "a", "block"
    )?;
    for s in &sites {
        writeln!(
            out,
            "  {:<32} {:<7} {:>6} {:>6} {:>5} {:>5} {:>6} {}",
            s.name,
            format!("{:?}", s.module).to_lowercase(),
            s.n,
            s.k,
            s.weight_bits,
            s.act_bits,
            s.block,
            if s.ascale { "yes" } else { "no" }
        )?;
    }
    Ok(())
}

fn dequant(file: &std::path::Path, tensor: &str, out: Option<&std::path::Path>) -> Result<()> {
    let f = open(file)?;
    let values = f
        .dequantize(tensor)
        .with_context(|| format!("cannot dequantize {tensor:?} from {}", file.display()))?;
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    match out {
        Some(path) => std::fs::write(path, &bytes)
            .with_context(|| format!("cannot write {}", path.display()))?,
        None => {
            let mut stdout = std::io::stdout().lock();
            if stdout.is_terminal() {
                bail!("refusing to write binary f32 data to a terminal: redirect stdout or use --out FILE");
            }
            stdout.write_all(&bytes)?;
            stdout.flush()?;
        }
    }
    Ok(())
}

/// The archs `models::ARCHS` serves, as `--arch` values.
fn served_archs() -> clap::builder::PossibleValuesParser {
    clap::builder::PossibleValuesParser::new(vla::models::arch_names())
}

fn demo(out: &std::path::Path, arch: &str, full: bool, dtype: &str, force: bool) -> Result<()> {
    use vla::gguf::GgmlType;
    if out.exists() && !force {
        bail!("{} exists: pass --force to overwrite it", out.display());
    }
    let ty = match dtype {
        "f32" => GgmlType::F32,
        "f16" => GgmlType::F16,
        "bf16" => GgmlType::BF16,
        _ => bail!("--dtype {dtype:?}: expected f32, f16 or bf16"),
    };
    let Some(entry) = vla::models::arch(arch) else {
        bail!(
            "--arch {arch:?}: expected one of {}",
            vla::models::arch_names().join(", ")
        )
    };
    if arch == vla::models::smolvla::ARCH && !full && ty == GgmlType::F32 {
        std::fs::write(out, vla::models::demo_gguf()?)
            .with_context(|| format!("cannot write {}", out.display()))?;
        println!(
            "{}: the demo model (smolvla-shaped, random weights)",
            out.display()
        );
        return Ok(());
    }
    eprintln!(
        "generating {} random {arch} weights...",
        if full { "full-size" } else { "small" }
    );
    (entry.random)(full, 0x5eed, ty)?
        .write_to_file(out)
        .with_context(|| format!("cannot write {}", out.display()))?;
    let tokenizer = vla::tokenizer::Tokenizer::in_gguf(&vla::gguf::GgufFile::open(out)?);
    println!(
        "{}: {arch} with random {dtype} weights, {}",
        out.display(),
        match tokenizer {
            true => "a demo tokenizer",
            false => "no tokenizer (send token ids)",
        }
    );
    Ok(())
}
