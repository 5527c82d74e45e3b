#!/usr/bin/env python3
"""An independent writer of ACT GGUFs in vla.cpp's layout (numpy + gguf-py), for
tests/act_golden.rs.

  vlacpp_act_writer.py CKPT_DIR OUT.gguf

CKPT_DIR is a lerobot ACT checkpoint (config.json, model.safetensors, policy_preprocessor.json
and policy_postprocessor.json with their normalizer / unnormalizer safetensors). OUT is what
vla.cpp's `scripts/convert_act_to_gguf.py` (VinRobotics/vla.cpp d8e6c2f) writes for it, from
the facts of its layout alone, without vla-rs code.

- `general.architecture` and `act.architecture` "act"; u32 keys `act.{dim_model, n_heads,
  dim_feedforward, n_encoder_layers, n_decoder_layers, pre_norm, gelu, chunk_size,
  n_action_steps, state_dim, action_dim, num_views, image_height, image_width}` (pre_norm and
  gelu as 0 / 1, state_dim 0 without a state); `act.backbone_blocks` an INT32 array of the 4
  BasicBlock counts; `act.cameras` a string array of the VISUAL features in input_features
  order; `act.config_json` the whole config.json as json.dumps writes it. Nothing else.
- tensors, all F32, numpy shapes as PyTorch's (gguf-py stores them reversed as ggml ne):
  the ResNet as `bb.conv1`, `bb.layer{L}.{B}.{conv1, conv2, down}` `.weight` [O, C, KH, KW]
  with the frozen BatchNorm folded in (float64, eps 1e-5: scale = gamma / sqrt(var + eps),
  W * scale[o], beta - mean * scale) and `.bias` [O] (`down` only where the block has a
  downsample; `fc` dropped); `enc.blk.{i}.{attn_q, attn_k, attn_v, attn_o, fc1, fc2, ln1,
  ln2}` (the in_proj split by rows into q / k / v), `enc.norm` only with pre_norm,
  `dec.blk.{i}.{attn_*, cross_*, fc1, fc2, ln1, ln2, ln3}`, `dec.norm`; `latent_tok` (the
  latent projection's bias: the latent is zero at inference), `state_proj` (with a state),
  `pos_1d` [n_1d, D], `img_proj.weight` [D, C] (the 1x1 conv as a matrix) and `.bias`,
  `dec.pos` [chunk, D], `action_head`; statistics `image_mean` / `image_std` [views, 3] in
  camera order, `state_mean` / `state_std`, `action_mean` / `action_std` (the raw std: vla.cpp
  adds its 1e-8 at load), from the normalizer's state file (the unnormalizer's for the
  action), else model.safetensors' legacy `normalize_inputs` / `unnormalize_outputs` buffers.
  No VAE encoder.

vla.cpp's converter knows the backbones `resnet18` and `resnet34` by name; the fixtures' narrow
`resnet18_tiny` has resnet18's block counts (2, 2, 2, 2), which is what this writes for it
(the counts are taken from the checkpoint and must be one of the two).
"""
import json
import sys

import numpy as np
import gguf
from gguf import GGUFValueType as V

from vlacpp_layout import finish, safetensors

ARCH = "act"
BN_EPS = 1e-5
RESNET_BLOCKS = {"resnet18": (2, 2, 2, 2), "resnet34": (3, 4, 6, 3)}


def block_counts(sd, backbone):
    """BasicBlocks per stage in the checkpoint; they must be the named torchvision ResNet's."""
    counts = []
    for layer in range(1, 5):
        n = 0
        while f"model.backbone.layer{layer}.{n}.conv1.weight" in sd:
            n += 1
        counts.append(n)
    counts = tuple(counts)
    name = next((k for k in RESNET_BLOCKS if backbone == k or backbone.startswith(k + "_")), None)
    if name is None or RESNET_BLOCKS[name] != counts:
        sys.exit(f"vision_backbone {backbone!r} with blocks {counts}: vla.cpp takes resnet18 / resnet34")
    return counts


def folded(sd, conv, bn):
    """A conv without bias followed by a frozen BatchNorm, as one conv with a bias."""
    g = lambda k: sd[f"{bn}.{k}"].astype(np.float64)
    scale = g("weight") / np.sqrt(g("running_var") + BN_EPS)
    w = sd[f"{conv}.weight"].astype(np.float64) * scale[:, None, None, None]
    b = g("bias") - g("running_mean") * scale
    return w.astype(np.float32), b.astype(np.float32)


def stats_file(ckpt, processor, registry):
    try:
        steps = json.load(open(f"{ckpt}/{processor}"))["steps"]
    except FileNotFoundError:
        return {}
    step = next((s for s in steps if s.get("registry_name") == registry and s.get("state_file")), None)
    return safetensors(f"{ckpt}/{step['state_file']}") if step else {}


def mean_std(proc, sd, feature, legacy, dim):
    for src, pfx in ((proc, feature), (sd, legacy)):
        if f"{pfx}.mean" in src:
            mean, std = src[f"{pfx}.mean"].reshape(-1), src[f"{pfx}.std"].reshape(-1)
            if mean.size != dim or std.size != dim:
                sys.exit(f"{feature}: mean/std of {mean.size}/{std.size} values, expected {dim}")
            return mean, std
    sys.exit(f"no mean/std of {feature}")


def main(ckpt, out):
    cfg = json.load(open(f"{ckpt}/config.json"))
    if cfg.get("type") != "act":
        sys.exit(f"not an ACT config: type {cfg.get('type')!r}")
    feats = cfg["input_features"]
    cams = [k for k, v in feats.items() if v["type"] == "VISUAL"]
    has_state = "observation.state" in feats
    if any(v["type"] == "ENV" for v in feats.values()) or not cams:
        sys.exit("vla.cpp takes cameras (at least one) and an optional state, no environment state")
    sizes = {tuple(feats[k]["shape"]) for k in cams}
    if len(sizes) != 1:
        sys.exit(f"cameras of different sizes: {sizes}")
    (_, img_h, img_w), = sizes
    if cfg.get("replace_final_stride_with_dilation"):
        sys.exit("replace_final_stride_with_dilation: not in vla.cpp")
    act_fn = cfg.get("feedforward_activation", "relu")
    if act_fn not in ("relu", "gelu"):
        sys.exit(f"feedforward_activation {act_fn!r}: vla.cpp takes relu / gelu")
    norm = cfg.get("normalization_mapping") or {}
    if any(norm.get(t, "MEAN_STD") != "MEAN_STD" for t in ("VISUAL", "STATE", "ACTION")):
        sys.exit(f"normalization_mapping {norm}: vla.cpp takes MEAN_STD only")

    sd = safetensors(f"{ckpt}/model.safetensors")
    blocks = block_counts(sd, cfg.get("vision_backbone", "resnet18"))
    d = int(cfg["dim_model"])
    pre_norm = bool(cfg.get("pre_norm", False))
    n_enc, n_dec = int(cfg["n_encoder_layers"]), int(cfg["n_decoder_layers"])
    chunk = int(cfg["chunk_size"])
    state_dim = int(feats["observation.state"]["shape"][0]) if has_state else 0
    action_dim = int(cfg["output_features"]["action"]["shape"][0])
    assert sd["model.decoder_pos_embed.weight"].shape == (chunk, d)
    assert sd["model.action_head.weight"].shape == (action_dim, d)

    w = gguf.GGUFWriter(out, arch=ARCH)
    kv = lambda k: f"{ARCH}.{k}"
    w.add_string(kv("architecture"), ARCH)
    for k, v in [("dim_model", d), ("n_heads", cfg["n_heads"]), ("dim_feedforward", cfg["dim_feedforward"]),
                 ("n_encoder_layers", n_enc), ("n_decoder_layers", n_dec), ("pre_norm", pre_norm),
                 ("gelu", act_fn == "gelu"), ("chunk_size", chunk),
                 ("n_action_steps", cfg.get("n_action_steps", chunk)), ("state_dim", state_dim),
                 ("action_dim", action_dim), ("num_views", len(cams)), ("image_height", img_h),
                 ("image_width", img_w)]:
        w.add_uint32(kv(k), int(v))
    w.add_key_value(kv("backbone_blocks"), list(blocks), V.ARRAY, sub_type=V.INT32)
    w.add_key_value(kv("cameras"), cams, V.ARRAY, sub_type=V.STRING)

    add = lambda name, a: w.add_tensor(name, np.ascontiguousarray(a, dtype=np.float32))

    def add_pair(dst, src):
        add(f"{dst}.weight", sd[f"{src}.weight"])
        add(f"{dst}.bias", sd[f"{src}.bias"])

    # the ResNet, its BatchNorms folded
    def conv_bn(dst, conv, bn):
        wt, b = folded(sd, conv, bn)
        add(f"{dst}.weight", wt)
        add(f"{dst}.bias", b)

    bb = "model.backbone"
    conv_bn("bb.conv1", f"{bb}.conv1", f"{bb}.bn1")
    for layer, n in enumerate(blocks, start=1):
        for b in range(n):
            s, t = f"{bb}.layer{layer}.{b}", f"bb.layer{layer}.{b}"
            conv_bn(f"{t}.conv1", f"{s}.conv1", f"{s}.bn1")
            conv_bn(f"{t}.conv2", f"{s}.conv2", f"{s}.bn2")
            if f"{s}.downsample.0.weight" in sd:
                conv_bn(f"{t}.down", f"{s}.downsample.0", f"{s}.downsample.1")

    # the transformer: nn.MultiheadAttention's in_proj split into q / k / v rows
    def attention(dst, src):
        wt, b = sd[f"{src}.in_proj_weight"], sd[f"{src}.in_proj_bias"]
        for i, x in enumerate("qkv"):
            add(f"{dst}_{x}.weight", wt[i * d:(i + 1) * d])
            add(f"{dst}_{x}.bias", b[i * d:(i + 1) * d])
        add_pair(f"{dst}_o", f"{src}.out_proj")

    def ffn_norms(dst, src, norms):
        add_pair(f"{dst}.fc1", f"{src}.linear1")
        add_pair(f"{dst}.fc2", f"{src}.linear2")
        for i in range(1, norms + 1):
            add_pair(f"{dst}.ln{i}", f"{src}.norm{i}")

    for i in range(n_enc):
        s, t = f"model.encoder.layers.{i}", f"enc.blk.{i}"
        attention(f"{t}.attn", f"{s}.self_attn")
        ffn_norms(t, s, 2)
    if pre_norm:
        add_pair("enc.norm", "model.encoder.norm")
    for i in range(n_dec):
        s, t = f"model.decoder.layers.{i}", f"dec.blk.{i}"
        attention(f"{t}.attn", f"{s}.self_attn")
        attention(f"{t}.cross", f"{s}.multihead_attn")
        ffn_norms(t, s, 3)
    add_pair("dec.norm", "model.decoder.norm")

    # inputs and the head
    add("latent_tok", sd["model.encoder_latent_input_proj.bias"])
    if has_state:
        add_pair("state_proj", "model.encoder_robot_state_input_proj")
    add("pos_1d", sd["model.encoder_1d_feature_pos_embed.weight"])
    proj = sd["model.encoder_img_feat_input_proj.weight"]
    add("img_proj.weight", proj.reshape(proj.shape[0], proj.shape[1]))
    add("img_proj.bias", sd["model.encoder_img_feat_input_proj.bias"])
    add("dec.pos", sd["model.decoder_pos_embed.weight"])
    add_pair("action_head", "model.action_head")

    # statistics
    pre = stats_file(ckpt, "policy_preprocessor.json", "normalizer_processor")
    post = stats_file(ckpt, "policy_postprocessor.json", "unnormalizer_processor")
    legacy = lambda f: "normalize_inputs.buffer_" + f.replace(".", "_")
    img = [mean_std(pre, sd, c, legacy(c), 3) for c in cams]
    add("image_mean", np.stack([m for m, _ in img]))
    add("image_std", np.stack([s for _, s in img]))
    if has_state:
        m, s = mean_std(pre, sd, "observation.state", legacy("observation.state"), state_dim)
        add("state_mean", m)
        add("state_std", s)
    m, s = mean_std(post, sd, "action", "unnormalize_outputs.buffer_action", action_dim)
    add("action_mean", m)
    add("action_std", s)
    w.add_string(kv("config_json"), json.dumps(cfg))
    finish(w)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(*sys.argv[1:])
