//! `vla-convert turbovla` on the torch-made fixture (`tests/fixtures/turbovla-tiny`: the
//! reference's `.pth`, its BERT and DINOv3 folders) and on edited copies of it in the other
//! form vla.cpp reads (a folder with model.safetensors + config.json): the file holds every
//! key and tensor the model declares and serves a request; F32 / BF16 / F16 checkpoints keep
//! their stored types as vla.cpp's writer does; what the model does not implement, a missing
//! or unknown tensor, a wrong BERT or DINOv3 config and absent statistics are clear errors.

use safetensors::tensor::{Dtype, TensorView};
use serde_json::Value as Json;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use vla::convert::torch_pt::TorchCheckpoint;
use vla::convert::turbovla::{convert, Options};
use vla::convert::{detect, Kind};
use vla::gguf::{GgmlType, GgufFile};
use vla::models::turbovla::{tensor_shapes, TurboConfig, TurboPolicy};
use vla::policy::{Image, ImageData, Observation, RuntimeOptions};

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/turbovla-tiny")
}

fn opts() -> Options {
    Options {
        statistics: Some("libero".into()),
        ..Default::default()
    }
}

fn file_of(ckpt: &Path, opts: &Options) -> (GgufFile, Vec<String>) {
    let c = convert(ckpt, opts, &mut |_, _, _| {}).unwrap();
    let file = GgufFile::from_bytes(c.writer.to_bytes().unwrap()).unwrap();
    (file, c.notes)
}

fn convert_err(ckpt: &Path, opts: &Options) -> String {
    match convert(ckpt, opts, &mut |_, _, _| {}) {
        Ok(_) => panic!("converted a broken checkpoint"),
        Err(e) => e.to_string(),
    }
}

/// The fixture's state dict, `(name, shape, values)`, and its model_config.
type Tensors = Vec<(String, Vec<usize>, Vec<f32>)>;

fn fixture_state() -> (Tensors, Json) {
    let c = TorchCheckpoint::open(&fixture().join("turbovla.pth"), "model_state_dict").unwrap();
    let t = c
        .state
        .names()
        .map(|n| {
            let shape = c.state.shape(n).unwrap().to_vec();
            (n.to_owned(), shape, c.state.f32(n).unwrap())
        })
        .collect();
    (t, c.plain("model_config").unwrap().unwrap())
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

/// A folder in the safetensors form: `tensors` stored as `dtype`, `config` as config.json,
/// the fixture's BERT and DINOv3 folders beside them.
fn st_checkpoint(tensors: &Tensors, config: &Json, dtype: Dtype) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for sub in ["bert", "dinov3"] {
        copy_dir(&fixture().join(sub), &dir.path().join(sub));
    }
    let bytes: Vec<(String, Vec<usize>, Vec<u8>)> = tensors
        .iter()
        .map(|(n, s, v)| {
            let b = match dtype {
                Dtype::F32 => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
                Dtype::BF16 => v
                    .iter()
                    .flat_map(|x| half::bf16::from_f32(*x).to_le_bytes())
                    .collect(),
                Dtype::F16 => v
                    .iter()
                    .flat_map(|x| half::f16::from_f32(*x).to_le_bytes())
                    .collect(),
                other => panic!("{other:?}"),
            };
            (n.clone(), s.clone(), b)
        })
        .collect();
    let views = bytes
        .iter()
        .map(|(n, s, b)| (n.clone(), TensorView::new(dtype, s.clone(), b).unwrap()));
    std::fs::write(
        dir.path().join("model.safetensors"),
        safetensors::serialize(views, None).unwrap(),
    )
    .unwrap();
    std::fs::write(dir.path().join("config.json"), config.to_string()).unwrap();
    dir
}

fn vocab_id(token: &str) -> u64 {
    let vocab = std::fs::read_to_string(fixture().join("bert/vocab.txt")).unwrap();
    vocab.lines().position(|l| l == token).unwrap() as u64
}

fn u64_key(file: &GgufFile, key: &str) -> u64 {
    file.get_u64(key).unwrap_or_else(|e| panic!("{key}: {e}"))
}

#[test]
fn the_fixture_converts_to_every_declared_tensor_and_key() {
    let (file, notes) = file_of(&fixture().join("turbovla.pth"), &opts());
    println!("{notes:#?}");
    let cfg = TurboConfig::read(&file).unwrap();
    // every tensor the graph declares, at its shape; nothing else but the statistics
    let declared: BTreeMap<String, Vec<usize>> = tensor_shapes(&cfg).unwrap().into_iter().collect();
    let stats = ["state_mean", "state_std", "action_min", "action_max"];
    let names: BTreeSet<&str> = file.tensors().iter().map(|t| t.name.as_str()).collect();
    let want: BTreeSet<&str> = declared.keys().map(String::as_str).chain(stats).collect();
    assert_eq!(names, want);
    for t in file.tensors() {
        if let Some(shape) = declared.get(&t.name) {
            assert_eq!(&t.shape(), shape, "{}", t.name);
        }
        // the checkpoint is f32: so is every tensor, as vla.cpp writes it
        assert_eq!(t.ty, GgmlType::F32, "{}", t.name);
    }
    assert_eq!(file.architecture().unwrap(), "turbovla");
    // vla.cpp's keys, with the BERT folder's head count and the tokenizer's own ids
    let (_, model_config) = fixture_state();
    let json = |rel: &str| -> Json {
        serde_json::from_slice(&std::fs::read(fixture().join(rel)).unwrap()).unwrap()
    };
    let (bert, dino) = (json("bert/config.json"), json("dinov3/config.json"));
    let n = |v: &Json| v.as_u64().unwrap();
    let nheads = n(&model_config["interaction"]["nheads"]);
    let groups = model_config["text"]["padding_length_by_instruction"]
        .as_object()
        .unwrap();
    for (key, want) in [
        ("turbovla.text_heads", n(&bert["num_attention_heads"])),
        (
            "turbovla.text_head_dim",
            n(&bert["hidden_size"]) / n(&bert["num_attention_heads"]),
        ),
        ("turbovla.vit_heads", n(&dino["num_attention_heads"])),
        (
            "turbovla.num_register_tokens",
            n(&dino["num_register_tokens"]),
        ),
        ("turbovla.fusion_heads", (nheads / 2).max(1)),
        ("turbovla.text_enhancer_heads", (nheads / 2).max(1)),
        ("turbovla.action_heads", nheads),
        (
            "turbovla.max_text_length",
            n(&model_config["text"]["padding_length"]),
        ),
        ("turbovla.pad_to_longest", 0),
        ("turbovla.pad_token_id", vocab_id("[PAD]")),
        ("turbovla.cls_token_id", vocab_id("[CLS]")),
        ("turbovla.sep_token_id", vocab_id("[SEP]")),
        ("turbovla.period_token_id", vocab_id(".")),
        ("turbovla.question_token_id", vocab_id("?")),
        ("turbovla.text_groups.count", groups.len() as u64),
        ("turbovla.gripper_sign_dim", 6),
    ] {
        assert_eq!(u64_key(&file, key), want, "{key}");
    }
    assert_eq!(
        file.get_f64("turbovla.rope_theta").unwrap(),
        dino["rope_theta"].as_f64().unwrap()
    );
    let stored: Json = serde_json::from_str(file.get_str("turbovla.config_json").unwrap()).unwrap();
    assert_eq!(stored, model_config);
    assert!(file.get("tokenizer.ggml.tokens").is_some());
    // the groups: sorted by instruction, each its BERT ids ([CLS] ... [SEP])
    let tok = vla::tokenizer::Tokenizer::from_hf_path(fixture().join("bert")).unwrap();
    let mut sorted: Vec<_> = groups.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(b.0));
    assert_eq!(cfg.groups.len(), sorted.len());
    for (g, (instruction, pad_to)) in cfg.groups.iter().zip(sorted) {
        assert_eq!(g.pad_to as u64, n(pad_to), "{instruction}");
        assert_eq!(g.tokens, tok.encode(instruction).unwrap(), "{instruction}");
    }
    // the policy opens it, with the statistics and tokenizer it carries
    let policy = TurboPolicy::new(file, &RuntimeOptions::default()).unwrap();
    assert_eq!(policy.config(), &cfg);
}

#[test]
fn the_converted_file_serves_a_text_request() {
    let c = convert(&fixture().join("turbovla.pth"), &opts(), &mut |_, _, _| {}).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("turbovla.gguf");
    c.writer.write_to_file(&path).unwrap();
    // the usual open path: the arch from general.architecture
    let mut policy = vla::models::load(&path, &RuntimeOptions::default()).unwrap();
    let info = policy.info().clone();
    let cfg = c.config;
    assert_eq!(
        (info.n_images, info.image_height, info.state_dim),
        (cfg.num_views, cfg.vit.image_size, cfg.state_dim)
    );
    let s = cfg.vit.image_size;
    let image = |seed: u8| Image {
        height: s,
        width: s,
        data: ImageData::RgbU8(
            (0..s * s * 3)
                .map(|i| (i as u8).wrapping_mul(seed))
                .collect(),
        ),
    };
    let instruction = "put the bowl on the plate";
    let obs = Observation {
        images: (0..cfg.num_views).map(|v| image(7 + 6 * v as u8)).collect(),
        state: vec![0.1; cfg.state_dim],
        prompt: Some(instruction.into()),
        tokens: None,
        noise: None,
        token_mask: None,
    };
    let chunk = policy.predict(&obs).unwrap();
    let dim = cfg.action_dim;
    assert_eq!((chunk.chunk_size, chunk.action_dim), (cfg.horizon, dim));
    assert!(chunk.actions.iter().all(|a| a.is_finite()));
    // the gripper's dimension (LIBERO's statistics: the last) is a sign
    assert!(chunk.actions.chunks(dim).all(|r| r[dim - 1].abs() == 1.0));
    // the instruction's ids, seen as max_text_length rows by the fusion
    let tok = vla::tokenizer::Tokenizer::from_hf_path(fixture().join("bert")).unwrap();
    let ids = tok.encode(instruction).unwrap();
    assert_eq!(
        (chunk.instruction.tokens, chunk.instruction.rows),
        (ids.len(), cfg.text_len)
    );
}

#[test]
fn every_checkpoint_form_is_detected_and_converts_alike() {
    let pth = fixture().join("turbovla.pth");
    assert_eq!(detect(&pth).unwrap(), Kind::Turbovla);
    let (reference, _) = file_of(&pth, &opts());
    // a folder holding the .pth (and the BERT and DINOv3 folders its config names)
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&fixture().join("bert"), &dir.path().join("bert"));
    copy_dir(&fixture().join("dinov3"), &dir.path().join("dinov3"));
    std::fs::copy(&pth, dir.path().join("turbovla_libero.pth")).unwrap();
    assert_eq!(detect(dir.path()).unwrap(), Kind::Turbovla);
    let (a, _) = file_of(dir.path(), &opts());
    // the safetensors form, with DDP's `module.` and transformers 5's `backbone.model.layer.`
    let (mut t, config) = fixture_state();
    for (n, _, _) in t.iter_mut() {
        *n = format!(
            "module.{}",
            n.replace("backbone.layer.", "backbone.model.layer.")
        );
    }
    let st = st_checkpoint(&t, &config, Dtype::F32);
    assert_eq!(detect(st.path()).unwrap(), Kind::Turbovla);
    let (b, _) = file_of(st.path(), &opts());
    for file in [&a, &b] {
        assert_eq!(file.tensors().len(), reference.tensors().len());
        for t in reference.tensors() {
            let (x, y) = (
                reference.dequantize(&t.name).unwrap(),
                file.dequantize(&t.name).unwrap(),
            );
            assert_eq!(x, y, "{}", t.name);
        }
    }
    // another converter's checkpoint names the turbovla subcommand
    let e = vla::convert::detect::expect(&pth, Kind::Act)
        .unwrap_err()
        .to_string();
    assert!(e.contains("`vla-convert turbovla`"), "{e}");
}

#[test]
fn stored_types_are_kept_as_vlacpp_writes_them_and_dtype_sets_the_matrices() {
    let (t, config) = fixture_state();
    let scale = "vision_encoder.backbone.layer.1.layer_scale1.lambda1";
    let weight = "vision_encoder.backbone.layer.1.attention.o_proj.weight";
    for (dtype, written) in [(Dtype::BF16, GgmlType::BF16), (Dtype::F16, GgmlType::F32)] {
        let dir = st_checkpoint(&t, &config, dtype);
        let (file, _) = file_of(dir.path(), &opts());
        for info in file.tensors() {
            let stats = ["state_mean", "state_std", "action_min", "action_max"];
            // the zero k_proj biases and the statistics are f32 whatever the checkpoint
            let f32_anyway =
                info.name.contains("attn_k.bias") || stats.contains(&info.name.as_str());
            let want = if f32_anyway { GgmlType::F32 } else { written };
            assert_eq!(info.ty, want, "{dtype:?}: {}", info.name);
        }
        // LayerScale folded as PyTorch multiplies in the stored type
        let round = |x: f32| match dtype {
            Dtype::BF16 => half::bf16::from_f32(x).to_f32(),
            _ => half::f16::from_f32(x).to_f32(),
        };
        let get = |n: &str| t.iter().find(|x| x.0 == n).unwrap();
        let (w, ls) = (get(weight), get(scale));
        let cols = w.1[1];
        let want: Vec<f32> =
            w.2.iter()
                .enumerate()
                .map(|(i, &x)| round(round(x) * round(ls.2[i / cols])))
                .collect();
        assert_eq!(
            file.dequantize("vit.blk.1.attn_o.weight").unwrap(),
            want,
            "{dtype:?}"
        );
    }
    // --dtype: the layers' matrices in it, the tables, the patch kernel, norms and biases f32
    let o = Options {
        dtype: Some(GgmlType::BF16),
        ..opts()
    };
    let (file, _) = file_of(&fixture().join("turbovla.pth"), &o);
    let ty = |n: &str| file.tensor_info(n).unwrap().ty;
    for n in [
        "vit.blk.0.fc1.weight",
        "text.encoder.layer.1.intermediate.dense.weight",
        "act.dec.0.self_qkv.weight",
        "vl_fusion.1.v_proj.weight",
    ] {
        assert_eq!(ty(n), GgmlType::BF16, "{n}");
    }
    for n in [
        "vit.patch_embed.weight",
        "text.embed.word_embeddings",
        "act.q.weight",
        "view_emb",
        "vit.blk.0.ln1.weight",
        "vit.blk.0.fc1.bias",
        "vit.cls_token",
    ] {
        assert_eq!(ty(n), GgmlType::F32, "{n}");
    }
    let o = Options {
        dtype: Some(GgmlType::Q8_0),
        ..opts()
    };
    let e = convert_err(&fixture().join("turbovla.pth"), &o);
    assert!(e.contains("f32, f16 or bf16"), "{e}");
}

#[test]
fn the_statistics_are_required_and_checked() {
    let pth = fixture().join("turbovla.pth");
    let e = convert_err(&pth, &Options::default());
    println!("{e}");
    assert!(
        e.contains("no normalisation statistics") && e.contains("--statistics libero"),
        "{e}"
    );
    let dir = tempfile::tempdir().unwrap();
    let stats = dir.path().join("stats.json");
    let json = r#"{"state_mean": [0, 0, 0], "state_std": [1, 1, 1], "action_min": [-1], "action_max": [1]}"#;
    std::fs::write(&stats, json).unwrap();
    let o = Options {
        statistics: Some(stats),
        ..Default::default()
    };
    let e = convert_err(&pth, &o);
    println!("{e}");
    assert!(
        e.contains("state_mean has 3 values, the model takes 8"),
        "{e}"
    );
}

#[test]
fn a_missing_tensor_is_named() {
    let (mut t, config) = fixture_state();
    for name in [
        "action_head.decoder.decoder.layers.1.linear2.weight",
        "vision_encoder.backbone.layer.0.layer_scale2.lambda1",
        "view_embedding",
    ] {
        let mut t = t.clone();
        t.retain(|x| x.0 != name);
        let e = convert_err(st_checkpoint(&t, &config, Dtype::F32).path(), &opts());
        println!("{e}");
        assert!(e.contains(name) && e.contains("missing"), "{e}");
    }
    // a misshaped one: both shapes named
    let name = "vision_language_interaction.fusion_layers.1.attn.out_l_proj.weight";
    let x = t.iter_mut().find(|x| x.0 == name).unwrap();
    let want = format!("{:?}", x.1);
    x.1.reverse();
    let got = format!("{:?}", x.1);
    let e = convert_err(st_checkpoint(&t, &config, Dtype::F32).path(), &opts());
    println!("{e}");
    assert!(
        e.contains(name) && e.contains(&got) && e.contains(&want),
        "{e}"
    );
}

#[test]
fn unknown_tensors_and_unsupported_variants_are_refused() {
    let (t, config) = fixture_state();
    // another variant's tensors (learned patch positions, a decoder norm, DINOv3's gated MLP)
    for extra in [
        "patch_position_embedding",
        "action_head.decoder.decoder.norm.weight",
        "vision_encoder.backbone.layer.0.mlp.gate_proj.weight",
    ] {
        let mut t = t.clone();
        t.push((extra.into(), vec![4], vec![0.0; 4]));
        let e = convert_err(st_checkpoint(&t, &config, Dtype::F32).path(), &opts());
        println!("{e}");
        assert!(
            e.contains(extra) && e.contains("another TurboVLA variant"),
            "{e}"
        );
    }
    for (section, key, value) in [
        ("interaction", "residual_style", Json::from("pre_norm")),
        ("interaction", "padding_strategy", Json::from("zero_fill")),
        ("text", "zero_padded_tokens", Json::from(true)),
        ("text", "sub_sentence_present", Json::from(false)),
        ("vision", "position_embedding", Json::from("learned_patch")),
    ] {
        let mut c = config.clone();
        c[section][key] = value;
        let e = convert_err(st_checkpoint(&t, &c, Dtype::F32).path(), &opts());
        println!("{e}");
        assert!(
            e.contains("unsupported TurboVLA variant") && e.contains(&format!("{section}.{key}")),
            "{e}"
        );
    }
    // grouped instructions without a padding length: the reference refuses it
    let mut c = config.clone();
    let max_length = c["text"]["max_length"].as_u64().unwrap();
    c["text"]["padding_length"] = Json::Null;
    let e = convert_err(st_checkpoint(&t, &c, Dtype::F32).path(), &opts());
    assert!(e.contains("without text.padding_length"), "{e}");
    // without groups, padding to the longest instruction (vla.cpp refuses, the runtime serves)
    c["text"]["padding_length_by_instruction"] = serde_json::json!({});
    let (file, _) = file_of(st_checkpoint(&t, &c, Dtype::F32).path(), &opts());
    assert_eq!(u64_key(&file, "turbovla.pad_to_longest"), 1);
    assert_eq!(u64_key(&file, "turbovla.max_text_length"), max_length);
    // the views encoded as one batch: the same tokens, converted with a note
    let mut c = config.clone();
    c["vision"]["encode_views_separately"] = Json::from(false);
    let (_, notes) = file_of(st_checkpoint(&t, &c, Dtype::F32).path(), &opts());
    assert!(
        notes.iter().any(|n| n.contains("encode_views_separately")),
        "{notes:?}"
    );
    // not a TurboVLA config at all
    let mut c = config.clone();
    c["name"] = Json::from("SomethingElse");
    c.as_object_mut().unwrap().remove("interaction");
    let e = convert_err(st_checkpoint(&t, &c, Dtype::F32).path(), &opts());
    println!("{e}");
    assert!(
        e.contains("not a lerobot policy config") || e.contains("not a TurboVLA"),
        "{e}"
    );
    // a torch.save file that is no TurboVLA checkpoint (a bare state dict)
    let pt = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/vla-adapter-tiny/proprio_projector--latest_checkpoint.pt");
    let e = convert_err(&pt, &opts());
    println!("{e}");
    assert!(e.contains("nor a TurboVLA .pth"), "{e}");
}

/// Rewrites `dir/<rel>` (JSON) through `edit`.
fn edit_json(dir: &Path, rel: &str, edit: impl FnOnce(&mut Json)) {
    let path = dir.join(rel);
    let mut v: Json = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    edit(&mut v);
    std::fs::write(&path, v.to_string()).unwrap();
}

#[test]
fn the_bert_and_dinov3_configs_are_checked() {
    let (t, config) = fixture_state();
    let cases: [(&str, &str, Json, &str); 7] = [
        (
            "bert/config.json",
            "layer_norm_eps",
            Json::from(1e-6),
            "layer_norm_eps",
        ),
        (
            "bert/config.json",
            "num_attention_heads",
            Json::Null,
            "num_attention_heads",
        ),
        (
            "bert/config.json",
            "hidden_size",
            Json::from(768),
            "not the BERT this checkpoint",
        ),
        (
            "dinov3/config.json",
            "num_register_tokens",
            Json::from(0),
            "num_register_tokens 0",
        ),
        (
            "dinov3/config.json",
            "use_gated_mlp",
            Json::from(true),
            "use_gated_mlp",
        ),
        (
            "dinov3/config.json",
            "num_attention_heads",
            Json::from(3),
            "does not divide",
        ),
        (
            "dinov3/preprocessor_config.json",
            "image_mean",
            serde_json::json!([0.5, 0.5, 0.5]),
            "other than ImageNet's",
        ),
    ];
    for (file, key, value, says) in cases {
        let dir = st_checkpoint(&t, &config, Dtype::F32);
        edit_json(dir.path(), file, |c| c[key] = value.clone());
        let e = convert_err(dir.path(), &opts());
        println!("{e}");
        assert!(e.contains(says), "{file} {key}: {e}");
    }
    // no DINOv3 folder: ViT-B/16's values only where the config names that backbone
    let dir = st_checkpoint(&t, &config, Dtype::F32);
    std::fs::remove_dir_all(dir.path().join("dinov3")).unwrap();
    let e = convert_err(dir.path(), &opts());
    println!("{e}");
    assert!(
        e.contains("unknown DINOv3 backbone") && e.contains("--dinov3"),
        "{e}"
    );
    let o = Options {
        dinov3: Some(fixture().join("dinov3")),
        ..opts()
    };
    file_of(dir.path(), &o);
    // no BERT folder: how to give it
    std::fs::remove_dir_all(dir.path().join("bert")).unwrap();
    let e = convert_err(dir.path(), &o);
    println!("{e}");
    assert!(
        e.contains("model_name_or_path") && e.contains("--bert DIR"),
        "{e}"
    );
    let o = Options {
        bert: Some(fixture().join("bert")),
        ..o
    };
    file_of(dir.path(), &o);
}

/// A checkpoint whose view table is 2-D (`[views, hidden]`, which vla.cpp's converter writes
/// as stored) converts and serves the chunk of the 3-D one.
#[test]
fn a_flat_view_table_gives_the_same_chunk() {
    use vla::policy::{Observation, Policy, RuntimeOptions};
    let (mut t, config) = fixture_state();
    for (n, s, _) in t.iter_mut() {
        if n == "view_embedding" {
            s.remove(0);
        }
    }
    let st = st_checkpoint(&t, &config, Dtype::F32);
    let (flat, _) = file_of(st.path(), &opts());
    assert_eq!(flat.tensor_info("view_emb").unwrap().shape().len(), 2);
    let (full, _) = file_of(&fixture().join("turbovla.pth"), &opts());
    let chunk = |file: GgufFile| {
        let mut p =
            vla::models::turbovla::TurboPolicy::new(file, &RuntimeOptions::default()).unwrap();
        let info = p.info().clone();
        let s = info.image_height;
        let obs = Observation {
            images: (0..info.n_images)
                .map(|i| vla::policy::Image {
                    height: s,
                    width: s,
                    data: vla::policy::ImageData::RgbU8(
                        (0..s * s * 3)
                            .map(|j| ((j * 7 + i * 31) % 256) as u8)
                            .collect(),
                    ),
                })
                .collect(),
            state: vec![0.1; info.state_dim],
            prompt: Some("put the bowl on the plate".into()),
            ..Default::default()
        };
        p.predict(&obs).unwrap().actions
    };
    assert_eq!(chunk(flat), chunk(full));
}

/// A bf16 checkpoint converted without `--dtype` keeps every tensor bf16 (norms, biases and
/// tables too, as vla.cpp writes it) and serves on every backend, close to the f32 chunk.
#[test]
fn a_bf16_checkpoint_as_stored_serves_everywhere() {
    use vla::policy::{Image, ImageData, Observation, Policy, RuntimeOptions};
    let (t, config) = fixture_state();
    let st = st_checkpoint(&t, &config, Dtype::BF16);
    let (f32_file, _) = file_of(&fixture().join("turbovla.pth"), &opts());
    let obs = |n: usize, s: usize, state: usize| Observation {
        images: (0..n)
            .map(|i| Image {
                height: s,
                width: s,
                data: ImageData::RgbU8(
                    (0..s * s * 3)
                        .map(|j| ((j * 5 + i * 17) % 256) as u8)
                        .collect(),
                ),
            })
            .collect(),
        state: vec![0.2; state],
        prompt: Some("pick up the black bowl".into()),
        ..Default::default()
    };
    let run = |file: GgufFile, backend: &str| -> Option<Vec<f32>> {
        let opts = RuntimeOptions {
            backend: backend.into(),
            ..Default::default()
        };
        let mut p = vla::models::turbovla::TurboPolicy::new(file, &opts).ok()?;
        let i = p.info().clone();
        Some(
            p.predict(&obs(i.n_images, i.image_height, i.state_dim))
                .unwrap()
                .actions,
        )
    };
    let want = run(f32_file, "cpu").unwrap();
    for backend in ["cpu", "vulkan", "ggml"] {
        let (file, _) = file_of(st.path(), &opts());
        assert!(
            file.tensors()
                .iter()
                .all(|t| t.ty == vla::gguf::GgmlType::BF16
                    || t.name.ends_with("attn_k.bias")
                    || t.name.starts_with("state_")
                    || t.name.starts_with("action_")),
            "bf16 as stored"
        );
        let got =
            run(file, backend).unwrap_or_else(|| panic!("{backend}: the bf16 file does not load"));
        let dot: f64 = got
            .iter()
            .zip(&want)
            .map(|(a, b)| f64::from(*a) * f64::from(*b))
            .sum();
        let norm = |v: &[f32]| v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
        let cos = dot / (norm(&got) * norm(&want));
        println!("{backend}: bf16 as stored, cosine {cos:.6}");
        assert!(cos > 0.99, "{backend}: cosine {cos}");
    }
}
