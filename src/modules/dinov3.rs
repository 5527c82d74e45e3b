//! Meta's DINOv3 ViT (Hugging Face's `DINOv3ViTModel`), read at its last layer's output
//! before the final norm: a class token and register tokens before the patches, no position
//! table but axial 2-D rotary embeddings on the patches' queries and keys, LayerScale
//! (folded into `attn_o` and `fc2` by the converters), exact-erf GELU MLPs. Tensors in
//! vla.cpp's names: `vit.cls_token` `[1, hidden]`, `vit.register_tokens` `[registers, hidden]`,
//! `vit.patch_embed.{weight,bias}` (the kernel as the matrix `[hidden, 3 * patch^2]`),
//! `vit.blk.{i}.{ln1,attn_q,attn_k,attn_v,attn_o,ln2,fc1,fc2}`.

use crate::graph::{GraphBuilder, NodeId};
use crate::modules::vision::{tower_layer_rotary, PatchRotary, TowerStyle, VisionConfig};
use crate::{Result, Tensor};

/// DINOv3's LayerNorm epsilon (`layer_norm_eps` of every released ViT).
pub const LN_EPS: f32 = 1e-5;

/// A DINOv3 tower's sizes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Dinov3Config {
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    pub inter: usize,
    pub image_size: usize,
    pub patch_size: usize,
    pub registers: usize,
    pub rope_theta: f32,
}

impl Dinov3Config {
    pub fn side(&self) -> usize {
        self.image_size / self.patch_size
    }

    pub fn n_patches(&self) -> usize {
        self.side().pow(2)
    }

    fn tower(&self) -> VisionConfig {
        VisionConfig {
            prefix: "vit",
            hidden: self.hidden,
            layers: self.layers,
            heads: self.heads,
            inter: self.inter,
            image_size: self.image_size,
            patch_size: self.patch_size,
            ln_eps: LN_EPS,
            // exact-erf GELU, no LayerScale (folded), no final norm
            style: TowerStyle::TimmSiglip,
            ..VisionConfig::default()
        }
    }
}

/// The rotary tables `(cos, sin)` `[rows * cols, head_dim]` of row-major patches, as
/// DINOv3's `RopePositionEmbedding` ("separate" coordinates, no augmentation): each patch's
/// centre in [-1, 1] along each axis, `head_dim / 4` frequencies `theta^(-4j / head_dim)`,
/// angle `2 pi coord f`; the row's angles, then the column's, the whole repeated once
/// (`rotate_half` layout). In f32 in the reference's order.
pub fn rotary_tables(
    rows: usize,
    cols: usize,
    head_dim: usize,
    theta: f32,
) -> (Vec<f32>, Vec<f32>) {
    let quarter = head_dim / 4;
    let inv: Vec<f32> = (0..quarter)
        .map(|j| 1.0 / theta.powf((4 * j) as f32 / head_dim as f32))
        .collect();
    let coord = |i: usize, n: usize| 2.0 * ((i as f32 + 0.5) / n as f32) - 1.0;
    let two_pi = 2.0 * std::f32::consts::PI;
    let (mut cos, mut sin) = (Vec::new(), Vec::new());
    for t in 0..rows * cols {
        let (r, c) = (coord(t / cols, rows), coord(t % cols, cols));
        let half: Vec<f32> = [r, c]
            .iter()
            .flat_map(|&x| inv.iter().map(move |f| two_pi * x * f))
            .collect();
        for _ in 0..2 {
            cos.extend(half.iter().map(|a| a.cos()));
            sin.extend(half.iter().map(|a| a.sin()));
        }
    }
    (cos, sin)
}

/// `image` `[3, S, S]` (normalised) -> the patch tokens `[patches, hidden]` of the last
/// layer, before the final norm (the class token and registers dropped).
pub fn dinov3_tower(g: &mut GraphBuilder, image: NodeId, cfg: &Dinov3Config) -> Result<NodeId> {
    let last = *dinov3_layers(g, image, cfg)?
        .last()
        .expect("the embeddings first");
    g.slice(last, 0, 1 + cfg.registers, cfg.n_patches())
}

/// The tower's rows `[1 + registers + patches, hidden]` (class token, registers, patches):
/// the embeddings, then each layer's output.
pub fn dinov3_layers(
    g: &mut GraphBuilder,
    image: NodeId,
    cfg: &Dinov3Config,
) -> Result<Vec<NodeId>> {
    let (d, p, side) = (cfg.hidden, cfg.patch_size, cfg.side());
    let w = g.weight("vit.patch_embed.weight", &[d, 3 * p * p])?;
    let w = g.reshape(w, &[d, 3, p, p])?;
    let b = g.weight("vit.patch_embed.bias", &[d])?;
    let x = g.patch_embed(image, w, b)?;
    let cls = g.weight("vit.cls_token", &[1, d])?;
    let mut parts = vec![cls];
    if cfg.registers > 0 {
        parts.push(g.weight("vit.register_tokens", &[cfg.registers, d])?);
    }
    parts.push(x);
    let mut out = vec![g.concat(&parts, 0)?];
    let hd = d / cfg.heads;
    let (cos, sin) = rotary_tables(side, side, hd, cfg.rope_theta);
    let shape = vec![side * side, 1, hd];
    let rotary = PatchRotary {
        cos: g.constant("vit.rope_cos", Tensor::from_f32(shape.clone(), cos)?)?,
        sin: g.constant("vit.rope_sin", Tensor::from_f32(shape, sin)?)?,
        skip: 1 + cfg.registers,
    };
    let tower = cfg.tower();
    for i in 0..cfg.layers {
        let x = *out.last().expect("the embeddings first");
        out.push(tower_layer_rotary(g, x, &tower, i, Some(&rotary))?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotary_angles_follow_the_patch_centres() {
        // 2 x 2 patches, head_dim 8: two frequencies, 1 and theta^-1/2
        let (cos, sin) = rotary_tables(2, 2, 8, 100.0);
        assert_eq!(cos.len(), 4 * 8);
        // patch (0, 1): row centre -0.5, column centre +0.5
        let a = |x: f32, f: f32| 2.0 * std::f32::consts::PI * x * f;
        let row = &sin[8..16];
        assert!((row[0] - a(-0.5, 1.0).sin()).abs() < 1e-6);
        assert!((row[1] - a(-0.5, 0.1).sin()).abs() < 1e-6);
        assert!((row[2] - a(0.5, 1.0).sin()).abs() < 1e-6);
        assert_eq!(row[..4], row[4..]);
        assert!((cos[8 + 3] - a(0.5, 0.1).cos()).abs() < 1e-6);
    }
}
