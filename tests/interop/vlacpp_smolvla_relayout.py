#!/usr/bin/env python3
"""A SmolVLA GGUF of ours rewritten in vla.cpp's layout (numpy + gguf-py), for the memory test
of vla-server/tests/vla_bench_cli.rs (a vla.cpp-layout file loads without a second copy).

  vlacpp_smolvla_relayout.py IN.gguf OUT.gguf

What vla.cpp's `convert_smolvla_to_gguf.py` (VinRobotics/vla.cpp b18873d) names otherwise, from
the layout's facts: the key `smolvla.intermediate` (ours `lm_inter`), `vit_pixel_shuffle` (ours
`scale_factor`), no `n_images`, `pad_token_id` or RMSNorm `norm_eps` (vla.cpp's `norm_eps` is
the statistics' epsilon), the tensors `mm.fc.weight` (ours `mm.proj.weight`) and `vit.pos_embd`
(ours `vit.pos_embd.weight`). Tensor data are copied as they are (the mapped input's pages).
"""
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q, GGUFValueType as V

ARCH = "smolvla"
RENAMED = {f"{ARCH}.lm_inter": f"{ARCH}.intermediate", f"{ARCH}.scale_factor": f"{ARCH}.vit_pixel_shuffle"}
DROPPED = {f"{ARCH}.n_images", f"{ARCH}.pad_token_id", f"{ARCH}.norm_eps"}
TENSORS = {"mm.proj.weight": "mm.fc.weight", "vit.pos_embd.weight": "vit.pos_embd"}


def main(src, dst):
    r = gguf.GGUFReader(src)
    w = gguf.GGUFWriter(dst, ARCH)
    for field in r.fields.values():
        name = field.name
        if name.startswith("GGUF.") or name == "general.architecture" or name in DROPPED:
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == V.ARRAY else None
        w.add_key_value(RENAMED.get(name, name), field.contents(), vtype, sub_type=sub)
    w.add_float32(f"{ARCH}.norm_eps", 1e-8)  # vla.cpp's: the statistics' epsilon
    for t in r.tensors:
        shape = [int(d) for d in reversed(t.shape)]
        data = np.asarray(t.data)
        raw = None if t.tensor_type in (Q.F32, Q.F16) else t.tensor_type
        if raw is None:
            data = data.reshape(shape)
        w.add_tensor(TENSORS.get(t.name, t.name), data, raw_shape=shape if raw else None, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main(*sys.argv[1:3])
