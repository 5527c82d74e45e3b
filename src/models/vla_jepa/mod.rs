//! VLA-JEPA (lerobot 0.6.1 `policies.vla_jepa`, ginwind/VLA-JEPA): the Qwen3-VL backbone run
//! over a prompt that ends in 32 `<|embodied_action|>` tokens, whose last-layer hidden
//! states (before the final norm) condition a flow-matching DiT-B head: [state token, 32
//! learned future tokens, action tokens + position rows], even blocks cross-attending to the
//! embodied states, plain `nn.Linear` encoders and decoder. The world model (V-JEPA 2 and its
//! predictor) is training-only and not stored.
//!
//! The client sends the instruction; the model builds `Your task is {instruction}. Infer the
//! temporal dynamics from frames {action tokens} and produce the corresponding policy actions
//! {embodied tokens}.` inside Qwen3-VL's chat prompt. Under the [`FlowPolicy`] driver: `vision`
//! (the tower per camera), `prefill` (the language model, the embodied rows gathered, the
//! DiT's cross keys and values) and `denoise`.

use super::common::statistics;
use super::common::ActionIo;
use super::flow::{Clipping, FlowArch, FlowPolicy, FlowSpec, GraphFn, GripperSnap, PrefixLayout};
use super::flow::{RequestInputs, VALID};
use super::prefix::state_input;
use super::prompt::PromptIds;
use crate::config::{self, bounded, first_failing, read_u32s, write_u32s, Keys, Section};
use crate::gguf::{GgufFile, GgufWriter};
use crate::layers::GatedActivation;
use crate::modules::decoder::{DecoderConfig, LmConfig};
use crate::modules::dit::BlockStack;
use crate::modules::flow::names;
use crate::modules::flow::Schedule;
use crate::modules::gr00t_head::{time_rows, ChunkShape, HeadConfig};
use crate::modules::qwen_text::{client_spans, mrope_inputs, ImageSpan, MropeConfig};
use crate::modules::qwen_vision::{QwenVisionConfig, DEEPSTACK_KEY};
use crate::preprocess::{CameraInput, PadAlign, PixelMap, Resize};
use crate::{Error, Result, Tensor};

pub const ARCH: &str = "vla_jepa";

pub type VlaJepa = FlowPolicy<VlaJepaConfig>;

/// The text around the instruction in the prompt's text segment (string keys
/// `prompt_text_before`, `prompt_text_after`).
const KEY_TEXT_BEFORE: &str = "prompt_text_before";
const KEY_TEXT_AFTER: &str = "prompt_text_after";

/// lerobot's instruction when a request has none.
const DEFAULT_TASK: &str = "Execute the robot action.";

/// What happens to the frames and the chunk outside the graphs. Keys: `area_height`,
/// `area_width` (the `resize_images_to` area step; 0: none), `clip_actions`,
/// `gripper_pre_snap`, `gripper_binarize` (0 or 1), `gripper_dim`, `gripper_threshold`,
/// `image_mean_{r,g,b}` and `image_std_{r,g,b}` (the Qwen3-VL processor's normalisation;
/// 0.5 when absent, files written before them).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct IoSteps {
    pub area: (usize, usize),
    /// The processor's `image_mean` / `image_std` (0.5 / 0.5: [-1, 1]).
    pub pixels: PixelMap,
    pub clip_actions: bool,
    pub pre_snap: bool,
    pub binarize: bool,
    pub gripper_dim: usize,
    pub gripper_threshold: f32,
}

impl Section for IoSteps {
    fn keys(&mut self, k: &mut dyn Keys) -> Result<()> {
        k.usize("area_height", &mut self.area.0)?;
        k.usize("area_width", &mut self.area.1)?;
        let mut flags = [self.clip_actions, self.pre_snap, self.binarize].map(usize::from);
        for (key, v) in ["clip_actions", "gripper_pre_snap", "gripper_binarize"]
            .into_iter()
            .zip(&mut flags)
        {
            k.usize(key, v)?;
            if *v > 1 {
                return Err(Error::InvalidArgument(format!(
                    "{key} = {v}: expected 0 or 1"
                )));
            }
        }
        [self.clip_actions, self.pre_snap, self.binarize] = flags.map(|v| v == 1);
        k.usize("gripper_dim", &mut self.gripper_dim)?;
        k.f32("gripper_threshold", &mut self.gripper_threshold)?;
        let (mut mean, mut std) = self.pixels.mean_std();
        for (c, name) in ["r", "g", "b"].into_iter().enumerate() {
            k.f32_or(&format!("image_mean_{name}"), &mut mean[c], 0.5)?;
            k.f32_or(&format!("image_std_{name}"), &mut std[c], 0.5)?;
        }
        self.pixels = PixelMap::from_mean_std(mean, std);
        Ok(())
    }

    fn check(&self) -> std::result::Result<(), String> {
        bounded("area_height", self.area.0, 0, 1 << 14)?;
        bounded("area_width", self.area.1, 0, 1 << 14)?;
        first_failing(&[
            (
                (self.area.0 == 0) == (self.area.1 == 0),
                "area_height and area_width must both be 0 or both positive",
            ),
            (
                self.gripper_threshold.is_finite(),
                "gripper_threshold must be finite",
            ),
            (
                {
                    let (mean, std) = self.pixels.mean_std();
                    mean.iter().all(|m| m.is_finite())
                        && std.iter().all(|s| s.is_finite() && *s > 0.0)
                },
                "image_mean must be finite and image_std positive",
            ),
        ])
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct VlaJepaConfig {
    pub vision: QwenVisionConfig,
    pub lm: LmConfig,
    pub attn: DecoderConfig,
    pub mrope: MropeConfig,
    pub dit: BlockStack,
    /// `future_tokens` is the number of embodied tokens (their hidden states condition the
    /// DiT, and as many learned future tokens precede the actions).
    pub head: HeadConfig,
    /// `max_state_dim` = `state_dim`, `max_action_dim` = `action_dim` (nothing is padded);
    /// `tokenizer_max_length` bounds the prompt's text segment.
    pub io: ActionIo,
    pub steps: IoSteps,
    /// `<|embodied_action|>` (key `embodied_token_id`).
    pub embodied_token: usize,
    /// The ids before the text segment (with each camera's image tokens) and after it (from
    /// the first action token to the generation prompt).
    pub prompt: PromptIds,
    pub text_before: String,
    pub text_after: String,
}

impl Section for VlaJepaConfig {
    fn keys(&mut self, k: &mut dyn Keys) -> Result<()> {
        self.vision.keys(k)?;
        self.lm.keys(k)?;
        self.attn.keys(k)?;
        self.mrope.keys(k)?;
        self.dit.keys(k)?;
        self.head.keys(k)?;
        self.io.keys(k)?;
        self.steps.keys(k)?;
        k.usize("embodied_token_id", &mut self.embodied_token)
    }

    fn check(&self) -> std::result::Result<(), String> {
        self.vision.check()?;
        self.lm.check()?;
        self.attn.check()?;
        self.mrope.check()?;
        self.dit.check()?;
        self.head.check()?;
        self.io.check()?;
        self.io.check_vocab(self.lm.vocab_size)?;
        self.steps.check()?;
        let (h, io) = (&self.head, &self.io);
        let image = (h.image_token as u32, self.vision.n_tokens(), io.n_images);
        let text = io.tokenizer_max_length;
        let vocab = self.lm.vocab_size;
        self.prompt.check(image, vocab, text)?;
        first_failing(&[
            (
                self.prompt.from_client || self.embodied_offset().is_some(),
                "prompt_after_ids must hold num_target_vision_tokens embodied tokens in one run",
            ),
            (
                self.vision.out == self.lm.hidden,
                "the tower's output width must be the language model's (hidden)",
            ),
            (
                self.vision.deepstack.len() <= self.lm.n_layers,
                "more deepstack taps than language-model layers",
            ),
            (
                self.mrope.fits(self.attn.head_dim),
                "the mrope sections must sum to head_dim / 2",
            ),
            (
                self.dit.width() == h.embed,
                "the DiT width (dit_heads x dit_head_dim) must equal input_embedding_dim",
            ),
            (
                io.chunk_size <= h.max_seq_len,
                "chunk_size must be at most max_seq_len",
            ),
            (
                io.state_dim == io.max_state_dim && io.action_dim == io.max_action_dim,
                "states and actions are not padded: max dims must equal the real ones",
            ),
            (
                h.image_token < vocab && self.embodied_token < vocab,
                "image_token_index and embodied_token_id must be below vocab_size",
            ),
        ])
    }
}

impl VlaJepaConfig {
    pub fn n_img_tokens(&self) -> usize {
        self.vision.n_tokens()
    }

    /// Embodied tokens (and learned future tokens).
    pub fn n_embodied(&self) -> usize {
        self.head.future_tokens
    }

    pub fn chunk_shape(&self) -> ChunkShape {
        ChunkShape {
            chunk: self.io.chunk_size,
            max_state_dim: self.io.max_state_dim,
            max_action_dim: self.io.max_action_dim,
        }
    }

    /// The language model's sequence: the prompt around the longest text segment.
    pub fn seq_len(&self) -> usize {
        self.prompt.seq_len(self.io.tokenizer_max_length)
    }

    /// Where the run of embodied tokens starts in `prompt.after`, if it is one run of
    /// [`Self::n_embodied`].
    pub fn embodied_offset(&self) -> Option<usize> {
        let id = self.embodied_token as u32;
        let after = &self.prompt.after;
        let start = after.iter().position(|&t| t == id)?;
        let n = after.iter().filter(|&&t| t == id).count();
        let run = after[start..].iter().take_while(|&&t| t == id).count();
        (n == run && n == self.n_embodied() && n > 0).then_some(start)
    }

    pub fn image_spans(&self) -> Vec<ImageSpan> {
        let (image, v) = (self.head.image_token, &self.vision);
        self.prompt.image_spans(image, v, self.io.n_images)
    }

    pub fn layout(&self, n_real: usize) -> PrefixLayout {
        PrefixLayout::causal(self.seq_len(), n_real)
    }
}

impl FlowArch for VlaJepaConfig {
    fn arch(&self) -> &'static str {
        ARCH
    }

    fn io_mut(&mut self) -> &mut ActionIo {
        &mut self.io
    }

    /// Reads and checks the `vla_jepa.*` metadata (see docs/GGUF.md).
    fn read(file: &GgufFile) -> Result<Self> {
        let prompt = PromptIds::read_or_client(file, ARCH)?;
        // no template (vla.cpp's files): no text around the instruction either
        let text = |key: &str| match prompt.from_client {
            true => Ok(String::new()),
            false => file.get_str(&format!("{ARCH}.{key}")).map(str::to_owned),
        };
        let deepstack = read_u32s(file, ARCH, DEEPSTACK_KEY)?;
        let fixed = VlaJepaConfig {
            vision: QwenVisionConfig {
                out: config::Meta::new(file, ARCH).usize("hidden")?,
                deepstack: deepstack.into_iter().map(|l| l as usize).collect(),
                ..Default::default()
            },
            attn: DecoderConfig {
                ffn: GatedActivation::Silu,
                qk_norm: true,
                ..Default::default()
            },
            dit: BlockStack {
                name: "dit",
                ..Default::default()
            },
            text_before: text(KEY_TEXT_BEFORE)?,
            text_after: text(KEY_TEXT_AFTER)?,
            prompt,
            ..Default::default()
        };
        config::read(file, ARCH, fixed)
    }

    fn spec(&self) -> FlowSpec {
        let s = &self.steps;
        let area = (s.area.0 > 0).then_some(s.area);
        let gripper = (s.pre_snap || s.binarize).then_some(GripperSnap {
            dim: s.gripper_dim,
            threshold: s.gripper_threshold,
            pre_snap: s.pre_snap,
            binarize: s.binarize,
        });
        let camera = CameraInput {
            height: self.vision.image_h,
            width: self.vision.image_w,
            resize: Resize::AreaThenBicubicF32 { area },
            pad: 0.0,
            align: PadAlign::Center,
            pixels: s.pixels,
        };
        let schedule = Schedule::ZeroToOneBucketed {
            buckets: self.head.buckets,
        };
        FlowSpec {
            clip: Clipping {
                state: false,
                actions: s.clip_actions,
            },
            gripper,
            ..FlowSpec::new(self.io.clone(), self.lm.vocab_size, camera, schedule)
        }
    }

    const GRAPHS: [GraphFn<Self>; 3] = [graphs::vision, graphs::prefill, graphs::denoise];

    /// lerobot's task for a batch without one ("" stays "": lerobot keeps it).
    fn missing_task(&self) -> &'static str {
        DEFAULT_TASK
    }

    /// The prompt's text segment up to the first action token: the template's text around
    /// the instruction as given (no normalisation).
    fn prompt_text(&self, task: &str, _state: &[f32]) -> String {
        format!("{}{task}{}", self.text_before, self.text_after)
    }

    fn whole_sequence(&self) -> bool {
        self.prompt.from_client
    }

    /// Without a template, the client's sequence with its image slots, or with every
    /// camera's first (vla.cpp's rule).
    fn whole_prompt(&self, ids: Vec<u32>) -> Result<Vec<u32>> {
        let views = (self.io.n_images, self.n_img_tokens());
        self.prompt
            .request_ids(ids, self.head.image_token as u32, views)
    }

    /// `before ++ text ++ after`, right-padded, and the rows of the embodied tokens. Without a
    /// template, the client's sequence: where it places the image tokens, their positions'
    /// rotary tables, and its embodied tokens wherever they are (exactly as many as the head
    /// reads).
    fn request_inputs(
        &self,
        tokens: Vec<f32>,
        n_tokens: usize,
        state: &[f32],
    ) -> Result<RequestInputs> {
        let (len, pad) = (self.seq_len(), self.io.pad_token_id);
        let (seq, n_real) = self.prompt.sequence(&tokens[..n_tokens], len, pad);
        let mut prefix = self.layout(n_real).into_inputs(seq.clone())?;
        prefix.retain(|(name, _)| name == VALID || name == names::TOKENS);
        let (n, l) = (self.n_embodied(), self.seq_len());
        let rows: Vec<usize> = match self.prompt.from_client {
            true => {
                let image = self.head.image_token as u32;
                let total = self.io.n_images * self.n_img_tokens();
                prefix.extend(PromptIds::place_inputs(&seq, image, total)?);
                let (gh, gw) = self.vision.grid();
                let m = self.vision.merge;
                let spans = client_spans(&seq, image, (gh / m, gw / m))?;
                prefix.extend(mrope_inputs(len, &spans, &self.attn, &self.mrope)?);
                let id = self.embodied_token as f32;
                let rows: Vec<usize> = (0..n_real).filter(|&p| seq[p] == id).collect();
                if rows.len() != n {
                    return Err(Error::InvalidArgument(format!(
                        "the token ids hold {} embodied tokens (id {id}); this model reads {n}",
                        rows.len()
                    )));
                }
                rows
            }
            false => {
                let first = self.prompt.before.len() + n_tokens;
                let first = first + self.embodied_offset().unwrap_or(0);
                (first..first + n).collect()
            }
        };
        let mut select = vec![0f32; n * l];
        for (k, &p) in rows.iter().enumerate() {
            select[k * l + p] = 1.0;
        }
        let select = Tensor::from_f32(vec![1, n, l], select)?;
        prefix.push((graphs::EMBODIED_ROWS.into(), select));
        Ok(RequestInputs {
            prefix,
            suffix: vec![state_input(state)?],
        })
    }

    fn time_input(&self, t: f32) -> Result<Tensor<'static>> {
        time_rows(t, self.head.embed, self.io.chunk_size)
    }

    /// Mean/std for the state, min/max for the actions (lerobot's normalisation modes).
    fn statistics(&self) -> Vec<(String, Vec<usize>)> {
        statistics(&self.io, ["mean", "std"], ["min", "max"])
    }

    fn write(&self, w: &mut GgufWriter) -> Result<()> {
        w.add_metadata("general.architecture", ARCH)?;
        self.prompt.write(w, ARCH)?;
        let deepstack: Vec<u32> = self.vision.deepstack.iter().map(|&l| l as u32).collect();
        write_u32s(w, ARCH, DEEPSTACK_KEY, &deepstack)?;
        w.add_metadata(
            format!("{ARCH}.{KEY_TEXT_BEFORE}"),
            self.text_before.as_str(),
        )?;
        w.add_metadata(format!("{ARCH}.{KEY_TEXT_AFTER}"), self.text_after.as_str())?;
        config::write(self, w, ARCH)
    }
}

/// Graph builders, shared by the policy and by tests that inspect intermediate tensors.
pub mod graphs;
