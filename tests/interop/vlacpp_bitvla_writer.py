#!/usr/bin/env python3
"""An independent writer of BitVLA GGUFs in vla.cpp's layout (numpy + gguf-py).

  vlacpp_bitvla_writer.py CKPT_DIR OUT.gguf [--f32 | --bf16]

CKPT_DIR is a BitVLA OFT checkpoint folder as the reference's evaluation loads it (config.json
with `model_type` "openvla", model.safetensors[.index.json] in the HF LLaVA layout,
`action_head--*_checkpoint.pt`, `proprio_projector--*_checkpoint.pt`, dataset_statistics.json,
optional processor_config.json / preprocessor_config.json). OUT is what vla.cpp's
`scripts/convert_bitvla_to_gguf.py` (VinRobotics/vla.cpp b18873d) writes for that checkpoint,
from the facts of its layout alone, without vla-rs code and without torch (the safetensors and
the `torch.save`d sidecars are read with numpy, vlacpp_prismatic.py's readers).

vla.cpp's converter takes the released model's sizes as constants (BitSigLIP 1152 x 26 x 16
heads, inter 4304, 224/14; BitNet 2560 x 30, 20 q / 5 kv x 128, inter 6912, vocab 128264; head
chunk 8 x 7, proprio 8). Here the same keys carry the checkpoint's own sizes (its tensors, and
config.json's `vision_config` / `text_config` for the head counts, rope theta and RMS eps), as
the converter would for a checkpoint of those sizes. The constants that hold for both stay
constants: LayerNorm eps 1e-6 (tower) and 1e-5 (head), `lm.max_pos` 4096, chunk 8, the quant
keys, the special token ids (image 128010, proprio 128011, action begin 128012, stop 128001) and
the prompt template.

Layout (facts of vla.cpp: scripts/convert_bitvla_to_gguf.py `_add_kv`, `main`,
`weight_quant_to_ternary`, `pack_ladder_int2`; gguf_common.py `add`, `load_pt_module`;
src/kernels/bitvla/bitnet_kernels.h for the tile addressing):
- keys under `bitvla.`: `architecture`; `vit.{hidden, layers, heads, head_dim, inter,
  image_size, patch_size, n_patches}` u32, `vit.ln_eps` f32; `lm.{hidden, layers, q_heads,
  kv_heads, head_dim, inter}` u32, `lm.{rope_theta, rms_eps}` f32, `lm.{max_pos, vocab_size}`
  u32; `action.{num_actions_chunk, action_dim, proprio_dim}` u32, `action.ln_eps` f32;
  `quant.{vit_weight_bits, vit_act_bits, lm_weight_bits, lm_act_bits}` u32 (1, 8, 1, 8),
  `quant.method` "absmean_ternary+per_token_int8", `quant.applied_at` "convert",
  `quant.int2_packed` u32 1; `tokens.{image_id, proprio_id, action_begin_id, stop_id}` u32;
  strings `statistics_json`, `processor_config_json`, `preprocessor_config_json` (the files'
  text, "{}" when absent) and `prompt_template`. No tokenizer.
- float tensors keep the checkpoint's dtype (F32 stays F32, BF16 stays BF16; the converter
  refuses any other): `vit.patch_embd.weight` (the conv reshaped to [hidden, 3*P*P]),
  `vit.patch_embd.bias`, `vit.pos_embd.weight`, `vit.blk.{i}.{ln1, ln2}.{weight, bias}` and the
  linears' biases, `mm.linear_{1,2}.{weight, bias}`, `aex.proprio.fc{1,2}.*`,
  `token_embd.weight`, `lm.output_norm.weight`, `lm.blk.{i}.{attn_norm, attn_sub_norm,
  ffn_norm, ffn_sub_norm}.weight`, `aex.head.{ln1, fc1, blk.{b}.ln, blk.{b}.fc, ln2, fc2}.*`.
- ternary linears (every q/k/v/o and fc1/fc2 of the tower, every q/k/v/o, gate+up, down of the
  LM): `<base>.weight` I8, 1-D of N*K/4 bytes (Ladder int2 tiles, `pack`), and `<base>.scale`
  F32 of one absmean per source matrix; gate and up fused into `lm.blk.{i}.ffn_gate_up` (gate
  rows first, scales [gate, up]); the tower's fc2 zero-padded along K to a multiple of 128.

`--f32` / `--bf16` force every float tensor to that type (vla.cpp writes the source's).
"""
import glob
import json
import os
import re
import struct
import sys

import numpy as np
import gguf

from vlacpp_prismatic import SAFETENSORS, Writer, bf16, count, load_pt, widen

ARCH = "bitvla"
VIS = "vision_tower.vision_model."
LM = "language_model.model."
MMP = "multi_modal_projector."

# vla.cpp's constants that hold for the released model and a small checkpoint alike
VIT_LN_EPS, HEAD_LN_EPS, LM_MAX_POS, CHUNK = 1e-6, 1e-5, 4096, 8
VIT_HEADS, LM_Q_HEADS, LM_KV_HEADS, ROPE_THETA, RMS_EPS = 16, 20, 5, 500000.0, 1e-5
TOKENS = [("tokens.image_id", 128010), ("tokens.proprio_id", 128011),
          ("tokens.action_begin_id", 128012), ("tokens.stop_id", 128001)]
PROMPT_TEMPLATE = "In: What action should the robot take to {instruction}?\nOut:"
QUANT_BITS = [("quant.vit_weight_bits", 1), ("quant.vit_act_bits", 8),
              ("quant.lm_weight_bits", 1), ("quant.lm_act_bits", 8)]


# ---------------------------------------------------------------- reading, dtype kept

class _Lazy(dict):
    """name -> (float32 array, source dtype), each tensor widened from its file only when
    asked for (the released checkpoint is ~6 GB of bf16)."""

    def __getitem__(self, k):
        path, start, end, dtype, shape = dict.__getitem__(self, k)
        raw = np.memmap(path, np.uint8, "r", start, (end - start,))
        return widen(raw.tobytes(), SAFETENSORS[dtype]).reshape(shape), dtype


def read_safetensors(ckpt):
    """name -> (float32 array, "F32" | "BF16" | ...) over model.safetensors or its shards."""
    idx = os.path.join(ckpt, "model.safetensors.index.json")
    if os.path.exists(idx):
        files = sorted(set(json.load(open(idx))["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    out = _Lazy()
    for fn in files:
        path = os.path.join(ckpt, fn)
        with open(path, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            head = json.loads(f.read(n))
        for k, v in head.items():
            if k == "__metadata__":
                continue
            a, b = v["data_offsets"]
            dict.__setitem__(out, k, (path, 8 + n + a, 8 + n + b, v["dtype"], v["shape"]))
    return out


def sidecar(ckpt, stem):
    """vla.cpp's `_find_sidecar`: `{stem}--*_checkpoint.pt`, the highest step number."""
    def step(p):
        m = re.search(r"--(\d+)_checkpoint\.pt$", os.path.basename(p))
        return int(m.group(1)) if m else -1
    c = sorted(glob.glob(os.path.join(ckpt, f"{stem}--*_checkpoint.pt")), key=step)
    if not c:
        sys.exit(f"missing {stem} sidecar in {ckpt}")
    return c[-1]


def text_or(path, default="{}"):
    return open(path).read() if os.path.exists(path) else default


# ---------------------------------------------------------------- ternary + Ladder int2

def ternary(w):
    """Per-tensor absmean ternary: step = mean|W| (accumulated in f64, then f32, at least
    1e-5); codes = round_half_even(W * f32(1/step)) clamped to [-1, 1]. Returns (codes int8
    [N, K], step f32)."""
    w = np.asarray(w, np.float32)
    step = np.float32(max(np.abs(w).astype(np.float64).mean(), 1e-5))
    inv = np.float32(1.0) / step
    q = np.clip(np.rint(w * inv), -1, 1).astype(np.int8)
    return q, step


def pack(codes):
    """Ladder int2 tiles of a ternary [N, K] matrix (N % 16 == 0, K % 128 == 0): code c stored
    as c + 2 (1, 2, 3) in 2 bits; (n, k) lives in byte
        (n//16)*4K + (k//128)*512 + (k%128//32)*128 + (n%16//8)*64 + (k%32//16)*32
        + (n%8)*4 + k%4
    at bit 2*(k%16//4)."""
    n_rows, k_cols = codes.shape
    if n_rows % 16 or k_cols % 128:
        sys.exit(f"ternary matrix {n_rows}x{k_cols}: N must be a multiple of 16 and K of 128")
    n = np.arange(n_rows, dtype=np.int64)[:, None]
    out = np.zeros(n_rows * k_cols // 4, np.uint8)
    for j in range(4):  # the columns whose field sits at bit 2j: each byte exactly once
        k = np.arange(k_cols, dtype=np.int64).reshape(-1, 16)[:, 4 * j:4 * j + 4].reshape(1, -1)
        byte = ((n // 16) * 4 * k_cols + (k // 128) * 512 + (k % 128 // 32) * 128 + (n % 16 // 8) * 64
                + (k % 32 // 16) * 32 + (n % 8) * 4 + k % 4)
        out[byte.ravel()] |= ((codes[:, k[0]].astype(np.uint8) + 2) << (2 * j)).ravel()
    return out


# ---------------------------------------------------------------- the writer

class BitvlaWriter(Writer):
    def __init__(self, out, force):
        super().__init__(out, ARCH, False)
        self.force = force

    def add(self, name, t):
        a, dt = t
        a = np.ascontiguousarray(a, np.float32)
        kind = self.force or dt
        if kind == "BF16":
            self.w.add_tensor(name, bf16(a), raw_shape=list(a.shape),
                              raw_dtype=gguf.GGMLQuantizationType.BF16)
        elif kind == "F32":
            self.w.add_tensor(name, a, raw_dtype=gguf.GGMLQuantizationType.F32)
        else:
            sys.exit(f"unsupported dtype {dt} for {name}")

    def pair(self, dst, src, sd):
        self.add(f"{dst}.weight", sd[f"{src}.weight"])
        self.add(f"{dst}.bias", sd[f"{src}.bias"])

    def packed(self, base, codes, steps):
        b = pack(codes)
        self.w.add_tensor(base + ".weight", b, raw_shape=[b.size], raw_dtype=gguf.GGMLQuantizationType.I8)
        s = np.asarray(steps, np.float32)
        self.w.add_tensor(base + ".scale", s, raw_shape=[s.size], raw_dtype=gguf.GGMLQuantizationType.F32)

    def bit(self, base, t, k_pad=None):
        q, step = ternary(t[0])
        if k_pad is not None and q.shape[1] < k_pad:
            q = np.pad(q, ((0, 0), (0, k_pad - q.shape[1])))
        self.packed(base, q, [step])

    def bit_fused(self, base, ts):
        qs = [ternary(t[0]) for t in ts]
        self.packed(base, np.concatenate([q for q, _ in qs], axis=0), [s for _, s in qs])


def main(ckpt, out, *flags):
    force = "F32" if "--f32" in flags else "BF16" if "--bf16" in flags else None
    cfg = json.load(open(os.path.join(ckpt, "config.json")))
    if str(cfg.get("model_type", "")) != "openvla":
        sys.exit(f"config.json model_type is {cfg.get('model_type')!r}, expected 'openvla'")
    vcfg, tcfg = cfg.get("vision_config") or {}, cfg.get("text_config") or {}
    sd = read_safetensors(ckpt)
    ah = load_pt(sidecar(ckpt, "action_head"), keep_dtype=True)
    pp = load_pt(sidecar(ckpt, "proprio_projector"), keep_dtype=True)
    stats_path = os.path.join(ckpt, "dataset_statistics.json")
    if not os.path.exists(stats_path):
        sys.exit(f"missing {stats_path}")
    stats = open(stats_path).read()

    conv = sd[f"{VIS}embeddings.patch_embedding.weight"][0]
    vit_hidden, patch = conv.shape[0], conv.shape[2]
    n_patches = sd[f"{VIS}embeddings.position_embedding.weight"][0].shape[0]
    side = int(round(n_patches ** 0.5))
    assert side * side == n_patches, n_patches
    vit_layers = count(sd, f"{VIS}encoder.layers.", "self_attn.q_proj.weight")
    vit_heads = int(vcfg.get("num_attention_heads", VIT_HEADS))
    vit_inter = sd[f"{VIS}encoder.layers.0.mlp.fc1.weight"][0].shape[0]
    fc2_k = (vit_inter + 127) // 128 * 128

    vocab, hidden = sd[f"{LM}embed_tokens.weight"][0].shape
    lm_layers = count(sd, f"{LM}layers.", "self_attn.q_proj.weight")
    q_heads = int(tcfg.get("num_attention_heads", LM_Q_HEADS))
    kv_heads = int(tcfg.get("num_key_value_heads", LM_KV_HEADS))
    head_dim = hidden // q_heads
    assert sd[f"{LM}layers.0.self_attn.k_proj.weight"][0].shape[0] == kv_heads * head_dim
    lm_inter = sd[f"{LM}layers.0.mlp.gate_proj.weight"][0].shape[0]
    head_blocks = count(ah, "model.mlp_resnet_blocks.", "ffn.1.weight")

    w = BitvlaWriter(out, force)
    # the converter's _add_kv, in its order
    w.u32([("vit.hidden", vit_hidden), ("vit.layers", vit_layers), ("vit.heads", vit_heads),
           ("vit.head_dim", vit_hidden // vit_heads), ("vit.inter", vit_inter),
           ("vit.image_size", side * patch), ("vit.patch_size", patch), ("vit.n_patches", n_patches)])
    w.f32([("vit.ln_eps", VIT_LN_EPS)])
    w.u32([("lm.hidden", hidden), ("lm.layers", lm_layers), ("lm.q_heads", q_heads),
           ("lm.kv_heads", kv_heads), ("lm.head_dim", head_dim), ("lm.inter", lm_inter)])
    w.f32([("lm.rope_theta", tcfg.get("rope_theta", ROPE_THETA)),
           ("lm.rms_eps", tcfg.get("rms_norm_eps", RMS_EPS))])
    w.u32([("lm.max_pos", LM_MAX_POS), ("lm.vocab_size", vocab)])
    w.u32([("action.num_actions_chunk", CHUNK), ("action.action_dim", ah["model.fc2.weight"][0].shape[0]),
           ("action.proprio_dim", pp["fc1.weight"][0].shape[1])])
    w.f32([("action.ln_eps", HEAD_LN_EPS)])
    w.u32(QUANT_BITS)
    w.string("quant.method", "absmean_ternary+per_token_int8")
    w.string("quant.applied_at", "convert")
    w.u32([("quant.int2_packed", 1)])
    w.u32(TOKENS)
    w.string("statistics_json", stats)
    w.string("processor_config_json", text_or(os.path.join(ckpt, "processor_config.json")))
    w.string("preprocessor_config_json", text_or(os.path.join(ckpt, "preprocessor_config.json")))
    w.string("prompt_template", PROMPT_TEMPLATE)

    # vision tower: float embeddings, float norms and biases, ternary linears
    a, dt = sd[f"{VIS}embeddings.patch_embedding.weight"]
    w.add("vit.patch_embd.weight", (a.reshape(vit_hidden, -1), dt))
    w.add("vit.patch_embd.bias", sd[f"{VIS}embeddings.patch_embedding.bias"])
    w.add("vit.pos_embd.weight", sd[f"{VIS}embeddings.position_embedding.weight"])
    for i in range(vit_layers):
        p, o = f"{VIS}encoder.layers.{i}.", f"vit.blk.{i}."
        w.pair(o + "ln1", p + "layer_norm1", sd)
        w.pair(o + "ln2", p + "layer_norm2", sd)
        for src, dst in (("q_proj", "attn_q"), ("k_proj", "attn_k"), ("v_proj", "attn_v"),
                         ("out_proj", "attn_o")):
            w.bit(o + dst, sd[f"{p}self_attn.{src}.weight"])
            w.add(o + dst + ".bias", sd[f"{p}self_attn.{src}.bias"])
        w.bit(o + "fc1", sd[p + "mlp.fc1.weight"])
        w.add(o + "fc1.bias", sd[p + "mlp.fc1.bias"])
        w.bit(o + "fc2", sd[p + "mlp.fc2.weight"], k_pad=fc2_k)
        w.add(o + "fc2.bias", sd[p + "mlp.fc2.bias"])

    for x in ("linear_1", "linear_2"):
        w.pair(f"mm.{x}", MMP + x, sd)
    for fc in ("fc1", "fc2"):
        w.pair(f"aex.proprio.{fc}", fc, pp)

    w.add("token_embd.weight", sd[f"{LM}embed_tokens.weight"])
    w.add("lm.output_norm.weight", sd[f"{LM}norm.weight"])
    for i in range(lm_layers):
        p, o = f"{LM}layers.{i}.", f"lm.blk.{i}."
        w.add(o + "attn_norm.weight", sd[p + "input_layernorm.weight"])
        for x in "qkv":
            w.bit(o + f"attn_{x}", sd[f"{p}self_attn.{x}_proj.weight"])
        w.add(o + "attn_sub_norm.weight", sd[p + "self_attn.attn_sub_norm.weight"])
        w.bit(o + "attn_o", sd[p + "self_attn.o_proj.weight"])
        w.add(o + "ffn_norm.weight", sd[p + "post_attention_layernorm.weight"])
        w.bit_fused(o + "ffn_gate_up", [sd[p + "mlp.gate_proj.weight"], sd[p + "mlp.up_proj.weight"]])
        w.add(o + "ffn_sub_norm.weight", sd[p + "mlp.ffn_sub_norm.weight"])
        w.bit(o + "ffn_down", sd[p + "mlp.down_proj.weight"])

    w.pair("aex.head.ln1", "model.layer_norm1", ah)
    w.pair("aex.head.fc1", "model.fc1", ah)
    for b in range(head_blocks):
        w.pair(f"aex.head.blk.{b}.ln", f"model.mlp_resnet_blocks.{b}.ffn.0", ah)
        w.pair(f"aex.head.blk.{b}.fc", f"model.mlp_resnet_blocks.{b}.ffn.1", ah)
    w.pair("aex.head.ln2", "model.layer_norm2", ah)
    w.pair("aex.head.fc2", "model.fc2", ah)
    w.finish()


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(*sys.argv[1:])
