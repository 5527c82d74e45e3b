"""Golden fixture for SmolVLA: lerobot 0.4.4 with random weights, every tensor re-randomized.

Rerun (anyone, offline; the venv is outside the repo and CI never needs it):

    python3 -m venv /work/venv-lerobot
    /work/venv-lerobot/bin/pip install "lerobot[smolvla]==0.4.4"
    HF_HUB_OFFLINE=1 /work/venv-lerobot/bin/python tools/golden/smolvla.py            # tiny, committed
    HF_HUB_OFFLINE=1 /work/venv-lerobot/bin/python tools/golden/smolvla.py --size base --out /tmp/smolvla-base
                                         # smolvla_base's real sizes (~1.8 GB, ~3 min on 2 cores), not committed
    VLA_SMOLVLA_GOLDEN=/tmp/smolvla-base cargo test --test smolvla_golden -- --ignored base_size
                                         # the Rust side of the base-size check (VLA_TEST_BACKEND=cpu|vulkan|ggml)

--bench-only (lerobot 0.4.4 or 0.6.1): the folder for tools/golden/bench_smolvla.py alone, e.g. on
the GPU machine (tools/golden/DEVICE.md), where lerobot is 0.6.1 and the intermediates below cannot
be recorded (0.6.1 denoises through `euler_integrate`, which the recording wrappers never see):

    /work/venv-lerobot061/bin/python tools/golden/smolvla.py --size base --bench-only --out /tmp/smolvla-base
    /work/venv-lerobot061/bin/python tools/golden/bench_smolvla.py /tmp/smolvla-base --iters 3   # diff ~0

The same checkpoint and inputs as without the flag under the same lerobot (same seed, same draws;
the policy is built without its own random init, which rerandomize() overwrites anyway:
tools/golden/_bench_only.py), then one policy.predict_action_chunk call on the recorded noise,
nothing wrapped, on --device (cpu, or cuda after the checkpoint is written: pass the benchmark's
--device so its diff reads ~0). golden.safetensors holds only image.{i}, state_norm, noise and
actions_norm, here [chunk, action_dim] (predict_action_chunk's output, already cut to the action
dims); golden.json has "bench_only": true, the device and the phases' seconds, and no prefix_len /
img_tokens_per_camera. Such a folder is not for the Rust golden tests (they need the
intermediates). On Python 3.11 lerobot 0.6.1's PEP 695 lines are rewritten first
(tools/golden/py311_compat.py; nothing happens on 3.12). Base size here (lerobot 0.6.1, 2 cores):
1.8 GB, 23 s, 2.7 GB peak RSS.

Writes into the output folder (default tests/fixtures/smolvla-tiny/):
  vlm/                 a stand-in SmolVLM folder (config, tokenizer, processor) so lerobot builds
                       offline; no weights (load_vlm_weights=False)
  config.json, model.safetensors, policy_{pre,post}processor*.{json,safetensors}
                       the checkpoint exactly as lerobot saves it (policy.save_pretrained and the
                       processors' save_pretrained), except that the two places recording the VLM
                       folder are rewritten to the relative path "vlm" so the folder can move
  golden.safetensors   inputs and lerobot's outputs (names below), float32 unless noted
  golden.json          versions, the task string, token ids, shapes, seeds

golden.safetensors: image.{i} (u8, HWC, the raw camera frame), state (raw), state_norm (after
the preprocessor, not yet zero-padded), noise
[chunk, max_action_dim], pixels.{i} [3,S,S] (prepare_images output, in [-1,1]), vit.{i}
[patches, vit_hidden] (the vision tower's output after post_layernorm, before the connector),
vision.{i} [T, hidden] (embed_image: connector output, before the sqrt(hidden) scale),
kv.{l}.k / kv.{l}.v [P, kv_heads, head_dim] (the prefill cache: decoder keys after RoPE and
values), kv.{l}.k_expert / kv.{l}.v_expert (cross-attention layers only: the expert's own
k_proj / v_proj of that cache, computed with lerobot's modules), velocity.{s} [chunk,
max_action_dim] (denoise_step output at step s), actions_norm [chunk, max_action_dim]
(sample_actions output), actions [chunk, action_dim] (after the postprocessor: unnormalised).
"""
import argparse
import contextlib
import json
import os
import shutil
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # _bench_only, py311_compat (--bench-only)

import numpy as np
import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (PreTrainedTokenizerFast, SmolVLMConfig, SmolVLMImageProcessor, SmolVLMProcessor,
                          SmolVLMVideoProcessor)

from _bench_only import record, run_fields, skip_weight_init, tensor_index, versions

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<fake_token_around_image>", "<image>",
           "<global-img>", "<end_of_utterance>"]
TASK = "pick up the red cube and place it in the box"

# (SmolVLM vision, SmolVLM text, scale factor, policy overrides). "base" is smolvla_base:
# SmolVLM2-500M's tower and decoder (cut to 16 layers), expert 0.75 x 960 = 720.
SIZES = {
    "tiny": (dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  image_size=64, patch_size=8, layer_norm_eps=1e-6),
             dict(hidden_size=64, intermediate_size=160, num_hidden_layers=4, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, vocab_size=320, rms_norm_eps=1e-5),
             2, dict(chunk_size=10, n_action_steps=10, num_vlm_layers=4, tokenizer_max_length=16, num_steps=10)),
    "base": (dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                  image_size=512, patch_size=16, layer_norm_eps=1e-6),
             dict(hidden_size=960, intermediate_size=2560, num_hidden_layers=32, num_attention_heads=15,
                  num_key_value_heads=5, head_dim=64, vocab_size=49280, rms_norm_eps=1e-5),
             4, dict(chunk_size=50, n_action_steps=50, num_vlm_layers=16, tokenizer_max_length=48, num_steps=10)),
}
STATE_DIM = ACTION_DIM = 6
CAMERAS = [(48, 80), (70, 50)]  # (h, w): neither square nor the model's size: exercises resize-with-pad


def build_vlm(out, size):
    """A SmolVLM folder lerobot can load offline: config with the chosen sizes and a small BPE
    tokenizer with SmolVLM's special tokens (token ids only need to be below vocab_size)."""
    vc, tc, sf, _ = SIZES[size]
    os.makedirs(out, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=300, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([TASK + "\n"] * 50, tr)
    ft = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<|im_start|>", eos_token="<end_of_utterance>", pad_token="<|endoftext|>",
        unk_token="<|endoftext|>",
        additional_special_tokens=["<fake_token_around_image>", "<image>", "<global-img>", "<end_of_utterance>"],
        extra_special_tokens={"fake_image_token": "<fake_token_around_image>", "image_token": "<image>",
                              "global_image_token": "<global-img>", "end_of_utterance_token": "<end_of_utterance>"})
    assert len(ft) <= tc["vocab_size"]
    cfg = SmolVLMConfig(vision_config=vc, text_config=tc, scale_factor=sf,
                        image_token_id=ft.convert_tokens_to_ids("<image>"))
    cfg.save_pretrained(out)
    ip = SmolVLMImageProcessor(size={"longest_edge": vc["image_size"]}, max_image_size={"longest_edge": vc["image_size"]})
    n_tok = (vc["image_size"] // vc["patch_size"] // sf) ** 2
    SmolVLMProcessor(image_processor=ip, tokenizer=ft, video_processor=SmolVLMVideoProcessor(),
                     image_seq_len=n_tok).save_pretrained(out)


def rerandomize(policy, gen):
    """Every tensor gets fresh values: lerobot's init leaves biases at 0 and norm gains at 1,
    which would hide a dropped bias or gain."""
    with torch.no_grad():
        for name, t in policy.state_dict().items():
            gain = "norm" in name and name.endswith("weight")
            if t.ndim > 1 and not gain and t.dtype == torch.float32 and t.is_contiguous():
                # the last branch below, drawn in place (no temporaries the size of the embeddings):
                # the same values as r / sqrt(fan_in), bit for bit
                t.normal_(generator=gen).div_(t[0].numel() ** 0.5)
                continue
            r = torch.randn(t.shape, generator=gen, dtype=torch.float32)
            if gain:
                v = 1.0 + 0.2 * r
            elif t.ndim == 1:
                v = 0.2 * r
            else:
                fan_in = t[0].numel() if t.ndim > 1 else 1
                v = r / fan_in ** 0.5
            t.copy_(v.to(t.dtype))


def relativize_vlm_paths(out):
    """config.json and the tokenizer step record the VLM folder's absolute path: make it "vlm"."""
    for name in ["config.json", "policy_preprocessor.json"]:
        p = os.path.join(out, name)
        d = json.load(open(p))
        if "vlm_model_name" in d:
            d["vlm_model_name"] = "vlm"
        for s in d.get("steps", []):
            if "tokenizer_name" in s.get("config", {}):
                s["config"]["tokenizer_name"] = "vlm"
        json.dump(d, open(p, "w"), indent=4)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", choices=sorted(SIZES), default="tiny")
    ap.add_argument("--out", help="output folder (default: tests/fixtures/smolvla-tiny for --size tiny)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--bench-only", action="store_true",
                    help="write only what bench_smolvla.py reads (the checkpoint; golden.safetensors: image.{i}, "
                         "state_norm, noise, actions_norm from one predict_action_chunk call; golden.json: token_ids, "
                         "versions, ...): no intermediates, no wrapped lerobot functions, so it runs under lerobot "
                         "0.6.1 too; not for the Rust golden tests")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="with --bench-only: where the recorded predict_action_chunk call runs (the policy is built "
                         "and saved on the CPU, then moved); match the benchmark's --device so its diff reads ~0")
    a = ap.parse_args()
    if a.device != "cpu" and not a.bench_only:
        ap.error("--device is for --bench-only (the full recording runs on the CPU)")
    if a.bench_only:
        import py311_compat
        py311_compat.patch_pep695()  # lerobot 0.6.x on Python 3.11; a no-op on 3.12 or once patched
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    if a.out is None and a.size != "tiny":
        ap.error("--size base writes ~1.8 GB: give --out (outside the repo)")
    out = os.path.abspath(a.out or os.path.join(root, "tests", "fixtures", "smolvla-tiny"))
    if os.path.isdir(out):
        shutil.rmtree(out)
    vlm_dir = os.path.join(out, "vlm")
    build_vlm(vlm_dir, a.size)

    from lerobot.configs.types import FeatureType, NormalizationMode, PolicyFeature
    from lerobot.policies.smolvla.configuration_smolvla import SmolVLAConfig
    from lerobot.policies.smolvla.modeling_smolvla import SmolVLAPolicy
    from lerobot.policies.smolvla.processor_smolvla import make_smolvla_pre_post_processors

    vc, tc, sf, over = SIZES[a.size]
    gen = torch.Generator().manual_seed(a.seed)
    cams = [f"observation.images.cam{i}" for i in range(len(CAMERAS))]
    feats = {"observation.state": PolicyFeature(type=FeatureType.STATE, shape=(STATE_DIM,))}
    for k, (h, w) in zip(cams, CAMERAS):
        feats[k] = PolicyFeature(type=FeatureType.VISUAL, shape=(3, h, w))
    s = vc["image_size"]
    cfg = SmolVLAConfig(vlm_model_name=vlm_dir, load_vlm_weights=False, device="cpu",
                        resize_imgs_with_padding=(s, s), self_attn_every_n_layers=2, input_features=feats,
                        output_features={"action": PolicyFeature(type=FeatureType.ACTION, shape=(ACTION_DIM,))},
                        **over)
    assert cfg.normalization_mapping["STATE"] == NormalizationMode.MEAN_STD
    torch.manual_seed(a.seed)
    t0 = time.perf_counter()
    with skip_weight_init() if a.bench_only else contextlib.nullcontext():  # rerandomize overwrites it all
        policy = SmolVLAPolicy(cfg).eval()
    t1 = time.perf_counter()
    rerandomize(policy, gen)
    seconds = {"build": t1 - t0, "rerandomize": time.perf_counter() - t1}

    randn = lambda *shape: torch.randn(*shape, generator=gen)
    stats = {"observation.state": {"mean": randn(STATE_DIM), "std": 0.5 + torch.rand(STATE_DIM, generator=gen)},
             "action": {"mean": randn(ACTION_DIM), "std": 0.5 + torch.rand(ACTION_DIM, generator=gen)}}
    pre, post = make_smolvla_pre_post_processors(cfg, dataset_stats=stats)
    t0 = time.perf_counter()
    policy.save_pretrained(out)
    pre.save_pretrained(out)
    post.save_pretrained(out)
    relativize_vlm_paths(out)
    seconds["save"] = time.perf_counter() - t0

    # Inputs: u8 HWC frames, a raw state, a task string, explicit noise.
    images = [torch.randint(0, 256, (h, w, 3), generator=gen, dtype=torch.uint8) for h, w in CAMERAS]
    state = 2.0 * randn(STATE_DIM)
    noise = randn(1, cfg.chunk_size, cfg.max_action_dim)
    obs = {"observation.state": state.clone(), "task": TASK}
    for k, img in zip(cams, images):
        obs[k] = img.permute(2, 0, 1).float() / 255.0
    batch = pre(obs)
    tokens = batch["observation.language.tokens"][0]
    assert bool(batch["observation.language.attention_mask"].all()), "expected no padding (pad_language_to=longest)"
    if a.bench_only:
        return write_bench_only(out, a, seconds, cfg, policy, batch, images, noise, tokens)

    # Record intermediates with lerobot's own modules.
    model, vwe = policy.model, policy.model.vlm_with_expert
    golden = {f"image.{i}": img for i, img in enumerate(images)}
    with torch.no_grad():
        pixels, _ = policy.prepare_images(dict(batch))
        for i, px in enumerate(pixels):
            golden[f"pixels.{i}"] = px[0]
            golden[f"vit.{i}"] = vwe.get_vlm_model().vision_model(pixel_values=px).last_hidden_state[0]
            golden[f"vision.{i}"] = vwe.embed_image(px)[0]
    caches, velocities, final = [], [], []
    vwe_forward, denoise_step, sample_actions = vwe.forward, model.denoise_step, model.sample_actions

    def rec_forward(*args, **kw):
        out = vwe_forward(*args, **kw)
        if kw.get("fill_kv_cache"):
            caches.append(out[1])
        return out

    def rec_denoise(*args, **kw):
        v = denoise_step(*args, **kw)
        velocities.append(v.clone())
        return v

    def rec_sample(*args, **kw):
        x = sample_actions(*args, **kw)
        final.append(x.clone())
        return x

    vwe.forward, model.denoise_step, model.sample_actions = rec_forward, rec_denoise, rec_sample
    actions = post(policy.predict_action_chunk(dict(batch), noise=noise.clone()))
    assert len(caches) == 1 and len(velocities) == cfg.num_steps

    with torch.no_grad():
        for l, kv in sorted(caches[0].items()):
            k, v = kv["key_states"][0], kv["value_states"][0]
            golden[f"kv.{l}.k"], golden[f"kv.{l}.v"] = k, v
            if l % cfg.self_attn_every_n_layers != 0:
                attn = vwe.lm_expert.layers[l].self_attn
                hd = attn.head_dim
                golden[f"kv.{l}.k_expert"] = attn.k_proj(k.reshape(k.shape[0], -1)).view(k.shape[0], -1, hd)
                golden[f"kv.{l}.v_expert"] = attn.v_proj(v.reshape(v.shape[0], -1)).view(v.shape[0], -1, hd)
    for st, v in enumerate(velocities):
        golden[f"velocity.{st}"] = v[0]
    golden.update({"state": state, "state_norm": batch["observation.state"][0], "noise": noise[0], "actions_norm": final[0][0], "actions": actions[0]})
    golden = {k: (t if t.dtype == torch.uint8 else t.float()).contiguous() for k, t in golden.items()}
    save_file(golden, os.path.join(out, "golden.safetensors"))

    info = {
        "generator": "tools/golden/smolvla.py",
        "size": a.size,
        "seed": a.seed,
        "versions": versions(),
        "task": TASK,
        "task_as_tokenized": TASK + "\n",
        "token_ids": tokens.tolist(),
        "n_images": len(CAMERAS),
        "cameras_hw": CAMERAS,
        "prefix_len": int(golden["kv.0.k"].shape[0]),
        "img_tokens_per_camera": int(golden["vision.0"].shape[0]),
        "chunk_size": cfg.chunk_size,
        "num_steps": cfg.num_steps,
        "max_action_dim": cfg.max_action_dim,
        "action_dim": ACTION_DIM,
        "tensors": tensor_index(golden),
    }
    json.dump(info, open(os.path.join(out, "golden.json"), "w"), indent=1)
    print(json.dumps({k: info[k] for k in ["versions", "token_ids", "prefix_len"]}))
    print("actions[0]:", actions[0, 0].tolist())


def write_bench_only(out, a, seconds, cfg, policy, batch, images, noise, tokens):
    """--bench-only: the normalised chunk from one unwrapped predict_action_chunk call, and the
    inputs bench_smolvla.py feeds it (see the docstring)."""

    actions_norm, golden = record(out, policy, batch, images, noise, a.device, seconds)
    info = {
        "generator": "tools/golden/smolvla.py --bench-only",
        "bench_only": True,
        "size": a.size,
        "seed": a.seed,
        "versions": versions(),
        "task": TASK,
        "task_as_tokenized": TASK + "\n",
        "token_ids": tokens.tolist(),
        "attention_mask": [1] * len(tokens),
        "n_images": len(CAMERAS),
        "cameras_hw": CAMERAS,
        "chunk_size": cfg.chunk_size,
        "num_steps": cfg.num_steps,
        "max_action_dim": cfg.max_action_dim,
        "action_dim": ACTION_DIM,
        "tensors": tensor_index(golden),
        **run_fields(a.device, seconds),
    }
    json.dump(info, open(os.path.join(out, "golden.json"), "w"), indent=1)
    print(json.dumps({k: info[k] for k in ["device", "seconds", "torch_threads", "versions", "token_ids"]}))
    print("actions_norm[0]:", actions_norm[0, 0].tolist())


if __name__ == "__main__":
    main()
