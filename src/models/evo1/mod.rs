//! Evo-1 (lerobot 0.6.1 `policies.evo1`, MINT-SJTU/Evo-1): InternVL3-1B's InternViT-300M
//! (class token, LayerScale) per camera, pixel-shuffled and projected into Qwen2.5-0.5B cut
//! to its first layers; the final-normed features of every prompt row plus one state row
//! form the context of a cross-attention-only flow head ([`crate::modules::evo1_head`]) that
//! decodes the whole chunk from one pooled vector. Uniform initial noise, min/max state and
//! actions padded to `max_*_dim`.
//!
//! The prompt is `Image-{v}: <img>{<IMG_CONTEXT> x n}</img>\n` for each of `max_views`
//! views, then the instruction (stripped); no chat template. Views past the request's
//! cameras keep their prompt rows, which are hidden from the language model and the head
//! (the reference runs a blank image through the tower for them, which nothing then reads).
//! Under the [`FlowPolicy`] driver: `vision` (the tower per camera), `prefill` (the language
//! model and the head's keys and values over the context) and `denoise`.

use super::common::{statistics, ActionIo, NoiseDraw};
use super::flow::{FlowArch, FlowPolicy, FlowSpec, GraphFn, PrefixLayout, RequestInputs, VALID};
use super::prefix::state_input;
use super::prompt::PromptIds;
use crate::config::limits::MAX_IMAGES;
use crate::config::{self, bounded, first_failing, Keys, Section};
use crate::gguf::{GgufFile, GgufWriter};
use crate::layers::GatedActivation;
use crate::modules::decoder::{DecoderConfig, LmConfig};
use crate::modules::evo1_head::{time_one_hot, Evo1HeadConfig, SCHEDULE};
use crate::modules::flow::names;
use crate::modules::vision::{Connector, TowerStyle, VisionConfig};
use crate::preprocess::{CameraInput, PadAlign, PixelMap, Resize};
use crate::{Result, Tensor};

pub const ARCH: &str = "evo1";

pub type Evo1 = FlowPolicy<Evo1Config>;

/// InternVL's connector: pixel shuffle by 2 (`downsample_ratio` 0.5), then LayerNorm (torch's
/// default epsilon), Linear, GELU, Linear.
pub const CONNECTOR: Connector = Connector::Mlp {
    pixel_shuffle: 2,
    ln_eps: 1e-5,
};

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Evo1Config {
    /// [`TowerStyle::InternVit`].
    pub vision: VisionConfig,
    pub lm: LmConfig,
    /// Qwen2: q/k/v biases, no QK-norm, SwiGLU.
    pub attn: DecoderConfig,
    pub head: Evo1HeadConfig,
    /// `n_images` cameras per request; `tokenizer_max_length` bounds the instruction (lerobot's
    /// `max_text_length` less the prompt's image blocks: the reference cuts it there).
    pub io: ActionIo,
    /// Views in the prompt (key `max_views`, at least `n_images`).
    pub max_views: usize,
    /// `<IMG_CONTEXT>` (key `image_token_id`).
    pub image_token: usize,
    /// The ids before the instruction (every view's block) and after it (none in the
    /// reference); in vla.cpp's files, none: a request's ids are the whole sequence.
    pub prompt: PromptIds,
    /// Without a template: the ids around each view's image tokens that vla.cpp puts first
    /// for a request without image slots (its keys `img_start_token_id`, `img_end_token_id`).
    pub view_marks: [u32; 2],
}

impl Section for Evo1Config {
    fn keys(&mut self, k: &mut dyn Keys) -> Result<()> {
        self.vision.keys(k)?;
        self.lm.keys(k)?;
        self.attn.keys(k)?;
        self.head.keys(k)?;
        self.io.keys(k)?;
        k.usize("max_views", &mut self.max_views)?;
        k.usize("image_token_id", &mut self.image_token)
    }

    fn check(&self) -> std::result::Result<(), String> {
        self.vision.check()?;
        self.lm.check()?;
        self.attn.check()?;
        self.head.check()?;
        self.io.check()?;
        self.io.check_vocab(self.lm.vocab_size)?;
        bounded("max_views", self.max_views, 1, MAX_IMAGES)?;
        let (io, v) = (&self.io, &self.vision);
        let image = (self.image_token as u32, self.n_img_tokens(), self.max_views);
        let vocab = self.lm.vocab_size;
        self.prompt.check(image, vocab, io.tokenizer_max_length)?;
        first_failing(&[
            (
                v.patches_per_side().is_multiple_of(2),
                "patches per side must be even (the pixel shuffle folds 2 x 2 patches)",
            ),
            (
                io.n_images <= self.max_views,
                "n_images must be at most max_views",
            ),
            (
                self.image_token < vocab,
                "image_token_id must be below vocab_size",
            ),
            (
                self.head.embed == self.lm.hidden,
                "head_embed must equal the language model's width (hidden)",
            ),
            (
                self.attn.q_heads * self.attn.head_dim == self.lm.hidden,
                "n_q_heads x head_dim must equal hidden",
            ),
        ])
    }
}

impl Evo1Config {
    /// Image tokens per view.
    pub fn n_img_tokens(&self) -> usize {
        CONNECTOR.n_tokens(self.vision.n_patches())
    }

    /// The language model's sequence: the prompt around the longest instruction.
    pub fn seq_len(&self) -> usize {
        self.prompt.seq_len(self.io.tokenizer_max_length)
    }

    /// Where each view's image tokens start (all `max_views`).
    pub fn image_starts(&self) -> Vec<usize> {
        let n = self.n_img_tokens();
        let starts = self
            .prompt
            .image_starts(self.image_token as u32, n, self.max_views);
        starts.unwrap_or_default()
    }

    /// Real action dimensions as a `[max_action_dim]` 0/1 mask.
    pub fn action_mask(&self) -> Vec<f32> {
        let (real, max) = (self.io.action_dim, self.io.max_action_dim);
        (0..max).map(|i| f32::from(u8::from(i < real))).collect()
    }
}

impl FlowArch for Evo1Config {
    fn arch(&self) -> &'static str {
        ARCH
    }

    fn io_mut(&mut self) -> &mut ActionIo {
        &mut self.io
    }

    /// Reads and checks the `evo1.*` metadata (see docs/GGUF.md).
    fn read(file: &GgufFile) -> Result<Self> {
        let fixed = Evo1Config {
            vision: VisionConfig {
                style: TowerStyle::InternVit,
                ..Default::default()
            },
            attn: DecoderConfig {
                ffn: GatedActivation::Silu,
                qkv_bias: true,
                ..Default::default()
            },
            prompt: PromptIds::read_or_client(file, ARCH)?,
            ..Default::default()
        };
        let mut cfg = config::read(file, ARCH, fixed)?;
        if cfg.prompt.from_client {
            let id = |k: &str| -> Result<u32> {
                let v = file.get_u64(&format!("{ARCH}.{k}"))?;
                u32::try_from(v).map_err(|_| {
                    crate::Error::InvalidArgument(format!("{ARCH}.{k} = {v} is out of range"))
                })
            };
            cfg.view_marks = [id("img_start_token_id")?, id("img_end_token_id")?];
        }
        Ok(cfg)
    }

    fn spec(&self) -> FlowSpec {
        let camera = CameraInput::square(
            self.vision.image_size,
            Resize::StretchBicubicRounded,
            0.0,
            PadAlign::Center,
            PixelMap::IMAGENET,
        );
        FlowSpec {
            truncates_prompt: true,
            // lerobot's generic MIN_MAX processor (a zero range counts as 1e-8), uniform
            // noise as Evo-1's flow head draws it
            lerobot_min_max: true,
            noise: NoiseDraw::Uniform,
            ..FlowSpec::new(self.io.clone(), self.lm.vocab_size, camera, SCHEDULE)
        }
    }

    const GRAPHS: [GraphFn<Self>; 3] = [graphs::vision, graphs::prefill, graphs::denoise];

    fn whole_sequence(&self) -> bool {
        self.prompt.from_client
    }

    /// Without a template, the client's sequence with its image slots (vla.cpp's rule: none
    /// given, every view's `<img>`, image tokens and `</img>` go first).
    fn whole_prompt(&self, ids: Vec<u32>) -> Result<Vec<u32>> {
        if !self.prompt.from_client {
            return Ok(ids);
        }
        let [open, close] = self.view_marks;
        let views = (self.io.n_images, self.n_img_tokens());
        PromptIds::client_sequence(ids, self.image_token as u32, views, (&[open], &[close]))
    }

    /// The instruction without surrounding whitespace (Python's `str.strip`).
    fn prompt_text(&self, task: &str, _state: &[f32]) -> String {
        task.trim().to_owned()
    }

    /// `before ++ text ++ after`, right-padded; the absent views' image rows and the
    /// padding are not valid. The state goes to the prefill (it is a context row).
    fn request_inputs(
        &self,
        tokens: Vec<f32>,
        n_tokens: usize,
        state: &[f32],
    ) -> Result<RequestInputs> {
        let (len, pad) = (self.seq_len(), self.io.pad_token_id);
        let (seq, n_real) = self.prompt.sequence(&tokens[..n_tokens], len, pad);
        let mut layout = PrefixLayout::causal(len, n_real);
        let n = self.n_img_tokens();
        for &start in self.image_starts().iter().skip(self.io.n_images) {
            layout.valid[start..start + n].fill(false);
        }
        let mut prefix = layout.into_inputs(seq.clone())?;
        prefix.retain(|(name, _)| name == VALID || name == names::TOKENS);
        if self.prompt.from_client {
            let total = self.io.n_images * n;
            let image = self.image_token as u32;
            prefix.extend(PromptIds::place_inputs(&seq, image, total)?);
        }
        prefix.push(state_input(state)?);
        Ok(RequestInputs {
            prefix,
            suffix: Vec::new(),
        })
    }

    /// The time table's row, one-hot (the schedule's model time is the row index).
    fn time_input(&self, t: f32) -> Result<Tensor<'static>> {
        time_one_hot(t as usize)
    }

    /// Min/max for the state and the actions (lerobot's MIN_MAX).
    fn statistics(&self) -> Vec<(String, Vec<usize>)> {
        statistics(&self.io, ["min", "max"], ["min", "max"])
    }

    fn write(&self, w: &mut GgufWriter) -> Result<()> {
        w.add_metadata("general.architecture", ARCH)?;
        self.prompt.write(w, ARCH)?;
        config::write(self, w, ARCH)
    }
}

/// The prompt before the instruction for `views` views of `n` image tokens, as text (the
/// reference's `Image-{v}: <img>...</img>\n` blocks); `context` is the `<IMG_CONTEXT>` token.
pub fn prompt_prefix(views: usize, n: usize, context: &str) -> String {
    (1..=views)
        .map(|v| format!("Image-{v}: <img>{}</img>\n", context.repeat(n)))
        .collect()
}

/// Graph builders, shared by the policy and by tests that inspect intermediate tensors.
pub mod graphs;
