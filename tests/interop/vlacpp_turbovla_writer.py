#!/usr/bin/env python3
"""An independent writer of TurboVLA GGUFs in vla.cpp's layout (numpy + gguf-py, no torch).

  vlacpp_turbovla_writer.py --ckpt CKPT --out OUT.gguf [--bert DIR] [--dinov3-config FILE] [--verify]
                            [--text-model-name NAME]

CKPT is the upstream (H-EmbodVis/TurboVLA) checkpoint as a user has it: the `torch.save`d
`{"model_state_dict": ..., "model_config": ...}` .pth/.pt (a directory holding exactly one such
file also works), or, as vla.cpp also accepts, a directory with `model.safetensors` and an
optional `config.json` (the model_config). `--bert` is the BERT folder (its `vocab.txt`, and
`tokenizer_config.json` for do_lower_case / strip_accents) used to tokenize the checkpoint's
training instructions; it is needed only when model_config.text.padding_length_by_instruction is
non-empty (when CKPT is a directory, a sub-folder of it with a vocab.txt is used by default).
`--dinov3-config` is the DINOv3 backbone's config.json, as vla.cpp's `--dinov3-config`
(when CKPT is a directory, the config.json of its one DINOv3 sub-folder by default); without
one the backbone must be named `...dinov3-vitb16...` in model_config.vision and vla.cpp's
ViT-B/16 values are used. vla.cpp refuses a model_config.text.model_name_or_path other than
`bert-base-uncased`: `--text-model-name bert-base-uncased` rewrites it first, as a vla.cpp user
with a checkpoint trained from a local BERT folder (the tiny fixtures) must. `--verify` fails,
as vla.cpp's does, on a checkpoint tensor no writer reads (DINOv3's final `norm`, its
`mask_token` and BERT's `pooler` are expected to be left).

OUT is what vla.cpp's `scripts/convert_turbovla_to_gguf.py` (VinRobotics/vla.cpp 06969f6, with
`gguf_common.py` of the same commit; its loader is src/models/turbovla.cpp 6b7039b) writes for it,
from the facts of that layout alone, without vla-rs code. Checked byte for byte against that
converter (run with torch, its one AutoTokenizer call pointed at the local BERT folder) on f32,
bf16 (no k_proj bias), f16, safetensors-directory and the turbovla-tiny / -layout fixtures:

- keys: `general.architecture` and `turbovla.architecture` = "turbovla"; u32 `turbovla.{hidden,
  vit_dim, vit_layers, vit_head_dim, vit_heads, text_dim, text_layers, text_head_dim (64),
  text_heads (12), num_fusion_layers, fusion_heads, fusion_head_dim, num_text_layers,
  text_enhancer_heads, text_enhancer_head_dim, action_heads, action_head_dim,
  num_action_decoder_layers, action_dim, state_dim, num_state_tokens, action_horizon, image_size,
  num_views, patch_size, num_register_tokens}`, f32 `rope_theta`, u32 `vocab_size,
  max_text_length, pad_token_id (0), cls_token_id (101), sep_token_id (102), period_token_id
  (1012), question_token_id (1029), text_groups.count`, INT32 arrays `text_groups.{tokens,
  lengths, pad_to}` (when count > 0), string `config_json` (json.dumps of model_config, last).
- tensors in the checkpoint's dtype (F32 stays F32, BF16 stays BF16, F16 is widened to F32),
  numpy shapes as PyTorch's: `vit.*` (cls_token / register_tokens without their leading 1,
  the patch conv as [D, 3*P*P], LayerScale folded into attn_o / fc2 rows, a missing k_proj bias
  as F32 zeros), `text.*` (BERT, HF names below `text.`), `text_proj.*`, `vit_proj.*`,
  `vl_fusion.{i}.*`, `vl_text.{i}.*` (MultiheadAttention's in_proj kept packed as attn_qkv),
  `act.*`, `state.proj.*`, `view_emb` (as stored, e.g. [1, V, D]).
"""
import argparse
import io
import json
import os
import pickle
import struct
import sys
import unicodedata
import zipfile
from collections import OrderedDict

import numpy as np
import gguf

ARCH = "turbovla"
F32, BF16 = gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.BF16

VIT = "vision_encoder.backbone"
TEXT = "text_encoder.bert"
VIT_PROJ = "vision_projection"
FUSION = "vision_language_interaction.fusion_layers"
VL_TEXT = "vision_language_interaction.text_layers"
ACT_DEC = "action_head.decoder"
STATE_PROJ = "action_head.state_projection"
VIEW_EMB = "view_embedding"
TEXT_PROJ = "text_encoder.text_projection"
# vla.cpp's built-in values for facebook/dinov3-vitb16-pretrain-lvd1689m (gated on the hub)
DINOV3_VITB16 = {"rope_theta": 100.0, "num_register_tokens": 4, "num_attention_heads": 12}
UNUSED = (f"{VIT}.norm.", f"{TEXT}.pooler.", f"{VIT}.embeddings.mask_token")
# vla.cpp writes these for bert-base-uncased whatever the vocabulary
SPECIAL_IDS = [("pad_token_id", "[PAD]", 0), ("cls_token_id", "[CLS]", 101), ("sep_token_id", "[SEP]", 102),
               ("period_token_id", ".", 1012), ("question_token_id", "?", 1029)]


# ---------------------------------------------------------------- reading the checkpoint
class T:
    """A tensor: float32 values (exact for f32 / bf16 / f16 sources) and the source dtype."""

    def __init__(self, v, dt):
        self.v, self.dt = v, dt

    @property
    def shape(self):
        return self.v.shape

    @property
    def ndim(self):
        return self.v.ndim


STORAGES = {"FloatStorage": "F32", "BFloat16Storage": "BF16", "HalfStorage": "F16", "DoubleStorage": "F64"}
RAW = {"F32": "<f4", "F16": "<f2", "F64": "<f8"}


def widen(raw, dt):
    if dt == "BF16":
        return (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
    return np.frombuffer(raw, RAW[dt]).astype(np.float32)


def _rebuild(storage, offset, shape, stride, *_):
    values, dt = storage
    a = values[offset:]
    arr = np.lib.stride_tricks.as_strided(a, shape=shape, strides=[s * a.itemsize for s in stride]).copy()
    return T(arr, dt)


class _Unpickler(pickle.Unpickler):
    """What `torch.load(weights_only=True)` accepts of a TurboVLA .pth: containers, numbers,
    strings and tensors over persistent storages (`data/<key>` in the zip)."""

    def __init__(self, z, root):
        super().__init__(io.BytesIO(z.read(f"{root}data.pkl")))
        self.z, self.root = z, root

    def find_class(self, module, name):
        if (module, name) == ("collections", "OrderedDict"):
            return OrderedDict
        if (module, name) in (("torch._utils", "_rebuild_tensor_v2"), ("torch._utils", "_rebuild_parameter")):
            return _rebuild if name == "_rebuild_tensor_v2" else (lambda t, *_: t)
        if module == "torch" and name in STORAGES:
            return STORAGES[name]
        raise pickle.UnpicklingError(f"{module}.{name}: torch.load(weights_only=True) refuses it too")

    def persistent_load(self, pid):
        _, dt, key, _, _ = pid
        return widen(self.z.read(f"{self.root}data/{key}"), dt), dt


def load_pth(path):
    z = zipfile.ZipFile(path)
    pkl = next(n for n in z.namelist() if n.endswith("data.pkl"))
    return _Unpickler(z, pkl[: -len("data.pkl")]).load()


def load_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, v in head.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        out[k] = T(widen(data[a:b], v["dtype"]).reshape(v["shape"]), v["dtype"])
    return out


class Tracked(dict):
    """A state dict that records which keys the writers read (vla.cpp's TrackedTensors)."""

    def __init__(self, *a):
        super().__init__(*a)
        self.read = set()

    def __getitem__(self, key):
        self.read.add(key)
        return super().__getitem__(key)


def load_checkpoint(ckpt):
    """(state dict, model_config) as vla.cpp's load_checkpoint gives them, `module.` dropped."""
    if os.path.isdir(ckpt) and not os.path.exists(os.path.join(ckpt, "model.safetensors")):
        pth = [f for f in sorted(os.listdir(ckpt)) if f.endswith((".pth", ".pt"))]
        if len(pth) != 1:
            sys.exit(f"{ckpt}: no model.safetensors and not exactly one .pth/.pt ({pth})")
        ckpt = os.path.join(ckpt, pth[0])
    if os.path.isfile(ckpt):
        blob = load_pth(ckpt)
        if not isinstance(blob, dict) or "model_state_dict" not in blob:
            sys.exit(f"{ckpt} is not a TurboVLA checkpoint (no model_state_dict)")
        state, cfg = blob["model_state_dict"], blob.get("model_config") or {}
    else:
        state = load_safetensors(os.path.join(ckpt, "model.safetensors"))
        p = os.path.join(ckpt, "config.json")
        cfg = json.load(open(p)) if os.path.exists(p) else {}
    return Tracked({(k[7:] if k.startswith("module.") else k): v for k, v in state.items()}), cfg


# ---------------------------------------------------------------- BERT WordPiece (uncased)
class WordPiece:
    """HF BertTokenizer(Fast) over a vocab.txt: BertNormalizer (clean text, CJK spacing,
    accents stripped when lower-casing unless strip_accents says otherwise), BertPreTokenizer
    (whitespace, each punctuation char alone), greedy longest-match WordPiece with "##"
    continuations and [UNK] for a word that does not split (or is over 100 chars)."""

    def __init__(self, folder):
        with open(os.path.join(folder, "vocab.txt"), encoding="utf-8") as f:
            self.vocab = {}
            for i, line in enumerate(f):
                self.vocab.setdefault(line.rstrip("\n"), i)
        cfg = {}
        p = os.path.join(folder, "tokenizer_config.json")
        if os.path.exists(p):
            cfg = json.load(open(p, encoding="utf-8"))
        self.lower = cfg.get("do_lower_case", True)
        strip = cfg.get("strip_accents")
        self.strip = self.lower if strip is None else strip
        # added tokens are matched in the raw text, before normalization (BERT's are not normalized)
        self.special = [t for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]") if t in self.vocab]
        p = os.path.join(folder, "tokenizer.json")
        if os.path.exists(p):
            added = json.load(open(p, encoding="utf-8")).get("added_tokens", [])
            self.special = [a["content"] for a in added if not a.get("normalized", False)] or self.special

    def id(self, tok):
        return self.vocab.get(tok)

    @staticmethod
    def _punct(ch):
        cp = ord(ch)
        if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
            return True
        return unicodedata.category(ch).startswith("P")

    @staticmethod
    def _cjk(cp):
        return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF
                or 0x2A700 <= cp <= 0x2B73F or 0x2B740 <= cp <= 0x2B81F or 0x2B820 <= cp <= 0x2CEAF
                or 0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F)

    def normalize(self, text):
        out = []
        for ch in text:
            cp = ord(ch)
            if cp == 0 or cp == 0xFFFD or (ch not in "\t\n\r" and unicodedata.category(ch) in ("Cc", "Cf", "Co", "Cs")):
                continue
            if ch in "\t\n\r\u2028\u2029" or unicodedata.category(ch) == "Zs":
                out.append(" ")
            elif self._cjk(cp):
                out.append(f" {ch} ")
            else:
                out.append(ch)
        text = "".join(out)
        if self.strip:
            text = "".join(c for c in unicodedata.normalize("NFD", text) if unicodedata.category(c) != "Mn")
        # char by char, as the tokenizers crate lower-cases (no final-sigma context)
        return "".join(c.lower() for c in text) if self.lower else text

    def words(self, text):
        for chunk in self.normalize(text).split():
            cur = ""
            for ch in chunk:
                if self._punct(ch):
                    if cur:
                        yield cur
                    cur = ""
                    yield ch
                else:
                    cur += ch
            if cur:
                yield cur

    def encode(self, text, max_length):
        """[CLS] + pieces + [SEP], truncated to max_length as `tok(text, truncation=True,
        max_length=...)` does."""
        unk = self.vocab["[UNK]"]
        ids = []
        for part in self.split_special(text):
            if isinstance(part, int):
                ids.append(part)
            else:
                ids += self.pieces(part, unk)
        return [self.vocab["[CLS]"]] + ids[: max(0, max_length - 2)] + [self.vocab["[SEP]"]]

    def split_special(self, text):
        """The raw text cut at the added (special) tokens: their ids, and the text between."""
        i, start = 0, 0
        while i < len(text):
            hit = max((t for t in self.special if text.startswith(t, i)), key=len, default=None)
            if hit is None:
                i += 1
                continue
            if i > start:
                yield text[start:i]
            yield self.vocab[hit]
            i = start = i + len(hit)
        if start < len(text):
            yield text[start:]

    def pieces(self, text, unk):
        ids = []
        for w in self.words(text):
            if len(w) > 100:
                ids.append(unk)
                continue
            pieces, start = [], 0
            while start < len(w):
                end = len(w)
                while end > start:
                    sub = w[start:end] if start == 0 else "##" + w[start:end]
                    if sub in self.vocab:
                        pieces.append(self.vocab[sub])
                        break
                    end -= 1
                if end == start:
                    pieces = [unk]
                    break
                start = end
            ids += pieces
        return ids


# ---------------------------------------------------------------- dims (vla.cpp's TurboVLADims)
def max_layer(keys, pfx):
    m = -1
    for k in keys:
        if k.startswith(pfx):
            try:
                m = max(m, int(k[len(pfx):].split(".", 1)[0]))
            except ValueError:
                pass
    return m + 1


def get(sd, key):
    if key not in sd:
        sys.exit(f"Required tensor not found: {key}")
    return sd[key]


def dims_of(sd, cfg, dino):
    keys = set(sd.keys())
    d = {}
    d["vit_dim"] = get(sd, f"{VIT}.layer.0.attention.q_proj.weight").shape[0]
    d["vit_layers"] = max_layer(keys, f"{VIT}.layer.")
    d["text_dim"] = get(sd, f"{TEXT}.encoder.layer.0.attention.self.query.weight").shape[0]
    d["text_layers"] = max_layer(keys, f"{TEXT}.encoder.layer.")
    d["num_fusion_layers"] = max_layer(keys, f"{FUSION}.")
    d["num_text_layers"] = max_layer(keys, f"{VL_TEXT}.")
    inter = cfg.get("interaction", {})
    d["hidden"] = int(inter.get("hidden_dim", 256))
    nheads = int(inter.get("nheads", 8))
    d["fusion_heads"] = max(1, nheads // 2)
    fusion_dim = int(inter.get("enhancer_inner_dim", 0))
    if fusion_dim <= 0 or fusion_dim % d["fusion_heads"]:
        sys.exit("interaction.enhancer_inner_dim must be divisible by fusion_heads")
    d["fusion_head_dim"] = fusion_dim // d["fusion_heads"]
    d["text_enhancer_heads"] = max(1, nheads // 2)
    d["text_enhancer_head_dim"] = d["hidden"] // d["text_enhancer_heads"]
    d["action_heads"] = nheads
    d["action_head_dim"] = d["hidden"] // nheads
    d["num_state_tokens"] = int(cfg.get("action", {}).get("num_state_tokens", 2))
    d["num_action_decoder_layers"] = max_layer(keys, f"{ACT_DEC}.decoder.layers.")
    d["action_horizon"] = get(sd, f"{ACT_DEC}.action_queries.weight").shape[0]
    d["action_dim"] = get(sd, f"{ACT_DEC}.action_projection.layers.2.weight").shape[0]
    d["state_dim"] = get(sd, f"{STATE_PROJ}.net.1.weight").shape[1]
    view = get(sd, VIEW_EMB)
    if view.ndim == 3 and view.shape[0] == 1:
        d["num_views"] = view.shape[1]
    elif view.ndim == 2:
        d["num_views"] = view.shape[0]
    else:
        sys.exit(f"Unexpected view_embedding shape: {tuple(view.shape)}")
    size = cfg.get("vision", {}).get("image_size", cfg.get("image_size"))
    if isinstance(size, (list, tuple)):
        if not size:
            sys.exit("empty image_size in config")
        size = size[0]
    if size is None:
        size = dino.get("image_size") if dino else None
        pos = sd.get(f"{VIT}.embeddings.position_embeddings.weight") if not size else None
        patch = sd.get(f"{VIT}.embeddings.patch_embeddings.weight")
        if pos is not None and patch is not None and patch.ndim == 4:
            n = (pos.shape[0] if pos.ndim == 2 else pos.shape[1]) - 1
            g = int(n ** 0.5)
            size = g * patch.shape[2] if g * g == n else None
        if not size:
            sys.exit("Cannot determine image_size.")
    d["image_size"] = int(size)
    patch = get(sd, f"{VIT}.embeddings.patch_embeddings.weight")
    if patch.ndim != 4:
        sys.exit("Cannot determine patch_size from patch_embeddings")
    d["patch_size"] = patch.shape[2]
    reg = sd.get(f"{VIT}.embeddings.register_tokens")
    d["num_register_tokens"] = reg.shape[1] if reg is not None and reg.ndim == 3 else 0
    if "rope_theta" not in dino:
        backbone = cfg.get("vision", {}).get("model_name_or_path", "")
        if "dinov3-vitb16" not in backbone:
            sys.exit(f"unknown DINOv3 backbone {backbone!r}; pass --dinov3-config")
        dino = DINOV3_VITB16
    d["rope_theta"] = float(dino["rope_theta"])
    if str(dino.get("rope_normalize_coords", "separate")) != "separate":
        sys.exit("unsupported DINOv3 rope coordinate normalization")
    if int(dino.get("num_register_tokens", d["num_register_tokens"])) != d["num_register_tokens"]:
        sys.exit("DINOv3 config num_register_tokens disagrees with checkpoint weights")
    d["vit_heads"] = int(dino.get("num_attention_heads", 0))
    if d["vit_heads"] <= 0 or d["vit_dim"] % d["vit_heads"]:
        sys.exit("DINOv3 config num_attention_heads is missing or does not divide the ViT width")
    d["vocab_size"] = get(sd, f"{TEXT}.embeddings.word_embeddings.weight").shape[0]
    return {k: (v if isinstance(v, float) else int(v)) for k, v in d.items()}


# ---------------------------------------------------------------- torch's arithmetic on dtypes
def bf16_bits(a):
    """float32 -> bf16 bits, round to nearest even (torch's float -> bfloat16)."""
    u = np.ascontiguousarray(a, np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def mul(a, b):
    """`a * b` as torch computes it: the promoted dtype (same dtype kept, any mix -> f32), the
    product of the f32 values rounded once to it."""
    dt = a.dt if a.dt == b.dt else "F32"
    p = (a.v * b.v).astype(np.float32)
    if dt == "BF16":
        p = (bf16_bits(p).astype(np.uint32) << 16).view(np.float32)
    elif dt == "F16":
        p = p.astype(np.float16).astype(np.float32)
    return T(p, dt)


# ---------------------------------------------------------------- writing
def subfolder(ckpt, test):
    """The one sub-folder of a checkpoint directory passing `test`, else None."""
    if not os.path.isdir(ckpt):
        return None
    found = [os.path.join(ckpt, f) for f in sorted(os.listdir(ckpt)) if test(os.path.join(ckpt, f))]
    return found[0] if len(found) == 1 else None


def is_dinov3(folder):
    p = os.path.join(folder, "config.json")
    return os.path.isfile(p) and str(json.load(open(p)).get("model_type", "")).startswith("dinov3")


def write(args):
    sd, cfg = load_checkpoint(args.ckpt)
    if args.text_model_name is not None:
        cfg.setdefault("text", {})["model_name_or_path"] = args.text_model_name
    dino_cfg = args.dinov3_config
    if dino_cfg is None:
        folder = subfolder(args.ckpt, is_dinov3)
        dino_cfg = os.path.join(folder, "config.json") if folder else None
    dino = json.load(open(dino_cfg)) if dino_cfg else {}
    d = dims_of(sd, cfg, dino)
    text_cfg, inter_cfg = cfg.get("text", {}), cfg.get("interaction", {})
    if (inter_cfg.get("residual_style", "normalized") != "normalized"
            or inter_cfg.get("padding_strategy", "key_padding_mask") != "key_padding_mask"
            or text_cfg.get("zero_padded_tokens", False)
            or not text_cfg.get("sub_sentence_present", True)):
        sys.exit("unsupported TurboVLA variant: vla.cpp implements residual_style=normalized, "
                 "padding_strategy=key_padding_mask, zero_padded_tokens=false, sub_sentence_present=true")

    w = gguf.GGUFWriter(args.out, arch=ARCH)
    w.add_string(f"{ARCH}.architecture", ARCH)
    kv = lambda k: f"{ARCH}.{k}"
    u32 = lambda k, v: w.add_uint32(kv(k), int(v))
    for k in ("hidden", "vit_dim", "vit_layers"):
        u32(k, d[k])
    u32("vit_head_dim", d["vit_dim"] // d["vit_heads"])
    u32("vit_heads", d["vit_heads"])
    u32("text_dim", d["text_dim"])
    u32("text_layers", d["text_layers"])
    u32("text_head_dim", 64)  # vla.cpp's constants (bert-base), whatever the BERT
    u32("text_heads", 12)
    for k in ("num_fusion_layers", "fusion_heads", "fusion_head_dim", "num_text_layers", "text_enhancer_heads",
              "text_enhancer_head_dim", "action_heads", "action_head_dim", "num_action_decoder_layers",
              "action_dim", "state_dim", "num_state_tokens", "action_horizon", "image_size", "num_views",
              "patch_size", "num_register_tokens"):
        u32(k, d[k])
    w.add_float32(kv("rope_theta"), d["rope_theta"])
    u32("vocab_size", d["vocab_size"])
    pad_len = text_cfg.get("padding_length")
    if pad_len is None:
        sys.exit("checkpoint config has no text.padding_length; padding to the longest instruction "
                 "is not supported by vla.cpp")
    u32("max_text_length", pad_len)
    model_name = text_cfg.get("model_name_or_path", "bert-base-uncased")
    if model_name not in ("bert-base-uncased", "google-bert/bert-base-uncased"):
        sys.exit(f"vla.cpp refuses text.model_name_or_path {model_name!r} (bert-base-uncased only)")
    bert_dir = args.bert or subfolder(args.ckpt, lambda f: os.path.isfile(os.path.join(f, "vocab.txt")))
    tok = WordPiece(bert_dir) if bert_dir else None
    for key, token, value in SPECIAL_IDS:
        if tok is not None and tok.id(token) != value:
            print(f"warning: {bert_dir}: {token!r} is id {tok.id(token)}, but vla.cpp writes "
                  f"{key} = {value} (bert-base-uncased)", file=sys.stderr)
        u32(key, value)
    groups = text_cfg.get("padding_length_by_instruction") or {}
    u32("text_groups.count", len(groups))
    if groups:
        if tok is None:
            sys.exit("model_config.text.padding_length_by_instruction needs the BERT vocab: pass --bert DIR")
        ids, lengths, pad_to = [], [], []
        for instruction, length in sorted(groups.items()):
            seq = tok.encode(str(instruction), int(length))
            ids += seq
            lengths.append(len(seq))
            pad_to.append(int(length))
        w.add_array(kv("text_groups.tokens"), ids)
        w.add_array(kv("text_groups.lengths"), lengths)
        w.add_array(kv("text_groups.pad_to"), pad_to)

    def add(name, t):
        if t.dt == "BF16":
            w.add_tensor(name, bf16_bits(t.v), raw_shape=list(t.shape), raw_dtype=BF16)
        elif t.dt in ("F32", "F16"):
            w.add_tensor(name, np.ascontiguousarray(t.v, np.float32), raw_dtype=F32)
        else:
            sys.exit(f"unsupported dtype {t.dt} for {name} (vla.cpp takes f32, bf16, f16)")

    # DINOv3
    patch = sd[f"{VIT}.embeddings.patch_embeddings.weight"]
    cls = sd[f"{VIT}.embeddings.cls_token"]
    add("vit.cls_token", T(cls.v[0] if cls.shape[0] == 1 else cls.v, cls.dt))
    add("vit.patch_embed.weight", T(patch.v.reshape(d["vit_dim"], -1), patch.dt))
    add("vit.patch_embed.bias", sd[f"{VIT}.embeddings.patch_embeddings.bias"])
    if f"{VIT}.embeddings.register_tokens" in sd:
        reg = sd[f"{VIT}.embeddings.register_tokens"]
        add("vit.register_tokens", T(reg.v[0] if reg.shape[0] == 1 else reg.v, reg.dt))
    for i in range(d["vit_layers"]):
        L, o = f"{VIT}.layer.{i}", f"vit.blk.{i}"
        ls1, ls2 = sd[f"{L}.layer_scale1.lambda1"], sd[f"{L}.layer_scale2.lambda1"]
        col = lambda t: T(t.v.reshape(-1, 1), t.dt)
        kb = f"{L}.attention.k_proj.bias"
        b_k = sd[kb] if kb in sd else T(np.zeros(d["vit_dim"], np.float32), "F32")
        for p, b in (("q", None), ("k", b_k), ("v", None)):
            add(f"{o}.attn_{p}.weight", sd[f"{L}.attention.{p}_proj.weight"])
            add(f"{o}.attn_{p}.bias", b if b is not None else sd[f"{L}.attention.{p}_proj.bias"])
        add(f"{o}.attn_o.weight", mul(sd[f"{L}.attention.o_proj.weight"], col(ls1)))
        add(f"{o}.attn_o.bias", mul(sd[f"{L}.attention.o_proj.bias"], ls1))
        for n in ("ln1", "ln2"):
            src = "norm1" if n == "ln1" else "norm2"
            add(f"{o}.{n}.weight", sd[f"{L}.{src}.weight"])
            add(f"{o}.{n}.bias", sd[f"{L}.{src}.bias"])
        add(f"{o}.fc1.weight", sd[f"{L}.mlp.up_proj.weight"])
        add(f"{o}.fc1.bias", sd[f"{L}.mlp.up_proj.bias"])
        add(f"{o}.fc2.weight", mul(sd[f"{L}.mlp.down_proj.weight"], col(ls2)))
        add(f"{o}.fc2.bias", mul(sd[f"{L}.mlp.down_proj.bias"], ls2))

    # BERT
    e = f"{TEXT}.embeddings"
    for n in ("word_embeddings", "position_embeddings", "token_type_embeddings"):
        add(f"text.embed.{n}", sd[f"{e}.{n}.weight"])
    add("text.embed.LayerNorm.weight", sd[f"{e}.LayerNorm.weight"])
    add("text.embed.LayerNorm.bias", sd[f"{e}.LayerNorm.bias"])
    for i in range(d["text_layers"]):
        for n in ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense",
                  "attention.output.LayerNorm", "intermediate.dense", "output.dense", "output.LayerNorm"):
            for s in ("weight", "bias"):
                add(f"text.encoder.layer.{i}.{n}.{s}", sd[f"{TEXT}.encoder.layer.{i}.{n}.{s}"])
    add("text_proj.weight", sd[f"{TEXT_PROJ}.weight"])
    add("text_proj.bias", sd[f"{TEXT_PROJ}.bias"])

    # vision projection
    for n in ("input_norm.weight", "input_norm.bias", "mlp.0.weight", "mlp.0.bias", "mlp.3.weight", "mlp.3.bias",
              "skip.weight", "output_norm.weight", "output_norm.bias"):
        add(f"vit_proj.{n}", sd[f"{VIT_PROJ}.{n}"])

    # fusion, then the text enhancers
    for i in range(d["num_fusion_layers"]):
        L = f"{FUSION}.{i}"
        for src, dst in (("v_proj", "v_proj"), ("l_proj", "l_proj"), ("values_v_proj", "values_v"),
                         ("values_l_proj", "values_l"), ("out_v_proj", "out_v"), ("out_l_proj", "out_l")):
            add(f"vl_fusion.{i}.{dst}.weight", sd[f"{L}.attn.{src}.weight"])
            add(f"vl_fusion.{i}.{dst}.bias", sd[f"{L}.attn.{src}.bias"])
        for src, dst in (("layer_norm_v", "norm_v"), ("layer_norm_l", "norm_l")):
            add(f"vl_fusion.{i}.{dst}.weight", sd[f"{L}.{src}.weight"])
            add(f"vl_fusion.{i}.{dst}.bias", sd[f"{L}.{src}.bias"])
        add(f"vl_fusion.{i}.gamma_v", sd[f"{L}.gamma_v"])
        add(f"vl_fusion.{i}.gamma_l", sd[f"{L}.gamma_l"])
    for i in range(d["num_text_layers"]):
        L = f"{VL_TEXT}.{i}"
        add(f"vl_text.{i}.attn_qkv.weight", sd[f"{L}.self_attn.in_proj_weight"])
        add(f"vl_text.{i}.attn_qkv.bias", sd[f"{L}.self_attn.in_proj_bias"])
        add(f"vl_text.{i}.attn_o.weight", sd[f"{L}.self_attn.out_proj.weight"])
        add(f"vl_text.{i}.attn_o.bias", sd[f"{L}.self_attn.out_proj.bias"])
        for src, dst in (("norm1", "ln1"), ("linear1", "fc1"), ("linear2", "fc2"), ("norm2", "ln2")):
            add(f"vl_text.{i}.{dst}.weight", sd[f"{L}.{src}.weight"])
            add(f"vl_text.{i}.{dst}.bias", sd[f"{L}.{src}.bias"])

    # ACT decoder
    add("act.q.weight", sd[f"{ACT_DEC}.action_queries.weight"])
    for i in range(d["num_action_decoder_layers"]):
        L = f"{ACT_DEC}.decoder.layers.{i}"
        for src, dst in (("self_attn", "self"), ("multihead_attn", "cross")):
            add(f"act.dec.{i}.{dst}_qkv.weight", sd[f"{L}.{src}.in_proj_weight"])
            add(f"act.dec.{i}.{dst}_qkv.bias", sd[f"{L}.{src}.in_proj_bias"])
            add(f"act.dec.{i}.{dst}_out.weight", sd[f"{L}.{src}.out_proj.weight"])
            add(f"act.dec.{i}.{dst}_out.bias", sd[f"{L}.{src}.out_proj.bias"])
        for src, dst in (("norm1", "ln1"), ("norm2", "ln2"), ("norm3", "ln3"), ("linear1", "fc1"), ("linear2", "fc2")):
            add(f"act.dec.{i}.{dst}.weight", sd[f"{L}.{src}.weight"])
            add(f"act.dec.{i}.{dst}.bias", sd[f"{L}.{src}.bias"])
    for j in range(3):
        add(f"act.proj.{j}.weight", sd[f"{ACT_DEC}.action_projection.layers.{j}.weight"])
        add(f"act.proj.{j}.bias", sd[f"{ACT_DEC}.action_projection.layers.{j}.bias"])

    # state tokens, camera embeddings
    for n in ("0", "1", "4"):
        add(f"state.proj.{n}.weight", sd[f"{STATE_PROJ}.net.{n}.weight"])
        add(f"state.proj.{n}.bias", sd[f"{STATE_PROJ}.net.{n}.bias"])
    add("state.proj.output_norm.weight", sd[f"{STATE_PROJ}.output_norm.weight"])
    add("state.proj.output_norm.bias", sd[f"{STATE_PROJ}.output_norm.bias"])
    add("state.proj.position", sd[f"{STATE_PROJ}.position"])
    add("view_emb", sd[VIEW_EMB])

    if cfg:
        w.add_string(kv("config_json"), json.dumps(cfg))
    if args.verify:
        left = sorted(k for k in sd if k not in sd.read and not k.startswith(UNUSED))
        if left:
            sys.exit(f"{len(left)} checkpoint tensors not converted: {left[:20]}")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ckpt", required=True, help="TurboVLA .pth/.pt, or a directory (see above)")
    ap.add_argument("--out", required=True, help="output GGUF")
    ap.add_argument("--bert", default=None, help="BERT folder with vocab.txt (for the instruction padding table)")
    ap.add_argument("--dinov3-config", default=None, help="the DINOv3 backbone's config.json")
    ap.add_argument("--verify", action="store_true", help="fail on a checkpoint tensor left unconverted")
    ap.add_argument("--text-model-name", default=None,
                    help="set model_config.text.model_name_or_path first (it lands in config_json too): what a "
                         "vla.cpp user must edit into a checkpoint trained from a local BERT folder, since "
                         "vla.cpp takes only 'bert-base-uncased'")
    write(ap.parse_args())


if __name__ == "__main__":
    main()
