#!/usr/bin/env python3
"""An independent writer of pi0 GGUFs in vla.cpp's layout (numpy + gguf-py), for
tests/pi0_golden.rs.

  vlacpp_pi0_writer.py CKPT_DIR OUT.gguf

CKPT_DIR is a lerobot pi0 checkpoint (model.safetensors, config.json, the normalizer's and
unnormalizer's safetensors, and arch.json with the head sizes, as tools/golden/pi0.py writes).
OUT is what vla.cpp's `scripts/convert_pi0_to_gguf.py` (+ `gguf_blocks.py`: `write_pi_kv`
without adaRMS, `write_decoder_blocks`, `write_paligemma_vision`; VinRobotics/vla.cpp
b18873d) writes for it, from the facts of its layout alone, without vla-rs code:

- keys `pi0.{hidden, intermediate, n_q_heads, n_kv_heads, head_dim, n_layers, vocab_size,
  expert_h, expert_inter, chunk_size, num_steps, n_action_steps, max_state_dim,
  max_action_dim, real_state_dim, real_action_dim, tokenizer_max_length, vit_hidden,
  vit_layers, vit_heads, image_size, patch_size, n_img_tokens}` u32, `paligemma_variant`,
  `action_expert_variant` strings, `min_period`, `max_period`, `rope_theta` f64,
  `rms_norm_eps` (the RMSNorm's), `norm_eps` (the statistics' epsilon), `vit_ln_eps` f32; no
  `norm_mode`, no tokenizer.
- Gemma's norm gains as the checkpoint holds them, the language model's and the expert's
  (vla.cpp's loader adds 1: `f32_gemma_norm`); `aex.output_norm.weight`; `token_embd.weight`
  from the LM head; the projections `state_proj`, `action_in_proj`, `action_time_mlp_in`,
  `action_time_mlp_out`, `action_out_proj`; `vit.pos_embd` without `.weight`; the patch
  embedding as the 4-D convolution; `mm.proj`; statistics as F32 tensors `state_mean`,
  `state_std` (the normalizer's) and `action_mean`, `action_std` (the unnormalizer's).
"""
import json
import sys

import numpy as np
import gguf

from vlacpp_layout import finish, safetensors, siglip_layers, write_siglip


def layers(sd, prefix):
    n = 0
    while f"{prefix}.layers.{n}.self_attn.q_proj.weight" in sd:
        n += 1
    return n


def stats_of(ckpt, processor, registry):
    steps = json.load(open(f"{ckpt}/{processor}"))["steps"]
    step = next(s for s in steps if s["registry_name"] == registry)
    return step, safetensors(f"{ckpt}/{step['state_file']}")


def main(ckpt, out):
    sd = {k.removeprefix("model."): v for k, v in safetensors(f"{ckpt}/model.safetensors").items()}
    cfg = json.load(open(f"{ckpt}/config.json"))
    norm, state_stats = stats_of(ckpt, "policy_preprocessor.json", "normalizer_processor")
    _, action_stats = stats_of(ckpt, "policy_postprocessor.json", "unnormalizer_processor")

    vlm = "paligemma_with_expert.paligemma.model.language_model"
    aex = "paligemma_with_expert.gemma_expert.model"
    vis = "paligemma_with_expert.paligemma.model.vision_tower.vision_model"
    mmp = "paligemma_with_expert.paligemma.model.multi_modal_projector"
    head = "paligemma_with_expert.paligemma.lm_head.weight"
    n = layers(sd, vlm)
    nv = siglip_layers(sd, vis)
    q0 = sd[f"{vlm}.layers.0.self_attn.q_proj.weight"]
    k0 = sd[f"{vlm}.layers.0.self_attn.k_proj.weight"]
    # vla.cpp's converter takes head size and vision heads from Gemma 2B / So400m constants;
    # a small checkpoint states them in its arch.json
    sizes = json.load(open(f"{ckpt}/arch.json"))
    head_dim, vit_heads = sizes["vlm"]["head_dim"], sizes["vision"]["heads"]
    conv = sd[f"{vis}.embeddings.patch_embedding.weight"]
    pos = sd[f"{vis}.embeddings.position_embedding.weight"]
    patch = conv.shape[2]
    grid = int(round(pos.shape[0] ** 0.5))
    state_dim = cfg["input_features"]["observation.state"]["shape"][0]
    action_dim = cfg["output_features"]["action"]["shape"][0]

    w = gguf.GGUFWriter(out, arch="pi0")
    w.add_string("pi0.architecture", "pi0")
    kv = lambda k: f"pi0.{k}"
    w.add_string(kv("paligemma_variant"), cfg["paligemma_variant"])
    w.add_string(kv("action_expert_variant"), cfg["action_expert_variant"])
    for k, v in [("hidden", q0.shape[1]),
                 ("intermediate", sd[f"{vlm}.layers.0.mlp.gate_proj.weight"].shape[0]),
                 ("n_q_heads", q0.shape[0] // head_dim), ("n_kv_heads", k0.shape[0] // head_dim),
                 ("head_dim", head_dim), ("n_layers", n), ("vocab_size", sd[head].shape[0]),
                 ("expert_h", sd[f"{aex}.layers.0.mlp.gate_proj.weight"].shape[1]),
                 ("expert_inter", sd[f"{aex}.layers.0.mlp.gate_proj.weight"].shape[0]),
                 ("chunk_size", cfg["chunk_size"]), ("num_steps", cfg["num_inference_steps"]),
                 ("n_action_steps", cfg["n_action_steps"]),
                 ("max_state_dim", cfg["max_state_dim"]), ("max_action_dim", cfg["max_action_dim"]),
                 ("real_state_dim", state_dim), ("real_action_dim", action_dim),
                 ("tokenizer_max_length", cfg["tokenizer_max_length"])]:
        w.add_uint32(kv(k), int(v))
    w.add_float64(kv("min_period"), float(cfg["min_period"]))
    w.add_float64(kv("max_period"), float(cfg["max_period"]))
    w.add_float64(kv("rope_theta"), 10000.0)
    w.add_float32(kv("rms_norm_eps"), 1e-6)
    w.add_float32(kv("norm_eps"), float(norm["config"].get("eps", 1e-8)))
    for k, v in [("vit_hidden", conv.shape[0]), ("vit_layers", nv), ("vit_heads", vit_heads),
                 ("image_size", grid * patch), ("patch_size", patch), ("n_img_tokens", pos.shape[0])]:
        w.add_uint32(kv(k), int(v))
    w.add_float32(kv("vit_ln_eps"), 1e-6)

    add = lambda name, a: w.add_tensor(name, np.ascontiguousarray(a, dtype=np.float32))
    add("token_embd.weight", sd[head])
    add("vlm.output_norm.weight", sd[f"{vlm}.norm.weight"])
    dec = [("input_layernorm.weight", "attn_norm.weight"), ("self_attn.q_proj.weight", "attn_q.weight"),
           ("self_attn.k_proj.weight", "attn_k.weight"), ("self_attn.v_proj.weight", "attn_v.weight"),
           ("self_attn.o_proj.weight", "attn_o.weight"),
           ("post_attention_layernorm.weight", "ffn_norm.weight"),
           ("mlp.gate_proj.weight", "ffn_gate.weight"), ("mlp.up_proj.weight", "ffn_up.weight"),
           ("mlp.down_proj.weight", "ffn_down.weight")]
    for stack, prefix in [("vlm", vlm), ("aex", aex)]:
        for i in range(n):
            for s, d in dec:
                add(f"{stack}.blk.{i}.{d}", sd[f"{prefix}.layers.{i}.{s}"])
    add("aex.output_norm.weight", sd[f"{aex}.norm.weight"])
    for p in ["state_proj", "action_in_proj", "action_time_mlp_in", "action_time_mlp_out",
              "action_out_proj"]:
        add(f"{p}.weight", sd[f"{p}.weight"])
        add(f"{p}.bias", sd[f"{p}.bias"])

    write_siglip(add, sd, vis)
    add("mm.proj.weight", sd[f"{mmp}.linear.weight"])
    add("mm.proj.bias", sd[f"{mmp}.linear.bias"])

    for ours, theirs, stats, dim in [("state", "observation.state", state_stats, state_dim),
                                     ("action", "action", action_stats, action_dim)]:
        add(f"{ours}_mean", stats[f"{theirs}.mean"][:dim])
        add(f"{ours}_std", stats[f"{theirs}.std"][:dim])

    finish(w)


if __name__ == "__main__":
    main(*sys.argv[1:])
