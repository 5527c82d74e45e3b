//! Prismatic's fused vision front end (OpenVLA-OFT, VLA-Adapter): every camera through timm's
//! DINOv2 with registers and timm's SigLIP, each cut after its penultimate block, their patch
//! features side by side (DINOv2's first) and projected to the language model's width by a
//! 3-layer GELU MLP. Keys are vla.cpp's (`vit.*`); tensors `vis.d.*` (DINOv2), `vis.s.*`
//! (SigLIP) in [`vision_tower`]'s names, `vis.proj.fc{1,2,3}`.

use crate::config::limits::{MAX_IMAGES, MAX_LAYERS};
use crate::config::{bounded, positive, Keys, Section};
use crate::graph::{GraphBuilder, NodeId};
use crate::layers::linear;
use crate::modules::vision::{
    check_geometry, vision_tower, PatchPositions, TowerStyle, VisionConfig,
};
use crate::Result;

/// One tower's sizes: `vit.<tower>.{hidden,layers,heads,inter}` (`head_dim` written for
/// vla.cpp).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TowerDims {
    pub hidden: usize,
    /// Blocks kept: the reference reads the output of its penultimate block.
    pub layers: usize,
    pub heads: usize,
    pub inter: usize,
}

/// The two towers and the projector.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PrismaticConfig {
    pub dino: TowerDims,
    pub sig: TowerDims,
    /// DINOv2's register tokens (`vit.dino.registers`, absent: 4).
    pub registers: usize,
    pub image_size: usize,
    pub patch_size: usize,
    /// Both towers' LayerNorm epsilon.
    pub ln_eps: f32,
    /// The projector's first width (4 x the fused width in the released models).
    pub proj_mid: usize,
    /// Cameras, each through both towers.
    pub num_images: usize,
}

/// DINOv2's default register count (timm's `*_reg4_dinov2`).
const REGISTERS: usize = 4;

impl Section for PrismaticConfig {
    fn keys(&mut self, k: &mut dyn Keys) -> Result<()> {
        for (name, t) in [("dino", &mut self.dino), ("sig", &mut self.sig)] {
            k.usize(&format!("vit.{name}.hidden"), &mut t.hidden)?;
            k.usize(&format!("vit.{name}.layers"), &mut t.layers)?;
            k.usize(&format!("vit.{name}.heads"), &mut t.heads)?;
            k.usize(&format!("vit.{name}.inter"), &mut t.inter)?;
            let (h, n) = (t.hidden, t.heads.max(1));
            k.derived(&format!("vit.{name}.head_dim"), &|| h / n)?;
        }
        k.usize_or("vit.dino.registers", &mut self.registers, REGISTERS)?;
        k.usize("vit.image_size", &mut self.image_size)?;
        k.usize("vit.patch_size", &mut self.patch_size)?;
        let n = self.n_patches_checked();
        k.derived("vit.n_patches", &|| n)?;
        k.usize("vit.proj_mid", &mut self.proj_mid)?;
        let v = self.vdim();
        k.derived("vit.vdim", &|| v)?;
        k.usize("vit.num_images", &mut self.num_images)?;
        k.f32("vit.ln_eps", &mut self.ln_eps)
    }

    fn check(&self) -> std::result::Result<(), String> {
        for (name, t) in [("dino", &self.dino), ("sig", &self.sig)] {
            positive(&format!("vit.{name}.hidden"), t.hidden)?;
            positive(&format!("vit.{name}.inter"), t.inter)?;
            bounded(&format!("vit.{name}.layers"), t.layers, 1, MAX_LAYERS)?;
            bounded(&format!("vit.{name}.heads"), t.heads, 1, t.hidden)?;
            if !t.hidden.is_multiple_of(t.heads) {
                return Err(format!(
                    "vit.{name}.hidden {} must be a multiple of vit.{name}.heads {}",
                    t.hidden, t.heads
                ));
            }
        }
        bounded("vit.dino.registers", self.registers, 0, MAX_LAYERS)?;
        positive("vit.proj_mid", self.proj_mid)?;
        bounded("vit.num_images", self.num_images, 1, MAX_IMAGES)?;
        check_geometry(self.image_size, self.patch_size, self.ln_eps)
    }
}

impl PrismaticConfig {
    /// Patches per camera (per tower).
    pub fn n_patches(&self) -> usize {
        (self.image_size / self.patch_size).pow(2)
    }

    fn n_patches_checked(&self) -> usize {
        match self.patch_size {
            0 => 0,
            p => (self.image_size / p).pow(2),
        }
    }

    /// The fused feature width: DINOv2's then SigLIP's.
    pub fn vdim(&self) -> usize {
        self.dino.hidden + self.sig.hidden
    }

    /// The DINOv2 tower (`vis.d`) or the SigLIP one (`vis.s`) as [`vision_tower`] builds it.
    pub fn tower(&self, dino: bool) -> VisionConfig {
        let (prefix, t, style) = match dino {
            true => (
                "vis.d",
                self.dino,
                TowerStyle::Dinov2 {
                    registers: self.registers,
                },
            ),
            false => ("vis.s", self.sig, TowerStyle::TimmSiglip),
        };
        VisionConfig {
            prefix,
            hidden: t.hidden,
            layers: t.layers,
            heads: t.heads,
            inter: t.inter,
            image_size: self.image_size,
            patch_size: self.patch_size,
            ln_eps: self.ln_eps,
            positions: PatchPositions::Grid,
            style,
        }
    }
}

/// One camera's fused patch features `[n_patches, vdim]` from its pixels as each tower takes
/// them (`[3, S, S]`, normalised per tower).
pub fn image_features(
    g: &mut GraphBuilder,
    dino_pixels: NodeId,
    sig_pixels: NodeId,
    cfg: &PrismaticConfig,
) -> Result<NodeId> {
    let d = vision_tower(g, dino_pixels, &cfg.tower(true))?;
    let s = vision_tower(g, sig_pixels, &cfg.tower(false))?;
    g.concat(&[d, s], 1)
}

/// The fused projector: `fc1` (to `proj_mid`), GELU, `fc2` (to `out`), GELU, `fc3`.
pub fn project(
    g: &mut GraphBuilder,
    x: NodeId,
    cfg: &PrismaticConfig,
    out: usize,
) -> Result<NodeId> {
    let x = linear(g, x, "vis.proj.fc1", cfg.proj_mid, true)?;
    let x = g.gelu_erf(x);
    let x = linear(g, x, "vis.proj.fc2", out, true)?;
    let x = g.gelu_erf(x);
    linear(g, x, "vis.proj.fc3", out, true)
}
