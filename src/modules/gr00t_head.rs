//! GR00T's flow-matching action head (N1.5 and N1.7): the VL context (`aex.vlln` and the VL
//! self-attention blocks over the backbone's features), the embodiment-specific state and
//! action encoders and action decoder (`CategorySpecificLinear` layers, one embodiment's
//! `[in, out]` slice each), and the DiT over [state token, future tokens, action tokens]
//! cross-attending to the context's keys and values.

use super::dit::TIMESTEP_CHANNELS;
use super::dit::{action_time_encoding, timestep_projection};
use super::dit::{cross_blocks, self_attention_stack, BlockStack, Dit};
use crate::config::limits::MAX_SEQUENCE;
use crate::config::{bounded, first_failing, positive, Keys, Section};
use crate::graph::{GraphBuilder, NodeId};
use crate::layers::{layer_norm, linear, linear_in_out, Scope};
use crate::modules::flow::names;
use crate::{Result, Tensor};

/// The embodiment-indexed MLPs: (prefix, layer names).
const EMBODIMENT_MLPS: [(&str, &[&str]); 3] = [
    ("aex.state_enc", &["l1", "l2"]),
    ("aex.act_enc", &["W1", "W2", "W3"]),
    ("aex.act_dec", &["l1", "l2"]),
];

/// The weights stored once per embodiment (`[E, in, out]` and `[E, out]` in the GGUF; the
/// graphs read one embodiment's slice).
pub fn embodiment_weights() -> Vec<String> {
    EMBODIMENT_MLPS
        .iter()
        .flat_map(|(prefix, layers)| {
            layers
                .iter()
                .flat_map(move |l| ["W", "b"].map(|w| format!("{prefix}.{l}.{w}")))
        })
        .collect()
}

/// The denoise graph's `time_emb` `[chunk, embed + 256]` at model time `t`: per action row
/// the action encoder's sinusoid of the bucketed time, then the DiT's timestep projection
/// (read from the first row).
pub fn time_rows(t: f32, embed: usize, chunk: usize) -> Result<Tensor<'static>> {
    let mut row = action_time_encoding(t, embed);
    row.extend(timestep_projection(t));
    Tensor::from_f32(vec![chunk, row.len()], row.repeat(chunk))
}

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
    /// The id of the prompt's image tokens (`<IMG_CONTEXT>`, `<|image_pad|>`).
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

impl HeadConfig {
    /// The DiT's sequence for a chunk of `chunk`: state token, future tokens, actions.
    pub fn suffix_len(&self, chunk: usize) -> usize {
        1 + self.future_tokens + chunk
    }
}

/// The context the DiT reads, `[L, hidden]`: `aex.vlln` (LayerNorm, eps 1e-5) of the
/// backbone's `features`, then the VL self-attention blocks `aex.vlsa` (keys limited by
/// `keys` `[L, L]`; none when `vlsa` has no layers).
pub fn vl_context(
    g: &mut GraphBuilder,
    features: NodeId,
    keys: NodeId,
    vlsa: &BlockStack,
) -> Result<NodeId> {
    let x = layer_norm(g, features, "aex.vlln", 1e-5)?;
    self_attention_stack(g, x, Some(keys), &Scope::new("aex.vlsa"), vlsa)
}

/// How the head's state and action encoders and action decoder store their layers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeadLinears {
    /// One embodiment's `[in, out]` slice, `<layer>.W` and `<layer>.b` (GR00T's
    /// `CategorySpecificLinear`).
    PerEmbodiment,
    /// `nn.Linear`: `<layer>.weight` `[out, in]` and `<layer>.bias` (VLA-JEPA).
    Plain,
}

impl HeadLinears {
    fn apply(self, g: &mut GraphBuilder, x: NodeId, prefix: &str, out: usize) -> Result<NodeId> {
        match self {
            HeadLinears::PerEmbodiment => linear_in_out(g, x, prefix, out),
            HeadLinears::Plain => linear(g, x, prefix, out, true),
        }
    }
}

/// An MLP `<prefix>.{l1, l2}` with ReLU between the layers.
fn mlp(
    g: &mut GraphBuilder,
    x: NodeId,
    prefix: &str,
    widths: [usize; 2],
    kind: HeadLinears,
) -> Result<NodeId> {
    let h = kind.apply(g, x, &format!("{prefix}.l1"), widths[0])?;
    let h = g.relu(h);
    kind.apply(g, h, &format!("{prefix}.l2"), widths[1])
}

/// The chunk's shape: actions per chunk and the padded state and action widths.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkShape {
    pub chunk: usize,
    pub max_state_dim: usize,
    pub max_action_dim: usize,
}

/// A denoise graph's inputs: `x_t` `[chunk, max_action_dim]`, `time_emb` `[chunk, E + 256]`
/// (the action encoder's sinusoid of the bucketed time, then the DiT's timestep projection
/// in the first row), `state` `[1, max_state_dim]` and the cross-attending blocks' `kv.{j}.k`
/// / `kv.{j}.v` `[L, dit_heads, dit_head_dim]`.
pub struct HeadInputs {
    pub x_t: NodeId,
    pub time: NodeId,
    pub state: NodeId,
    pub cross: Vec<(NodeId, NodeId)>,
}

/// The action head of a GR00T-style policy: its sizes, its DiT's, how its encoders and
/// decoder store their layers, and the chunk's shape. Weights under `aex.`.
#[derive(Clone, Copy, Debug)]
pub struct Gr00tHead<'c> {
    pub head: &'c HeadConfig,
    pub dit: &'c BlockStack,
    pub linears: HeadLinears,
    pub io: ChunkShape,
}

impl<'c> Gr00tHead<'c> {
    /// The DiT `aex.dit`, its output `hidden` wide.
    pub fn dit(&self) -> Dit<'c> {
        Dit {
            scope: Scope::new("aex.dit"),
            cfg: self.dit,
            out: self.head.hidden,
        }
    }

    /// The keys and values `[L, dit_heads, dit_head_dim]` every cross-attending DiT block
    /// reads from `context`, in block order (k, v): what a prefill hands the denoising steps.
    pub fn cross_kv(&self, g: &mut GraphBuilder, context: NodeId) -> Result<Vec<NodeId>> {
        self.dit().cross_kv(g, context)
    }

    /// Declares [`HeadInputs`] for a context of `l` tokens.
    pub fn inputs(&self, g: &mut GraphBuilder, l: usize) -> HeadInputs {
        let (c, e, dit) = (self.io.chunk, self.head.embed, self.dit);
        let cross = (0..cross_blocks(dit))
            .map(|j| {
                let shape = [l, dit.heads, dit.head_dim];
                let k = g.input(names::key(j), &shape);
                let v = g.input(names::value(j), &shape);
                (k, v)
            })
            .collect();
        HeadInputs {
            x_t: g.input(names::X_T, &[c, self.io.max_action_dim]),
            time: g.input(names::TIME_EMB, &[c, e + TIMESTEP_CHANNELS]),
            state: g.input(names::STATE, &[1, self.io.max_state_dim]),
            cross,
        }
    }

    /// The velocity `[chunk, max_action_dim]`: state and action tokens (the actions with
    /// their position rows), the future tokens between them, the DiT (cross-attending block
    /// `j` limited to `cross_masks[j]` `[1 + future + chunk, L]`, or unmasked when
    /// `cross_masks` is empty), the action decoder on the action rows.
    pub fn velocity(
        &self,
        g: &mut GraphBuilder,
        inputs: HeadInputs,
        cross_masks: &[NodeId],
    ) -> Result<NodeId> {
        let (head, kind) = (self.head, self.linears);
        let (c, e) = (self.io.chunk, head.embed);
        let state = mlp(g, inputs.state, "aex.state_enc", [head.hidden, e], kind)?;
        let tau = g.slice(inputs.time, 1, 0, e)?;
        let a = kind.apply(g, inputs.x_t, "aex.act_enc.W1", e)?;
        let a = g.concat(&[a, tau], 1)?;
        let a = kind.apply(g, a, "aex.act_enc.W2", e)?;
        let a = g.silu(a);
        let a = kind.apply(g, a, "aex.act_enc.W3", e)?;
        let pos = g.weight("aex.pos_embd.weight", &[head.max_seq_len, e])?;
        let pos = g.slice(pos, 0, 0, c)?;
        let a = g.add(a, pos)?;
        let mut parts = vec![state];
        if head.future_tokens > 0 {
            parts.push(g.weight("aex.future_tokens.weight", &[head.future_tokens, e])?);
        }
        parts.push(a);
        let x = g.concat(&parts, 0)?;
        let proj = g.slice(inputs.time, 0, 0, 1)?;
        let proj = g.slice(proj, 1, e, TIMESTEP_CHANNELS)?;
        let dit = self.dit();
        let temb = dit.time_condition(g, proj)?;
        let out = dit.forward(g, x, temb, &inputs.cross, cross_masks)?;
        let s = head.suffix_len(c);
        let out = g.slice(out, 0, s - c, c)?;
        let widths = [head.hidden, self.io.max_action_dim];
        mlp(g, out, "aex.act_dec", widths, kind)
    }
}
