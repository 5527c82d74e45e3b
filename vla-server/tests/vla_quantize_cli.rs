//! vla-quantize as a user runs it, and its output on every backend.

use std::path::Path;
use std::process::Command;
use vla::gguf::{GgmlType, GgufFile};
use vla::policy::{Image, ImageData, Observation, RuntimeOptions};

fn run(bin: &str, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(bin).args(args).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

fn quantize(args: &[&str]) -> (bool, String, String) {
    run(env!("CARGO_BIN_EXE_vla-quantize"), args)
}

fn observation() -> Observation {
    let image = |h: usize, w: usize| Image {
        height: h,
        width: w,
        data: ImageData::RgbU8((0..h * w * 3).map(|i| (i * 13 % 256) as u8).collect()),
    };
    Observation {
        images: vec![image(64, 64), image(32, 48)],
        state: vec![0.1, 0.2, -0.3, 0.4, 1.5, -0.6],
        tokens: Some(vec![7, 8, 9]),
        noise: Some(
            (0..50 * 32)
                .map(|i| ((i * 4099) % 2001) as f32 / 1000.0 - 1.0)
                .collect(),
        ),
        prompt: None,
        token_mask: None,
    }
}

fn chunk(path: &Path, backend: &str) -> Vec<f32> {
    let opts = RuntimeOptions {
        backend: backend.into(),
        ..Default::default()
    };
    let mut p = vla::models::from_gguf(GgufFile::open(path).unwrap(), &opts).unwrap();
    p.predict(&observation()).unwrap().actions
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum();
    let n = |v: &[f32]| v.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    dot / (n(a) * n(b))
}

#[test]
fn quantized_models_load_everywhere_and_q8_0_is_near_lossless() {
    let dir = tempfile::tempdir().unwrap();
    let p = |name: &str| dir.path().join(name).display().to_string();
    let (ok, _, err) = run(env!("CARGO_BIN_EXE_vla-gguf"), &["demo", &p("f32.gguf")]);
    assert!(ok, "{err}");
    let reference = chunk(Path::new(&p("f32.gguf")), "cpu");
    for (ty, min_cos) in [("Q8_0", 0.999), ("Q4_0", 0.98)] {
        let out = p(&format!("{ty}.gguf"));
        let (ok, stdout, err) = quantize(&[&p("f32.gguf"), "--out", &out, "--type", ty]);
        assert!(ok, "{err}");
        assert!(
            stdout.contains(&format!("25 of 121 tensors as {ty}")),
            "{stdout}"
        );
        let file = GgufFile::open(&out).unwrap();
        assert_eq!(file.get_str("vla.quantize.type").unwrap(), ty);
        assert_eq!(
            file.tensor_info("vlm.blk.0.ffn_up.weight").unwrap().ty,
            GgmlType::from_name(ty).unwrap()
        );
        for kept in [
            "token_embd.weight",
            "aex.blk.0.ffn_up.weight",
            "vit.blk.0.fc1.weight",
            "action_in_proj.weight",
        ] {
            assert_eq!(file.tensor_info(kept).unwrap().ty, GgmlType::F32, "{kept}");
        }
        let cpu = chunk(Path::new(&out), "cpu");
        let cos = cosine(&reference, &cpu);
        println!("{ty}: cosine vs f32 {cos:.6}");
        assert!(cos >= min_cos, "{ty}: cosine {cos} < {min_cos}");
        assert_ne!(cpu, reference);
        for backend in ["vulkan", "ggml"] {
            if backend == "vulkan"
                && std::env::var_os("VLA_ALLOW_NO_GPU").is_some()
                && vla::backend::open("vulkan").is_err()
            {
                eprintln!(
                    "WARNING: no Vulkan adapter; VLA_ALLOW_NO_GPU set, skipping {ty} on vulkan"
                );
                continue;
            }
            let other = chunk(Path::new(&out), backend);
            // Activations are quantized to int8 per block on these backends, as ggml does.
            let cos = cosine(&cpu, &other);
            println!("{ty}: {backend} vs cpu cosine {cos:.6}");
            assert!(cos >= 0.999, "{ty} on {backend}: cosine vs cpu {cos}");
        }
    }
}

#[test]
fn refuses_overwrite_bad_type_and_non_models() {
    let dir = tempfile::tempdir().unwrap();
    let p = |name: &str| dir.path().join(name).display().to_string();
    run(env!("CARGO_BIN_EXE_vla-gguf"), &["demo", &p("in.gguf")]);
    std::fs::write(p("out.gguf"), b"keep me").unwrap();
    let (ok, _, err) = quantize(&[&p("in.gguf"), "--out", &p("out.gguf"), "--type", "Q8_0"]);
    assert!(!ok && err.contains("--force"), "{err}");
    assert_eq!(std::fs::read(p("out.gguf")).unwrap(), b"keep me");
    let (ok, _, err) = quantize(&[
        "--in",
        &p("in.gguf"),
        "--out",
        &p("x.gguf"),
        "--type",
        "Q2_K",
    ]);
    assert!(!ok && err.contains("expected Q8_0"), "{err}");
    let corpus = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/corpus/gguf/ok-gguf-py-all-types.gguf"
    );
    let (ok, _, err) = quantize(&["--in", corpus, "--out", &p("y.gguf"), "--type", "Q8_0"]);
    assert!(!ok && err.contains("does not load as a model"), "{err}");
    assert!(!Path::new(&p("y.gguf")).exists());
}
