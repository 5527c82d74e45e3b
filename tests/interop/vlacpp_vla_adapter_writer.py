#!/usr/bin/env python3
"""An independent writer of VLA-Adapter GGUFs in vla.cpp's layout (numpy + gguf-py), for
tests/vla_adapter_golden.rs.

  vlacpp_vla_adapter_writer.py CKPT_DIR OUT.gguf [--bf16]

CKPT_DIR is a VLA-Adapter checkpoint folder as the reference's evaluation loads it (config.json,
model.safetensors, `action_head--*checkpoint.pt`, `proprio_projector--*checkpoint.pt`,
dataset_statistics.json). OUT is what vla.cpp's `scripts/convert_vla_adapter_to_gguf.py`
(+ `gguf_blocks.write_prismatic_tower` / `write_prismatic_lm`; VinRobotics/vla.cpp b18873d)
writes for that checkpoint, from the facts of its layout alone, without vla-rs code. The
`.pt` files are read with a restricted unpickler (no torch here): `torch.save`'s zip of
`data.pkl` and one raw storage per tensor (vlacpp_prismatic.py, shared with
vlacpp_openvla_oft_writer.py, as the towers and the language model).

vla.cpp's converter takes the released model's sizes as constants (DINOv2 1024 x 23 kept
blocks, SigLIP 1152 x 26, Qwen2.5-0.5B, chunk 8, action 7, proprio 8, 64 queries, 24 head
blocks); for this small checkpoint the same keys carry its own sizes (the tensors and
config.json's `text_config`), as the converter would for a checkpoint of those sizes. The
constants that hold for both stay constants: 16 heads per tower, the towers' LayerNorm 1e-6,
8 head heads, the head's rotary base 1e4 and LayerNorm 1e-5, stop token 2.

- keys under `vla_adapter.`: `architecture` (string), `vit.{dino,sig}.{hidden, layers (the
  blocks kept: all but the last), heads, head_dim, inter}`, `vit.{image_size, patch_size,
  n_patches, proj_mid, vdim}` u32, `vit.ln_eps` f32; `lm.{hidden, layers, q_heads, kv_heads,
  head_dim, inter, vocab}` u32, `lm.{rope_theta, rms_eps}` f32; `action.{chunk, action_dim,
  proprio_dim, num_tokens, head_blocks, head_heads, head_dim}` u32, `action.{head_rope_base,
  ln_eps}` f32; `tokens.stop_id` u32; `statistics_json` (dataset_statistics.json's text as
  it is). No tokenizer, no `vit.num_images`, no register count.
- tensors: `vis.d.{patch.weight, patch.bias, cls, reg, pos}` (the tables with their leading
  1), `vis.d.blk.{i}.{ln1, ln2, qkv, proj, fc1, fc2}.{weight,bias}` and `ls1`, `ls2`;
  `vis.s.{patch.weight, patch.bias, pos}`, `vis.s.blk.{i}.*` (no ls); `vis.proj.fc{1,2,3}.*`;
  `token_embd.weight`, `action_queries.weight`, `lm.blk.{i}.{attn_norm, ffn_norm,
  attn_{q,k,v} (+ .bias), attn_o, ffn_gate, ffn_up, ffn_down}.weight`,
  `lm.output_norm.weight`; `aex.head.{ln1, fc1, ln2, fc2}.*`, `aex.head.blk.{i}.{q_proj,
  k_self, v_self, k_adapter, v_adapter, k_task, v_task, o_proj, ffn_ln, ffn_lin}.*` and
  `.gating`; `aex.proprio.fc{1,2}.*`. vla.cpp writes every tensor as bf16; this writer writes
  f32 (the golden chunk's precision) unless `--bf16`.
"""
import glob
import json
import sys

from vlacpp_prismatic import LM, Writer, add_lm_keys, add_vit_keys, count, load_pt, safetensors, \
    write_prismatic_lm, write_prismatic_tower

ARCH = "vla_adapter"
# vla.cpp's constants that hold for the released model and this checkpoint alike
HEAD_HEADS, HEAD_ROPE_BASE, HEAD_LN_EPS = 8, 10000.0, 1e-5
CHUNK, STOP_TOKEN_ID = 8, 2
HEAD_PROJECTIONS = ("q_proj", "k_self", "v_self", "k_adapter", "v_adapter", "k_task", "v_task", "o_proj")


def main(ckpt, out, *flags):
    sd = safetensors(f"{ckpt}/model.safetensors")
    ah = load_pt(glob.glob(f"{ckpt}/action_head--*checkpoint.pt")[0])
    pp = load_pt(glob.glob(f"{ckpt}/proprio_projector--*checkpoint.pt")[0])
    text = json.load(open(f"{ckpt}/config.json"))["text_config"]
    stats = open(f"{ckpt}/dataset_statistics.json").read()
    hidden = text["hidden_size"]
    head_blocks = count(ah, "model.mlp_resnet_blocks.", "q_proj.weight")

    w = Writer(out, ARCH, "--bf16" in flags)
    # the converter's order: towers, lm, action, tokens, statistics
    add_vit_keys(w, sd)
    add_lm_keys(w, sd, text)
    w.u32([("action.chunk", CHUNK), ("action.action_dim", ah["model.fc2.weight"].shape[0]),
           ("action.proprio_dim", pp["fc1.weight"].shape[1]),
           ("action.num_tokens", sd["action_queries.weight"].shape[0]),
           ("action.head_blocks", head_blocks), ("action.head_heads", HEAD_HEADS),
           ("action.head_dim", hidden // HEAD_HEADS)])
    w.f32([("action.head_rope_base", HEAD_ROPE_BASE), ("action.ln_eps", HEAD_LN_EPS)])
    w.u32([("tokens.stop_id", STOP_TOKEN_ID)])
    w.string("statistics_json", stats)

    write_prismatic_tower(w, sd)
    w.add("token_embd.weight", sd[f"{LM}embed_tokens.weight"])
    w.add("action_queries.weight", sd["action_queries.weight"])
    write_prismatic_lm(w, sd, text["num_hidden_layers"], qkv_bias=True)

    for src, dst in (("layer_norm1", "ln1"), ("fc1", "fc1"), ("layer_norm2", "ln2"), ("fc2", "fc2")):
        w.pair(f"aex.head.{dst}", f"model.{src}", ah)
    for i in range(head_blocks):
        b, o = f"model.mlp_resnet_blocks.{i}.", f"aex.head.blk.{i}."
        for nm in HEAD_PROJECTIONS:
            w.pair(o + nm, b + nm, ah)
        w.pair(o + "ffn_ln", b + "ffn.0", ah)
        w.pair(o + "ffn_lin", b + "ffn.1", ah)
        w.add(o + "gating", ah[b + "gating_factor"])
    for fc in ("fc1", "fc2"):
        w.pair(f"aex.proprio.{fc}", fc, pp)
    w.finish()


if __name__ == "__main__":
    main(*sys.argv[1:])
