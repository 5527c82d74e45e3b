//! GR00T N1.6 (NVIDIA Isaac-GR00T `Gr00tN1d6`): the Eagle "Block2A-2B-v2" VLM (a SigLIP2
//! tower read at its post-LayerNorm, each image's patches pixel-unshuffled 2 x 2 into one
//! token and mapped by `mlp1` = LayerNorm, Linear, erf GELU, Linear; a Qwen3 decoder cut to
//! `select_layer` layers whose final norm is applied; the instruction before the images in
//! the chat prompt), then GR00T's flow-matching head as N1.7's without the VL self-attention
//! and future tokens: `vlln`, an AlternateVLDiT whose cross-attending blocks alternate between
//! the prompt's text tokens and its image tokens, 4 bucketed Euler steps; states and actions
//! clipped to [-1, 1] around the percentile statistics, the first `valid_horizon` actions
//! returned.
//!
//! The images follow the instruction, so where their tokens sit depends on its length: each
//! request places them ([`crate::modules::flow::names::IMAGE_PLACES`]) and says which rows
//! the DiT's text and image blocks see ([`graphs::TEXT_ROWS`], [`graphs::IMAGE_ROWS`]).

use super::common::{statistics, ActionIo};
use super::embodiment::Embodiments;
use super::flow::{Clipping, FlowArch, FlowPolicy, FlowSpec, GraphFn, PrefixLayout, RequestInputs};
use super::gr00t_n1_7::FrameConfig;
use super::prefix::state_input;
use super::prompt::PromptIds;
use crate::config::limits::MAX_SEQUENCE;
use crate::config::{self, bounded, first_failing, Keys, Section};
use crate::gguf::{GgufFile, GgufWriter};
use crate::layers::GatedActivation;
use crate::modules::decoder::{DecoderConfig, LmConfig};
use crate::modules::dit::BlockStack;
use crate::modules::flow::Schedule;
use crate::modules::gr00t_head::{time_rows, ChunkShape, HeadConfig};
use crate::modules::vision::{Connector, VisionConfig};
use crate::preprocess::bicubic::FixedPoint;
use crate::preprocess::{CameraInput, PadAlign, PixelMap, Resize};
use crate::{Result, Tensor};

pub const ARCH: &str = "gr00t_n1_6";

pub type Gr00tN16 = FlowPolicy<Gr00tN16Config>;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Gr00tN16Config {
    /// The SigLIP2 tower (its position table at the frame's patch grid).
    pub vision: VisionConfig,
    /// `vit_pixel_shuffle`: the unshuffle factor before `mlp1` (2).
    pub pixel_shuffle: usize,
    /// `connector_ln_eps`: `mlp1`'s LayerNorm epsilon.
    pub connector_eps: f32,
    pub frame: FrameConfig,
    /// The Qwen3 decoder, `n_layers` = `select_layer`.
    pub lm: LmConfig,
    pub attn: DecoderConfig,
    pub dit: BlockStack,
    /// `dit_text_every`, as N1.7.
    pub text_every: usize,
    pub head: HeadConfig,
    pub io: ActionIo,
    pub valid_horizon: usize,
    /// Before the instruction: the system turn and `user`; after it: every camera's
    /// `<image k><img>` + image tokens + `</img>`, then `<|im_end|>\n`. None in vla.cpp's
    /// files: the client's whole sequence.
    pub prompt: PromptIds,
    pub embodiments: Embodiments,
}

impl Section for Gr00tN16Config {
    fn keys(&mut self, k: &mut dyn Keys) -> Result<()> {
        self.vision.keys(k)?;
        k.usize("vit_pixel_shuffle", &mut self.pixel_shuffle)?;
        k.f32("connector_ln_eps", &mut self.connector_eps)?;
        self.frame.keys(k)?;
        self.lm.keys(k)?;
        self.attn.keys(k)?;
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
        self.dit.check()?;
        self.head.check()?;
        self.io.check()?;
        self.io.check_vocab(self.lm.vocab_size)?;
        bounded("vit_pixel_shuffle", self.pixel_shuffle, 1, 8)?;
        bounded("dit_text_every", self.text_every, 1, 1 << 10)?;
        bounded("valid_horizon", self.valid_horizon, 1, self.io.chunk_size)?;
        let (h, io, p) = (&self.head, &self.io, &self.prompt);
        let image = h.image_token as u32;
        let in_vocab = |ids: &[u32]| ids.iter().all(|&t| (t as usize) < self.lm.vocab_size);
        let grid = self.vision.image_size / self.vision.patch_size.max(1);
        first_failing(&[
            (
                !p.before.contains(&image),
                "prompt_before_ids: no image tokens before the instruction",
            ),
            (
                p.from_client
                    || p.after.iter().filter(|&&t| t == image).count() == self.n_image_rows(),
                "prompt_after_ids must hold every camera's image tokens",
            ),
            (
                !p.from_client || self.n_image_rows() <= io.tokenizer_max_length,
                "the sequence bound must hold every camera's image tokens",
            ),
            (
                in_vocab(&p.before) && in_vocab(&p.after),
                "the prompt's token ids must be below vocab_size",
            ),
            (self.seq_len() <= MAX_SEQUENCE, "the prompt is too long"),
            (
                grid.is_multiple_of(self.pixel_shuffle.max(1)),
                "the patch grid must be a multiple of vit_pixel_shuffle",
            ),
            (
                self.embodiments.valid(),
                "embodiment_tag_mapping must be a JSON object of ids",
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

impl Gr00tN16Config {
    /// Image tokens per camera: the patch grid unshuffled.
    pub fn n_img_tokens(&self) -> usize {
        self.vision.n_patches() / self.pixel_shuffle.max(1).pow(2)
    }

    pub fn n_image_rows(&self) -> usize {
        self.io.n_images * self.n_img_tokens()
    }

    pub fn connector(&self) -> Connector {
        Connector::Mlp {
            pixel_shuffle: self.pixel_shuffle,
            ln_eps: self.connector_eps,
        }
    }

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

    pub fn attends_text(&self, i: usize) -> bool {
        i.is_multiple_of(2 * self.text_every)
    }

    pub fn layout(&self, n_real: usize) -> PrefixLayout {
        PrefixLayout::causal(self.seq_len(), n_real)
    }
}

impl FlowArch for Gr00tN16Config {
    fn arch(&self) -> &'static str {
        ARCH
    }

    fn io_mut(&mut self) -> &mut ActionIo {
        &mut self.io
    }

    /// Reads and checks the `gr00t_n1_6.*` metadata (see docs/GGUF.md).
    fn read(file: &GgufFile) -> Result<Self> {
        let fixed = Gr00tN16Config {
            attn: DecoderConfig {
                ffn: GatedActivation::Silu,
                qk_norm: true,
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
            letterbox: true,
            fixed: FixedPoint::Pillow,
        };
        let camera = CameraInput {
            height: self.vision.image_size,
            width: self.vision.image_size,
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

    /// Isaac's `formalize_language` of the task as given (no default task: an empty one stays
    /// empty).
    fn prompt_text(&self, task: &str, _state: &[f32]) -> String {
        super::gr00t_n1_7::formalize_language(task)
    }

    fn whole_sequence(&self) -> bool {
        self.prompt.from_client
    }

    /// Without a template (vla.cpp's files), the client's sequence with its image slots, or
    /// with every camera's first (vla.cpp's rule).
    fn whole_prompt(&self, ids: Vec<u32>) -> Result<Vec<u32>> {
        let views = (self.io.n_images, self.n_img_tokens());
        self.prompt
            .request_ids(ids, self.head.image_token as u32, views)
    }

    /// `before ++ instruction ++ after` (without a template, the client's sequence),
    /// right-padded; where the image tokens sit and which rows the DiT's text and image
    /// blocks see.
    fn request_inputs(
        &self,
        tokens: Vec<f32>,
        n_tokens: usize,
        state: &[f32],
    ) -> Result<RequestInputs> {
        let (len, pad) = (self.seq_len(), self.io.pad_token_id);
        let (seq, n_real) = self.prompt.sequence(&tokens[..n_tokens], len, pad);
        let mut prefix = self.layout(n_real).into_inputs(seq.clone())?;
        let image = self.head.image_token as u32;
        prefix.extend(PromptIds::place_inputs(&seq, image, self.n_image_rows())?);
        let is_image: Vec<f32> = seq.iter().map(|&t| f32::from(t == image as f32)).collect();
        let text: Vec<f32> = is_image.iter().map(|x| 1.0 - x).collect();
        let suffix = vec![
            state_input(state)?,
            (graphs::TEXT_ROWS.into(), Tensor::from_f32(vec![len], text)?),
            (
                graphs::IMAGE_ROWS.into(),
                Tensor::from_f32(vec![len], is_image)?,
            ),
        ];
        Ok(RequestInputs { prefix, suffix })
    }

    fn time_input(&self, t: f32) -> Result<Tensor<'static>> {
        time_rows(t, self.head.embed, self.io.chunk_size)
    }

    /// The normaliser's bounds per feature (q01/q99 with percentiles), stored as min/max.
    fn statistics(&self) -> Vec<(String, Vec<usize>)> {
        statistics(&self.io, ["min", "max"], ["min", "max"])
    }

    fn write(&self, w: &mut GgufWriter) -> Result<()> {
        w.add_metadata("general.architecture", ARCH)?;
        self.prompt.write(w, ARCH)?;
        self.embodiments.write(w, ARCH)?;
        config::write(self, w, ARCH)
    }
}

/// Graph builders, shared by the policy and by tests that inspect intermediate tensors.
pub mod graphs;
pub mod tables;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_task_is_formalized_as_given() {
        let cfg = Gr00tN16Config::default();
        assert_eq!(cfg.prompt_text("Pick up the cup!", &[]), "pick up the cup");
        assert_eq!(cfg.prompt_text("", &[]), "");
    }
}
