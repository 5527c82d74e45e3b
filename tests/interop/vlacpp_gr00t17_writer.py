#!/usr/bin/env python3
"""An independent writer of GR00T N1.7 GGUFs in vla.cpp's layout (numpy + gguf-py), for
tests/gr00t17_golden.rs.

  vlacpp_gr00t17_writer.py CKPT_DIR OUT.gguf

CKPT_DIR is a lerobot GR00T N1.7 checkpoint as tools/golden/groot17.py writes it:
model.safetensors (the Isaac-GR00T model's tensors under `_groot_model.`), base/ (the
Isaac-GR00T snapshot folder: config.json, processor_config.json, statistics.json,
embodiment_id.json) and backbone/config.json (the Qwen3-VL sizes). OUT is what vla.cpp's
`scripts/convert_gr00t_n1_7_to_gguf.py` (+ `gguf_blocks.py`; VinRobotics/vla.cpp b18873d)
writes for that snapshot, from the facts of its layout alone, without vla-rs code.

vla.cpp's converter takes the 3B model's sizes as constants (Qwen3-VL ViT 1024 x 24, deepstack
5/11/17, Qwen3 2048 x 16 used, image token 151655, 64 tokens a view); for this small
checkpoint the same keys carry its own sizes (from the tensors and backbone/config.json), as
the converter would for a checkpoint of those sizes.

- keys `gr00t_n1_7.{vit_hidden, vit_layers, vit_heads, vit_inter, patch_size,
  temporal_patch_size, spatial_merge_size, vit_num_position_embeddings, vit_patch_flat,
  vit_merged_dim, n_img_tokens_per_view, shortest_image_edge, image_crop_size,
  image_target_size, deepstack_idx_{0,1,2}, lm_hidden, lm_layers_used, lm_q_heads,
  lm_kv_heads, lm_head_dim, lm_inter, vocab_size, image_token_index, vlsa_layers, vlsa_heads,
  vlsa_head_dim, vlsa_ff_inner, backbone_embedding_dim, input_embedding_dim, dit_hidden,
  dit_heads, dit_head_dim, dit_layers, dit_interleave, attend_text_every_n_blocks,
  action_horizon, action_dim, max_state_dim, num_inference_timesteps, num_timestep_buckets,
  max_num_embodiments, max_seq_len, use_relative_action, use_percentiles, clip_outliers,
  apply_sincos_state_encoding}` u32; `lm_rope_theta` f64; `lm_rms_eps`, `vit_ln_eps`,
  `vit_rope_theta`, `ln_eps`, `norm_out_eps`, `vlln_eps`, `vlsa_ln_eps`, `connector_ln_eps`,
  `crop_fraction` f32; strings `embodiment_id_mapping`, `statistics_json`,
  `processor_config_json` (the snapshot's files as text); no tokenizer, no template.
- tensors: the Qwen3-VL tower (`vit.patch_embd.weight` the Conv3d flattened to [hidden,
  3 * 2 * p * p], `vit.pos_embd` the learned table as trained, `vit.blk.{i}.{ln1, ln2,
  attn_qkv, attn_o, fc1, fc2}`, `vit.deepstack.{j}.*`, `vit.merger.*`), `token_embd.weight`,
  `vlm.output_norm.weight`, `vlm.blk.{i}.*` (QK-norm), `aex.vlln`, `aex.vlsa.{i}.*`, the
  embodiment MLPs `aex.{state_enc.l1,l2, act_enc.W1,W2,W3, act_dec.l1,l2}.{W,b}` as stored,
  `aex.pos_embd` (no `.weight`), `aex.dit.time_emb.l{1,2}`, `aex.dit.{i}.*`,
  `aex.dit.proj_out{1,2}`.
"""
import json
import sys

import numpy as np
import gguf

from vlacpp_gr00t_writer import QWEN3, count, write_blocks, write_dit, write_projectors
from vlacpp_layout import decoder_layers, finish, safetensors

VIT = "backbone.model.model.visual"
LM = "backbone.model.model.language_model"
AH = "action_head"
ARCH = "gr00t_n1_7"


def write_qwen3vl_vit(add, sd, vit, n_taps):
    """vla.cpp's `write_qwen3vl_vit`: the Conv3d patch kernel flattened to [hidden, 3 * 2 * p * p],
    the learned position table as trained, the blocks (fused qkv), the deepstack and final mergers."""
    pe = sd[f"{vit}.patch_embed.proj.weight"]
    add("vit.patch_embd.weight", pe.reshape(pe.shape[0], -1))
    add("vit.patch_embd.bias", sd[f"{vit}.patch_embed.proj.bias"])
    add("vit.pos_embd", sd[f"{vit}.pos_embed.weight"])
    for i in range(count(sd, f"{vit}.blocks", "norm1.weight")):
        b = f"{vit}.blocks.{i}"
        for s, d in [("norm1", "ln1"), ("norm2", "ln2"), ("attn.qkv", "attn_qkv"), ("attn.proj", "attn_o"),
                     ("mlp.linear_fc1", "fc1"), ("mlp.linear_fc2", "fc2")]:
            add(f"vit.blk.{i}.{d}.weight", sd[f"{b}.{s}.weight"])
            add(f"vit.blk.{i}.{d}.bias", sd[f"{b}.{s}.bias"])
    for j in range(n_taps):
        m = f"{vit}.deepstack_merger_list.{j}"
        for s, d in [("norm", "norm"), ("linear_fc1", "fc1"), ("linear_fc2", "fc2")]:
            add(f"vit.deepstack.{j}.{d}.weight", sd[f"{m}.{s}.weight"])
            add(f"vit.deepstack.{j}.{d}.bias", sd[f"{m}.{s}.bias"])
    for s, d in [("norm", "norm"), ("linear_fc1", "fc1"), ("linear_fc2", "fc2")]:
        add(f"vit.merger.{d}.weight", sd[f"{vit}.merger.{s}.weight"])
        add(f"vit.merger.{d}.bias", sd[f"{vit}.merger.{s}.bias"])


def write_qwen3_lm(add, sd, lm, n_layers, embd):
    """vla.cpp's `write_qwen3_lm` over the first `n_layers` layers; `embd` the embedding table's name."""
    add("token_embd.weight", sd[embd])
    add("vlm.output_norm.weight", sd[f"{lm}.norm.weight"])
    for i in range(n_layers):
        for s, d in QWEN3:
            add(f"vlm.blk.{i}.{d}", sd[f"{lm}.layers.{i}.{s}"])


def main(ckpt, out):
    sd = {k.removeprefix("_groot_model."): v
          for k, v in safetensors(f"{ckpt}/model.safetensors").items()}
    cfg = json.load(open(f"{ckpt}/base/config.json"))
    qwen = json.load(open(f"{ckpt}/backbone/config.json"))
    vis, txt = qwen["vision_config"], qwen["text_config"]
    text = lambda name: open(f"{ckpt}/base/{name}").read()
    proc = json.loads(text("processor_config.json"))["processor_kwargs"]

    pe = sd[f"{VIT}.patch_embed.proj.weight"]
    hidden, patch, tpatch = pe.shape[0], pe.shape[3], pe.shape[2]
    merge = vis["spatial_merge_size"]
    flat = 3 * tpatch * patch * patch
    embd = f"{LM}.embed_tokens.weight"
    embd = embd if embd in sd else "backbone.model.lm_head.weight"  # tied, as the snapshot's
    q0, k0 = sd[f"{LM}.layers.0.self_attn.q_proj.weight"], sd[f"{LM}.layers.0.self_attn.k_proj.weight"]
    head_dim = sd[f"{LM}.layers.0.self_attn.q_norm.weight"].shape[0]
    vlsa = f"{AH}.vl_self_attention.transformer_blocks"
    dmc, vsc = cfg["diffusion_model_cfg"], cfg["vl_self_attention_cfg"]
    target = cfg["image_target_size"][0]
    taps = vis["deepstack_visual_indexes"]

    w = gguf.GGUFWriter(out, arch=ARCH)
    kv = lambda k: f"{ARCH}.{k}"
    w.add_string(kv("architecture"), ARCH)
    u32 = [("vit_hidden", hidden), ("vit_layers", count(sd, f"{VIT}.blocks", "norm1.weight")),
           ("vit_heads", vis["num_heads"]), ("vit_inter", sd[f"{VIT}.blocks.0.mlp.linear_fc1.weight"].shape[0]),
           ("patch_size", patch), ("temporal_patch_size", tpatch), ("spatial_merge_size", merge),
           ("vit_num_position_embeddings", sd[f"{VIT}.pos_embed.weight"].shape[0]),
           ("vit_patch_flat", flat), ("vit_merged_dim", hidden * merge * merge),
           ("n_img_tokens_per_view", (target // patch // merge) ** 2),
           ("shortest_image_edge", cfg.get("shortest_image_edge") or 256),
           ("image_crop_size", (cfg.get("image_crop_size") or [230, 230])[0]),
           ("image_target_size", target),
           ("deepstack_idx_0", taps[0]), ("deepstack_idx_1", taps[1]), ("deepstack_idx_2", taps[2]),
           ("lm_hidden", q0.shape[1]), ("lm_layers_used", cfg["select_layer"]),
           ("lm_q_heads", q0.shape[0] // head_dim), ("lm_kv_heads", k0.shape[0] // head_dim),
           ("lm_head_dim", head_dim), ("lm_inter", sd[f"{LM}.layers.0.mlp.gate_proj.weight"].shape[0]),
           ("vocab_size", sd[embd].shape[0]), ("image_token_index", qwen["image_token_id"]),
           ("vlsa_layers", vsc["num_layers"]), ("vlsa_heads", vsc["num_attention_heads"]),
           ("vlsa_head_dim", vsc["attention_head_dim"]), ("vlsa_ff_inner", 4 * cfg["backbone_embedding_dim"]),
           ("backbone_embedding_dim", cfg["backbone_embedding_dim"]),
           ("input_embedding_dim", cfg["input_embedding_dim"]),
           ("dit_hidden", dmc["num_attention_heads"] * dmc["attention_head_dim"]),
           ("dit_heads", dmc["num_attention_heads"]), ("dit_head_dim", dmc["attention_head_dim"]),
           ("dit_layers", dmc["num_layers"]), ("dit_interleave", int(dmc["interleave_self_attention"])),
           ("attend_text_every_n_blocks", cfg["attend_text_every_n_blocks"]),
           ("action_horizon", cfg["action_horizon"]), ("action_dim", cfg["max_action_dim"]),
           ("max_state_dim", cfg["max_state_dim"]), ("num_inference_timesteps", cfg["num_inference_timesteps"]),
           ("num_timestep_buckets", cfg["num_timestep_buckets"]),
           ("max_num_embodiments", cfg["max_num_embodiments"]), ("max_seq_len", cfg["max_seq_len"]),
           ("use_relative_action", int(cfg.get("use_relative_action", False))),
           ("use_percentiles", int(proc.get("use_percentiles", True))),
           ("clip_outliers", int(proc.get("clip_outliers", True))),
           ("apply_sincos_state_encoding", int(cfg.get("apply_sincos_state_encoding", False)))]
    for k, v in u32:
        w.add_uint32(kv(k), int(v))
    w.add_float64(kv("lm_rope_theta"), float(txt["rope_parameters"]["rope_theta"]))
    for k, v in [("lm_rms_eps", txt["rms_norm_eps"]), ("vit_ln_eps", 1e-6), ("vit_rope_theta", 10000.0),
                 ("ln_eps", 1e-5), ("norm_out_eps", 1e-6), ("vlln_eps", 1e-5), ("vlsa_ln_eps", 1e-5),
                 ("connector_ln_eps", 1e-6), ("crop_fraction", cfg.get("crop_fraction") or 0.95)]:
        w.add_float32(kv(k), float(v))
    w.add_string(kv("embodiment_id_mapping"), text("embodiment_id.json").strip())
    w.add_string(kv("statistics_json"), text("statistics.json"))
    w.add_string(kv("processor_config_json"), text("processor_config.json"))

    add = lambda name, a: w.add_tensor(name, np.ascontiguousarray(a, dtype=np.float32))
    write_qwen3vl_vit(add, sd, VIT, len(taps))
    write_qwen3_lm(add, sd, LM, cfg["select_layer"], embd)
    # the head
    add("aex.vlln.weight", sd[f"{AH}.vlln.weight"])
    add("aex.vlln.bias", sd[f"{AH}.vlln.bias"])
    write_blocks(add, sd, vlsa, "aex.vlsa", vsc["num_layers"], adaln=False)
    write_projectors(add, sd, AH)
    add("aex.pos_embd", sd[f"{AH}.position_embedding.weight"])
    write_dit(add, sd, AH)
    finish(w)


if __name__ == "__main__":
    main(*sys.argv[1:])
