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
