#!/usr/bin/env python3
"""An independent writer of VLA-JEPA GGUFs in vla.cpp's layout (numpy + gguf-py), for
tests/vla_jepa_golden.rs.

  vlacpp_vla_jepa_writer.py CKPT_DIR OUT.gguf

CKPT_DIR is a lerobot VLA-JEPA checkpoint as tools/golden/vla_jepa.py writes it (config.json of
type vla_jepa, model.safetensors with the Qwen3-VL backbone under `model.qwen.`, the head under
`model.action_model.` and the world model, backbone/config.json, arch.json). OUT is what
vla.cpp's `scripts/convert_vla_jepa_to_gguf.py` (+ `gguf_blocks.py`; VinRobotics/vla.cpp
b18873d) writes for that checkpoint, from the facts of its layout alone, without vla-rs code.

vla.cpp's converter takes the released model's sizes as constants (Qwen3-VL ViT 1024 x 24,
deepstack 5/11/17, LM 2048 x 28, DiT-B 12 x 64, frames of 256, image token 151655, embodied
token 151697); for this small checkpoint the same keys carry its own sizes (the tensors,
config.json, backbone/config.json; the frame size lerobot's processor made, arch.json), as the
converter would for a checkpoint of those sizes.

- keys `vla_jepa.{vit_hidden, vit_layers, vit_heads, vit_inter, patch_size, temporal_patch_size,
  spatial_merge_size, vit_num_position_embeddings, vit_patch_flat, vit_merged_dim,
  image_target_size, deepstack_idx_{0,1,2}, lm_hidden, lm_layers, lm_q_heads, lm_kv_heads,
  lm_head_dim, lm_inter, vocab_size, image_token_index, embodied_action_token_id,
  action_token_id_0, dit_hidden, dit_heads, dit_head_dim, dit_layers, cross_dim, output_dim,
  time_proj_dim, action_dim, state_dim, action_horizon, num_future_tokens,
  num_inference_timesteps, num_timestep_buckets}` u32; `lm_rope_theta` f64; `lm_rms_eps`,
  `vit_ln_eps`, `vit_rope_theta`, `connector_ln_eps`, `dit_ln_eps`, `dit_norm_out_eps` f32; no
  tokenizer, template, statistics or post-processing.
- tensors: the tower as GR00T N1.7's (`write_qwen3vl_vit`), every LM layer (`write_qwen3_lm`),
  the head's `nn.Linear` layers `ah.{act_enc.l1,l2,l3, state_enc.l1,l2, act_dec.l1,l2,
  time_emb.l1,l2, proj_out1,proj_out2}.{weight,bias}`, `ah.future_tokens`, `ah.pos_embd`,
  `ah.dit.{i}.{adaln, attn_q, attn_k, attn_v, attn_o, ff0, ff2}`; the world model dropped.
"""
import json
import sys

import numpy as np
import gguf

from vlacpp_gr00t_writer import count, write_blocks
from vlacpp_gr00t17_writer import write_qwen3_lm, write_qwen3vl_vit
from vlacpp_layout import decoder_layers, finish, safetensors

VIT = "model.qwen.model.model.visual"
LM = "model.qwen.model.model.language_model"
AH = "model.action_model"
ARCH = "vla_jepa"
PROJECTORS = [("action_encoder.layer1", "ah.act_enc.l1"), ("action_encoder.layer2", "ah.act_enc.l2"),
              ("action_encoder.layer3", "ah.act_enc.l3"), ("state_encoder.layer1", "ah.state_enc.l1"),
              ("state_encoder.layer2", "ah.state_enc.l2"), ("action_decoder.layer1", "ah.act_dec.l1"),
              ("action_decoder.layer2", "ah.act_dec.l2"),
              ("model.timestep_encoder.timestep_embedder.linear_1", "ah.time_emb.l1"),
              ("model.timestep_encoder.timestep_embedder.linear_2", "ah.time_emb.l2"),
              ("model.proj_out_1", "ah.proj_out1"), ("model.proj_out_2", "ah.proj_out2")]


def main(ckpt, out):
    sd = {k: v for k, v in safetensors(f"{ckpt}/model.safetensors").items()
          if k.startswith(("model.qwen.", "model.action_model."))}
    cfg = json.load(open(f"{ckpt}/config.json"))
    qwen = json.load(open(f"{ckpt}/backbone/config.json"))
    arch = json.load(open(f"{ckpt}/arch.json"))
    vis, txt = qwen["vision_config"], qwen["text_config"]
    toks = arch["tokens"]

    pe = sd[f"{VIT}.patch_embed.proj.weight"]
    hidden, patch, tpatch = pe.shape[0], pe.shape[3], pe.shape[2]
    merge = vis["spatial_merge_size"]
    embd = f"{LM}.embed_tokens.weight"
    embd = embd if embd in sd else "model.qwen.model.lm_head.weight"  # tied, as the released one's
    q0, k0 = sd[f"{LM}.layers.0.self_attn.q_proj.weight"], sd[f"{LM}.layers.0.self_attn.k_proj.weight"]
    head_dim = sd[f"{LM}.layers.0.self_attn.q_norm.weight"].shape[0]
    dit = f"{AH}.model.transformer_blocks"
    heads, dit_head_dim = cfg["action_num_heads"], cfg["action_attention_head_dim"]
    taps = vis["deepstack_visual_indexes"]
    n_lm = decoder_layers(sd, LM)

    w = gguf.GGUFWriter(out, arch=ARCH)
    kv = lambda k: f"{ARCH}.{k}"
    w.add_string(kv("architecture"), ARCH)
    u32 = [("vit_hidden", hidden), ("vit_layers", count(sd, f"{VIT}.blocks", "norm1.weight")),
           ("vit_heads", vis["num_heads"]), ("vit_inter", sd[f"{VIT}.blocks.0.mlp.linear_fc1.weight"].shape[0]),
           ("patch_size", patch), ("temporal_patch_size", tpatch), ("spatial_merge_size", merge),
           ("vit_num_position_embeddings", sd[f"{VIT}.pos_embed.weight"].shape[0]),
           ("vit_patch_flat", 3 * tpatch * patch * patch), ("vit_merged_dim", hidden * merge * merge),
           ("image_target_size", arch["image_processor"]["processed_hw"][0][0]),
           ("deepstack_idx_0", taps[0]), ("deepstack_idx_1", taps[1]), ("deepstack_idx_2", taps[2]),
           ("lm_hidden", q0.shape[1]), ("lm_layers", n_lm),
           ("lm_q_heads", q0.shape[0] // head_dim), ("lm_kv_heads", k0.shape[0] // head_dim),
           ("lm_head_dim", head_dim), ("lm_inter", sd[f"{LM}.layers.0.mlp.gate_proj.weight"].shape[0]),
           ("vocab_size", sd[embd].shape[0]), ("image_token_index", toks["image_pad"]),
           ("embodied_action_token_id", toks["embodied_action"]),
           ("action_token_id_0", toks["action_token_ids"][0]),
           ("dit_hidden", heads * dit_head_dim), ("dit_heads", heads), ("dit_head_dim", dit_head_dim),
           ("dit_layers", cfg["action_num_layers"]), ("cross_dim", q0.shape[1]),
           ("output_dim", cfg["action_hidden_size"]), ("time_proj_dim", 256),
           ("action_dim", cfg["action_dim"]), ("state_dim", cfg["state_dim"]),
           ("action_horizon", cfg["chunk_size"]),
           ("num_future_tokens", cfg["num_embodied_action_tokens_per_instruction"]),
           ("num_inference_timesteps", cfg["num_inference_timesteps"]),
           ("num_timestep_buckets", cfg["action_num_timestep_buckets"])]
    for k, v in u32:
        w.add_uint32(kv(k), int(v))
    w.add_float64(kv("lm_rope_theta"), float(txt["rope_parameters"]["rope_theta"]))
    for k, v in [("lm_rms_eps", txt["rms_norm_eps"]), ("vit_ln_eps", 1e-6), ("vit_rope_theta", 10000.0),
                 ("connector_ln_eps", 1e-6), ("dit_ln_eps", 1e-5), ("dit_norm_out_eps", 1e-6)]:
        w.add_float32(kv(k), float(v))

    add = lambda name, a: w.add_tensor(name, np.ascontiguousarray(a, dtype=np.float32))
    write_qwen3vl_vit(add, sd, VIT, len(taps))
    write_qwen3_lm(add, sd, LM, n_lm, embd)
    for s, d in PROJECTORS:
        add(f"{d}.weight", sd[f"{AH}.{s}.weight"])
        add(f"{d}.bias", sd[f"{AH}.{s}.bias"])
    add("ah.future_tokens", sd[f"{AH}.future_tokens.weight"])
    add("ah.pos_embd", sd[f"{AH}.position_embedding.weight"])
    write_blocks(add, sd, dit, "ah.dit", cfg["action_num_layers"], adaln=True)
    finish(w)


if __name__ == "__main__":
    main(*sys.argv[1:])
