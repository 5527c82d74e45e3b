//! Qwen3-VL's language-model side: interleaved multimodal RoPE (positions `(t, h, w)` per
//! token; text tokens have three equal positions, an image's tokens their grid's) and
//! "deepstack" (vision features added to the hidden states at the image tokens after the
//! first decoder layers). The decoder layers are [`super::decoder::DecoderStack`] (Qwen3:
//! QK-norm) with [`super::decoder::Rotary::Tables`] and the deepstack features as its row
//! additions.

use super::decoder::{DecoderConfig, DecoderStack, LmConfig, Rotary};
use super::flow::names;
use super::qwen_vision::{camera_block, QwenVisionConfig};
use crate::config::{first_failing, Keys, Section};
use crate::graph::{GraphBuilder, NodeId};
use crate::layers::{place_rows, scatter_rows, splice_rows};
use crate::{Error, Result, Tensor};

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

/// An image in the sequence: its first token, its frames (1: a still image; more where a
/// client's sequence holds several cameras' tokens in one run, which the positions read as
/// a clip of that many frames, as vla.cpp does) and its merged grid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImageSpan {
    pub start: usize,
    pub frames: usize,
    pub grid_h: usize,
    pub grid_w: usize,
}

impl ImageSpan {
    /// A still image at `start`.
    pub fn still(start: usize, grid_h: usize, grid_w: usize) -> Self {
        ImageSpan {
            start,
            frames: 1,
            grid_h,
            grid_w,
        }
    }

    pub fn len(&self) -> usize {
        self.frames * self.grid_h * self.grid_w
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Where a prompt's image tokens go: fixed spans (a template's), or where the request's
/// sequence holds them (a file without a template: vla.cpp's), from the inputs
/// [`names::IMAGE_PLACES`], [`names::TEXT_KEEP`] and the rotary tables [`MROPE_COS`],
/// [`MROPE_SIN`] ([`client_spans`], [`mrope_inputs`]).
pub enum Images {
    Spans(Vec<ImageRows>),
    Placed {
        /// Every camera's merged tokens `[n, hidden]`, then each tap's deepstack features.
        merged: NodeId,
        deepstack: Vec<NodeId>,
        places: NodeId,
        keep: NodeId,
    },
}

/// The rotary tables' inputs of a client's sequence, `[L, 1, head_dim]`.
pub const MROPE_COS: &str = "mrope_cos";
pub const MROPE_SIN: &str = "mrope_sin";

impl Images {
    /// The vision graph's output `rows` ([`super::qwen_vision::towers_side_by_side`]) placed
    /// by a request over a sequence of `l` tokens: inputs [`names::IMAGE_PLACES`] `[1, l,
    /// n]` and [`names::TEXT_KEEP`] `[l, 1]`.
    pub fn placed(
        g: &mut GraphBuilder,
        rows: NodeId,
        vision: &QwenVisionConfig,
        l: usize,
    ) -> Result<Self> {
        let (n, h) = (g.shape(rows)[0], vision.out);
        let block = |g: &mut GraphBuilder, k: usize| g.slice(rows, 1, k * h, h);
        Ok(Images::Placed {
            merged: block(g, 0)?,
            deepstack: (1..=vision.deepstack.len())
                .map(|k| block(g, k))
                .collect::<Result<_>>()?,
            places: g.input(names::IMAGE_PLACES, &[1, l, n]),
            keep: g.input(names::TEXT_KEEP, &[l, 1]),
        })
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
        images: &Images,
        mask: NodeId,
    ) -> Result<NodeId> {
        let QwenText { lm, attn, mrope } = *self;
        let l = g.shape(tokens)[0];
        let table = g.weight("token_embd.weight", &[lm.vocab_size, lm.hidden])?;
        let text = g.embedding(table, tokens)?;
        let shape = vec![l, 1, attn.head_dim];
        let (x, adds, cos, sin) = match images {
            Images::Spans(images) => {
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
                let (cos, sin) =
                    mrope_tables(&positions, attn.head_dim, attn.rope_theta, mrope.sections);
                let cos = g.constant("vlm.mrope_cos", Tensor::from_f32(shape.clone(), cos)?)?;
                let sin = g.constant("vlm.mrope_sin", Tensor::from_f32(shape, sin)?)?;
                (x, adds, cos, sin)
            }
            Images::Placed {
                merged,
                deepstack,
                places,
                keep,
            } => {
                let x = place_rows(g, text, *merged, *places, *keep)?;
                let adds = deepstack
                    .iter()
                    .map(|&f| Ok(vec![(0, scatter_rows(g, f, *places)?)]))
                    .collect::<Result<Vec<_>>>()?;
                let cos = g.input(MROPE_COS, &shape);
                let sin = g.input(MROPE_SIN, &shape);
                (x, adds, cos, sin)
            }
        };
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

/// `(t, h, w)` positions of a sequence of `len` tokens with `images` (sorted), as the
/// reference's `get_rope_index`: text counts on from the previous token; an image's tokens
/// are `(p + frame, p + row, p + col)` with `p` the position after the text before it; the
/// text after an image resumes at `p + max(frames, grid_h, grid_w)`.
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
        for f in 0..im.frames {
            for r in 0..im.grid_h {
                for c in 0..im.grid_w {
                    let p = [next + f, next + r, next + c];
                    out.push(p.map(|x| x as f32));
                }
            }
        }
        next += im.frames.max(im.grid_h).max(im.grid_w);
    }
    let rest = len - out.len();
    text(&mut out, &mut next, rest);
    out
}

/// The images of a client's sequence `seq` (ids as f32): each run of `image` ids, read as
/// `len / (grid_h * grid_w)` frames of the merged grid (vla.cpp's reading of its files'
/// sequences); an error where a run is not whole frames.
pub fn client_spans(
    seq: &[f32],
    image: u32,
    (grid_h, grid_w): (usize, usize),
) -> Result<Vec<ImageSpan>> {
    let (per, mut spans, mut i) = (grid_h * grid_w, Vec::new(), 0);
    while i < seq.len() {
        if seq[i] != image as f32 {
            i += 1;
            continue;
        }
        let len = seq[i..].iter().take_while(|&&t| t == image as f32).count();
        if per == 0 || len % per != 0 {
            return Err(Error::InvalidArgument(format!(
                "a run of {len} image tokens at position {i}: each camera takes {per}"
            )));
        }
        spans.push(ImageSpan {
            start: i,
            frames: len / per,
            grid_h,
            grid_w,
        });
        i += len;
    }
    Ok(spans)
}

/// The rotary inputs [`MROPE_COS`] and [`MROPE_SIN`] `[len, 1, head_dim]` of a sequence of
/// `len` tokens with `images` ([`mrope_positions`], [`mrope_tables`]).
pub fn mrope_inputs(
    len: usize,
    images: &[ImageSpan],
    attn: &DecoderConfig,
    mrope: &MropeConfig,
) -> Result<Vec<(String, Tensor<'static>)>> {
    let positions = mrope_positions(len, images);
    let (cos, sin) = mrope_tables(&positions, attn.head_dim, attn.rope_theta, mrope.sections);
    let shape = vec![len, 1, attn.head_dim];
    Ok(vec![
        (MROPE_COS.into(), Tensor::from_f32(shape.clone(), cos)?),
        (MROPE_SIN.into(), Tensor::from_f32(shape, sin)?),
    ])
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
        let span = ImageSpan::still(5, 2, 2);
        let p = mrope_positions(16, &[span]);
        let col = |k: usize| p.iter().map(|x| x[k] as usize).collect::<Vec<_>>();
        assert_eq!(col(0), [0, 1, 2, 3, 4, 5, 5, 5, 5, 7, 8, 9, 10, 11, 12, 13]);
        assert_eq!(col(1), [0, 1, 2, 3, 4, 5, 5, 6, 6, 7, 8, 9, 10, 11, 12, 13]);
        assert_eq!(col(2), [0, 1, 2, 3, 4, 5, 6, 5, 6, 7, 8, 9, 10, 11, 12, 13]);
    }

    #[test]
    fn a_clients_runs_are_frames_of_the_grid() {
        // two cameras of 2 x 2 tokens: apart, or in one run (two frames, vla.cpp's reading)
        let seq = |v: &[u32]| v.iter().map(|&t| t as f32).collect::<Vec<_>>();
        let apart = client_spans(&seq(&[1, 9, 9, 9, 9, 2, 9, 9, 9, 9, 3]), 9, (2, 2)).unwrap();
        assert_eq!(
            apart,
            [ImageSpan::still(1, 2, 2), ImageSpan::still(6, 2, 2)]
        );
        let run = client_spans(&seq(&[9; 8]), 9, (2, 2)).unwrap();
        assert_eq!(run.len(), 1);
        assert_eq!((run[0].frames, run[0].len()), (2, 8));
        let p = mrope_positions(9, &run);
        let t: Vec<usize> = p.iter().map(|x| x[0] as usize).collect();
        assert_eq!(t, [0, 0, 0, 0, 1, 1, 1, 1, 2]);
        let e = client_spans(&seq(&[1, 9, 9, 9]), 9, (2, 2)).unwrap_err();
        assert!(e.to_string().contains("run of 3"), "{e}");
    }
}
