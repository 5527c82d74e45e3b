#!/usr/bin/env python3
"""An independent FoldQuant writer (numpy + gguf-py) for tests/foldquant.rs.

  foldquant_writer.py IN.gguf OUT.gguf SCHEME   (SCHEME: w8a8 | w4a8 | w4a4)

Writes OUT as vla.cpp's uncalibrated FoldQuant export of the float model IN, from the
published format alone (docs/FOLDQUANT.md sections 1, 2 and 4), without vla-rs code: every
decoder projection of vlm.blk / aex.blk (attn_q/k/v/o, ffn_gate/up/down) and of GR00T's DiT
blocks aex.dit (attn_q/k/v/o, ff0, ff2) with both sides multiples of 64, a layer's q/k/v
and gate/up only together, rotated by a dense float64 Sylvester Hadamard
of block 64 and rounded to f32 once, per-row wscale = max(amax / qmax, 1e-12), codes =
clip(round_half_even(w / wscale)) (an f32 division), INT4 two a byte, low nibble first.
Every other tensor and all metadata are copied.
"""
import re
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q, GGUFValueType as V

KINDS = {"attn_q": "qkv", "attn_k": "qkv", "attn_v": "qkv", "attn_o": "o",
         "ffn_gate": "gateup", "ffn_up": "gateup", "ffn_down": "down", "ff0": "ffn0", "ff2": "ffn2"}
# where vla.cpp quantizes (foldquant_fake_export.py's patterns): decoder layers of the language
# model and an expert, GR00T's DiT blocks; towers, VL self-attention, adaLN and encoders stay float
SITE = re.compile(r"^(vlm\.blk|aex\.blk)\.\d+\.(attn_[qkvo]|ffn_gate|ffn_up|ffn_down)$"
                  r"|^aex\.dit\.\d+\.(attn_[qkvo]|ff0|ff2)$")
GROUPS = {"qkv": ["attn_q", "attn_k", "attn_v"], "gateup": ["ffn_gate", "ffn_up"]}


def hadamard(n):
    h = np.array([[1.0]])
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return h / np.sqrt(n)


def row_major(t):
    return np.asarray(t.data).reshape([int(d) for d in reversed(t.shape)])


def main(src, dst, scheme):
    wbits, abits = {"w8a8": (8, 8), "w4a8": (4, 8), "w4a4": (4, 4)}[scheme]
    qmax = np.float32(127 if wbits == 8 else 7)
    r = gguf.GGUFReader(src)
    tensors = {t.name: t for t in r.tensors}
    arch = r.fields["general.architecture"].contents()

    def qualifies(site):
        t = tensors.get(site + ".weight")
        if t is None or t.tensor_type not in (Q.F32, Q.F16, Q.BF16) or len(t.shape) != 2:
            return False
        k, n = int(t.shape[0]), int(t.shape[1])
        return k % 64 == 0 and n % 64 == 0

    sites = set()
    for name in tensors:
        if not name.endswith(".weight") or not name.startswith(("vlm.", "aex.")):
            continue
        site = name[: -len(".weight")]
        base, _, last = site.rpartition(".")
        if last not in KINDS or not SITE.match(site) or not qualifies(site):
            continue
        members = GROUPS.get(KINDS[last], [])
        if all(base + "." + m + ".weight" not in tensors or qualifies(base + "." + m) for m in members):
            sites.add(site)

    w = gguf.GGUFWriter(dst, arch)
    for field in r.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == V.ARRAY else None
        w.add_key_value(field.name, field.contents(), vtype, sub_type=sub)
    key = lambda k: f"{arch}.quant.{k}"
    w.add_string(key("method"), "foldquant")
    w.add_string(key("applied_at"), "foldquant_writer.py")
    w.add_string(key("provenance"), "independent numpy writer (tests/interop)")
    for m in ("llm", "action"):
        w.add_string(key(f"scheme_{m}"), "fq-" + scheme)
        w.add_uint32(key(f"{m}_weight_bits"), wbits)
        w.add_uint32(key(f"{m}_act_bits"), abits)
        w.add_uint32(key(f"{m}_rot_block_size"), 64)
    w.add_string(key("action_fold_order"), "before")
    w.add_float32(key("act_clip_ratio"), 1.0)
    w.add_string(key("site_bits"), "")

    h = hadamard(64)
    for t in r.tensors:
        site = t.name[: -len(".weight")] if t.name.endswith(".weight") else None
        if site not in sites:
            data = row_major(t) if t.tensor_type in (Q.F32, Q.F16) else np.asarray(t.data)
            raw = None if t.tensor_type in (Q.F32, Q.F16) else t.tensor_type
            shape = [int(d) for d in reversed(t.shape)] if raw is not None else None
            w.add_tensor(t.name, data, raw_shape=shape, raw_dtype=raw)
            continue
        x = gguf.quants.dequantize(t.data, t.tensor_type).reshape(int(t.shape[1]), int(t.shape[0]))
        n, k = x.shape
        folded = (x.astype(np.float64).reshape(n, k // 64, 64) @ h).reshape(n, k).astype(np.float32)
        amax = np.abs(folded).max(axis=1)
        ws = np.maximum(amax / qmax, np.float32(1e-12)).astype(np.float32)
        codes = np.clip(np.rint(folded / ws[:, None]), -qmax, qmax).astype(np.int8)
        if wbits == 4:
            u = codes.astype(np.uint8) & 0x0F
            codes = (u[:, 0::2] | (u[:, 1::2] << 4)).astype(np.uint8).view(np.int8)
        w.add_tensor(t.name, codes)
        w.add_tensor(site + ".wscale", ws)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main(*sys.argv[1:4])
