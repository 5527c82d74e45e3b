//! vla-bench's batching measures: `--batch N` times `Policy::predict_batch` in process on 1
//! to N copies of the benchmark observation; `--server ADDR --clients K` sends from K
//! connections at once to a running vla-server (batching across clients with its
//! `--max-batch`).

use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::sync::{Arc, Barrier};
use std::time::Instant;
use vla::policy::{Observation, Policy};
use vla_server::client::Client;

/// One batch size's timings.
pub struct BatchRow {
    pub size: usize,
    /// Wall time of one `predict_batch` run: each of its requests' latency.
    pub median_ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
    /// Chunks a second at the median: `size / median`.
    pub chunks_per_s: f64,
}

/// The batch sizes `--batch n` times: each of 1 to n up to 8, else 1, 2, 4, 8, ... and n.
pub fn sizes(n: usize) -> Vec<usize> {
    match n {
        0..=8 => (1..=n).collect(),
        _ => {
            let mut sizes: Vec<usize> = std::iter::successors(Some(1), |&b| Some(b * 2))
                .take_while(|&b| b < n)
                .collect();
            sizes.push(n);
            sizes
        }
    }
}

/// Times `predict_batch` on batches of `sizes` copies of `obs` (copy k with the noise of
/// `seeded(k)`): one untimed batch per size first (the first of a size compiles its graphs),
/// then `iters` timed.
pub fn time_batches(
    policy: &mut dyn Policy,
    seeded: impl Fn(usize) -> Observation,
    sizes: &[usize],
    iters: usize,
) -> Result<Vec<BatchRow>> {
    sizes
        .iter()
        .map(|&size| {
            let batch: Vec<Observation> = (0..size).map(&seeded).collect();
            let mut run = || -> Result<f64> {
                let t0 = Instant::now();
                let results = policy.predict_batch(&batch);
                let ms = t0.elapsed().as_secs_f64() * 1e3;
                if results.len() != size {
                    bail!("a batch of {size} gave {} results", results.len());
                }
                for (k, r) in results.into_iter().enumerate() {
                    r.with_context(|| format!("batch of {size}, observation {k}"))?;
                }
                Ok(ms)
            };
            run()?;
            let mut ms = (0..iters).map(|_| run()).collect::<Result<Vec<f64>>>()?;
            ms.sort_by(f64::total_cmp);
            let median_ms = ms[ms.len() / 2];
            Ok(BatchRow {
                size,
                median_ms,
                min_ms: ms[0],
                max_ms: ms[ms.len() - 1],
                chunks_per_s: size as f64 / (median_ms / 1e3),
            })
        })
        .collect()
}

/// Throughput against one request at a time (the first row's, size 1).
fn speedup(rows: &[BatchRow], row: &BatchRow) -> f64 {
    row.chunks_per_s / rows[0].chunks_per_s
}

pub fn print_batches(rows: &[BatchRow], iters: usize) {
    println!(
        "batch     predict_batch of N observations (each its own noise), {iters} runs a size after 1 warm-up"
    );
    println!(
        "{:>6} {:>12} {:>18} {:>10} {:>8}",
        "size", "median ms", "min-max ms", "chunks/s", "vs 1"
    );
    for r in rows {
        println!(
            "{:>6} {:>12.2} {:>18} {:>10.2} {:>7.2}x",
            r.size,
            r.median_ms,
            format!("{:.2}-{:.2}", r.min_ms, r.max_ms),
            r.chunks_per_s,
            speedup(rows, r)
        );
    }
    println!(
        "          a batch's requests each wait for the whole batch: their latency is its time"
    );
}

/// `--json`'s `"batch"` array.
pub fn batches_json(rows: &[BatchRow]) -> serde_json::Value {
    rows.iter()
        .map(|r| {
            serde_json::json!({
                "size": r.size, "median_ms": r.median_ms, "min_ms": r.min_ms,
                "max_ms": r.max_ms, "latency_ms": r.median_ms,
                "chunks_per_s": r.chunks_per_s, "throughput_ratio": speedup(rows, r),
            })
        })
        .collect()
}

/// What one client measured: round trip and the server's model time, per request (ms).
type Timings = Vec<(f64, f64)>;

/// `clients` connections to the server at `addr` at once, each sending `warmup` then `iters`
/// predicts of `seeded(its index)`; reports the timed phase: total throughput, per-request
/// latency and the batches the server ran meanwhile (INFO's `batches`).
pub fn bench_clients(
    addr: &str,
    info: &serde_json::Value,
    seeded: impl Fn(usize) -> Observation,
    clients: usize,
    (iters, warmup): (usize, usize),
    json: bool,
) -> Result<()> {
    // All warm first; the main thread reads the batches so far, then all start at once.
    let barrier = Arc::new(Barrier::new(clients + 1));
    let threads: Vec<_> = (0..clients)
        .map(|k| {
            let (addr, barrier, obs) = (addr.to_owned(), Arc::clone(&barrier), seeded(k));
            std::thread::spawn(move || -> Result<Timings> {
                let warm = Client::connect(&addr, 120_000).and_then(|mut c| {
                    for _ in 0..warmup {
                        c.predict(&obs)?;
                    }
                    Ok(c)
                });
                barrier.wait();
                barrier.wait();
                let mut client = warm.with_context(|| format!("client {k}"))?;
                (0..iters)
                    .map(|_| {
                        let t0 = Instant::now();
                        let r = client
                            .predict(&obs)
                            .with_context(|| format!("client {k}"))?;
                        Ok((
                            t0.elapsed().as_secs_f64() * 1e3,
                            r.latency_ms_inference as f64,
                        ))
                    })
                    .collect()
            })
        })
        .collect();
    barrier.wait();
    let mut control = Client::connect(addr, 120_000)?;
    let before = batch_counts(&control.info()?);
    let t0 = Instant::now();
    barrier.wait();
    let mut timings = Timings::new();
    for t in threads {
        let got = t
            .join()
            .map_err(|_| anyhow::anyhow!("a client thread panicked"))??;
        timings.extend(got);
    }
    let seconds = t0.elapsed().as_secs_f64();
    let after = control.info()?;
    let batches = batch_counts(&after).map(|mut counts| {
        for (size, n) in before.unwrap_or_default() {
            let c = counts.entry(size).or_default();
            *c = c.saturating_sub(n);
        }
        counts.retain(|_, n| *n > 0);
        counts
    });
    let chunks_per_s = timings.len() as f64 / seconds;
    let round_trip = stats(timings.iter().map(|t| t.0));
    let inference = stats(timings.iter().map(|t| t.1));
    let text = |k: &str| info[k].as_str().unwrap_or("?").to_owned();
    if json {
        let stat = |(min, median, max): (f64, f64, f64)| serde_json::json!({"min": min, "median": median, "max": max});
        let out = serde_json::json!({
            "server": addr, "arch": text("arch"), "backend": text("backend"),
            "max_batch": after["max_batch"], "batch_wait_ms": after["batch_wait_ms"],
            "clients": clients, "iters": iters, "warmup": warmup,
            "requests": timings.len(), "seconds": seconds, "chunks_per_s": chunks_per_s,
            "round_trip_ms": stat(round_trip), "inference_ms": stat(inference),
            "batches": batches,
        });
        println!("{out}");
        return Ok(());
    }
    let batching = match after["max_batch"].as_u64() {
        Some(n) => format!(
            " (max batch {n}, batch wait {} ms)",
            after["batch_wait_ms"].as_u64().unwrap_or(0)
        ),
        None => String::new(),
    };
    println!(
        "server    {addr}: {} on {}{batching}",
        text("arch"),
        text("backend")
    );
    println!("clients   {clients}, {iters} requests each (after {warmup} warm-up)");
    println!(
        "throughput {chunks_per_s:.2} chunks/s ({} chunks in {seconds:.2} s)",
        timings.len()
    );
    println!(
        "{:<18} {:>10} {:>10} {:>10}",
        "per request (ms)", "min", "median", "max"
    );
    for (name, (min, median, max)) in [("round trip", round_trip), ("inference", inference)] {
        println!("{name:<18} {min:>10.2} {median:>10.2} {max:>10.2}");
    }
    match batches {
        Some(counts) => println!(
            "batches   {} (size x runs, during the timed requests)",
            counts
                .iter()
                .map(|(size, n)| format!("{size} x{n}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        None => println!("batches   not reported by this server (no INFO batches)"),
    }
    Ok(())
}

/// INFO's `batches` (`{"SIZE": COUNT}`), where the server reports them.
fn batch_counts(info: &serde_json::Value) -> Option<BTreeMap<usize, u64>> {
    info["batches"]
        .as_object()?
        .iter()
        .map(|(size, n)| Some((size.parse().ok()?, n.as_u64()?)))
        .collect()
}

/// min, median and max.
fn stats(values: impl Iterator<Item = f64>) -> (f64, f64, f64) {
    let mut v: Vec<f64> = values.collect();
    v.sort_by(f64::total_cmp);
    (v[0], v[v.len() / 2], v[v.len() - 1])
}
