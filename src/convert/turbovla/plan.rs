//! The tensor plan: every tensor vla.cpp writes, where it comes from, and how it is read.

use super::weights::{Stored, Weights};
use super::weights::{
    ACT_DEC, FUSION, STATE_PROJ, TEXT, TEXT_PROJ, VIEW_EMB, VIT, VIT_PROJ, VL_TEXT,
};
use crate::convert::ckpt_err;
use crate::models::turbovla::TurboConfig;
use crate::Result;

/// Where one of our tensors comes from.
#[derive(Clone, Debug)]
pub(super) enum Source {
    /// A checkpoint tensor as it is (leading unit dims dropped).
    Copy(String),
    /// The patch convolution `[D, 3, p, p]` as the matrix `[D, 3 p p]`.
    Patch(String),
    /// A weight's rows (or a bias's values) times LayerScale `.1` (`lambda1`, one per row).
    Scaled(String, String),
    /// Zeros of this many values (a missing `k_proj` bias).
    Zeros(usize),
}

/// The tensor plan being built: our name and its source, in vla.cpp's order.
#[derive(Default)]
struct Plan(Vec<(String, Source)>);

impl Plan {
    fn copy(&mut self, ours: impl Into<String>, theirs: impl Into<String>) {
        self.0.push((ours.into(), Source::Copy(theirs.into())));
    }

    /// `{ours}.{weight,bias}` from `{theirs}.{weight,bias}`.
    fn pair(&mut self, ours: &str, theirs: &str) {
        for p in ["weight", "bias"] {
            self.copy(format!("{ours}.{p}"), format!("{theirs}.{p}"));
        }
    }

    /// [`Self::pair`] of each `(ours, theirs)` under the prefixes `o` and `t`.
    fn pairs(&mut self, o: &str, t: &str, parts: &[(&str, &str)]) {
        for (ours, theirs) in parts {
            self.pair(&format!("{o}.{ours}"), &format!("{t}.{theirs}"));
        }
    }
}

/// Every tensor vla.cpp writes, in its order, and where it comes from.
pub(super) fn plan(w: &Weights, cfg: &TurboConfig) -> Vec<(String, Source)> {
    let mut p = Plan::default();
    p.copy("vit.cls_token", format!("{VIT}.embeddings.cls_token"));
    p.0.push((
        "vit.patch_embed.weight".into(),
        Source::Patch(format!("{VIT}.embeddings.patch_embeddings.weight")),
    ));
    p.copy(
        "vit.patch_embed.bias",
        format!("{VIT}.embeddings.patch_embeddings.bias"),
    );
    let reg = format!("{VIT}.embeddings.register_tokens");
    if w.contains(&reg) {
        p.copy("vit.register_tokens", reg);
    }
    for i in 0..cfg.vit.layers {
        let (o, l) = (format!("vit.blk.{i}"), format!("{VIT}.layer.{i}"));
        let a = format!("{l}.attention");
        for (ours, theirs) in [
            ("attn_q", "q_proj"),
            ("attn_k", "k_proj"),
            ("attn_v", "v_proj"),
        ] {
            p.copy(format!("{o}.{ours}.weight"), format!("{a}.{theirs}.weight"));
            let bias = format!("{a}.{theirs}.bias");
            match theirs == "k_proj" && !w.contains(&bias) {
                true => {
                    p.0.push((format!("{o}.{ours}.bias"), Source::Zeros(cfg.vit.hidden)))
                }
                false => p.copy(format!("{o}.{ours}.bias"), bias),
            }
        }
        let scaled = |ours: &str, theirs: &str, scale: &str| {
            ["weight", "bias"].map(|x| {
                let src = Source::Scaled(format!("{theirs}.{x}"), format!("{l}.{scale}.lambda1"));
                (format!("{o}.{ours}.{x}"), src)
            })
        };
        p.0.extend(scaled("attn_o", &format!("{a}.o_proj"), "layer_scale1"));
        p.pairs(
            &o,
            &l,
            &[("ln1", "norm1"), ("ln2", "norm2"), ("fc1", "mlp.up_proj")],
        );
        p.0.extend(scaled("fc2", &format!("{l}.mlp.down_proj"), "layer_scale2"));
    }
    let e = format!("{TEXT}.embeddings");
    for t in [
        "word_embeddings",
        "position_embeddings",
        "token_type_embeddings",
    ] {
        p.copy(format!("text.embed.{t}"), format!("{e}.{t}.weight"));
    }
    p.pair("text.embed.LayerNorm", &format!("{e}.LayerNorm"));
    for i in 0..cfg.bert.layers {
        let (o, l) = (
            format!("text.encoder.layer.{i}"),
            format!("{TEXT}.encoder.layer.{i}"),
        );
        for part in [
            "attention.self.query",
            "attention.self.key",
            "attention.self.value",
            "attention.output.dense",
            "attention.output.LayerNorm",
            "intermediate.dense",
            "output.dense",
            "output.LayerNorm",
        ] {
            p.pair(&format!("{o}.{part}"), &format!("{l}.{part}"));
        }
    }
    p.pair("text_proj", TEXT_PROJ);
    let parts = [
        ("input_norm", "input_norm"),
        ("mlp.0", "mlp.0"),
        ("mlp.3", "mlp.3"),
    ];
    p.pairs("vit_proj", VIT_PROJ, &parts);
    p.copy("vit_proj.skip.weight", format!("{VIT_PROJ}.skip.weight"));
    p.pair("vit_proj.output_norm", &format!("{VIT_PROJ}.output_norm"));
    for i in 0..cfg.fusion_layers {
        let (o, l) = (format!("vl_fusion.{i}"), format!("{FUSION}.{i}"));
        let parts = [
            ("v_proj", "v_proj"),
            ("l_proj", "l_proj"),
            ("values_v", "values_v_proj"),
            ("values_l", "values_l_proj"),
            ("out_v", "out_v_proj"),
            ("out_l", "out_l_proj"),
        ];
        p.pairs(&o, &format!("{l}.attn"), &parts);
        p.pairs(
            &o,
            &l,
            &[("norm_v", "layer_norm_v"), ("norm_l", "layer_norm_l")],
        );
        p.copy(format!("{o}.gamma_v"), format!("{l}.gamma_v"));
        p.copy(format!("{o}.gamma_l"), format!("{l}.gamma_l"));
    }
    for i in 0..cfg.enhancer_layers {
        let (o, l) = (format!("vl_text.{i}"), format!("{VL_TEXT}.{i}"));
        p.copy(
            format!("{o}.attn_qkv.weight"),
            format!("{l}.self_attn.in_proj_weight"),
        );
        p.copy(
            format!("{o}.attn_qkv.bias"),
            format!("{l}.self_attn.in_proj_bias"),
        );
        let parts = [
            ("attn_o", "self_attn.out_proj"),
            ("ln1", "norm1"),
            ("fc1", "linear1"),
            ("fc2", "linear2"),
            ("ln2", "norm2"),
        ];
        p.pairs(&o, &l, &parts);
    }
    p.copy("act.q.weight", format!("{ACT_DEC}.action_queries.weight"));
    for i in 0..cfg.decoder_layers {
        let (o, l) = (
            format!("act.dec.{i}"),
            format!("{ACT_DEC}.decoder.layers.{i}"),
        );
        for (ours, theirs) in [("self", "self_attn"), ("cross", "multihead_attn")] {
            p.copy(
                format!("{o}.{ours}_qkv.weight"),
                format!("{l}.{theirs}.in_proj_weight"),
            );
            p.copy(
                format!("{o}.{ours}_qkv.bias"),
                format!("{l}.{theirs}.in_proj_bias"),
            );
            p.pair(
                &format!("{o}.{ours}_out"),
                &format!("{l}.{theirs}.out_proj"),
            );
        }
        let parts = [
            ("ln1", "norm1"),
            ("ln2", "norm2"),
            ("ln3", "norm3"),
            ("fc1", "linear1"),
            ("fc2", "linear2"),
        ];
        p.pairs(&o, &l, &parts);
    }
    let ap = format!("{ACT_DEC}.action_projection.layers");
    p.pairs("act.proj", &ap, &[("0", "0"), ("1", "1"), ("2", "2")]);
    let parts = [
        ("0", "net.0"),
        ("1", "net.1"),
        ("4", "net.4"),
        ("output_norm", "output_norm"),
    ];
    p.pairs("state.proj", STATE_PROJ, &parts);
    p.copy("state.proj.position", format!("{STATE_PROJ}.position"));
    p.copy("view_emb", VIEW_EMB);
    p.0
}

impl Source {
    /// The checkpoint tensors it reads.
    pub(super) fn reads(&self) -> Vec<&str> {
        match self {
            Source::Copy(n) | Source::Patch(n) => vec![n],
            Source::Scaled(n, s) => vec![n, s],
            Source::Zeros(_) => vec![],
        }
    }

    /// The shape it has as vla.cpp writes it, checked against the graph's `want` where the
    /// graph reads it: the values, and the type they are stored in.
    pub(super) fn read(
        &self,
        w: &Weights,
        ours: &str,
        want: Option<&[usize]>,
    ) -> Result<(Vec<usize>, Vec<f32>, Stored)> {
        let mismatch = |theirs: &str, got: &[usize], want: &[usize]| {
            ckpt_err(
                w.path(),
                format!(
                    "tensor {theirs:?} (-> {ours}) has shape {got:?}, the config implies {want:?}"
                ),
            )
        };
        match self {
            Source::Zeros(n) => {
                let shape = vec![*n];
                if want.is_some_and(|s| s != shape.as_slice()) {
                    return Err(mismatch(ours, &shape, want.unwrap_or_default()));
                }
                Ok((shape, vec![0.0; *n], Stored::F32))
            }
            Source::Patch(n) => {
                let got = w.require_shape(n)?;
                let flat = match got {
                    [d, c, p, q] => vec![*d, c * p * q],
                    _ => return Err(mismatch(n, got, want.unwrap_or_default())),
                };
                if want.is_some_and(|s| s != flat.as_slice()) {
                    return Err(mismatch(n, got, want.unwrap_or_default()));
                }
                Ok((flat, w.f32(n)?, w.stored(n)))
            }
            Source::Copy(n) => {
                let got = w.require_shape(n)?;
                let shape = squeezed(got, want);
                if let Some(want) = want.filter(|s| *s != shape.as_slice()) {
                    return Err(mismatch(n, got, want));
                }
                Ok((shape, w.f32(n)?, w.stored(n)))
            }
            Source::Scaled(n, s) => {
                let got = w.require_shape(n)?;
                if let Some(want) = want.filter(|s| *s != got) {
                    return Err(mismatch(n, got, want));
                }
                let rows = got.first().copied().unwrap_or(1);
                let scale_shape = w.require_shape(s)?;
                if scale_shape != [rows] {
                    return Err(mismatch(s, scale_shape, &[rows]));
                }
                let ty = w.stored(n).times(w.stored(s));
                let (mut vals, scale) = (w.f32(n)?, w.f32(s)?);
                let per = vals.len() / rows.max(1);
                for (i, x) in vals.iter_mut().enumerate() {
                    *x = ty.round(*x * scale[i / per.max(1)]);
                }
                Ok((got.to_vec(), vals, ty))
            }
        }
    }
}

/// `got` without leading unit dims: down to `want`'s rank where the graph reads the tensor,
/// else as vla.cpp's `squeeze(0)` of the class and register tokens leaves them.
fn squeezed(got: &[usize], want: Option<&[usize]>) -> Vec<usize> {
    let mut g = got;
    match want {
        Some(want) => {
            while g.len() > want.len() && g[0] == 1 {
                g = &g[1..];
            }
        }
        None if g.len() == 3 && g[0] == 1 => g = &g[1..],
        None => {}
    }
    g.to_vec()
}
