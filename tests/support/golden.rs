//! The skeleton of the golden tests (tests/*_golden.rs): a reference fixture converted at a
//! dtype ([`Fixture`]), the backends every golden test runs on ([`backends`] and
//! [`backend_tests!`]), stage checks that name the backend and the stage ([`Stages`]: an
//! intermediate fed the reference's own inputs), the chunk on a backend, and the bf16 and
//! 16-bit activation bars.

pub mod prismatic;
mod stages;

#[allow(unused_imports)]
pub use stages::{cache, rows_where, tensor, Exe, Stages};

use super::long_prompt::{long_prompts_match, past_the_bound_is_refused, PromptIds};
use super::{act_dtypes_hold, check, cosine, open, reopened, Golden};
use std::path::{Path, PathBuf};
use vla::gguf::{GgmlType, GgufFile, GgufWriter};
use vla::models::flow::{FlowArch, FlowPolicy};
use vla::policy::{Observation, Policy, RuntimeOptions};

pub const CPU: &str = "cpu";
/// wgpu on Vulkan (Mesa's lavapipe where there is no GPU).
pub const VULKAN: &str = "vulkan";
/// ggml-cpu (the `ggml` feature).
pub const GGML: &str = "ggml";

/// The backends every golden test runs on, in order.
pub fn backends() -> Vec<&'static str> {
    vec![
        CPU,
        VULKAN,
        #[cfg(feature = "ggml")]
        GGML,
    ]
}

/// One test per backend of [`backends`], with the caller's names, each calling `$check`
/// (a `fn(&str)`) with its backend:
/// `backend_tests! { cpu_matches_x, vulkan_matches_x, ggml_matches_x => |backend| ... }`.
#[allow(unused_macros)]
macro_rules! backend_tests {
    ($cpu:ident, $vulkan:ident, $ggml:ident => $check:expr) => {
        #[test]
        fn $cpu() {
            let check: fn(&str) = $check;
            check($crate::support::golden::CPU)
        }
        #[test]
        fn $vulkan() {
            let check: fn(&str) = $check;
            check($crate::support::golden::VULKAN)
        }
        #[cfg(feature = "ggml")]
        #[test]
        fn $ggml() {
            let check: fn(&str) = $check;
            check($crate::support::golden::GGML)
        }
    };
}

/// The tests every flow arch's golden file has, one line an arch
/// (`flow_golden_tests! { fixture, "GR00T N1.7", matches_lerobot, bf16_weights_stay_close }`):
/// `{cpu,vulkan,ggml}_matches_lerobot` (`$matches(&$fixture(), backend)` on each backend of
/// [`backends`]), `vulkan_16bit_activations_keep_the_chunk` and `$bf16` (the bf16 bar), the
/// last two labelled `$label`.
#[allow(unused_macros)]
macro_rules! flow_golden_tests {
    ($fixture:ident, $label:literal, $matches:ident, $bf16:ident) => {
        backend_tests! {
            cpu_matches_lerobot, vulkan_matches_lerobot, ggml_matches_lerobot
                => |backend| $matches(&$fixture(), backend)
        }

        /// 16-bit activations keep the chunk (cosine to the f32 chunk, README table).
        #[test]
        fn vulkan_16bit_activations_keep_the_chunk() {
            $fixture().act_16bit_keeps_the_chunk($label);
        }

        /// bf16 matmul weights: the chunk stays close to the reference's f32 one.
        #[test]
        fn $bf16() {
            $fixture().bf16_stays_close($label);
        }
    };
}

/// A [`Convert`] through a converter module whose `Options` take `dtype: Some(_)`, the rest
/// default: `converter!(vla::convert::gr00t)`.
#[allow(unused_macros)]
macro_rules! converter {
    ($($m:ident)::+) => {
        |dir: &std::path::Path, dtype| {
            let opts = $($m)::+::Options {
                dtype: Some(dtype),
                ..Default::default()
            };
            $($m)::+::convert(dir, &opts, &mut |_, _, _| {}).map(|c| c.writer)
        }
    };
}

/// The folder of a full-size fixture (not committed), named by the environment variable `var`.
pub fn env_dir(var: &str) -> PathBuf {
    PathBuf::from(std::env::var(var).unwrap_or_else(|_| panic!("{var}=<dir>")))
}

/// The backend of a full-size run: `VLA_TEST_BACKEND`, by default cpu.
pub fn test_backend() -> String {
    std::env::var("VLA_TEST_BACKEND").unwrap_or_else(|_| CPU.into())
}

/// The bar of a chunk from bf16 weights: its cosine to the reference's (f32) chunk.
pub const BF16_MIN_COSINE: f64 = 0.999;

/// The arch's converter: the checkpoint folder at a dtype, as a GGUF writer.
pub type Convert = fn(&Path, GgmlType) -> vla::Result<GgufWriter<'static>>;

/// The (rows, action dims) a chunk of an arch of config `A` has.
pub type ChunkShape<A> = fn(&A) -> (usize, usize);

/// A reference fixture of a flow arch `A`: `golden.*` and the checkpoint, how it converts and
/// the request made of the reference's inputs.
pub struct Fixture<A> {
    pub dir: PathBuf,
    pub g: Golden,
    convert: Convert,
    observe: fn(&Golden, &A) -> Observation,
}

impl<A: FlowArch> Fixture<A> {
    pub fn new(dir: PathBuf, convert: Convert, observe: fn(&Golden, &A) -> Observation) -> Self {
        let g = Golden::load(&dir);
        Fixture {
            dir,
            g,
            convert,
            observe,
        }
    }

    /// The same arch's fixture in `dir`.
    pub fn at(&self, dir: PathBuf) -> Self {
        Fixture::new(dir, self.convert, self.observe)
    }

    /// The checkpoint converted at `dtype` (written to a temporary file and mapped: the full
    /// sizes do not fit in memory twice).
    pub fn gguf(&self, dtype: GgmlType) -> GgufFile {
        let c = (self.convert)(&self.dir, dtype);
        reopened(&c.unwrap_or_else(|e| panic!("{:?} at {dtype:?}: {e}", self.dir)))
    }

    /// The f32 conversion's config.
    pub fn config(&self) -> A {
        A::read(&self.gguf(GgmlType::F32)).unwrap()
    }

    /// The reference's request for a model of `cfg`.
    pub fn observation(&self, cfg: &A) -> Observation {
        (self.observe)(&self.g, cfg)
    }

    /// The reference's chunk.
    pub fn actions(&self) -> Vec<f32> {
        self.g.f32("actions")
    }

    /// The reference's task text.
    pub fn task(&self) -> &str {
        self.g.meta["task"].as_str().unwrap()
    }

    pub fn policy(&self, dtype: GgmlType, opts: &RuntimeOptions) -> vla::Result<FlowPolicy<A>> {
        FlowPolicy::new(self.gguf(dtype), opts)
    }

    /// The f32 conversion's policy on cpu, default options.
    pub fn cpu(&self) -> FlowPolicy<A> {
        self.policy(GgmlType::F32, &RuntimeOptions::default())
            .unwrap()
    }

    /// The f32 conversion's policy on `backend`; `None` where [`open`] skips the backend.
    pub fn on(&self, backend: &str) -> Option<FlowPolicy<A>> {
        open(backend)?;
        let opts = RuntimeOptions {
            backend: backend.into(),
            ..Default::default()
        };
        let m = self.policy(GgmlType::F32, &opts);
        let m = m.unwrap_or_else(|e| panic!("{backend}: load: {e}"));
        println!("backend {}", m.info().backend);
        Some(m)
    }

    /// `m`'s chunk for the reference's request.
    pub fn chunk(&self, m: &mut FlowPolicy<A>) -> Vec<f32> {
        let obs = self.observation(m.config());
        m.predict(&obs).unwrap().actions
    }

    /// The camera frames of the fixture (`image.{i}`) as the arch's camera input makes them
    /// are the reference's pixels (`pixels.{i}`), within `tol` (checks named after `label`).
    pub fn pixels_match(&self, label: &str, tol: f32) {
        let (g, camera) = (&self.g, self.config().spec().camera);
        for i in 0..g.usize("n_images") {
            let img = g.image(i);
            let px = camera.pixels(&img).unwrap();
            let what = format!("{label}pixels, camera {i} ({}x{})", img.height, img.width);
            check(&what, &px, &g.f32(&format!("pixels.{i}")), tol);
        }
    }

    /// On `backend` ([`Self::on`]): the normalised state is the one the reference fed its
    /// model (`state`, within 1e-6), and the chunk, of `shape` (rows, action dims), is the
    /// reference's within `tol` (checked as `{backend}: {what}`).
    pub fn state_and_chunk_match(
        &self,
        backend: &str,
        (state, shape): (&str, ChunkShape<A>),
        what: &str,
        tol: f32,
    ) {
        let Some(mut m) = self.on(backend) else {
            return;
        };
        let obs = self.observation(m.config());
        let normalised = m.normalised_state(&obs).unwrap();
        check("normalised state", &normalised, &self.g.f32(state), 1e-6);
        let chunk = m.predict(&obs).unwrap();
        assert_eq!((chunk.chunk_size, chunk.action_dim), shape(m.config()));
        let what = format!("{backend}: {what}");
        check(&what, &chunk.actions, &self.actions(), tol);
    }

    /// The chunk of the bf16 conversion on cpu (which holds bf16 tensors) keeps a cosine of
    /// [`BF16_MIN_COSINE`] to the reference's f32 one.
    pub fn bf16_stays_close(&self, label: &str) {
        let file = self.gguf(GgmlType::BF16);
        let n_bf16 = file.tensors().iter();
        let n_bf16 = n_bf16.filter(|t| t.ty == GgmlType::BF16).count();
        assert!(n_bf16 > 0, "{label}: no bf16 tensors in a bf16 conversion");
        let mut m = FlowPolicy::<A>::new(file, &RuntimeOptions::default()).unwrap();
        let (got, want) = (self.chunk(&mut m), self.actions());
        let cos = cosine(&got, &want);
        let err = got.iter().zip(&want).map(|(a, b)| (a - b).abs());
        let err = err.fold(0f32, f32::max);
        let vs = format!("{label}: bf16 GGUF ({n_bf16} bf16 tensors) vs the reference's f32 chunk");
        println!("{vs}: cosine {cos:.6}, max abs err {err:.3e}");
        assert!(cos >= BF16_MIN_COSINE, "{label}: bf16 chunk cosine {cos}");
    }

    /// 16-bit activations on vulkan keep the f32 chunk ([`act_dtypes_hold`]).
    pub fn act_16bit_keeps_the_chunk(&self, label: &str) {
        act_dtypes_hold(label, VULKAN, &self.actions(), |act| {
            let opts = RuntimeOptions {
                backend: VULKAN.into(),
                act_dtype: act,
                ..Default::default()
            };
            let mut m = self.policy(GgmlType::F32, &opts)?;
            let obs = self.observation(m.config());
            Ok(m.predict(&obs)?.actions)
        });
    }

    /// The text prompt `task` in place of the token ids gives the reference's chunk on cpu
    /// (checked as `what`, within `tol`).
    pub fn text_prompt_gives_the_chunk(&self, task: &str, what: &str, tol: f32) {
        let mut m = self.cpu();
        let obs = Observation {
            tokens: None,
            prompt: Some(task.to_owned()),
            ..self.observation(m.config())
        };
        check(
            what,
            &m.predict(&obs).unwrap().actions,
            &self.actions(),
            tol,
        );
    }

    /// The fixture's long instructions ([`long_prompts_match`]), within `tol`.
    pub fn long_prompts_match(&self, prompt: impl Fn(&A) -> &PromptIds, tol: f32) {
        let obs = self.observation(&self.config());
        let make = |opts: &RuntimeOptions| self.policy(GgmlType::F32, opts).unwrap();
        long_prompts_match(&self.dir, make, &obs, prompt, tol);
    }

    /// The instruction's bound (`tokenizer_max_length`) is `bound` of the config, and token
    /// ids one past it are refused on cpu ([`past_the_bound_is_refused`]).
    pub fn past_the_bound_is_refused(&self, bound: fn(&A) -> usize) {
        let mut m = self.cpu();
        let max = m.config().spec().io.tokenizer_max_length;
        assert_eq!(max, bound(m.config()));
        let obs = self.observation(m.config());
        past_the_bound_is_refused(&mut m, &obs, max);
    }
}

/// The instruction's ids in the reference's prompt `ids`: without the ids the converted
/// prompt puts around it.
pub fn instruction<T: Copy + Into<i64>>(ids: &[T], prompt: &PromptIds) -> Vec<i32> {
    let (b, a) = (prompt.before.len(), prompt.after.len());
    ids[b..ids.len() - a]
        .iter()
        .map(|&t| t.into() as i32)
        .collect()
}

/// The reference's prompt `ids` are the converted prompt's ids (`prompt`) around the ids the
/// tokenizer in `m`'s GGUF makes of `task`.
pub fn prompt_is_the_references<A: FlowArch, T: Copy + Into<i64>>(
    m: &FlowPolicy<A>,
    prompt: &PromptIds,
    ids: &[T],
    task: &str,
) {
    let ids: Vec<u32> = ids.iter().map(|&t| t.into() as u32).collect();
    let (b, a) = (prompt.before.len(), prompt.after.len());
    assert_eq!(prompt.before[..], ids[..b]);
    assert_eq!(prompt.after[..], ids[ids.len() - a..]);
    assert_eq!(m.tokenize_prompt(task, &[]).unwrap(), ids[b..ids.len() - a]);
}

/// A JSON array of rows of numbers, row after row.
pub fn json_rows(rows: &serde_json::Value) -> Vec<f32> {
    let rows = rows.as_array().unwrap().iter();
    let values = rows.flat_map(|r| r.as_array().unwrap().iter());
    values.map(|x| x.as_f64().unwrap() as f32).collect()
}
