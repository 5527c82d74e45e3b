"""What the two vla.cpp-layout writers (vlacpp_pi05_writer.py, vlacpp_smolvla_writer.py) share,
as vla.cpp's converters share `gguf_blocks.write_siglip_tower`: reading a checkpoint's
safetensors with numpy alone, and the SigLIP tower's names in vla.cpp's layout."""
import json
import struct

import numpy as np

DT = {"F32": np.float32, "F64": np.float64}


def safetensors(path):
    """Every tensor of a safetensors file, as float32 numpy arrays."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, v in head.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        out[k] = np.frombuffer(data[a:b], dtype=DT[v["dtype"]]).reshape(v["shape"]).astype(np.float32)
    return out


def siglip_layers(sd, vis):
    """The number of encoder layers under the vision model prefix `vis`."""
    n = 0
    while f"{vis}.encoder.layers.{n}.layer_norm1.weight" in sd:
        n += 1
    return n


def write_siglip(add, sd, vis):
    """The SigLIP tower under `vis` as vla.cpp names it: the patch embedding as the 4-D
    convolution, `vit.pos_embd` without `.weight`, `vit.blk.{i}.*`, `vit.post_ln`."""
    e = f"{vis}.embeddings"
    add("vit.patch_embd.weight", sd[f"{e}.patch_embedding.weight"])
    add("vit.patch_embd.bias", sd[f"{e}.patch_embedding.bias"])
    add("vit.pos_embd", sd[f"{e}.position_embedding.weight"])
    for i in range(siglip_layers(sd, vis)):
        L = f"{vis}.encoder.layers.{i}"
        for s, d in [("layer_norm1", "ln1"), ("layer_norm2", "ln2"), ("self_attn.q_proj", "attn_q"),
                     ("self_attn.k_proj", "attn_k"), ("self_attn.v_proj", "attn_v"),
                     ("self_attn.out_proj", "attn_o"), ("mlp.fc1", "fc1"), ("mlp.fc2", "fc2")]:
            add(f"vit.blk.{i}.{d}.weight", sd[f"{L}.{s}.weight"])
            add(f"vit.blk.{i}.{d}.bias", sd[f"{L}.{s}.bias"])
    add("vit.post_ln.weight", sd[f"{vis}.post_layernorm.weight"])
    add("vit.post_ln.bias", sd[f"{vis}.post_layernorm.bias"])


def finish(w):
    """Writes and closes the gguf-py writer `w`."""
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
