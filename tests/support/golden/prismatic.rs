//! Prismatic's front end against a reference's stages (VLA-Adapter, OpenVLA-OFT): each tower per
//! camera (`dino.{c}`, `sig.{c}`; camera 0 from our own pixels of `image.0`, camera 1 from the
//! reference's `pixels.1.*`, which `pixels_match_the_processor` checks) and the projector over
//! the reference's fused features (`patches`).

use super::super::Golden;
use super::Stages;
use vla::gguf::GgufFile;
use vla::models::openvla::{self, OpenVlaArch, OpenVlaPolicy};
use vla::modules::prismatic::{project, PrismaticConfig};
use vla::modules::vision::vision_tower;
use vla::policy::{Observation, RuntimeOptions};
use vla::Tensor;

/// A recorded tensor as a graph input.
pub fn input(g: &Golden, name: &str) -> Tensor<'static> {
    Tensor::from_f32(g.st.shape(name).unwrap().to_vec(), g.f32(name)).unwrap()
}

/// The fixture's request: both cameras' bytes, the raw state, the task's text.
pub fn observation(g: &Golden) -> Observation {
    Observation {
        images: (0..2).map(|i| g.u8_image(&format!("image.{i}"))).collect(),
        state: g.f32("state"),
        prompt: Some(g.meta["task"].as_str().unwrap().to_owned()),
        tokens: None,
        noise: None,
        token_mask: None,
    }
}

/// The policy of `file` on `backend`, `None` where [`super::super::open`] skips it.
pub fn policy_on<A: OpenVlaArch>(file: GgufFile, backend: &str) -> Option<OpenVlaPolicy<A>> {
    super::super::open(backend)?;
    let opts = RuntimeOptions {
        backend: backend.into(),
        ..Default::default()
    };
    Some(OpenVlaPolicy::new(file, &opts).unwrap())
}

/// The towers of both cameras, then the projector to `hidden`.
pub fn towers_and_projector(
    st: &Stages,
    g: &Golden,
    file: &GgufFile,
    v: &PrismaticConfig,
    hidden: usize,
) {
    let s = v.image_size;
    let cams = openvla::cameras(v);
    for c in 0..2 {
        for (t, (tower, dino)) in [("dino", true), ("sig", false)].into_iter().enumerate() {
            let px = match c {
                0 => {
                    let px = cams[t].pixels(&g.u8_image("image.0")).unwrap();
                    Tensor::from_f32(vec![3, s, s], px).unwrap()
                }
                _ => input(g, &format!("pixels.1.{tower}")),
            };
            let vcfg = v.tower(dino);
            let mut exe = st.build(tower, file, |gb| {
                let x = gb.input("x", &[3, s, s]);
                Ok(vec![vision_tower(gb, x, &vcfg)?])
            });
            let want = format!("{tower}.{c}");
            st.check(&want, &exe.run1(&[("x", &px)]), &g.f32(&want));
        }
    }
    let n = v.n_patches();
    let (dw, sw) = (v.dino.hidden, v.sig.hidden);
    let mut fused = Vec::new();
    for c in 0..2 {
        let (d, sg) = (g.f32(&format!("dino.{c}")), g.f32(&format!("sig.{c}")));
        for r in 0..n {
            fused.extend_from_slice(&d[r * dw..(r + 1) * dw]);
            fused.extend_from_slice(&sg[r * sw..(r + 1) * sw]);
        }
    }
    let fused = Tensor::from_f32(vec![2 * n, dw + sw], fused).unwrap();
    let mut exe = st.build("projector", file, |gb| {
        let x = gb.input("x", fused.shape());
        Ok(vec![project(gb, x, v, hidden)?])
    });
    st.check("patches", &exe.run1(&[("x", &fused)]), &g.f32("patches"));
}
