//! Qwen3-VL's language-model side: interleaved multimodal RoPE (positions `(t, h, w)` per
//! token; text tokens have three equal positions, an image's tokens their grid's) and
//! "deepstack" (vision features added to the hidden states at the image tokens after the
//! first decoder layers). The decoder layers are [`super::decoder::DecoderStack`] (Qwen3:
//! QK-norm) with [`super::decoder::Rotary::Tables`] and the deepstack features as its row
//! additions.

use super::decoder::{DecoderConfig, DecoderStack, LmConfig, Rotary};
use super::qwen_vision::{camera_block, QwenVisionConfig};
use crate::config::{first_failing, Keys, Section};
use crate::graph::{GraphBuilder, NodeId};
use crate::layers::splice_rows;
use crate::{Result, Tensor};

/// The multimodal RoPE's frequency sections `[t, h, w]` (they sum to half the head width).
/// Keys: `mrope_section_t`, `mrope_section_h`, `mrope_section_w`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MropeConfig {
    pub sections: [usize; 3],
}

impl Section for MropeConfig {
    fn keys(&mut self, k: &mut dyn Keys) -> Result<()> {
        let [t, h, w] = &mut self.sections;
        k.usize("mrope_section_t", t)?;
        k.usize("mrope_section_h", h)?;
        k.usize("mrope_section_w", w)
    }

    fn check(&self) -> std::result::Result<(), String> {
        let [_, h, w] = self.sections;
        first_failing(&[(
            h <= 4096 && w <= 4096,
            "mrope_section_h and mrope_section_w must be at most 4096",
        )])
    }
}

impl MropeConfig {
    /// Whether the sections fill a head of `head_dim`.
    pub fn fits(&self, head_dim: usize) -> bool {
        self.sections.iter().sum::<usize>() * 2 == head_dim
    }
}

/// An image in the sequence: its first token and its merged grid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImageSpan {
    pub start: usize,
    pub grid_h: usize,
    pub grid_w: usize,
}

impl ImageSpan {
    pub fn len(&self) -> usize {
        self.grid_h * self.grid_w
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One image of a prompt: where its tokens go, its merged tokens and its deepstack features
/// (`[span.len(), hidden]` each).
pub struct ImageRows {
    pub span: ImageSpan,
    pub merged: NodeId,
    pub deepstack: Vec<NodeId>,
}

impl ImageRows {
    /// Each camera's merged tokens and deepstack features from the vision graph's output
    /// `rows` ([`super::qwen_vision::towers_side_by_side`]), camera `i` at `spans[i]`.
    pub fn of_cameras(
        g: &mut GraphBuilder,
        rows: NodeId,
        vision: &QwenVisionConfig,
        spans: Vec<ImageSpan>,
    ) -> Result<Vec<ImageRows>> {
        let taps = vision.deepstack.len();
        spans
            .into_iter()
            .enumerate()
            .map(|(i, span)| {
                Ok(ImageRows {
                    span,
                    merged: camera_block(g, rows, vision, i, 0)?,
                    deepstack: (1..=taps)
                        .map(|k| camera_block(g, rows, vision, i, k))
                        .collect::<Result<_>>()?,
                })
            })
            .collect()
    }
}

/// The Qwen3-VL language model over `tokens` `[L]` (ids, embedded by `token_embd.weight`)
/// with each image's merged tokens in place of its span, `lm.n_layers` decoder layers
/// `vlm.blk.*` under `mask` `[L, L]`, rotated by the M-RoPE tables of [`mrope_positions`]
/// (graph constants), the deepstack features `j` added at the image rows after layer `j`:
/// the last layer's output, before any final norm, `[L, hidden]`.
#[derive(Clone, Copy, Debug)]
pub struct QwenText<'c> {
    pub lm: &'c LmConfig,
    pub attn: &'c DecoderConfig,
    pub mrope: &'c MropeConfig,
}

impl QwenText<'_> {
    /// The stack's output over `tokens` with `images` spliced in, under `mask` (above).
    pub fn features(
        &self,
        g: &mut GraphBuilder,
        tokens: NodeId,
        images: &[ImageRows],
        mask: NodeId,
    ) -> Result<NodeId> {
        let QwenText { lm, attn, mrope } = *self;
        let l = g.shape(tokens)[0];
        let table = g.weight("token_embd.weight", &[lm.vocab_size, lm.hidden])?;
        let text = g.embedding(table, tokens)?;
        let pieces: Vec<(usize, NodeId)> =
            images.iter().map(|im| (im.span.start, im.merged)).collect();
        let x = splice_rows(g, text, &pieces, false)?;
        let taps = images
            .iter()
            .map(|im| im.deepstack.len())
            .max()
            .unwrap_or(0);
        let adds: Vec<Vec<(usize, NodeId)>> = (0..taps)
            .map(|j| {
                images
                    .iter()
                    .filter_map(|im| im.deepstack.get(j).map(|&f| (im.span.start, f)))
                    .collect()
            })
            .collect();
        let spans: Vec<ImageSpan> = images.iter().map(|im| im.span).collect();
        let positions = mrope_positions(l, &spans);
        let (cos, sin) = mrope_tables(&positions, attn.head_dim, attn.rope_theta, mrope.sections);
        let shape = vec![l, 1, attn.head_dim];
        let cos = g.constant("vlm.mrope_cos", Tensor::from_f32(shape.clone(), cos)?)?;
        let sin = g.constant("vlm.mrope_sin", Tensor::from_f32(shape, sin)?)?;
        let rotary = Rotary::Tables { cos, sin };
        let stack = DecoderStack {
            stack: "vlm",
            layers: lm.n_layers,
            inter: lm.inter,
            cfg: attn,
        };
        stack.forward(g, x, rotary, Some(mask), &adds)
    }
}

/// `(t, h, w)` positions of a sequence of `len` tokens with `images` (sorted) for one still
/// frame each, as the reference's `get_rope_index`: text counts on from the previous token;
/// an image's tokens are `(p, p + row, p + col)` with `p` the position after the text before
/// it; the text after an image resumes at `p + max(grid_h, grid_w)`.
pub fn mrope_positions(len: usize, images: &[ImageSpan]) -> Vec<[f32; 3]> {
    let mut out = Vec::with_capacity(len);
    let mut next = 0usize;
    let text = |out: &mut Vec<[f32; 3]>, next: &mut usize, n: usize| {
        for _ in 0..n {
            out.push([*next as f32; 3]);
            *next += 1;
        }
    };
    for im in images {
        let n = im.start - out.len();
        text(&mut out, &mut next, n);
        for r in 0..im.grid_h {
            for c in 0..im.grid_w {
                out.push([next as f32, (next + r) as f32, (next + c) as f32]);
            }
        }
        next += im.grid_h.max(im.grid_w);
    }
    let rest = len - out.len();
    text(&mut out, &mut next, rest);
    out
}

/// The `cos` / `sin` tables `[T, head_dim]` of `positions`: frequency `f_i = theta^(-2i /
/// head_dim)` turns with `h` when `i % 3 == 1` and `i < 3 sections[1]`, with `w` when
/// `i % 3 == 2` and `i < 3 sections[2]`, else with `t` (the interleaved layout); the second
/// half of a head repeats the first. In f32, as the reference.
pub fn mrope_tables(
    positions: &[[f32; 3]],
    head_dim: usize,
    theta: f32,
    sections: [usize; 3],
) -> (Vec<f32>, Vec<f32>) {
    let half = head_dim / 2;
    let inv: Vec<f32> = (0..half)
        .map(|i| 1.0 / theta.powf((2 * i) as f32 / head_dim as f32))
        .collect();
    let axis = |i: usize| match i % 3 {
        1 if i < 3 * sections[1] => 1,
        2 if i < 3 * sections[2] => 2,
        _ => 0,
    };
    let (mut cos, mut sin) = (Vec::new(), Vec::new());
    for p in positions {
        let f: Vec<f32> = (0..half).map(|i| p[axis(i)] * inv[i]).collect();
        for _ in 0..2 {
            cos.extend(f.iter().map(|a| a.cos()));
            sin.extend(f.iter().map(|a| a.sin()));
        }
    }
    (cos, sin)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_follow_get_rope_index() {
        // 5 text tokens, a 2 x 2 image, 7 more: what transformers 4.57 computes.
        let span = ImageSpan {
            start: 5,
            grid_h: 2,
            grid_w: 2,
        };
        let p = mrope_positions(16, &[span]);
        let col = |k: usize| p.iter().map(|x| x[k] as usize).collect::<Vec<_>>();
        assert_eq!(col(0), [0, 1, 2, 3, 4, 5, 5, 5, 5, 7, 8, 9, 10, 11, 12, 13]);
        assert_eq!(col(1), [0, 1, 2, 3, 4, 5, 5, 6, 6, 7, 8, 9, 10, 11, 12, 13]);
        assert_eq!(col(2), [0, 1, 2, 3, 4, 5, 6, 5, 6, 7, 8, 9, 10, 11, 12, 13]);
    }
}
