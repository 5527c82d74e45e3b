//! What a server or benchmark sees of a loaded model: a [`Policy`] answers [`Policy::info`]
//! and turns one observation into one action chunk. Every arch implements it; nothing
//! outside `models` needs to know which arch it is talking to.

pub use crate::backend::{KernelTime, RunCounters};
use crate::gguf::GgmlType;
use crate::Result;

/// Pixels of one camera view, HWC, RGB.
#[derive(Clone, Debug, PartialEq)]
pub enum ImageData {
    /// `height * width * 3` bytes.
    RgbU8(Vec<u8>),
    /// `height * width * 3` floats in [0, 1].
    RgbF32(Vec<f32>),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Image {
    pub height: usize,
    pub width: usize,
    pub data: ImageData,
}

/// One observation. `state` holds the robot state, unnormalised, either `real_state_dim`
/// values or zero-padded to `max_state_dim`. The instruction is given as text (`prompt`,
/// tokenized with the GGUF's tokenizer) or as token ids already tokenized by the client;
/// exactly one of the two. `noise` (`chunk_size * max_action_dim`, row-major) replaces the
/// Gaussian draw, for reproducible runs. `token_mask` (vla.cpp's `attention_mask` with zeros
/// among the ids) hides positions of the whole sequence from the model; only models whose
/// requests bring the whole sequence take it (vla.cpp's files without a prompt template).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Observation {
    pub images: Vec<Image>,
    pub state: Vec<f32>,
    pub prompt: Option<String>,
    pub tokens: Option<Vec<i32>>,
    pub noise: Option<Vec<f32>>,
    pub token_mask: Option<Vec<bool>>,
}

/// Milliseconds spent per stage of one predict call. A stage time is `None` where the
/// backend ran the whole predict in one submission and cannot time its stages apart (no
/// timestamp queries, or one ggml graph compute).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StageTimes {
    pub vision_ms: Option<f32>,
    pub prefill_ms: Option<f32>,
    pub denoise_ms: Option<f32>,
    pub total_ms: f32,
}

/// An action chunk, unnormalised as the reference does it: `chunk_size x action_dim`,
/// row-major, `action_dim` = the policy's real action dimension.
#[derive(Clone, Debug, PartialEq)]
pub struct ActionChunk {
    pub actions: Vec<f32>,
    pub chunk_size: usize,
    pub action_dim: usize,
    pub times: StageTimes,
    /// What this predict moved between host and backend and how often it waited.
    pub counters: RunCounters,
    /// What the client should know of how its request was read (e.g. a prompt cut where the
    /// reference cuts it); also logged.
    pub warnings: Vec<String>,
    /// The instruction's token ids and the rows the compiled graphs gave it.
    pub instruction: InstructionRows,
    /// How many requests the run that made this chunk served: 1 alone, more in a batched
    /// run ([`Policy::predict_batch`]), whose times and counters are this chunk's too.
    pub batch: usize,
}

/// Graphs are compiled for instruction lengths in buckets: `rows` is the bucket `tokens` ids
/// fell in (the rest masked padding), so a prefill's cost follows the prompt's length.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InstructionRows {
    pub tokens: usize,
    pub rows: usize,
}

/// What a client may ask about a loaded policy.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicyInfo {
    pub arch: String,
    /// Camera views a request must carry.
    pub n_images: usize,
    /// Steps of history a request carries (Octo's window; 1 elsewhere): `n_images` and the
    /// state are that many steps' views and states, oldest first, and a request may carry
    /// only the last steps' (the earlier then padding, as the reference's history wrapper
    /// pads an episode's first steps).
    pub window: usize,
    /// The model's own input size; requests may send any size up to the protocol limit.
    pub image_height: usize,
    pub image_width: usize,
    pub max_state_dim: usize,
    pub state_dim: usize,
    /// The actions the model integrates per chunk (the rows of a request's noise).
    pub chunk_size: usize,
    /// The rows a predict returns: the first `action_rows` of `chunk_size` (GR00T N1.7
    /// integrates 40 and returns 16; elsewhere all).
    pub action_rows: usize,
    pub max_action_dim: usize,
    pub action_dim: usize,
    pub num_steps: usize,
    pub param_count: u64,
    /// e.g. `"f32"`, or `"bf16 (312 tensors), f32 (98)"`.
    pub weight_dtypes: String,
    pub backend: String,
    /// Bytes the backend holds for weights plus peak activations.
    pub memory_bytes: u64,
    /// Of [`Self::memory_bytes`], the peak activations' (the keys and values a prefill
    /// leaves for the denoise steps included); the rest is weights.
    pub activation_bytes: u64,
    /// Of [`Self::activation_bytes`], the keys and values (the context) a prefill hands the
    /// denoise steps, in the activations' type; 0 for a one-pass policy.
    pub kv_bytes: u64,
    /// Of [`Self::activation_bytes`], the backend's scratch buffers.
    pub scratch_bytes: u64,
    /// Floating-point operations of one predict per stage (`vision`, `prefill`, `denoise`):
    /// matrix products and attention, 2 per multiply-add ([`crate::graph::Graph::flops_by_stage`]).
    pub stage_flops: Vec<(String, u64)>,
    /// The active embodiment, `tag (id)`, for policies with embodiment-specific weights.
    pub embodiment: Option<String>,
    /// The reference's camera feature names (`observation.images.<name>`), in the order a
    /// request's images go, where the file keeps them (`vla.camera_names`); else empty.
    pub camera_names: Vec<String>,
    /// How many of a chunk's rows the reference executes before it predicts again (ACT's
    /// `n_action_steps`), where the model file says; the server returns every row either way.
    pub n_action_steps: Option<usize>,
    /// Whether the model reads a request's instruction (ACT reads none: a prompt or token
    /// ids are not used, and the reply says so).
    pub reads_instruction: bool,
    /// Token ids a request's own ids must hold, as one run in this order: `(id, count)`
    /// (BitVLA: every camera's image placeholder, then the proprio one); empty where the
    /// model places its inputs itself.
    pub placeholders: Vec<(u32, usize)>,
    /// The ids a request's own ids must start and end with, where the model asks for its
    /// tokenizer's whole encoding (TurboVLA: BERT's `[CLS]` and `[SEP]`).
    pub wrap_ids: Option<[u32; 2]>,
    /// The shape of a request's noise where it is not `[chunk_size, max_action_dim]`
    /// (Octo's DDPM draws a fresh noise each step: `[steps + 1, horizon * dim]`).
    pub noise_shape: Option<[usize; 2]>,
    /// Each image's own size `[height, width]` where the cameras differ and the model takes
    /// only those (Octo: primary 256, wrist 128); empty where every camera is
    /// `image_height x image_width` or any size is resized.
    pub image_sizes: Vec<[usize; 2]>,
}

impl PolicyInfo {
    /// Each image's size `[height, width]`, in request order.
    pub fn frame_sizes(&self) -> Vec<[usize; 2]> {
        match self.image_sizes.is_empty() {
            true => vec![[self.image_height, self.image_width]; self.n_images],
            false => self.image_sizes.clone(),
        }
    }

    /// The shape of a request's noise: `[rows, values a row]`.
    pub fn noise_dims(&self) -> [usize; 2] {
        self.noise_shape
            .unwrap_or([self.chunk_size, self.max_action_dim])
    }

    /// The chunk's shape for people: `"50 x 6"`, or `"40 x 7 (first 16 returned)"`.
    pub fn chunk_text(&self) -> String {
        let shape = format!("{} x {}", self.chunk_size, self.action_dim);
        match self.action_rows < self.chunk_size {
            true => format!("{shape} (first {} returned)", self.action_rows),
            false => shape,
        }
    }
}

pub trait Policy: Send {
    fn info(&self) -> &PolicyInfo;
    fn predict(&mut self, obs: &Observation) -> Result<ActionChunk>;
    /// Several observations (one per robot, say) at once: a chunk or an error for each, in
    /// order, each chunk what [`Policy::predict`] gives that observation alone. Requests that
    /// one compiled graph serves (the same camera frame sizes, instruction bucket, ...) run
    /// together as one batched graph, compiled on first sight of that batch size; the rest
    /// run group by group. A request the model refuses gets its error; the others their
    /// chunks. Each chunk's times are its group's run.
    fn predict_batch(&mut self, batch: &[Observation]) -> Vec<Result<ActionChunk>> {
        batch.iter().map(|obs| self.predict(obs)).collect()
    }
    /// Every kernel dispatch of the last predict with its device time, where the backend
    /// was opened to profile ([`crate::backend::Executable::profile`]).
    fn profile(&self) -> Option<Vec<KernelTime>> {
        None
    }
}

/// Run-time settings, from the command line or a `--config` file's "runtime" object.
#[derive(Clone, Debug, PartialEq)]
pub struct RuntimeOptions {
    /// A name accepted by [`crate::backend::open`].
    pub backend: String,
    /// Denoising steps; `None` keeps the model's own.
    pub num_steps: Option<usize>,
    /// Which normalisation statistics to use when the GGUF carries several.
    pub embodiment: Option<String>,
    /// Normalisation statistics for a model file that carries none: vla.cpp's GR00T N1.5
    /// files (the `dataset_statistics.json` its converter writes beside the GGUF) and
    /// VLA-JEPA files (the lerobot checkpoint folder they were converted from).
    pub statistics: Option<std::path::PathBuf>,
    /// Re-encode the matmul weights to this float type at load (F32, F16 or BF16);
    /// `None` runs them as stored.
    pub weight_dtype: Option<GgmlType>,
    /// Attention kernel choice on wgpu; `None` lets the backend pick by sequence length.
    pub flash_attn: Option<bool>,
    /// How activations are stored between kernels (16-bit on the wgpu backends only).
    pub act_dtype: crate::backend::ActDtype,
    /// CPU threads for ggml-cpu.
    pub threads: Option<usize>,
    /// Flow policies: run vision, prefill and each denoise step as separate backend runs
    /// with the host between them (image tokens, keys and values and x cross the bus),
    /// instead of one run of the whole predict. For reference and per-stage timing.
    pub stepwise: bool,
    /// Batched predicts ([`Policy::predict_batch`]): multiply the requests' rows by each
    /// weight in one product (`true`), or run every op on each request's rows as a predict
    /// alone does (`false`: each chunk bit for bit the unbatched one). `None`: stacked on
    /// every backend but `cpu`, which is compute-bound at one request.
    pub stack_batch: Option<bool>,
}

impl Default for RuntimeOptions {
    fn default() -> Self {
        RuntimeOptions {
            backend: "cpu".into(),
            num_steps: None,
            embodiment: None,
            statistics: None,
            weight_dtype: None,
            flash_attn: None,
            act_dtype: Default::default(),
            threads: None,
            stepwise: false,
            stack_batch: None,
        }
    }
}
