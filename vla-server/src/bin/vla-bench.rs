//! `vla-bench`: latency of a model per stage (vision, prefill, denoise, total) on a backend,
//! or end to end through a running vla-server. See `vla-bench --help`.

use anyhow::{bail, Context, Result};
use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;
use vla::backend::profile::summarize;
use vla::gguf::GgufFile;
use vla::policy::{Image, ImageData, Observation, RuntimeOptions};
use vla_server::client::Client;

/// `--batch` and `--clients`.
#[path = "bench/batched.rs"]
mod batched;

#[derive(Parser)]
#[command(
    name = "vla-bench",
    version,
    about = "Measure a VLA policy's latency per stage and its memory",
    after_help = "Examples:\n  vla-bench --demo --backend vulkan --iters 20\n  vla-bench smolvla.gguf --backend cpu --threads 2\n  vla-bench --peak --threads 2\n  vla-bench smolvla.gguf --backend vulkan --batch 8\n  vla-bench --server tcp://127.0.0.1:5555 --iters 100\n  vla-bench --server tcp://127.0.0.1:5555 --clients 4 --iters 50"
)]
struct Args {
    /// The model file (a GGUF).
    #[arg(value_name = "MODEL.gguf", conflicts_with_all = ["demo", "server", "ckpt"])]
    model: Option<PathBuf>,
    /// The model file, as earlier versions spelled it (MODEL.gguf is the same).
    #[arg(long, hide = true, conflicts_with_all = ["demo", "server"])]
    ckpt: Option<PathBuf>,
    /// The built-in demo model.
    #[arg(long, conflicts_with = "server")]
    demo: bool,
    /// Measure a running server end to end instead (its INFO says what to send).
    #[arg(long)]
    server: Option<String>,
    /// Compare models on the same inputs and noise: action-chunk error of each against the
    /// first (max abs, relative L2, cosine), file size and latency ratios.
    #[arg(long, num_args = 2.., value_name = "MODEL.gguf", conflicts_with_all = ["model", "ckpt", "demo", "server"])]
    compare: Vec<PathBuf>,
    /// Where the model runs: cpu | vulkan | metal | dx12 | gl | wgpu | ggml | ggml-cpu |
    /// ggml-cuda | ggml-vulkan | ggml-sycl | ggml:<DEVICE> (as vla-server's --backend).
    #[arg(long, default_value = "cpu")]
    backend: String,
    /// Timed iterations (after the warm-up).
    #[arg(long, default_value_t = 10)]
    iters: usize,
    /// Untimed iterations first (graph compilation, caches).
    #[arg(long, default_value_t = 2)]
    warmup: usize,
    /// Denoising steps; default: the model's.
    #[arg(long)]
    steps: Option<usize>,
    /// CPU threads (cpu, ggml-cpu).
    #[arg(long)]
    threads: Option<usize>,
    /// Re-encode matmul weights at load: f32 | f16 | bf16.
    #[arg(long)]
    weight_dtype: Option<String>,
    /// Store activations (the KV cache included) in f32 | f16 | bf16; kernels accumulate in
    /// f32. 16-bit on the wgpu backends only; f16 needs the adapter's shader-f16.
    #[arg(long, value_name = "f32|f16|bf16", default_value = "f32")]
    act_dtype: String,
    /// Embodiment tag or id (GR00T), or statistics set; default: the model's.
    #[arg(long, value_name = "NAME|ID")]
    embodiment: Option<String>,
    /// Normalisation statistics for a model file that carries none (vla.cpp's GR00T files:
    /// the dataset_statistics.json its converter writes beside them).
    #[arg(long, value_name = "FILE.json")]
    statistics: Option<std::path::PathBuf>,
    /// Print one JSON object (stage times, counters, memory; with --batch its rows; with
    /// --server the --clients measure's, one client unless given) instead of the tables.
    #[arg(long, conflicts_with = "compare")]
    json: bool,
    /// After the usual run, time batched predicts (several robots' requests run as one, as
    /// vla-server --max-batch runs them) of 1 to N copies of the observation, each with its
    /// own noise (sizes 1 to 8, past 8: 1, 2, 4, 8, ... and N): per size the batch's time
    /// (each request's latency), chunks/s, and the throughput against one at a time. Pays on
    /// GPUs; on cpu a predict is compute-bound and gains little.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=256), conflicts_with_all = ["server", "compare"])]
    batch: Option<u32>,
    /// With --server: K clients at once, each on its own connection sending --iters
    /// requests (after --warmup) with its own noise: total throughput (chunks/s),
    /// per-request latency, and the batch sizes the server ran meanwhile (vla-server
    /// --max-batch batches across clients).
    #[arg(long, value_name = "K", requires = "server", value_parser = clap::value_parser!(u32).range(1..=256))]
    clients: Option<u32>,
    /// Run vision, prefill and each denoise step as separate backend runs with the host
    /// between them (the path before device-resident predict): stage times on every
    /// backend, and the traffic it costs.
    #[arg(long, conflicts_with = "server")]
    stepwise: bool,
    /// With --batch: run each matrix product once over all the requests' rows (true) or
    /// every op on each request's rows apart (false); default: stacked on GPUs, apart on
    /// the cpu backend (vla-server --stack-batch).
    #[arg(long, value_name = "BOOL", requires = "batch")]
    stack_batch: Option<bool>,
    /// Instruction length of the synthetic request, in token ids (ids 1 to N, after the
    /// placeholders the model asks for in INFO: BitVLA's; between its `wrap_ids`:
    /// TurboVLA's `[CLS]` and `[SEP]`, 2 more; at most the model's bound). The prefill runs N rounded up to a bucket of 16 rows,
    /// so this changes the work as a prompt of that length does.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..))]
    tokens: u32,
    /// Time every kernel (wgpu backends with timestamp queries: one timed pass per
    /// dispatch, which slows the predict a little) and print the last predict's kernels
    /// grouped by op, with achieved GFLOP/s and GB/s; stage times become sums of kernel
    /// times.
    #[arg(long, conflicts_with_all = ["server", "compare", "stepwise"])]
    profile: bool,
    /// Measure this CPU's peak rate per instruction path (f32 FMA, bf16 and int8 dot
    /// products: register-only loops on one thread and on all --threads at once) and print
    /// them first; alone, just that. The kernels' GFLOP/s and GOPS (here, in the profiles
    /// and the ops bench) are to be read against these, on the machine they ran on.
    #[arg(long, conflicts_with_all = ["server", "compare", "json"])]
    peak: bool,
    /// Camera frames of this size, WIDTHxHEIGHT (e.g. 640x480), as u8; default: the
    /// model's input size. Where the model's reference resizes floats (SmolVLA, pi0, pi0.5,
    /// VLA-JEPA) the backend resizes them; the first predict compiles for the size.
    #[arg(long, value_name = "WxH", value_parser = parse_frame)]
    frame: Option<(usize, usize)>,
}

/// `WIDTHxHEIGHT` -> `(height, width)`.
fn parse_frame(s: &str) -> Result<(usize, usize), String> {
    let side = |v: &str| match v.trim().parse::<usize>() {
        Ok(n) if (1..=vla::preprocess::image::MAX_SIDE).contains(&n) => Ok(n),
        _ => Err(format!(
            "{v:?} is not a side of 1 to {}",
            vla::preprocess::image::MAX_SIDE
        )),
    };
    match s.split_once(['x', 'X']) {
        Some((w, h)) => Ok((side(h)?, side(w)?)),
        None => Err(format!("{s:?}: expected WIDTHxHEIGHT, e.g. 640x480")),
    }
}

/// vla-server's allocator (why: there), so the timings are the server's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("vla-bench: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// A synthetic observation of the right shape: fixed pixels (frames of `sizes`, one each),
/// state and noise; `tokens` instruction ids after the model's `placeholders`, between its
/// `wrap` ids where it has them (INFO's).
fn observation(
    sizes: &[[usize; 2]],
    state_dim: usize,
    noise_len: usize,
    tokens: u32,
    placeholders: &[(u32, usize)],
    wrap: Option<[u32; 2]>,
) -> Observation {
    let image = |&[height, width]: &[usize; 2]| Image {
        height,
        width,
        data: ImageData::RgbU8(
            (0..height * width * 3)
                .map(|i| (i * 37 % 256) as u8)
                .collect(),
        ),
    };
    Observation {
        images: sizes.iter().map(image).collect(),
        state: (0..state_dim).map(|i| (i as f32 * 0.37).sin()).collect(),
        tokens: Some(
            (wrap.map(|[first, _]| first as i32).into_iter())
                .chain(
                    placeholders
                        .iter()
                        .flat_map(|&(id, n)| std::iter::repeat_n(id as i32, n)),
                )
                .chain(1..=tokens as i32)
                .chain(wrap.map(|[_, last]| last as i32))
                .collect(),
        ),
        prompt: None,
        noise: Some(noise(noise_len, 0)),
        token_mask: None,
    }
}

/// The synthetic noise of `len` values; each `seed` another draw (0: the observation's).
fn noise(len: usize, seed: usize) -> Vec<f32> {
    (0..len)
        .map(|i| (i as f32 * 0.61 + seed as f32 * 1.7).cos())
        .collect()
}

/// `obs` with the noise of `seed` (none where it has none): another robot's request.
fn seeded(obs: &Observation, seed: usize) -> Observation {
    Observation {
        noise: obs.noise.as_ref().map(|n| noise(n.len(), seed)),
        ..obs.clone()
    }
}

/// This CPU's peak per instruction path ([`vla::ops::peak`]).
fn print_peaks() {
    let peaks = vla::ops::peak::measure();
    let threads = rayon::current_num_threads();
    println!("cpu peak  (register-only loops; 2 operations per multiply-add)");
    println!(
        "  {:<34} {:>12} {:>12}",
        "path",
        "1 thread",
        format!("{threads} threads")
    );
    for p in &peaks {
        println!(
            "  {:<34} {:>12} {:>12}",
            p.path,
            format!("{:.1} {}", p.one_thread, p.unit),
            format!("{:.1} {}", p.all_threads, p.unit)
        );
    }
    if peaks.is_empty() {
        println!("  (no measured path on this CPU)");
    }
}

/// min / median / max of each column, in ms.
fn report(names: &[&str], rows: &[Vec<f32>]) {
    println!(
        "{:<12} {:>10} {:>10} {:>10}",
        "stage (ms)", "min", "median", "max"
    );
    for (k, name) in names.iter().enumerate() {
        let v = sorted(rows, k);
        if v.iter().all(|x| x.is_nan()) {
            println!("{name:<12} {:>32}", "not separable (one submission)");
            continue;
        }
        println!(
            "{name:<12} {:>10.2} {:>10.2} {:>10.2}",
            v[0],
            v[v.len() / 2],
            v[v.len() - 1]
        );
    }
}

/// Column `k` of `rows`, sorted.
fn sorted(rows: &[Vec<f32>], k: usize) -> Vec<f32> {
    let mut v: Vec<f32> = rows.iter().map(|r| r[k]).collect();
    v.sort_by(f32::total_cmp);
    v
}

fn mib_to_bytes(mib: f64) -> u64 {
    (mib * (1 << 20) as f64) as u64
}

/// The process's peak resident set so far (Linux `VmHWM`); `None` elsewhere.
fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib: f64 = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(kib / 1024.0)
}

fn run(args: Args) -> Result<()> {
    if args.iters == 0 {
        bail!("--iters must be at least 1");
    }
    if let Some(addr) = &args.server {
        return bench_server(addr, &args);
    }
    if let Some(n) = args.threads {
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build_global()?;
    }
    if !args.compare.is_empty() {
        return compare(&args);
    }
    let model = args.model.as_ref().or(args.ckpt.as_ref());
    if args.peak {
        print_peaks();
        if model.is_none() && !args.demo {
            return Ok(());
        }
    }
    let file = match (model, args.demo) {
        (Some(p), _) => GgufFile::open(p).with_context(|| format!("opening {}", p.display()))?,
        (None, true) => GgufFile::from_bytes(vla::models::demo_gguf()?)?,
        (None, false) => {
            bail!("give MODEL.gguf, --demo, --server ADDR or --compare A.gguf B.gguf")
        }
    };
    let opts = runtime_options(&args)?;
    if args.profile {
        // Read when the backend opens, below; nothing else runs yet.
        std::env::set_var("VLA_WGPU_PROFILE", "1");
    }
    let t0 = Instant::now();
    let mut policy = vla::models::from_gguf(file, &opts)?;
    let load_s = t0.elapsed().as_secs_f32();
    // the peak so far: loading (file, translation or re-encoding, compiling, uploads)
    let load_rss = peak_rss_mib();
    let info = policy.info().clone();
    let frame = args.frame.unwrap_or((info.image_height, info.image_width));
    let sizes = match args.frame {
        Some((h, w)) => vec![[h, w]; info.n_images],
        None => info.frame_sizes(),
    };
    // a one-pass policy (ACT) has no denoising stages and reads no noise; INFO says whether
    // the model reads an instruction
    let one_pass = info.num_steps == 0;
    let obs = observation(
        &sizes,
        info.state_dim,
        if one_pass {
            0
        } else {
            info.noise_dims().iter().product()
        },
        if info.reads_instruction {
            args.tokens
        } else {
            0
        },
        &info.placeholders,
        info.wrap_ids,
    );
    for _ in 0..args.warmup {
        policy.predict(&obs)?;
    }
    let mut counters = Vec::new();
    let mut instruction = vla::policy::InstructionRows::default();
    let rows = (0..args.iters)
        .map(|_| {
            let chunk = policy.predict(&obs)?;
            counters.push(chunk.counters);
            instruction = chunk.instruction;
            let t = chunk.times;
            // NaN: a stage the backend cannot time apart (the whole predict in one submission)
            let ms = |t: Option<f32>| t.unwrap_or(f32::NAN);
            Ok(vec![
                ms(t.vision_ms),
                ms(t.prefill_ms),
                ms(t.denoise_ms),
                t.total_ms,
            ])
        })
        .collect::<Result<Vec<_>>>()?;
    // The same structure every predict: the first timed one's counts stand for all.
    let c = counters[0];
    if counters.iter().any(|x| *x != c) {
        bail!("run counters differ between predicts: {counters:?}");
    }
    let stages = ["vision", "prefill", "denoise", "total"];
    // a one-pass policy has no stages: its total alone
    let (stages, rows): (&[&str], Vec<Vec<f32>>) = match one_pass {
        true => (&stages[3..], rows.iter().map(|r| r[3..].to_vec()).collect()),
        false => (&stages, rows),
    };
    // the graphs the predicts ran (compiled for the instruction's rows on first sight)
    let info = policy.info().clone();
    let profile = match args.profile {
        true => Some(policy.profile().context(
            "--profile: this backend cannot time its kernels (it needs a wgpu backend whose adapter has timestamp queries)",
        )?),
        false => None,
    };
    let batches = match args.batch {
        Some(n) => Some(batched::time_batches(
            policy.as_mut(),
            |k| seeded(&obs, k),
            &batched::sizes(n as usize),
            args.iters,
        )?),
        None => None,
    };
    if args.json {
        let stat = |k: usize| {
            let v = sorted(&rows, k);
            match v.iter().all(|x| x.is_nan()) {
                true => serde_json::Value::Null,
                false => {
                    serde_json::json!({"min": v[0], "median": v[v.len() / 2], "max": v[v.len() - 1]})
                }
            }
        };
        let mut out = serde_json::json!({
            "arch": info.arch, "backend": info.backend, "weight_dtypes": info.weight_dtypes,
            "params": info.param_count, "steps": info.num_steps, "iters": args.iters,
            "warmup": args.warmup, "load_s": load_s, "memory_bytes": info.memory_bytes,
            "activation_bytes": info.activation_bytes,
            "kv_bytes": info.kv_bytes, "scratch_bytes": info.scratch_bytes,
            "load_peak_rss_bytes": load_rss.map(mib_to_bytes),
            "peak_rss_bytes": peak_rss_mib().map(mib_to_bytes),
            "submits": c.submits, "host_waits": c.host_waits, "h2d_bytes": c.h2d_bytes,
            "d2h_bytes": c.d2h_bytes, "dispatches": c.dispatches, "embodiment": info.embodiment,
            "frame_width": frame.1, "frame_height": frame.0,
            "instruction_tokens": instruction.tokens, "instruction_rows": instruction.rows,
        });
        for (k, name) in stages.iter().enumerate() {
            out[format!("{name}_ms")] = stat(k);
        }
        for (name, f) in &info.stage_flops {
            out[format!("{name}_gflop")] = serde_json::json!(*f as f64 / 1e9);
        }
        if let Some(p) = &profile {
            out["profile"] = summarize(p)
                .iter()
                .map(|r| {
                    serde_json::json!({"stage": r.stage, "op": r.op, "kernel": r.kernel, "calls": r.calls,
                        "ms": r.ms, "gflops": r.gflops(), "gbps": r.gbps()})
                })
                .collect();
        }
        if let Some(rows) = &batches {
            out["batch"] = batched::batches_json(rows);
        }
        println!("{out}");
        return Ok(());
    }
    println!(
        "model     {} ({:.1} M params, {}), loaded in {load_s:.2} s",
        info.arch,
        info.param_count as f64 / 1e6,
        info.weight_dtypes
    );
    println!("backend   {}", info.backend);
    if let Some(e) = &info.embodiment {
        println!("embodiment {e}");
    }
    println!(
        "shape     {} camera(s) at {}x{} (frames {}x{} u8), chunk {}, {} steps",
        info.n_images,
        info.image_width,
        info.image_height,
        frame.1,
        frame.0,
        info.chunk_text(),
        info.num_steps
    );
    if !one_pass {
        println!(
            "prompt    {} instruction token(s) in {} compiled row(s)",
            instruction.tokens, instruction.rows
        );
    }
    println!("iters     {} (after {} warm-up)", args.iters, args.warmup);
    report(stages, &rows);
    if !info.stage_flops.is_empty() {
        // Rates at the median time; a stage not timed apart counts in the total only.
        let parts: Vec<String> = info
            .stage_flops
            .iter()
            .map(|(name, f)| {
                let k = stages.iter().position(|s| s == name);
                let ms = k.map(|k| sorted(&rows, k)[rows.len() / 2]);
                let gflop = *f as f64 / 1e9;
                match ms.filter(|m| !m.is_nan()) {
                    Some(ms) => format!(
                        "{name} {gflop:.2} GFLOP ({:.1} GFLOP/s)",
                        gflop / (ms as f64 / 1e3)
                    ),
                    None => format!("{name} {gflop:.2} GFLOP"),
                }
            })
            .collect();
        let total: f64 = info.stage_flops.iter().map(|s| s.1 as f64).sum::<f64>() / 1e9;
        let ms = sorted(&rows, 3)[rows.len() / 2] as f64;
        println!(
            "compute   {}; total {total:.2} GFLOP ({:.1} GFLOP/s; matmul + attention, 2 per FMA)",
            parts.join(", "),
            total / (ms / 1e3)
        );
    }
    println!(
        "per predict  {} submits, {} host waits, {} dispatches; host->device {}, device->host {}",
        c.submits,
        c.host_waits,
        c.dispatches,
        bytes(c.h2d_bytes),
        bytes(c.d2h_bytes)
    );
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    println!(
        "memory    backend {:.1} MiB: weights {:.1}, peak activations {:.1} (of which keys and values {:.1}, scratch {:.1})",
        mib(info.memory_bytes),
        mib(info.memory_bytes - info.activation_bytes),
        mib(info.activation_bytes),
        mib(info.kv_bytes),
        mib(info.scratch_bytes)
    );
    if let Some(rss) = peak_rss_mib() {
        let load = load_rss.map_or(String::new(), |l| format!(" ({l:.1} MiB when loaded)"));
        println!("          process peak RSS {rss:.1} MiB{load}");
    }
    if let Some(p) = &profile {
        print_profile(p, info.num_steps);
    }
    if let Some(rows) = &batches {
        batched::print_batches(rows, args.iters);
    }
    Ok(())
}

/// The last predict's kernels grouped by stage, op and kernel, the most time first.
fn print_profile(times: &[vla::policy::KernelTime], steps: usize) {
    let rows = summarize(times);
    let total: f64 = rows.iter().map(|r| r.ms).sum();
    println!(
        "profile   last predict: {} dispatches, {total:.2} ms of kernel time",
        times.len()
    );
    let count = |stage: &str| times.iter().filter(|t| t.stage == stage).count();
    // dispatches of a stage over its attention ops: one per transformer layer (and step)
    let per_layer = |stage: &str| {
        let mut layers: Vec<usize> = times
            .iter()
            .filter(|t| t.stage == stage && t.op == "attention")
            .map(|t| t.node)
            .collect();
        layers.sort_unstable();
        layers.dedup();
        count(stage) as f64 / layers.len().max(1) as f64
    };
    let denoise = count("denoise");
    println!(
        "          dispatches: vision {} ({:.1} an attention layer), prefill {} ({:.1}), denoise {denoise} ({:.1} a step, {:.1} an attention layer)",
        count("vision"),
        per_layer("vision"),
        count("prefill"),
        per_layer("prefill"),
        denoise as f64 / steps.max(1) as f64,
        per_layer("denoise")
    );
    println!(
        "{:<8} {:<12} {:<14} {:>6} {:>10} {:>6} {:>10} {:>8}",
        "stage", "op", "kernel", "calls", "ms", "%", "GFLOP/s", "GB/s"
    );
    for r in &rows {
        println!(
            "{:<8} {:<12} {:<14} {:>6} {:>10.3} {:>6.1} {:>10.1} {:>8.1}",
            r.stage,
            r.op,
            r.kernel,
            r.calls,
            r.ms,
            100.0 * r.ms / total.max(f64::MIN_POSITIVE),
            r.gflops(),
            r.gbps()
        );
    }
}

fn bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 20 => format!("{:.2} MiB", n as f64 / (1 << 20) as f64),
        n if n >= 1 << 10 => format!("{:.1} KiB", n as f64 / 1024.0),
        n => format!("{n} B"),
    }
}

fn runtime_options(args: &Args) -> Result<RuntimeOptions> {
    let weight_dtype = match args.weight_dtype.as_deref() {
        None => None,
        Some(s) => Some(vla::gguf::GgmlType::from_name(&s.to_ascii_uppercase())?),
    };
    Ok(RuntimeOptions {
        backend: args.backend.clone(),
        num_steps: args.steps,
        threads: args.threads,
        weight_dtype,
        act_dtype: vla::backend::ActDtype::from_name(&args.act_dtype)?,
        stepwise: args.stepwise,
        stack_batch: args.stack_batch,
        embodiment: args.embodiment.clone(),
        statistics: args.statistics.clone(),
        ..Default::default()
    })
}

/// Each model's chunk on one fixed observation and noise, its median latency and file size.
fn compare(args: &Args) -> Result<()> {
    let opts = runtime_options(args)?;
    let mut rows = Vec::new();
    for path in &args.compare {
        let file = GgufFile::open(path).with_context(|| format!("opening {}", path.display()))?;
        let size = file.file_size();
        let mut policy = vla::models::from_gguf(file, &opts)
            .with_context(|| format!("loading {}", path.display()))?;
        let info = policy.info().clone();
        let sizes = match args.frame {
            Some((h, w)) => vec![[h, w]; info.n_images],
            None => info.frame_sizes(),
        };
        let obs = observation(
            &sizes,
            info.state_dim,
            info.noise_dims().iter().product(),
            args.tokens,
            &info.placeholders,
            info.wrap_ids,
        );
        let chunk = policy.predict(&obs)?.actions;
        for _ in 1..args.warmup {
            policy.predict(&obs)?;
        }
        let mut ms = (0..args.iters)
            .map(|_| Ok(policy.predict(&obs)?.times.total_ms))
            .collect::<Result<Vec<f32>>>()?;
        ms.sort_by(f32::total_cmp);
        let mid = ms.len() / 2;
        let median = match ms.len() % 2 {
            1 => ms[mid],
            _ => (ms[mid - 1] + ms[mid]) / 2.0,
        };
        let range = (ms[0], ms[ms.len() - 1]);
        rows.push((
            path.display().to_string(),
            size,
            (median, range),
            chunk,
            info.weight_dtypes,
        ));
    }
    let (_, size0, (ms0, _), ref0, _) = &rows[0];
    if let Some((name, ..)) = rows.iter().find(|r| r.3.len() != ref0.len()) {
        bail!("{name}: its chunk has another shape than {}'s", rows[0].0);
    }
    println!(
        "backend {}, {} iterations each, errors of the action chunk against {}",
        args.backend, args.iters, rows[0].0
    );
    println!("| model | weights | MiB | size ratio | median ms (min-max) | latency ratio | max abs err | rel L2 err | cosine |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for (name, size, (ms, (lo, hi)), chunk, dtypes) in &rows {
        let (max_abs, rel, cos) = errors(ref0, chunk);
        println!(
            "| {name} | {dtypes} | {:.1} | {:.2} | {ms:.1} ({lo:.1}-{hi:.1}) | {:.2} | {max_abs:.2e} | {rel:.2e} | {cos:.6} |",
            *size as f64 / (1 << 20) as f64,
            *size as f64 / *size0 as f64,
            ms / ms0
        );
    }
    Ok(())
}

/// Max abs error, relative L2 error and cosine similarity of `b` against `a`.
fn errors(a: &[f32], b: &[f32]) -> (f64, f64, f64) {
    let (mut max_abs, mut diff2, mut a2, mut b2, mut dot) = (0f64, 0f64, 0f64, 0f64, 0f64);
    for (&x, &y) in a.iter().zip(b) {
        let (x, y) = (x as f64, y as f64);
        max_abs = max_abs.max((x - y).abs());
        diff2 += (x - y) * (x - y);
        a2 += x * x;
        b2 += y * y;
        dot += x * y;
    }
    (
        max_abs,
        (diff2 / a2.max(f64::MIN_POSITIVE)).sqrt(),
        dot / (a2 * b2).sqrt().max(f64::MIN_POSITIVE),
    )
}

fn bench_server(addr: &str, args: &Args) -> Result<()> {
    let mut client = Client::connect(addr, 120_000)?;
    let info = client.info().context("asking the server for INFO")?;
    let get = |k: &str| {
        info[k]
            .as_u64()
            .map(|v| v as usize)
            .with_context(|| format!("INFO lacks {k}"))
    };
    let one_pass = get("num_steps")? == 0;
    let n_images = get("n_images")?;
    let sizes = match (
        args.frame,
        serde_json::from_value::<Vec<[usize; 2]>>(info["image_sizes"].clone()),
    ) {
        (Some((h, w)), _) => vec![[h, w]; n_images],
        (None, Ok(s)) if s.len() == n_images => s,
        (None, _) => vec![[get("image_height")?, get("image_width")?]; n_images],
    };
    let obs = observation(
        &sizes,
        get("state_dim")?,
        match one_pass {
            true => 0,
            false => match serde_json::from_value::<[usize; 2]>(info["noise_shape"].clone()) {
                Ok([rows, cols]) => rows * cols,
                Err(_) => get("chunk_size")? * get("max_action_dim")?,
            },
        },
        match info["reads_instruction"].as_bool().unwrap_or(true) {
            true => args.tokens,
            false => 0,
        },
        &serde_json::from_value::<Vec<(u32, usize)>>(info["placeholders"].clone())
            .unwrap_or_default(),
        serde_json::from_value::<Option<[u32; 2]>>(info["wrap_ids"].clone()).unwrap_or_default(),
    );
    if args.clients.is_some() || args.json {
        let clients = args.clients.unwrap_or(1) as usize;
        return batched::bench_clients(
            addr,
            &info,
            |k| seeded(&obs, k),
            clients,
            (args.iters, args.warmup),
            args.json,
        );
    }
    let text = |k: &str| info[k].as_str().unwrap_or("?").to_owned();
    println!("server    {addr}: {} on {}", text("arch"), text("backend"));
    for _ in 0..args.warmup {
        client.predict(&obs)?;
    }
    let rows = (0..args.iters)
        .map(|_| {
            let t0 = Instant::now();
            let r = client.predict(&obs)?;
            let round_trip = t0.elapsed().as_secs_f32() * 1e3;
            Ok(vec![
                r.latency_ms_vision,
                r.latency_ms_prefill,
                r.latency_ms_denoise,
                r.latency_ms_inference,
                r.latency_ms_total,
                round_trip,
            ])
        })
        .collect::<Result<Vec<_>>>()?;
    println!("iters     {} (after {} warm-up)", args.iters, args.warmup);
    report(
        &[
            "vision",
            "prefill",
            "denoise",
            "inference",
            "server",
            "round trip",
        ],
        &rows,
    );
    Ok(())
}
