"""Golden fixture for GR00T N1.6: NVIDIA Isaac-GR00T's own `Gr00tN1d6` (model, processor, Eagle
backbone code) with random weights, every tensor re-randomized.

Rerun (anyone, offline; the venv and the checkout are outside the repo and CI never needs them):

    # /work/venv-lerobot061 as tools/golden/groot17.py makes it (torch 2.10, transformers 5.5.4), plus
    /work/venv-lerobot061/bin/pip install "albumentations==1.4.18" lmdb tyro scipy
    # Isaac-GR00T's n1.6.1-release branch (NVIDIA commit 5dc80c4afd726b34faad1d8f7e007a13b34e4c88;
    # the N1.7 release deleted gr00t_n1d6 and the Eagle folder from main), a checkout of at least
    # gr00t/model, gr00t/configs, gr00t/data and gr00t/policy:
    HF_HUB_OFFLINE=1 /work/venv-lerobot061/bin/python tools/golden/groot16.py --upstream DIR
    HF_HUB_OFFLINE=1 /work/venv-lerobot061/bin/python tools/golden/groot16.py --upstream DIR \\
        --check tests/fixtures/groot16-tiny     # reload the folder, reproduce the chunk

Nothing is downloaded and nothing of the checkout is copied into this repository: the tool imports
it from DIR. Isaac-GR00T pins transformers 4.51.3 and flash-attn; under transformers 5.5.4 without
flash-attn the tool makes these changes, in this process only:
- `gr00t.model` is registered as a bare package (its `__init__` imports the training pipeline);
  `gr00t/configs/model/gr00t_n1d6.py` is executed without its explicit `@dataclass` line
  (transformers 5 makes every config a dataclass itself, and the second pass fails);
  the Eagle folder is registered as the package `eagle3` (its modules import each other
  relatively); `transformers.image_utils.VideoInput` is given a stand-in (gone in 5.x).
- Eagle's model is built from explicit tiny configs with its vision and language models passed in
  (which skips its flash-attention asserts); `Siglip2PreTrainedModel._init_weights` is a no-op
  (5.x calls it on a class name the file does not define; every tensor is re-randomized anyway).
- SigLIP2 packs every image of a request into one sequence and relies on flash-attn's varlen
  kernel to attend within each image: the tool registers that attention as an ordinary
  softmax attention within each image's segment (`seq_len_list`), float32.
- Eagle's fast image processor does not load on transformers 5.x (its base class changed): the
  tool's stand-in does what it does with `do_resize=False` (Eagle's preprocessor_config.json):
  RGB, `x / 255`, `(x - 0.5) / 0.5`, channels first, one [1, 3, H, W] tensor per image, and its
  `image_sizes`. The resize before it is Eagle's own `fetch_image` (smart_resize, factor 28,
  PIL bicubic), which the processor's `process_vision_info` calls.
- The action head draws its initial noise with `torch.randn`; the tool hands it the explicit
  `noise` tensor instead. Everything runs in float32 (the released model runs bf16).
- The processor's tokenizer is a small byte-level BPE trained here (tools/golden/groot17.py's
  builder) with Eagle's 37 added tokens in their real order and Eagle's chat template read from
  the checkout.

Sizes: `tiny` (a 6 x 6 patch grid, frames needing no resize) and `frame` (the released frame
geometry: an 18 x 18 grid from a 16 x 16 table, 256 -> 252 through PIL's bicubic) at tiny widths.

Writes tests/fixtures/groot16-SIZE/ (or --out):
  config.json, model.safetensors  the Gr00tN1d6 checkpoint as Isaac-GR00T saves it
                                   (backbone.model.*, action_head.*; the LM already cut to
                                   select_layer layers)
  processor_config.json, statistics.json, embodiment_id.json   the processor's save_pretrained
  eagle/                           the tiny Eagle folder: config.json (vision and text sizes,
                                   image_token_index), the tokenizer files with the chat template
  arch.json                        the sizes and the formulas below
  golden.safetensors               inputs, stages, outputs (float32 unless noted)
  golden.json                      versions, seeds, prompt, ids, statistics, tensor list
"""
import argparse
import contextlib
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import groot17 as g17  # noqa: E402  (the tokenizer builder, CORPUS, TASK)

import numpy as np  # noqa: E402
import torch  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

EMBODIMENT = "new_embodiment"
CAMERAS = ["front", "wrist"]
STATE_GROUPS = [("x", 3), ("gripper", 2)]
ACTION_GROUPS = [("x", 3), ("gripper", 1)]
SIZES = {
    "tiny": dict(
        # SigLIP2: a 4 x 4 native position table resized to the frame's 6 x 6 patch grid
        vision=dict(hidden_size=32, intermediate_size=64, num_attention_heads=2, num_hidden_layers=3,
                    num_patches=16, patch_size=14, full_attention_indexes=[], use_windows_attn=False,
                    use_rope=False, hidden_act="gelu_pytorch_tanh", layer_norm_eps=1e-6),
        # Qwen3 of 6 layers cut to select_layer 4
        text=dict(hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2,
                  head_dim=16, num_hidden_layers=6, rope_theta=1000000.0, rms_norm_eps=1e-6,
                  max_position_embeddings=4096),
        select_layer=4,
        head=dict(hidden_size=24, input_embedding_dim=32, max_seq_len=64, max_num_embodiments=12,
                  attend_text_every_n_blocks=2, action_horizon=16, max_state_dim=29, max_action_dim=29,
                  dit=dict(num_attention_heads=2, attention_head_dim=16, num_layers=6, output_dim=24)),
        # shortest edge 84, crop 0.95, back to 84, smart_resize(28) -> 84 x 84 -> 6 x 6 patches -> 9 tokens
        image=dict(shortest_edge=84, camera_hw=(100, 150)),
    ),
}
# The released frame geometry at the tiny widths: SigLIP2's 16 x 16 table resized to an 18 x 18
# grid (not a multiple of its 14-patch windows), shortest edge 256, Eagle's PIL bicubic
# 256 -> 252 (smart_resize), 81 tokens a camera; a wide camera letterboxed. One state group and
# one action group z-scored (`mean_std_embedding_keys`, as Isaac-GR00T's OXE embodiments), that
# action group relative to its state group (`use_relative_action`, as its G1 and BEHAVIOR arms).
SIZES["frame"] = dict(
    SIZES["tiny"],
    mean_std=dict(state=["gripper"], action=["x"]),
    relative=["x"],
    vision=dict(SIZES["tiny"]["vision"], num_patches=256, num_hidden_layers=2),
    head=dict(SIZES["tiny"]["head"], max_seq_len=64),
    image=dict(shortest_edge=256, camera_hw=(120, 200)),
)
# The released sizes (the Eagle folder's SigLIP2, Qwen3-1.7B built with the 16 layers kept, the
# head's defaults at 50 actions of 128), one 256 x 256 camera: tools/golden/bench_groot16.py builds
# it in memory; `--size full --out DIR` writes it (~11 GB) for tests/gr00t16_golden.rs's ignored
# full_size_matches_isaac.
SIZES["full"] = dict(
    vision=dict(), text=dict(hidden_size=2048, num_hidden_layers=16), select_layer=16,
    head=dict(hidden_size=1024, input_embedding_dim=1536, max_seq_len=1024, max_num_embodiments=32,
              attend_text_every_n_blocks=2, action_horizon=50, max_state_dim=128, max_action_dim=128,
              dit=dict(num_attention_heads=32, attention_head_dim=48, num_layers=32, output_dim=1024)),
    image=dict(shortest_edge=256, camera_hw=(256, 256)),
    cameras=["front"],
)
VALID_HORIZON = 8


# ----------------------------------------------------------------------------- the checkout

def shims(up):
    """Makes Isaac-GR00T's n1.6 code importable under transformers 5.5.4 (module docstring)."""
    sys.path.insert(0, up)
    import transformers.image_utils as iu
    if not hasattr(iu, "VideoInput"):
        iu.VideoInput = object

    def package(name, path):
        m = types.ModuleType(name)
        m.__path__ = [path]
        m.__package__ = name
        sys.modules[name] = m

    importlib.import_module("gr00t")
    package("gr00t.model", os.path.join(up, "gr00t", "model"))
    importlib.import_module("gr00t.configs")
    path = os.path.join(up, "gr00t", "configs", "model", "gr00t_n1d6.py")
    src = re.sub(r"^@dataclass\s*$", "", open(path).read(), flags=re.M)
    mod = types.ModuleType("gr00t.configs.model.gr00t_n1d6")
    mod.__file__ = path
    mod.__package__ = "gr00t.configs.model"
    sys.modules[mod.__name__] = mod
    exec(compile(src, path, "exec"), mod.__dict__)
    eagle = os.path.join(up, "gr00t", "model", "modules", "nvidia", "Eagle-Block2A-2B-v2")
    package("eagle3", eagle)
    ms2 = importlib.import_module("eagle3.modeling_siglip2")
    ms2.Siglip2PreTrainedModel._init_weights = lambda self, module: None
    register_packed_attention()
    return eagle


def register_packed_attention():
    """flash-attn's varlen attention as SigLIP2 uses it: softmax attention within each image's
    segment of the packed sequence (`seq_len_list`), no mask otherwise."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    def packed(module, query, key, value, attention_mask=None, scaling=None, dropout=0.0,
               seq_len_list=None, **kwargs):
        # query/key/value [1, heads, S, hd]
        outs, start = [], 0
        for n in seq_len_list:
            q, k, v = (t[:, :, start:start + n] for t in (query, key, value))
            w = torch.softmax((q @ k.transpose(-1, -2)) * scaling, dim=-1)
            outs.append(w @ v)
            start += n
        return torch.cat(outs, dim=2).transpose(1, 2), None

    ALL_ATTENTION_FUNCTIONS["packed_eager"] = packed


def stand_in_image_processor():
    from transformers.image_processing_utils import ImageProcessingMixin

    class StandInImageProcessor(ImageProcessingMixin):
        """What Eagle3_VLImageProcessorFast does with Eagle's preprocessor_config.json (do_resize
        False): RGB, x / 255, (x - 0.5) / 0.5, channels first, `[N, 3, H, W]` and the sizes
        `[N, 2]` (module docstring)."""

        def __call__(self, images=None, videos=None, **kwargs):
            pixels, sizes = [], []
            for img in images:
                a = np.asarray(img.convert("RGB"), dtype=np.float32)
                a = torch.from_numpy(a).permute(2, 0, 1)
                pixels.append(((a / 255.0 - 0.5) / 0.5).unsqueeze(0))
                sizes.append(torch.tensor([a.shape[1], a.shape[2]]))
            return {"pixel_values": torch.cat(pixels), "image_sizes": torch.stack(sizes)}

    return StandInImageProcessor()


# ----------------------------------------------------------------------------- the model

def eagle_tokenizer(out, eagle_dir):
    """Eagle's tokenizer layout at a small vocabulary: Eagle's added tokens in their real order
    after the BPE ids, Eagle's chat template."""
    cfg = json.load(open(os.path.join(eagle_dir, "tokenizer_config.json")))
    added = sorted(cfg["added_tokens_decoder"].items(), key=lambda kv: int(kv[0]))
    g17.ADDED = [(v["content"], v["special"]) for _, v in added]
    g17.CHAT_TEMPLATE = json.load(open(os.path.join(eagle_dir, "chat_template.json")))["chat_template"]
    return g17.build_tokenizer(out)


def eagle_config(arch, tok, eagle_dir):
    from eagle3.configuration_eagle3_vl import Eagle3_VLConfig
    full = json.load(open(os.path.join(eagle_dir, "config.json")))
    vis = dict(full["vision_config"], **arch["vision"])
    txt = dict(full["text_config"], **arch["text"], vocab_size=len(tok))
    keep = ["downsample_ratio", "select_layer", "use_pixel_shuffle", "mlp_connector_layers",
            "dynamic_image_size", "use_thumbnail", "template", "loss_version", "mlp_checkpoint",
            "use_backbone_lora", "use_llm_lora", "pad2square", "max_dynamic_tiles", "min_dynamic_tiles"]
    cfg = Eagle3_VLConfig(vision_config=vis, text_config=txt, **{k: full[k] for k in keep if k in full})
    cfg.image_token_index = tok.convert_tokens_to_ids("<IMG_CONTEXT>")
    cfg.vision_config._attn_implementation = "packed_eager"
    cfg.text_config._attn_implementation = "eager"
    return cfg


def install_backbone(cfg_eagle, processor):
    """Points Gr00tN1d6's backbone and processor factories at the tiny Eagle model and processor."""
    from eagle3.modeling_eagle3_vl import Eagle3_VLForConditionalGeneration
    from eagle3.modeling_siglip2 import Siglip2VisionModel
    from transformers import Qwen3ForCausalLM
    from gr00t.model.modules.eagle_backbone import EagleBackbone
    n16 = importlib.import_module("gr00t.model.gr00t_n1d6.gr00t_n1d6")
    proc = importlib.import_module("gr00t.model.gr00t_n1d6.processing_gr00t_n1d6")

    def backbone(model_name, select_layer, tune_llm=False, tune_visual=False, tune_top_llm_layers=0,
                 **kwargs):
        b = EagleBackbone.__new__(EagleBackbone)
        torch.nn.Module.__init__(b)
        b.model = Eagle3_VLForConditionalGeneration(
            cfg_eagle, vision_model=Siglip2VisionModel(cfg_eagle.vision_config),
            language_model=Qwen3ForCausalLM(cfg_eagle.text_config))
        while len(b.model.language_model.model.layers) > select_layer:  # as EagleBackbone.__init__
            b.model.language_model.model.layers.pop(-1)
        b.select_layer = select_layer
        b.set_trainable_parameters(tune_llm, tune_visual, tune_top_llm_layers)
        return b

    n16.get_backbone_cls = lambda config: backbone
    proc.build_processor = lambda model_name, kwargs: processor


def n16_config(arch):
    from gr00t.configs.model.gr00t_n1d6 import Gr00tN1d6Config
    h = arch["head"]
    return Gr00tN1d6Config(
        select_layer=arch["select_layer"], backbone_embedding_dim=arch["text"]["hidden_size"],
        hidden_size=h["hidden_size"], input_embedding_dim=h["input_embedding_dim"],
        max_seq_len=h["max_seq_len"], max_num_embodiments=h["max_num_embodiments"],
        attend_text_every_n_blocks=h["attend_text_every_n_blocks"], action_horizon=h["action_horizon"],
        max_state_dim=h["max_state_dim"], max_action_dim=h["max_action_dim"],
        diffusion_model_cfg=dict(positional_embeddings=None, norm_type="ada_norm", dropout=0.2,
                                 final_dropout=True, interleave_self_attention=True, **h["dit"]),
        shortest_image_edge=arch["image"]["shortest_edge"], crop_fraction=0.95,
        use_flash_attention=False, load_bf16=False, model_dtype="float32", state_dropout_prob=0.0,
        use_relative_action=bool(arch.get("relative")))


# ----------------------------------------------------------------------------- the processor

def modality_configs(arch):
    from gr00t.data.types import (ActionConfig, ActionFormat, ActionRepresentation, ActionType,
                                  ModalityConfig)
    rep = lambda g: (ActionRepresentation.RELATIVE if g in arch.get("relative", [])
                     else ActionRepresentation.ABSOLUTE)
    config = lambda g: ActionConfig(rep=rep(g), type=ActionType.NON_EEF, format=ActionFormat.DEFAULT)
    zscored = arch.get("mean_std", {})
    return {EMBODIMENT: {
        "video": ModalityConfig(delta_indices=[0], modality_keys=list(CAMERAS)),
        "state": ModalityConfig(delta_indices=[0], modality_keys=[g for g, _ in STATE_GROUPS],
                                mean_std_embedding_keys=zscored.get("state")),
        "action": ModalityConfig(delta_indices=list(range(VALID_HORIZON)),
                                 modality_keys=[g for g, _ in ACTION_GROUPS],
                                 action_configs=[config(g) for g, _ in ACTION_GROUPS],
                                 mean_std_embedding_keys=zscored.get("action")),
        "language": ModalityConfig(delta_indices=[0], modality_keys=["annotation.task"]),
    }}


def make_stats(gen, arch):
    """Per group min / max / mean / std / q01 / q99 with q01 > min and q99 < max (percentiles used)."""
    def group(d):
        lo = torch.rand(d, generator=gen) * -2 - 0.5
        hi = torch.rand(d, generator=gen) * 2 + 0.5
        q01, q99 = lo * 0.9, hi * 0.9
        mean = (lo + hi) / 2
        std = (hi - lo) / 4
        return {"min": lo.tolist(), "max": hi.tolist(), "mean": mean.tolist(), "std": std.tolist(),
                "q01": q01.tolist(), "q99": q99.tolist()}
    relative = {g: group(d) for g, d in ACTION_GROUPS if g in arch.get("relative", [])}
    return {EMBODIMENT: {"state": {g: group(d) for g, d in STATE_GROUPS},
                         "action": {g: group(d) for g, d in ACTION_GROUPS}, "relative_action": relative}}


def eagle_processor(tokenizer):
    from eagle3.processing_eagle3_vl import Eagle3_VLProcessor
    return Eagle3_VLProcessor(image_processor=stand_in_image_processor(), tokenizer=tokenizer,
                              chat_template=tokenizer.chat_template)


def make_processor(arch, stats):
    """Isaac-GR00T's Gr00tN1d6Processor (its build_processor pointed at the tiny Eagle processor
    by install_backbone), in eval mode."""
    from gr00t.model.gr00t_n1d6.processing_gr00t_n1d6 import Gr00tN1d6Processor
    h = arch["head"]
    p = Gr00tN1d6Processor(
        modality_configs=modality_configs(arch), statistics=stats, use_percentiles=True, clip_outliers=True,
        use_relative_action=bool(arch.get("relative")),
        shortest_image_edge=arch["image"]["shortest_edge"], crop_fraction=0.95,
        max_state_dim=h["max_state_dim"], max_action_dim=h["max_action_dim"],
        max_action_horizon=h["action_horizon"], use_albumentations=True,
        embodiment_id_mapping={EMBODIMENT: 10}, transformers_loading_kwargs={})
    p.eval()
    return p


# ----------------------------------------------------------------------------- one prediction

@contextlib.contextmanager
def explicit_noise(noise):
    """The action head's `torch.randn(size=(B, horizon, dim))` returns `noise` instead."""
    real = torch.randn

    def randn(*args, **kw):
        size = kw.get("size", args[0] if args else None)
        if size is not None and tuple(size) == tuple(noise.shape):
            return noise.clone().to(kw.get("dtype") or noise.dtype)
        return real(*args, **kw)

    torch.randn = randn
    try:
        yield
    finally:
        torch.randn = real


def predict(model, processor, frames, state, task, noise):
    """Gr00tPolicy._get_action for one observation: processor, collator, model, decode; and the
    stages, recorded by forward hooks."""
    from gr00t.data.embodiment_tags import EmbodimentTag
    from gr00t.data.types import MessageType, VLAStepData
    tag = EmbodimentTag(EMBODIMENT)
    step = VLAStepData(images={c: frames[c][None] for c in CAMERAS},
                       states={g: state[g][None] for g, _ in STATE_GROUPS}, actions={}, text=task,
                       embodiment=tag)
    frames_seen = []
    real_vlm = processor._apply_vlm_processing
    processor._apply_vlm_processing = lambda images, language: (
        frames_seen.append(images.copy()) or real_vlm(images, language))
    try:
        processed = processor([{"type": MessageType.EPISODE_STEP.value, "content": step}])
    finally:
        processor._apply_vlm_processing = real_vlm
    batch = processor.collator([processed])["inputs"]
    stages, hooks = {}, []
    m, head = model.backbone.model, model.action_head

    def keep(name, first_only=False):
        def hook(_, args, out):
            if first_only and name in stages:
                return
            t = out[0] if isinstance(out, tuple) else getattr(out, "last_hidden_state", out)
            stages[name] = t.detach().float().clone()
        return hook

    hooks.append(model.backbone.register_forward_hook(
        lambda _, args, out: stages.__setitem__("backbone", out["backbone_features"].detach().clone())))
    hooks.append(m.vision_model.register_forward_hook(keep("vit_out")))
    hooks.append(m.mlp1.register_forward_hook(keep("vision")))
    hooks.append(head.vlln.register_forward_hook(keep("vlln")))
    hooks.append(head.state_encoder.register_forward_hook(keep("state_features")))
    hooks.append(head.action_decoder.register_forward_hook(keep("decoder.0", first_only=True)))
    try:
        with torch.no_grad(), explicit_noise(noise):
            out = model.get_action(inputs=batch)
    finally:
        for h in hooks:
            h.remove()
    norm = out["action_pred"].float()
    decoded = processor.decode_action(norm.numpy(), tag, {g: state[g][None, None] for g, _ in STATE_GROUPS})
    actions = np.concatenate([decoded[g][0] for g, _ in ACTION_GROUPS], axis=-1)
    stages["frames"] = torch.from_numpy(frames_seen[0])  # [views, 3, h, w] u8, after the eval transform
    return batch, stages, out, norm[0], torch.from_numpy(actions.astype(np.float32))


# ----------------------------------------------------------------------------- the fixture

def build(arch, up, out, seed):
    """The tiny model and processor (install_backbone), re-randomized; the Eagle folder written."""
    global CAMERAS
    CAMERAS = arch.get("cameras", CAMERAS)
    eagle_dir = shims(up)
    eagle = os.path.join(out, "eagle")
    tok = eagle_tokenizer(eagle, eagle_dir)
    cfg_eagle = eagle_config(arch, tok, eagle_dir)
    cfg_eagle.to_json_file(os.path.join(eagle, "config.json"))
    install_backbone(cfg_eagle, eagle_processor(tok))
    from gr00t.model.gr00t_n1d6.gr00t_n1d6 import Gr00tN1d6
    gen = torch.Generator().manual_seed(seed)
    stats = make_stats(gen, arch)
    processor = make_processor(arch, stats)
    torch.manual_seed(seed)
    model = Gr00tN1d6(n16_config(arch)).eval()
    g17.rerandomize(model, gen)
    return model, processor, stats, gen


def generate(a, out):
    arch = SIZES[a.size]
    os.makedirs(out)
    model, processor, stats, gen = build(arch, os.path.abspath(a.upstream), out, a.seed)
    cam = arch["image"]["camera_hw"]
    frames = {c: torch.randint(0, 256, (*cam, 3), generator=gen, dtype=torch.uint8).numpy() for c in CAMERAS}
    state = {}
    zscored = arch.get("mean_std", {}).get("state", [])
    for g, d in STATE_GROUPS:  # some outside the percentiles: clipped; z-scored ones past 1, not
        st = {k: torch.tensor(v) for k, v in stats[EMBODIMENT]["state"][g].items()}
        if g in zscored:
            z = (1.5 + torch.rand(d, generator=gen)) * torch.tensor([1.0, -1.0]).repeat(d)[:d]
            state[g] = (st["mean"] + st["std"] * z).numpy().astype(np.float32)
            continue
        lo, hi = st["q01"], st["q99"]
        state[g] = (lo + (hi - lo) * (-0.15 + 1.3 * torch.rand(d, generator=gen))).numpy().astype(np.float32)
    h = arch["head"]
    noise = torch.randn(1, h["action_horizon"], h["max_action_dim"], generator=gen)
    batch, stages, out_head, norm, actions = predict(model, processor, frames, state, g17.TASK, noise)

    model.save_pretrained(out, safe_serialization=True)
    processor.save_pretrained(__import__("pathlib").Path(out))
    ids = batch["input_ids"][0]
    golden = {f"image.{i}": torch.from_numpy(frames[c]) for i, c in enumerate(CAMERAS)}
    golden.update({f"frame.{i}": stages["frames"][i].permute(1, 2, 0) for i in range(len(CAMERAS))})
    golden.update({f"pixels.{i}": p[0] for i, p in enumerate(batch["pixel_values"])})
    golden.update({
        "state": torch.from_numpy(np.concatenate([state[g] for g, _ in STATE_GROUPS])),
        "state_padded": batch["state"][0].float(),
        "token_ids": ids.to(torch.int64),
        "noise": noise[0],
        "vit_out": stages["vit_out"][0],
        "vision": stages["vision"].reshape(-1, stages["vision"].shape[-1]),
        "backbone": stages["backbone"][0],
        "vlln": stages["vlln"][0],
        "state_features": stages["state_features"][0],
        # the first step's velocity: the action decoder's rows of the actions
        "velocity.0": stages["decoder.0"][0, -h["action_horizon"]:],
        "actions_norm": norm,
        "actions": actions,
    })
    golden = {k: v.contiguous() for k, v in golden.items()}
    save_file(golden, os.path.join(out, "golden.safetensors"))
    tok = processor.processor.tokenizer
    meta = {
        "generator": "tools/golden/groot16.py", "size": a.size, "seed": a.seed,
        "upstream": "NVIDIA/Isaac-GR00T n1.6.1-release (5dc80c4afd726b34faad1d8f7e007a13b34e4c88)",
        "versions": {"torch": torch.__version__, "transformers": __import__("transformers").__version__,
                     "albumentations": __import__("albumentations").__version__},
        "task": g17.TASK, "embodiment": EMBODIMENT, "cameras": CAMERAS,
        "state_groups": STATE_GROUPS, "action_groups": ACTION_GROUPS, "valid_horizon": VALID_HORIZON,
        "prompt": tok.decode(ids.tolist()), "image_token_id": tok.convert_tokens_to_ids("<IMG_CONTEXT>"),
        "tensors": {k: [str(v.dtype), list(v.shape)] for k, v in golden.items()},
    }
    json.dump(meta, open(os.path.join(out, "golden.json"), "w"), indent=1)
    json.dump({"size": a.size, **arch}, open(os.path.join(out, "arch.json"), "w"), indent=1)
    print("actions:", actions.tolist())
    print("max|actions_norm|:", float(norm.abs().max()))


def check(fixture, up):
    """Reload the fixture's weights into a freshly built model and reproduce its chunk."""
    arch = SIZES[json.load(open(os.path.join(fixture, "arch.json")))["size"]]
    import tempfile
    scratch = tempfile.mkdtemp()
    model, processor, _, _ = build(arch, os.path.abspath(up), scratch, 0)
    sd = load_file(os.path.join(fixture, "model.safetensors"))
    missing, unexpected = model.load_state_dict(sd, strict=False)
    assert not unexpected, unexpected
    assert all("lm_head" in k for k in missing), missing
    processor.set_statistics(json.load(open(os.path.join(fixture, "statistics.json"))), override=True)
    g = load_file(os.path.join(fixture, "golden.safetensors"))
    frames = {c: g[f"image.{i}"].numpy() for i, c in enumerate(CAMERAS)}
    flat, state, at = g["state"].numpy(), {}, 0
    for grp, d in STATE_GROUPS:
        state[grp] = flat[at:at + d]
        at += d
    _, _, _, norm, actions = predict(model, processor, frames, state, g17.TASK, g["noise"][None])
    err = {"actions_norm": float((norm - g["actions_norm"]).abs().max()),
           "actions": float((actions - g["actions"]).abs().max())}
    print("reload check (max abs err):", json.dumps(err))
    assert max(err.values()) < 1e-5, err
    shutil.rmtree(scratch)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--upstream", required=True, help="an Isaac-GR00T checkout of the n1.6.1-release branch")
    ap.add_argument("--size", choices=sorted(SIZES), default="tiny",
                    help="full: the released sizes (~11 GB in f32; needs --out outside the repository)")
    ap.add_argument("--out", help="output folder (default: tests/fixtures/groot16-SIZE)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--check", metavar="DIR", help="only reload DIR and reproduce its chunk")
    a = ap.parse_args()
    if a.check:
        check(a.check, a.upstream)
        return
    root = os.path.abspath(os.path.join(HERE, "..", ".."))
    if a.size == "full" and not a.out:
        ap.error("--size full needs --out DIR (not committed)")
    out = os.path.abspath(a.out or os.path.join(root, "tests", "fixtures", f"groot16-{a.size}"))
    if os.path.isdir(out):
        shutil.rmtree(out)
    generate(a, out)
    subprocess.run([sys.executable, os.path.abspath(__file__), "--upstream", a.upstream, "--check", out],
                   check=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})


if __name__ == "__main__":
    main()
