#!/usr/bin/env python3
"""An independent writer of Octo GGUFs in vla.cpp's layout (numpy + msgpack + gguf-py).

  vlacpp_octo_writer.py CKPT_DIR OUT.gguf [--tokenizer DIR] [--dataset NAME] [--step N]
                        [--window-size N] [--allow-unmapped]

CKPT_DIR is an Octo (JAX) checkpoint folder as `OctoModel.save_pretrained` leaves it:
config.json, dataset_statistics.json, optional finetune_config.json, and `<step>/default/checkpoint`,
the orbax aggregate file: the params pytree in flax's msgpack encoding (nested maps; arrays as
ExtType 1 holding msgpack (shape, dtype name, C-order bytes); arrays over 1 GiB as maps with
`__msgpack_chunked_array__`). OUT is what vla.cpp's `scripts/convert_octo_to_gguf.py`
(VinRobotics/vla.cpp 61298f1) writes for those weights, from the facts of its layout alone
(the converter goes through octo-pytorch's `load_pretrained_from_jax` and writes the PyTorch
state dict; here the same transforms are applied to the Flax params directly), without vla-rs
code, torch, jax or flax. --tokenizer names a folder holding the T5 `spiece.model` (or the file).

Keys (`general.architecture` "octo", then in this order, all under `octo.`): `architecture`
"octo-small-1.5"; u32 `embedding_length, block_count, attention.head_count, feed_forward_length`;
f32 `attention.layer_norm_eps` (1e-6); u32 `readout.count, tokens.{primary, wrist, language},
image.{primary_size, wrist_size}, diffusion.steps`; string `diffusion.beta_schedule` "cosine";
f32 `diffusion.{s, max_action}`; u32 `diffusion.{time_dim, hidden, num_blocks}, window_size`;
string `action.head_type` ("diffusion" | "l1"); u32 `action.{horizon, dim}`; string
`dataset_statistics` (json.dumps(..., sort_keys=True) of dataset_statistics.json, every leaf as
numpy / torch round-trips it); `tokenizer.spm_model` the raw spiece.model bytes as a UINT8 array,
u32 `tokenizer.eos_id` 1 and `tokenizer.pad_id` 0 (the three only with --tokenizer). vla.cpp's
converter writes octo-small-1.5 constants for the sizes; here they are the checkpoint's own
(equal for octo-small-1.5), with vla.cpp's constant where the checkpoint has no such part.

Tensors, all F32, sorted by name, numpy shapes as the PyTorch state dict has them (gguf-py
stores ne reversed). Flax Dense kernels [in, out] are transposed to [out, in]; convolutions
[kh, kw, cin, cout] become [cout, cin, kh, kw] (StdConv kernels RAW: vla.cpp standardizes them at
load); position embeddings drop the leading batch axis of 1 (timestep tables keep all max_horizon
rows); attention q/k/v kernels [D, H, hd] become one [3D, D] `attn_qkv` (rows q, k, v; row
h*hd + d), biases [H, hd] one [3D]; out kernels [H, hd, D] become [D, H*hd].
- octo.obs.{primary,wrist}.stem.{0..3}.conv.{weight,bias}, .stem.{i}.gn.{weight,bias},
  .patch_embd.{weight,bias}, .proj.{weight,bias}, .pos_embd [max_horizon, n_tok, D]
- octo.obs.proprio.{proj.{weight,bias}, pos_embd, bin_thresholds [n_bins + 1]} (the thresholds
  are the BinTokenizer's, computed from the config, not stored by Octo)
- octo.task.language.{proj.{weight,bias}, pos_embd [16, D]}, octo.readout.action.pos_embd
- octo.blk.{i}.{attn_norm, attn_qkv, attn_o, ffn_norm, ffn_up, ffn_down}.{weight,bias},
  octo.output_norm.{weight,bias}
- diffusion head: octo.head.diffusion.{time_fourier.weight [16, 1], cond.{0,1}, reverse.in,
  reverse.blk.{i}.{ln, fc1, fc2}, reverse.out}.{weight,bias}
- L1 head: octo.head.l1.map.{probe [1, 1, D], attn_qkv, attn_o, norm, ffn_up, ffn_down},
  octo.head.l1.mean_proj
- T5 encoder (HF names): octo.t5.tok_embd.weight [vocab, d], octo.t5.blk.{i}.{attn_norm, attn_q,
  attn_k, attn_v, attn_o, ffn_norm, ffn_up, ffn_down}.weight, octo.t5.blk.0.attn_rel_b.weight
  [32, heads], octo.t5.output_norm.weight
Any other parameter stops the writer (vla.cpp's converter refuses unmapped keys) unless
--allow-unmapped.

Departures, each a choice of this writer: vla.cpp's converter takes the T5 weights from the hub's
google-t5/t5-base (octo-pytorch skips the checkpoint's `hf_model`), this writer from the
checkpoint (the same values: Octo freezes `*hf_model*`); a diffusion head with `use_map` gets
its MAP weights from the checkpoint under octo.head.l1.map.* (vla.cpp writes octo-pytorch's
unloaded random init there); a checkpoint without a wrist view is written without its tensors
(vla.cpp's converter wants --allow-unmapped for that); --dataset NAME keeps only that dataset's
statistics block (vla.cpp writes them all and picks one at run time).
"""
import argparse
import json
import os
import sys
from statistics import NormalDist

import msgpack
import numpy as np
import gguf

from vlacpp_layout import finish

ARCH = "octo"

# What vla.cpp's converter writes whatever the checkpoint (OCTO_META), and its runtime requires.
VLACPP = {"embedding_length": 384, "block_count": 12, "attention.head_count": 6,
          "feed_forward_length": 1536, "readout.count": 1, "tokens.primary": 256,
          "tokens.wrist": 64, "tokens.language": 16, "image.primary_size": 256,
          "image.wrist_size": 128, "diffusion.steps": 20, "diffusion.time_dim": 32,
          "diffusion.hidden": 256, "diffusion.num_blocks": 3}
HEAD_TYPE = {"L1ActionHead": "l1", "MSEActionHead": "mse", "DiffusionActionHead": "diffusion",
             "UNetDDPMActionHead": "diffusion"}
BIN_EPS = 1e-6  # octo.model.components.tokenizers.EPS


# ---------------------------------------------------------------- the orbax / flax msgpack file

def _array(data):
    shape, dtype, buf = msgpack.unpackb(data, raw=True)
    dtype = dtype.decode() if isinstance(dtype, bytes) else dtype
    if dtype == "bfloat16":
        a = (np.frombuffer(buf, dtype="<u2").astype("<u4") << 16).view("<f4")
    else:
        a = np.frombuffer(buf, dtype=np.dtype(dtype))
    return a.reshape(shape)


def _ext_hook(code, data):
    if code == 1:                      # ndarray
        return _array(data)
    if code == 3:                      # numpy scalar, packed as a 0-d array
        return _array(data)[()]
    if code == 2:                      # complex
        re_, im = msgpack.unpackb(data)
        return complex(re_, im)
    if code == 4:                      # tuple (orbax)
        return tuple(msgpack.unpackb(data, raw=False, ext_hook=_ext_hook, strict_map_key=False))
    raise ValueError(f"unknown msgpack ExtType {code}")


def _unchunk(tree):
    if isinstance(tree, dict):
        if "__msgpack_chunked_array__" in tree:
            shape = tuple(tree["shape"][str(i)] for i in range(len(tree["shape"])))
            chunks = [tree["chunks"][str(i)] for i in range(len(tree["chunks"]))]
            return np.concatenate([np.asarray(c).reshape(-1) for c in chunks]).reshape(shape)
        return {k: _unchunk(v) for k, v in tree.items()}
    return tree


def read_msgpack_tree(path):
    """The pytree of a flax / orbax msgpack file, arrays as numpy."""
    with open(path, "rb") as f:
        raw = f.read()
    tree = msgpack.unpackb(raw, ext_hook=_ext_hook, raw=False, strict_map_key=False,
                           max_bin_len=len(raw), max_ext_len=len(raw))
    return _unchunk(tree)


def checkpoint_file(ckpt, step):
    if os.path.isfile(ckpt):
        return ckpt
    steps = sorted(int(d) for d in os.listdir(ckpt) if d.isdigit() and os.path.isdir(os.path.join(ckpt, d)))
    if not steps:
        sys.exit(f"{ckpt}: no <step> folder")
    step = steps[-1] if step is None else step
    for sub in ("default/checkpoint", "checkpoint"):
        p = os.path.join(ckpt, str(step), sub)
        if os.path.isfile(p):
            return p
    sys.exit(f"{ckpt}/{step}: no default/checkpoint (an orbax aggregate msgpack file)")


def flatten(tree, prefix=""):
    out = {}
    for k, v in tree.items():
        p = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, p + "/"))
        elif isinstance(v, str):
            sys.exit(f"{p}: {v!r} is not an array (a non-aggregated orbax leaf? not supported)")
        else:
            out[p] = np.asarray(v)
    return out


# ---------------------------------------------------------------- config facts

def window_size(ckpt, cfg, override):
    """vla.cpp's `_resolve_window_size`: --window-size, finetune_config.json, then config.json's
    finetune_metadata.effective_window_size, then its window_size."""
    if override is not None:
        return override
    ft = os.path.join(ckpt, "finetune_config.json") if os.path.isdir(ckpt) else None
    if ft and os.path.isfile(ft):
        f = json.load(open(ft))
        ws = f.get("window_size", f.get("dataset_kwargs", {}).get("traj_transform_kwargs", {}).get("window_size"))
        if ws is not None:
            return int(ws)
    ews = (cfg.get("finetune_metadata") or {}).get("effective_window_size")
    if ews is not None:
        return int(ews)
    if "window_size" in cfg:
        return int(cfg["window_size"])
    sys.exit("cannot determine window_size from finetune_config.json or config.json: pass --window-size")


def bin_thresholds(kw):
    """BinTokenizer thresholds as octo-pytorch's buffer holds them (float32)."""
    n, kind = int(kw.get("n_bins", 256)), kw.get("bin_type", "uniform")
    low, high = float(kw.get("low", 0.0)), float(kw.get("high", 1.0))
    if kind == "uniform":
        # torch.linspace(low, high, n + 1) in float32 as its CPU kernel computes it (checked
        # bit-exact against torch 2.10): step = (high - low) / n in float32, then
        # low + step*i below index (n + 1) // 2 and high - step*(n - i) from there, each
        # rounded once (a fused multiply-add)
        f = np.float32
        lo, hi = f(low), f(high)
        step = np.float64(f((hi - lo) / f(n)))
        i = np.arange(n + 1, dtype=np.float64)
        first = np.float64(lo) + step * i
        second = np.float64(hi) - step * (n - i)
        return np.where(i < (n + 1) // 2, first, second).astype(np.float32)
    if kind == "normal":
        p = np.linspace(BIN_EPS, 1 - BIN_EPS, n + 1)
        nd = NormalDist()
        return np.array([nd.inv_cdf(float(x)) for x in p], dtype=np.float64).astype(np.float32)
    sys.exit(f"bin_type {kind!r} not supported by BinTokenizer")


def stats_json(path, dataset):
    """dataset_statistics.json as the converter re-serializes it: each leaf through
    np.array -> torch.tensor -> tolist, dumped with sort_keys."""
    def conv(x):
        if isinstance(x, dict):
            return {k: conv(v) for k, v in x.items()}
        return np.asarray(x).tolist()
    stats = json.load(open(path))
    if dataset is not None:
        if dataset not in stats:
            sys.exit(f"dataset_statistics.json has no {dataset!r} (has {sorted(stats)[:8]}...)")
        stats = {dataset: stats[dataset]}
    return json.dumps(conv(stats), sort_keys=True)


# ---------------------------------------------------------------- the tensors

class Params:
    """The flat params, consumed as they are mapped."""

    def __init__(self, flat):
        self.flat = flat
        self.used = set()

    def has(self, k):
        return k in self.flat

    def __call__(self, k):
        if k not in self.flat:
            sys.exit(f"missing parameter {k}")
        self.used.add(k)
        return self.flat[k].astype(np.float32)

    def unused(self):
        return sorted(set(self.flat) - self.used)


def conv_oihw(k):
    return np.transpose(k, (3, 2, 0, 1))


def put_dense(add, P, dst, src):
    add(f"{dst}.weight", P(f"{src}/kernel").T)
    add(f"{dst}.bias", P(f"{src}/bias"))


def put_norm(add, P, dst, src):
    add(f"{dst}.weight", P(f"{src}/scale"))
    add(f"{dst}.bias", P(f"{src}/bias"))


def put_mha(add, P, dst, src):
    """nn.MultiHeadDotProductAttention as nn.MultiheadAttention's in_proj / out_proj."""
    ws, bs = [], []
    for x in ("query", "key", "value"):
        k = P(f"{src}/{x}/kernel")                       # [D, H, hd]
        ws.append(k.reshape(k.shape[0], -1).T)           # [H*hd, D]
        bs.append(P(f"{src}/{x}/bias").reshape(-1))      # [H*hd]
    add(f"{dst}_qkv.weight", np.concatenate(ws, 0))
    add(f"{dst}_qkv.bias", np.concatenate(bs, 0))
    o = P(f"{src}/out/kernel")                           # [H, hd, D]
    add(f"{dst}_o.weight", o.reshape(-1, o.shape[-1]).T)
    add(f"{dst}_o.bias", P(f"{src}/out/bias"))
    return P.flat[f"{src}/query/kernel"].shape[1]


def put_image_tokenizer(add, P, view):
    base = f"octo_transformer/observation_tokenizers_{view}"
    encs = sorted({k[len(base) + 1:].split("/")[0] for k in P.flat if k.startswith(base + "/")})
    encs = [e for e in encs if P.has(f"{base}/{e}/StdConv_0/kernel")]
    if len(encs) != 1:
        sys.exit(f"{base}: expected one SmallStem encoder, found {encs}")
    enc = f"{base}/{encs[0]}"
    n = 0
    while P.has(f"{enc}/StdConv_{n}/kernel"):
        add(f"octo.obs.{view}.stem.{n}.conv.weight", conv_oihw(P(f"{enc}/StdConv_{n}/kernel")))
        add(f"octo.obs.{view}.stem.{n}.conv.bias", P(f"{enc}/StdConv_{n}/bias"))
        put_norm(add, P, f"octo.obs.{view}.stem.{n}.gn", f"{enc}/GroupNorm_{n}")
        n += 1
    emb = P(f"{enc}/embedding/kernel")
    add(f"octo.obs.{view}.patch_embd.weight", conv_oihw(emb))
    add(f"octo.obs.{view}.patch_embd.bias", P(f"{enc}/embedding/bias"))
    if n != 4:
        print(f"note: {view} stem has {n} conv stages; vla.cpp runs 4", file=sys.stderr)
    return n, emb.shape[0]


def put_t5(add, P):
    t5 = "octo_transformer/task_tokenizers_language/hf_model"
    add("octo.t5.tok_embd.weight", P(f"{t5}/shared/embedding"))
    enc = f"{t5}/encoder"
    n = 0
    while P.has(f"{enc}/block/{n}/layer/0/SelfAttention/q/kernel"):
        b = f"{enc}/block/{n}/layer"
        add(f"octo.t5.blk.{n}.attn_norm.weight", P(f"{b}/0/layer_norm/weight"))
        for x in "qkvo":
            add(f"octo.t5.blk.{n}.attn_{x}.weight", P(f"{b}/0/SelfAttention/{x}/kernel").T)
        if P.has(f"{b}/1/DenseReluDense/wi_0/kernel"):
            sys.exit("gated T5 feed-forward (t5 v1.1): vla.cpp maps DenseReluDense.wi only")
        add(f"octo.t5.blk.{n}.ffn_norm.weight", P(f"{b}/1/layer_norm/weight"))
        add(f"octo.t5.blk.{n}.ffn_up.weight", P(f"{b}/1/DenseReluDense/wi/kernel").T)
        add(f"octo.t5.blk.{n}.ffn_down.weight", P(f"{b}/1/DenseReluDense/wo/kernel").T)
        n += 1
    add("octo.t5.blk.0.attn_rel_b.weight",
        P(f"{enc}/block/0/layer/0/SelfAttention/relative_attention_bias/embedding"))
    add("octo.t5.output_norm.weight", P(f"{enc}/final_layer_norm/weight"))
    return n


def put_map_head(add, P, src):
    add("octo.head.l1.map.probe", P(f"{src}/probe"))
    put_mha(add, P, "octo.head.l1.map.attn", f"{src}/MultiHeadDotProductAttention_0")
    put_norm(add, P, "octo.head.l1.map.norm", f"{src}/LayerNorm_0")
    put_dense(add, P, "octo.head.l1.map.ffn_up", f"{src}/MlpBlock_0/Dense_0")
    put_dense(add, P, "octo.head.l1.map.ffn_down", f"{src}/MlpBlock_0/Dense_1")


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("ckpt")
    ap.add_argument("out")
    ap.add_argument("--tokenizer", help="folder holding the T5 spiece.model, or the file")
    ap.add_argument("--dataset", help="keep only this dataset's statistics block")
    ap.add_argument("--step", type=int)
    ap.add_argument("--window-size", type=int)
    ap.add_argument("--allow-unmapped", action="store_true")
    a = ap.parse_args()

    ckdir = a.ckpt if os.path.isdir(a.ckpt) else os.path.dirname(a.ckpt)
    cfg = json.load(open(os.path.join(ckdir, "config.json")))
    model = cfg["model"]
    head_cfg = model["heads"]["action"]
    hkw = dict(head_cfg.get("kwargs", {}))
    if "pred_horizon" in hkw:                      # octo-pytorch's shim for old configs
        hkw["action_horizon"] = hkw.pop("pred_horizon")
    head_name = head_cfg["name"].removesuffix("Pt")
    if head_name not in HEAD_TYPE:
        sys.exit(f"unrecognized action head class {head_cfg['name']!r}")
    head_type = HEAD_TYPE[head_name]
    if head_type not in ("diffusion", "l1") or head_name == "UNetDDPMActionHead":
        sys.exit(f"{head_name}: vla.cpp converts DiffusionActionHead and L1ActionHead only")
    use_map = bool(hkw.get("use_map", False))
    if head_type == "l1" and not use_map:
        sys.exit("L1ActionHead without use_map: vla.cpp's L1 head is the MAP head")
    if head_type == "diffusion" and not hkw.get("use_layer_norm", True):
        sys.exit("DiffusionActionHead with use_layer_norm=False: vla.cpp needs the block LayerNorms")
    obs_tok = model.get("observation_tokenizers", {})
    for name in obs_tok:
        if name not in ("primary", "wrist", "proprio"):
            msg = f"observation tokenizer {name!r}: vla.cpp maps primary / wrist / proprio only"
            if not a.allow_unmapped:
                sys.exit(msg)
            print("warning: " + msg, file=sys.stderr)

    tree = read_msgpack_tree(checkpoint_file(a.ckpt, a.step))
    if set(tree) == {"params"}:
        tree = tree["params"]
    P = Params(flatten(tree))
    OT = "octo_transformer"

    tensors = {}

    def add(name, arr):
        if name in tensors:
            sys.exit(f"duplicate GGUF destination {name}")
        tensors[name] = np.ascontiguousarray(arr, dtype=np.float32)

    # observation tokenizers
    sizes = {}
    for view in ("primary", "wrist"):
        if not P.has(f"{OT}/obs_{view}_pos_embedding"):
            print(f"note: no {view} view in the checkpoint; its tensors are left out", file=sys.stderr)
            continue
        n_conv, patch = put_image_tokenizer(add, P, view)
        enc_kw = obs_tok.get(view, {}).get("kwargs", {}).get("encoder", {}).get("kwargs", {})
        stride = int(np.prod(enc_kw.get("strides", [2] * n_conv)))
        put_dense(add, P, f"octo.obs.{view}.proj", f"{OT}/obs_{view}_projection")
        pe = P(f"{OT}/obs_{view}_pos_embedding")[0]          # [max_horizon, n_tok, D]
        add(f"octo.obs.{view}.pos_embd", pe)
        n_tok = pe.shape[1]
        grid = int(round(n_tok ** 0.5))
        sizes[view] = (n_tok, grid * stride * patch)
    if "proprio" in obs_tok:
        put_dense(add, P, "octo.obs.proprio.proj", f"{OT}/obs_proprio_projection")
        pe = P(f"{OT}/obs_proprio_pos_embedding")[0]
        add("octo.obs.proprio.pos_embd", pe)
        kw = obs_tok["proprio"].get("kwargs", {})
        add("octo.obs.proprio.bin_thresholds", bin_thresholds(kw))
        if pe.shape[1] != 7:
            print(f"note: proprio has {pe.shape[1]} dims; vla.cpp's runtime assumes 7", file=sys.stderr)

    # task, readout
    put_dense(add, P, "octo.task.language.proj", f"{OT}/task_language_projection")
    lang_pe = P(f"{OT}/task_language_pos_embedding")[0]       # [n_tok, D]
    add("octo.task.language.pos_embd", lang_pe)
    ro = P(f"{OT}/readout_action_pos_embedding")[0]            # [max_horizon, n_readout, D]
    add("octo.readout.action.pos_embd", ro)
    D = ro.shape[-1]

    # block transformer
    tr = f"{OT}/BlockTransformer_0/Transformer_0"
    n_blk, heads, ffn = 0, None, None
    while P.has(f"{tr}/encoderblock_{n_blk}/LayerNorm_0/scale"):
        b, t = f"{tr}/encoderblock_{n_blk}", f"octo.blk.{n_blk}"
        put_norm(add, P, f"{t}.attn_norm", f"{b}/LayerNorm_0")
        heads = put_mha(add, P, f"{t}.attn", f"{b}/MultiHeadDotProductAttention_0")
        put_norm(add, P, f"{t}.ffn_norm", f"{b}/LayerNorm_1")
        put_dense(add, P, f"{t}.ffn_up", f"{b}/MlpBlock_0/Dense_0")
        put_dense(add, P, f"{t}.ffn_down", f"{b}/MlpBlock_0/Dense_1")
        ffn = tensors[f"{t}.ffn_up.weight"].shape[0]
        n_blk += 1
    put_norm(add, P, "octo.output_norm", f"{tr}/encoder_norm")

    # action head
    H = "heads_action"
    if head_type == "l1":
        put_map_head(add, P, f"{H}/map_head")
        put_dense(add, P, "octo.head.l1.mean_proj", f"{H}/mean_proj")
    else:
        dm = f"{H}/diffusion_model"
        add("octo.head.diffusion.time_fourier.weight", P(f"{dm}/time_preprocess/kernel"))
        put_dense(add, P, "octo.head.diffusion.cond.0", f"{dm}/cond_encoder/Dense_0")
        put_dense(add, P, "octo.head.diffusion.cond.1", f"{dm}/cond_encoder/Dense_1")
        rn = f"{dm}/reverse_network"
        put_dense(add, P, "octo.head.diffusion.reverse.in", f"{rn}/Dense_0")
        i = 0
        while P.has(f"{rn}/MLPResNetBlock_{i}/Dense_0/kernel"):
            blk = f"{rn}/MLPResNetBlock_{i}"
            put_norm(add, P, f"octo.head.diffusion.reverse.blk.{i}.ln", f"{blk}/LayerNorm_0")
            put_dense(add, P, f"octo.head.diffusion.reverse.blk.{i}.fc1", f"{blk}/Dense_0")
            put_dense(add, P, f"octo.head.diffusion.reverse.blk.{i}.fc2", f"{blk}/Dense_1")
            i += 1
        put_dense(add, P, "octo.head.diffusion.reverse.out", f"{rn}/Dense_1")
        if use_map:
            print("note: diffusion head with use_map: its MAP weights go to octo.head.l1.map.* "
                  "(vla.cpp's runtime does not use them)", file=sys.stderr)
            put_map_head(add, P, f"{H}/map_head")

    # T5
    put_t5(add, P)

    left = P.unused()
    if left:
        print("unmapped parameters:\n  " + "\n  ".join(left), file=sys.stderr)
        if not a.allow_unmapped:
            sys.exit("Octo tensor map is incomplete; --allow-unmapped writes the mapped ones")

    # keys
    horizon = int(hkw.get("action_horizon", 1))
    adim = int(hkw.get("action_dim", 7))
    meta = [
        ("architecture", "octo-small-1.5"),
        ("embedding_length", D), ("block_count", n_blk), ("attention.head_count", heads),
        ("feed_forward_length", ffn), ("attention.layer_norm_eps", 1e-6),
        ("readout.count", ro.shape[1]),
        ("tokens.primary", sizes.get("primary", (256, 256))[0]),
        ("tokens.wrist", sizes.get("wrist", (64, 128))[0]),
        ("tokens.language", lang_pe.shape[0]),
        ("image.primary_size", sizes.get("primary", (256, 256))[1]),
        ("image.wrist_size", sizes.get("wrist", (64, 128))[1]),
        ("diffusion.steps", int(hkw.get("diffusion_steps", 20))),
        ("diffusion.beta_schedule", "cosine"),
        ("diffusion.s", 0.008),
        ("diffusion.max_action", float(hkw.get("max_action", 5.0))),
        ("diffusion.time_dim", int(hkw.get("time_dim", 32))),
        ("diffusion.hidden", int(hkw.get("hidden_dim", 256))),
        ("diffusion.num_blocks", int(hkw.get("num_blocks", 3))),
        ("window_size", window_size(ckdir, cfg, a.window_size)),
        ("action.head_type", head_type),
        ("action.horizon", horizon),
        ("action.dim", adim),
    ]
    for k, v in meta:
        if k in VLACPP and int(v) != VLACPP[k]:
            print(f"note: octo.{k} = {v}; vla.cpp's converter writes {VLACPP[k]}", file=sys.stderr)
    out_dim = tensors["octo.head.l1.mean_proj.weight" if head_type == "l1"
                      else "octo.head.diffusion.reverse.out.weight"].shape[0]
    if out_dim != horizon * adim:
        sys.exit(f"head emits {out_dim} values, config says horizon {horizon} x dim {adim}")

    w = gguf.GGUFWriter(a.out, arch=ARCH)
    for k, v in meta:
        key = f"octo.{k}"
        if isinstance(v, str):
            w.add_string(key, v)
        elif isinstance(v, float):
            w.add_float32(key, v)
        else:
            w.add_uint32(key, int(v))
    w.add_string("octo.dataset_statistics",
                 stats_json(os.path.join(ckdir, "dataset_statistics.json"), a.dataset))
    if a.tokenizer:
        spm = a.tokenizer if os.path.isfile(a.tokenizer) else os.path.join(a.tokenizer, "spiece.model")
        w.add_array("octo.tokenizer.spm_model", open(spm, "rb").read())   # bytes -> UINT8 array
        w.add_uint32("octo.tokenizer.eos_id", 1)
        w.add_uint32("octo.tokenizer.pad_id", 0)
    else:
        print("note: no --tokenizer: octo.tokenizer.* left out", file=sys.stderr)
    for name in sorted(tensors):
        w.add_tensor(name, tensors[name], raw_dtype=gguf.GGMLQuantizationType.F32)
    finish(w)
    print(f"wrote {a.out}: {len(tensors)} tensors ({n_blk} blocks, head {head_type})", file=sys.stderr)


if __name__ == "__main__":
    main()
