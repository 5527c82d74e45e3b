//! SigLIP-style ViT (patch embedding + learned positions + pre-LN encoder + post-LN) and the
//! connectors that turn its features into language-model tokens (Idefics3/SmolVLM's pixel
//! shuffle + projection, PaliGemma's projection).

use crate::graph::{GraphBuilder, NodeId};
use crate::layers::{attend, gelu_mlp, layer_norm, linear, split_heads};
use crate::Result;

#[derive(Clone, Debug, PartialEq)]
pub struct VisionConfig {
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    /// MLP width.
    pub inter: usize,
    pub image_size: usize,
    pub patch_size: usize,
    pub ln_eps: f32,
    pub positions: PatchPositions,
}

/// Which row of the position table each patch adds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PatchPositions {
    /// Patch (h, w) adds row `h * side + w` (SigLIP; SmolVLM under transformers < 4.55).
    #[default]
    Grid,
    /// Patch (h, w) adds row `max(h-1, 0) * side + max(w-1, 0)`: what SmolVLM's bucketized
    /// position ids give for a full image under transformers >= 4.55 (`h / side * (1 - 1e-6)`
    /// falls just below bucket boundary `h / side`; transformers issue #41190), and so what
    /// lerobot 0.4.4 (which needs transformers >= 4.57) runs.
    Shifted,
}

impl PatchPositions {
    /// The GGUF metadata value (`<arch>.vit_positions`; absent means `Grid`).
    pub fn id(self) -> usize {
        match self {
            PatchPositions::Grid => 0,
            PatchPositions::Shifted => 1,
        }
    }

    pub fn from_id(id: usize) -> Option<Self> {
        [PatchPositions::Grid, PatchPositions::Shifted]
            .into_iter()
            .find(|p| p.id() == id)
    }
}

impl VisionConfig {
    pub fn n_patches(&self) -> usize {
        (self.image_size / self.patch_size).pow(2)
    }

    /// The tower's tensors (`vit.*`, see [`vision_tower`]) with their row-major shapes.
    pub fn tensor_shapes(&self) -> Vec<(String, Vec<usize>)> {
        let (d, inter) = (self.hidden, self.inter);
        let mut t: Vec<(String, Vec<usize>)> = vec![
            (
                "vit.patch_embd.weight".into(),
                vec![d, 3, self.patch_size, self.patch_size],
            ),
            ("vit.patch_embd.bias".into(), vec![d]),
            ("vit.pos_embd.weight".into(), vec![self.n_patches(), d]),
            ("vit.post_ln.weight".into(), vec![d]),
            ("vit.post_ln.bias".into(), vec![d]),
        ];
        for i in 0..self.layers {
            let p = format!("vit.blk.{i}");
            for n in ["ln1", "ln2"] {
                t.push((format!("{p}.{n}.weight"), vec![d]));
                t.push((format!("{p}.{n}.bias"), vec![d]));
            }
            for n in ["attn_q", "attn_k", "attn_v", "attn_o"] {
                t.push((format!("{p}.{n}.weight"), vec![d, d]));
                t.push((format!("{p}.{n}.bias"), vec![d]));
            }
            t.push((format!("{p}.fc1.weight"), vec![inter, d]));
            t.push((format!("{p}.fc1.bias"), vec![inter]));
            t.push((format!("{p}.fc2.weight"), vec![d, inter]));
            t.push((format!("{p}.fc2.bias"), vec![d]));
        }
        t
    }
}

/// `image` `[3, S, S]` (already in the tower's value range) -> `[patches, hidden]`.
/// Weights under `vit.`: `patch_embd`, `pos_embd`, `blk.{i}.{ln1,attn_q,attn_k,attn_v,attn_o,ln2,fc1,fc2}`, `post_ln`.
pub fn vision_tower(g: &mut GraphBuilder, image: NodeId, cfg: &VisionConfig) -> Result<NodeId> {
    let w = g.weight("vit.patch_embd.weight")?;
    let b = g.weight("vit.patch_embd.bias")?;
    let mut x = g.patch_embed(image, w, b)?;
    let mut pos = g.weight("vit.pos_embd.weight")?;
    if cfg.positions == PatchPositions::Shifted {
        pos = shift_positions(g, pos, cfg.image_size / cfg.patch_size)?;
    }
    x = g.add(x, pos)?;
    let head_dim = cfg.hidden / cfg.heads;
    for i in 0..cfg.layers {
        let p = format!("vit.blk.{i}");
        let h = layer_norm(g, x, &format!("{p}.ln1"), cfg.ln_eps)?;
        let q = linear(g, h, &format!("{p}.attn_q"), true)?;
        let k = linear(g, h, &format!("{p}.attn_k"), true)?;
        let v = linear(g, h, &format!("{p}.attn_v"), true)?;
        let (q, k, v) = (
            split_heads(g, q, cfg.heads, head_dim)?,
            split_heads(g, k, cfg.heads, head_dim)?,
            split_heads(g, v, cfg.heads, head_dim)?,
        );
        let o = attend(g, q, k, v, None)?;
        let o = linear(g, o, &format!("{p}.attn_o"), true)?;
        x = g.add(x, o)?;
        let h = layer_norm(g, x, &format!("{p}.ln2"), cfg.ln_eps)?;
        let h = gelu_mlp(g, h, &p)?;
        x = g.add(x, h)?;
    }
    layer_norm(g, x, "vit.post_ln", cfg.ln_eps)
}

/// `table [side*side, E]` -> the rows [`PatchPositions::Shifted`] picks: along each grid
/// axis, row 0 then rows `0..side-1`.
fn shift_positions(g: &mut GraphBuilder, table: NodeId, side: usize) -> Result<NodeId> {
    let e = g.shape(table)[1];
    let mut t = g.reshape(table, &[side, side, e])?;
    for axis in [0, 1] {
        let first = g.slice(t, axis, 0, 1)?;
        let rest = g.slice(t, axis, 0, side - 1)?;
        t = g.concat(&[first, rest], axis)?;
    }
    g.reshape(t, &[side * side, e])
}

/// Idefics3's pixel shuffle: `[side*side, E]` -> `[(side/s)^2, E*s*s]`, folding each
/// `s x s` block of patches into one token (the same index order as the reference's
/// view/permute sequence).
pub fn pixel_shuffle(g: &mut GraphBuilder, x: NodeId, scale: usize) -> Result<NodeId> {
    let (seq, e) = (g.shape(x)[0], g.shape(x)[1]);
    let side = (seq as f64).sqrt() as usize;
    let x = g.reshape(x, &[side, side / scale, e * scale])?;
    let x = g.permute(x, &[1, 0, 2])?;
    let x = g.reshape(x, &[side / scale, side / scale, e * scale * scale])?;
    let x = g.permute(x, &[1, 0, 2])?;
    g.reshape(x, &[seq / (scale * scale), e * scale * scale])
}

/// How tower features become language-model tokens: an optional pixel shuffle, then the
/// linear projection `mm.proj`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Connector {
    /// Pixel-shuffle factor (Idefics3/SmolVLM); 1 = none (PaliGemma).
    pub pixel_shuffle: usize,
    /// Whether `mm.proj` has a bias (PaliGemma's does, SmolVLM's does not).
    pub bias: bool,
}

/// Vision tower + connector: `image` `[3, S, S]` -> image tokens.
pub fn image_tokens(
    g: &mut GraphBuilder,
    image: NodeId,
    cfg: &VisionConfig,
    connector: Connector,
) -> Result<NodeId> {
    let mut x = vision_tower(g, image, cfg)?;
    if connector.pixel_shuffle > 1 {
        x = pixel_shuffle(g, x, connector.pixel_shuffle)?;
    }
    linear(g, x, "mm.proj", connector.bias)
}
