//! RuntimeOptions that change how a model is loaded: weight_dtype, embodiment, threads.

use vla::gguf::{GgmlType, GgufFile};
use vla::policy::{Image, ImageData, Observation, RuntimeOptions};

fn demo() -> GgufFile {
    GgufFile::from_bytes(vla::models::demo_gguf().unwrap()).unwrap()
}

fn observation() -> Observation {
    let image = |h: usize, w: usize| Image {
        height: h,
        width: w,
        data: ImageData::RgbU8((0..h * w * 3).map(|i| (i * 31 % 251) as u8).collect()),
    };
    Observation {
        images: vec![image(64, 64), image(50, 70)],
        state: vec![0.5, -1.0, 0.25, 2.0, 0.0, -0.5],
        tokens: Some(vec![3, 9, 27, 81]),
        noise: Some(
            (0..50 * 32)
                .map(|i| ((i * 7919) % 2000) as f32 / 1000.0 - 1.0)
                .collect(),
        ),
        prompt: None,
        token_mask: None,
    }
}

fn predict(opts: &RuntimeOptions) -> (Vec<f32>, String) {
    let mut p = vla::models::from_gguf(demo(), opts).unwrap();
    let dtypes = p.info().weight_dtypes.clone();
    (p.predict(&observation()).unwrap().actions, dtypes)
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum();
    let na: f64 = a.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    dot / (na * nb)
}

#[test]
fn weight_dtype_reencodes_matmul_weights_only() {
    let (f32_chunk, f32_types) = predict(&RuntimeOptions::default());
    assert_eq!(f32_types, "F32 (121)");
    for ty in [GgmlType::BF16, GgmlType::F16] {
        let (chunk, types) = predict(&RuntimeOptions {
            weight_dtype: Some(ty),
            ..Default::default()
        });
        // Norm gains, embeddings, position table, biases and statistics stay f32.
        assert!(
            types.contains(&format!("{ty} (")) && types.contains("F32 ("),
            "{types}"
        );
        let cos = cosine(&chunk, &f32_chunk);
        println!("weight_dtype {ty}: cosine vs f32 {cos:.6}");
        assert!(cos >= 0.999, "{ty}: cosine {cos}");
        assert_ne!(chunk, f32_chunk, "{ty}: the weights must actually change");
    }
    let e = vla::models::from_gguf(
        demo(),
        &RuntimeOptions {
            weight_dtype: Some(GgmlType::Q8_0),
            ..Default::default()
        },
    );
    assert!(e
        .err()
        .unwrap()
        .to_string()
        .contains("expected f32, f16 or bf16"));
}

#[test]
fn unknown_embodiment_is_an_error() {
    let opts = RuntimeOptions {
        embodiment: Some("so100".into()),
        ..Default::default()
    };
    let e = vla::models::from_gguf(demo(), &opts)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("so100") && e.contains("single set"), "{e}");
}

/// The demo file plus a second set of statistics for embodiment `so100`: the default set
/// with every mean shifted by `shift` (stds unchanged).
fn demo_with_so100(shift: f32) -> GgufFile {
    let file = demo();
    let (mut w, _) = vla::gguf::retype(&file, |_| None, |_, _| {}).unwrap();
    for (name, delta) in [
        ("state_mean", shift),
        ("state_std", 0.0),
        ("action_mean", shift),
        ("action_std", 0.0),
    ] {
        let v: Vec<f32> = file
            .dequantize(name)
            .unwrap()
            .iter()
            .map(|x| x + delta)
            .collect();
        let e = format!("{name}.so100");
        w.add_f32(e, GgmlType::F32, &[v.len() as u64], &v).unwrap();
    }
    GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap()
}

#[test]
fn an_embodiment_selects_its_statistics() {
    let run = |file: GgufFile, e: Option<&str>| {
        let opts = RuntimeOptions {
            embodiment: e.map(str::to_owned),
            ..Default::default()
        };
        let mut p = vla::models::from_gguf(file, &opts).unwrap();
        p.predict(&observation()).unwrap().actions
    };
    let default = run(demo(), None);
    assert_eq!(run(demo_with_so100(0.0), Some("so100")), default);
    assert_eq!(run(demo_with_so100(0.5), None), default);
    // With every mean 0.5 higher, so100 sees state x as the default set sees x - 0.5, and
    // its actions are the default set's plus 0.5.
    let shifted = run(demo_with_so100(0.5), Some("so100"));
    assert_ne!(shifted, default);
    let state: Vec<f32> = observation().state.iter().map(|x| x - 0.5).collect();
    let mut obs = observation();
    obs.state = state;
    let mut p = vla::models::from_gguf(demo(), &RuntimeOptions::default()).unwrap();
    let want: Vec<f32> = p
        .predict(&obs)
        .unwrap()
        .actions
        .iter()
        .map(|x| x + 0.5)
        .collect();
    let err = shifted
        .iter()
        .zip(&want)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(err < 1e-4, "max abs err {err}");

    let opts = RuntimeOptions {
        embodiment: Some("gr1".into()),
        ..Default::default()
    };
    let e = vla::models::from_gguf(demo_with_so100(0.5), &opts)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("gr1") && e.contains("so100"), "{e}");
}

#[test]
fn ggml_threads_option_reaches_the_backend() {
    let opts = RuntimeOptions {
        backend: "ggml".into(),
        threads: Some(1),
        ..Default::default()
    };
    let p = vla::models::from_gguf(demo(), &opts).unwrap();
    assert!(
        p.info().backend.ends_with("(1 threads)"),
        "{}",
        p.info().backend
    );
}
