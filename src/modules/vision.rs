//! SigLIP-style ViT (patch embedding + learned positions + pre-LN encoder + post-LN), its
//! InternViT variant (class token, LayerScale, no post-LN), timm's DINOv2 and SigLIP read at a
//! block's output (Prismatic's towers), and the connectors that turn its
//! features into language-model tokens (Idefics3/SmolVLM's and InternVL's pixel shuffle +
//! projection, PaliGemma's projection).

use crate::config::limits::{MAX_LAYERS, MAX_PATCHES_PER_SIDE};
use crate::config::{bounded, first_failing, positive, Keys, Section};
use crate::graph::{GraphBuilder, NodeId};
use crate::layers::{attend, gelu_mlp, layer_norm, linear, rope_tables, split_heads, Scope};
use crate::modules::flow::names;
use crate::{Error, Result};

/// A SigLIP-style tower. Keys: `vit_hidden`, `vit_layers`, `vit_heads`, `vit_inter`,
/// `image_size`, `patch_size`, `vit_ln_eps`, `vit_positions` (absent: grid).
#[derive(Clone, Debug, PartialEq)]
pub struct VisionConfig {
    /// Tensor prefix (`vit`): two towers side by side differ in this.
    pub prefix: &'static str,
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    /// MLP width.
    pub inter: usize,
    pub image_size: usize,
    pub patch_size: usize,
    pub ln_eps: f32,
    pub positions: PatchPositions,
    /// Set by the arch, not a key.
    pub style: TowerStyle,
}

/// The checks of a tower's input side, patch and LayerNorm epsilon (`vit.*` keys).
pub fn check_geometry(image_size: usize, patch_size: usize, ln_eps: f32) -> Result<(), String> {
    first_failing(&[
        (
            patch_size > 0 && image_size.is_multiple_of(patch_size),
            "vit.image_size must be a multiple of vit.patch_size",
        ),
        (
            image_size > 0 && image_size / patch_size.max(1) <= MAX_PATCHES_PER_SIDE,
            "patches per side (vit.image_size / vit.patch_size) must be 1 to 1024",
        ),
        (
            ln_eps >= 0.0 && ln_eps.is_finite(),
            "vit.ln_eps must be finite and >= 0",
        ),
    ])
}

/// How a tower's embeddings and layers are laid out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TowerStyle {
    /// SigLIP: patch + position embeddings, tanh-GELU MLPs, a final LayerNorm `post_ln`.
    #[default]
    Siglip,
    /// InternViT (InternVL): a class token `class_embd` `[hidden]` before the patches (the
    /// position table has its row first), LayerScale on both residual branches
    /// (`blk.{i}.ls1`, `ls2` `[hidden]`), exact-erf GELU MLPs, no final norm; the class
    /// token's row is dropped from the output.
    InternVit,
    /// timm's DINOv2 with registers, read at its last layer's output (Prismatic keeps the
    /// blocks up to the penultimate): the position table covers the patches alone (timm's
    /// `no_embed_class`), then a class token `class_embd` `[hidden]` and `registers` tokens
    /// `reg_embd` `[registers, hidden]` go before them; LayerScale, exact-erf GELU MLPs, no
    /// final norm; only the patches' rows are returned.
    Dinov2 { registers: usize },
    /// timm's SigLIP read at its last layer's output: no class token, exact-erf GELU MLPs
    /// (timm's default, where Hugging Face's SigLIP has tanh), no final norm.
    TimmSiglip,
    /// Hugging Face's SigLIP read at its last layer's output, as LLaVA's
    /// `vision_feature_layer` does (BitVLA): tanh-GELU MLPs, no final norm.
    SiglipLast,
}

impl TowerStyle {
    /// Rows before the patches: class token and registers.
    pub fn prefix_rows(self) -> usize {
        match self {
            TowerStyle::Siglip | TowerStyle::TimmSiglip | TowerStyle::SiglipLast => 0,
            TowerStyle::InternVit => 1,
            TowerStyle::Dinov2 { registers } => 1 + registers,
        }
    }

    fn layer_scale(self) -> bool {
        matches!(self, TowerStyle::InternVit | TowerStyle::Dinov2 { .. })
    }
}

impl Default for VisionConfig {
    fn default() -> Self {
        VisionConfig {
            prefix: "vit",
            hidden: 0,
            layers: 0,
            heads: 0,
            inter: 0,
            image_size: 0,
            patch_size: 0,
            ln_eps: 0.0,
            positions: PatchPositions::Grid,
            style: TowerStyle::Siglip,
        }
    }
}

impl Section for VisionConfig {
    fn keys(&mut self, k: &mut dyn Keys) -> Result<()> {
        k.usize("vit_hidden", &mut self.hidden)?;
        k.usize("vit_layers", &mut self.layers)?;
        k.usize("vit_heads", &mut self.heads)?;
        k.usize("vit_inter", &mut self.inter)?;
        k.usize("image_size", &mut self.image_size)?;
        k.usize("patch_size", &mut self.patch_size)?;
        k.f32("vit_ln_eps", &mut self.ln_eps)?;
        let mut id = self.positions.id();
        k.usize_or("vit_positions", &mut id, PatchPositions::Grid.id())?;
        self.positions = PatchPositions::from_id(id).ok_or_else(|| {
            Error::InvalidArgument(format!("vit_positions = {id}: expected 0 or 1"))
        })?;
        Ok(())
    }

    fn check(&self) -> std::result::Result<(), String> {
        positive("vit_hidden", self.hidden)?;
        positive("vit_inter", self.inter)?;
        bounded("vit_layers", self.layers, 1, MAX_LAYERS)?;
        first_failing(&[
            (
                self.patch_size > 0 && self.image_size.is_multiple_of(self.patch_size),
                "image_size must be a multiple of patch_size",
            ),
            (
                self.image_size > 0
                    && self.image_size / self.patch_size.max(1) <= MAX_PATCHES_PER_SIDE,
                "patches per side (image_size / patch_size) must be 1 to 1024",
            ),
            (
                self.heads > 0 && self.hidden.is_multiple_of(self.heads),
                "vit_hidden must be a multiple of vit_heads",
            ),
            // ggml asserts eps >= 0; a negative one is NaN on the other backends.
            (
                self.ln_eps >= 0.0 && self.ln_eps.is_finite(),
                "vit_ln_eps must be finite and >= 0",
            ),
        ])
    }
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
    pub fn patches_per_side(&self) -> usize {
        self.image_size / self.patch_size
    }

    pub fn n_patches(&self) -> usize {
        self.patches_per_side().pow(2)
    }
}

/// `image` `[3, S, S]` (already in the tower's value range) -> `[patches, hidden]`.
/// Weights under `<prefix>.`: `patch_embd`, `pos_embd`,
/// `blk.{i}.{ln1,attn_q,attn_k,attn_v,attn_o,ln2,fc1,fc2}`, and `post_ln` (SigLIP) or
/// `class_embd`, `blk.{i}.{ls1,ls2}` (InternViT, [`TowerStyle`]; DINOv2 also `reg_embd`).
pub fn vision_tower(g: &mut GraphBuilder, image: NodeId, cfg: &VisionConfig) -> Result<NodeId> {
    let (d, p, pre) = (cfg.hidden, cfg.patch_size, Scope::new(cfg.prefix));
    let style = cfg.style;
    let w = g.weight(&pre.pp("patch_embd.weight"), &[d, 3, p, p])?;
    let b = g.weight(&pre.pp("patch_embd.bias"), &[d])?;
    let mut x = g.patch_embed(image, w, b)?;
    let class = |g: &mut GraphBuilder| -> Result<NodeId> {
        let cls = g.weight(&pre.pp("class_embd.weight"), &[d])?;
        g.reshape(cls, &[1, d])
    };
    if style == TowerStyle::InternVit {
        let cls = class(g)?;
        x = g.concat(&[cls, x], 0)?;
    }
    let rows = cfg.n_patches() + usize::from(style == TowerStyle::InternVit);
    let mut pos = g.weight(&pre.pp("pos_embd.weight"), &[rows, d])?;
    if cfg.positions == PatchPositions::Shifted {
        pos = shift_positions(g, pos, cfg.patches_per_side())?;
    }
    x = g.add(x, pos)?;
    if let TowerStyle::Dinov2 { registers } = style {
        let cls = class(g)?;
        let reg = g.weight(&pre.pp("reg_embd.weight"), &[registers, d])?;
        x = g.concat(&[cls, reg, x], 0)?;
    }
    for i in 0..cfg.layers {
        x = tower_layer(g, x, cfg, i)?;
    }
    match style {
        TowerStyle::Siglip => layer_norm(g, x, &pre.pp("post_ln"), cfg.ln_eps),
        TowerStyle::TimmSiglip | TowerStyle::SiglipLast => Ok(x),
        _ => g.slice(x, 0, style.prefix_rows(), cfg.n_patches()),
    }
}

/// Layer `i` of a tower over `x` `[rows, hidden]` (every row: class token and registers
/// included): attention and MLP blocks, pre-LN, LayerScale where the style has it.
pub fn tower_layer(
    g: &mut GraphBuilder,
    x: NodeId,
    cfg: &VisionConfig,
    i: usize,
) -> Result<NodeId> {
    tower_layer_rotary(g, x, cfg, i, None)
}

/// Rotary tables for a tower's patch rows: `cos`, `sin` `[patches, 1, head_dim]`
/// ([`crate::layers::rope_tables`]), the rows before the patches (class token, registers)
/// left unrotated.
#[derive(Clone, Copy, Debug)]
pub struct PatchRotary {
    pub cos: NodeId,
    pub sin: NodeId,
    pub skip: usize,
}

impl PatchRotary {
    /// `x` `[rows, heads, head_dim]` with its patch rows rotated.
    pub fn apply(&self, g: &mut GraphBuilder, x: NodeId) -> Result<NodeId> {
        let rows = g.shape(x)[0];
        if rows < self.skip {
            return Err(crate::Error::InvalidArgument(format!(
                "rotary: {rows} rows, {} before the patches",
                self.skip
            )));
        }
        let head = g.slice(x, 0, 0, self.skip)?;
        let rest = g.slice(x, 0, self.skip, rows - self.skip)?;
        let rest = rope_tables(g, rest, self.cos, self.sin)?;
        g.concat(&[head, rest], 0)
    }
}

/// [`tower_layer`] with the queries' and keys' patch rows rotated by `rotary` (DINOv3).
pub fn tower_layer_rotary(
    g: &mut GraphBuilder,
    x: NodeId,
    cfg: &VisionConfig,
    i: usize,
    rotary: Option<&PatchRotary>,
) -> Result<NodeId> {
    let (d, style) = (cfg.hidden, cfg.style);
    let head_dim = d / cfg.heads;
    // LayerScale: a branch times its per-channel gain.
    let scaled = |g: &mut GraphBuilder, y: NodeId, name: &str| match style.layer_scale() {
        true => {
            let gain = g.weight(name, &[d])?;
            g.mul(y, gain)
        }
        false => Ok(y),
    };
    let p = Scope::new(cfg.prefix).pp("blk").pp(i);
    let h = layer_norm(g, x, &p.pp("ln1"), cfg.ln_eps)?;
    let heads = |g: &mut GraphBuilder, n: &str| {
        let y = linear(g, h, &p.pp(n), d, true)?;
        split_heads(g, y, cfg.heads, head_dim)
    };
    let (mut q, mut k, v) = (
        heads(g, "attn_q")?,
        heads(g, "attn_k")?,
        heads(g, "attn_v")?,
    );
    if let Some(r) = rotary {
        q = r.apply(g, q)?;
        k = r.apply(g, k)?;
    }
    let o = attend(g, q, &[(k, v)], None)?;
    let o = linear(g, o, &p.pp("attn_o"), d, true)?;
    let o = scaled(g, o, &p.pp("ls1.weight"))?;
    let x = g.add(x, o)?;
    let h = layer_norm(g, x, &p.pp("ln2"), cfg.ln_eps)?;
    let h = match style {
        TowerStyle::Siglip | TowerStyle::SiglipLast => gelu_mlp(g, h, &p, cfg.inter)?,
        _ => {
            let h = linear(g, h, &p.pp("fc1"), cfg.inter, true)?;
            let h = g.gelu_erf(h);
            linear(g, h, &p.pp("fc2"), d, true)?
        }
    };
    let h = scaled(g, h, &p.pp("ls2.weight"))?;
    g.add(x, h)
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

/// Idefics3's (and InternVL's) pixel shuffle: `[side*side, E]` -> `[(side/s)^2, E*s*s]`,
/// folding each `s x s` block of patches into one token: token `i * side/s + j` holds
/// patches `(s i + di, s j + dj)` at channel block `s di + dj` (the same index order as the
/// references' view/permute sequences).
pub fn pixel_shuffle(g: &mut GraphBuilder, x: NodeId, scale: usize) -> Result<NodeId> {
    let (seq, e) = (g.shape(x)[0], g.shape(x)[1]);
    let side = (seq as f64).sqrt() as usize;
    let x = g.reshape(x, &[side, side / scale, e * scale])?;
    let x = g.permute(x, &[1, 0, 2])?;
    let x = g.reshape(x, &[side / scale, side / scale, e * scale * scale])?;
    let x = g.permute(x, &[1, 0, 2])?;
    g.reshape(x, &[seq / (scale * scale), e * scale * scale])
}

/// How tower features become language-model tokens, under the tensor prefix `mm`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Connector {
    /// An optional pixel shuffle (factor `pixel_shuffle`, 1 = none), then the linear map
    /// `mm.proj`, with a bias when `bias` (Idefics3/SmolVLM: shuffle, no bias; PaliGemma:
    /// no shuffle, bias).
    Linear { pixel_shuffle: usize, bias: bool },
    /// An optional pixel shuffle, then LayerNorm `mm.ln`, `mm.fc1`, erf GELU, `mm.fc2`, all
    /// with biases and both linear maps to the LM width (InternVL/Eagle's `mlp1`).
    Mlp { pixel_shuffle: usize, ln_eps: f32 },
    /// The tower's features are the tokens.
    Identity,
}

impl Connector {
    pub fn pixel_shuffle(self) -> usize {
        match self {
            Connector::Linear { pixel_shuffle, .. } | Connector::Mlp { pixel_shuffle, .. } => {
                pixel_shuffle.max(1)
            }
            Connector::Identity => 1,
        }
    }

    /// Image tokens per view for a tower of `n_patches`.
    pub fn n_tokens(self, n_patches: usize) -> usize {
        n_patches / self.pixel_shuffle().pow(2)
    }
}

/// Builds the vision tower and `connector` over `image` `[3, S, S]`: image tokens
/// `[n_tokens, out]` (`out` is ignored by [`Connector::Identity`]).
pub fn embed_image(
    g: &mut GraphBuilder,
    image: NodeId,
    cfg: &VisionConfig,
    connector: Connector,
    out: usize,
) -> Result<NodeId> {
    let mut x = vision_tower(g, image, cfg)?;
    if connector.pixel_shuffle() > 1 {
        x = pixel_shuffle(g, x, connector.pixel_shuffle())?;
    }
    match connector {
        Connector::Linear { bias, .. } => linear(g, x, "mm.proj", out, bias),
        Connector::Mlp { ln_eps, .. } => {
            let x = layer_norm(g, x, "mm.ln", ln_eps)?;
            let x = linear(g, x, "mm.fc1", out, true)?;
            let x = g.gelu_erf(x);
            linear(g, x, "mm.fc2", out, true)
        }
        Connector::Identity => Ok(x),
    }
}

/// Every camera view through the tower and `connector` in one graph: inputs `image.{i}`
/// `[3, S, S]` for `i < n_images` (the weights shared), their image tokens stacked
/// `[n_images * n_tokens, out]`.
pub fn embed_images(
    g: &mut GraphBuilder,
    n_images: usize,
    cfg: &VisionConfig,
    connector: Connector,
    out: usize,
) -> Result<NodeId> {
    let s = cfg.image_size;
    let views = (0..n_images)
        .map(|i| {
            let img = g.input(names::image(i), &[3, s, s]);
            embed_image(g, img, cfg, connector, out)
        })
        .collect::<Result<Vec<_>>>()?;
    match views.as_slice() {
        [one] => Ok(*one),
        _ => g.concat(&views, 0),
    }
}
