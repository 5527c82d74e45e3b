//! The SmolVLA converter on edited copies of the lerobot fixture: errors name the tensor at
//! fault, and F16 / BF16 checkpoints convert to the values they hold.

use safetensors::tensor::{Dtype, TensorView};
use safetensors::SafeTensors;
use std::path::{Path, PathBuf};
use vla::convert::smolvla::{convert, Options};
use vla::gguf::GgufFile;
use vla::modules::vision::PatchPositions;

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/smolvla-tiny")
}

/// (name, dtype, shape, bytes) of every tensor of the fixture's model.safetensors.
type Tensors = Vec<(String, Dtype, Vec<usize>, Vec<u8>)>;

fn fixture_tensors() -> Tensors {
    let bytes = std::fs::read(fixture().join("model.safetensors")).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let mut out: Tensors = st
        .tensors()
        .into_iter()
        .map(|(n, v)| (n, v.dtype(), v.shape().to_vec(), v.data().to_vec()))
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// A copy of the fixture checkpoint with `tensors` as its model.safetensors.
fn checkpoint(tensors: &Tensors) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(fixture()).unwrap() {
        let name = entry.unwrap().file_name();
        let n = name.to_string_lossy();
        if n.starts_with("policy_") || n == "config.json" {
            std::fs::copy(fixture().join(&name), dir.path().join(&name)).unwrap();
        }
    }
    std::fs::create_dir(dir.path().join("vlm")).unwrap();
    std::fs::copy(
        fixture().join("vlm/config.json"),
        dir.path().join("vlm/config.json"),
    )
    .unwrap();
    let views = tensors
        .iter()
        .map(|(n, d, s, b)| (n.clone(), TensorView::new(*d, s.clone(), b).unwrap()));
    std::fs::write(
        dir.path().join("model.safetensors"),
        safetensors::serialize(views, None).unwrap(),
    )
    .unwrap();
    dir
}

/// Rewrites the JSON file at `path` through `edit`.
fn edit_json(path: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let mut value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    edit(&mut value);
    std::fs::write(path, value.to_string()).unwrap();
}

/// What `vla-convert smolvla --vit-positions shifted --no-tokenizer` asks for.
fn opts() -> Options {
    Options {
        positions: Some(PatchPositions::Shifted),
        no_tokenizer: true,
        ..Default::default()
    }
}

fn convert_err(dir: &Path) -> String {
    convert_err_with(dir, &opts())
}

fn convert_err_with(dir: &Path, opts: &Options) -> String {
    match convert(dir, opts, &mut |_, _, _| {}) {
        Ok(_) => panic!("converted a broken checkpoint"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_missing_tensor_is_named() {
    let name = "model.vlm_with_expert.lm_expert.layers.1.self_attn.k_proj.weight";
    let mut t = fixture_tensors();
    t.retain(|x| x.0 != name);
    let err = convert_err(checkpoint(&t).path());
    println!("{err}");
    assert!(err.contains(name) && err.contains("missing"), "{err}");
}

#[test]
fn a_misshaped_tensor_is_named_with_both_shapes() {
    let name = "model.action_out_proj.weight";
    let mut t = fixture_tensors();
    let x = t.iter_mut().find(|x| x.0 == name).unwrap();
    x.2.reverse();
    let (got, want) = (format!("{:?}", x.2), format!("{:?}", [x.2[1], x.2[0]]));
    let err = convert_err(checkpoint(&t).path());
    println!("{err}");
    assert!(
        err.contains(name) && err.contains(&got) && err.contains(&want),
        "{err}"
    );
}

#[test]
fn an_unknown_tensor_is_an_error_not_dropped() {
    let name = "model.vlm_with_expert.vlm.model.text_model.layers.0.self_attn.q_proj.bias";
    let mut t = fixture_tensors();
    t.push((name.into(), Dtype::F32, vec![4], vec![0; 16]));
    let err = convert_err(checkpoint(&t).path());
    println!("{err}");
    assert!(err.contains(name), "{err}");
}

#[test]
fn half_precision_checkpoints_convert_to_their_values() {
    let original = fixture_tensors();
    for (dtype, encode, decode) in [
        (
            Dtype::BF16,
            (|v: f32| half::bf16::from_f32(v).to_le_bytes()) as fn(f32) -> [u8; 2],
            (|b: [u8; 2]| half::bf16::from_le_bytes(b).to_f32()) as fn([u8; 2]) -> f32,
        ),
        (
            Dtype::F16,
            |v| half::f16::from_f32(v).to_le_bytes(),
            |b| half::f16::from_le_bytes(b).to_f32(),
        ),
    ] {
        let t: Tensors = original
            .iter()
            .map(|(n, _, s, b)| {
                let bytes = b
                    .chunks_exact(4)
                    .flat_map(|c| encode(f32::from_le_bytes([c[0], c[1], c[2], c[3]])))
                    .collect();
                (n.clone(), dtype, s.clone(), bytes)
            })
            .collect();
        let dir = checkpoint(&t);
        let c = convert(dir.path(), &opts(), &mut |_, _, _| {}).unwrap();
        let file = GgufFile::from_bytes(c.writer.to_bytes().unwrap()).unwrap();
        for (ours, theirs) in [("vlm.blk.2.ffn_norm.weight", "model.vlm_with_expert.vlm.model.text_model.layers.2.post_attention_layernorm.weight"), ("action_out_proj.weight", "model.action_out_proj.weight")] {
            let src = &t.iter().find(|x| x.0 == theirs).unwrap().3;
            let want: Vec<f32> = src.chunks_exact(2).map(|c| decode([c[0], c[1]])).collect();
            assert_eq!(file.dequantize(ours).unwrap(), want, "{dtype:?}: {ours}");
        }
    }
}

#[test]
fn zero_head_counts_in_the_vlm_config_are_errors() {
    for (section, edits) in [
        ("text_config", &[("head_dim", 0)][..]),
        (
            "text_config",
            &[("head_dim", -1), ("num_attention_heads", 0)][..],
        ),
        ("vision_config", &[("num_attention_heads", 0)][..]),
    ] {
        let dir = checkpoint(&fixture_tensors());
        edit_json(&dir.path().join("vlm/config.json"), |config| {
            for &(key, value) in edits {
                // A negative value removes the key, so the converter falls back to the next source.
                if value < 0 {
                    config[section].as_object_mut().unwrap().remove(key);
                } else {
                    config[section][key] = value.into();
                }
            }
        });
        let err = convert_err(dir.path());
        println!("{section} {edits:?}: {err}");
        assert!(
            err.contains("vlm/config.json") && err.contains("head"),
            "{section} {edits:?}: {err}"
        );
    }
}

#[test]
fn shapes_the_sizes_are_read_from_must_have_their_rank_and_no_zero_dimension() {
    let vit = "model.vlm_with_expert.vlm.model.vision_model.embeddings.";
    for (name, shape) in [
        (
            "model.vlm_with_expert.vlm.model.text_model.embed_tokens.weight",
            None,
        ),
        (&format!("{vit}patch_embedding.weight")[..], None),
        // No bytes back a zero dimension, so the other one can be anything: it sized the image.
        (
            &format!("{vit}position_embedding.weight")[..],
            Some(vec![usize::MAX, 0]),
        ),
    ] {
        let mut t = fixture_tensors();
        let x = t.iter_mut().find(|x| x.0 == name).unwrap();
        match shape {
            Some(s) => (x.2, x.3) = (s, vec![]),
            None => x.2 = vec![x.2.iter().product()],
        }
        let err = convert_err(checkpoint(&t).path());
        println!("{err}");
        assert!(
            err.contains(name) && err.contains("non-zero dimensions"),
            "{err}"
        );
    }
}

#[test]
fn an_absurd_feature_size_is_an_error_not_an_allocation() {
    let dir = checkpoint(&fixture_tensors());
    edit_json(&dir.path().join("config.json"), |config| {
        config["input_features"]["observation.state"]["shape"] = serde_json::json!([1u64 << 62]);
        config["max_state_dim"] = serde_json::json!(1u64 << 62);
        // Identity statistics are built from the size alone.
        config["normalization_mapping"]["STATE"] = "IDENTITY".into();
    });
    let err = convert_err(dir.path());
    println!("{err}");
    assert!(
        err.contains("observation.state") && err.contains("dimensions"),
        "{err}"
    );
}

#[test]
fn positions_and_tokenizer_are_never_guessed() {
    let dir = checkpoint(&fixture_tensors());
    let err = convert_err_with(
        dir.path(),
        &Options {
            positions: None,
            ..opts()
        },
    );
    assert!(
        err.contains("--vit-positions shifted") && err.contains("grid"),
        "{err}"
    );
    // The copy has no tokenizer where lerobot's pre-processor looks (tokenizer_name "vlm").
    let err = convert_err_with(
        dir.path(),
        &Options {
            no_tokenizer: false,
            ..opts()
        },
    );
    assert!(
        err.contains("\"vlm\"") && err.contains("--tokenizer") && err.contains("--no-tokenizer"),
        "{err}"
    );
    // Given as the folder lerobot's pre-processor names, it is found and shipped.
    for f in ["tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(
            fixture().join("vlm").join(f),
            dir.path().join("vlm").join(f),
        )
        .unwrap();
    }
    let c = convert(
        dir.path(),
        &Options {
            no_tokenizer: false,
            ..opts()
        },
        &mut |_, _, _| {},
    )
    .unwrap();
    assert!(
        c.notes.iter().any(|n| n.starts_with("tokenizer: ")),
        "{:?}",
        c.notes
    );
}
