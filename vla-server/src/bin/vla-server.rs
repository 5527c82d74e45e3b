//! `vla-server`: serve one VLA policy over ZeroMQ (see `vla-server --help`).

use anyhow::{Context, Result};
use clap::Parser;
use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;
use vla::gguf::GgufFile;
use vla_server::config::{ServerArgs, Settings};
use vla_server::serve::Server;

/// mimalloc keeps freed pages for reuse, where glibc's malloc hands large blocks back to the
/// kernel and faults them in again on the next op (the cpu backend allocates each op's
/// output; SmolVLA base's f32 vision tower: 3077 -> 2793 ms on 2 cores). The library and its
/// tests keep the system allocator.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    match run(ServerArgs::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("vla-server: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: ServerArgs) -> Result<()> {
    let settings = Settings::resolve(args, |k| std::env::var(k).ok())?;
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(&settings.log_level))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    if let Some(n) = settings.runtime.threads {
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build_global()
            .context("setting up CPU threads")?;
    }

    let t0 = Instant::now();
    let (file, source) = match (&settings.model, settings.demo) {
        (_, true) => (
            GgufFile::from_bytes(vla::models::demo_gguf()?)?,
            "built-in demo (random weights)".to_string(),
        ),
        (Some(path), false) => (
            GgufFile::open(path).with_context(|| format!("opening model {}", path.display()))?,
            path.display().to_string(),
        ),
        (None, false) => anyhow::bail!("no model: give MODEL.gguf or --demo"),
    };
    let policy = vla::models::from_gguf(file, &settings.runtime)
        .with_context(|| format!("loading {source}"))?;
    let info = policy.info().clone();
    let load_s = t0.elapsed().as_secs_f32();

    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        // A second signal while shutting down exits at once.
        signal_hook::flag::register_conditional_shutdown(sig, 1, Arc::clone(&stop))?;
        signal_hook::flag::register(sig, Arc::clone(&stop))?;
    }
    let server = Server::bind(policy, &settings.bind, settings.serve)?;
    let openpi = match &settings.openpi {
        None => None,
        Some(o) => {
            if o.keys.images.len() != info.n_images {
                anyhow::bail!(
                    "--openpi-keys names {} camera(s) ({}), this model takes {}",
                    o.keys.images.len(),
                    o.keys.images.join(", "),
                    info.n_images
                );
            }
            let (ctx, endpoint) = server.inproc();
            let front = vla_server::openpi::Frontend {
                keys: o.keys.clone(),
                api_key: o.api_key.clone(),
                metadata: vla_server::openpi::metadata(&server.info_json()),
                ctx,
                endpoint: endpoint.to_owned(),
            };
            Some(vla_server::openpi::spawn(
                &o.bind,
                front,
                Arc::clone(&stop),
            )?)
        }
    };

    let mut out = std::io::stdout().lock();
    writeln!(out, "vla-server {}", env!("CARGO_PKG_VERSION"))?;
    writeln!(out, "  model     {source} (loaded in {load_s:.2} s)")?;
    writeln!(out, "  arch      {}", info.arch)?;
    writeln!(
        out,
        "  params    {} ({:.1} M)",
        info.param_count,
        info.param_count as f64 / 1e6
    )?;
    writeln!(out, "  weights   {}", info.weight_dtypes)?;
    writeln!(out, "  backend   {}", info.backend)?;
    writeln!(
        out,
        "  memory    {:.1} MiB (weights + peak activations)",
        info.memory_bytes as f64 / (1 << 20) as f64
    )?;
    writeln!(
        out,
        "  io        {} camera(s) at {}x{}, state {}, chunk {}, {} steps",
        info.n_images,
        info.image_height,
        info.image_width,
        info.state_dim,
        info.chunk_text(),
        info.num_steps
    )?;
    if !info.camera_names.is_empty() {
        writeln!(out, "  cameras   {}", info.camera_names.join(", "))?;
    }
    writeln!(
        out,
        "  queue     {}, at most {} pending",
        settings.serve.queue, settings.serve.max_queue
    )?;
    let serve = settings.serve;
    if serve.max_batch > 1 {
        writeln!(
            out,
            "  batch     up to {} requests a predict, waiting up to {} ms to fill one",
            serve.max_batch,
            serve.batch_wait.as_millis()
        )?;
        tracing::info!(
            "batching requests across clients: up to {} a predict, waiting up to {} ms",
            serve.max_batch,
            serve.batch_wait.as_millis()
        );
    } else if !serve.batch_wait.is_zero() {
        tracing::warn!("--batch-wait-ms has no effect with --max-batch 1 (no batching)");
    }
    if let (Some(addr), Some(o)) = (openpi, &settings.openpi) {
        writeln!(
            out,
            "  openpi    ws://{addr} (cameras {}; state {}; prompt {})",
            o.keys.images.join(", "),
            o.keys.state.join(" + "),
            o.keys.prompt
        )?;
    }
    writeln!(out, "listening on {} (Ctrl-C to stop)", server.endpoint())?;
    out.flush()?;
    drop(out);

    let stats = server.run(&stop)?;
    println!(
        "stopped: {} chunks served, {} errors answered",
        stats.predicted, stats.errors
    );
    Ok(())
}
