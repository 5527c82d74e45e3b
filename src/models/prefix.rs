//! A flow policy's prefix: which tokens are real, their positions and attention blocks, and
//! the attention masks the graphs compute from the request's `valid` vector (so no mask
//! crosses the bus; their fixed parts are graph constants).

use crate::graph::{GraphBuilder, NodeId};
use crate::modules::flow::names;
use crate::{Result, Tensor};

/// Named graph inputs.
pub type Inputs = Vec<(String, Tensor<'static>)>;

/// The normalised, padded state as the graphs' `state` input, `[1, max_state_dim]`.
pub fn state_input(state: &[f32]) -> Result<(String, Tensor<'static>)> {
    let t = Tensor::from_f32(vec![1, state.len()], state.to_vec())?;
    Ok((names::STATE.into(), t))
}

/// A run of prefix tokens: `len` tokens, the first `real` of them not padding, in attention
/// block `block`.
#[derive(Clone, Copy, Debug)]
pub struct Segment {
    pub len: usize,
    pub real: usize,
    pub block: usize,
}

/// Validity and positions of one request's prefix, and its attention blocks.
pub struct PrefixLayout {
    /// Per prefix token: not padding.
    pub valid: Vec<bool>,
    /// The reference's `cumsum(pad_mask) - 1`.
    pub positions: Vec<f32>,
    /// Per prefix token: its attention block.
    pub blocks: Vec<usize>,
    pub n_valid: usize,
}

impl Segment {
    pub fn new(len: usize, real: usize, block: usize) -> Self {
        Segment { len, real, block }
    }
}

impl PrefixLayout {
    pub fn new(segments: &[Segment]) -> Self {
        let (mut valid, mut blocks) = (Vec::new(), Vec::new());
        for s in segments {
            valid.extend((0..s.len).map(|i| i < s.real));
            blocks.extend(std::iter::repeat_n(s.block, s.len));
        }
        let mut positions = Vec::with_capacity(valid.len());
        let mut count = 0f32;
        for &v in &valid {
            count += f32::from(u8::from(v));
            positions.push(count - 1.0);
        }
        let n_valid = valid.iter().filter(|&&v| v).count();
        PrefixLayout {
            valid,
            positions,
            blocks,
            n_valid,
        }
    }

    /// A causal prefix of `len` tokens, the first `n_real` real (one attention block each).
    pub fn causal(len: usize, n_real: usize) -> Self {
        let segments: Vec<Segment> = (0..len)
            .map(|i| Segment::new(1, usize::from(i < n_real), i))
            .collect();
        PrefixLayout::new(&segments)
    }

    /// The prefill's `positions` `[P]`, `valid` `[P]` (1 at real tokens; the masks are
    /// built from it in the graphs, [`Self::allowed`] and [`valid_rows`]) and instruction
    /// `tokens` `[L]` (padded ids as f32).
    pub fn into_inputs(self, tokens: Vec<f32>) -> Result<Inputs> {
        let valid = self.valid_input()?;
        let p = self.valid.len();
        Ok(vec![
            (
                "positions".into(),
                Tensor::from_f32(vec![p], self.positions)?,
            ),
            (VALID.into(), valid),
            (
                names::TOKENS.into(),
                Tensor::from_f32(vec![tokens.len()], tokens)?,
            ),
        ])
    }

    /// The [`VALID`] input `[P]`: 1 at real tokens, 0 at padding.
    pub fn valid_input(&self) -> Result<Tensor<'static>> {
        let valid = self.valid.iter().map(|&v| f32::from(u8::from(v)));
        Tensor::from_f32(vec![self.valid.len()], valid.collect::<Vec<_>>())
    }

    /// The prefill's `[P, P]` allowed matrix, computed in the graph from the request's
    /// `valid` `[P]` and this layout's blocks (constants): a real token sees the real tokens
    /// of its own and earlier blocks (the references' block-causal `att_masks`); a padding
    /// token sees only itself, so no row is empty (padding keys stay invisible to real
    /// tokens, so this changes nothing the model outputs). As `off * valid_j * valid_i +
    /// eye`, with `off` the block structure off the diagonal.
    pub fn allowed(&self, g: &mut GraphBuilder, valid: NodeId) -> Result<NodeId> {
        let (p, b) = (self.blocks.len(), &self.blocks);
        let off = mask_constant(g, "mask.prefix_blocks", p, p, |i, j| i != j && b[j] <= b[i])?;
        let eye = mask_constant(g, "mask.prefix_eye", p, p, |i, j| i == j)?;
        let row = g.reshape(valid, &[1, p])?;
        let col = g.reshape(valid, &[p, 1])?;
        let m = g.mul(off, row)?;
        let m = g.mul(m, col)?;
        g.add(m, eye)
    }
}

/// The name of the prefill's (and denoise's) `[P]` input that is 1 at real prefix tokens.
pub const VALID: &str = "valid";

/// `[rows, P]`: `valid` `[P]` in every row, a suffix's view of the prefix (computed in the
/// graph).
pub fn valid_rows(g: &mut GraphBuilder, valid: NodeId, rows: usize) -> Result<NodeId> {
    let p = g.shape(valid).iter().product();
    let ones = Tensor::from_f32(vec![rows, 1], vec![1.0; rows])?;
    let ones = g.constant(&format!("mask.ones.{rows}"), ones)?;
    let row = g.reshape(valid, &[1, p])?;
    g.mul(ones, row)
}

/// A `[rows, cols]` 0/1 constant of the graph: `f(i, j)` per entry (a mask's fixed part).
pub fn mask_constant(
    g: &mut GraphBuilder,
    name: &str,
    rows: usize,
    cols: usize,
    f: impl Fn(usize, usize) -> bool,
) -> Result<NodeId> {
    let m = (0..rows * cols).map(|k| f32::from(u8::from(f(k / cols, k % cols))));
    g.constant(
        name,
        Tensor::from_f32(vec![rows, cols], m.collect::<Vec<_>>())?,
    )
}
