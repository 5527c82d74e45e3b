//! `vla-gguf info` and `dequant` on a file written by gguf-py, as a user runs them.

use std::path::{Path, PathBuf};
use std::process::Command;

fn gguf_py_file() -> PathBuf {
    let dir = tempfile::tempdir().unwrap().keep();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/interop/gguf_py.py");
    let out = Command::new("python3")
        .arg(&script)
        .arg("write")
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "gguf-py is needed (scripts/test.sh installs it): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    dir
}

fn vla_gguf(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_vla-gguf"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn info_lists_metadata_and_tensors() {
    let dir = gguf_py_file();
    let file = dir.join("gguf_py.gguf");
    let out = vla_gguf(&["info", file.to_str().unwrap()]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("GGUF v3, 27 metadata entries, 10 tensors, alignment 32"),
        "{text}"
    );
    assert!(text.contains("general.architecture"), "{text}");
    assert!(text.contains("\"interop\""), "{text}");
    assert!(text.contains("array[string; 4]"), "{text}");
    let q8 = text
        .lines()
        .find(|l| l.trim_start().starts_with("w.Q8_0 "))
        .unwrap();
    let cols: Vec<&str> = q8.split_whitespace().collect();
    assert_eq!(cols, ["w.Q8_0", "Q8_0", "96", "x", "5", "510"]);
}

#[test]
fn dequant_writes_the_values_gguf_py_dequantizes() {
    let dir = gguf_py_file();
    let file = dir.join("gguf_py.gguf");
    for ty in ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"] {
        let out = vla_gguf(&["dequant", file.to_str().unwrap(), &format!("w.{ty}")]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let expected = std::fs::read(dir.join(format!("w.{ty}.dequant.f32"))).unwrap();
        assert_eq!(out.stdout.len(), 96 * 5 * 4);
        assert!(
            out.stdout == expected,
            "w.{ty}: vla-gguf dequant differs from gguf-py"
        );
    }
    let out_file = dir.join("out.f32");
    let out = vla_gguf(&[
        "dequant",
        file.to_str().unwrap(),
        "w.3d",
        "--out",
        out_file.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    assert_eq!(
        std::fs::read(out_file).unwrap(),
        std::fs::read(dir.join("w.3d.dequant.f32")).unwrap()
    );
}

#[test]
fn errors_are_one_clear_line() {
    let dir = gguf_py_file();
    let file = dir.join("gguf_py.gguf");
    let out = vla_gguf(&["dequant", file.to_str().unwrap(), "missing"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.starts_with("vla-gguf: ") && err.contains("tensor \"missing\" not found"),
        "{err}"
    );

    let truncated = dir.join("truncated.gguf");
    let bytes = std::fs::read(&file).unwrap();
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    let out = vla_gguf(&["info", truncated.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("runs past the end of the file"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn demo_writes_small_models_of_each_arch() {
    let dir = tempfile::tempdir().unwrap();
    for arch in vla::models::arch_names() {
        let out = dir.path().join(format!("{arch}.gguf"));
        let run = vla_gguf(&["demo", out.to_str().unwrap(), "--arch", arch]);
        assert!(
            run.status.success(),
            "{}",
            String::from_utf8_lossy(&run.stderr)
        );
        let file = vla::gguf::GgufFile::open(&out).unwrap();
        assert_eq!(file.architecture().unwrap(), arch);
        vla::models::load(&out, &vla::policy::RuntimeOptions::default()).unwrap();
    }
    let bad = vla_gguf(&[
        "demo",
        dir.path().join("x.gguf").to_str().unwrap(),
        "--arch",
        "no_such_arch",
    ]);
    assert_eq!(bad.status.code(), Some(2));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("\"no_such_arch\"") || err.contains("'no_such_arch'"),
        "{err}"
    );
    let names = vla::models::arch_names().join(", ");
    assert!(
        err.contains(&format!("[possible values: {names}]")),
        "{err}"
    );
}
