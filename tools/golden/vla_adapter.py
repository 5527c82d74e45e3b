"""Golden fixture for VLA-Adapter: OpenHelix-Team/VLA-Adapter's own model code, random weights.

Rerun (offline; the venv and the upstream checkout are outside the repo, CI never needs them):

    # the reference, a public GitHub repository (MIT), at the commit the fixture was made from
    git clone https://github.com/OpenHelix-Team/VLA-Adapter /tmp/upstream/VLA-Adapter
    git -C /tmp/upstream/VLA-Adapter checkout 838a36d
    HF_HUB_OFFLINE=1 /work/venv-lerobot061/bin/python tools/golden/vla_adapter.py \
        --upstream /tmp/upstream/VLA-Adapter                       # tests/fixtures/vla-adapter-tiny
    HF_HUB_OFFLINE=1 /work/venv-lerobot061/bin/python tools/golden/vla_adapter.py \
        --upstream /tmp/upstream/VLA-Adapter --size full --out DIR
        # the released sizes (timm's towers unchanged, 24 and 27 blocks; Qwen2.5-0.5B: 896 wide,
        # 24 layers, 14 / 2 heads, MLP 4864, the real 151936 embedding rows, more than the small
        # tokenizer's): ~1.35 B parameters, model.safetensors ~4.8 GB f32; not committed; for
        # tests/vla_adapter_golden.rs full_size_matches_the_reference (VLA_VLA_ADAPTER_GOLDEN=DIR)
        # and tools/golden/bench_vla_adapter.py

The venv is the lerobot 0.6.1 one of the other golden tools (torch 2.10, transformers 5.5.4, timm
1.0.31); only the files under prismatic/ of the checkout are imported (its package __init__ files,
which pull its training stack, are skipped). The default seed is 0; regenerating gives
byte-identical files.

What runs is the reference's `OpenVLAForActionPrediction.predict_action` (prismatic/extern/hf/
modeling_prismatic.py) with its `L1RegressionActionHead(use_pro_version=True)` and
`ProprioProjector` (prismatic/models/), on the LIBERO constants of prismatic/vla/constants.py
(chunk 8, action 7, proprio 8, 64 action queries, stop id 2), with these changes, all made in this
process only:
- sizes: timm.create_model builds the real timm models (`vit_large_patch14_reg4_dinov2.lvd142m`,
  `vit_so400m_patch14_siglip_224`: registers, LayerScale, no_embed_class, no class token, exact
  GELU, img_size 224) narrowed and 3 blocks deep (the reference reads block 2 of 3, its
  penultimate, as the released 23 of 24 and 26 of 27), with timm's 16 heads each: DINOv2 64 wide
  (MLP 128), SigLIP 48 wide (MLP 72); Qwen2 from transformers' own Qwen2Config, 32 wide (4 query / 2
  key-value heads of 8, MLP 48) and 24 layers deep as the released one (the head's 24 blocks read
  layers 1..24; MLPResNet hardcodes 24); the tokenizer a small Qwen-layout BPE
  (groot17.build_tokenizer) with Qwen's added tokens after it, so `<|im_start|>` etc. exist;
- timm 1.x: the model refuses timm outside 0.9.10-0.9.16 (`timm.__version__` is set to 0.9.16 for
  the check) and `get_intermediate_layers` returns a list where 0.9 returned a tuple, which
  `unpack_tuple` expects (it is made to unpack a list too); the tensor is the same;
- transformers 5: `post_init` calls `tie_weights(recompute_mapping=...)`, which the reference's
  `tie_weights()` (forwarding to the language model's) is made to accept;
- the reference's two hard `.to(torch.bfloat16)` casts (the per-layer hidden states in
  `_regression_or_discrete_prediction`, the proprio in `predict_action`) become float32: the whole
  fixture is float32, except the head's rotary tables, which stay computed in bf16 as the released
  model computes them (its `inv_freq` buffer is bf16 there; set so here);
- every tensor re-randomized (norm gains 1 + 0.2 N, biases 0.2 N, matrices N / sqrt(fan_in),
  LayerScale 0.5 + 0.2 N, the gate N(0, 1), embeddings and action queries 0.5 N);
- inputs: two cameras (primary 224 x 224, wrist 200 x 240: the processor's bicubic stretch),
  through the reference's processor steps (torchvision's resize / center_crop / to_tensor /
  normalize with the released preprocessor_config.json's tvf_*_params: ImageNet's statistics
  rounded to bf16 for DINOv2, 0.5 for SigLIP); the prompt as the reference's LIBERO client builds it
  (use_minivlm: the Qwen chat template); the state normalised by the client's normalize_proprio
  (BOUNDS_Q99 with a mask, clipped); one suite "libero_spatial_no_noops" of statistics.

Files (tests/fixtures/vla-adapter-tiny): the checkpoint as the reference saves it: config.json
(OpenVLAConfig), model.safetensors (the VLA's state dict), action_head--latest_checkpoint.pt and
proprio_projector--latest_checkpoint.pt (torch.save of the DDP-wrapped modules' state dicts:
keys prefixed "module."), dataset_statistics.json, tokenizer files; golden.json (sizes, prompt,
ids, versions) and golden.safetensors: image.{i} u8 [H, W, 3]; pixels.{i}.{dino,sig} [3, 224,
224] for the wrist camera (the one the processor resizes); dino.{i} [256, 64], sig.{i} [256, 48]
(each tower's output); patches [512, 32] (projector);
lm_in [L, 32]; adapter.{l} [64, 32] for every layer l and task.{l} [512, 32] for l in LAYERS
(hidden_states[l] at the
head's rows); proprio_norm [8]; proprio_feat [1, 32]; head.x0 [8, 32] (after fc1 + ReLU);
head.blk.{i} [8, 32] for i in BLOCKS; rope.{n}.cos / .sin [n, 4] (the head's tables for 8, 65,
512 positions); actions_norm [8, 7]; actions [8, 7] (unnormalised, as predict_action returns).
"""
import argparse
import importlib.machinery
import importlib.util
import json
import os
import shutil
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

SUITE = "libero_spatial_no_noops"
TASK = "Pick up the black bowl between the plate and the ramekin and place it on the plate"
LAYERS = [1, 2, 12, 23, 24]
BLOCKS = [0, 1, 22, 23]
DINO = dict(embed_dim=64, depth=3, num_heads=16, mlp_ratio=2.0)
SIG = dict(embed_dim=48, depth=3, num_heads=16, mlp_ratio=1.5)
TEXT = dict(hidden_size=32, num_hidden_layers=24, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=48, rms_norm_eps=1e-6, rope_theta=1e6, max_position_embeddings=32768,
            tie_word_embeddings=True, hidden_act="silu", attention_dropout=0.0, use_sliding_window=False)
FRAMES = [(224, 224), (200, 240)]


# ----------------------------------------------------------------------------- the reference

class _Float32Casts(importlib.machinery.SourceFileLoader):
    """The two hard bf16 casts of the reference become float32 (see the module doc)."""

    def get_data(self, path):
        data = super().get_data(path)
        if path.endswith(("modeling_prismatic.py", "action_heads.py")):
            n = data.count(b".to(torch.bfloat16)")
            assert n == 1, (path, n)
            data = data.replace(b".to(torch.bfloat16)", b".to(torch.float32)")
        return data


class _Finder:
    def __init__(self, root):
        self.root = root

    def find_spec(self, name, path=None, target=None):
        if not name.startswith("prismatic."):
            return None
        rel = name.split(".")
        file = os.path.join(self.root, *rel) + ".py"
        if not os.path.isfile(file):
            return None
        return importlib.util.spec_from_file_location(name, file, loader=_Float32Casts(name, file))


def import_reference(root):
    """The reference's modules from the checkout `root`, its package __init__ files skipped."""
    for pkg in ["prismatic", "prismatic.extern", "prismatic.extern.hf", "prismatic.models", "prismatic.vla",
                "prismatic.training"]:
        m = types.ModuleType(pkg)
        m.__path__ = [os.path.join(root, *pkg.split("."))]
        sys.modules[pkg] = m
    sys.meta_path.insert(0, _Finder(root))
    import timm
    import timm.models.vision_transformer as tvit
    assert tvit.VisionTransformer.get_intermediate_layers  # exists in timm 1.x
    constants = __import__("prismatic.vla.constants", fromlist=["x"])
    assert (constants.NUM_ACTIONS_CHUNK, constants.ACTION_DIM, constants.PROPRIO_DIM, constants.NUM_TOKENS) == (8, 7, 8, 64)
    mp = __import__("prismatic.extern.hf.modeling_prismatic", fromlist=["x"])
    cp = __import__("prismatic.extern.hf.configuration_prismatic", fromlist=["x"])
    heads = __import__("prismatic.models.action_heads", fromlist=["x"])
    proj = __import__("prismatic.models.projectors", fromlist=["x"])

    def unpack(fn):  # timm 1.x returns a list where 0.9 returned a tuple
        def wrapper(*a, **k):
            r = fn(*a, **k)
            return r[0] if isinstance(r, (tuple, list)) else r
        return wrapper
    mp.unpack_tuple = unpack
    real_create = timm.create_model

    def create(model_id, **kw):
        sizes = DINO if "dinov2" in model_id else SIG
        return real_create(model_id, **kw, **sizes)
    mp.timm.create_model = create
    mp.timm.__version__ = "0.9.16"
    # transformers 5 calls tie_weights(recompute_mapping=...); the reference's takes no argument
    cls = mp.PrismaticForConditionalGeneration
    cls.tie_weights = lambda self, *a, **k: self.language_model.tie_weights(*a, **k)
    return mp, cp, heads, proj, constants


FULL_TEXT = dict(TEXT, hidden_size=896, num_attention_heads=14, num_key_value_heads=2, intermediate_size=4864)


def build(root, tok, gen, full=False):
    global DINO, SIG, TEXT
    if full:  # timm's own sizes; Qwen2.5-0.5B's
        DINO, SIG, TEXT = dict(), dict(), FULL_TEXT
    mp, cp, heads, proj, constants = import_reference(root)
    vocab = 151936 if full else len(tok)
    text = dict(TEXT, vocab_size=vocab, bos_token_id=tok.convert_tokens_to_ids("<|endoftext|>"),
                eos_token_id=tok.convert_tokens_to_ids("<|endoftext|>"))
    cfg = cp.OpenVLAConfig(vision_backbone_id="dinosiglip-vit-so-224px", llm_backbone_id="qwen25-0_5b-extra",
                           arch_specifier="no-align+fused-gelu-mlp", use_fused_vision_backbone=True,
                           image_resize_strategy="resize-naive", text_config=text, llm_max_length=2048,
                           pad_token_id=32000, pad_to_multiple_of=64, norm_stats=None, n_action_bins=256)
    cfg._attn_implementation = "eager"
    vla = mp.OpenVLAForActionPrediction(cfg).float().eval()
    vla.vision_backbone.set_num_images_in_input(len(FRAMES))
    h = TEXT["hidden_size"]
    head = heads.L1RegressionActionHead(input_dim=h, hidden_dim=h, action_dim=constants.ACTION_DIM,
                                        use_pro_version=True).float().eval()
    pp = proj.ProprioProjector(llm_dim=h, proprio_dim=constants.PROPRIO_DIM).float().eval()
    for m in [vla, head, pp]:
        rerandomize(m, gen)
    for blk in head.model.mlp_resnet_blocks:  # the released model's bf16 table (module doc)
        blk.rope.inv_freq = blk.rope.inv_freq.to(torch.bfloat16)
    return vla, head, pp, mp, constants


def rerandomize(module, gen):
    embeddings = {f"{n}.weight" for n, m in module.named_modules() if isinstance(m, torch.nn.Embedding)}
    seen = set()
    with torch.no_grad():
        for name, t in module.state_dict(keep_vars=True).items():
            if t.data_ptr() in seen or t.dtype != torch.float32:
                continue
            seen.add(t.data_ptr())
            r = torch.randn(t.shape, generator=gen, dtype=torch.float32)
            leaf = name.rsplit(".", 1)[-1]
            if leaf == "scale_factor":
                v = 0.5 + 0.2 * r
            elif leaf == "gating_factor":
                v = r
            elif t.ndim == 1 and ("norm" in name or leaf == "weight"):
                v = 1.0 + 0.2 * r
            elif t.ndim == 1:
                v = 0.2 * r
            elif name in embeddings or name.endswith(("cls_token", "reg_token", "pos_embed")):
                v = 0.5 * r
            else:
                v = r / t[0].numel() ** 0.5
            t.data.copy_(v)


def make_stats(gen):
    def stat(d):
        lo = (torch.rand(d, generator=gen) * -2.0 - 0.5).double()
        hi = (torch.rand(d, generator=gen) * 2.0 + 0.5).double()
        mask = [True] * (d - 1) + [False]
        return {"mean": ((lo + hi) / 2).tolist(), "std": ((hi - lo) / 4).tolist(), "max": (hi + 0.3).tolist(),
                "min": (lo - 0.3).tolist(), "q01": lo.tolist(), "q99": hi.tolist(), "mask": mask}
    return {SUITE: {"action": stat(7), "proprio": stat(8), "num_transitions": 1000, "num_trajectories": 10}}


def frames(gen):
    """Smooth random frames (a gradient plus noise), as u8 [H, W, 3]."""
    out = []
    for h, w in FRAMES:
        y, x = torch.meshgrid(torch.linspace(0, 1, h), torch.linspace(0, 1, w), indexing="ij")
        base = torch.stack([y, x, (x + y) / 2], -1) * 180 + 30
        img = (base + torch.rand((h, w, 3), generator=gen) * 60).clamp(0, 255).to(torch.uint8)
        out.append(img)
    return out


def process(img, params):
    """The reference's PrismaticImageProcessor.apply_transform with the released tvf_* params."""
    import torchvision.transforms.functional as TVF
    from PIL import Image
    pil = Image.fromarray(img.numpy()).convert("RGB")
    towers = []
    for rz, cr, nm in zip(params["tvf_resize_params"], params["tvf_crop_params"], params["tvf_normalize_params"]):
        x = TVF.resize(pil, size=rz["size"], interpolation=TVF.InterpolationMode.BICUBIC, antialias=rz["antialias"])
        assert rz["interpolation"] == 3
        x = TVF.center_crop(x, cr["output_size"])
        t = TVF.to_tensor(x)
        towers.append(TVF.normalize(t, mean=nm["mean"], std=nm["std"]))
    return towers


def load_fixture(root, folder):
    """The reference rebuilt from a folder this tool wrote, as the LIBERO client loads it: the VLA
    from config.json + model.safetensors, the head and proprio projector from their .pt files
    ("module." dropped, as load_component_state_dict does). Returns (vla, head, pp, golden, info)."""
    from safetensors.torch import load_file
    info = json.load(open(os.path.join(folder, "golden.json")))
    global DINO, SIG, TEXT
    if info["size"] == "full":
        DINO, SIG, TEXT = dict(), dict(), FULL_TEXT
    mp, cp, heads, proj, constants = import_reference(root)
    cfg = cp.OpenVLAConfig.from_json_file(os.path.join(folder, "config.json"))
    cfg._attn_implementation = "eager"
    vla = mp.OpenVLAForActionPrediction(cfg).float().eval()
    missing, unexpected = vla.load_state_dict(load_file(os.path.join(folder, "model.safetensors")), strict=False)
    assert not unexpected and all("lm_head" in k for k in missing), (missing, unexpected)
    vla.vision_backbone.set_num_images_in_input(len(info["frames"]))
    vla.norm_stats = json.load(open(os.path.join(folder, "dataset_statistics.json")))
    h = cfg.text_config.hidden_size
    head = heads.L1RegressionActionHead(input_dim=h, hidden_dim=h, action_dim=constants.ACTION_DIM,
                                        use_pro_version=True).float().eval()
    pp = proj.ProprioProjector(llm_dim=h, proprio_dim=constants.PROPRIO_DIM).float().eval()
    strip = lambda sd: {k.removeprefix("module."): v.float() for k, v in sd.items()}  # noqa: E731
    head.load_state_dict(strip(torch.load(os.path.join(folder, "action_head--latest_checkpoint.pt"))))
    pp.load_state_dict(strip(torch.load(os.path.join(folder, "proprio_projector--latest_checkpoint.pt"))))
    for blk in head.model.mlp_resnet_blocks:  # the released model's bf16 table (module doc)
        blk.rope.inv_freq = blk.rope.inv_freq.to(torch.bfloat16)
    from safetensors.torch import load_file as lf
    return vla, head, pp, lf(os.path.join(folder, "golden.safetensors")), info


def recorded_inputs(root, g, info):
    """predict_action's inputs from a folder's recorded cameras, ids and normalised state."""
    pre = json.load(open(os.path.join(root, "pretrained_models", "configs", "preprocessor_config.json")))
    towers = [process(g[f"image.{i}"], pre) for i in range(len(info["frames"]))]
    pixel_values = torch.cat([torch.cat(t, 0) for t in towers], 0)[None]
    ids = torch.tensor([info["ids"]])
    return dict(input_ids=ids, unnorm_key=SUITE, proprio=g["proprio_norm"].double().numpy(),
                pixel_values=pixel_values, attention_mask=torch.ones_like(ids))


# ----------------------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--upstream", required=True, help="a checkout of OpenHelix-Team/VLA-Adapter")
    ap.add_argument("--out", default=os.path.join(HERE, "..", "..", "tests", "fixtures", "vla-adapter-tiny"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--size", choices=["tiny", "full"], default="tiny")
    args = ap.parse_args()
    root = os.path.abspath(args.upstream)
    out = os.path.abspath(args.out)
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)

    import groot17 as g17  # the Qwen-layout tokenizer builder
    tok = g17.build_tokenizer(out)
    vla, head, pp, mp, constants = build(root, tok, gen, full=args.size == "full")
    stats = make_stats(gen)
    vla.norm_stats = stats
    imgs = frames(gen)
    pre = json.load(open(os.path.join(root, "pretrained_models", "configs", "preprocessor_config.json")))
    towers = [process(i, pre) for i in imgs]
    pixel_values = torch.cat([torch.cat(t, 0) for t in towers], 0)[None]

    prompt = ("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
              f"<|im_start|>user\nWhat action should the robot take to {TASK.lower()}?<|im_end|>\n"
              "<|im_start|>assistant\n")
    enc = tok(prompt, return_tensors="pt")
    ids = enc["input_ids"]
    state = (torch.rand(8, generator=gen, dtype=torch.float64) * 3 - 1.5).numpy()
    sys.path.insert(0, os.path.join(root, "experiments", "robot"))
    p = stats[SUITE]["proprio"]  # the client's normalize_proprio (openvla_utils.py), BOUNDS_Q99
    mask, hi, lo = np.array(p["mask"]), np.array(p["q99"]), np.array(p["q01"])
    proprio = np.clip(np.where(mask, 2 * (state - lo) / (hi - lo + 1e-8) - 1, state), -1.0, 1.0)

    golden, rec = {}, {}
    hooks = []
    calls = {"dino": 0, "sig": 0}

    def tower(name):
        def hook(_m, _i, o):
            golden[f"{name}.{calls[name]}"] = o[0].detach().clone()
            calls[name] += 1
        return hook
    hooks.append(vla.vision_backbone.featurizer.register_forward_hook(tower("dino")))
    hooks.append(vla.vision_backbone.fused_featurizer.register_forward_hook(tower("sig")))
    hooks.append(vla.projector.register_forward_hook(lambda m, i, o: golden.__setitem__("patches", o[0].detach().clone())))

    def lm_hook(m, args, kwargs, o):
        rec["lm_in"] = kwargs["inputs_embeds"][0].detach().clone()
        rec["hidden"] = [x[0].detach().clone() for x in o.hidden_states]
    hooks.append(vla.language_model.register_forward_hook(lm_hook, with_kwargs=True))
    hooks.append(pp.register_forward_hook(lambda m, i, o: golden.__setitem__("proprio_feat", o.detach().clone())))
    hooks.append(head.model.fc1.register_forward_hook(
        lambda m, i, o: golden.__setitem__("head.x0", torch.relu(o)[0].detach().clone())))
    for b in BLOCKS:
        hooks.append(head.model.mlp_resnet_blocks[b].register_forward_hook(
            lambda m, i, o, b=b: golden.__setitem__(f"head.blk.{b}", o[0].detach().clone())))
    hooks.append(head.model.register_forward_hook(
        lambda m, i, o: golden.__setitem__("actions_norm", o[0].detach().clone())))
    with torch.no_grad():
        actions, _ = vla.predict_action(input_ids=ids, unnorm_key=SUITE, proprio=proprio, proprio_projector=pp,
                                        action_head=head, pixel_values=pixel_values,
                                        attention_mask=enc["attention_mask"])
        rope = head.model.mlp_resnet_blocks[0].rope
        for n in [8, 65, 512]:
            c, s = rope(seq_len=n, device="cpu", dtype=torch.float32)
            golden[f"rope.{n}.cos"], golden[f"rope.{n}.sin"] = c, s
    for h in hooks:
        h.remove()
    n = ids.shape[1]
    npatch = 256 * len(FRAMES)
    golden["lm_in"] = rec["lm_in"]
    for layer in range(1, len(rec["hidden"])):
        hs = rec["hidden"][layer]
        golden[f"adapter.{layer}"] = hs[npatch + n - 1: npatch + n - 1 + 64]
        if layer in LAYERS:
            golden[f"task.{layer}"] = hs[:npatch]
    for i, img in enumerate(imgs):
        golden[f"image.{i}"] = img
    golden["pixels.1.dino"], golden["pixels.1.sig"] = towers[1]
    golden["ids"] = ids[0].to(torch.float32)
    golden["proprio_norm"] = torch.from_numpy(proprio).float()
    golden["state"] = torch.from_numpy(state).float()
    golden["actions"] = torch.from_numpy(np.asarray(actions, dtype=np.float64)).float()
    save_file({k: v.contiguous() for k, v in golden.items()}, os.path.join(out, "golden.safetensors"))

    # the checkpoint as the reference saves it
    vla.config.norm_stats = stats
    sd = {k: v.detach().clone().contiguous() for k, v in vla.state_dict().items()}
    save_file(sd, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    vla.config.to_json_file(os.path.join(out, "config.json"))
    json.dump(stats, open(os.path.join(out, "dataset_statistics.json"), "w"), indent=1)
    class DDP(torch.nn.Module):  # what training saves: the DistributedDataParallel wrapper's state dict
        def __init__(self, m):
            super().__init__()
            self.module = m
    torch.save(DDP(head).state_dict(), os.path.join(out, "action_head--latest_checkpoint.pt"))
    torch.save(DDP(pp).state_dict(), os.path.join(out, "proprio_projector--latest_checkpoint.pt"))
    import timm
    import transformers
    info = {
        "generator": "tools/golden/vla_adapter.py", "upstream": "OpenHelix-Team/VLA-Adapter 838a36d",
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "timm": "1.0.31 (reported as 0.9.16 to the model's check)", "numpy": np.__version__},
        "seed": args.seed, "size": args.size, "suite": SUITE, "task": TASK, "prompt": prompt, "ids": ids[0].tolist(),
        "frames": FRAMES, "layers": LAYERS, "blocks": BLOCKS, "n_prompt": n,
        "sizes": {"dino": DINO, "sig": SIG, "text": TEXT},
    }
    json.dump(info, open(os.path.join(out, "golden.json"), "w"), indent=1)
    print("actions", actions)
    print("wrote", out)


if __name__ == "__main__":
    main()
