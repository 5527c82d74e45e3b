#!/usr/bin/env python3
"""An independent writer of SmolVLA GGUFs in vla.cpp's layout (numpy + gguf-py), for
tests/smolvla_golden.rs.

  vlacpp_smolvla_writer.py CKPT_DIR OUT.gguf

CKPT_DIR is a lerobot SmolVLA checkpoint (model.safetensors, config.json, the normalizer's
safetensors, and the VLM's config.json under `vlm_model_name`, as tools/golden/smolvla.py
writes). OUT is what vla.cpp's `scripts/convert_smolvla_to_gguf.py` (+ `gguf_blocks.py`)
writes for it, from the facts of its layout alone (docs/GGUF.md "vla.cpp's files"),
without vla-rs code:

- keys `smolvla.{hidden, intermediate, n_q_heads, n_kv_heads, head_dim, n_layers,
  vocab_size, expert_h, expert_inter, chunk_size, num_steps, max_state_dim, max_action_dim,
  real_state_dim, real_action_dim, self_attn_every_n_layers, tokenizer_max_length,
  vit_hidden, vit_layers, vit_heads, vit_inter, image_size, patch_size, vit_pixel_shuffle,
  n_img_tokens}` u32, `min_period`, `max_period`, `expert_width_multiplier` f64, `norm_eps`
  (the statistics' epsilon; vla.cpp's RMSNorm epsilon is SmolLM2's 1e-5, not stored) and
  `vit_ln_eps` f32; no tokenizer;
- `token_embd.weight`, `vlm.output_norm`, `vlm.blk.*`, `aex.output_norm`, `aex.blk.*`,
  the action projections without `model.`, `vit.*` with `vit.pos_embd` without `.weight`,
  the connector as `mm.fc.weight`, statistics `state_mean` / `state_std` / `action_mean` /
  `action_std` as F32 tensors.
vla.cpp takes the LM's head sizes from SmolLM2-500M constants; a small checkpoint states them
in its VLM config, which this writer reads instead.
"""
import json
import sys

import numpy as np
import gguf

from vlacpp_layout import finish, safetensors, siglip_layers, write_siglip


def stats(ckpt, meta, registry, key):
    steps = json.load(open(f"{ckpt}/{meta}"))["steps"]
    step = next(s for s in steps if s["registry_name"] == registry)
    t = safetensors(f"{ckpt}/{step['state_file']}")
    return t[f"{key}.mean"], t[f"{key}.std"], step["config"].get("eps", 1e-8)


def main(ckpt, out):
    sd = safetensors(f"{ckpt}/model.safetensors")
    cfg = json.load(open(f"{ckpt}/config.json"))
    vlm_cfg = json.load(open(f"{ckpt}/{cfg['vlm_model_name']}/config.json"))
    tc, vc = vlm_cfg["text_config"], vlm_cfg["vision_config"]

    txt = "model.vlm_with_expert.vlm.model.text_model"
    aex = "model.vlm_with_expert.lm_expert"
    vis = "model.vlm_with_expert.vlm.model.vision_model"
    n = cfg["num_vlm_layers"]
    nv = siglip_layers(sd, vis)
    head_dim = tc["head_dim"]
    hidden = sd[f"{txt}.embed_tokens.weight"].shape[1]
    conv = sd[f"{vis}.embeddings.patch_embedding.weight"]
    pos = sd[f"{vis}.embeddings.position_embedding.weight"]
    patch = conv.shape[2]
    grid = int(round(pos.shape[0] ** 0.5))
    scale = int(vlm_cfg.get("scale_factor", 4))
    state_dim = cfg["input_features"]["observation.state"]["shape"][0]
    action_dim = cfg["output_features"]["action"]["shape"][0]
    s_mean, s_std, eps = stats(ckpt, "policy_preprocessor.json", "normalizer_processor",
                               "observation.state")
    a_mean, a_std, _ = stats(ckpt, "policy_postprocessor.json", "unnormalizer_processor", "action")

    w = gguf.GGUFWriter(out, arch="smolvla")
    w.add_string("smolvla.architecture", "smolvla")
    kv = lambda k: f"smolvla.{k}"
    g0 = sd[f"{aex}.layers.0.mlp.gate_proj.weight"]
    for k, v in [("hidden", hidden),
                 ("intermediate", sd[f"{txt}.layers.0.mlp.gate_proj.weight"].shape[0]),
                 ("n_q_heads", tc["num_attention_heads"]),
                 ("n_kv_heads", tc["num_key_value_heads"]), ("head_dim", head_dim),
                 ("n_layers", n), ("vocab_size", sd[f"{txt}.embed_tokens.weight"].shape[0]),
                 ("expert_h", g0.shape[1]), ("expert_inter", g0.shape[0]),
                 ("chunk_size", cfg["chunk_size"]), ("num_steps", cfg["num_steps"]),
                 ("max_state_dim", cfg["max_state_dim"]), ("max_action_dim", cfg["max_action_dim"]),
                 ("real_state_dim", state_dim), ("real_action_dim", action_dim),
                 ("self_attn_every_n_layers", cfg["self_attn_every_n_layers"]),
                 ("tokenizer_max_length", cfg["tokenizer_max_length"])]:
        w.add_uint32(kv(k), int(v))
    w.add_float64(kv("min_period"), float(cfg["min_period"]))
    w.add_float64(kv("max_period"), float(cfg["max_period"]))
    w.add_float64(kv("expert_width_multiplier"), float(cfg["expert_width_multiplier"]))
    w.add_float32(kv("norm_eps"), float(eps))
    for k, v in [("vit_hidden", conv.shape[0]), ("vit_layers", nv),
                 ("vit_heads", vc["num_attention_heads"]),
                 ("vit_inter", sd[f"{vis}.encoder.layers.0.mlp.fc1.weight"].shape[0]),
                 ("image_size", grid * patch), ("patch_size", patch),
                 ("vit_pixel_shuffle", scale), ("n_img_tokens", (grid // scale) ** 2)]:
        w.add_uint32(kv(k), int(v))
    w.add_float32(kv("vit_ln_eps"), float(vc.get("layer_norm_eps", 1e-6)))

    add = lambda name, a: w.add_tensor(name, np.ascontiguousarray(a, dtype=np.float32))
    dec = [("input_layernorm", "attn_norm"), ("self_attn.q_proj", "attn_q"),
           ("self_attn.k_proj", "attn_k"), ("self_attn.v_proj", "attn_v"),
           ("self_attn.o_proj", "attn_o"), ("post_attention_layernorm", "ffn_norm"),
           ("mlp.gate_proj", "ffn_gate"), ("mlp.up_proj", "ffn_up"), ("mlp.down_proj", "ffn_down")]
    add("token_embd.weight", sd[f"{txt}.embed_tokens.weight"])
    add("vlm.output_norm.weight", sd[f"{txt}.norm.weight"])
    for i in range(n):
        for s, d in dec:
            add(f"vlm.blk.{i}.{d}.weight", sd[f"{txt}.layers.{i}.{s}.weight"])
    add("aex.output_norm.weight", sd[f"{aex}.norm.weight"])
    for i in range(n):
        for s, d in dec:
            add(f"aex.blk.{i}.{d}.weight", sd[f"{aex}.layers.{i}.{s}.weight"])
    for p in ["state_proj", "action_in_proj", "action_time_mlp_in", "action_time_mlp_out",
              "action_out_proj"]:
        add(f"{p}.weight", sd[f"model.{p}.weight"])
        add(f"{p}.bias", sd[f"model.{p}.bias"])

    write_siglip(add, sd, vis)
    add("mm.fc.weight", sd["model.vlm_with_expert.vlm.model.connector.modality_projection.proj.weight"])
    add("state_mean", s_mean[:state_dim])
    add("state_std", s_std[:state_dim])
    add("action_mean", a_mean[:action_dim])
    add("action_std", a_std[:action_dim])

    finish(w)


if __name__ == "__main__":
    main(*sys.argv[1:])
