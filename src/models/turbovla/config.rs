//! TurboVLA's sizes and settings (`turbovla.*` keys, vla.cpp's names), plus what the
//! weights say (MLP widths, table rows) and the text groups (instructions the model pads to
//! a length of their own).

use super::ARCH;
use crate::config::{self, bounded, positive, Keys, Section};
use crate::gguf::{GgufFile, GgufWriter, Value, ValueType};
use crate::modules::bert::BertConfig;
use crate::modules::dinov3::Dinov3Config;
use crate::{Error, Result};

/// The LayerNorm epsilon of the projections, the fusion, the text enhancer and the decoder
/// (PyTorch's default).
pub const LN_EPS: f32 = 1e-5;

/// An instruction (its ids, `[CLS]` and `[SEP]` included) that the reference pads to a
/// length of its own (`text.padding_length_by_instruction`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TextGroup {
    pub tokens: Vec<u32>,
    pub pad_to: usize,
}

/// The token ids the sub-sentence mask splits at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpecialIds {
    pub pad: usize,
    pub cls: usize,
    pub sep: usize,
    pub period: usize,
    pub question: usize,
}

impl Default for SpecialIds {
    /// bert-base-uncased's.
    fn default() -> Self {
        SpecialIds {
            pad: 0,
            cls: 101,
            sep: 102,
            period: 1012,
            question: 1029,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct TurboConfig {
    /// The interaction width (projections, fusion residuals, enhancer, decoder).
    pub hidden: usize,
    pub vit: Dinov3Config,
    pub bert: BertConfig,
    pub fusion_layers: usize,
    pub fusion_heads: usize,
    /// The fusion attention's inner width (`enhancer_inner_dim`).
    pub fusion_dim: usize,
    pub enhancer_layers: usize,
    pub enhancer_heads: usize,
    pub enhancer_ffn: usize,
    pub action_heads: usize,
    pub decoder_layers: usize,
    pub decoder_ffn: usize,
    pub action_dim: usize,
    pub state_dim: usize,
    pub state_tokens: usize,
    pub horizon: usize,
    pub num_views: usize,
    /// Widths of the vision projection's MLP, the state MLP and the action MLP.
    pub proj_hidden: usize,
    pub state_hidden: usize,
    pub action_hidden: usize,
    /// The length every instruction is padded to (`text.padding_length`), or the longest
    /// an instruction may be when `pad_to_longest`.
    pub text_len: usize,
    /// The reference pads to the longest instruction of a batch (no `padding_length`): a
    /// single request is not padded. vla.cpp does not serve such checkpoints.
    pub pad_to_longest: bool,
    pub special: SpecialIds,
    pub groups: Vec<TextGroup>,
    /// `view_emb` stored `[views, hidden]` (a checkpoint's 2-D table, which vla.cpp writes
    /// as stored) rather than `[1, views, hidden]`; from the tensor, not a key.
    pub flat_views: bool,
}

impl Section for TurboConfig {
    fn keys(&mut self, k: &mut dyn Keys) -> Result<()> {
        k.usize("hidden", &mut self.hidden)?;
        let v = &mut self.vit;
        k.usize("vit_dim", &mut v.hidden)?;
        k.usize("vit_layers", &mut v.layers)?;
        k.usize("vit_heads", &mut v.heads)?;
        let (h, n) = (v.hidden, v.heads.max(1));
        k.derived("vit_head_dim", &|| h / n)?;
        k.usize("image_size", &mut v.image_size)?;
        k.usize("patch_size", &mut v.patch_size)?;
        k.usize("num_register_tokens", &mut v.registers)?;
        k.f32("rope_theta", &mut v.rope_theta)?;
        let b = &mut self.bert;
        k.usize("text_dim", &mut b.hidden)?;
        k.usize("text_layers", &mut b.layers)?;
        k.usize("text_heads", &mut b.heads)?;
        let (h, n) = (b.hidden, b.heads.max(1));
        k.derived("text_head_dim", &|| h / n)?;
        k.usize("vocab_size", &mut b.vocab)?;
        k.usize("num_fusion_layers", &mut self.fusion_layers)?;
        k.usize("fusion_heads", &mut self.fusion_heads)?;
        let (h, n) = (self.fusion_dim, self.fusion_heads.max(1));
        k.derived("fusion_head_dim", &|| h / n)?;
        k.usize("num_text_layers", &mut self.enhancer_layers)?;
        k.usize("text_enhancer_heads", &mut self.enhancer_heads)?;
        let (h, n) = (self.hidden, self.enhancer_heads.max(1));
        k.derived("text_enhancer_head_dim", &|| h / n)?;
        k.usize("action_heads", &mut self.action_heads)?;
        let n = self.action_heads.max(1);
        k.derived("action_head_dim", &|| h / n)?;
        k.usize("num_action_decoder_layers", &mut self.decoder_layers)?;
        k.usize("action_dim", &mut self.action_dim)?;
        k.usize("state_dim", &mut self.state_dim)?;
        k.usize("num_state_tokens", &mut self.state_tokens)?;
        k.usize("action_horizon", &mut self.horizon)?;
        k.usize("num_views", &mut self.num_views)?;
        k.usize("max_text_length", &mut self.text_len)?;
        let mut longest = usize::from(self.pad_to_longest);
        k.usize_or("pad_to_longest", &mut longest, 0)?;
        if longest > 1 {
            return Err(bad(format!("pad_to_longest = {longest}: expected 0 or 1")));
        }
        self.pad_to_longest = longest == 1;
        let s = &mut self.special;
        k.usize("pad_token_id", &mut s.pad)?;
        k.usize("cls_token_id", &mut s.cls)?;
        k.usize("sep_token_id", &mut s.sep)?;
        k.usize("period_token_id", &mut s.period)?;
        k.usize("question_token_id", &mut s.question)?;
        let count = self.groups.len();
        k.derived("text_groups.count", &|| count)
    }

    fn check(&self) -> std::result::Result<(), String> {
        use config::limits::*;
        positive("hidden", self.hidden)?;
        let v = &self.vit;
        bounded("vit_layers", v.layers, 1, MAX_LAYERS)?;
        bounded("num_register_tokens", v.registers, 0, 64)?;
        if v.patch_size == 0 || !v.image_size.is_multiple_of(v.patch_size) {
            return Err(format!(
                "image_size {} must be a multiple of patch_size {}",
                v.image_size, v.patch_size
            ));
        }
        crate::modules::vision::check_geometry(v.image_size, v.patch_size, 0.0)?;
        if self.num_views * v.n_patches() > MAX_SEQUENCE {
            return Err(format!(
                "num_views {} x {} patches (image_size {} / patch_size {}, squared) is more than {MAX_SEQUENCE} image tokens",
                self.num_views,
                v.n_patches(),
                v.image_size,
                v.patch_size
            ));
        }
        let b = &self.bert;
        bounded("text_layers", b.layers, 1, MAX_LAYERS)?;
        bounded("num_fusion_layers", self.fusion_layers, 1, MAX_LAYERS)?;
        bounded(
            "num_action_decoder_layers",
            self.decoder_layers,
            1,
            MAX_LAYERS,
        )?;
        bounded("action_horizon", self.horizon, 1, MAX_CHUNK)?;
        bounded("action_dim", self.action_dim, 1, MAX_ROBOT_DIM)?;
        bounded("state_dim", self.state_dim, 1, MAX_ROBOT_DIM)?;
        bounded("num_state_tokens", self.state_tokens, 1, 1024)?;
        bounded("num_views", self.num_views, 1, MAX_IMAGES)?;
        bounded("max_text_length", self.text_len, 2, MAX_SEQUENCE)?;
        if self.enhancer_layers != self.fusion_layers {
            return Err(format!(
                "num_text_layers {} must equal num_fusion_layers {} (one enhancer per fusion layer)",
                self.enhancer_layers, self.fusion_layers
            ));
        }
        let widths = [
            ("vit_dim", v.hidden, "vit_heads", v.heads),
            ("text_dim", b.hidden, "text_heads", b.heads),
            (
                "the fusion width",
                self.fusion_dim,
                "fusion_heads",
                self.fusion_heads,
            ),
            (
                "hidden",
                self.hidden,
                "text_enhancer_heads",
                self.enhancer_heads,
            ),
            ("hidden", self.hidden, "action_heads", self.action_heads),
        ];
        for (what, d, heads, h) in widths {
            if h == 0 || d == 0 || !d.is_multiple_of(h) {
                return Err(format!(
                    "{what} {d} must be a positive multiple of {heads} {h}"
                ));
            }
        }
        if !(v.hidden / v.heads).is_multiple_of(4) {
            return Err(format!(
                "vit head width {} must be a multiple of 4 (axial rotary pairs)",
                v.hidden / v.heads
            ));
        }
        if !(v.rope_theta.is_finite() && v.rope_theta > 0.0) {
            return Err(format!(
                "rope_theta {} must be finite and > 0",
                v.rope_theta
            ));
        }
        let s = &self.special;
        for (name, id) in [
            ("pad_token_id", s.pad),
            ("cls_token_id", s.cls),
            ("sep_token_id", s.sep),
            ("period_token_id", s.period),
            ("question_token_id", s.question),
        ] {
            if id >= b.vocab {
                return Err(format!(
                    "{name} {id} is outside the vocabulary ({})",
                    b.vocab
                ));
            }
        }
        for g in &self.groups {
            if g.tokens.len() > g.pad_to || g.pad_to > self.text_len {
                return Err(format!(
                    "text group of {} tokens padded to {}: expected tokens <= pad_to <= max_text_length {}",
                    g.tokens.len(),
                    g.pad_to,
                    self.text_len
                ));
            }
        }
        Ok(())
    }
}

pub(super) fn bad(why: String) -> Error {
    Error::InvalidArgument(format!("{ARCH} config: {why}"))
}

/// A tensor's row-major shape.
fn dims(file: &GgufFile, name: &str) -> Result<Vec<usize>> {
    Ok(file.tensor_info(name)?.shape())
}

/// The rows of the 2-D tensor `name` (its first row-major dim).
fn rows(file: &GgufFile, name: &str) -> Result<usize> {
    dims(file, name)?
        .first()
        .copied()
        .ok_or_else(|| bad(format!("{name}: a scalar")))
}

impl TurboConfig {
    pub fn empty() -> Self {
        TurboConfig {
            hidden: 0,
            vit: Dinov3Config {
                hidden: 0,
                layers: 0,
                heads: 0,
                inter: 0,
                image_size: 0,
                patch_size: 0,
                registers: 0,
                rope_theta: 0.0,
            },
            bert: BertConfig::default(),
            fusion_layers: 0,
            fusion_heads: 0,
            fusion_dim: 0,
            enhancer_layers: 0,
            enhancer_heads: 0,
            enhancer_ffn: 0,
            action_heads: 0,
            decoder_layers: 0,
            decoder_ffn: 0,
            action_dim: 0,
            state_dim: 0,
            state_tokens: 0,
            horizon: 0,
            num_views: 0,
            proj_hidden: 0,
            state_hidden: 0,
            action_hidden: 0,
            text_len: 0,
            pad_to_longest: false,
            special: SpecialIds::default(),
            groups: vec![],
            flat_views: false,
        }
    }

    /// Reads and checks the config of a `turbovla` file; widths from the weights' shapes.
    pub fn read(file: &GgufFile) -> Result<Self> {
        let mut cfg = Self::empty();
        cfg.vit.inter = rows(file, "vit.blk.0.fc1.weight")?;
        let t = "text.embed";
        cfg.bert.max_positions = rows(file, &format!("{t}.position_embeddings"))?;
        cfg.bert.token_types = rows(file, &format!("{t}.token_type_embeddings"))?;
        cfg.bert.inter = rows(file, "text.encoder.layer.0.intermediate.dense.weight")?;
        cfg.fusion_dim = rows(file, "vl_fusion.0.v_proj.weight")?;
        cfg.enhancer_ffn = rows(file, "vl_text.0.fc1.weight")?;
        cfg.decoder_ffn = rows(file, "act.dec.0.fc1.weight")?;
        cfg.proj_hidden = rows(file, "vit_proj.mlp.0.weight")?;
        cfg.state_hidden = rows(file, "state.proj.1.weight")?;
        cfg.action_hidden = rows(file, "act.proj.0.weight")?;
        cfg.groups = read_groups(file)?;
        cfg.flat_views = dims(file, "view_emb")?.len() == 2;
        config::read(file, ARCH, cfg)
    }

    /// Writes `general.architecture`, the `turbovla.*` keys and the text groups (as vla.cpp:
    /// the count always, the arrays where there are groups).
    pub fn write(&self, w: &mut GgufWriter) -> Result<()> {
        w.add_metadata("general.architecture", ARCH)?;
        // vla.cpp's runtime requires it
        w.add_metadata(format!("{ARCH}.architecture"), ARCH)?;
        config::write_keys(self, w, ARCH)?;
        if self.groups.is_empty() {
            return Ok(());
        }
        let tokens = self.groups.iter().flat_map(|g| g.tokens.iter().copied());
        let lengths = self.groups.iter().map(|g| g.tokens.len() as u32);
        let pad_to = self.groups.iter().map(|g| g.pad_to as u32);
        let arrays: [(&str, Vec<u32>); 3] = [
            ("tokens", tokens.collect()),
            ("lengths", lengths.collect()),
            ("pad_to", pad_to.collect()),
        ];
        for (key, v) in arrays {
            // INT32 arrays, as gguf-py writes Python ints
            let v = v.into_iter().map(|x| Value::I32(x as i32)).collect();
            w.add_metadata(
                format!("{ARCH}.text_groups.{key}"),
                Value::Array(ValueType::I32, v),
            )?;
        }
        Ok(())
    }

    /// The padded length of the instruction `ids` (`[CLS]` and `[SEP]` included): its
    /// group's, else `max_text_length` (or its own length when `pad_to_longest`).
    pub fn pad_to(&self, ids: &[u32]) -> usize {
        match self.groups.iter().find(|g| g.tokens == ids) {
            Some(g) => g.pad_to,
            None if self.pad_to_longest => ids.len(),
            None => self.text_len,
        }
    }
}

/// The text groups (`text_groups.{count,tokens,lengths,pad_to}`).
fn read_groups(file: &GgufFile) -> Result<Vec<TextGroup>> {
    let count = config::Meta::new(file, ARCH).usize("text_groups.count")?;
    if count == 0 {
        return Ok(vec![]);
    }
    let tokens = config::read_u32s(file, ARCH, "text_groups.tokens")?;
    let lengths = config::read_u32s(file, ARCH, "text_groups.lengths")?;
    let pad_to = config::read_u32s(file, ARCH, "text_groups.pad_to")?;
    let total: u64 = lengths.iter().map(|&l| u64::from(l)).sum();
    if lengths.len() != count || pad_to.len() != count || total != tokens.len() as u64 {
        return Err(bad(format!(
            "text_groups: {count} groups, {} lengths, {} pad_to, {} tokens for lengths summing to {total}",
            lengths.len(),
            pad_to.len(),
            tokens.len()
        )));
    }
    let mut at = 0;
    Ok(lengths
        .iter()
        .zip(&pad_to)
        .map(|(&l, &p)| {
            let g = TextGroup {
                tokens: tokens[at..at + l as usize].to_vec(),
                pad_to: p as usize,
            };
            at += l as usize;
            g
        })
        .collect())
}
