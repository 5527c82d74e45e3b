//! `vla-convert smolvla` on the committed lerobot fixture, as a user runs it: writes a GGUF
//! that loads, refuses to overwrite without --force, and applies --dtype.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use vla::gguf::{GgmlType, GgufFile};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/smolvla-tiny")
}

fn vla_convert(out: &Path, extra: &[&str]) -> Output {
    let ckpt = fixture();
    let mut args = vec![
        "smolvla",
        "--ckpt",
        ckpt.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend(extra);
    Command::new(env!("CARGO_BIN_EXE_vla-convert"))
        .args(&args)
        .output()
        .unwrap()
}

#[test]
fn converts_and_refuses_to_overwrite_without_force() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("tiny.gguf");
    let run = vla_convert(&out, &[]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let text = String::from_utf8_lossy(&run.stdout);
    assert!(text.contains("wrote") && text.contains("smolvla"), "{text}");
    let first = std::fs::read(&out).unwrap();
    let file = GgufFile::from_bytes(first.clone()).unwrap();
    assert_eq!(file.architecture().unwrap(), "smolvla");
    assert_eq!(
        file.tensor_info("vlm.blk.0.attn_q.weight").unwrap().ty,
        GgmlType::F32
    );

    // Exists, no --force: an error naming the flag, and the file is untouched.
    let again = vla_convert(&out, &["--dtype", "bf16"]);
    assert!(!again.status.success());
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(err.contains("--force"), "{err}");
    assert_eq!(std::fs::read(&out).unwrap(), first);

    // With --force and --dtype bf16: matmul weights bf16, norms and statistics f32.
    let forced = vla_convert(
        &out,
        &[
            "--dtype",
            "bf16",
            "--force",
            "--vlm-config",
            fixture().join("vlm").to_str().unwrap(),
        ],
    );
    assert!(
        forced.status.success(),
        "{}",
        String::from_utf8_lossy(&forced.stderr)
    );
    let file = GgufFile::open(&out).unwrap();
    assert_eq!(
        file.tensor_info("vlm.blk.0.attn_q.weight").unwrap().ty,
        GgmlType::BF16
    );
    assert_eq!(
        file.tensor_info("vlm.blk.0.attn_norm.weight").unwrap().ty,
        GgmlType::F32
    );
    assert_eq!(file.tensor_info("state_mean").unwrap().ty, GgmlType::F32);
}

#[test]
fn a_missing_checkpoint_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("x.gguf");
    let run = Command::new(env!("CARGO_BIN_EXE_vla-convert"))
        .args([
            "smolvla",
            "--ckpt",
            dir.path().to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(!run.status.success());
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(err.contains("config.json"), "{err}");
    assert!(!out.exists());
}
