//! The Qwen3-VL vision tower (GR00T N1.7, VLA-JEPA): patch embedding, a learned position
//! table resampled to the image's grid, pre-LayerNorm blocks with fused QKV and 2-D rotary
//! positions (row and column frequencies in the two quarters of each half of a head), a
//! 2 x 2 patch merger, and "deepstack" mergers tapping intermediate blocks.
//!
//! Still images only: the reference's Conv3d over two copies of the frame
//! (`temporal_patch_size` 2) equals a 2-D patch embedding whose kernel is the sum of the two
//! temporal slices, and the position table is resampled once for the fixed grid; the
//! converter stores both that way (`vit.patch_embd`, `vit.pos_embd` `[h * w, D]`). Tokens run
//! through the blocks in row-major order (attention over one image is order-free; the rotary
//! tables follow the same order) and are grouped into merge blocks at the mergers.
//!
//! Weights under `<prefix>.`: `patch_embd`, `pos_embd`, `blk.{i}.{ln1, attn_qkv, attn_o, ln2,
//! fc1, fc2}`, `merger.{norm, fc1, fc2}`, `deepstack.{j}.{norm, fc1, fc2}`.

use crate::config::limits::{MAX_LAYERS, MAX_PATCHES_PER_SIDE};
use crate::config::{bounded, first_failing, positive, Keys, Section};
use crate::graph::{GraphBuilder, NodeId};
use crate::layers::{attend, layer_norm, linear, rope_tables, split_heads, Scope};
use crate::modules::flow::names;
use crate::{Result, Tensor};

/// LayerNorm epsilon everywhere in the tower.
const EPS: f32 = 1e-6;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct QwenVisionConfig {
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    pub inter: usize,
    /// Frame height and width (multiples of `patch_size * merge`).
    pub image_h: usize,
    pub image_w: usize,
    pub patch_size: usize,
    /// Side of the patch blocks the mergers fold into one token (2).
    pub merge: usize,
    /// Width of the merged tokens (the language model's).
    pub out: usize,
    /// Blocks whose outputs feed a deepstack merger, in order.
    pub deepstack: Vec<usize>,
}

/// Keys: `vit_hidden`, `vit_layers`, `vit_heads`, `vit_inter`, `image_height`, `image_width`,
/// `patch_size`, `vit_merge`; `out` is the language model's width and `deepstack` an array
/// the arch stores ([`DEEPSTACK_KEY`]).
impl Section for QwenVisionConfig {
    fn keys(&mut self, k: &mut dyn Keys) -> Result<()> {
        k.usize("vit_hidden", &mut self.hidden)?;
        k.usize("vit_layers", &mut self.layers)?;
        k.usize("vit_heads", &mut self.heads)?;
        k.usize("vit_inter", &mut self.inter)?;
        k.usize("image_height", &mut self.image_h)?;
        k.usize("image_width", &mut self.image_w)?;
        k.usize("patch_size", &mut self.patch_size)?;
        k.usize("vit_merge", &mut self.merge)
    }

    fn check(&self) -> std::result::Result<(), String> {
        positive("vit_inter", self.inter)?;
        bounded("vit_layers", self.layers, 1, MAX_LAYERS)?;
        bounded("vit_merge", self.merge, 1, 16)?;
        let block = self.patch_size * self.merge;
        let fits = |side: usize| {
            block > 0
                && side > 0
                && side.is_multiple_of(block)
                && side / block <= MAX_PATCHES_PER_SIDE
        };
        let mut sorted = self.deepstack.clone();
        sorted.dedup();
        first_failing(&[
            (
                self.heads > 0 && self.hidden.is_multiple_of(self.heads),
                "vit_hidden must be a positive multiple of vit_heads",
            ),
            (
                self.heads > 0 && (self.hidden / self.heads).is_multiple_of(4) && self.hidden > 0,
                "the tower's head width (vit_hidden / vit_heads) must be a multiple of 4",
            ),
            (
                fits(self.image_h) && fits(self.image_w),
                "image_height and image_width must be multiples of patch_size x vit_merge (at most 1024 merged blocks a side)",
            ),
            (
                self.deepstack.iter().all(|&l| l < self.layers)
                    && sorted.len() == self.deepstack.len()
                    && self.deepstack.is_sorted(),
                "vit_deepstack_layers must be increasing tower layers",
            ),
        ])
    }
}

/// The `<arch>.` metadata array of the tower's deepstack taps.
pub const DEEPSTACK_KEY: &str = "vit_deepstack_layers";

impl QwenVisionConfig {
    /// Patch rows and columns.
    pub fn grid(&self) -> (usize, usize) {
        (
            self.image_h / self.patch_size,
            self.image_w / self.patch_size,
        )
    }

    /// Tokens per image after merging.
    pub fn n_tokens(&self) -> usize {
        let (h, w) = self.grid();
        (h / self.merge) * (w / self.merge)
    }
}

/// The rotary tables `(cos, sin)` `[rows * cols, head_dim]` of row-major patches: frequency
/// `j < head_dim / 4` turns with the patch's row, the next quarter with its column, and the
/// second half repeats the first (`rotate_half` layout); `f_j = 10000^(-4j / head_dim)`, in
/// f32 as the reference computes them.
pub fn rotary_tables(rows: usize, cols: usize, head_dim: usize) -> (Vec<f32>, Vec<f32>) {
    let quarter = head_dim / 4;
    let inv: Vec<f32> = (0..quarter)
        .map(|j| 1.0 / 10000f32.powf((2 * j) as f32 / (head_dim / 2) as f32))
        .collect();
    let (mut cos, mut sin) = (Vec::new(), Vec::new());
    for t in 0..rows * cols {
        let (r, c) = ((t / cols) as f32, (t % cols) as f32);
        let half: Vec<f32> = inv
            .iter()
            .map(|f| r * f)
            .chain(inv.iter().map(|f| c * f))
            .collect();
        for _ in 0..2 {
            cos.extend(half.iter().map(|a| a.cos()));
            sin.extend(half.iter().map(|a| a.sin()));
        }
    }
    (cos, sin)
}

/// `[S, D]` row-major tokens of a `rows x cols` grid -> `[S / m^2, m^2 D]`: each `m x m`
/// block's tokens concatenated in row-major order (the reference's merge-block order).
fn group_blocks(
    g: &mut GraphBuilder,
    x: NodeId,
    (rows, cols): (usize, usize),
    m: usize,
) -> Result<NodeId> {
    let d = g.shape(x)[1];
    let x = g.reshape(x, &[rows / m, m, cols / m, m * d])?;
    let x = g.permute(x, &[0, 2, 1, 3])?;
    g.reshape(x, &[(rows / m) * (cols / m), m * m * d])
}

/// A patch merger `<p>.{norm, fc1, fc2}`: LayerNorm per token before grouping (the final
/// merger) or over the grouped vector (`post_norm`, the deepstack ones), then
/// `fc2(gelu_erf(fc1(.)))`.
fn merger(
    g: &mut GraphBuilder,
    x: NodeId,
    p: &Scope,
    cfg: &QwenVisionConfig,
    post_norm: bool,
) -> Result<NodeId> {
    let (grid, m) = (cfg.grid(), cfg.merge);
    let x = match post_norm {
        true => {
            let x = group_blocks(g, x, grid, m)?;
            layer_norm(g, x, &p.pp("norm"), EPS)?
        }
        false => {
            let x = layer_norm(g, x, &p.pp("norm"), EPS)?;
            group_blocks(g, x, grid, m)?
        }
    };
    let wide = cfg.hidden * m * m;
    let x = linear(g, x, &p.pp("fc1"), wide, true)?;
    let x = g.gelu_erf(x);
    linear(g, x, &p.pp("fc2"), cfg.out, true)
}

/// Inputs `image.{i}` `[3, H, W]` for `n_images` cameras through the tower -> `[n_images * T,
/// (1 + taps) * out]`: per camera its merged tokens, then each deepstack tap's features, side
/// by side (one output, as a flow policy's vision graph returns).
pub fn towers_side_by_side(
    g: &mut GraphBuilder,
    cfg: &QwenVisionConfig,
    n_images: usize,
    pre: &str,
) -> Result<NodeId> {
    let concat = |g: &mut GraphBuilder, parts: &[NodeId], axis| match parts {
        [one] => Ok(*one),
        _ => g.concat(parts, axis),
    };
    let views = (0..n_images)
        .map(|i| {
            let img = g.input(names::image(i), &[3, cfg.image_h, cfg.image_w]);
            let (merged, taps) = qwen_vision_tower(g, img, cfg, pre)?;
            let mut parts = vec![merged];
            parts.extend(taps);
            concat(g, &parts, 1)
        })
        .collect::<Result<Vec<_>>>()?;
    concat(g, &views, 0)
}

/// Of [`towers_side_by_side`]'s output `rows`, camera `i`'s column block `k` (0: merged
/// tokens, `1 + j`: deepstack tap `j`), `[T, out]`.
pub fn camera_block(
    g: &mut GraphBuilder,
    rows: NodeId,
    cfg: &QwenVisionConfig,
    i: usize,
    k: usize,
) -> Result<NodeId> {
    let (t, h) = (cfg.n_tokens(), cfg.out);
    let mine = g.slice(rows, 0, i * t, t)?;
    g.slice(mine, 1, k * h, h)
}

/// `image` `[3, H, W]` (normalised) -> the merged tokens `[n_tokens, out]` and the deepstack
/// features `[n_tokens, out]` of the tapped blocks, in row-major merged-grid order.
pub fn qwen_vision_tower(
    g: &mut GraphBuilder,
    image: NodeId,
    cfg: &QwenVisionConfig,
    pre: &str,
) -> Result<(NodeId, Vec<NodeId>)> {
    let (d, p, (rows, cols)) = (cfg.hidden, cfg.patch_size, cfg.grid());
    let pre = Scope::new(pre);
    let w = g.weight(&pre.pp("patch_embd.weight"), &[d, 3, p, p])?;
    let b = g.weight(&pre.pp("patch_embd.bias"), &[d])?;
    let x = g.patch_embed(image, w, b)?;
    let pos = g.weight(&pre.pp("pos_embd.weight"), &[rows * cols, d])?;
    let mut x = g.add(x, pos)?;
    let hd = d / cfg.heads;
    let (cos, sin) = rotary_tables(rows, cols, hd);
    let shape = vec![rows * cols, 1, hd];
    let cos = g.constant(&pre.pp("rope_cos"), Tensor::from_f32(shape.clone(), cos)?)?;
    let sin = g.constant(&pre.pp("rope_sin"), Tensor::from_f32(shape, sin)?)?;
    let mut deepstack = Vec::new();
    for i in 0..cfg.layers {
        let bp = pre.pp("blk").pp(i);
        let h = layer_norm(g, x, &bp.pp("ln1"), EPS)?;
        let qkv = linear(g, h, &bp.pp("attn_qkv"), 3 * d, true)?;
        let part = |g: &mut GraphBuilder, k: usize| -> Result<NodeId> {
            let y = g.slice(qkv, 1, k * d, d)?;
            split_heads(g, y, cfg.heads, hd)
        };
        let (q, k, v) = (part(g, 0)?, part(g, 1)?, part(g, 2)?);
        let q = rope_tables(g, q, cos, sin)?;
        let k = rope_tables(g, k, cos, sin)?;
        let o = attend(g, q, &[(k, v)], None)?;
        let o = linear(g, o, &bp.pp("attn_o"), d, true)?;
        x = g.add(x, o)?;
        let h = layer_norm(g, x, &bp.pp("ln2"), EPS)?;
        let h = linear(g, h, &bp.pp("fc1"), cfg.inter, true)?;
        let h = g.gelu_tanh(h);
        let h = linear(g, h, &bp.pp("fc2"), d, true)?;
        x = g.add(x, h)?;
        if let Some(j) = cfg.deepstack.iter().position(|&t| t == i) {
            deepstack.push(merger(g, x, &pre.pp("deepstack").pp(j), cfg, true)?);
        }
    }
    Ok((merger(g, x, &pre.pp("merger"), cfg, false)?, deepstack))
}

/// The Conv3d patch kernel `k` `[d, 3, 2, p, p]` (temporal patch 2) as the `[d, 3, p, p]`
/// kernel of a still frame (the frame repeated along time: the two temporal slices summed).
pub fn still_frame_kernel(k: &[f32], p: usize) -> Vec<f32> {
    k.chunks(2 * p * p)
        .flat_map(|c| (0..p * p).map(move |i| c[i] + c[p * p + i]))
        .collect()
}

/// torch's float `linspace(0, n - 1, steps)`: from both ends towards the middle.
fn linspace(n: usize, steps: usize) -> Vec<f32> {
    let end = (n - 1) as f32;
    if steps == 1 {
        return vec![0.0];
    }
    let step = end / (steps - 1) as f32;
    (0..steps)
        .map(|i| match i < steps / 2 {
            true => step * i as f32,
            false => end - step * (steps - 1 - i) as f32,
        })
        .collect()
}

/// The learned position table `table` `[n * n, d]` resampled bilinearly (align-corners, as
/// the reference's `fast_pos_embed_interpolate`) to a `rows x cols` patch grid, row-major.
pub fn resample_positions(
    table: &[f32],
    n: usize,
    d: usize,
    (rows, cols): (usize, usize),
) -> Vec<f32> {
    let axis = |len: usize| {
        let idx = linspace(n, len);
        let lo: Vec<usize> = idx.iter().map(|&x| x as usize).collect();
        let hi: Vec<usize> = lo.iter().map(|&i| (i + 1).min(n - 1)).collect();
        let frac: Vec<f32> = idx.iter().zip(&lo).map(|(&x, &i)| x - i as f32).collect();
        (lo, hi, frac)
    };
    let ((rlo, rhi, rf), (clo, chi, cf)) = (axis(rows), axis(cols));
    let mut out = Vec::with_capacity(rows * cols * d);
    for r in 0..rows {
        for c in 0..cols {
            let (dh, dw) = (rf[r], cf[c]);
            let taps = [
                (rlo[r] * n + clo[c], (1.0 - dh) * (1.0 - dw)),
                (rlo[r] * n + chi[c], (1.0 - dh) * dw),
                (rhi[r] * n + clo[c], dh * (1.0 - dw)),
                (rhi[r] * n + chi[c], dh * dw),
            ];
            for e in 0..d {
                let v = taps
                    .iter()
                    .fold(0f32, |acc, &(row, w)| acc + table[row * d + e] * w);
                out.push(v);
            }
        }
    }
    out
}
