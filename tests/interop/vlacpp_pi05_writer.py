#!/usr/bin/env python3
"""An independent writer of pi0.5 GGUFs in vla.cpp's layout (numpy + gguf-py), for
tests/pi0_golden.rs.

  vlacpp_pi05_writer.py CKPT_DIR OUT.gguf

CKPT_DIR is a lerobot pi0.5 checkpoint (model.safetensors, config.json, the normalizer's
safetensors, and arch.json with the head sizes, as tools/golden/pi0.py writes). OUT is what vla.cpp's `scripts/convert_pi05_to_gguf.py` (+ `gguf_blocks.py`)
writes for it, from the facts of its layout alone (docs/FOLDQUANT.md section 3,
../shared/ARCHS.md), without vla-rs code:

- keys `pi05.{hidden, intermediate, n_q_heads, n_kv_heads, head_dim, n_layers, vocab_size,
  expert_h, expert_inter, chunk_size, num_steps, n_action_steps, max_state_dim,
  max_action_dim, real_state_dim, real_action_dim, tokenizer_max_length, adarms_cond_dim,
  vit_hidden, vit_layers, vit_heads, image_size, patch_size, n_img_tokens}` u32,
  `use_adarms_expert` bool, `paligemma_variant`, `action_expert_variant`, `norm_mode`
  strings, `min_period`, `max_period`, `rope_theta` f64, `rms_norm_eps` (the RMSNorm's),
  `norm_eps` (the statistics' epsilon), `vit_ln_eps` f32; no tokenizer.
- Gemma's norm gains as the checkpoint holds them (the runtime adds 1); adaRMS dense as
  `aex.blk.{i}.attn_norm` / `ffn_norm` `.weight` + `.bias`, the final one as
  `aex.output_norm`; `token_embd.weight` from the LM head; `vit.pos_embd` without `.weight`;
  the patch embedding as the 4-D convolution; statistics as F32 tensors `state_q01` etc.
  (mean / std as 0 / 1 where the checkpoint has only quantiles).
"""
import json
import sys

import numpy as np
import gguf

from vlacpp_layout import (DECODER, PI_AEX, decoder_layers, finish, safetensors, write_pi_backbone,
                           write_pi_kv)


def main(ckpt, out):
    sd = {k.removeprefix("model."): v for k, v in safetensors(f"{ckpt}/model.safetensors").items()}
    cfg = json.load(open(f"{ckpt}/config.json"))
    pre = json.load(open(f"{ckpt}/policy_preprocessor.json"))
    norm = next(s for s in pre["steps"] if s["registry_name"] == "normalizer_processor")
    stats = safetensors(f"{ckpt}/{norm['state_file']}")
    state_dim = cfg["input_features"]["observation.state"]["shape"][0]
    action_dim = cfg["output_features"]["action"]["shape"][0]

    w = gguf.GGUFWriter(out, arch="pi05")
    write_pi_kv(w, "pi05", ckpt, sd, cfg, float(norm["config"].get("eps", 1e-8)), adarms=True)

    add = lambda name, a: w.add_tensor(name, np.ascontiguousarray(a, dtype=np.float32))
    write_pi_backbone(add, sd)
    aex = PI_AEX
    add("aex.output_norm.weight", sd[f"{aex}.norm.dense.weight"])
    add("aex.output_norm.bias", sd[f"{aex}.norm.dense.bias"])
    ada = [("input_layernorm.dense.weight", "attn_norm.weight"),
           ("input_layernorm.dense.bias", "attn_norm.bias"),
           ("post_attention_layernorm.dense.weight", "ffn_norm.weight"),
           ("post_attention_layernorm.dense.bias", "ffn_norm.bias")]
    for i in range(decoder_layers(sd, aex)):
        for s, d in ada + [x for x in DECODER if "norm" not in x[0]]:
            add(f"aex.blk.{i}.{d}", sd[f"{aex}.layers.{i}.{s}"])
    for p in ["action_in_proj", "time_mlp_in", "time_mlp_out", "action_out_proj"]:
        add(f"{p}.weight", sd[f"{p}.weight"])
        add(f"{p}.bias", sd[f"{p}.bias"])

    for ours, theirs, dim in [("state", "observation.state", state_dim), ("action", "action", action_dim)]:
        add(f"{ours}_mean", stats.get(f"{theirs}.mean", np.zeros(dim))[:dim])
        add(f"{ours}_std", stats.get(f"{theirs}.std", np.ones(dim))[:dim])
        add(f"{ours}_q01", stats[f"{theirs}.q01"][:dim])
        add(f"{ours}_q99", stats[f"{theirs}.q99"][:dim])

    finish(w)


if __name__ == "__main__":
    main(*sys.argv[1:])
