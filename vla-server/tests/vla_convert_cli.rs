//! `vla-convert` on the committed lerobot fixtures, as a user runs it: writes a GGUF that
//! loads, refuses to overwrite without --force, applies --dtype; `auto` picks each arch, a
//! checkpoint given to the wrong subcommand names the right one.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use vla::gguf::{GgmlType, GgufFile};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures")
}

fn fixture() -> PathBuf {
    fixtures().join("smolvla-tiny")
}

fn run(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_vla-convert"))
        .args(args)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

fn vla_convert(out: &Path, extra: &[&str]) -> Output {
    let ckpt = fixture();
    let mut args = vec![
        "smolvla",
        "--ckpt",
        ckpt.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--vit-positions",
        "shifted",
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

#[test]
fn auto_converts_every_arch_from_its_own_config() {
    let dir = tempfile::tempdir().unwrap();
    for (fixture, arch) in [
        ("smolvla-tiny", "smolvla"),
        ("pi0-tiny", "pi0"),
        ("pi05-tiny", "pi05"),
        ("groot-tiny", "gr00t_n1_5"),
        ("groot17-tiny", "gr00t_n1_7"),
        ("vla-jepa-tiny", "vla_jepa"),
        ("evo1-tiny", "evo1"),
    ] {
        let out = dir.path().join(format!("{fixture}.gguf"));
        let ckpt = fixtures().join(fixture);
        let mut args = vec!["auto", "--ckpt", ckpt.to_str().unwrap()];
        args.extend(["--out", out.to_str().unwrap()]);
        // What the tiny configs need besides: pi0's sizes the shapes do not fix.
        let sizes = ckpt.join("arch.json");
        match arch {
            "smolvla" => args.extend(["--vit-positions", "grid"]),
            "pi0" | "pi05" => args.extend(["--sizes", sizes.to_str().unwrap()]),
            _ => {}
        }
        let (ok, text) = run(&args);
        assert!(ok, "{fixture}: {text}");
        assert!(text.contains(&format!("(vla-convert {arch})")), "{text}");
        let file = GgufFile::open(&out).unwrap();
        assert_eq!(file.architecture().unwrap(), arch);
        // Every converted file takes text.
        vla::tokenizer::Tokenizer::from_gguf(&file).unwrap();
    }
}

#[test]
fn mistakes_name_the_next_step() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("x.gguf");
    let out = out.to_str().unwrap();
    let ckpt = |f: &str| fixtures().join(f).to_str().unwrap().to_owned();
    // The wrong subcommand names the right one.
    let (ok, text) = run(&["gr00t_n1_5", "--ckpt", &ckpt("evo1-tiny"), "--out", out]);
    assert!(!ok && text.contains("`vla-convert evo1`"), "{text}");
    let (ok, text) = run(&["pi0", "--ckpt", &ckpt("pi05-tiny"), "--out", out]);
    assert!(!ok && text.contains("`vla-convert pi05`"), "{text}");
    // An option the checkpoint does not take.
    let (ok, text) = run(&[
        "auto",
        "--ckpt",
        &ckpt("pi05-tiny"),
        "--out",
        out,
        "--jepa",
        "x",
    ]);
    assert!(
        !ok && text.contains("--jepa does not apply to a pi0.5"),
        "{text}"
    );
    // SmolVLA's positions are never guessed.
    let (ok, text) = run(&["smolvla", "--ckpt", &ckpt("smolvla-tiny"), "--out", out]);
    assert!(!ok && text.contains("--vit-positions shifted"), "{text}");
    // Not a checkpoint folder.
    let (ok, text) = run(&["auto", "--ckpt", &ckpt("tokenizer"), "--out", out]);
    assert!(!ok && text.contains("no config.json"), "{text}");
    assert!(!Path::new(out).exists());
}

/// GR00T N1.5 as lerobot writes its Eagle folder: Qwen2's vocab.json + merges.txt, no
/// tokenizer.json. The GGUF's tokenizer is the one transformers' tokenizer.json gives.
#[test]
fn gr00t_converts_with_the_slow_tokenizer_files() {
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("groot");
    copy_dir(&fixtures().join("groot-tiny"), &copy);
    std::fs::remove_file(copy.join("tokenizer/tokenizer.json")).unwrap();
    let out = |n: &str| dir.path().join(n).to_str().unwrap().to_owned();
    let (ok, text) = run(&[
        "auto",
        "--ckpt",
        copy.to_str().unwrap(),
        "--out",
        &out("slow.gguf"),
    ]);
    assert!(ok, "{text}");
    let ckpt = fixtures().join("groot-tiny");
    let (ok, text) = run(&[
        "auto",
        "--ckpt",
        ckpt.to_str().unwrap(),
        "--out",
        &out("fast.gguf"),
    ]);
    assert!(ok, "{text}");
    let slow = GgufFile::open(out("slow.gguf")).unwrap();
    let fast = GgufFile::open(out("fast.gguf")).unwrap();
    for key in [
        "tokenizer.ggml.tokens",
        "tokenizer.ggml.merges",
        "tokenizer.ggml.token_type",
    ] {
        assert!(
            slow.get(key).is_some() && slow.get(key) == fast.get(key),
            "{key}"
        );
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), dest).unwrap();
        }
    }
}

/// Runs vla-convert with `HF_HUB_CACHE=hub`.
fn run_with_cache(hub: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_vla-convert"))
        .args(args)
        .env("HF_HUB_CACHE", hub)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// Rewrites the JSON file at `path` through `edit`.
fn edit_json(path: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let mut value: serde_json::Value =
        serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    edit(&mut value);
    std::fs::write(path, value.to_string()).unwrap();
}

/// What lerobot's checkpoints name by hub id (GR00T's base model, pi0.5's PaliGemma
/// tokenizer) is found in the Hugging Face cache, where lerobot downloaded it; where it is
/// not, the error gives the download command.
#[test]
fn hub_names_are_found_in_the_hugging_face_cache() {
    let dir = tempfile::tempdir().unwrap();
    let hub = dir.path().join("hub");
    let snapshot = |repo: &str| {
        let d = hub
            .join(format!("models--{}", repo.replace('/', "--")))
            .join("snapshots/0123abcd");
        std::fs::create_dir_all(&d).unwrap();
        d
    };
    let out = |n: &str| dir.path().join(n).to_str().unwrap().to_owned();

    // GR00T N1.5 whose base_model_path is the hub's base model.
    let groot = dir.path().join("groot");
    copy_dir(&fixtures().join("groot-tiny"), &groot);
    edit_json(&groot.join("config.json"), |c| {
        c["base_model_path"] = "nvidia/GR00T-N1.5-3B".into()
    });
    let args = [
        "auto",
        "--ckpt",
        groot.to_str().unwrap(),
        "--out",
        &out("g.gguf"),
    ];
    let (ok, text) = run_with_cache(&hub, &args);
    assert!(
        !ok && text.contains("huggingface-cli download nvidia/GR00T-N1.5-3B")
            && text.contains("--base"),
        "{text}"
    );
    std::fs::copy(
        groot.join("base/config.json"),
        snapshot("nvidia/GR00T-N1.5-3B").join("config.json"),
    )
    .unwrap();
    let (ok, text) = run_with_cache(&hub, &args);
    assert!(ok, "{text}");

    // pi0.5 whose pre-processor loads PaliGemma's tokenizer from the hub.
    let pi05 = dir.path().join("pi05");
    copy_dir(&fixtures().join("pi05-tiny"), &pi05);
    let tokenizer = pi05.join("tokenizer/tokenizer.json");
    let kept = dir.path().join("tokenizer.json");
    std::fs::rename(&tokenizer, &kept).unwrap();
    std::fs::remove_dir_all(pi05.join("tokenizer")).unwrap();
    edit_json(&pi05.join("policy_preprocessor.json"), |p| {
        for step in p["steps"].as_array_mut().unwrap() {
            if step["registry_name"] == "tokenizer_processor" {
                step["config"]["tokenizer_name"] = "google/paligemma-3b-pt-224".into();
            }
        }
    });
    let sizes = pi05.join("arch.json");
    let args = [
        "pi05",
        "--ckpt",
        pi05.to_str().unwrap(),
        "--out",
        &out("p.gguf"),
        "--sizes",
        sizes.to_str().unwrap(),
    ];
    let (ok, text) = run_with_cache(&hub, &args);
    assert!(
        !ok && text.contains("huggingface-cli download google/paligemma-3b-pt-224")
            && text.contains("--no-tokenizer"),
        "{text}"
    );
    std::fs::copy(
        &kept,
        snapshot("google/paligemma-3b-pt-224").join("tokenizer.json"),
    )
    .unwrap();
    let (ok, text) = run_with_cache(&hub, &args);
    assert!(ok && text.contains("paligemma-3b-pt-224"), "{text}");
    let file = GgufFile::open(out("p.gguf")).unwrap();
    vla::tokenizer::Tokenizer::from_gguf(&file).unwrap();
}
