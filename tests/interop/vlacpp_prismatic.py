"""What the vla.cpp-layout writers of the Prismatic family (vlacpp_vla_adapter_writer.py,
vlacpp_openvla_oft_writer.py) share, as vla.cpp's converters share `gguf_blocks`
(`write_prismatic_tower`, `write_prismatic_lm`) and `gguf_common` (`load_pt_module`,
`add_bf16`): reading the checkpoint without torch (its safetensors, f32 or bf16, and the
head's `torch.save`d `.pt` files), the towers' and language model's keys and tensors in
vla.cpp's names, and a GGUF writer that stores f32 or, as vla.cpp does, bf16.

Facts of vla.cpp's layout (VinRobotics/vla.cpp b18873d), not of vla-rs:

- keys under `<arch>.`: `architecture` (string), `vit.{dino,sig}.{hidden, layers (the blocks
  kept: all but the last), heads, head_dim, inter}`, `vit.{image_size, patch_size, n_patches}`
  u32, `vit.ln_eps` f32, `vit.{proj_mid, vdim}` u32 (and OpenVLA-OFT's `vit.num_images`);
  `lm.{hidden, layers, q_heads, kv_heads, head_dim, inter, vocab}` u32, `lm.{rope_theta,
  rms_eps}` f32;
- tensors (`write_prismatic_tower`): `vis.d.{patch.weight, patch.bias, cls, reg, pos}` (the
  tables with their leading 1), `vis.d.blk.{i}.{ln1, ln2}.*`, `ls1`, `ls2`, `{qkv, proj, fc1,
  fc2}.*`; `vis.s.{patch.weight, patch.bias, pos}`, `vis.s.blk.{i}.*` (no ls);
  `vis.proj.fc{1,2,3}.*`; (`write_prismatic_lm`) `lm.blk.{i}.{attn_norm, ffn_norm, attn_{q,k,v}
  (+ `.bias` with `qkv_bias`), attn_o, ffn_gate, ffn_up, ffn_down}.weight`,
  `lm.output_norm.weight`.
"""
import io
import json
import pickle
import struct
import zipfile
from collections import OrderedDict

import numpy as np
import gguf

VB = "vision_backbone."
LM = "language_model.model."
# vla.cpp's constants that hold for the released models and the fixtures alike
TOWER_HEADS, VIT_LN_EPS = 16, 1e-6

STORAGES = {"FloatStorage": "<f4", "DoubleStorage": "<f8", "HalfStorage": "<f2", "BFloat16Storage": "bf16"}
SAFETENSORS = {"F32": "<f4", "F64": "<f8", "F16": "<f2", "BF16": "bf16"}


def widen(raw, dtype):
    """Little-endian bytes of `dtype` ("bf16" or a numpy dtype) as float32 values."""
    if dtype == "bf16":
        return (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
    return np.frombuffer(raw, dtype).astype(np.float32)


def safetensors(path):
    """Every tensor of a safetensors file (f32, f64, f16 or bf16), as float32 numpy arrays."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, v in head.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        out[k] = widen(data[a:b], SAFETENSORS[v["dtype"]]).reshape(v["shape"])
    return out


# a storage's dtype as a GGUF type name
STORED = {"<f4": "F32", "<f8": "F64", "<f2": "F16", "bf16": "BF16"}


class _Storage:
    def __init__(self, values, dtype):
        self.values, self.dtype = values, dtype


def _rebuild(storage, offset, shape, stride, *_):
    """`torch._utils._rebuild_tensor_v2` over a storage: (float32 values, the source dtype)."""
    a = storage.values[offset:]
    arr = np.lib.stride_tricks.as_strided(a, shape=shape, strides=[s * a.itemsize for s in stride]).copy()
    return arr, STORED[storage.dtype]


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
        return _Storage(widen(self.z.read(f"{self.root}data/{key}"), dtype), dtype)


def load_pt(path, keep_dtype=False):
    """A `torch.save`d state dict as float32 arrays (with `keep_dtype`: (array, source GGUF type
    name) pairs), a leading `module.` dropped (vla.cpp's `load_pt_module`)."""
    z = zipfile.ZipFile(path)
    pkl = next(n for n in z.namelist() if n.endswith("data.pkl"))
    sd = _Unpickler(z, pkl[: -len("data.pkl")]).load()
    return {(k[7:] if k.startswith("module.") else k): (v if keep_dtype else v[0]) for k, v in sd.items()}


def bf16(a):
    """float32 -> bf16 bits, rounded to nearest even (torch's `.to(torch.bfloat16)`)."""
    u = np.ascontiguousarray(a, np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def count(sd, prefix, probe):
    """How many `{prefix}{i}.{probe}` there are, from 0."""
    n = 0
    while f"{prefix}{n}.{probe}" in sd:
        n += 1
    return n


class Writer:
    """A GGUF of `arch` (`<arch>.architecture` first, as vla.cpp's `open_writer`): keys under
    `<arch>.`, tensors f32, or bf16 as vla.cpp's `add_bf16` stores them."""

    def __init__(self, out, arch, as_bf16):
        self.w = gguf.GGUFWriter(out, arch=arch)
        self.arch, self.as_bf16 = arch, as_bf16
        self.w.add_string(self.kv("architecture"), arch)

    def kv(self, k):
        return f"{self.arch}.{k}"

    def u32(self, items):
        for k, v in items:
            self.w.add_uint32(self.kv(k), int(v))

    def f32(self, items):
        for k, v in items:
            self.w.add_float32(self.kv(k), float(v))

    def string(self, k, v):
        self.w.add_string(self.kv(k), v)

    def add(self, name, a):
        a = np.ascontiguousarray(a, np.float32)
        if self.as_bf16:
            self.w.add_tensor(name, bf16(a), raw_shape=list(a.shape), raw_dtype=gguf.GGMLQuantizationType.BF16)
        else:
            self.w.add_tensor(name, a)

    def pair(self, dst, src, sd):
        """`{dst}.weight` and `{dst}.bias` from `sd`'s `{src}.*`."""
        self.add(f"{dst}.weight", sd[f"{src}.weight"])
        self.add(f"{dst}.bias", sd[f"{src}.bias"])

    def finish(self):
        self.w.write_header_to_file()
        self.w.write_kv_data_to_file()
        self.w.write_tensors_to_file()
        self.w.close()


TOWERS = (("dino", f"{VB}featurizer.", "vis.d"), ("sig", f"{VB}fused_featurizer.", "vis.s"))


def towers(sd):
    """Each tower's sizes as vla.cpp's keys state them (its constants for the released model;
    here the checkpoint's own, the blocks kept all but the last)."""
    out = {}
    for tag, p, _ in TOWERS:
        conv = sd[f"{p}patch_embed.proj.weight"]
        out[tag] = dict(hidden=conv.shape[0], layers=count(sd, f"{p}blocks.", "norm1.weight") - 1,
                        heads=TOWER_HEADS, head_dim=conv.shape[0] // TOWER_HEADS,
                        inter=sd[f"{p}blocks.0.mlp.fc1.weight"].shape[0])
    return out


def add_vit_keys(w, sd, num_images=None):
    """The converters' `vit.*` keys, in their order (`num_images`: OpenVLA-OFT's)."""
    t = towers(sd)
    for tag, d in t.items():
        w.u32((f"vit.{tag}.{k}", d[k]) for k in ("hidden", "layers", "heads", "head_dim", "inter"))
    pd = f"{VB}featurizer."
    patch = sd[f"{pd}patch_embed.proj.weight"].shape[2]
    n_patches = sd[f"{pd}pos_embed"].shape[1]
    image = int(round(n_patches ** 0.5)) * patch
    w.u32([("vit.image_size", image), ("vit.patch_size", patch), ("vit.n_patches", n_patches)])
    w.f32([("vit.ln_eps", VIT_LN_EPS)])
    mid = [("vit.proj_mid", sd["projector.fc1.weight"].shape[0]),
           ("vit.vdim", t["dino"]["hidden"] + t["sig"]["hidden"])]
    w.u32(mid + ([("vit.num_images", num_images)] if num_images is not None else []))


def add_lm_keys(w, sd, text):
    """The converters' `lm.*` keys from config.json's `text_config` and the embedding table."""
    hidden, q_heads = text["hidden_size"], text["num_attention_heads"]
    theta = text.get("rope_theta") or text["rope_parameters"]["rope_theta"]
    w.u32([("lm.hidden", hidden), ("lm.layers", text["num_hidden_layers"]), ("lm.q_heads", q_heads),
           ("lm.kv_heads", text["num_key_value_heads"]), ("lm.head_dim", hidden // q_heads),
           ("lm.inter", text["intermediate_size"]), ("lm.vocab", sd[f"{LM}embed_tokens.weight"].shape[0])])
    w.f32([("lm.rope_theta", theta), ("lm.rms_eps", text["rms_norm_eps"])])


def write_prismatic_tower(w, sd):
    """`gguf_blocks.write_prismatic_tower`: both towers' kept blocks and the projector."""
    t = towers(sd)
    for tag, p, q in TOWERS:
        w.pair(f"{q}.patch", f"{p}patch_embed.proj", sd)
        if tag == "dino":
            w.add(f"{q}.cls", sd[f"{p}cls_token"])
            w.add(f"{q}.reg", sd[f"{p}reg_token"])
        w.add(f"{q}.pos", sd[f"{p}pos_embed"])
        for i in range(t[tag]["layers"]):
            b, o = f"{p}blocks.{i}.", f"{q}.blk.{i}."
            w.pair(o + "ln1", b + "norm1", sd)
            w.pair(o + "ln2", b + "norm2", sd)
            if tag == "dino":
                w.add(o + "ls1", sd[b + "ls1.scale_factor"])
                w.add(o + "ls2", sd[b + "ls2.scale_factor"])
            for src, dst in (("attn.qkv", "qkv"), ("attn.proj", "proj"), ("mlp.fc1", "fc1"), ("mlp.fc2", "fc2")):
                w.pair(o + dst, b + src, sd)
    for fc in ("fc1", "fc2", "fc3"):
        w.pair(f"vis.proj.{fc}", f"projector.{fc}", sd)


def write_prismatic_lm(w, sd, n_layers, qkv_bias=False):
    """`gguf_blocks.write_prismatic_lm`: the decoder layers and the final norm."""
    for i in range(n_layers):
        b, o = f"{LM}layers.{i}.", f"lm.blk.{i}."
        w.add(o + "attn_norm.weight", sd[b + "input_layernorm.weight"])
        w.add(o + "ffn_norm.weight", sd[b + "post_attention_layernorm.weight"])
        for x in "qkv":
            w.add(o + f"attn_{x}.weight", sd[b + f"self_attn.{x}_proj.weight"])
            if qkv_bias:
                w.add(o + f"attn_{x}.bias", sd[b + f"self_attn.{x}_proj.bias"])
        w.add(o + "attn_o.weight", sd[b + "self_attn.o_proj.weight"])
        for src, dst in (("gate_proj", "ffn_gate"), ("up_proj", "ffn_up"), ("down_proj", "ffn_down")):
            w.add(o + dst + ".weight", sd[b + f"mlp.{src}.weight"])
    w.add("lm.output_norm.weight", sd[f"{LM}norm.weight"])
