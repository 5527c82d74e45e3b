//! vla-bench as a user runs it: in process on the demo model, and against a live server.

use std::process::Command;

/// The tests that write full-size files (GBs) take turns: less disk at once, and peak RSS read
/// without the other's load.
#[cfg(target_os = "linux")]
static FULL_SIZE: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A fresh folder of this process's own under the temp dir (a leftover of an earlier run with
/// the same pid is cleared first).
#[cfg(target_os = "linux")]
fn scratch_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `vla-gguf demo --full --dtype DTYPE PATH`; its stderr in the failure message.
#[cfg(target_os = "linux")]
fn full_demo(path: &std::path::Path, dtype: &str) {
    let out = Command::new(env!("CARGO_BIN_EXE_vla-gguf"))
        .args(["demo", "--full", "--force", "--dtype", dtype])
        .arg(path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "vla-gguf demo --full --dtype {dtype}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn bench(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_vla-bench"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[test]
fn reports_every_stage_and_memory() {
    let (ok, out, err) = bench(&["--demo", "--iters", "2", "--warmup", "0", "--steps", "2"]);
    assert!(ok, "{err}");
    for row in ["vision", "prefill", "denoise", "total", "memory", "2 steps"] {
        assert!(out.contains(row), "no {row:?} in:\n{out}");
    }
}

/// `--peak` alone prints this CPU's peak per instruction path and runs no model; with a model
/// the peaks come first, then the usual table; it takes no `--json` (whose output is one
/// object).
#[test]
fn peak_alone_and_before_a_run() {
    let (ok, out, err) = bench(&["--peak", "--threads", "1"]);
    assert!(ok, "{err}");
    assert!(out.contains("cpu peak") && !out.contains("total"), "{out}");
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
        assert!(
            out.contains("f32 FMA (AVX2)") && out.contains("GFLOP/s"),
            "{out}"
        );
    }
    let (ok, out, err) = bench(&["--peak", "--demo", "--iters", "1", "--warmup", "0"]);
    assert!(ok, "{err}");
    let (peak, total) = (out.find("cpu peak"), out.find("total"));
    assert!(peak.is_some() && peak < total, "{out}");
    let (ok, _, err) = bench(&["--peak", "--demo", "--json"]);
    assert!(!ok && err.contains("--json"), "{err}");
}

/// A vla-server child on a free port (the demo model), killed when dropped.
struct Served {
    child: std::process::Child,
    addr: String,
}

impl Served {
    fn start(args: &[&str]) -> Served {
        let mut child = Command::new(env!("CARGO_BIN_EXE_vla-server"))
            .args(["--demo", "--bind", "tcp://127.0.0.1:*"])
            .args(args)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines =
            std::io::BufRead::lines(std::io::BufReader::new(child.stdout.take().unwrap()));
        let addr = lines
            .by_ref()
            .map(|l| l.unwrap())
            .find_map(|l| {
                l.strip_prefix("listening on ")
                    .map(|rest| rest.split_whitespace().next().unwrap().to_owned())
            })
            .expect("server did not start");
        Served { child, addr }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn measures_a_running_server() {
    let server = Served::start(&[]);
    let (ok, out, err) = bench(&["--server", &server.addr, "--iters", "2", "--warmup", "0"]);
    drop(server);
    assert!(ok, "{err}");
    assert!(
        out.contains("smolvla on cpu") && out.contains("round trip"),
        "{out}"
    );
}

/// `--batch 2`: batched predicts of 1 and 2 observations after the usual run, a row per size
/// in the table and in `--json`'s `"batch"`.
#[test]
fn batch_times_each_batch_size() {
    let args = [
        "--demo", "--iters", "1", "--warmup", "0", "--steps", "2", "--batch", "2",
    ];
    let (ok, out, err) = bench(&args);
    assert!(ok, "{err}");
    assert!(
        out.contains("predict_batch of N observations") && out.contains("chunks/s"),
        "{out}"
    );
    let (ok, out, err) = bench(&[&args[..], &["--json"]].concat());
    assert!(ok, "{err}");
    let json: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let rows = json["batch"].as_array().unwrap_or_else(|| panic!("{out}"));
    let sizes: Vec<u64> = rows.iter().map(|r| r["size"].as_u64().unwrap()).collect();
    assert_eq!(sizes, [1, 2], "{out}");
    for r in rows {
        let get = |k: &str| r[k].as_f64().unwrap_or_else(|| panic!("no {k} in {r}"));
        assert!(
            get("min_ms") <= get("median_ms") && get("median_ms") <= get("max_ms"),
            "{r}"
        );
        assert_eq!(get("latency_ms"), get("median_ms"), "{r}");
        let want = get("size") / (get("median_ms") / 1e3);
        assert!((get("chunks_per_s") - want).abs() <= 1e-6 * want, "{r}");
    }
    assert_eq!(rows[0]["throughput_ratio"], 1.0, "{out}");
    // the usual run's fields are all still there
    assert!(json["total_ms"].is_object(), "{out}");
}

/// `--server ADDR --clients 2` against a server batching two: every request is counted once
/// among the batches the server reports, in the table and in `--json`.
#[test]
fn clients_measure_a_batching_server() {
    let server = Served::start(&["--max-batch", "2", "--batch-wait-ms", "100"]);
    let run = |json: bool| {
        let mut args = vec![
            "--server",
            &server.addr,
            "--clients",
            "2",
            "--iters",
            "2",
            "--warmup",
            "1",
        ];
        if json {
            args.push("--json");
        }
        let (ok, out, err) = bench(&args);
        assert!(ok, "{err}");
        out
    };
    let out = run(false);
    for row in ["clients   2", "throughput", "round trip", "batches"] {
        assert!(out.contains(row), "no {row:?} in:\n{out}");
    }
    let out = run(true);
    let json: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        (&json["clients"], &json["requests"], &json["max_batch"]),
        (&2.into(), &4.into(), &2.into()),
        "{out}"
    );
    assert!(
        json["chunks_per_s"].as_f64().is_some_and(|c| c > 0.0),
        "{out}"
    );
    let ran: u64 = json["batches"]
        .as_object()
        .unwrap_or_else(|| panic!("{out}"))
        .iter()
        .map(|(size, n)| size.parse::<u64>().unwrap() * n.as_u64().unwrap())
        .sum();
    assert_eq!(ran, 4, "the batches run while measuring: {out}");
}

#[test]
fn bad_arguments_are_one_clear_line() {
    let (ok, _, err) = bench(&["--iters", "1"]);
    assert!(
        !ok && err.contains("MODEL.gguf") && err.contains("--demo"),
        "{err}"
    );
    // The model file, and its older spelling --ckpt.
    for args in [&["/nonexistent.gguf"][..], &["--ckpt", "/nonexistent.gguf"]] {
        let (ok, _, err) = bench(args);
        assert!(!ok && err.contains("/nonexistent.gguf"), "{err}");
    }
    // An instruction longer than the model takes is the model's clear error.
    let (ok, _, err) = bench(&["--demo", "--iters", "1", "--warmup", "0", "--tokens", "17"]);
    assert!(
        !ok && err.contains("17 tokens, more than this model's bound of 16"),
        "{err}"
    );
}

/// `--tokens N`: the prefill runs N rounded up to a bucket of 16 rows (`--json` says both).
#[test]
fn the_instruction_length_is_a_flag() {
    for (n, rows) in [("3", 16), ("16", 16)] {
        let args = [
            "--demo", "--iters", "1", "--warmup", "0", "--json", "--tokens", n,
        ];
        let (ok, out, err) = bench(&args);
        assert!(ok && out.contains("\"total_ms\""), "{err}");
        let json: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
        assert_eq!(
            json["instruction_tokens"],
            n.parse::<u64>().unwrap(),
            "{out}"
        );
        assert_eq!(json["instruction_rows"], rows, "{out}");
        // the process's peak RSS when loaded and at the end (Linux)
        let (load, peak) = (
            json["load_peak_rss_bytes"].as_u64(),
            json["peak_rss_bytes"].as_u64(),
        );
        let (Some(load), Some(peak)) = (load, peak) else {
            panic!("no peak RSS in {out}");
        };
        assert!(0 < load && load <= peak, "{out}");
        // the prefill's keys and values are among the activations a predict holds
        let (kv, act) = (json["kv_bytes"].as_u64(), json["activation_bytes"].as_u64());
        let (Some(kv), Some(act)) = (kv, act) else {
            panic!("no kv_bytes / activation_bytes in {out}");
        };
        assert!(0 < kv && kv <= act, "{out}");
    }
}

/// `--weight-dtype bf16` on an f32 file costs about what serving the bf16 file costs: the
/// re-encoded tensors held at their size, the others left in the mapped file (a structural
/// bound on peak RSS, measured in child processes on SmolVLA at smolvla_base's sizes; was
/// 1.27x before the re-encoding went in place and its buffers were allocated at their size).
#[cfg(target_os = "linux")]
#[test]
fn weight_dtype_peaks_near_the_files_of_that_type() {
    let _turn = FULL_SIZE.lock().unwrap_or_else(|e| e.into_inner());
    let dir = scratch_dir("vla-wdtype");
    let (f32_file, bf16_file) = (dir.join("f32.gguf"), dir.join("bf16.gguf"));
    full_demo(&f32_file, "f32");
    full_demo(&bf16_file, "bf16");
    let peak = |args: &[&str]| -> f64 {
        let (ok, out, err) = bench(&[args, &["--iters", "1", "--warmup", "0", "--json"]].concat());
        assert!(ok, "{err}");
        let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
        v["peak_rss_bytes"]
            .as_f64()
            .expect("peak_rss_bytes on Linux")
    };
    let (f, b) = (f32_file.to_str().unwrap(), bf16_file.to_str().unwrap());
    let reencoded = peak(&[f, "--weight-dtype", "bf16"]);
    let served = peak(&[b]);
    let _ = std::fs::remove_dir_all(&dir);
    let ratio = reencoded / served;
    println!("peak RSS: --weight-dtype bf16 {reencoded} B, the bf16 file {served} B ({ratio:.2}x)");
    assert!(
        ratio <= 1.2,
        "--weight-dtype bf16 peaks at {ratio:.2}x the bf16 file's"
    );
}

/// vla.cpp's layout of a file costs what ours costs at load and over a predict: the
/// translation renames and re-keys in place, no second copy of the weights (a structural
/// bound on peak RSS, measured in child processes on SmolVLA at smolvla_base's sizes, f32,
/// rewritten in vla.cpp's layout by tests/interop/vlacpp_smolvla_relayout.py).
#[cfg(target_os = "linux")]
#[test]
fn vlacpp_layout_loads_without_a_copy() {
    let _turn = FULL_SIZE.lock().unwrap_or_else(|e| e.into_inner());
    let dir = scratch_dir("vla-vlacpp-mem");
    let (ours, theirs) = (dir.join("ours.gguf"), dir.join("vlacpp.gguf"));
    full_demo(&ours, "f32");
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/interop/vlacpp_smolvla_relayout.py");
    let out = Command::new("python3")
        .arg(&script)
        .args([&ours, &theirs])
        .output()
        .expect("python3 with gguf and numpy (scripts/test.sh installs them)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rss = |path: &std::path::Path| -> (f64, f64) {
        let file = path.to_str().unwrap();
        let (ok, out, err) = bench(&[file, "--iters", "1", "--warmup", "0", "--json"]);
        assert!(ok, "{err}");
        let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
        let get = |k: &str| v[k].as_f64().unwrap_or_else(|| panic!("no {k} in {out}"));
        (get("load_peak_rss_bytes"), get("peak_rss_bytes"))
    };
    let ((ours_load, ours_peak), (load, peak)) = (rss(&ours), rss(&theirs));
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "peak RSS, ours / vla.cpp's layout: load {ours_load} / {load} B, predict {ours_peak} / {peak} B"
    );
    assert!(
        load <= 1.1 * ours_load + 16e6 && peak <= 1.1 * ours_peak,
        "vla.cpp's layout: load {load} B, peak {peak} B; ours {ours_load} B, {ours_peak} B"
    );
}
