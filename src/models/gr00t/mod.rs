//! GR00T N1.5 (lerobot `policies.groot`, NVIDIA Isaac-GR00T): the Eagle-2.5 VLM (a SigLIP
//! tower, one linear projector `mm.fc`, a Qwen3 decoder cut to the layers the policy uses,
//! image tokens spliced into the chat prompt), then the flow-matching action head: a
//! LayerNorm (`aex.vlln`) and self-attention blocks over the VLM's output (`aex.vlsa`), and a
//! DiT whose even blocks cross-attend to that context while its sequence is [state token,
//! future tokens, action tokens]; embodiment-specific MLPs encode the state and the noisy
//! actions (with the time) and decode the velocity. Euler from t = 0 to 1 with bucketed
//! times.
//!
//! Under the [`FlowPolicy`] driver: `vision` (SigLIP + projector), `prefill` (the VLM, vlln,
//! the self-attention blocks, then the keys and values every cross-attending DiT block reads:
//! the loop-invariant part) and `denoise` (one velocity).
//!
//! The embodiment-specific weights are stored for every embodiment (`[E, in, out]`, as the
//! reference and vla.cpp keep them); at load the policy narrows each to the active
//! embodiment's slice ([`GgufFile::select_index`]), so a backend holds one copy.

use super::common::statistics;
use super::common::ActionIo;
use super::embodiment::Embodiments;
use super::flow::{FlowArch, FlowPolicy, FlowSpec, GraphFn, PrefixLayout, RequestInputs};
use super::prefix::state_input;
use crate::config::limits::MAX_SEQUENCE;
use crate::config::{self, first_failing, Keys, Section};
use crate::gguf::{GgufFile, GgufWriter};
use crate::layers::GatedActivation;
use crate::modules::decoder::{DecoderConfig, LmConfig};
use crate::modules::dit::BlockStack;
use crate::modules::flow::Schedule;
use crate::modules::gr00t_head::time_rows;
pub use crate::modules::gr00t_head::{ChunkShape, HeadConfig};
use crate::modules::vision::VisionConfig;
use crate::preprocess::{CameraInput, PadAlign, PixelMap, Resize};
use crate::{Result, Tensor};

pub const ARCH: &str = "gr00t_n1_5";

/// The policy: GR00T N1.5's config under the flow-matching driver.
pub type Gr00t = FlowPolicy<Gr00tConfig>;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Gr00tConfig {
    pub vision: VisionConfig,
    /// The Qwen3 decoder, `n_layers` = the layers the policy reads (`select_layer`).
    pub lm: LmConfig,
    pub attn: DecoderConfig,
    /// The self-attention blocks over the VLM's output.
    pub vlsa: BlockStack,
    pub dit: BlockStack,
    pub head: HeadConfig,
    /// `tokenizer_max_length` bounds the instruction alone.
    pub io: ActionIo,
    /// The chat prompt around the instruction, as token ids (`prompt_before_ids`, with every
    /// camera's run of image tokens, and `prompt_after_ids`); in vla.cpp's files, none: a
    /// request's ids are the whole sequence, image slots included.
    pub prompt: PromptIds,
    /// `<arch>.embodiment_tag_mapping` (JSON tag -> id) and `<arch>.embodiment` (the default
    /// tag): see [`super::embodiment`].
    pub embodiments: Embodiments,
}

impl Section for Gr00tConfig {
    fn keys(&mut self, k: &mut dyn Keys) -> Result<()> {
        self.vision.keys(k)?;
        self.lm.keys(k)?;
        self.attn.keys(k)?;
        self.vlsa.keys(k)?;
        self.dit.keys(k)?;
        self.head.keys(k)?;
        self.io.keys(k)
    }

    fn check(&self) -> std::result::Result<(), String> {
        self.vision.check()?;
        self.lm.check()?;
        self.attn.check()?;
        self.vlsa.check()?;
        self.dit.check()?;
        self.head.check()?;
        self.io.check()?;
        self.io.check_vocab(self.lm.vocab_size)?;
        let (h, io) = (&self.head, &self.io);
        let image = (h.image_token as u32, self.vision.n_patches(), io.n_images);
        let text = io.tokenizer_max_length;
        self.prompt.check(image, self.lm.vocab_size, text)?;
        first_failing(&[
            (
                self.embodiments.valid(),
                "embodiment_tag_mapping must be a JSON object of ids",
            ),
            (
                self.vlsa.width() == self.lm.hidden,
                "the VL self-attention width (vlsa_heads x vlsa_head_dim) must equal hidden",
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
                h.image_token < self.lm.vocab_size,
                "image_token_index must be below vocab_size",
            ),
            (
                1 + h.future_tokens + io.chunk_size <= MAX_SEQUENCE,
                "the DiT sequence is too long",
            ),
        ])
    }
}

impl Gr00tConfig {
    /// Image tokens per camera (no pixel shuffle).
    pub fn n_img_tokens(&self) -> usize {
        self.vision.n_patches()
    }

    /// Every camera's image tokens.
    pub fn n_image_rows(&self) -> usize {
        self.io.n_images * self.n_img_tokens()
    }

    fn image_id(&self) -> u32 {
        self.head.image_token as u32
    }

    /// The DiT's sequence: state token, future tokens, actions.
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

    /// The LM's sequence: the prompt around the longest instruction.
    pub fn seq_len(&self) -> usize {
        self.prompt.seq_len(self.io.tokenizer_max_length)
    }

    /// Where each camera's image tokens start in the sequence (checked by `check`).
    pub fn image_starts(&self) -> Vec<usize> {
        let (image, n) = (self.head.image_token as u32, self.n_img_tokens());
        self.prompt
            .image_starts(image, n, self.io.n_images)
            .unwrap_or_default()
    }

    /// A causal sequence of [`Self::seq_len`] positions, the first `n_real` real.
    pub fn layout(&self, n_real: usize) -> PrefixLayout {
        PrefixLayout::causal(self.seq_len(), n_real)
    }
}

impl FlowArch for Gr00tConfig {
    fn arch(&self) -> &'static str {
        ARCH
    }

    fn io_mut(&mut self) -> &mut ActionIo {
        &mut self.io
    }

    /// Reads and checks the `gr00t_n1_5.*` metadata (see docs/GGUF.md).
    fn read(file: &GgufFile) -> Result<Self> {
        let fixed = Gr00tConfig {
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
            ..Default::default()
        };
        let fixed = Gr00tConfig {
            prompt: PromptIds::read_or_client(file, ARCH)?,
            embodiments: Embodiments::read(file, ARCH)?,
            ..fixed
        };
        config::read(file, ARCH, fixed)
    }

    fn spec(&self) -> FlowSpec {
        let camera = CameraInput::square(
            self.vision.image_size,
            Resize::StretchBicubicU8,
            0.0,
            PadAlign::Center,
            PixelMap::MinusOneToOne,
        );
        let schedule = Schedule::ZeroToOneBucketed {
            buckets: self.head.buckets,
        };
        FlowSpec::new(self.io.clone(), self.lm.vocab_size, camera, schedule)
    }

    fn embodiments(&self) -> Option<(&Embodiments, usize)> {
        Some((&self.embodiments, self.head.embodiments))
    }

    const GRAPHS: [GraphFn<Self>; 3] = [graphs::vision, graphs::prefill, graphs::denoise];

    /// lerobot's instruction text: the task as a one-element Python list (`str([task])`),
    /// which the prompt ids surround; an empty task is lerobot's default ("Perform the task.",
    /// `GrootPackInputsStep`).
    fn prompt_text(&self, task: &str, _state: &[f32]) -> String {
        let task = match task.is_empty() {
            true => "Perform the task.",
            false => task,
        };
        format!("[{}]", python_repr(task))
    }

    fn whole_sequence(&self) -> bool {
        self.prompt.from_client
    }

    /// Without a template, the client's sequence with its image slots (vla.cpp's rule).
    fn whole_prompt(&self, ids: Vec<u32>) -> Result<Vec<u32>> {
        let views = (self.io.n_images, self.n_img_tokens());
        self.prompt.request_ids(ids, self.image_id(), views)
    }

    /// The sequence `before ++ instruction ++ after`, right-padded (without a template, the
    /// client's, and where it places the image tokens).
    fn request_inputs(
        &self,
        tokens: Vec<f32>,
        n_tokens: usize,
        state: &[f32],
    ) -> Result<RequestInputs> {
        let (len, pad) = (self.seq_len(), self.io.pad_token_id);
        let (seq, n_real) = self.prompt.sequence(&tokens[..n_tokens], len, pad);
        let mut prefix = self.layout(n_real).into_inputs(seq.clone())?;
        if self.prompt.from_client {
            let (image, total) = (self.image_id(), self.n_image_rows());
            prefix.extend(PromptIds::place_inputs(&seq, image, total)?);
        }
        Ok(RequestInputs {
            prefix,
            suffix: vec![state_input(state)?],
        })
    }

    /// One row per action: the action encoder's sinusoid of the bucketed time, then the
    /// DiT's timestep projection (read from the first row).
    fn time_input(&self, t: f32) -> Result<Tensor<'static>> {
        time_rows(t, self.head.embed, self.io.chunk_size)
    }

    /// Min/max per feature (lerobot's GR00T normalisation).
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
mod prompt;

pub use super::prompt::PromptIds;
pub use prompt::python_repr;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompt_text_is_lerobots_list_repr_with_its_default_task() {
        let cfg = Gr00tConfig::default();
        assert_eq!(cfg.prompt_text("pick it", &[]), "['pick it']");
        assert_eq!(cfg.prompt_text("it's", &[]), "[\"it's\"]");
        assert_eq!(cfg.prompt_text("", &[]), "['Perform the task.']");
    }
}
