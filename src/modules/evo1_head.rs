//! Evo-1's flow-matching action head (lerobot `evo1`'s `FlowmatchingActionHead`): the
//! language model's features plus one state row form a context; the chunk's action tokens
//! (an MLP over each noisy action row plus a sinusoid row per position) pass through
//! cross-attention-only blocks (`nn.MultiheadAttention` over the context, which is not
//! normalised; a tanh-free GELU feed-forward whose input is the second norm plus the time
//! embedding); the blocks' output is normalised, flattened, pooled to one vector by a
//! linear map and decoded by an MLP into the whole `[chunk, max_action_dim]` velocity.
//!
//! Weights under `aex.`: `state_enc.fc{1,2}`, `action_enc.W{1,2,3}`, `action_enc.pos`
//! (`[chunk, E]`, the stored sinusoid rows), `time_pos` (`[TIME_ROWS, E]`, likewise),
//! `blk.{i}.{norm1, attn_q, attn_k, attn_v, attn_o, norm2, ff1, ff2}`, `norm_out`,
//! `seq_pool` (`[E, chunk * E]`), `head.fc{1,2}`.

use crate::config::limits::MAX_LAYERS;
use crate::config::{bounded, first_failing, positive, Keys, Section};
use crate::graph::{GraphBuilder, NodeId};
use crate::layers::{attend, layer_norm, linear, split_heads, Scope};
use crate::modules::flow::Schedule;
use crate::{Result, Tensor};

/// Rows of the time sinusoid table (the reference's `max_len`); step `i` of `N` reads row
/// `int(i / N * (TIME_ROWS - 1))`: [`SCHEDULE`]'s model time.
pub const TIME_ROWS: usize = 1000;
/// Euler from noise (t = 0) to data in equal steps, the model seeing the table row.
pub const SCHEDULE: Schedule = Schedule::ZeroToOneBucketed {
    buckets: TIME_ROWS - 1,
};
/// `nn.LayerNorm`'s default epsilon (every norm of the head).
const EPS: f32 = 1e-5;

/// The head's sizes. Keys: `head_embed` (E, the language model's width), `head_heads`,
/// `head_layers`, `head_hidden` (the output MLP), `head_state_hidden` (the state MLP).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Evo1HeadConfig {
    pub embed: usize,
    pub heads: usize,
    pub layers: usize,
    pub hidden: usize,
    pub state_hidden: usize,
}

impl Section for Evo1HeadConfig {
    fn keys(&mut self, k: &mut dyn Keys) -> Result<()> {
        k.usize("head_embed", &mut self.embed)?;
        k.usize("head_heads", &mut self.heads)?;
        k.usize("head_layers", &mut self.layers)?;
        k.usize("head_hidden", &mut self.hidden)?;
        k.usize("head_state_hidden", &mut self.state_hidden)
    }

    fn check(&self) -> std::result::Result<(), String> {
        positive("head_hidden", self.hidden)?;
        positive("head_state_hidden", self.state_hidden)?;
        bounded("head_layers", self.layers, 1, MAX_LAYERS)?;
        first_failing(&[(
            self.heads > 0 && self.embed > 0 && self.embed.is_multiple_of(self.heads),
            "head_embed must be a positive multiple of head_heads",
        )])
    }
}

/// A denoise graph's head inputs: `x_t` `[chunk, A]`, the time input ([`time_one_hot`]
/// of the row [`SCHEDULE`] gives) and `action_mask` `[A]` (1 at real action dimensions).
#[derive(Clone, Copy, Debug)]
pub struct HeadInputs {
    pub x_t: NodeId,
    pub time: NodeId,
    pub action_mask: NodeId,
}

impl Evo1HeadConfig {
    fn head_dim(&self) -> usize {
        self.embed / self.heads
    }

    /// Block `i`'s weights, `aex.blk.{i}`.
    fn block(&self, i: usize) -> Scope {
        Scope::new("aex.blk").pp(i)
    }

    /// The context `[T + 1, E]`: the features `[T, E]` and the state's row (`state` `[1,
    /// max_state_dim]`, normalised, through `state_enc`).
    pub fn context(&self, g: &mut GraphBuilder, features: NodeId, state: NodeId) -> Result<NodeId> {
        let s = linear(g, state, "aex.state_enc.fc1", self.state_hidden, true)?;
        let s = g.relu(s);
        let s = linear(g, s, "aex.state_enc.fc2", self.embed, true)?;
        g.concat(&[features, s], 0)
    }

    /// Keys and values `[T + 1, heads, head_dim]` of every block over `context`, in block
    /// order (k, v): the same at every denoising step.
    pub fn cross_kv(&self, g: &mut GraphBuilder, context: NodeId) -> Result<Vec<NodeId>> {
        let mut out = Vec::with_capacity(2 * self.layers);
        for i in 0..self.layers {
            for which in ["attn_k", "attn_v"] {
                let y = linear(g, context, &self.block(i).pp(which), self.embed, true)?;
                out.push(split_heads(g, y, self.heads, self.head_dim())?);
            }
        }
        Ok(out)
    }

    /// The velocity `[chunk, A]` at `inputs.x_t` (multiplied by the action mask before and
    /// after) and time `inputs.time`, over [`Self::cross_kv`]'s `kv` with `allowed`
    /// `[chunk, T + 1]` (the context rows each action row may attend to).
    pub fn velocity(
        &self,
        g: &mut GraphBuilder,
        inputs: HeadInputs,
        kv: &[NodeId],
        allowed: NodeId,
    ) -> Result<NodeId> {
        let HeadInputs {
            x_t,
            time,
            action_mask,
        } = inputs;
        let (chunk, dim) = (g.shape(x_t)[0], g.shape(x_t)[1]);
        let e = self.embed;
        let table = g.weight("aex.time_pos.weight", &[TIME_ROWS, e])?;
        let table = g.reshape(table, &[1, TIME_ROWS, e])?;
        let temb = g.bmm(time, table, false)?;
        let temb = g.reshape(temb, &[1, e])?;
        let x = g.mul(x_t, action_mask)?;
        let a = linear(g, x, "aex.action_enc.W1", e, true)?;
        let a = g.relu(a);
        let pos = g.weight("aex.action_enc.pos.weight", &[chunk, e])?;
        let a = g.add(a, pos)?;
        let a = linear(g, a, "aex.action_enc.W2", e, true)?;
        let a = g.relu(a);
        let mut x = linear(g, a, "aex.action_enc.W3", e, true)?;
        for (i, pair) in kv.chunks(2).enumerate().take(self.layers) {
            let p = self.block(i);
            let h = layer_norm(g, x, &p.pp("norm1"), EPS)?;
            let q = linear(g, h, &p.pp("attn_q"), e, true)?;
            let q = split_heads(g, q, self.heads, self.head_dim())?;
            let o = attend(g, q, &[(pair[0], pair[1])], Some(allowed))?;
            let o = linear(g, o, &p.pp("attn_o"), e, true)?;
            x = g.add(x, o)?;
            let h = layer_norm(g, x, &p.pp("norm2"), EPS)?;
            let h = g.add(h, temb)?;
            let h = linear(g, h, &p.pp("ff1"), 4 * e, true)?;
            let h = g.gelu_erf(h);
            let h = linear(g, h, &p.pp("ff2"), e, true)?;
            x = g.add(x, h)?;
        }
        let x = layer_norm(g, x, "aex.norm_out", EPS)?;
        let flat = g.reshape(x, &[1, chunk * e])?;
        let pooled = linear(g, flat, "aex.seq_pool", e, true)?;
        let h = linear(g, pooled, "aex.head.fc1", self.hidden, true)?;
        let h = g.relu(h);
        let v = linear(g, h, "aex.head.fc2", chunk * dim, true)?;
        let v = g.reshape(v, &[chunk, dim])?;
        g.mul(v, action_mask)
    }
}

/// The time input selecting row `row` of the time table: one-hot `[1, 1, TIME_ROWS]` (a
/// product with the table, which every backend runs exactly, where an embedding lookup by a
/// graph constant is not available on every backend).
pub fn time_one_hot(row: usize) -> Result<Tensor<'static>> {
    let mut v = vec![0f32; TIME_ROWS];
    v[row.min(TIME_ROWS - 1)] = 1.0;
    Tensor::from_f32(vec![1, 1, TIME_ROWS], v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_rows_truncate_like_the_reference() {
        // The reference's rows int(i / N * 999), Python float arithmetic.
        let rows = |n: usize| {
            SCHEDULE
                .steps(n)
                .iter()
                .map(|s| s.0 as usize)
                .collect::<Vec<_>>()
        };
        assert_eq!(rows(4), vec![0, 249, 499, 749]);
        let r32 = rows(32);
        assert_eq!(&r32[..6], &[0, 31, 62, 93, 124, 156]);
        assert_eq!(r32[31], 967);
        // Where f32 time would truncate the other way (184).
        assert_eq!(rows(27)[5], 185);
    }
}
