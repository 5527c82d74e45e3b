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

from vlacpp_layout import (DECODER, PI_AEX, decoder_layers, finish, safetensors, write_pi_backbone,
                           write_pi_kv)


def stats_of(ckpt, processor, registry):
    steps = json.load(open(f"{ckpt}/{processor}"))["steps"]
    step = next(s for s in steps if s["registry_name"] == registry)
    return step, safetensors(f"{ckpt}/{step['state_file']}")


def main(ckpt, out):
    sd = {k.removeprefix("model."): v for k, v in safetensors(f"{ckpt}/model.safetensors").items()}
    cfg = json.load(open(f"{ckpt}/config.json"))
    norm, state_stats = stats_of(ckpt, "policy_preprocessor.json", "normalizer_processor")
    _, action_stats = stats_of(ckpt, "policy_postprocessor.json", "unnormalizer_processor")
    state_dim = cfg["input_features"]["observation.state"]["shape"][0]
    action_dim = cfg["output_features"]["action"]["shape"][0]

    w = gguf.GGUFWriter(out, arch="pi0")
    write_pi_kv(w, "pi0", ckpt, sd, cfg, float(norm["config"].get("eps", 1e-8)), adarms=False)

    add = lambda name, a: w.add_tensor(name, np.ascontiguousarray(a, dtype=np.float32))
    write_pi_backbone(add, sd)
    for i in range(decoder_layers(sd, PI_AEX)):
        for s, d in DECODER:
            add(f"aex.blk.{i}.{d}", sd[f"{PI_AEX}.layers.{i}.{s}"])
    add("aex.output_norm.weight", sd[f"{PI_AEX}.norm.weight"])
    for p in ["state_proj", "action_in_proj", "action_time_mlp_in", "action_time_mlp_out",
              "action_out_proj"]:
        add(f"{p}.weight", sd[f"{p}.weight"])
        add(f"{p}.bias", sd[f"{p}.bias"])

    for ours, theirs, stats, dim in [("state", "observation.state", state_stats, state_dim),
                                     ("action", "action", action_stats, action_dim)]:
        add(f"{ours}_mean", stats[f"{theirs}.mean"][:dim])
        add(f"{ours}_std", stats[f"{theirs}.std"][:dim])

    finish(w)


if __name__ == "__main__":
    main(*sys.argv[1:])
