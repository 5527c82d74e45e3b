#!/usr/bin/env python3
"""An independent writer of GR00T N1.5 GGUFs in vla.cpp's layout (numpy + gguf-py), for
tests/gr00t_golden.rs.

  vlacpp_gr00t_writer.py CKPT_DIR OUT.gguf OUT_STATS.json

CKPT_DIR is a lerobot GR00T N1.5 finetune (model.safetensors with the `_groot_model.`
prefix, config.json of type groot, the processors' min / max safetensors, and arch.json with
the sizes, as tools/golden/groot.py writes). OUT is what vla.cpp's
`scripts/convert_gr00t_n1_5_to_gguf.py` (+ `gguf_blocks.py`; VinRobotics/vla.cpp b18873d)
writes for such a checkpoint, from the facts of its layout alone, without vla-rs code;
OUT_STATS.json is the `dataset_statistics.json` it writes beside it for a lerobot
checkpoint (`{"new_embodiment": {"state": {"min", "max"}, "action": {"min", "max"}}}`).

vla.cpp's converter takes the sizes of the 3B model as constants (SigLIP 1152 x 27, Qwen3
2048 x 12 used, image token 151669, the embodiment map of the four public tags); for this
small checkpoint the same keys carry its own sizes (from the tensors and arch.json), its
image token and its embodiment map, as the converter would for a checkpoint of those sizes.

- keys `gr00t_n1_5.{vit_hidden, vit_layers, vit_heads, vit_inter, image_size, patch_size,
  n_img_tokens, vit_pixel_shuffle=0, mlp_connector_layers=1, lm_hidden, lm_layers_used,
  lm_q_heads, lm_kv_heads, lm_head_dim, lm_inter, vocab_size, image_token_index,
  backbone_embedding_dim, input_embedding_dim, dit_hidden, dit_heads, dit_head_dim,
  dit_layers, dit_interleave, vlsa_layers, vlsa_heads, vlsa_head_dim, vlsa_inter,
  num_target_vision_tokens, action_horizon, action_dim, max_state_dim,
  num_inference_timesteps, num_timestep_buckets, max_num_embodiments, max_seq_len}` u32;
  `lm_rope_theta` f64; `lm_rms_eps`, `vit_ln_eps`, `ln_eps`, `norm_out_eps`, `vlln_eps` f32;
  strings `embodiment_tag_mapping` (JSON) and `metadata_json` (empty: a lerobot checkpoint
  has no experiment_cfg/metadata.json); no tokenizer, no prompt template, no statistics.
- tensors: the SigLIP tower (`vit.*`, `vit.pos_embd` without `.weight`), `mm.fc`, the
  Qwen3 decoder's kept layers (`token_embd.weight` from the LM head when the checkpoint has
  no `embed_tokens`, `vlm.output_norm.weight`, `vlm.blk.{i}.*` with `attn_q_norm`,
  `attn_k_norm`), `aex.vlln`, `aex.vlsa.{i}.*`, the embodiment MLPs
  `aex.{state_enc.l1,l2, act_enc.W1,W2,W3, act_dec.l1,l2}.{W,b}` as stored
  (`[E, in, out]`), `aex.future_tokens` and `aex.pos_embd` (no `.weight`),
  `aex.dit.time_emb.l{1,2}`, `aex.dit.{i}.*`, `aex.dit.proj_out{1,2}`.
"""
import json
import sys

import numpy as np
import gguf

from vlacpp_layout import DECODER, decoder_layers, finish, safetensors, write_siglip

VIS = "backbone.eagle_model.vision_model.vision_model"
LM = "backbone.eagle_model.language_model.model"
AH = "action_head"
ARCH = "gr00t_n1_5"

# `write_qwen3_lm`: the decoder blocks plus Qwen3's per-head q / k norms
QWEN3 = DECODER + [("self_attn.q_norm.weight", "attn_q_norm.weight"),
                   ("self_attn.k_norm.weight", "attn_k_norm.weight")]
PROJECTORS = [("state_encoder.layer1", "aex.state_enc.l1"), ("state_encoder.layer2", "aex.state_enc.l2"),
              ("action_encoder.W1", "aex.act_enc.W1"), ("action_encoder.W2", "aex.act_enc.W2"),
              ("action_encoder.W3", "aex.act_enc.W3"), ("action_decoder.layer1", "aex.act_dec.l1"),
              ("action_decoder.layer2", "aex.act_dec.l2")]


def count(sd, prefix, probe):
    n = 0
    while f"{prefix}.{n}.{probe}" in sd:
        n += 1
    return n


def write_blocks(add, sd, src, dst, n, adaln):
    """vla.cpp's `write_dit_blocks` (adaln) or `write_vlsa_blocks`."""
    for i in range(n):
        s, d = f"{src}.{i}", f"{dst}.{i}"
        if adaln:
            add(f"{d}.adaln.weight", sd[f"{s}.norm1.linear.weight"])
            add(f"{d}.adaln.bias", sd[f"{s}.norm1.linear.bias"])
        else:
            for nm in ("norm1", "norm3"):
                add(f"{d}.{nm}.weight", sd[f"{s}.{nm}.weight"])
                add(f"{d}.{nm}.bias", sd[f"{s}.{nm}.bias"])
        for a, b in [("attn1.to_q", "attn_q"), ("attn1.to_k", "attn_k"), ("attn1.to_v", "attn_v"),
                     ("attn1.to_out.0", "attn_o"), ("ff.net.0.proj", "ff0"), ("ff.net.2", "ff2")]:
            add(f"{d}.{b}.weight", sd[f"{s}.{a}.weight"])
            add(f"{d}.{b}.bias", sd[f"{s}.{a}.bias"])


def write_projectors(add, sd, ah):
    """vla.cpp's `write_gr00t_projectors`: the embodiment MLPs under `ah` as stored ([E, in, out])."""
    for s, d in PROJECTORS:
        add(f"{d}.W", sd[f"{ah}.{s}.W"])
        add(f"{d}.b", sd[f"{ah}.{s}.b"])


def write_dit(add, sd, ah):
    """vla.cpp's `write_gr00t_time_embed`, `write_dit_blocks` and `write_gr00t_proj_out`: the DiT
    under `ah`.model."""
    te = f"{ah}.model.timestep_encoder.timestep_embedder.linear_"
    for j in (1, 2):
        add(f"aex.dit.time_emb.l{j}.weight", sd[f"{te}{j}.weight"])
        add(f"aex.dit.time_emb.l{j}.bias", sd[f"{te}{j}.bias"])
    dit = f"{ah}.model.transformer_blocks"
    write_blocks(add, sd, dit, "aex.dit", count(sd, dit, "attn1.to_q.weight"), adaln=True)
    for j in (1, 2):
        add(f"aex.dit.proj_out{j}.weight", sd[f"{ah}.model.proj_out_{j}.weight"])
        add(f"aex.dit.proj_out{j}.bias", sd[f"{ah}.model.proj_out_{j}.bias"])


def main(ckpt, out, stats_out):
    sd = {k.removeprefix("_groot_model."): v
          for k, v in safetensors(f"{ckpt}/model.safetensors").items()}
    sizes = json.load(open(f"{ckpt}/arch.json"))
    pre = json.load(open(f"{ckpt}/policy_preprocessor.json"))
    pack = next(s for s in pre["steps"] if s["registry_name"].startswith("groot_pack_inputs"))
    emb_map = pack["config"]["embodiment_mapping"]

    conv = sd[f"{VIS}.embeddings.patch_embedding.weight"]
    pos = sd[f"{VIS}.embeddings.position_embedding.weight"]
    patch, grid = conv.shape[2], int(round(pos.shape[0] ** 0.5))
    embd = f"{LM}.embed_tokens.weight"
    embd = embd if embd in sd else "backbone.eagle_model.language_model.lm_head.weight"
    q0, k0 = sd[f"{LM}.layers.0.self_attn.q_proj.weight"], sd[f"{LM}.layers.0.self_attn.k_proj.weight"]
    head_dim = sd[f"{LM}.layers.0.self_attn.q_norm.weight"].shape[0]
    dit = f"{AH}.model.transformer_blocks"
    vlsa = f"{AH}.vl_self_attention.transformer_blocks"
    dit_heads, dit_head_dim = sizes["dit"]["heads"], sizes["dit"]["head_dim"]
    vlsa_heads, vlsa_head_dim = sizes["vlsa"]["heads"], sizes["vlsa"]["head_dim"]
    head = sizes["action_head"]

    w = gguf.GGUFWriter(out, arch=ARCH)
    kv = lambda k: f"{ARCH}.{k}"
    w.add_string(kv("architecture"), ARCH)
    u32 = [("vit_hidden", conv.shape[0]), ("vit_layers", count(sd, f"{VIS}.encoder.layers", "layer_norm1.weight")),
           ("vit_heads", sizes["siglip"]["heads"]),
           ("vit_inter", sd[f"{VIS}.encoder.layers.0.mlp.fc1.weight"].shape[0]),
           ("image_size", grid * patch), ("patch_size", patch), ("n_img_tokens", grid * grid),
           ("vit_pixel_shuffle", 0), ("mlp_connector_layers", 1),
           ("lm_hidden", q0.shape[1]), ("lm_layers_used", decoder_layers(sd, LM)),
           ("lm_q_heads", q0.shape[0] // head_dim), ("lm_kv_heads", k0.shape[0] // head_dim),
           ("lm_head_dim", head_dim), ("lm_inter", sd[f"{LM}.layers.0.mlp.gate_proj.weight"].shape[0]),
           ("vocab_size", sd[embd].shape[0]), ("image_token_index", sizes["image_token_id"]),
           ("backbone_embedding_dim", head["backbone_embedding_dim"]),
           ("input_embedding_dim", head["input_embedding_dim"]),
           ("dit_hidden", dit_heads * dit_head_dim), ("dit_heads", dit_heads), ("dit_head_dim", dit_head_dim),
           ("dit_layers", count(sd, dit, "attn1.to_q.weight")), ("dit_interleave", 1),
           ("vlsa_layers", count(sd, vlsa, "attn1.to_q.weight")), ("vlsa_heads", vlsa_heads),
           ("vlsa_head_dim", vlsa_head_dim), ("vlsa_inter", sd[f"{vlsa}.0.ff.net.0.proj.weight"].shape[0]),
           ("num_target_vision_tokens", sd[f"{AH}.future_tokens.weight"].shape[0]),
           ("action_horizon", head["action_horizon"]), ("action_dim", head["max_action_dim"]),
           ("max_state_dim", head["max_state_dim"]), ("num_inference_timesteps", head["num_inference_timesteps"]),
           ("num_timestep_buckets", head["num_timestep_buckets"]),
           ("max_num_embodiments", head["max_num_embodiments"]), ("max_seq_len", head["max_seq_len"])]
    for k, v in u32:
        w.add_uint32(kv(k), int(v))
    w.add_float64(kv("lm_rope_theta"), float(sizes["lm"]["rope_theta"]))
    for k, v in [("lm_rms_eps", sizes["lm"]["rms_eps"]), ("vit_ln_eps", sizes["siglip"]["ln_eps"]),
                 ("ln_eps", sizes["dit"]["ln_eps"]), ("norm_out_eps", sizes["dit"]["norm_out_eps"]),
                 ("vlln_eps", sizes["vlln"]["eps"])]:
        w.add_float32(kv(k), float(v))
    w.add_string(kv("embodiment_tag_mapping"), json.dumps(emb_map))
    w.add_string(kv("metadata_json"), "")

    add = lambda name, a: w.add_tensor(name, np.ascontiguousarray(a, dtype=np.float32))
    write_siglip(add, sd, VIS)
    add("mm.fc.weight", sd["backbone.eagle_model.mlp1.0.weight"])
    add("mm.fc.bias", sd["backbone.eagle_model.mlp1.0.bias"])
    add("token_embd.weight", sd[embd])
    add("vlm.output_norm.weight", sd[f"{LM}.norm.weight"])
    for i in range(decoder_layers(sd, LM)):
        for s, d in QWEN3:
            add(f"vlm.blk.{i}.{d}", sd[f"{LM}.layers.{i}.{s}"])
    add("aex.vlln.weight", sd[f"{AH}.vlln.weight"])
    add("aex.vlln.bias", sd[f"{AH}.vlln.bias"])
    write_blocks(add, sd, vlsa, "aex.vlsa", count(sd, vlsa, "attn1.to_q.weight"), adaln=False)
    write_projectors(add, sd, AH)
    add("aex.future_tokens", sd[f"{AH}.future_tokens.weight"])
    add("aex.pos_embd", sd[f"{AH}.position_embedding.weight"])
    write_dit(add, sd, AH)
    finish(w)

    # vla.cpp's _write_lerobot_stats: the pack step's state min / max, the unnormalizer's
    # action min / max, under "new_embodiment"
    post = json.load(open(f"{ckpt}/policy_postprocessor.json"))
    unnorm = next(s for s in post["steps"] if "unnormalize" in s["registry_name"])
    st = safetensors(f"{ckpt}/{pack['state_file']}")
    ac = safetensors(f"{ckpt}/{unnorm['state_file']}")
    blob = {"new_embodiment": {
        "state": {"min": st["observation.state.min"].tolist(), "max": st["observation.state.max"].tolist()},
        "action": {"min": ac["action.min"].tolist(), "max": ac["action.max"].tolist()}}}
    with open(stats_out, "w") as f:
        json.dump(blob, f, indent=2)


if __name__ == "__main__":
    main(*sys.argv[1:])
