#!/usr/bin/env python3
"""An independent writer of GR00T N1.6 GGUFs in vla.cpp's layout (numpy + gguf-py), for
tests/gr00t16_golden.rs.

  vlacpp_gr00t16_writer.py CKPT_DIR OUT.gguf

CKPT_DIR is an Isaac-GR00T N1.6 checkpoint folder as tools/golden/groot16.py writes it
(config.json of model_type Gr00tN1d6, model.safetensors, processor_config.json,
statistics.json, embodiment_id.json) with its Eagle folder at eagle/ (config.json: the SigLIP2
and Qwen3 sizes, image_token_index, downsample_ratio). OUT is what vla.cpp's
`scripts/convert_gr00t_n1_6_to_gguf.py --vision-size S` (+ `gguf_blocks.py`;
VinRobotics/vla.cpp b18873d) writes for that checkpoint, S being the side of the frame
Isaac-GR00T's processor gives (its smart_resize, factor 28, of the shortest_image_edge
square), from the facts of its layout alone, without vla-rs code.

vla.cpp's converter takes the 3B model's sizes as constants (SigLIP2 1152 x 27 at 224 unless
--vision-size, Qwen3 2048 x 16 used, image token 151669); for this small checkpoint the same
keys carry its own sizes (from the tensors and eagle/config.json), as the converter would for a
checkpoint of those sizes.

- keys `gr00t_n1_6.{vit_hidden, vit_layers, vit_heads, vit_inter, image_size, patch_size,
  vit_num_patches, n_img_tokens, vit_pixel_shuffle, mlp_connector_inner,
  mlp_connector_layers=2, shortest_image_edge, lm_hidden, lm_layers_used, lm_q_heads,
  lm_kv_heads, lm_head_dim, lm_inter, vocab_size, image_token_index, backbone_embedding_dim,
  input_embedding_dim, dit_hidden, dit_heads, dit_head_dim, dit_layers, dit_interleave,
  attend_text_every_n_blocks, action_horizon, action_dim, max_state_dim,
  num_inference_timesteps, num_timestep_buckets, max_num_embodiments, max_seq_len,
  use_relative_action, use_percentiles, clip_outliers, apply_sincos_state_encoding}` u32;
  `lm_rope_theta` f64; `lm_rms_eps`, `vit_ln_eps`, `ln_eps`, `norm_out_eps`, `vlln_eps`,
  `connector_ln_eps` (1e-5), `crop_fraction` f32; strings `embodiment_id_mapping`,
  `statistics_json`, `processor_config_json` (the checkpoint's files as text); no tokenizer,
  no template.
- tensors: the SigLIP2 tower (`vit.patch_embd.weight` the Linear [hidden, p * p * 3] as
  stored, `vit.pos_embd` the table resized bilinearly (align_corners=False, antialias) to the
  frame's patch grid, `vit.blk.{i}.{ln1, ln2, attn_q, attn_k, attn_v, attn_o, fc1, fc2}`,
  `vit.post_ln`), `mm.ln`, `mm.fc1`, `mm.fc2` (mlp1 as stored), `token_embd.weight`,
  `vlm.output_norm.weight`, `vlm.blk.{i}.*` (QK-norm), `aex.vlln`, the embodiment MLPs
  `aex.{state_enc.l1,l2, act_enc.W1,W2,W3, act_dec.l1,l2}.{W,b}` as stored, `aex.pos_embd` (no
  `.weight`), `aex.dit.time_emb.l{1,2}`, `aex.dit.{i}.*`, `aex.dit.proj_out{1,2}`.
"""
import json
import sys

import numpy as np
import gguf

from vlacpp_gr00t_writer import QWEN3, count, write_dit, write_projectors
from vlacpp_layout import finish, safetensors, siglip_layers, write_siglip

VIT = "backbone.model.vision_model.vision_model"
LM = "backbone.model.language_model.model"
AH = "action_head"
ARCH = "gr00t_n1_6"


def smart_resize_side(edge, factor=28):
    """The side Isaac-GR00T's Eagle processor gives a square edge x edge frame."""
    return max(factor, int(round(edge / factor)) * factor)


def resize_table(pos, grid):
    """`F.interpolate(bilinear, align_corners=False, antialias=True)` of the square table `pos`
    [n, d] to grid x grid rows, enlarging (where antialiasing leaves bilinear as it is)."""
    side = int(round(pos.shape[0] ** 0.5))
    if side == grid:
        return pos
    assert grid > side, "vla.cpp's --vision-size here only enlarges"
    t = pos.reshape(side, side, -1).astype(np.float64)
    src = np.maximum((np.arange(grid) + 0.5) * side / grid - 0.5, 0.0)
    lo = np.minimum(np.floor(src).astype(int), side - 1)
    hi = np.minimum(lo + 1, side - 1)
    f = src - lo
    rows = t[lo] * (1 - f)[:, None, None] + t[hi] * f[:, None, None]
    out = rows[:, lo] * (1 - f)[None, :, None] + rows[:, hi] * f[None, :, None]
    return out.reshape(grid * grid, -1).astype(np.float32)


def main(ckpt, out):
    sd = safetensors(f"{ckpt}/model.safetensors")
    cfg = json.load(open(f"{ckpt}/config.json"))
    eagle = json.load(open(f"{ckpt}/eagle/config.json"))
    vis, txt = eagle["vision_config"], eagle["text_config"]
    text = lambda name: open(f"{ckpt}/{name}").read()
    proc = json.loads(text("processor_config.json")).get("processor_kwargs", {})

    pe = sd[f"{VIT}.embeddings.patch_embedding.weight"]
    hidden, patch = pe.shape[0], vis["patch_size"]
    edge = cfg.get("shortest_image_edge", 256) or 256
    size = smart_resize_side(edge)
    grid = size // patch
    c4 = sd["backbone.model.mlp1.0.weight"].shape[0]
    shuffle = int(round((c4 / hidden) ** 0.5))
    embd = f"{LM}.embed_tokens.weight"
    embd = embd if embd in sd else "backbone.model.language_model.lm_head.weight"
    q0, k0 = sd[f"{LM}.layers.0.self_attn.q_proj.weight"], sd[f"{LM}.layers.0.self_attn.k_proj.weight"]
    head_dim = sd[f"{LM}.layers.0.self_attn.q_norm.weight"].shape[0]
    layers = cfg.get("select_layer", 16)
    dmc = cfg.get("diffusion_model_cfg", {})
    dit_heads, dit_head_dim = dmc.get("num_attention_heads", 32), dmc.get("attention_head_dim", 48)

    w = gguf.GGUFWriter(out, arch=ARCH)
    kv = lambda k: f"{ARCH}.{k}"
    w.add_string(kv("architecture"), ARCH)
    u32 = [("vit_hidden", hidden), ("vit_layers", siglip_layers(sd, VIT)),
           ("vit_heads", vis["num_attention_heads"]),
           ("vit_inter", sd[f"{VIT}.encoder.layers.0.mlp.fc1.weight"].shape[0]),
           ("image_size", size), ("patch_size", patch), ("vit_num_patches", grid * grid),
           ("n_img_tokens", (grid // shuffle) ** 2), ("vit_pixel_shuffle", shuffle),
           ("mlp_connector_inner", c4), ("mlp_connector_layers", 2), ("shortest_image_edge", edge),
           ("lm_hidden", q0.shape[1]), ("lm_layers_used", layers),
           ("lm_q_heads", q0.shape[0] // head_dim), ("lm_kv_heads", k0.shape[0] // head_dim),
           ("lm_head_dim", head_dim), ("lm_inter", sd[f"{LM}.layers.0.mlp.gate_proj.weight"].shape[0]),
           ("vocab_size", sd[embd].shape[0]), ("image_token_index", eagle["image_token_index"]),
           ("backbone_embedding_dim", cfg.get("backbone_embedding_dim", 2048)),
           ("input_embedding_dim", cfg.get("input_embedding_dim", 1536)),
           ("dit_hidden", dit_heads * dit_head_dim), ("dit_heads", dit_heads), ("dit_head_dim", dit_head_dim),
           ("dit_layers", dmc.get("num_layers", 32)),
           ("dit_interleave", int(bool(dmc.get("interleave_self_attention", True)))),
           ("attend_text_every_n_blocks", cfg.get("attend_text_every_n_blocks", 2)),
           ("action_horizon", cfg.get("action_horizon", 50)), ("action_dim", cfg.get("max_action_dim", 128)),
           ("max_state_dim", cfg.get("max_state_dim", 128)),
           ("num_inference_timesteps", cfg.get("num_inference_timesteps", 4)),
           ("num_timestep_buckets", cfg.get("num_timestep_buckets", 1000)),
           ("max_num_embodiments", cfg.get("max_num_embodiments", 32)), ("max_seq_len", cfg.get("max_seq_len", 1024)),
           ("use_relative_action", int(bool(cfg.get("use_relative_action", False)))),
           ("use_percentiles", int(bool(proc.get("use_percentiles", True)))),
           ("clip_outliers", int(bool(proc.get("clip_outliers", True)))),
           ("apply_sincos_state_encoding", int(bool(cfg.get("apply_sincos_state_encoding", False))))]
    for k, v in u32:
        w.add_uint32(kv(k), int(v))
    w.add_float64(kv("lm_rope_theta"), float(txt["rope_parameters"]["rope_theta"]))
    for k, v in [("lm_rms_eps", txt["rms_norm_eps"]), ("vit_ln_eps", vis["layer_norm_eps"]), ("ln_eps", 1e-5),
                 ("norm_out_eps", 1e-6), ("vlln_eps", 1e-5), ("connector_ln_eps", 1e-5),
                 ("crop_fraction", cfg.get("crop_fraction", 0.95) or 0.95)]:
        w.add_float32(kv(k), float(v))
    w.add_string(kv("embodiment_id_mapping"), text("embodiment_id.json").strip())
    w.add_string(kv("statistics_json"), text("statistics.json"))
    w.add_string(kv("processor_config_json"), text("processor_config.json"))

    add = lambda name, a: w.add_tensor(name, np.ascontiguousarray(a, dtype=np.float32))
    pos = sd[f"{VIT}.embeddings.position_embedding.weight"]
    write_siglip(add, sd, VIT, resize_table(pos, grid))
    for j, d in [("0", "ln"), ("1", "fc1"), ("3", "fc2")]:
        add(f"mm.{d}.weight", sd[f"backbone.model.mlp1.{j}.weight"])
        add(f"mm.{d}.bias", sd[f"backbone.model.mlp1.{j}.bias"])
    # `write_qwen3_lm` over the kept layers
    add("token_embd.weight", sd[embd])
    add("vlm.output_norm.weight", sd[f"{LM}.norm.weight"])
    for i in range(layers):
        for s, d in QWEN3:
            add(f"vlm.blk.{i}.{d}", sd[f"{LM}.layers.{i}.{s}"])
    # the head
    add("aex.vlln.weight", sd[f"{AH}.vlln.weight"])
    add("aex.vlln.bias", sd[f"{AH}.vlln.bias"])
    write_projectors(add, sd, AH)
    add("aex.pos_embd", sd[f"{AH}.position_embedding.weight"])
    write_dit(add, sd, AH)
    finish(w)


if __name__ == "__main__":
    main(*sys.argv[1:])
