//! Every arch the conformance suite runs on (tests/support/conformance.rs, and the served
//! round trip of vla-server/tests/server.rs, which includes this file by path): a new arch is
//! one line in [`arch_cases!`]. Everything else is made through arch-independent APIs:
//! [`vla::models::from_gguf`], [`Policy::info`] and the GGUF's `<arch>.<key>` metadata.
#![allow(dead_code)]

use vla::gguf::{GgmlType::F32, GgufFile, GgufWriter};
use vla::models::common::gaussian_noise;
use vla::models::openvla::{self, OpenVlaArch};
use vla::models::pi0::{self, Variant};
use vla::models::{act, bitvla, octo, presets, smolvla, turbovla};
use vla::policy::{Image, ImageData, Observation, Policy, PolicyInfo, RuntimeOptions};

/// Calls `$then!` with the list of cases, `name { field: value, ... }` for the fields of
/// [`ArchCase`] but its name: [`cases`] is made from it, and so are the tests, one per
/// (check, case), of tests/conformance.rs and vla-server/tests/server.rs.
macro_rules! arch_cases {
    ($then:ident) => {
        $then! {
            smolvla { gguf: |seed| smolvla::random_gguf(&smolvla::demo_config(), seed, F32), state: StateInput::Direct, tolerance: F32_WEIGHTS, cuts_prompt: true, shape: Shape::Flow },
            pi0 { gguf: |seed| with_tokenizer(&pi0::small_config(Variant::Pi0), seed), state: StateInput::Direct, tolerance: F32_WEIGHTS, cuts_prompt: true, shape: Shape::Flow },
            pi05 { gguf: |seed| with_tokenizer(&pi0::small_config(Variant::Pi05), seed), state: StateInput::PromptOnly, tolerance: F32_WEIGHTS, cuts_prompt: true, shape: Shape::Flow },
            gr00t_n1_5 { gguf: |seed| with_tokenizer(&presets::gr00t_small_config(), seed), state: StateInput::Direct, tolerance: F32_WEIGHTS, cuts_prompt: false, shape: Shape::Flow },
            gr00t_n1_6 { gguf: |seed| with_tokenizer(&presets::gr00t_n1_6_small_config(), seed), state: StateInput::Direct, tolerance: F32_WEIGHTS, cuts_prompt: false, shape: Shape::Flow },
            gr00t_n1_7 { gguf: |seed| with_tokenizer(&presets::gr00t_n1_7_small_config(), seed), state: StateInput::Direct, tolerance: F32_WEIGHTS, cuts_prompt: false, shape: Shape::Flow },
            vla_jepa { gguf: |seed| with_tokenizer(&presets::vla_jepa_small_config(), seed), state: StateInput::Direct, tolerance: F32_WEIGHTS, cuts_prompt: false, shape: Shape::Flow },
            evo1 { gguf: |seed| with_tokenizer(&presets::evo1_small_config(), seed), state: StateInput::Direct, tolerance: F32_WEIGHTS, cuts_prompt: true, shape: Shape::Flow },
            act { gguf: |seed| act::random_writer(&presets::act_small_config(), seed, F32)?.to_bytes(), state: StateInput::Direct, tolerance: F32_WEIGHTS, cuts_prompt: false, shape: Shape::OnePass(ACT_KEYS) },
            openvla_oft { gguf: openvla_oft_gguf, state: StateInput::Direct, tolerance: F32_WEIGHTS, cuts_prompt: false, shape: Shape::OnePassText { io: OPENVLA_KEYS, vocab: "lm.vocab", max_tokens: openvla_oft_max_prompt, prefix: no_ids, suffix: no_ids, padded: false } },
            vla_adapter { gguf: vla_adapter_gguf, state: StateInput::Direct, tolerance: F32_WEIGHTS, cuts_prompt: false, shape: Shape::OnePassText { io: OPENVLA_KEYS, vocab: "lm.vocab", max_tokens: vla_adapter_max_prompt, prefix: no_ids, suffix: no_ids, padded: false } },
            bitvla { gguf: bitvla_gguf, state: StateInput::Direct, tolerance: INT8_ACTIVATIONS, cuts_prompt: false, shape: Shape::OnePassText { io: OPENVLA_KEYS, vocab: "lm.vocab", max_tokens: bitvla_max_prompt, prefix: bitvla_placeholders, suffix: no_ids, padded: false } },
            octo { gguf: octo_gguf, state: StateInput::Direct, tolerance: F32_WEIGHTS, cuts_prompt: false, shape: Shape::Sampled { vocab: octo_vocab, max_tokens: octo_max_prompt } },
            turbovla { gguf: turbovla_gguf, state: StateInput::Direct, tolerance: F32_WEIGHTS, cuts_prompt: false, shape: Shape::OnePassText { io: TURBOVLA_KEYS, vocab: "vocab_size", max_tokens: turbovla_max_prompt, prefix: bert_cls, suffix: bert_sep, padded: true } },
        }
    };
}

/// A random-weight GGUF of `cfg` carrying the demo tokenizer (the pi0 presets have none),
/// so that prompts and the no-tokenizer check have something to compare with.
fn with_tokenizer<A: vla::models::flow::FlowArch>(cfg: &A, seed: u64) -> vla::Result<Vec<u8>> {
    let tok = smolvla::demo_tokenizer()?;
    vla::models::presets::random_writer(cfg, seed, F32, Some(&tok))?.to_bytes()
}

/// The small VLA-Adapter with the demo tokenizer.
fn vla_adapter_gguf(seed: u64) -> vla::Result<Vec<u8>> {
    let tok = smolvla::demo_tokenizer()?;
    let cfg = presets::vla_adapter_small_config();
    openvla::random_writer(&cfg, seed, F32, Some(&tok))?.to_bytes()
}

fn vla_adapter_max_prompt() -> usize {
    presets::vla_adapter_small_config().max_prompt()
}

/// The small OpenVLA-OFT with the demo tokenizer.
fn openvla_oft_gguf(seed: u64) -> vla::Result<Vec<u8>> {
    let tok = smolvla::demo_tokenizer()?;
    let cfg = presets::openvla_oft_small_config();
    openvla::random_writer(&cfg, seed, F32, Some(&tok))?.to_bytes()
}

fn openvla_oft_max_prompt() -> usize {
    presets::openvla_oft_small_config().max_prompt()
}

/// The small BitVLA (random ternary weights) with the golden fixture's tokenizer (Llama 3's
/// layout with BitVLA's placeholders at their ids, as the prompt's template needs).
fn bitvla_gguf(seed: u64) -> vla::Result<Vec<u8>> {
    let json = include_str!("../fixtures/bitvla-tiny/tokenizer.json");
    let tok = vla::tokenizer::Tokenizer::from_hf_json(json)?;
    let cfg = presets::bitvla_small_config();
    let mut w = bitvla::random_writer(&cfg, seed, F32)?;
    tok.write_gguf(&mut w)?;
    w.to_bytes()
}

fn bitvla_max_prompt() -> usize {
    presets::bitvla_small_config().max_prompt()
}

/// What BitVLA's token ids hold before the task's: every camera's image placeholders and the
/// proprio placeholder (a client sends them, as vla.cpp's does).
fn bitvla_placeholders() -> Vec<i32> {
    let cfg = presets::bitvla_small_config();
    let mut ids = vec![cfg.image_id as i32; cfg.image_rows()];
    ids.push(cfg.proprio_id as i32);
    ids
}

/// The small Octo (three proprio dimensions) with the golden fixture's T5 tokenizer.
fn octo_gguf(seed: u64) -> vla::Result<Vec<u8>> {
    let json = include_str!("../fixtures/octo-tiny/t5-tiny/tokenizer.json");
    let tok = vla::tokenizer::Tokenizer::from_hf_json(json)?;
    let mut w = octo::random_writer(&presets::octo_small_config(), seed, F32)?;
    tok.write_gguf(&mut w)?;
    w.to_bytes()
}

fn octo_vocab() -> usize {
    presets::octo_small_config().t5_vocab
}

fn octo_max_prompt() -> usize {
    presets::octo_small_config().lang_tokens
}

/// No ids around the task's.
fn no_ids() -> Vec<i32> {
    Vec::new()
}

/// The small TurboVLA with its demo vocabulary (bert-base-uncased's special ids).
fn turbovla_gguf(seed: u64) -> vla::Result<Vec<u8>> {
    turbovla::demo_writer(&presets::turbovla_small_config(), seed, F32)?.to_bytes()
}

fn turbovla_max_prompt() -> usize {
    presets::turbovla_small_config().text_len
}

/// BERT's whole encoding: `[CLS]` first, `[SEP]` last (TurboVLA).
fn bert_cls() -> Vec<i32> {
    vec![presets::turbovla_small_config().special.cls as i32]
}

fn bert_sep() -> Vec<i32> {
    vec![presets::turbovla_small_config().special.sep as i32]
}

/// How the robot state reaches the model.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum StateInput {
    /// As an input of its own: the chunk depends on it whatever the instruction.
    Direct,
    /// Only through the text prompt (pi0.5's state bins): token ids replace the prompt, so
    /// with token ids the chunk does not depend on it (but it is still checked).
    PromptOnly,
}

/// The largest max abs difference from the cpu chunk allowed on each backend, relative to
/// `max(1, max |action|)`.
#[derive(Clone, Copy, Debug)]
pub struct Tolerance {
    /// The wgpu backends (`vulkan`, ...).
    pub wgpu: f32,
    /// `ggml` (ggml-cpu).
    pub ggml_cpu: f32,
    /// `ggml:<device>` (GPU kernels).
    pub ggml_gpu: f32,
}

impl Tolerance {
    pub fn of(&self, backend: &str) -> f32 {
        match backend {
            "ggml" => self.ggml_cpu,
            b if b.starts_with("ggml") => self.ggml_gpu,
            _ => self.wgpu,
        }
    }
}

/// F32 weights. ggml's GPU kernels take matmul inputs in f16 (ggml-vulkan: NMSE ~1e-7 per
/// F32 matmul, 3e-6 per F16 one), which moved the demo chunks by 3-5e-4 of their scale there.
pub const F32_WEIGHTS: Tolerance = Tolerance {
    wgpu: 1e-4,
    ggml_cpu: 1e-4,
    ggml_gpu: 5e-3,
};

/// Archs that round every linear's input to int8 codes (BitVLA's BitLinear): the backends'
/// float rounding puts a few codes one step apart (a code moves its input by 1 / 127 of the
/// row's largest value), which a random model's later layers carry on; the reference
/// itself moves as far (its chunk by 4.5e-2 of a max 2 with SDPA instead of eager attention
/// in SigLIP: tests/bitvla_golden.rs). Every integer site is exact on every backend (the
/// op harness; the golden test's stages).
pub const INT8_ACTIVATIONS: Tolerance = Tolerance {
    wgpu: 5e-2,
    ggml_cpu: 5e-2,
    ggml_gpu: 5e-2,
};

/// What a request's fields mean to an arch, and where its GGUF keeps its sizes.
#[derive(Clone, Copy, Debug)]
pub enum Shape {
    /// A flow-matching policy: it reads an instruction (token ids or a prompt), integrates
    /// the request's noise over `num_steps` steps, and runs stepwise on request; its sizes
    /// are `<arch>.n_images`, `.chunk_size`, `.num_steps`, `.max_state_dim`, ...
    Flow,
    /// One pass, no language, no noise, no steps (ACT): a request's instruction or noise is
    /// not read (the reply says so); its sizes are under the keys given.
    OnePass(IoKeys),
    /// One pass that reads an instruction but no noise and has no steps (VLA-Adapter): its
    /// sizes under `io`, its vocabulary under `vocab`; `max_tokens()` is the longest
    /// instruction it takes (one longer is refused naming the bound), and graphs are compiled
    /// per instruction length (rows = tokens), or with `padded` every instruction fills
    /// `max_tokens()` rows (TurboVLA). Token ids are `prefix()` (BitVLA's placeholders,
    /// BERT's `[CLS]`), the task's, then `suffix()` (BERT's `[SEP]`).
    OnePassText {
        io: IoKeys,
        vocab: &'static str,
        max_tokens: fn() -> usize,
        prefix: fn() -> Vec<i32>,
        suffix: fn() -> Vec<i32>,
        padded: bool,
    },
    /// A sampler run in one graph (Octo's DDPM): it reads an instruction padded to
    /// `max_tokens()` (one longer is refused naming the bound) from a vocabulary of
    /// `vocab()`, and the request's noise (INFO's `noise_shape`: a draw per step), but runs
    /// no steps apart; its cameras take their own sizes only (INFO's `image_sizes`).
    Sampled {
        vocab: fn() -> usize,
        max_tokens: fn() -> usize,
    },
}

/// The `<arch>.<key>` names of a one-pass arch's sizes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct IoKeys {
    pub n_images: &'static str,
    pub chunk_size: &'static str,
    pub state_dim: &'static str,
    pub action_dim: &'static str,
}

/// vla.cpp's `act` keys.
pub const ACT_KEYS: IoKeys = IoKeys {
    n_images: "num_views",
    chunk_size: "chunk_size",
    state_dim: "state_dim",
    action_dim: "action_dim",
};

/// vla.cpp's `turbovla` keys.
pub const TURBOVLA_KEYS: IoKeys = IoKeys {
    n_images: "num_views",
    chunk_size: "action_horizon",
    state_dim: "state_dim",
    action_dim: "action_dim",
};

/// vla.cpp's `vla_adapter` / `openvla_oft` keys.
pub const OPENVLA_KEYS: IoKeys = IoKeys {
    n_images: "vit.num_images",
    chunk_size: "action.chunk",
    state_dim: "action.proprio_dim",
    action_dim: "action.action_dim",
};

impl Shape {
    /// Whether the arch integrates the request's noise over steps (and reads an instruction).
    pub fn flow(&self) -> bool {
        matches!(self, Shape::Flow)
    }

    /// Whether the arch reads the request's noise.
    pub fn reads_noise(&self) -> bool {
        matches!(self, Shape::Flow | Shape::Sampled { .. })
    }

    /// Whether the arch reads an instruction.
    pub fn reads_text(&self) -> bool {
        matches!(
            self,
            Shape::Flow | Shape::OnePassText { .. } | Shape::Sampled { .. }
        )
    }

    /// A request's token ids with `task` as the task's ([`Shape::OnePassText`]'s `prefix`
    /// first, its `suffix` last).
    pub fn ids(&self, task: Vec<i32>) -> Vec<i32> {
        match self {
            Shape::OnePassText { prefix, suffix, .. } => {
                prefix().into_iter().chain(task).chain(suffix()).collect()
            }
            _ => task,
        }
    }

    /// The ids [`Self::ids`] puts around the task's.
    pub fn affix_len(&self) -> usize {
        self.ids(Vec::new()).len()
    }

    /// The ids [`Self::ids`] puts after the task's.
    pub fn suffix_len(&self) -> usize {
        match self {
            Shape::OnePassText { suffix, .. } => suffix().len(),
            _ => 0,
        }
    }

    /// A one-pass arch's size keys.
    pub fn io(&self) -> Option<IoKeys> {
        match self {
            Shape::Flow | Shape::Sampled { .. } => None,
            Shape::OnePass(k) | Shape::OnePassText { io: k, .. } => Some(*k),
        }
    }
}

/// One arch under test.
#[derive(Clone, Copy, Debug)]
pub struct ArchCase {
    pub name: &'static str,
    /// A random-weight GGUF of the arch drawn from a seed.
    pub gguf: fn(u64) -> vla::Result<Vec<u8>>,
    pub state: StateInput,
    pub tolerance: Tolerance,
    /// The reference cuts a prompt past `tokenizer_max_length` (else it has no bound: a
    /// longer one is refused).
    pub cuts_prompt: bool,
    pub shape: Shape,
}

macro_rules! case_list {
    ($($name:ident { $($field:ident: $value:expr),* $(,)? }),* $(,)?) => {
        vec![$(ArchCase { name: stringify!($name), $($field: $value),* }),*]
    };
}

pub fn cases() -> Vec<ArchCase> {
    arch_cases!(case_list)
}

/// The case called `name`.
pub fn case(name: &str) -> ArchCase {
    cases()
        .into_iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no arch case {name:?}"))
}

/// The seed of the weights every check uses.
pub const SEED: u64 = 7;

impl ArchCase {
    pub fn bytes(&self) -> Vec<u8> {
        (self.gguf)(SEED).unwrap_or_else(|e| panic!("{}: random_gguf: {e}", self.name))
    }

    /// [`Self::bytes`] with every `tokenizer.*` metadata key removed.
    pub fn bytes_without_tokenizer(&self) -> Vec<u8> {
        let file = GgufFile::from_bytes(self.bytes()).unwrap();
        let mut w = GgufWriter::new();
        for (k, v) in file.metadata() {
            if !k.starts_with("tokenizer.") {
                w.add_metadata(k.clone(), v.clone()).unwrap();
            }
        }
        for t in file.tensors() {
            w.add_tensor(t.name.clone(), t.ty, &t.dims, file.tensor_bytes(t))
                .unwrap();
        }
        w.to_bytes().unwrap()
    }

    /// The policy `vla::models::from_gguf` makes of [`Self::bytes`].
    pub fn load(&self, opts: &RuntimeOptions) -> vla::Result<Box<dyn Policy>> {
        vla::models::from_gguf(GgufFile::from_bytes(self.bytes())?, opts)
    }

    /// The cpu reference.
    pub fn cpu(&self) -> Box<dyn Policy> {
        self.load(&RuntimeOptions::default())
            .unwrap_or_else(|e| panic!("{}: load on cpu: {e}", self.name))
    }

    /// The GGUF's `<arch>.<key>` entry, e.g. `vocab_size`.
    pub fn meta(&self, key: &str) -> usize {
        let file = GgufFile::from_bytes(self.bytes()).unwrap();
        let key = format!("{}.{key}", file.architecture().unwrap());
        let v = file.get_u64(&key);
        v.unwrap_or_else(|e| panic!("{}: {key}: {e}", self.name)) as usize
    }
}

impl ArchCase {
    /// [`observation`] with the token ids the arch takes ([`Shape::ids`]).
    pub fn observation(&self, info: &PolicyInfo, seed: u64) -> Observation {
        let mut o = observation(info, seed);
        o.tokens = o.tokens.map(|t| self.shape.ids(t));
        o
    }
}

/// A valid observation for `info`, varied by `seed`: camera views of odd, non-square sizes
/// other than the model's (resize-with-pad, up and down; each camera's own size where the
/// model takes only that), five token ids in 1..200 (which every case's vocabulary holds),
/// the real state and explicit noise.
pub fn observation(info: &PolicyInfo, seed: u64) -> Observation {
    let (h, w) = (info.image_height, info.image_width);
    let fixed = (!info.image_sizes.is_empty()).then_some(&info.image_sizes);
    let images = (0..info.n_images)
        .map(|v| match (fixed, v % 2) {
            // cameras that take their own size only (Octo)
            (Some(sizes), _) => image(sizes[v][0], sizes[v][1], seed * 8 + v as u64),
            (None, 0) => image(
                (h * 3 / 4 + 2 * v) | 1,
                (w * 5 / 4) | 1,
                seed * 8 + v as u64,
            ),
            (None, _) => image(
                (h * 9 / 8 + 2 * v) | 1,
                (w * 3 / 4) | 1,
                seed * 8 + v as u64,
            ),
        })
        .collect();
    let state = (0..info.state_dim)
        .map(|i| ((i as u64 * 7 + seed) % 11) as f32 * 0.3 - 1.5)
        .collect();
    let tokens = (0..5u64)
        .map(|i| 1 + ((seed * 53 + i * 37) % 199) as i32)
        .collect();
    Observation {
        images,
        state,
        prompt: None,
        tokens: Some(tokens),
        noise: Some(gaussian_noise(
            info.noise_dims().iter().product(),
            seed + 42,
        )),
        token_mask: None,
    }
}

/// An `h x w` RGB u8 image, a pattern drawn from `k`.
pub fn image(h: usize, w: usize, k: u64) -> Image {
    Image {
        height: h,
        width: w,
        data: ImageData::RgbU8(
            (0..(h * w * 3) as u64)
                .map(|i| ((i * 37 + k * 11) % 251) as u8)
                .collect(),
        ),
    }
}
