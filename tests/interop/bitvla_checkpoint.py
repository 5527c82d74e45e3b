#!/usr/bin/env python3
"""A small random BitVLA checkpoint folder whose ternary matrices vla.cpp's int2 tiles can hold.

  bitvla_checkpoint.py OUT_DIR [--seed N] [--model-type openvla|bitvla]

Writes OUT_DIR in the layout the BitVLA reference's LIBERO evaluation loads (ustcwhy/BitVLA,
experiments/robot/libero/run_libero_eval_bitnet.py; the conventions of tests/fixtures/bitvla-tiny,
made by tools/golden/bitvla.py), with numpy only (no torch, no safetensors package):
- config.json: the fixture's (Bitvla_Config as save_pretrained writes it, the same norm_stats) with
  SigLIP 128 wide, MLP 176, 2 layers, 4 heads, 224 / 14, W1.58-A8, and BitNet 128 wide, MLP 256,
  2 layers, 4 query heads of 32 and 1 KV head, vocab 128264. Its `model_type` is "openvla" by default,
  which vla.cpp's converter requires ("BitVLA's HF model_type"); the reference picks its classes
  through the `auto_map` that get_bitnet_vla writes, so either value loads there; `--model-type
  bitvla` gives the fixture's save_pretrained value.
- model.safetensors (bf16 master weights, the fixture's key names, no lm_head: tied), written by hand.
  BitLinear weights (every SigLIP q/k/v/out_proj, fc1, fc2 and BitNet q/k/v/o, gate/up/down) are
  ternary by construction as tools/golden/bitvla.py's `ternary()`: W s with s = 1 / mean|W| is
  >= 0.9 in size where the code is +-1 and <= 0.3 where it is 0, so WeightQuant's round(W s), the
  int2 path's round(W / mean) and vla.cpp's f64 mean all give the same codes (asserted). Others as
  its rerandomize: norm gains 1 + 0.2 N, biases 0.2 N, matrices N / sqrt(fan_in), embeddings 0.5 N,
  rounded to bf16; the token embedding rows of the tokenizer's unreachable placeholder ids are zero.
- action_head--10000_checkpoint.pt (bf16; L1RegressionActionHead, hidden 128, 2 MLPResNet blocks) and
  proprio_projector--10000_checkpoint.pt (f32; ProprioProjector 8 -> 128 -> 128): torch.save zips of
  the DDP modules' state dicts ("module."-prefixed keys, `_metadata` kept) with the pickle opcodes
  emitted here (protocol 2: torch._utils._rebuild_tensor_v2 over persistent storages data/<key>),
  records 64-byte aligned as torch writes them.
- dataset_statistics.json and the processor / tokenizer / generation files: the fixture's.

Why: the golden fixture's widths (SigLIP 48, BitNet 32) are not multiples of 128, so vla.cpp's
converter cannot pack it (Ladder int2 tiles need N % 16 == 0 and K % 128 == 0 for every ternary
matrix; only the tower's fc2 K is zero-padded by vla.cpp, here 176 -> 256). This folder can go
through vla.cpp's converter layout (tests/interop/vlacpp_bitvla_writer.py). Same seed, same bytes.
Runs in well under a second.
"""
import argparse
import json
import os
import shutil
import struct
import zipfile
from collections import OrderedDict, namedtuple

import numpy as np

FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "bitvla-tiny")
COPIED = ["dataset_statistics.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
          "preprocessor_config.json", "processor_config.json", "generation_config.json"]
VIT = dict(hidden_size=128, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4, image_size=224,
           patch_size=14, vit_weight_bits=1, vit_act_bits=8)
TEXT = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=1, rms_norm_eps=1e-5, rope_theta=500000.0, vocab_size=128264)
BOS, PROPRIO_DIM, ACTION_DIM, HEAD_BLOCKS = 128000, 8, 7, 2


def bf16(a):
    """float32 -> bf16 bits, round to nearest even (torch's .to(torch.bfloat16))."""
    u = np.ascontiguousarray(a, np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def widen(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def ternary(rng, n, k):
    """A bf16-exact master weight [n, k] with unambiguous absmean codes (module doc)."""
    assert n % 16 == 0, (n, k)
    alpha = 1.5 / k ** 0.5
    code = rng.integers(-1, 2, (n, k)).astype(np.float32)
    u = rng.random((n, k), dtype=np.float32)
    w = widen(bf16(np.where(code != 0, code * alpha * (0.75 + 0.5 * u), alpha * 0.15 * (2 * u - 1))))
    a = np.abs(w)
    for mean in (a.mean(dtype=np.float32), np.float32(a.astype(np.float64).mean())):
        for q in (w * (np.float32(1) / mean), w / mean):  # WeightQuant; quantize_to_int2
            assert np.array_equal(np.clip(np.rint(q), -1, 1), code)
        s = a / mean
        assert s[code != 0].min() > 0.9 and s[code == 0].max() < 0.3
    return w


def dense(rng, name, shape, embedding=False):
    """tools/golden/bitvla.py's rerandomize, bf16-exact float32."""
    r = rng.standard_normal(shape, dtype=np.float32)
    if len(shape) == 1:
        v = 1.0 + 0.2 * r if ("norm" in name or name.endswith("weight")) else 0.2 * r
    else:
        v = 0.5 * r if embedding else r / np.sqrt(np.prod(shape[1:]))
    return widen(bf16(v))


def vla_weights(rng, n_real):
    """name -> float32 (bf16-exact) array, the fixture's model.safetensors keys."""
    V, L, sd = "vision_tower.vision_model.", "language_model.model.", {}
    hv, iv, ht, it = VIT["hidden_size"], VIT["intermediate_size"], TEXT["hidden_size"], TEXT["intermediate_size"]
    kv = TEXT["num_key_value_heads"] * ht // TEXT["num_attention_heads"]
    p, n_pos = VIT["patch_size"], (VIT["image_size"] // VIT["patch_size"]) ** 2

    def put(name, shape, bit=False, embedding=False):
        sd[name] = ternary(rng, *shape) if bit else dense(rng, name, shape, embedding)

    put(V + "embeddings.patch_embedding.weight", (hv, 3, p, p))
    put(V + "embeddings.patch_embedding.bias", (hv,))
    put(V + "embeddings.position_embedding.weight", (n_pos, hv), embedding=True)
    for i in range(VIT["num_hidden_layers"]):
        x = f"{V}encoder.layers.{i}."
        for ln in ("layer_norm1", "layer_norm2"):
            put(f"{x}{ln}.weight", (hv,))
            put(f"{x}{ln}.bias", (hv,))
        for name, n, k in [("self_attn.q_proj", hv, hv), ("self_attn.k_proj", hv, hv), ("self_attn.v_proj", hv, hv),
                           ("self_attn.out_proj", hv, hv), ("mlp.fc1", iv, hv), ("mlp.fc2", hv, iv)]:
            put(f"{x}{name}.weight", (n, k), bit=True)
            put(f"{x}{name}.bias", (n,))
    for name, n, k in [("linear_1", ht, hv), ("linear_2", ht, ht)]:
        put(f"multi_modal_projector.{name}.weight", (n, k))
        put(f"multi_modal_projector.{name}.bias", (n,))
    emb = np.zeros((TEXT["vocab_size"], ht), np.float32)  # the placeholder rows no text reaches stay zero
    for lo, hi in [(0, n_real), (BOS, TEXT["vocab_size"])]:
        emb[lo:hi] = dense(rng, "embed_tokens", (hi - lo, ht), embedding=True)
    sd[L + "embed_tokens.weight"] = emb
    for i in range(TEXT["num_hidden_layers"]):
        x = f"{L}layers.{i}."
        for name, n in [("input_layernorm", ht), ("post_attention_layernorm", ht),
                        ("self_attn.attn_sub_norm", ht), ("mlp.ffn_sub_norm", it)]:
            put(f"{x}{name}.weight", (n,))
        for name, n, k in [("self_attn.q_proj", ht, ht), ("self_attn.k_proj", kv, ht), ("self_attn.v_proj", kv, ht),
                           ("self_attn.o_proj", ht, ht), ("mlp.gate_proj", it, ht), ("mlp.up_proj", it, ht),
                           ("mlp.down_proj", ht, it)]:
            put(f"{x}{name}.weight", (n, k), bit=True)
    put(L + "norm.weight", (ht,))
    return sd


def write_safetensors(path, sd):
    """bf16, keys sorted, header padded to 8 bytes with spaces, as safetensors writes it."""
    head, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for k in sorted(sd):
        b = bf16(sd[k]).astype("<u2").tobytes()
        head[k] = {"dtype": "BF16", "shape": list(sd[k].shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(head, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


# ---------------------------------------------------------------- torch.save without torch

Glob = namedtuple("Glob", "module name")  # a global: GLOBAL
Call = namedtuple("Call", "fn args")  # fn(*args): REDUCE
Pid = namedtuple("Pid", "tup")  # a persistent id: BINPERSID


def emit(x):
    """Pickle protocol 2 opcodes for the few types a state dict holds."""
    if isinstance(x, bool):
        return b"\x88" if x else b"\x89"
    if isinstance(x, int):
        assert 0 <= x < 2 ** 31
        return (b"K" + bytes([x]) if x < 256 else b"M" + struct.pack("<H", x) if x < 65536
                else b"J" + struct.pack("<i", x))
    if isinstance(x, str):
        s = x.encode()
        return b"X" + struct.pack("<I", len(s)) + s
    if isinstance(x, Glob):
        return f"c{x.module}\n{x.name}\n".encode()
    if isinstance(x, Call):
        return emit(x.fn) + emit(x.args) + b"R"
    if isinstance(x, Pid):
        return emit(x.tup) + b"Q"
    if isinstance(x, tuple):
        body = b"".join(emit(e) for e in x)
        return b")" if not x else body + b"\x85\x86\x87"[len(x) - 1:len(x)] if len(x) <= 3 else b"(" + body + b"t"
    if isinstance(x, dict):  # OrderedDict: collections.OrderedDict(), then SETITEMS
        start = emit(Call(Glob("collections", "OrderedDict"), ())) if isinstance(x, OrderedDict) else b"}"
        items = b"".join(emit(k) + emit(v) for k, v in x.items())
        return start + (b"(" + items + b"u" if x else b"")
    raise TypeError(type(x))


def write_pt(path, tensors, modules, dtype):
    """torch.save(OrderedDict of `tensors` with `_metadata` for `modules`) of a DDP-wrapped module;
    dtype "bf16" (BFloat16Storage) or "f32" (FloatStorage)."""
    root = os.path.basename(path)[: -len(".pt")]
    storage = Glob("torch", {"bf16": "BFloat16Storage", "f32": "FloatStorage"}[dtype])
    sd, data = OrderedDict(), []
    for i, (k, a) in enumerate(tensors.items()):
        stride = tuple(int(np.prod(a.shape[d + 1:])) for d in range(a.ndim))
        sd["module." + k] = Call(Glob("torch._utils", "_rebuild_tensor_v2"), (
            Pid(("storage", storage, str(i), "cpu", a.size)), 0, a.shape, stride, False,
            Call(Glob("collections", "OrderedDict"), ())))
        data.append(bf16(a).astype("<u2").tobytes() if dtype == "bf16" else a.astype("<f4").tobytes())
    meta = OrderedDict((m, {"version": 1}) for m in ["", "module"] + ["module." + m for m in modules])
    pkl = b"\x80\x02" + emit(sd) + emit({"_metadata": meta}) + b"b."
    records = [("data.pkl", pkl), (".format_version", b"1"), (".storage_alignment", b"64"),
               ("byteorder", b"little")] + [(f"data/{i}", d) for i, d in enumerate(data)] + \
              [("version", b"3\n"), (".data/serialization_id", b"0" * 40)]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for name, b in records:
            zi = zipfile.ZipInfo(f"{root}/{name}", date_time=(1980, 1, 1, 0, 0, 0))
            pad = -(z.fp.tell() + 30 + len(zi.filename) + 4) % 64  # the data 64-byte aligned, as torch
            zi.extra = b"FB" + struct.pack("<H", pad) + b"Z" * pad
            z.writestr(zi, b)


def sidecars(rng):
    """(action head tensors, its modules), (proprio projector tensors, its modules), keys unprefixed."""
    h, head, pp = TEXT["hidden_size"], OrderedDict(), OrderedDict()

    def put(sd, name, n, k=None):  # a Linear (n, k) or a LayerNorm (n): weight and bias
        sd[name + ".weight"] = dense(rng, name + ".weight", (n,) if k is None else (n, k))
        sd[name + ".bias"] = dense(rng, name + ".bias", (n,))

    put(head, "model.layer_norm1", ACTION_DIM * h)
    put(head, "model.fc1", h, ACTION_DIM * h)
    hm = ["model", "model.layer_norm1", "model.fc1", "model.relu", "model.mlp_resnet_blocks"]
    for b in range(HEAD_BLOCKS):
        x = f"model.mlp_resnet_blocks.{b}"
        put(head, x + ".ffn.0", h)
        put(head, x + ".ffn.1", h, h)
        hm += [x, x + ".ffn", x + ".ffn.0", x + ".ffn.1", x + ".ffn.2"]  # ffn.2: the ReLU
    put(head, "model.layer_norm2", h)
    put(head, "model.fc2", ACTION_DIM, h)
    put(pp, "fc1", h, PROPRIO_DIM)
    put(pp, "fc2", h, h)
    return (head, hm + ["model.layer_norm2", "model.fc2"]), (pp, ["fc1", "fc2", "act_fn1"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model-type", default="openvla", choices=["openvla", "bitvla"])
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    vocab = json.load(open(os.path.join(FIXTURE, "tokenizer.json")))["model"]["vocab"]
    n_real = sum(1 for t in vocab if not t.startswith("\u3000"))  # the ids a text can reach below BOS
    assert 256 <= n_real < BOS

    cfg = json.load(open(os.path.join(FIXTURE, "config.json")))
    cfg["vision_config"].update(VIT)
    cfg["text_config"].update(TEXT)
    cfg.update(model_type=args.model_type, vision_feature_layer=-1, vision_feature_select_strategy="full",
               projector_hidden_act="gelu", vocab_size=TEXT["vocab_size"])
    with open(os.path.join(args.out, "config.json"), "w") as f:
        f.write(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    for name in COPIED:
        shutil.copyfile(os.path.join(FIXTURE, name), os.path.join(args.out, name))

    write_safetensors(os.path.join(args.out, "model.safetensors"), vla_weights(rng, n_real))
    (head, hm), (pp, pm) = sidecars(rng)
    write_pt(os.path.join(args.out, "action_head--10000_checkpoint.pt"), head, hm, "bf16")
    write_pt(os.path.join(args.out, "proprio_projector--10000_checkpoint.pt"), pp, pm, "f32")
    print("wrote", args.out)


if __name__ == "__main__":
    main()
