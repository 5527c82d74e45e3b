//! JPEG images in requests decode to the pixels Pillow decodes (tools/golden/jpeg.py).

use vla::policy::{ImageData, PolicyInfo};
use vla_server::proto::{Encoding, Image, PredictRequest};

fn info() -> PolicyInfo {
    PolicyInfo {
        arch: "test".into(),
        n_images: 1,
        image_height: 64,
        image_width: 64,
        max_state_dim: 8,
        state_dim: 2,
        chunk_size: 4,
        action_rows: 4,
        max_action_dim: 8,
        action_dim: 2,
        num_steps: 1,
        param_count: 0,
        weight_dtypes: String::new(),
        backend: String::new(),
        memory_bytes: 0,
        activation_bytes: 0,
        kv_bytes: 0,
        scratch_bytes: 0,
        stage_flops: Vec::new(),
        embodiment: None,
        camera_names: Vec::new(),
        n_action_steps: None,
        reads_instruction: true,
        placeholders: Vec::new(),
        wrap_ids: None,
        noise_shape: None,
        image_sizes: Vec::new(),
        window: 1,
    }
}

fn request(jpeg: Vec<u8>, height: u32, width: u32) -> PredictRequest {
    PredictRequest {
        images: vec![Image {
            encoding: Encoding::Jpeg as i32,
            height,
            width,
            data: jpeg,
        }],
        state: vec![0.0, 1.0],
        lang_tokens: vec![1],
        ..Default::default()
    }
}

#[test]
fn jpeg_decodes_like_pillow() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data");
    for name in ["rgb", "gray"] {
        let jpeg = std::fs::read(format!("{dir}/{name}-28x20.jpg")).unwrap();
        let want = std::fs::read(format!("{dir}/{name}-28x20.rgb")).unwrap();
        for (h, w) in [(0, 0), (20, 28)] {
            let obs =
                vla_server::request::observation(&request(jpeg.clone(), h, w), &info()).unwrap();
            let img = &obs.images[0];
            assert_eq!((img.height, img.width), (20, 28));
            let ImageData::RgbU8(got) = &img.data else {
                panic!("JPEG must decode to u8")
            };
            // IDCT implementations differ by a level or two.
            let worst = got
                .iter()
                .zip(&want)
                .map(|(a, b)| a.abs_diff(*b))
                .max()
                .unwrap();
            assert!(worst <= 3, "{name}: differs from Pillow by {worst} levels");
        }
        let e = vla_server::request::observation(&request(jpeg.clone(), 21, 28), &info())
            .unwrap_err()
            .to_string();
        assert!(e.contains("height 21, but the JPEG is 20"), "{e}");
        let e = vla_server::request::observation(
            &request(jpeg[..jpeg.len() / 2].to_vec(), 0, 0),
            &info(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("JPEG"), "{e}");
    }
}
