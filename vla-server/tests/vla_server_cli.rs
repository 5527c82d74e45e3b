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
