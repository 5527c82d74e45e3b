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
`data.pkl` and one raw storage per tensor.

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
import io
import json
import pickle
import sys
import zipfile
from collections import OrderedDict

import numpy as np
import gguf

from vlacpp_layout import safetensors

ARCH = "vla_adapter"
VB = "vision_backbone."
LM = "language_model.model."
# vla.cpp's constants that hold for the released model and this checkpoint alike
TOWER_HEADS, VIT_LN_EPS = 16, 1e-6
HEAD_HEADS, HEAD_ROPE_BASE, HEAD_LN_EPS = 8, 10000.0, 1e-5
CHUNK, STOP_TOKEN_ID = 8, 2
HEAD_PROJECTIONS = ("q_proj", "k_self", "v_self", "k_adapter", "v_adapter", "k_task", "v_task", "o_proj")

STORAGES = {"FloatStorage": "<f4", "DoubleStorage": "<f8", "HalfStorage": "<f2", "BFloat16Storage": "bf16"}


def _rebuild(storage, offset, shape, stride, *_):
    """`torch._utils._rebuild_tensor_v2` over a storage's values."""
    a = storage[offset:]
    return np.lib.stride_tricks.as_strided(a, shape=shape, strides=[s * a.itemsize for s in stride]).copy()


class _Unpickler(pickle.Unpickler):
    """What `torch.save(state_dict)` pickles: an OrderedDict of `_rebuild_tensor_v2` calls over
    persistent storages (`data/<key>` in the zip); any other global is refused."""

    def __init__(self, z, root):
        super().__init__(io.BytesIO(z.read(f"{root}data.pkl")))
        self.z, self.root = z, root

    def find_class(self, module, name):
        if (module, name) == ("collections", "OrderedDict"):
            return OrderedDict
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return _rebuild
        if module == "torch" and name in STORAGES:
            return STORAGES[name]
        raise pickle.UnpicklingError(f"{module}.{name}: not part of a state dict")

    def persistent_load(self, pid):
        _, dtype, key, _, _ = pid
        raw = self.z.read(f"{self.root}data/{key}")
        if dtype == "bf16":
            return (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
        return np.frombuffer(raw, dtype)


def load_pt(path):
    """A `torch.save`d state dict as float32 arrays, a leading `module.` dropped (vla.cpp's
    `load_pt_module`)."""
    z = zipfile.ZipFile(path)
    pkl = next(n for n in z.namelist() if n.endswith("data.pkl"))
    sd = _Unpickler(z, pkl[: -len("data.pkl")]).load()
    return {(k[7:] if k.startswith("module.") else k): np.asarray(v, np.float32) for k, v in sd.items()}


def bf16(a):
    """float32 -> bf16 bits, rounded to nearest even (torch's `.to(torch.bfloat16)`)."""
    u = np.ascontiguousarray(a, np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def count(sd, prefix, probe):
    n = 0
    while f"{prefix}{n}.{probe}" in sd:
        n += 1
    return n


def main(ckpt, out, *flags):
    as_bf16 = "--bf16" in flags
    sd = safetensors(f"{ckpt}/model.safetensors")
    ah = load_pt(glob.glob(f"{ckpt}/action_head--*checkpoint.pt")[0])
    pp = load_pt(glob.glob(f"{ckpt}/proprio_projector--*checkpoint.pt")[0])
    text = json.load(open(f"{ckpt}/config.json"))["text_config"]
    stats = open(f"{ckpt}/dataset_statistics.json").read()

    pd, ps = f"{VB}featurizer.", f"{VB}fused_featurizer."
    towers = {}
    for tag, p in (("dino", pd), ("sig", ps)):
        conv = sd[f"{p}patch_embed.proj.weight"]
        towers[tag] = dict(hidden=conv.shape[0], layers=count(sd, f"{p}blocks.", "norm1.weight") - 1,
                           heads=TOWER_HEADS, head_dim=conv.shape[0] // TOWER_HEADS,
                           inter=sd[f"{p}blocks.0.mlp.fc1.weight"].shape[0])
    patch = sd[f"{pd}patch_embed.proj.weight"].shape[2]
    n_patches = sd[f"{pd}pos_embed"].shape[1]
    image = int(round(n_patches ** 0.5)) * patch
    hidden, q_heads = text["hidden_size"], text["num_attention_heads"]
    theta = text.get("rope_theta") or text["rope_parameters"]["rope_theta"]
    head_blocks = count(ah, "model.mlp_resnet_blocks.", "q_proj.weight")

    w = gguf.GGUFWriter(out, arch=ARCH)
    kv = lambda k: f"{ARCH}.{k}"
    w.add_string(kv("architecture"), ARCH)
    u32 = lambda items: [w.add_uint32(kv(k), int(v)) for k, v in items]
    f32 = lambda items: [w.add_float32(kv(k), float(v)) for k, v in items]
    # the converter's order: towers, lm, action, tokens, statistics
    for tag, t in towers.items():
        u32((f"vit.{tag}.{k}", t[k]) for k in ("hidden", "layers", "heads", "head_dim", "inter"))
    u32([("vit.image_size", image), ("vit.patch_size", patch), ("vit.n_patches", n_patches)])
    f32([("vit.ln_eps", VIT_LN_EPS)])
    u32([("vit.proj_mid", sd["projector.fc1.weight"].shape[0]),
         ("vit.vdim", towers["dino"]["hidden"] + towers["sig"]["hidden"])])
    u32([("lm.hidden", hidden), ("lm.layers", text["num_hidden_layers"]), ("lm.q_heads", q_heads),
         ("lm.kv_heads", text["num_key_value_heads"]), ("lm.head_dim", hidden // q_heads),
         ("lm.inter", text["intermediate_size"]), ("lm.vocab", sd[f"{LM}embed_tokens.weight"].shape[0])])
    f32([("lm.rope_theta", theta), ("lm.rms_eps", text["rms_norm_eps"])])
    u32([("action.chunk", CHUNK), ("action.action_dim", ah["model.fc2.weight"].shape[0]),
         ("action.proprio_dim", pp["fc1.weight"].shape[1]),
         ("action.num_tokens", sd["action_queries.weight"].shape[0]),
         ("action.head_blocks", head_blocks), ("action.head_heads", HEAD_HEADS),
         ("action.head_dim", hidden // HEAD_HEADS)])
    f32([("action.head_rope_base", HEAD_ROPE_BASE), ("action.ln_eps", HEAD_LN_EPS)])
    u32([("tokens.stop_id", STOP_TOKEN_ID)])
    w.add_string(kv("statistics_json"), stats)

    def add(name, a):
        a = np.ascontiguousarray(a, np.float32)
        if as_bf16:
            w.add_tensor(name, bf16(a), raw_shape=list(a.shape), raw_dtype=gguf.GGMLQuantizationType.BF16)
        else:
            w.add_tensor(name, a)

    # gguf_blocks.write_prismatic_tower
    for tag, p, q in (("dino", pd, "vis.d"), ("sig", ps, "vis.s")):
        add(f"{q}.patch.weight", sd[f"{p}patch_embed.proj.weight"])
        add(f"{q}.patch.bias", sd[f"{p}patch_embed.proj.bias"])
        if tag == "dino":
            add(f"{q}.cls", sd[f"{p}cls_token"])
            add(f"{q}.reg", sd[f"{p}reg_token"])
        add(f"{q}.pos", sd[f"{p}pos_embed"])
        for i in range(towers[tag]["layers"]):
            b, o = f"{p}blocks.{i}.", f"{q}.blk.{i}."
            for src, dst in (("norm1", "ln1"), ("norm2", "ln2")):
                add(o + dst + ".weight", sd[b + src + ".weight"])
                add(o + dst + ".bias", sd[b + src + ".bias"])
            if tag == "dino":
                add(o + "ls1", sd[b + "ls1.scale_factor"])
                add(o + "ls2", sd[b + "ls2.scale_factor"])
            for src, dst in (("attn.qkv", "qkv"), ("attn.proj", "proj"), ("mlp.fc1", "fc1"), ("mlp.fc2", "fc2")):
                add(o + dst + ".weight", sd[b + src + ".weight"])
                add(o + dst + ".bias", sd[b + src + ".bias"])
    for fc in ("fc1", "fc2", "fc3"):
        add(f"vis.proj.{fc}.weight", sd[f"projector.{fc}.weight"])
        add(f"vis.proj.{fc}.bias", sd[f"projector.{fc}.bias"])

    add("token_embd.weight", sd[f"{LM}embed_tokens.weight"])
    add("action_queries.weight", sd["action_queries.weight"])
    # gguf_blocks.write_prismatic_lm(qkv_bias=True)
    for i in range(text["num_hidden_layers"]):
        b, o = f"{LM}layers.{i}.", f"lm.blk.{i}."
        add(o + "attn_norm.weight", sd[b + "input_layernorm.weight"])
        add(o + "ffn_norm.weight", sd[b + "post_attention_layernorm.weight"])
        for x in "qkv":
            add(o + f"attn_{x}.weight", sd[b + f"self_attn.{x}_proj.weight"])
            add(o + f"attn_{x}.bias", sd[b + f"self_attn.{x}_proj.bias"])
        add(o + "attn_o.weight", sd[b + "self_attn.o_proj.weight"])
        for src, dst in (("gate_proj", "ffn_gate"), ("up_proj", "ffn_up"), ("down_proj", "ffn_down")):
            add(o + dst + ".weight", sd[b + f"mlp.{src}.weight"])
    add("lm.output_norm.weight", sd[f"{LM}norm.weight"])

    for src, dst in (("layer_norm1", "ln1"), ("fc1", "fc1"), ("layer_norm2", "ln2"), ("fc2", "fc2")):
        add(f"aex.head.{dst}.weight", ah[f"model.{src}.weight"])
        add(f"aex.head.{dst}.bias", ah[f"model.{src}.bias"])
    for i in range(head_blocks):
        b, o = f"model.mlp_resnet_blocks.{i}.", f"aex.head.blk.{i}."
        for nm in HEAD_PROJECTIONS:
            add(o + nm + ".weight", ah[b + nm + ".weight"])
            add(o + nm + ".bias", ah[b + nm + ".bias"])
        for src, dst in (("ffn.0", "ffn_ln"), ("ffn.1", "ffn_lin")):
            add(o + dst + ".weight", ah[b + src + ".weight"])
            add(o + dst + ".bias", ah[b + src + ".bias"])
        add(o + "gating", ah[b + "gating_factor"])
    for fc in ("fc1", "fc2"):
        add(f"aex.proprio.{fc}.weight", pp[f"{fc}.weight"])
        add(f"aex.proprio.{fc}.bias", pp[f"{fc}.bias"])

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main(*sys.argv[1:])
