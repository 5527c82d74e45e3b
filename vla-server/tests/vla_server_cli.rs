//! vla-server's answers to a new user's first mistakes: each names the next step.

use std::process::Command;

/// Runs vla-server with `args`, which must make it exit (no server starts).
fn serve(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_vla-server"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[test]
fn a_checkpoint_folder_says_to_convert_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().unwrap();
    let (ok, err) = serve(&[path]);
    assert!(!ok, "{err}");
    assert!(
        err.contains("is a folder, not a GGUF file") && err.contains("vla-convert auto --ckpt"),
        "{err}"
    );
}

#[test]
fn a_bind_address_without_a_scheme_says_tcp() {
    let (ok, err) = serve(&["--demo", "--bind", "127.0.0.1:5611"]);
    assert!(!ok, "{err}");
    assert!(err.contains("tcp://HOST:PORT"), "{err}");
}

/// Batching options out of range are refused before the model loads, saying what is allowed.
#[test]
fn bad_batching_options_are_one_clear_line() {
    for (args, needle) in [
        (&["--max-batch", "0"][..], "max_batch 0: expected 1..=256"),
        (
            &["--max-batch", "64"],
            "max_batch 64 is more than max_queue 16",
        ),
        (
            &["--max-batch", "2", "--batch-wait-ms", "60000"],
            "batch_wait_ms 60000: expected 0..=10000",
        ),
    ] {
        let (ok, err) = serve(&[&["--demo"], args].concat());
        assert!(!ok, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
    }
}

/// A running vla-server on a free port, with its stderr kept for [`Running::stop`].
struct Running {
    child: std::process::Child,
    /// `tcp://127.0.0.1:PORT`, or `None` when it exited before listening.
    endpoint: Option<String>,
}

impl Running {
    fn start(args: &[&str]) -> Running {
        use std::io::BufRead;
        let mut child = Command::new(env!("CARGO_BIN_EXE_vla-server"))
            .args(args)
            .args(["--bind", "tcp://127.0.0.1:*"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let endpoint = lines.map(|l| l.unwrap()).find_map(|l| {
            let rest = l.strip_prefix("listening on ")?;
            Some(rest.split(' ').next().unwrap().to_owned())
        });
        Running { child, endpoint }
    }

    /// Stops it and returns what it wrote to stderr.
    fn stop(mut self) -> String {
        use std::io::Read;
        self.child.kill().unwrap();
        self.child.wait().unwrap();
        let mut err = String::new();
        let stderr = self.child.stderr.as_mut().unwrap();
        stderr.read_to_string(&mut err).unwrap();
        err
    }
}

/// Serving on a software Vulkan adapter (lavapipe, all CI has) warns that it is a CPU; log
/// lines into a pipe carry no terminal colours.
#[test]
fn a_cpu_vulkan_adapter_is_named_and_logs_have_no_colours() {
    let server = Running::start(&["--demo", "--backend", "vulkan"]);
    let started = server.endpoint.is_some();
    let err = server.stop();
    assert!(started, "{err}");
    if std::env::var("VLA_ALLOW_NO_GPU").as_deref() == Ok("1") && !err.contains("llvmpipe") {
        return; // no adapter here (said loudly by the golden tests)
    }
    assert!(err.contains("adapter is a CPU"), "{err}");
    assert!(!err.contains('\u{1b}'), "{err}");
}

/// A refused request leaves one warning in the log, with the reason.
#[test]
fn a_refused_request_is_logged() {
    let server = Running::start(&["--demo"]);
    let endpoint = server.endpoint.clone().expect("the server starts");
    let ctx = zmq::Context::new();
    let req = ctx.socket(zmq::REQ).unwrap();
    req.set_rcvtimeo(10_000).unwrap();
    req.connect(&endpoint).unwrap();
    req.send(&b"\xff\xff not a PredictRequest"[..], 0).unwrap();
    let reply = req.recv_bytes(0);
    let err = server.stop();
    assert!(reply.is_ok(), "no reply: {err}");
    let warned: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("refused request"))
        .collect();
    assert_eq!(warned.len(), 1, "{err}");
}
