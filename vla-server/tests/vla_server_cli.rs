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
        err.contains("is a folder, not a GGUF file") && err.contains("vla-convert ARCH --ckpt"),
        "{err}"
    );
}

#[test]
fn a_bind_address_without_a_scheme_says_tcp() {
    let (ok, err) = serve(&["--demo", "--bind", "127.0.0.1:5611"]);
    assert!(!ok, "{err}");
    assert!(err.contains("tcp://HOST:PORT"), "{err}");
}

/// Serving on a software Vulkan adapter (lavapipe, all CI has) warns that it is a CPU; log
/// lines into a pipe carry no terminal colours.
#[test]
fn a_cpu_vulkan_adapter_is_named_and_logs_have_no_colours() {
    use std::io::{BufRead, Read};
    let mut server = Command::new(env!("CARGO_BIN_EXE_vla-server"))
        .args([
            "--demo",
            "--backend",
            "vulkan",
            "--bind",
            "tcp://127.0.0.1:*",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let lines = std::io::BufReader::new(server.stdout.take().unwrap()).lines();
    let started = lines
        .map(|l| l.unwrap())
        .any(|l| l.starts_with("listening on "));
    server.kill().unwrap();
    server.wait().unwrap();
    let mut err = String::new();
    server
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(started, "{err}");
    if std::env::var("VLA_ALLOW_NO_GPU").as_deref() == Ok("1") && !err.contains("llvmpipe") {
        return; // no adapter here (said loudly by the golden tests)
    }
    assert!(err.contains("adapter is a CPU"), "{err}");
    assert!(!err.contains('\u{1b}'), "{err}");
}
