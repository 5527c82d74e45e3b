//! A GGUF whose tensors are fine but whose config metadata is hostile: sizes no tensor's
//! shape bounds, zeros, epsilons ggml aborts on. Each must fail the load with an error
//! naming the key, not panic, allocate without end or make every request loop for hours.

use vla::gguf::{GgmlType, GgufFile, Value};
use vla::models::{from_gguf, pi0, smolvla};
use vla::policy::RuntimeOptions;

/// The file `bytes` holds with metadata `key` set to `value`.
fn with_metadata(bytes: &[u8], key: &str, value: Value) -> GgufFile {
    let file = GgufFile::from_bytes(bytes.to_vec()).unwrap();
    let (mut w, _) = vla::gguf::retype(&file, |_| None, |_, _| {}).unwrap();
    w.set_metadata(key, value).unwrap();
    GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap()
}

fn cases() -> Vec<(&'static str, Value)> {
    let huge = 1u32 << 24;
    vec![
        ("n_layers", huge.into()),
        ("vit_layers", huge.into()),
        ("tokenizer_max_length", huge.into()),
        ("chunk_size", huge.into()),
        ("num_steps", huge.into()),
        ("max_state_dim", huge.into()),
        ("max_action_dim", 0u32.into()),
        ("image_size", huge.into()),
        ("hidden", 0u32.into()),
        ("vit_hidden", 0u32.into()),
        ("expert_h", 0u32.into()),
        ("pad_token_id", huge.into()),
        ("norm_eps", (-1e-5f32).into()),
        ("vit_ln_eps", (-1.0f32).into()),
        ("rope_theta", 0f32.into()),
        ("min_period", 0f32.into()),
    ]
}

/// `bytes` (an `arch` file) loads, and with each of `cases`' `<arch>.<key>` set to its value
/// it fails the load with an error naming the key.
fn refused_naming_the_key(arch: &str, bytes: &[u8], cases: &[(&str, Value)]) {
    let opts = RuntimeOptions {
        backend: "cpu".into(),
        ..Default::default()
    };
    assert!(
        from_gguf(GgufFile::from_bytes(bytes.to_vec()).unwrap(), &opts).is_ok(),
        "{arch}: the unedited file loads"
    );
    for (key, value) in cases {
        let file = with_metadata(bytes, &format!("{arch}.{key}"), value.clone());
        let err = match from_gguf(file, &opts) {
            Ok(_) => panic!("{arch}.{key} = {value:?} loaded"),
            Err(e) => e.to_string(),
        };
        println!("{arch}.{key} = {value:?}: {err}");
        assert!(err.contains(key), "{arch}.{key} = {value:?}: {err}");
    }
}

#[test]
fn hostile_config_metadata_fails_the_load_naming_the_key() {
    let models = [
        (
            smolvla::ARCH,
            smolvla::random_gguf(&smolvla::demo_config(), 1, GgmlType::F32).unwrap(),
        ),
        (
            pi0::ARCH_PI0,
            pi0::random_gguf(&pi0::small_config(pi0::Variant::Pi0), 1, GgmlType::F32).unwrap(),
        ),
        (
            pi0::ARCH_PI05,
            pi0::random_gguf(&pi0::small_config(pi0::Variant::Pi05), 1, GgmlType::F32).unwrap(),
        ),
    ];
    for (arch, bytes) in &models {
        refused_naming_the_key(arch, bytes, &cases());
    }
}

/// ACT's keys (vla.cpp's `act` layout): hostile sizes, flags that are not 0/1 and arrays of
/// the wrong shape or type fail the load naming the key.
#[test]
fn hostile_act_metadata_fails_the_load_naming_the_key() {
    use vla::gguf::ValueType;
    use vla::models::{act, presets};
    let bytes = act::random_writer(&presets::act_small_config(), 1, GgmlType::F32)
        .unwrap()
        .to_bytes()
        .unwrap();
    let huge = 1u32 << 24;
    let ints = |v: &[i32]| Value::Array(ValueType::I32, v.iter().map(|&x| Value::I32(x)).collect());
    let cases: Vec<(&str, Value)> = vec![
        ("dim_model", 0u32.into()),
        ("n_heads", 0u32.into()),
        ("n_heads", 3u32.into()),
        ("n_encoder_layers", huge.into()),
        ("n_decoder_layers", 0u32.into()),
        ("chunk_size", huge.into()),
        ("n_action_steps", 8u32.into()),
        ("state_dim", huge.into()),
        ("action_dim", 0u32.into()),
        ("num_views", 0u32.into()),
        ("num_views", 3u32.into()),
        ("image_height", huge.into()),
        ("pre_norm", 2u32.into()),
        ("gelu", 7u32.into()),
        ("backbone_blocks", ints(&[2, 2, 2])),
        ("backbone_blocks", ints(&[2, 0, 2, 2])),
        ("backbone_blocks", ints(&[2, -1, 2, 2])),
        ("backbone_blocks", ints(&[2, 2, 2, 1 << 24])),
        ("cameras", Value::from_strs(&["observation.images.top"])),
        ("cameras", ints(&[1, 2])),
    ];
    refused_naming_the_key(act::ARCH, &bytes, &cases);
}

/// TurboVLA's keys (vla.cpp's `turbovla` layout): hostile sizes, head counts that do not
/// divide their widths, special ids outside the vocabulary and text groups that do not add up
/// fail the load naming the key.
#[test]
fn hostile_turbovla_metadata_fails_the_load_naming_the_key() {
    use vla::gguf::ValueType;
    use vla::models::{presets, turbovla};
    let bytes = turbovla::demo_writer(&presets::turbovla_small_config(), 1, GgmlType::F32)
        .unwrap()
        .to_bytes()
        .unwrap();
    let opts = RuntimeOptions::default();
    let huge = 1u32 << 24;
    let ints = |v: &[i32]| Value::Array(ValueType::I32, v.iter().map(|&x| Value::I32(x)).collect());
    let cases: Vec<(&str, Value)> = vec![
        ("hidden", 0u32.into()),
        ("vit_layers", huge.into()),
        ("vit_heads", 3u32.into()),
        ("text_heads", 0u32.into()),
        ("fusion_heads", 5u32.into()),
        ("action_heads", 7u32.into()),
        ("num_fusion_layers", 3u32.into()),
        ("action_horizon", huge.into()),
        ("num_views", 0u32.into()),
        ("image_size", 70u32.into()),
        ("rope_theta", Value::F32(-1.0)),
        ("max_text_length", 1u32.into()),
        ("pad_to_longest", 2u32.into()),
        ("period_token_id", huge.into()),
    ];
    // a group whose lengths do not add up to its tokens
    let file = GgufFile::from_bytes(bytes.clone()).unwrap();
    let (mut w, _) = vla::gguf::retype(&file, |_| None, |_, _| {}).unwrap();
    for (key, value) in [
        ("text_groups.count", Value::U32(1)),
        ("text_groups.tokens", ints(&[101, 7, 102])),
        ("text_groups.lengths", ints(&[4])),
        ("text_groups.pad_to", ints(&[5])),
    ] {
        w.set_metadata(format!("turbovla.{key}"), value).unwrap();
    }
    let grouped = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
    let err = from_gguf(grouped, &opts).err().unwrap().to_string();
    assert!(err.contains("text_groups"), "{err}");
    refused_naming_the_key(turbovla::ARCH, &bytes, &cases);
}
