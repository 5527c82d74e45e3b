//! The lerobot GR00T state-dict keys of every GGUF tensor: N1.5's, and the action head's
//! that N1.5 and N1.7 share.

use super::{Gr00tConfig, P};
use crate::modules::gr00t_head::HeadLinears;

/// Our GGUF name -> the checkpoint key, for every weight of `cfg` (not the statistics).
pub fn name_map(cfg: &Gr00tConfig) -> Vec<(String, String)> {
    let vit = format!("{P}backbone.eagle_model.vision_model.vision_model.");
    let lm = format!("{P}backbone.eagle_model.language_model.model.");
    let mut m = crate::convert::siglip_name_map(&vit, cfg.vision.layers);
    for p in ["weight", "bias"] {
        m.push((
            format!("mm.fc.{p}"),
            format!("{P}backbone.eagle_model.mlp1.0.{p}"),
        ));
    }
    let ah = format!("{P}action_head.");
    let layers = (cfg.vlsa.layers, cfg.dit.layers);
    m.extend(head_name_map(&ah, layers, HeadLinears::PerEmbodiment));
    m.extend(crate::convert::qwen::lm_name_map(&lm, cfg.lm.n_layers));
    m
}

/// The action head's weights (`aex.*`, under `ah`): vlln and the VL self-attention blocks
/// (when `vlsa_layers` > 0), the DiT, the position and future-token tables, the state and
/// action encoders and the action decoder (stored as `kind`). The GR00T and VLA-JEPA heads.
pub fn head_name_map(
    ah: &str,
    (vlsa_layers, dit_layers): (usize, usize),
    kind: HeadLinears,
) -> Vec<(String, String)> {
    let mut m = Vec::new();
    let mut wb = |ours: &str, theirs: &str| {
        for p in ["weight", "bias"] {
            m.push((format!("{ours}.{p}"), format!("{theirs}.{p}")));
        }
    };
    if vlsa_layers > 0 {
        wb("aex.vlln", &format!("{ah}vlln"));
    }
    let dit = format!("{ah}model.");
    for (ours, theirs) in [
        (
            "aex.dit.time_emb.l1",
            "timestep_encoder.timestep_embedder.linear_1",
        ),
        (
            "aex.dit.time_emb.l2",
            "timestep_encoder.timestep_embedder.linear_2",
        ),
        ("aex.dit.proj_out1", "proj_out_1"),
        ("aex.dit.proj_out2", "proj_out_2"),
    ] {
        wb(ours, &format!("{dit}{theirs}"));
    }
    let blocks = |stack: &str, theirs: &str, n: usize, norms: &[(&str, &str)]| {
        let mut v = Vec::new();
        for i in 0..n {
            let (o, t) = (
                format!("aex.{stack}.{i}"),
                format!("{theirs}transformer_blocks.{i}"),
            );
            let mut pairs = vec![
                ("attn_q", "attn1.to_q"),
                ("attn_k", "attn1.to_k"),
                ("attn_v", "attn1.to_v"),
                ("attn_o", "attn1.to_out.0"),
                ("ff0", "ff.net.0.proj"),
                ("ff2", "ff.net.2"),
            ];
            pairs.extend_from_slice(norms);
            for (a, b) in pairs {
                for p in ["weight", "bias"] {
                    v.push((format!("{o}.{a}.{p}"), format!("{t}.{b}.{p}")));
                }
            }
        }
        v
    };
    m.extend(blocks(
        "dit",
        &dit,
        dit_layers,
        &[("adaln", "norm1.linear")],
    ));
    m.extend(blocks(
        "vlsa",
        &format!("{ah}vl_self_attention."),
        vlsa_layers,
        &[("norm1", "norm1"), ("norm3", "norm3")],
    ));
    for (ours, theirs) in [
        (
            "aex.pos_embd.weight",
            format!("{ah}position_embedding.weight"),
        ),
        (
            "aex.future_tokens.weight",
            format!("{ah}future_tokens.weight"),
        ),
    ] {
        m.push((ours.into(), theirs));
    }
    let (encoder, params) = match kind {
        HeadLinears::PerEmbodiment => ("W", ["W", "b"]),
        HeadLinears::Plain => ("layer", ["weight", "bias"]),
    };
    for (ours, theirs) in [
        ("aex.state_enc.l1", "state_encoder.layer1".to_owned()),
        ("aex.state_enc.l2", "state_encoder.layer2".into()),
        ("aex.act_enc.W1", format!("action_encoder.{encoder}1")),
        ("aex.act_enc.W2", format!("action_encoder.{encoder}2")),
        ("aex.act_enc.W3", format!("action_encoder.{encoder}3")),
        ("aex.act_dec.l1", "action_decoder.layer1".into()),
        ("aex.act_dec.l2", "action_decoder.layer2".into()),
    ] {
        for p in params {
            m.push((format!("{ours}.{p}"), format!("{ah}{theirs}.{p}")));
        }
    }
    m
}
