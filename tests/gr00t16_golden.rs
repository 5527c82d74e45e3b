//! GR00T N1.6 against NVIDIA Isaac-GR00T's own `Gr00tN1d6` (n1.6.1-release, transformers 5.5.4).
//! The fixture `tests/fixtures/groot16-tiny` is Isaac-GR00T's checkpoint layout with random
//! (re-randomized) weights, its processor's files, a tiny Eagle folder, the inputs, stages and
//! chunk, made by `tools/golden/groot16.py` (rerun instructions there). So far the frame
//! transform is checked here; the arch itself is the next step (docs: not served yet).

mod support;

use support::{check, Golden};
use vla::policy::ImageData;
use vla::preprocess::area::{gr00t_frame, letterbox};

/// Isaac-GR00T's eval transform (LetterBoxPad, SmallestMaxSize with INTER_AREA, the centre
/// crop, SmallestMaxSize again) gives the reference's frames byte for byte, and `(x / 255 -
/// 0.5) / 0.5` channels first its pixels (the frame is already at smart_resize's size).
#[test]
fn frames_match_isaacs_eval_transform() {
    let dir = support::fixture("groot16-tiny");
    let g = Golden::load(&dir);
    let arch: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("arch.json")).unwrap()).unwrap();
    let edge = arch["image"]["shortest_edge"].as_u64().unwrap() as usize;
    for i in 0..2 {
        let img = g.image(i);
        let ImageData::RgbU8(raw) = &img.data else {
            panic!("image.{i}: bytes expected")
        };
        let (square, side) = letterbox(raw, (img.height, img.width));
        let (frame, (h, w)) = gr00t_frame(&square, (side, side), edge, 0.95);
        let want = g.u8_image(&format!("frame.{i}"));
        assert_eq!((h, w), (want.height, want.width), "frame.{i}: size");
        let ImageData::RgbU8(want) = &want.data else {
            panic!()
        };
        assert!(&frame == want, "frame.{i}: not the reference's bytes");
        let pixels: Vec<f32> = (0..3)
            .flat_map(|c| frame.iter().skip(c).step_by(3).map(|&v| v as f32))
            .map(|v| (v / 255.0 - 0.5) / 0.5)
            .collect();
        check(
            &format!("pixels.{i}"),
            &pixels,
            &g.f32(&format!("pixels.{i}")),
            1e-6,
        );
    }
}
