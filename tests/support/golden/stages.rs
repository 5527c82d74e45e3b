//! One backend's stage checks of a golden test ([`Stages`]): an intermediate fed the
//! reference's own inputs, compared with a message that names the backend and the stage
//! (layer, camera, ...); the compiled graphs ([`Exe`]) name them when they fail.

use super::super::{check, open, Golden};
use std::fmt::Display;
use vla::backend::{Backend, Executable};
use vla::gguf::GgufFile;
use vla::graph::{Graph, GraphBuilder, NodeId};
use vla::modules::vision::{vision_tower, VisionConfig};
use vla::Tensor;

/// One backend's stage checks: every message names the backend (after the caller's label,
/// where one is given) and the stage.
pub struct Stages {
    be: Box<dyn Backend>,
    pub name: String,
    pub tol: f32,
}

impl Stages {
    /// `None` where [`open`] skips the backend.
    pub fn open(backend: &str, tol: f32) -> Option<Self> {
        Self::labelled(backend, backend.to_owned(), tol)
    }

    /// Checks named `name: stage`.
    pub fn labelled(backend: &str, name: String, tol: f32) -> Option<Self> {
        let be = open(backend)?;
        println!("backend {}", be.description());
        Some(Stages { be, name, tol })
    }

    /// `stage`'s values against the reference's, within the tolerance.
    pub fn check(&self, stage: impl Display, got: &[f32], want: &[f32]) {
        self.check_within(stage, got, want, self.tol);
    }

    pub fn check_within(&self, stage: impl Display, got: &[f32], want: &[f32], tol: f32) {
        check(&format!("{}: {stage}", self.name), got, want, tol);
    }

    pub fn compile<'w>(&self, what: &str, graph: &Graph, file: &'w GgufFile) -> Exe<'w> {
        let what = format!("{}: {what}", self.name);
        let exe = self.be.compile(graph, file);
        let exe = exe.unwrap_or_else(|e| panic!("{what}: compile: {e}"));
        Exe { exe, what }
    }

    /// The graph `f` builds over `file`, with the outputs it returns.
    pub fn build<'w>(
        &self,
        what: &str,
        file: &'w GgufFile,
        f: impl FnOnce(&mut GraphBuilder<'w>) -> vla::Result<Vec<NodeId>>,
    ) -> Exe<'w> {
        let mut gb = GraphBuilder::new(file);
        let outputs = f(&mut gb).unwrap_or_else(|e| panic!("{}: {what}: {e}", self.name));
        self.compile(what, &gb.build(&outputs).unwrap(), file)
    }

    /// One of the arch's graphs: `make` is `graphs::vision`, `graphs::prefill`, ...
    pub fn graph<'w, C>(
        &self,
        what: &str,
        file: &'w GgufFile,
        cfg: &C,
        make: fn(GraphBuilder<'w>, &C) -> vla::Result<Graph>,
    ) -> Exe<'w> {
        let graph = make(GraphBuilder::new(file), cfg);
        let graph = graph.unwrap_or_else(|e| panic!("{}: {what}: {e}", self.name));
        self.compile(what, &graph, file)
    }

    /// Outputs `out` of a graph against the reference's tensors `names` (one an output), the
    /// first `len` values of each.
    pub fn check_outputs(&self, g: &Golden, out: &[Tensor], names: &[&str], len: usize) {
        assert_eq!(out.len(), names.len(), "{}: outputs", self.name);
        for (got, name) in out.iter().zip(names) {
            self.check(name, &got.as_f32().unwrap()[..len], &g.f32(name));
        }
    }

    /// The arch's `denoise` graph over `inputs` and the cache `kv` gives the reference's
    /// first velocity (`velocity.0`).
    pub fn first_velocity(
        &self,
        g: &Golden,
        mut denoise: Exe,
        inputs: &[(&str, &Tensor)],
        kv: &[(String, Tensor)],
    ) {
        let v = denoise.run_cached(inputs, kv);
        self.check("first velocity", &v, &g.f32("velocity.0"));
    }

    /// SigLIP vision, fed the reference's pixels (`pixels.{i}`, `n_images` cameras): the
    /// tower alone per camera (`vit.{i}`) and the arch's `vision` graph, every camera in one
    /// run (`vision.{i}`: the tower and `connector`). Returns the reference's image tokens.
    pub fn siglip_vision(
        &self,
        g: &Golden,
        mut vision: Exe,
        (n_images, cfg): (usize, &VisionConfig),
        file: &GgufFile,
        connector: &str,
    ) -> Vec<f32> {
        let s = cfg.image_size;
        let mut tower = self.build("vision tower", file, |gb| {
            let img = gb.input("image", &[3, s, s]);
            Ok(vec![vision_tower(gb, img, cfg)?])
        });
        let pixels: Vec<Tensor> = (0..n_images)
            .map(|i| tensor(vec![3, s, s], g.f32(&format!("pixels.{i}"))))
            .collect();
        let all = vision.run_images(&pixels);
        let mut img_tokens = Vec::new();
        for (i, px) in pixels.iter().enumerate() {
            let vit = tower.run1(&[("image", px)]);
            let want = g.f32(&format!("vit.{i}"));
            self.check(format_args!("vision tower, camera {i}"), &vit, &want);
            let want = g.f32(&format!("vision.{i}"));
            let got = &all[i * want.len()..(i + 1) * want.len()];
            self.check(format_args!("vision + {connector}, camera {i}"), got, &want);
            img_tokens.extend(want);
        }
        img_tokens
    }

    /// Qwen3-VL vision, the arch's `vision` graph over `pixels` (`image.{i}`): `n` rows of
    /// the image tokens and each of the `taps` deepstack features side by side (`h` wide
    /// each), checked against the reference's (`vision`, `deepstack.{j}`). Returns the
    /// reference's, side by side, as the prefill reads them.
    pub fn deepstack_vision(
        &self,
        g: &Golden,
        mut vision: Exe,
        pixels: &[Tensor],
        [n, taps, h]: [usize; 3],
    ) -> Vec<f32> {
        let out = vision.run_images(pixels);
        let mut names = vec!["vision".to_owned()];
        names.extend((0..taps).map(|j| format!("deepstack.{j}")));
        let width = (1 + taps) * h;
        for (k, name) in names.iter().enumerate() {
            let column: Vec<f32> = (0..n)
                .flat_map(|r| out[r * width + k * h..][..h].to_vec())
                .collect();
            self.check(name, &column, &g.f32(name));
        }
        let want: Vec<Vec<f32>> = names.iter().map(|n| g.f32(n)).collect();
        (0..n)
            .flat_map(|r| {
                want.iter()
                    .flat_map(move |w| w[r * h..(r + 1) * h].to_vec())
            })
            .collect()
    }
}

/// A compiled graph whose failures name the backend and the graph.
pub struct Exe<'w> {
    exe: Box<dyn Executable + 'w>,
    what: String,
}

impl Exe<'_> {
    pub fn run(&mut self, inputs: &[(&str, &Tensor)]) -> Vec<Tensor<'static>> {
        let out = self.exe.run(inputs);
        out.unwrap_or_else(|e| panic!("{}: run: {e}", self.what))
    }

    /// The first output's values.
    pub fn run1(&mut self, inputs: &[(&str, &Tensor)]) -> Vec<f32> {
        self.run(inputs).remove(0).to_vec_f32().unwrap()
    }

    /// [`Self::run1`] over `inputs` and the cache `kv` (the denoise graph's).
    pub fn run_cached(&mut self, inputs: &[(&str, &Tensor)], kv: &[(String, Tensor)]) -> Vec<f32> {
        let mut inputs = inputs.to_vec();
        inputs.extend(kv.iter().map(|(n, t)| (n.as_str(), t)));
        self.run1(&inputs)
    }

    /// [`Self::run1`] over camera frames, the vision graph's `image.{i}`.
    pub fn run_images(&mut self, pixels: &[Tensor]) -> Vec<f32> {
        let names: Vec<String> = (0..pixels.len()).map(|i| format!("image.{i}")).collect();
        let inputs: Vec<(&str, &Tensor)> = names.iter().map(String::as_str).zip(pixels).collect();
        self.run1(&inputs)
    }
}

/// The prefill's outputs as the denoise graph reads them: `kv.{layer}.k`, `kv.{layer}.v`.
pub fn cache(kv: Vec<Tensor<'static>>) -> Vec<(String, Tensor<'static>)> {
    let name = |i: usize| format!("kv.{}.{}", i / 2, ["k", "v"][i % 2]);
    kv.into_iter()
        .enumerate()
        .map(|(i, t)| (name(i), t))
        .collect()
}

/// The rows of `x` (`row` values each) where `keep` holds, up to `keep`'s length.
pub fn rows_where(x: &[f32], row: usize, keep: &[bool]) -> Vec<f32> {
    assert!(
        x.len() >= keep.len() * row,
        "{} values, not {} rows",
        x.len(),
        keep.len()
    );
    let rows = x.chunks(row).zip(keep);
    rows.filter(|(_, &k)| k)
        .flat_map(|(r, _)| r.to_vec())
        .collect()
}

/// An f32 tensor, or a panic.
pub fn tensor(shape: Vec<usize>, v: Vec<f32>) -> Tensor<'static> {
    Tensor::from_f32(shape, v).unwrap()
}
