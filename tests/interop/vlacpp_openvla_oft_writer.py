#!/usr/bin/env python3
"""An independent writer of OpenVLA-OFT GGUFs in vla.cpp's layout (numpy + gguf-py), for
tests/openvla_oft_golden.rs.

  vlacpp_openvla_oft_writer.py CKPT_DIR OUT.gguf [--bf16]

CKPT_DIR is an OpenVLA-OFT checkpoint folder as the reference's evaluation loads it
(config.json, model.safetensors, `action_head--*checkpoint.pt`,
`proprio_projector--*checkpoint.pt`, dataset_statistics.json). OUT is what vla.cpp's
`scripts/convert_openvla_oft_to_gguf.py` (+ `gguf_blocks.write_prismatic_tower` /
`write_prismatic_lm`; VinRobotics/vla.cpp b18873d) writes for that checkpoint, from the facts
of its layout alone, without vla-rs code; the checkpoint's safetensors (bf16 here) and `.pt`
files are read without torch (vlacpp_prismatic.py, shared with vlacpp_vla_adapter_writer.py,
as the towers and the language model).

vla.cpp's converter takes the released model's sizes as constants (DINOv2 1024 x 23 kept
blocks, SigLIP 1152 x 26, Llama-2-7B, head 4096 x 2 blocks); for this small checkpoint the
same keys carry its own sizes (the tensors and config.json's `text_config`), as the converter
would for a checkpoint of those sizes. The constants that hold for both stay constants: 16
heads per tower, the towers' LayerNorm 1e-6, 2 cameras, chunk 8, the head's LayerNorm 1e-5,
stop token 2, empty token 29871.

- keys under `openvla_oft.`: the towers' (vlacpp_prismatic.add_vit_keys, with
  `vit.num_images`), the language model's (`add_lm_keys`); `action.{chunk, action_dim,
  proprio_dim, head_hidden, head_blocks}` u32, `action.head_ln_eps` f32; `tokens.{stop_id,
  empty_id}` u32; `statistics_json` (dataset_statistics.json's text as it is). No tokenizer,
  no register count.
- tensors: the towers and projector (`write_prismatic_tower`), `token_embd.weight`, the
  language model without q/k/v biases (`write_prismatic_lm`), `aex.proprio.fc{1,2}.*`,
  `aex.head.{ln1, fc1}.*`, `aex.head.blk.{i}.{ln, lin}.*`, `aex.head.{ln2, fc2}.*`. vla.cpp
  writes every tensor as bf16; this writer writes f32 unless `--bf16` (the fixture's weights
  are bf16 values, so both hold the same numbers).
"""
import glob
import json
import sys

from vlacpp_prismatic import LM, Writer, add_lm_keys, add_vit_keys, count, load_pt, safetensors, \
    write_prismatic_lm, write_prismatic_tower

ARCH = "openvla_oft"
# vla.cpp's constants that hold for the released model and this checkpoint alike
NUM_IMAGES, CHUNK, HEAD_LN_EPS = 2, 8, 1e-5
STOP_TOKEN_ID, EMPTY_TOKEN_ID = 2, 29871


def main(ckpt, out, *flags):
    sd = safetensors(f"{ckpt}/model.safetensors")
    ah = load_pt(glob.glob(f"{ckpt}/action_head--*checkpoint.pt")[0])
    pp = load_pt(glob.glob(f"{ckpt}/proprio_projector--*checkpoint.pt")[0])
    text = json.load(open(f"{ckpt}/config.json"))["text_config"]
    stats = open(f"{ckpt}/dataset_statistics.json").read()
    head_blocks = count(ah, "model.mlp_resnet_blocks.", "ffn.1.weight")

    w = Writer(out, ARCH, "--bf16" in flags)
    # the converter's _add_kv: towers, lm, action, tokens, statistics
    add_vit_keys(w, sd, num_images=NUM_IMAGES)
    add_lm_keys(w, sd, text)
    w.u32([("action.chunk", CHUNK), ("action.action_dim", ah["model.fc2.weight"].shape[0]),
           ("action.proprio_dim", pp["fc1.weight"].shape[1]),
           ("action.head_hidden", ah["model.fc1.weight"].shape[0]), ("action.head_blocks", head_blocks)])
    w.f32([("action.head_ln_eps", HEAD_LN_EPS)])
    w.u32([("tokens.stop_id", STOP_TOKEN_ID), ("tokens.empty_id", EMPTY_TOKEN_ID)])
    w.string("statistics_json", stats)

    write_prismatic_tower(w, sd)
    w.add("token_embd.weight", sd[f"{LM}embed_tokens.weight"])
    write_prismatic_lm(w, sd, text["num_hidden_layers"])
    for fc in ("fc1", "fc2"):
        w.pair(f"aex.proprio.{fc}", fc, pp)
    w.pair("aex.head.ln1", "model.layer_norm1", ah)
    w.pair("aex.head.fc1", "model.fc1", ah)
    for i in range(head_blocks):
        b, o = f"model.mlp_resnet_blocks.{i}.", f"aex.head.blk.{i}."
        w.pair(o + "ln", b + "ffn.0", ah)
        w.pair(o + "lin", b + "ffn.1", ah)
    w.pair("aex.head.ln2", "model.layer_norm2", ah)
    w.pair("aex.head.fc2", "model.fc2", ah)
    w.finish()


if __name__ == "__main__":
    main(*sys.argv[1:])
