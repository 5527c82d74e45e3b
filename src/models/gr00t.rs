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

use super::common::ActionIo;
use super::embodiment::{self, KEY_DEFAULT, KEY_TAGS};
use super::flow::{
    valid_rows, FlowArch, FlowPolicy, FlowSpec, PrefixLayout, RequestInputs, Segment, VALID,
};
use crate::config::limits::MAX_SEQUENCE;
use crate::config::{self, bounded, first_failing, positive, Keys, Section};
use crate::gguf::{GgufFile, GgufWriter};
use crate::graph::{Graph, GraphBuilder, NodeId, WeightStore};
use crate::layers::{layer_norm, linear, linear_in_out, rms_norm, GatedActivation};
use crate::modules::decoder::{
    finish_layer, norm_and_query, rotate, rotated_kv, DecoderConfig, Layer, LmConfig,
};
use crate::modules::dit::{
    action_time_encoding, block_kv, cross_blocks, dit, self_attention_stack, time_condition,
    timestep_projection, BlockStack, TIMESTEP_CHANNELS,
};
use crate::modules::flow::Schedule;
use crate::modules::vision::{vision_tower, VisionConfig};
use crate::preprocess::{CameraInput, PadAlign, PixelMap, Resize};
use crate::{Error, Result, Tensor};

pub const ARCH: &str = "gr00t_n1_5";

/// The policy: GR00T N1.5's config under the flow-matching driver.
pub type Gr00t = FlowPolicy<Gr00tConfig>;

/// The embodiment-indexed MLPs: (prefix, layer names).
const EMBODIMENT_MLPS: [(&str, &[&str]); 3] = [
    ("aex.state_enc", &["l1", "l2"]),
    ("aex.act_enc", &["W1", "W2", "W3"]),
    ("aex.act_dec", &["l1", "l2"]),
];

/// The action head's sizes. Keys: `input_embedding_dim`, `action_hidden`,
/// `num_target_vision_tokens`, `max_seq_len`, `max_num_embodiments`, `num_timestep_buckets`,
/// `image_token_index`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HeadConfig {
    /// Width of the DiT's tokens (the state, future and action embeddings).
    pub embed: usize,
    /// The DiT's output width and the action decoder's hidden width (`hidden_size`).
    pub hidden: usize,
    /// Future tokens between the state and the actions.
    pub future_tokens: usize,
    /// Rows of the action position table.
    pub max_seq_len: usize,
    pub embodiments: usize,
    pub buckets: usize,
    /// The `<IMG_CONTEXT>` id.
    pub image_token: usize,
}

impl Section for HeadConfig {
    fn keys(&mut self, k: &mut dyn Keys) -> Result<()> {
        k.usize("input_embedding_dim", &mut self.embed)?;
        k.usize("action_hidden", &mut self.hidden)?;
        k.usize("num_target_vision_tokens", &mut self.future_tokens)?;
        k.usize("max_seq_len", &mut self.max_seq_len)?;
        k.usize("max_num_embodiments", &mut self.embodiments)?;
        k.usize("num_timestep_buckets", &mut self.buckets)?;
        k.usize("image_token_index", &mut self.image_token)
    }

    fn check(&self) -> std::result::Result<(), String> {
        positive("input_embedding_dim", self.embed)?;
        positive("action_hidden", self.hidden)?;
        bounded(
            "num_target_vision_tokens",
            self.future_tokens,
            0,
            MAX_SEQUENCE,
        )?;
        bounded("max_seq_len", self.max_seq_len, 1, MAX_SEQUENCE)?;
        bounded("max_num_embodiments", self.embodiments, 1, 1 << 16)?;
        bounded("num_timestep_buckets", self.buckets, 1, 1 << 20)?;
        first_failing(&[(
            self.embed.is_multiple_of(2),
            "input_embedding_dim must be even",
        )])
    }
}

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
    /// camera's run of image tokens, and `prompt_after_ids`).
    pub prompt: PromptIds,
    /// `<arch>.embodiment_tag_mapping` (JSON tag -> id) and `<arch>.embodiment` (the default
    /// tag): see [`super::embodiment`].
    pub embodiment_tags: String,
    pub default_embodiment: String,
}

/// The token ids a request's instruction is put between: the Eagle chat template rendered
/// with the camera views and a placeholder task, tokenized, and split at the task. Arrays
/// `<arch>.prompt_before_ids`, `<arch>.prompt_after_ids`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PromptIds {
    pub before: Vec<u32>,
    pub after: Vec<u32>,
}

const KEY_BEFORE: &str = "prompt_before_ids";
const KEY_AFTER: &str = "prompt_after_ids";

impl PromptIds {
    fn read(file: &GgufFile) -> Result<Self> {
        let ids = |key: &str| -> Result<Vec<u32>> {
            let key = format!("{ARCH}.{key}");
            file.get_array(&key)?
                .iter()
                .map(|v| {
                    v.as_u64()
                        .and_then(|x| u32::try_from(x).ok())
                        .ok_or_else(|| Error::InvalidArgument(format!("{key}: expected token ids")))
                })
                .collect()
        };
        Ok(PromptIds {
            before: ids(KEY_BEFORE)?,
            after: ids(KEY_AFTER)?,
        })
    }

    fn write(&self, w: &mut GgufWriter) -> Result<()> {
        use crate::gguf::{Value, ValueType};
        for (key, ids) in [(KEY_BEFORE, &self.before), (KEY_AFTER, &self.after)] {
            let items = ids.iter().map(|&i| Value::U32(i)).collect();
            w.add_metadata(format!("{ARCH}.{key}"), Value::Array(ValueType::U32, items))?;
        }
        Ok(())
    }

    /// Where each run of `n` `image` ids starts in `before`: an error unless there are
    /// exactly `cameras` runs, each exactly `n` long.
    pub fn image_starts(&self, image: u32, n: usize, cameras: usize) -> Result<Vec<usize>> {
        let mut starts = Vec::new();
        let mut i = 0;
        while i < self.before.len() {
            if self.before[i] != image {
                i += 1;
                continue;
            }
            let len = self.before[i..].iter().take_while(|&&t| t == image).count();
            if len != n {
                return Err(Error::InvalidArgument(format!(
                    "{ARCH}.{KEY_BEFORE}: a run of {len} image tokens at {i}, expected {n}"
                )));
            }
            starts.push(i);
            i += len;
        }
        if starts.len() != cameras {
            return Err(Error::InvalidArgument(format!(
                "{ARCH}.{KEY_BEFORE}: {} runs of image tokens for {cameras} cameras",
                starts.len()
            )));
        }
        if self.after.contains(&image) {
            return Err(Error::InvalidArgument(format!(
                "{ARCH}.{KEY_AFTER}: image tokens after the instruction"
            )));
        }
        Ok(starts)
    }
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
        let starts =
            self.prompt
                .image_starts(h.image_token as u32, self.vision.n_patches(), io.n_images);
        let prompt = self.prompt.before.len() + self.prompt.after.len();
        let vocab = self.lm.vocab_size;
        let in_vocab = |ids: &[u32]| ids.iter().all(|&t| (t as usize) < vocab);
        first_failing(&[
            (
                starts.is_ok(),
                &starts.err().map_or(String::new(), |e| e.to_string()),
            ),
            (
                embodiment::tag_map(&self.embodiment_tags).is_ok(),
                "embodiment_tag_mapping must be a JSON object of ids",
            ),
            (
                in_vocab(&self.prompt.before) && in_vocab(&self.prompt.after),
                "the prompt's token ids must be below vocab_size",
            ),
            (
                prompt <= MAX_SEQUENCE && prompt + io.tokenizer_max_length <= MAX_SEQUENCE,
                "the prompt is too long",
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

    /// The DiT's sequence: state token, future tokens, actions.
    pub fn suffix_len(&self) -> usize {
        1 + self.head.future_tokens + self.io.chunk_size
    }

    /// The LM's sequence: the prompt around the longest instruction.
    pub fn seq_len(&self) -> usize {
        self.prompt.before.len() + self.io.tokenizer_max_length + self.prompt.after.len()
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
        let segments: Vec<Segment> = (0..self.seq_len())
            .map(|i| Segment::new(1, usize::from(i < n_real), i))
            .collect();
        PrefixLayout::new(&segments)
    }

    /// The embodiment-indexed weights, with their per-embodiment shapes.
    fn embodiment_weights(&self) -> Vec<String> {
        EMBODIMENT_MLPS
            .iter()
            .flat_map(|(prefix, layers)| {
                layers
                    .iter()
                    .flat_map(move |l| ["W", "b"].map(|w| format!("{prefix}.{l}.{w}")))
            })
            .collect()
    }
}

impl FlowArch for Gr00tConfig {
    fn arch(&self) -> &'static str {
        ARCH
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
        let text = |key: &str| file.get_str(&format!("{ARCH}.{key}")).map(str::to_owned);
        let fixed = Gr00tConfig {
            prompt: PromptIds::read(file)?,
            embodiment_tags: text(KEY_TAGS)?,
            default_embodiment: text(KEY_DEFAULT)?,
            ..fixed
        };
        config::read(file, ARCH, fixed)
    }

    fn spec(&self) -> FlowSpec {
        FlowSpec {
            io: self.io.clone(),
            vocab_size: self.lm.vocab_size,
            camera: CameraInput {
                size: self.vision.image_size,
                resize: Resize::StretchBicubicU8,
                pad: 0.0,
                align: PadAlign::Center,
                pixels: PixelMap::MinusOneToOne,
            },
            schedule: Schedule::ZeroToOneBucketed {
                buckets: self.head.buckets,
            },
        }
    }

    fn graphs(&self, store: Option<&dyn WeightStore>) -> Result<[Graph; 3]> {
        Ok([
            graphs::vision(GraphBuilder::over(store), self)?,
            graphs::prefill(GraphBuilder::over(store), self)?,
            graphs::denoise(GraphBuilder::over(store), self)?,
        ])
    }

    /// lerobot's instruction text: the task as a one-element Python list (`str([task])`),
    /// which the prompt ids surround.
    fn prompt_text(&self, task: &str, _state: &[f32]) -> String {
        format!("[{}]", python_repr(task))
    }

    /// The sequence `before ++ instruction ++ after`, right-padded.
    fn request_inputs(
        &self,
        tokens: Vec<f32>,
        n_tokens: usize,
        state: &[f32],
    ) -> Result<RequestInputs> {
        let p = &self.prompt;
        let as_f32 = |ids: &[u32]| ids.iter().map(|&t| t as f32).collect::<Vec<_>>();
        let mut seq = as_f32(&p.before);
        seq.extend(&tokens[..n_tokens]);
        seq.extend(as_f32(&p.after));
        let n_real = seq.len();
        seq.resize(self.seq_len(), self.io.pad_token_id as f32);
        let prefix = self.layout(n_real).into_inputs(seq)?;
        let state = Tensor::from_f32(vec![1, state.len()], state.to_vec())?;
        Ok(RequestInputs {
            prefix,
            suffix: vec![("state".into(), state)],
        })
    }

    /// One row per action: the action encoder's sinusoid of the bucketed time, then the
    /// DiT's timestep projection (read from the first row).
    fn time_input(&self, t: f32) -> Result<Tensor<'static>> {
        let mut row = action_time_encoding(t, self.head.embed);
        row.extend(timestep_projection(t));
        let c = self.io.chunk_size;
        Tensor::from_f32(vec![c, row.len()], row.repeat(c))
    }

    /// Min/max per feature (lerobot's GR00T normalisation).
    fn statistics(&self) -> Vec<(String, Vec<usize>)> {
        [("state", self.io.state_dim), ("action", self.io.action_dim)]
            .into_iter()
            .flat_map(|(what, d)| ["min", "max"].map(|s| (format!("{what}_{s}"), vec![d])))
            .collect()
    }

    /// The graphs' weights, the embodiment-indexed ones with their leading embodiment axis.
    fn tensor_shapes(&self) -> Result<Vec<(String, Vec<usize>)>> {
        let indexed = self.embodiment_weights();
        let mut shapes = crate::graph::declared_weights(&self.graphs(None)?)?;
        for (name, shape) in &mut shapes {
            if indexed.contains(name) {
                shape.insert(0, self.head.embodiments);
            }
        }
        Ok(shapes)
    }

    fn write(&self, w: &mut GgufWriter) -> Result<()> {
        w.add_metadata("general.architecture", ARCH)?;
        self.prompt.write(w)?;
        w.add_metadata(format!("{ARCH}.{KEY_TAGS}"), self.embodiment_tags.as_str())?;
        w.add_metadata(
            format!("{ARCH}.{KEY_DEFAULT}"),
            self.default_embodiment.as_str(),
        )?;
        config::write(self, w, ARCH)
    }

    fn select_weights(
        &self,
        file: &mut GgufFile,
        requested: Option<&str>,
    ) -> Result<Option<String>> {
        let (tag, id) = embodiment::resolve(
            &self.embodiment_tags,
            &self.default_embodiment,
            requested,
            self.head.embodiments,
        )?;
        for name in self.embodiment_weights() {
            file.select_index(&name, id)?;
        }
        Ok(Some(format!("{tag} ({id})")))
    }
}

/// Graph builders, shared by the policy and by tests that inspect intermediate tensors.
pub mod graphs {
    use super::*;

    /// `image.{i}` `[3, S, S]` in [-1, 1] -> image tokens `[n_images * T, hidden]`.
    pub fn vision(mut g: GraphBuilder, cfg: &Gr00tConfig) -> Result<Graph> {
        let s = cfg.vision.image_size;
        let views = (0..cfg.io.n_images)
            .map(|i| {
                let img = g.input(format!("image.{i}"), &[3, s, s]);
                let x = vision_tower(&mut g, img, &cfg.vision)?;
                linear(&mut g, x, "mm.fc", cfg.lm.hidden, true)
            })
            .collect::<Result<Vec<_>>>()?;
        let out = match views.as_slice() {
            [one] => *one,
            _ => g.concat(&views, 0)?,
        };
        g.build(&[out])
    }

    /// The sequence's embeddings `[L, hidden]` with camera `i`'s image tokens in place of
    /// its `<IMG_CONTEXT>` run ([`Gr00tConfig::image_starts`]).
    fn spliced_embeddings(
        g: &mut GraphBuilder,
        cfg: &Gr00tConfig,
        img: NodeId,
        tokens: NodeId,
    ) -> Result<NodeId> {
        let (l, h, t) = (cfg.seq_len(), cfg.lm.hidden, cfg.n_img_tokens());
        let table = g.weight("token_embd.weight", &[cfg.lm.vocab_size, h])?;
        let text = g.embedding(table, tokens)?;
        let mut parts = Vec::new();
        let mut at = 0;
        for (i, start) in cfg.image_starts().into_iter().enumerate() {
            if start > at {
                parts.push(g.slice(text, 0, at, start - at)?);
            }
            parts.push(g.slice(img, 0, i * t, t)?);
            at = start + t;
        }
        if at < l {
            parts.push(g.slice(text, 0, at, l - at)?);
        }
        g.concat(&parts, 0)
    }

    /// The VLM's features (the Qwen3 decoder, causal, over the spliced prompt, then its
    /// final norm) and what the head makes of them, `[L, hidden]` each: `vlln` and the VL
    /// self-attention blocks (which see the real tokens only). Inputs `img_tokens`, `tokens`
    /// `[L]`, `positions` `[L]`, `valid` `[L]`.
    pub fn backbone(g: &mut GraphBuilder, cfg: &Gr00tConfig) -> Result<(NodeId, NodeId)> {
        let (l, h, a) = (cfg.seq_len(), cfg.lm.hidden, &cfg.attn);
        let img = g.input("img_tokens", &[cfg.io.n_images * cfg.n_img_tokens(), h]);
        let tokens = g.input("tokens", &[l]);
        let positions = g.input("positions", &[l]);
        let valid = g.input(VALID, &[l]);
        let mask = cfg.layout(l).allowed(g, valid)?;
        let mut x = spliced_embeddings(g, cfg, img, tokens)?;
        for i in 0..cfg.lm.n_layers {
            let layer = Layer::new("vlm", i, cfg.lm.inter);
            let (hn, q, _) = norm_and_query(g, x, &layer, a)?;
            let q = rotate(g, q, positions, a)?;
            let (k, v) = rotated_kv(g, hn, positions, &layer.prefix, a)?;
            x = finish_layer(g, x, q, k, v, Some(mask), None, &layer, a)?;
        }
        let lm = rms_norm(g, x, "vlm.output_norm", a.norm_eps)?;
        let x = layer_norm(g, lm, "aex.vlln", 1e-5)?;
        let keys = valid_rows(g, valid, l)?;
        Ok((
            lm,
            self_attention_stack(g, x, Some(keys), "aex.vlsa", &cfg.vlsa)?,
        ))
    }

    /// [`backbone`], then the keys and values `[L, dit_heads, dit_head_dim]` of every
    /// cross-attending DiT block, in block order (k, v).
    pub fn prefill(mut g: GraphBuilder, cfg: &Gr00tConfig) -> Result<Graph> {
        let (_, vl) = backbone(&mut g, cfg)?;
        let mut outputs = Vec::new();
        for j in 0..cross_blocks(&cfg.dit) {
            let (k, v) = block_kv(&mut g, vl, &format!("aex.dit.{}", 2 * j), &cfg.dit)?;
            outputs.extend([k, v]);
        }
        g.build(&outputs)
    }

    /// An embodiment MLP `<prefix>.{layers}` with ReLU between layers.
    fn embodiment_mlp(
        g: &mut GraphBuilder,
        x: NodeId,
        prefix: &str,
        widths: [usize; 2],
    ) -> Result<NodeId> {
        let h = linear_in_out(g, x, &format!("{prefix}.l1"), widths[0])?;
        let h = g.relu(h);
        linear_in_out(g, h, &format!("{prefix}.l2"), widths[1])
    }

    /// One velocity. Inputs `x_t` `[chunk, max_action_dim]`, `time_emb` `[chunk, E + 256]`
    /// ([`FlowArch::time_input`]), `state` `[1, max_state_dim]` (normalised, padded), the
    /// prefill's `valid` `[L]` and `kv.{j}.k` / `kv.{j}.v`. Output `[chunk,
    /// max_action_dim]`.
    pub fn denoise(mut g: GraphBuilder, cfg: &Gr00tConfig) -> Result<Graph> {
        let v = velocity(&mut g, cfg)?;
        g.build(&[v])
    }

    fn velocity(g: &mut GraphBuilder, cfg: &Gr00tConfig) -> Result<NodeId> {
        let (hd, io) = (&cfg.head, &cfg.io);
        let (c, e, l) = (io.chunk_size, hd.embed, cfg.seq_len());
        let x_t = g.input("x_t", &[c, io.max_action_dim]);
        let time = g.input("time_emb", &[c, e + TIMESTEP_CHANNELS]);
        let state = g.input("state", &[1, io.max_state_dim]);
        let valid = g.input(VALID, &[l]);
        let state = embodiment_mlp(g, state, "aex.state_enc", [hd.hidden, e])?;
        let tau = g.slice(time, 1, 0, e)?;
        let a = linear_in_out(g, x_t, "aex.act_enc.W1", e)?;
        let a = g.concat(&[a, tau], 1)?;
        let a = linear_in_out(g, a, "aex.act_enc.W2", e)?;
        let a = g.silu(a);
        let a = linear_in_out(g, a, "aex.act_enc.W3", e)?;
        let pos = g.weight("aex.pos_embd.weight", &[hd.max_seq_len, e])?;
        let pos = g.slice(pos, 0, 0, c)?;
        let a = g.add(a, pos)?;
        let mut parts = vec![state];
        if hd.future_tokens > 0 {
            parts.push(g.weight("aex.future_tokens.weight", &[hd.future_tokens, e])?);
        }
        parts.push(a);
        let x = g.concat(&parts, 0)?;
        let proj = g.slice(time, 0, 0, 1)?;
        let proj = g.slice(proj, 1, e, TIMESTEP_CHANNELS)?;
        let temb = time_condition(g, proj, "aex.dit", cfg.dit.width())?;
        let cross: Vec<(NodeId, NodeId)> = (0..cross_blocks(&cfg.dit))
            .map(|j| {
                let (hh, dd) = (cfg.dit.heads, cfg.dit.head_dim);
                let k = g.input(format!("kv.{j}.k"), &[l, hh, dd]);
                let v = g.input(format!("kv.{j}.v"), &[l, hh, dd]);
                (k, v)
            })
            .collect();
        let mask = valid_rows(g, valid, cfg.suffix_len())?;
        let out = dit(
            g,
            x,
            temb,
            &cross,
            Some(mask),
            "aex.dit",
            &cfg.dit,
            hd.hidden,
        )?;
        let s = cfg.suffix_len();
        let out = g.slice(out, 0, s - c, c)?;
        embodiment_mlp(g, out, "aex.act_dec", [hd.hidden, io.max_action_dim])
    }
}

/// Python's `repr` of a string: single quotes unless the text holds a single quote and no
/// double quote; backslashes, the quote, and `\n`, `\r`, `\t` escaped, other control
/// characters as `\xNN`.
pub fn python_repr(s: &str) -> String {
    let q = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::from(q);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == q => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push(q);
    out
}
