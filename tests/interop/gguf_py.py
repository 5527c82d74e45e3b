#!/usr/bin/env python3
"""gguf-py side of the GGUF interop test (tests/gguf_interop.rs).

  gguf_py.py write OUTDIR       write OUTDIR/gguf_py.gguf with gguf-py, plus expected.json and
                                raw little-endian files the Rust test compares against
  gguf_py.py read FILE OUTDIR   read FILE (written by vla-rs) with gguf-py's GGUFReader and dump
                                OUTDIR/read.json plus each tensor dequantized by
                                gguf.quants.dequantize as raw f32
"""
import json
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q, GGUFValueType as V

QUANT_TYPES = [Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1]

# (key, value type, value, array element type)
METADATA = [
    ("t.u8", V.UINT8, 200, None),
    ("t.i8", V.INT8, -100, None),
    ("t.u16", V.UINT16, 60000, None),
    ("t.i16", V.INT16, -30000, None),
    ("t.u32", V.UINT32, 4000000000, None),
    ("t.i32", V.INT32, -2000000000, None),
    ("t.u64", V.UINT64, 2**64 - 2, None),
    ("t.i64", V.INT64, -(2**63) + 1, None),
    ("t.f32", V.FLOAT32, float(np.float32(-1.5e-7)), None),
    ("t.f64", V.FLOAT64, 3.141592653589793, None),
    ("t.bool_t", V.BOOL, True, None),
    ("t.bool_f", V.BOOL, False, None),
    ("t.str", V.STRING, "héllo wörld ✓", None),
    ("t.arr_u8", V.ARRAY, [0, 1, 255], V.UINT8),
    ("t.arr_i8", V.ARRAY, [-128, 127], V.INT8),
    ("t.arr_u16", V.ARRAY, [1, 65535], V.UINT16),
    ("t.arr_i16", V.ARRAY, [-32768, 5], V.INT16),
    ("t.arr_u32", V.ARRAY, [7, 4294967295], V.UINT32),
    ("t.arr_i32", V.ARRAY, [-7, 2147483647], V.INT32),
    ("t.arr_u64", V.ARRAY, [2**64 - 1], V.UINT64),
    ("t.arr_i64", V.ARRAY, [-(2**63)], V.INT64),
    ("t.arr_f32", V.ARRAY, [0.5, -2.25, float(np.float32(1e30))], V.FLOAT32),
    ("t.arr_f64", V.ARRAY, [1e-300, -0.0], V.FLOAT64),
    ("t.arr_bool", V.ARRAY, [True, False, True], V.BOOL),
    ("t.arr_str", V.ARRAY, ["a", "", "ccc", "ü"], V.STRING),
    ("t.arr_nested", V.ARRAY, [[1, 2], [3]], V.ARRAY),
]


def tensor_sources(rng):
    """(name, numpy shape, values) with the awkward cases each block type must get right."""
    out = []
    for qt in QUANT_TYPES:
        x = (rng.standard_normal((5, 96)) * 3).astype(np.float32)
        x[1, :32] = 0.0                       # an all-zero block (scale 0)
        x[2, :32] = np.arange(32) - 15.5      # exact halves
        x[2, 32:64] = 127.0 * np.sign(rng.standard_normal(32))
        x[2, 40] = 62.5                       # a Q8_0 tie: rounds away from zero (63)
        x[3, 64:96] = 1e-3 * rng.standard_normal(32)
        out.append((f"w.{qt.name}", qt, x))
    out.append(("w.3d", Q.F32, rng.standard_normal((2, 3, 4)).astype(np.float32)))
    out.append(("w.1d", Q.F16, rng.standard_normal(7).astype(np.float32)))
    return out


def write(outdir):
    rng = np.random.default_rng(1234)
    w = gguf.GGUFWriter(os.path.join(outdir, "gguf_py.gguf"), "interop")
    expected_meta = [{"key": "general.architecture", "type": "STRING", "value": "interop"}]
    for key, vtype, value, sub in METADATA:
        w.add_key_value(key, value, vtype, sub_type=sub)
        e = {"key": key, "type": vtype.name, "value": value}
        if sub is not None:
            e["elem"] = sub.name
        expected_meta.append(e)
    tensors = []
    for name, qt, x in tensor_sources(rng):
        if qt == Q.F32:
            data = x
        elif qt == Q.F16:
            data = x.astype(np.float16)
        else:
            data = gguf.quants.quantize(x, qt)
        w.add_tensor(name, data, raw_dtype=qt if qt not in (Q.F32, Q.F16) else None)
        raw = np.ascontiguousarray(data).tobytes()
        deq = gguf.quants.dequantize(np.frombuffer(raw, dtype=np.uint8).reshape(data.shape[:-1] + (-1,))
                                     if qt not in (Q.F32, Q.F16) else data, qt).astype(np.float32)
        base = os.path.join(outdir, name)
        x.astype("<f4").tofile(base + ".source.f32")
        deq.astype("<f4").tofile(base + ".dequant.f32")
        with open(base + ".bytes", "wb") as f:
            f.write(raw)
        tensors.append({"name": name, "type": int(qt), "dims": list(reversed(x.shape))})
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    info = {"gguf_py_version": version(), "numpy_version": np.__version__,
            "metadata": expected_meta, "tensors": tensors}
    with open(os.path.join(outdir, "expected.json"), "w") as f:
        json.dump(info, f, indent=1)


def read(path, outdir):
    r = gguf.GGUFReader(path)
    meta = []
    for field in r.fields.values():
        if field.name.startswith("GGUF."):
            continue  # the reader's own pseudo-fields (version, counts)
        e = {"key": field.name, "type": field.types[0].name, "value": field.contents()}
        if field.types[0] == V.ARRAY:
            e["elem"] = field.types[-1].name
        meta.append(e)
    tensors = []
    for t in r.tensors:
        deq = gguf.quants.dequantize(t.data, t.tensor_type).astype("<f4")
        deq.tofile(os.path.join(outdir, t.name + ".gguf_py.f32"))
        tensors.append({"name": t.name, "type": int(t.tensor_type),
                        "dims": [int(d) for d in t.shape], "n_bytes": int(t.n_bytes)})
    with open(os.path.join(outdir, "read.json"), "w") as f:
        json.dump({"gguf_py_version": version(), "metadata": meta, "tensors": tensors}, f, indent=1)


def version():
    from importlib.metadata import version as v
    return v("gguf")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "write":
        write(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "read":
        read(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
