//! Octo's Flax parameters in vla.cpp's `octo` names and layouts.

use super::config::Extra;
use crate::convert::ckpt_err;
use crate::convert::msgpack::{Array, Leaves};
use crate::models::octo::config::STEM_STAGES;
use crate::models::octo::{Head, OctoConfig, ARCH};
use crate::{Error, Result};
use std::path::PathBuf;

/// The parameters, with the path of every one read checked off.
pub(super) struct Params {
    pub leaves: Leaves,
    pub path: PathBuf,
}

impl Params {
    pub fn get(&self, p: &str) -> Result<&Array> {
        self.leaves
            .get(p)
            .ok_or_else(|| ckpt_err(&self.path, format!("no parameter {p}")))
    }

    pub fn has(&self, p: &str) -> bool {
        self.leaves.contains_key(p)
    }

    /// A Dense kernel `[in, out]` as `[out, in]`; attention kernels `[D, H, hd]` (q, k, v)
    /// read as `[D, H * hd]` and `[H, hd, D]` (out) as `[H * hd, D]` first.
    fn dense(&self, p: &str) -> Result<(Vec<usize>, Vec<f32>)> {
        let a = self.get(&format!("{p}/kernel"))?;
        let (rows, cols) = match a.shape.as_slice() {
            [i, o] => (*i, *o),
            [d, h, hd] if p.ends_with("/out") => (d * h, *hd),
            [d, h, hd] => (*d, h * hd),
            s => return Err(ckpt_err(&self.path, format!("{p}/kernel: shape {s:?}"))),
        };
        Ok((vec![cols, rows], transpose(&a.values, rows, cols)))
    }

    fn flat(&self, p: &str) -> Result<Vec<f32>> {
        Ok(self.get(p)?.values.clone())
    }
}

fn transpose(v: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut t = vec![0.0; v.len()];
    for r in 0..rows {
        for c in 0..cols {
            t[c * rows + r] = v[r * cols + c];
        }
    }
    t
}

/// A Flax convolution kernel `[KH, KW, C, O]` as `[O, C, KH, KW]`.
fn conv(a: &Array) -> Result<(Vec<usize>, Vec<f32>)> {
    let [kh, kw, c, o] = a.shape[..] else {
        return Err(Error::InvalidArgument(format!("conv kernel {:?}", a.shape)));
    };
    let per = kh * kw * c;
    let mut out = vec![0.0; a.values.len()];
    // source index ((y * kw + x) * c + ci) * o + oc; ours oc * per + (ci * kh + y) * kw + x
    for (i, &v) in a.values.iter().enumerate() {
        let (rest, oc) = (i / o, i % o);
        let (yx, ci) = (rest / c, rest % c);
        let (y, x) = (yx / kw, yx % kw);
        out[oc * per + (ci * kh + y) * kw + x] = v;
    }
    Ok((vec![o, c, kh, kw], out))
}

/// Where SmallStem's parameters are under camera `cam`'s tokenizer (`<tokenizer>/<encoder
/// class>_0`).
pub(super) fn stem_prefix(p: &Params, cam: &str) -> Result<String> {
    let base = format!("octo_transformer/observation_tokenizers_{cam}/");
    p.leaves
        .keys()
        .find_map(|k| {
            let rest = k.strip_prefix(&base)?;
            let (enc, tail) = rest.split_once('/')?;
            (tail == "StdConv_0/kernel").then(|| format!("{base}{enc}"))
        })
        .ok_or_else(|| ckpt_err(&p.path, format!("no SmallStem under {base}")))
}

/// One tensor to write: our name, its shape and values, and whether it is a matrix the
/// `--dtype` applies to.
pub(super) struct Out {
    pub name: String,
    pub shape: Vec<usize>,
    pub values: Vec<f32>,
    pub matrix: bool,
}

pub(super) struct Plan<'p> {
    pub p: &'p Params,
    pub out: Vec<Out>,
}

impl Plan<'_> {
    fn put(&mut self, name: impl Into<String>, shape: Vec<usize>, values: Vec<f32>, matrix: bool) {
        self.out.push(Out {
            name: name.into(),
            shape,
            values,
            matrix,
        });
    }

    /// A Dense layer `src` as `<ours>.weight` / `.bias`.
    fn dense(&mut self, ours: &str, src: &str, bias: bool, matrix: bool) -> Result<()> {
        let (shape, w) = self.p.dense(src)?;
        self.put(format!("{ours}.weight"), shape, w, matrix);
        if bias {
            let b = self.p.flat(&format!("{src}/bias"))?;
            self.put(format!("{ours}.bias"), vec![b.len()], b, false);
        }
        Ok(())
    }

    /// A LayerNorm / GroupNorm (`scale`, `bias`) as `<ours>.weight` / `.bias`.
    fn norm(&mut self, ours: &str, src: &str) -> Result<()> {
        for (a, b) in [("weight", "scale"), ("bias", "bias")] {
            let v = self.p.flat(&format!("{src}/{b}"))?;
            self.put(format!("{ours}.{a}"), vec![v.len()], v, false);
        }
        Ok(())
    }

    /// A position table `[1, ..]` without its batch dimension.
    fn table(&mut self, ours: &str, src: &str) -> Result<Vec<usize>> {
        let a = self.p.get(src)?;
        let shape = a.shape.get(1..).unwrap_or(&[]).to_vec();
        self.put(ours, shape.clone(), a.values.clone(), false);
        Ok(shape)
    }

    /// Flax attention `src` (`query`, `key`, `value`, `out`) as `<ours>.attn_qkv` (fused)
    /// and `<ours>.attn_o`.
    fn attention(&mut self, ours: &str, src: &str, matrix: bool) -> Result<()> {
        let (mut w, mut b, mut rows, mut cols) = (vec![], vec![], 0, 0);
        for part in ["query", "key", "value"] {
            let (shape, v) = self.p.dense(&format!("{src}/{part}"))?;
            (rows, cols) = (rows + shape[0], shape[1]);
            w.extend(v);
            b.extend(self.p.flat(&format!("{src}/{part}/bias"))?);
        }
        self.put(
            format!("{ours}.attn_qkv.weight"),
            vec![rows, cols],
            w,
            matrix,
        );
        self.put(format!("{ours}.attn_qkv.bias"), vec![rows], b, false);
        self.dense(
            &format!("{ours}.attn_o"),
            &format!("{src}/out"),
            true,
            matrix,
        )
    }
}

/// Every tensor, in our names.
pub(super) fn tensors(plan: &mut Plan, cfg: &OctoConfig, extra: &Extra) -> Result<()> {
    let ot = "octo_transformer";
    for (cam, s) in cfg.cameras() {
        let base = stem_prefix(plan.p, cam)?;
        let ours = format!("{ARCH}.obs.{cam}");
        for i in 0..STEM_STAGES {
            let (shape, w) = conv(plan.p.get(&format!("{base}/StdConv_{i}/kernel"))?)?;
            plan.put(format!("{ours}.stem.{i}.conv.weight"), shape, w, false);
            let b = plan.p.flat(&format!("{base}/StdConv_{i}/bias"))?;
            plan.put(
                format!("{ours}.stem.{i}.conv.bias"),
                vec![b.len()],
                b,
                false,
            );
            plan.norm(
                &format!("{ours}.stem.{i}.gn"),
                &format!("{base}/GroupNorm_{i}"),
            )?;
        }
        let (shape, w) = conv(plan.p.get(&format!("{base}/embedding/kernel"))?)?;
        plan.put(format!("{ours}.patch_embd.weight"), shape, w, false);
        let b = plan.p.flat(&format!("{base}/embedding/bias"))?;
        plan.put(format!("{ours}.patch_embd.bias"), vec![b.len()], b, false);
        plan.dense(
            &format!("{ours}.proj"),
            &format!("{ot}/obs_{cam}_projection"),
            true,
            false,
        )?;
        let pos = plan.table(
            &format!("{ours}.pos_embd"),
            &format!("{ot}/obs_{cam}_pos_embedding"),
        )?;
        let g = s.grid();
        if pos.get(1) != Some(&(g * g)) {
            return Err(ckpt_err(
                &plan.p.path,
                format!(
                    "obs_{cam}_pos_embedding {pos:?}: {} tokens expected from a {}x{} frame",
                    g * g,
                    s.side,
                    s.side
                ),
            ));
        }
    }
    if cfg.proprio_dim > 0 {
        plan.dense(
            &format!("{ARCH}.obs.proprio.proj"),
            &format!("{ot}/obs_proprio_projection"),
            true,
            false,
        )?;
        plan.table(
            &format!("{ARCH}.obs.proprio.pos_embd"),
            &format!("{ot}/obs_proprio_pos_embedding"),
        )?;
        let n = extra.bins.len();
        plan.put(
            format!("{ARCH}.obs.proprio.bin_thresholds"),
            vec![n],
            extra.bins.clone(),
            false,
        );
    }
    plan.dense(
        &format!("{ARCH}.task.language.proj"),
        &format!("{ot}/task_language_projection"),
        true,
        false,
    )?;
    plan.table(
        &format!("{ARCH}.task.language.pos_embd"),
        &format!("{ot}/task_language_pos_embedding"),
    )?;
    plan.table(
        &format!("{ARCH}.readout.action.pos_embd"),
        &format!("{ot}/readout_action_pos_embedding"),
    )?;
    t5_tensors(plan, cfg)?;
    let tr = format!("{ot}/BlockTransformer_0/Transformer_0");
    for i in 0..cfg.layers {
        let (ours, src) = (format!("{ARCH}.blk.{i}"), format!("{tr}/encoderblock_{i}"));
        plan.norm(&format!("{ours}.attn_norm"), &format!("{src}/LayerNorm_0"))?;
        plan.attention(
            &ours,
            &format!("{src}/MultiHeadDotProductAttention_0"),
            true,
        )?;
        plan.norm(&format!("{ours}.ffn_norm"), &format!("{src}/LayerNorm_1"))?;
        plan.dense(
            &format!("{ours}.ffn_up"),
            &format!("{src}/MlpBlock_0/Dense_0"),
            true,
            true,
        )?;
        plan.dense(
            &format!("{ours}.ffn_down"),
            &format!("{src}/MlpBlock_0/Dense_1"),
            true,
            true,
        )?;
    }
    plan.norm(
        &format!("{ARCH}.output_norm"),
        &format!("{tr}/encoder_norm"),
    )?;
    match cfg.head {
        Head::Diffusion => {
            let (ours, src) = (
                format!("{ARCH}.head.diffusion"),
                "heads_action/diffusion_model",
            );
            let a = plan
                .p
                .get(&format!("{src}/time_preprocess/kernel"))?
                .clone();
            plan.put(
                format!("{ours}.time_fourier.weight"),
                a.shape,
                a.values,
                false,
            );
            for k in 0..2 {
                plan.dense(
                    &format!("{ours}.cond.{k}"),
                    &format!("{src}/cond_encoder/Dense_{k}"),
                    true,
                    false,
                )?;
            }
            let rn = format!("{src}/reverse_network");
            plan.dense(
                &format!("{ours}.reverse.in"),
                &format!("{rn}/Dense_0"),
                true,
                false,
            )?;
            for b in 0..cfg.blocks {
                let (o, s) = (
                    format!("{ours}.reverse.blk.{b}"),
                    format!("{rn}/MLPResNetBlock_{b}"),
                );
                if cfg.head_ln {
                    plan.norm(&format!("{o}.ln"), &format!("{s}/LayerNorm_0"))?;
                }
                plan.dense(&format!("{o}.fc1"), &format!("{s}/Dense_0"), true, false)?;
                plan.dense(&format!("{o}.fc2"), &format!("{s}/Dense_1"), true, false)?;
            }
            plan.dense(
                &format!("{ours}.reverse.out"),
                &format!("{rn}/Dense_1"),
                true,
                false,
            )?;
        }
        Head::L1 => {
            let ours = format!("{ARCH}.head.l1");
            if cfg.use_map {
                let m = "heads_action/map_head";
                let probe = plan.p.get(&format!("{m}/probe"))?.clone();
                plan.put(
                    format!("{ours}.map.probe"),
                    vec![1, 1, cfg.d],
                    probe.values,
                    false,
                );
                plan.attention(
                    &format!("{ours}.map"),
                    &format!("{m}/MultiHeadDotProductAttention_0"),
                    false,
                )?;
                plan.norm(&format!("{ours}.map.norm"), &format!("{m}/LayerNorm_0"))?;
                plan.dense(
                    &format!("{ours}.map.ffn_up"),
                    &format!("{m}/MlpBlock_0/Dense_0"),
                    true,
                    false,
                )?;
                plan.dense(
                    &format!("{ours}.map.ffn_down"),
                    &format!("{m}/MlpBlock_0/Dense_1"),
                    true,
                    false,
                )?;
            }
            plan.dense(
                &format!("{ours}.mean_proj"),
                "heads_action/mean_proj",
                true,
                false,
            )?;
        }
    }
    Ok(())
}

/// T5's encoder, in llama.cpp's T5 names under `octo.t5`.
fn t5_tensors(plan: &mut Plan, cfg: &OctoConfig) -> Result<()> {
    let src = "octo_transformer/task_tokenizers_language/hf_model";
    let ours = format!("{ARCH}.t5");
    let emb = plan.p.get(&format!("{src}/shared/embedding"))?.clone();
    plan.put(
        format!("{ours}.tok_embd.weight"),
        emb.shape,
        emb.values,
        false,
    );
    for i in 0..cfg.t5_layers {
        let (o, l) = (
            format!("{ours}.blk.{i}"),
            format!("{src}/encoder/block/{i}/layer"),
        );
        let w = |plan: &mut Plan, name: &str, from: &str| -> Result<()> {
            plan.dense(&format!("{o}.{name}"), &format!("{l}/{from}"), false, true)
        };
        let v = plan.p.flat(&format!("{l}/0/layer_norm/weight"))?;
        plan.put(format!("{o}.attn_norm.weight"), vec![v.len()], v, false);
        for (name, from) in [
            ("attn_q", "q"),
            ("attn_k", "k"),
            ("attn_v", "v"),
            ("attn_o", "o"),
        ] {
            w(plan, name, &format!("0/SelfAttention/{from}"))?;
        }
        if i == 0 {
            let rel = plan
                .p
                .get(&format!(
                    "{l}/0/SelfAttention/relative_attention_bias/embedding"
                ))?
                .clone();
            plan.put(
                format!("{o}.attn_rel_b.weight"),
                rel.shape,
                rel.values,
                false,
            );
        }
        let v = plan.p.flat(&format!("{l}/1/layer_norm/weight"))?;
        plan.put(format!("{o}.ffn_norm.weight"), vec![v.len()], v, false);
        match cfg.t5_gated {
            true => {
                w(plan, "ffn_gate", "1/DenseReluDense/wi_0")?;
                w(plan, "ffn_up", "1/DenseReluDense/wi_1")?;
            }
            false => w(plan, "ffn_up", "1/DenseReluDense/wi")?,
        }
        w(plan, "ffn_down", "1/DenseReluDense/wo")?;
    }
    let v = plan
        .p
        .flat(&format!("{src}/encoder/final_layer_norm/weight"))?;
    plan.put(
        format!("{ours}.output_norm.weight"),
        vec![v.len()],
        v,
        false,
    );
    Ok(())
}
