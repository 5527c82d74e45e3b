#!/usr/bin/env python3
"""An independent writer of Evo-1 GGUFs in vla.cpp's layout (numpy + gguf-py), for
tests/evo1_golden.rs.

  vlacpp_evo1_writer.py CKPT_DIR OUT.gguf

CKPT_DIR is a lerobot Evo-1 checkpoint (model.safetensors in transformers' InternVL names,
config.json, the normalizer's and unnormalizer's safetensors, arch.json with the sizes and
token ids, as tools/golden/evo1.py writes). OUT is what vla.cpp's
`scripts/convert_evo1_to_gguf.py` (VinRobotics/vla.cpp b18873d) writes for the official
checkpoint holding these weights (`mp_rank_00_model_states.pt`, InternVL's own names), from
the facts of its layout alone, without vla-rs code. The official names of transformers'
InternVL tensors: `cls_token` -> `class_embedding`, `patch_embeddings.projection` ->
`patch_embedding`, `position_embeddings` -> `position_embedding`, `layernorm_before` /
`layernorm_after` -> `norm1` / `norm2`, `lambda_1` / `lambda_2` -> `ls1` / `ls2`, the
attention's `q_proj`, `k_proj`, `v_proj` stacked by rows -> `attn.qkv`, `projection_layer`
-> `attn.proj`; the projector's `layer_norm`, `linear_1`, `linear_2` -> `mlp1.0`, `.1`, `.3`.

vla.cpp's converter takes the 448-px model's sizes and InternVL3's token ids as constants
(`n_images` 3, `max_text_length` 1024, `<IMG_CONTEXT>` 151667, ...); for this small
checkpoint the same keys carry its own (`n_images` = its prompt's views, `max_views`).

- keys `evo1.{vit_hidden, vit_layers, vit_heads, vit_inter, image_size, patch_size,
  num_image_token, lm_hidden, lm_layers_used, lm_q_heads, lm_kv_heads, lm_head_dim,
  lm_inter, vocab_size, embed_dim, dit_layers, dit_heads, mlp_head_hidden, horizon,
  per_action_dim, state_dim, action_dim (= horizon x per_action_dim),
  num_inference_timesteps, real_state_dim, real_action_dim, max_text_length, n_images,
  img_context_token_id, img_start_token_id, img_end_token_id, pad_token_id}` u32;
  `lm_rope_theta` f64; `lm_rms_eps`, `vit_ln_eps`, `proj_ln_eps`, `norm_eps` (the
  statistics' epsilon) f32; no tokenizer, no prompt template.
- tensors `vit.patch_embd.*`, `vit.class_embd` and `vit.pos_embd` (with their leading 1),
  `vit.blk.{i}.{norm1, norm2, ls1, ls2, attn_qkv, attn_proj, fc1, fc2}`, `mm.{ln, fc1,
  fc2}`, `token_embd.weight`, `vlm.output_norm.weight`, `vlm.blk.{i}.*` (q/k/v biases),
  `aex.ae.{W1,W2,W3}.*`, `aex.ae.pos_enc`, `aex.blk.{i}.{norm1, norm2, attn_in, attn_out,
  ff1, ff2}`, `aex.norm_out`, `aex.seq_pool`, `aex.head.fc{1,2}`, `aex.time_pos_enc`,
  `aex.state_enc.fc{1,2}`; statistics as F32 tensors `state_min`, `state_max`,
  `action_min`, `action_max`, the real dimensions' values zero-padded to 24.
"""
import json
import sys

import numpy as np
import gguf

from vlacpp_layout import DECODER, decoder_layers, finish, safetensors

VIS = "model.embedder.model.vision_tower"
MMP = "model.embedder.model.multi_modal_projector"
LM = "model.embedder.model.language_model"
AH = "model.action_head"
ARCH = "evo1"
PAD = 24

# the decoder blocks plus Qwen2's q / k / v biases
QWEN2 = DECODER + [(f"self_attn.{x}_proj.bias", f"attn_{x}.bias") for x in "qkv"]


def count(sd, prefix, probe):
    n = 0
    while f"{prefix}.{n}.{probe}" in sd:
        n += 1
    return n


def pad24(v):
    out = np.zeros(PAD, dtype=np.float32)
    out[:v.size] = v
    return out


def stats(ckpt, processor, registry):
    steps = json.load(open(f"{ckpt}/{processor}"))["steps"]
    step = next(s for s in steps if s["registry_name"] == registry)
    return safetensors(f"{ckpt}/{step['state_file']}")


def main(ckpt, out):
    sd = safetensors(f"{ckpt}/model.safetensors")
    cfg = json.load(open(f"{ckpt}/config.json"))
    sizes = json.load(open(f"{ckpt}/arch.json"))
    tok, head = sizes["tokens"], sizes["action_head"]
    vit_layers = count(sd, f"{VIS}.encoder.layer", "lambda_1")
    lm_layers = decoder_layers(sd, LM)
    dit_layers = count(sd, f"{AH}.transformer_blocks", "attn.in_proj_weight")
    conv = sd[f"{VIS}.embeddings.patch_embeddings.projection.weight"]
    q0 = sd[f"{LM}.layers.0.self_attn.q_proj.weight"]
    k0 = sd[f"{LM}.layers.0.self_attn.k_proj.weight"]
    head_dim = sizes["lm"]["head_dim"]
    image_size, patch = cfg["image_resolution"][0], conv.shape[2]
    grid = image_size // patch
    chunk, per_a = cfg["chunk_size"], cfg["max_action_dim"]
    state_dim = cfg["input_features"]["observation.state"]["shape"][0]
    action_dim = cfg["output_features"]["action"]["shape"][0]

    w = gguf.GGUFWriter(out, arch=ARCH)
    kv = lambda k: f"{ARCH}.{k}"
    w.add_string(kv("architecture"), ARCH)
    u32 = [("vit_hidden", conv.shape[0]), ("vit_layers", vit_layers),
           ("vit_heads", sizes["vision"]["num_attention_heads"]),
           ("vit_inter", sd[f"{VIS}.encoder.layer.0.mlp.fc1.weight"].shape[0]),
           ("image_size", image_size), ("patch_size", patch), ("num_image_token", (grid // 2) ** 2),
           ("lm_hidden", q0.shape[1]), ("lm_layers_used", lm_layers), ("lm_q_heads", q0.shape[0] // head_dim),
           ("lm_kv_heads", k0.shape[0] // head_dim), ("lm_head_dim", head_dim),
           ("lm_inter", sd[f"{LM}.layers.0.mlp.gate_proj.weight"].shape[0]),
           ("vocab_size", sd[f"{LM}.embed_tokens.weight"].shape[0]), ("embed_dim", head["embed_dim"]),
           ("dit_layers", dit_layers), ("dit_heads", head["num_heads"]), ("mlp_head_hidden", head["hidden_dim"]),
           ("horizon", chunk), ("per_action_dim", per_a), ("state_dim", cfg["max_state_dim"]),
           ("action_dim", chunk * per_a), ("num_inference_timesteps", cfg["num_inference_timesteps"]),
           ("real_state_dim", state_dim), ("real_action_dim", action_dim),
           ("max_text_length", cfg["max_text_length"]), ("n_images", cfg["max_views"]),
           ("img_context_token_id", tok["img_context"]), ("img_start_token_id", tok["img_start"]),
           ("img_end_token_id", tok["img_end"]), ("pad_token_id", tok["pad"])]
    for k, v in u32:
        w.add_uint32(kv(k), int(v))
    w.add_float64(kv("lm_rope_theta"), float(sizes["lm"]["rope_theta"]))
    for k, v in [("lm_rms_eps", sizes["lm"]["rms_eps"]), ("vit_ln_eps", sizes["vision"]["layer_norm_eps"]),
                 ("proj_ln_eps", sizes["projector"]["ln_eps"]), ("norm_eps", 1e-8)]:
        w.add_float32(kv(k), float(v))

    add = lambda name, a: w.add_tensor(name, np.ascontiguousarray(a, dtype=np.float32))
    e = f"{VIS}.embeddings"
    add("vit.patch_embd.weight", conv)
    add("vit.patch_embd.bias", sd[f"{e}.patch_embeddings.projection.bias"])
    add("vit.class_embd", sd[f"{e}.cls_token"])
    add("vit.pos_embd", sd[f"{e}.position_embeddings"])
    for i in range(vit_layers):
        s, d = f"{VIS}.encoder.layer.{i}", f"vit.blk.{i}"
        for a, b in [("layernorm_before", "norm1"), ("layernorm_after", "norm2")]:
            add(f"{d}.{b}.weight", sd[f"{s}.{a}.weight"])
            add(f"{d}.{b}.bias", sd[f"{s}.{a}.bias"])
        add(f"{d}.ls1", sd[f"{s}.lambda_1"])
        add(f"{d}.ls2", sd[f"{s}.lambda_2"])
        for p in ("weight", "bias"):
            qkv = [sd[f"{s}.attention.{x}_proj.{p}"] for x in "qkv"]
            add(f"{d}.attn_qkv.{p}", np.concatenate(qkv, axis=0))
            add(f"{d}.attn_proj.{p}", sd[f"{s}.attention.projection_layer.{p}"])
            add(f"{d}.fc1.{p}", sd[f"{s}.mlp.fc1.{p}"])
            add(f"{d}.fc2.{p}", sd[f"{s}.mlp.fc2.{p}"])
    for a, b in [("layer_norm", "ln"), ("linear_1", "fc1"), ("linear_2", "fc2")]:
        add(f"mm.{b}.weight", sd[f"{MMP}.{a}.weight"])
        add(f"mm.{b}.bias", sd[f"{MMP}.{a}.bias"])
    add("token_embd.weight", sd[f"{LM}.embed_tokens.weight"])
    add("vlm.output_norm.weight", sd[f"{LM}.norm.weight"])
    for i in range(lm_layers):
        for s, d in QWEN2:
            add(f"vlm.blk.{i}.{d}", sd[f"{LM}.layers.{i}.{s}"])
    for x in ("W1", "W2", "W3"):
        add(f"aex.ae.{x}.weight", sd[f"{AH}.action_encoder.{x}.linear.weight"])
        add(f"aex.ae.{x}.bias", sd[f"{AH}.action_encoder.{x}.linear.bias"])
    add("aex.ae.pos_enc", sd[f"{AH}.action_encoder.pos_encoding.pe"])
    for i in range(dit_layers):
        s, d = f"{AH}.transformer_blocks.{i}", f"aex.blk.{i}"
        for a, b in [("norm1", "norm1"), ("norm2", "norm2"), ("attn.out_proj", "attn_out"),
                     ("ff.0", "ff1"), ("ff.2", "ff2")]:
            add(f"{d}.{b}.weight", sd[f"{s}.{a}.weight"])
            add(f"{d}.{b}.bias", sd[f"{s}.{a}.bias"])
        add(f"{d}.attn_in.weight", sd[f"{s}.attn.in_proj_weight"])
        add(f"{d}.attn_in.bias", sd[f"{s}.attn.in_proj_bias"])
    for a, b in [("norm_out", "norm_out"), ("seq_pool_proj", "seq_pool")]:
        add(f"aex.{b}.weight", sd[f"{AH}.{a}.weight"])
        add(f"aex.{b}.bias", sd[f"{AH}.{a}.bias"])
    for x in ("fc1", "fc2"):
        add(f"aex.head.{x}.weight", sd[f"{AH}.mlp_head.{x}.linear.weight"])
        add(f"aex.head.{x}.bias", sd[f"{AH}.mlp_head.{x}.linear.bias"])
        add(f"aex.state_enc.{x}.weight", sd[f"{AH}.state_encoder.{x}.linear.weight"])
        add(f"aex.state_enc.{x}.bias", sd[f"{AH}.state_encoder.{x}.linear.bias"])
    add("aex.time_pos_enc", sd[f"{AH}.time_pos_enc.pe"])

    # the official norm_stats.json holds the dataset's real dimensions; lerobot's processors
    # hold them padded to 24 (min -1 / max +1): the first real ones are the same values
    st = stats(ckpt, "policy_preprocessor.json", "normalizer_processor")
    ac = stats(ckpt, "policy_postprocessor.json", "unnormalizer_processor")
    for ours, theirs, src, dim in [("state", "observation.state", st, state_dim),
                                   ("action", "action", ac, action_dim)]:
        add(f"{ours}_min", pad24(src[f"{theirs}.min"][:dim]))
        add(f"{ours}_max", pad24(src[f"{theirs}.max"][:dim]))
    finish(w)


if __name__ == "__main__":
    main(*sys.argv[1:])
