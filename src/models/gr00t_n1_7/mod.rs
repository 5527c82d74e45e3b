//! GR00T N1.7 (lerobot 0.6.1 `policies.groot`, NVIDIA Isaac-GR00T `Gr00tN1d7`): a Qwen3-VL
//! backbone (the vision tower with deepstack taps, the language model cut to `select_layer`
//! layers, multimodal RoPE; the features are the last kept layer's output before any final
//! norm), then GR00T's flow-matching head as in N1.5 ([`crate::modules::gr00t_head`]) with
//! an AlternateVLDiT: its cross-attending blocks alternate between the prompt's text tokens
//! (block `i` with `i % (2 dit_text_every) == 0`) and its image tokens. No future tokens; 40
//! actions integrated, the first `valid_horizon` returned; states and actions clipped to
//! [-1, 1] around the percentile statistics.
//!
//! Under the [`FlowPolicy`] driver: `vision` (the tower per camera; merged tokens and the
//! deepstack features side by side), `prefill` (the language model over the chat prompt,
//! vlln, the VL self-attention blocks, the DiT's cross keys and values) and `denoise`.

use super::common::statistics;
use super::common::ActionIo;
use super::embodiment::Embodiments;
use super::flow::{
    Clipping, FlowArch, FlowPolicy, FlowSpec, GraphFn, PrefixLayout, RequestInputs, VALID,
};
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
use crate::preprocess::bicubic::FixedPoint;
use crate::preprocess::{CameraInput, PadAlign, PixelMap, Resize};
use crate::{Result, Tensor};

pub const ARCH: &str = "gr00t_n1_7";

/// The policy: GR00T N1.7's config under the flow-matching driver.
pub type Gr00tN17 = FlowPolicy<Gr00tN17Config>;

/// The eval frame transform's settings. Keys: `frame_edge` (the shortest edge, pixels),
/// `frame_crop` (the centre crop's fraction of each side).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FrameConfig {
    pub edge: usize,
    pub crop: f64,
}

impl Section for FrameConfig {
    fn keys(&mut self, k: &mut dyn Keys) -> Result<()> {
        k.usize("frame_edge", &mut self.edge)?;
        k.decimal("frame_crop", &mut self.crop)
    }

    fn check(&self) -> std::result::Result<(), String> {
        bounded("frame_edge", self.edge, 1, 1 << 14)?;
        first_failing(&[(
            self.crop > 0.0 && self.crop <= 1.0,
            "frame_crop must be in (0, 1]",
        )])
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Gr00tN17Config {
    /// `out` is the language model's width; `deepstack` the `vit_deepstack_layers` array.
    pub vision: QwenVisionConfig,
    pub frame: FrameConfig,
    /// The Qwen3-VL text decoder, `n_layers` = the layers the policy reads (`select_layer`).
    pub lm: LmConfig,
    pub attn: DecoderConfig,
    pub mrope: MropeConfig,
    pub vlsa: BlockStack,
    pub dit: BlockStack,
    /// Every `2 * dit_text_every`-th block (from 0) cross-attends to the text tokens, the other
    /// even blocks to the image tokens (`attend_text_every_n_blocks`).
    pub text_every: usize,
    pub head: HeadConfig,
    /// `chunk_size` is the integrated horizon (the noise's rows).
    pub io: ActionIo,
    /// The rows a predict returns (`valid_horizon`).
    pub valid_horizon: usize,
    pub prompt: PromptIds,
    pub embodiments: Embodiments,
}

impl Section for Gr00tN17Config {
    fn keys(&mut self, k: &mut dyn Keys) -> Result<()> {
        self.vision.keys(k)?;
        self.frame.keys(k)?;
        self.lm.keys(k)?;
        self.attn.keys(k)?;
        self.mrope.keys(k)?;
        self.vlsa.keys(k)?;
        self.dit.keys(k)?;
        k.usize("dit_text_every", &mut self.text_every)?;
        self.head.keys(k)?;
        self.io.keys(k)?;
        k.usize("valid_horizon", &mut self.valid_horizon)
    }

    fn check(&self) -> std::result::Result<(), String> {
        self.vision.check()?;
        self.frame.check()?;
        self.lm.check()?;
        self.attn.check()?;
        self.mrope.check()?;
        self.vlsa.check()?;
        self.dit.check()?;
        self.head.check()?;
        self.io.check()?;
        self.io.check_vocab(self.lm.vocab_size)?;
        bounded("dit_text_every", self.text_every, 1, 1 << 10)?;
        bounded("valid_horizon", self.valid_horizon, 1, self.io.chunk_size)?;
        let (h, io) = (&self.head, &self.io);
        let image = (h.image_token as u32, self.vision.n_tokens(), io.n_images);
        let text = io.tokenizer_max_length;
        self.prompt.check(image, self.lm.vocab_size, text)?;
        first_failing(&[
            (
                self.embodiments.valid(),
                "embodiment_tag_mapping must be a JSON object of ids",
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
                self.vlsa.width() == self.lm.hidden,
                "the VL self-attention width (vlsa_heads x vlsa_head_dim) must equal hidden",
            ),
            (
                self.dit.width() == h.embed,
                "the DiT width (dit_heads x dit_head_dim) must equal input_embedding_dim",
            ),
            (h.future_tokens == 0, "num_target_vision_tokens must be 0"),
            (
                io.chunk_size <= h.max_seq_len,
                "chunk_size must be at most max_seq_len",
            ),
            (
                h.image_token < self.lm.vocab_size,
                "image_token_index must be below vocab_size",
            ),
        ])
    }
}

impl Gr00tN17Config {
    /// Image tokens per camera.
    pub fn n_img_tokens(&self) -> usize {
        self.vision.n_tokens()
    }

    /// Every camera's image tokens.
    pub fn n_image_rows(&self) -> usize {
        self.io.n_images * self.n_img_tokens()
    }

    fn image_id(&self) -> u32 {
        self.head.image_token as u32
    }

    /// The DiT's sequence: the state token, then the actions.
    pub fn suffix_len(&self) -> usize {
        self.head.suffix_len(self.io.chunk_size)
    }

    pub fn chunk_shape(&self) -> ChunkShape {
        ChunkShape {
            chunk: self.io.chunk_size,
            max_state_dim: self.io.max_state_dim,
            max_action_dim: self.io.max_action_dim,
        }
    }

    /// The language model's sequence: the prompt around the longest instruction.
    pub fn seq_len(&self) -> usize {
        self.prompt.seq_len(self.io.tokenizer_max_length)
    }

    /// Each camera's image tokens in the sequence (checked by `check`).
    pub fn image_spans(&self) -> Vec<ImageSpan> {
        let (image, v) = (self.head.image_token, &self.vision);
        self.prompt.image_spans(image, v, self.io.n_images)
    }

    /// Per sequence position: whether it holds an image token.
    pub fn image_rows(&self) -> Vec<bool> {
        let mut rows = vec![false; self.seq_len()];
        for s in self.image_spans() {
            rows[s.start..s.start + s.len()].fill(true);
        }
        rows
    }

    /// Whether DiT block `i` (even) cross-attends to the text tokens (else the image's).
    pub fn attends_text(&self, i: usize) -> bool {
        i.is_multiple_of(2 * self.text_every)
    }

    pub fn layout(&self, n_real: usize) -> PrefixLayout {
        PrefixLayout::causal(self.seq_len(), n_real)
    }
}

/// lerobot's `formalize_language`: an empty task is "Perform the task.", then
/// [`formalize_language`].
pub fn formalize(task: &str) -> String {
    let task = if task.is_empty() {
        "Perform the task."
    } else {
        task
    };
    formalize_language(task)
}

/// Isaac-GR00T's `formalize_language`: lowercase, then only letters, digits, whitespace and
/// `_` kept (`re.sub(r"[^\w\s]", "", text.lower())`).
pub fn formalize_language(task: &str) -> String {
    task.to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || c.is_whitespace() || *c == '_')
        .collect()
}

impl FlowArch for Gr00tN17Config {
    fn arch(&self) -> &'static str {
        ARCH
    }

    fn io_mut(&mut self) -> &mut ActionIo {
        &mut self.io
    }

    /// Reads and checks the `gr00t_n1_7.*` metadata (see docs/GGUF.md).
    fn read(file: &GgufFile) -> Result<Self> {
        let deepstack = read_u32s(file, ARCH, DEEPSTACK_KEY)?;
        let fixed = Gr00tN17Config {
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
            vlsa: BlockStack {
                name: "vlsa",
                ..Default::default()
            },
            dit: BlockStack {
                name: "dit",
                ..Default::default()
            },
            prompt: PromptIds::read_or_client(file, ARCH)?,
            embodiments: Embodiments::read(file, ARCH)?,
            ..Default::default()
        };
        config::read(file, ARCH, fixed)
    }

    fn spec(&self) -> FlowSpec {
        let resize = Resize::Gr00tFrame {
            edge: self.frame.edge,
            crop_fraction: self.frame.crop,
            letterbox: false,
            fixed: FixedPoint::Torch,
        };
        let camera = CameraInput {
            height: self.vision.image_h,
            width: self.vision.image_w,
            resize,
            pad: 0.0,
            align: PadAlign::Center,
            pixels: PixelMap::MinusOneToOne,
        };
        let schedule = Schedule::ZeroToOneBucketed {
            buckets: self.head.buckets,
        };
        FlowSpec {
            output_rows: self.valid_horizon,
            clip: Clipping {
                state: true,
                actions: true,
            },
            ..FlowSpec::new(self.io.clone(), self.lm.vocab_size, camera, schedule)
        }
    }

    fn embodiments(&self) -> Option<(&Embodiments, usize)> {
        Some((&self.embodiments, self.head.embodiments))
    }

    const GRAPHS: [GraphFn<Self>; 3] = [graphs::vision, graphs::prefill, graphs::denoise];

    fn prompt_text(&self, task: &str, _state: &[f32]) -> String {
        formalize(task)
    }

    fn whole_sequence(&self) -> bool {
        self.prompt.from_client
    }

    /// Without a template, the client's sequence with its image slots, or with every
    /// camera's first (vla.cpp's rule).
    fn whole_prompt(&self, ids: Vec<u32>) -> Result<Vec<u32>> {
        let views = (self.io.n_images, self.n_img_tokens());
        self.prompt.request_ids(ids, self.image_id(), views)
    }

    /// The sequence `before ++ instruction ++ after`, right-padded; its validity. Without a
    /// template, the client's sequence, where it places the image tokens, their positions'
    /// rotary tables and which rows the DiT's text and image blocks see.
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
        let mut suffix = vec![state_input(state)?];
        if self.prompt.from_client {
            let image = self.image_id();
            prefix.extend(PromptIds::place_inputs(&seq, image, self.n_image_rows())?);
            let (rows, cols) = self.vision.grid();
            let m = self.vision.merge;
            let spans = client_spans(&seq, image, (rows / m, cols / m))?;
            prefix.extend(mrope_inputs(len, &spans, &self.attn, &self.mrope)?);
            let is_image: Vec<f32> = seq.iter().map(|&t| f32::from(t == image as f32)).collect();
            let text: Vec<f32> = is_image.iter().map(|x| 1.0 - x).collect();
            suffix.push((graphs::TEXT_ROWS.into(), Tensor::from_f32(vec![len], text)?));
            suffix.push((
                graphs::IMAGE_ROWS.into(),
                Tensor::from_f32(vec![len], is_image)?,
            ));
        }
        Ok(RequestInputs { prefix, suffix })
    }

    fn time_input(&self, t: f32) -> Result<Tensor<'static>> {
        time_rows(t, self.head.embed, self.io.chunk_size)
    }

    /// The normaliser's bounds per feature (the checkpoint's q01/q99 when it uses
    /// percentiles), stored as min/max.
    fn statistics(&self) -> Vec<(String, Vec<usize>)> {
        statistics(&self.io, ["min", "max"], ["min", "max"])
    }

    fn write(&self, w: &mut GgufWriter) -> Result<()> {
        w.add_metadata("general.architecture", ARCH)?;
        self.prompt.write(w, ARCH)?;
        let deepstack: Vec<u32> = self.vision.deepstack.iter().map(|&l| l as u32).collect();
        write_u32s(w, ARCH, DEEPSTACK_KEY, &deepstack)?;
        self.embodiments.write(w, ARCH)?;
        config::write(self, w, ARCH)
    }
}

/// Graph builders, shared by the policy and by tests that inspect intermediate tensors.
pub mod graphs;
pub mod stats;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formalize_keeps_lowercase_words() {
        assert_eq!(
            formalize("Pick up the black bowl, and place it on the plate!"),
            "pick up the black bowl and place it on the plate"
        );
        assert_eq!(formalize(""), "perform the task");
        assert_eq!(formalize("Stack_2 cups."), "stack_2 cups");
    }
}
