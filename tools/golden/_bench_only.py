"""Shared by smolvla.py and pi0.py: the golden.json fields both of each script's writers record
(`versions`, `tensor_index`), and for --bench-only: build a policy without its initial random
weights (the generators' rerandomize() overwrites them all), and the one recorded
predict_action_chunk call, on the CPU or the GPU.

Skipping the init: at pi0 / pi05's full size it is most of lerobot 0.6.1's build (PaliGemma's
language model is built twice, `PaliGemmaForConditionalGenerationWithPiGemma` deleting the first,
and the expert gets a 257152-row lm_head), all drawn on one core: pi0 full on 2 cores here took
261 s with it (build 195 s) and 118 s without (build 0.3 s; peak RSS 17.7 -> 16.9 GB). Without it
the parameters stay torch.empty and the discarded copies never touch their pages. The written
folders were compared byte for byte with and without (tiny smolvla / pi0 / pi05; the
golden.safetensors of pi0 and pi05 full): identical.
"""

import contextlib
import os
import time

import torch


@contextlib.contextmanager
def skip_weight_init():
    """Within the block, torch.nn.init's in-place initialisers (nn.Linear / Conv / Embedding /
    LayerNorm reset_parameters go through them) return their tensor untouched, and
    transformers' PreTrainedModel.initialize_weights (every model's _init_weights; init_weights
    still ties weights) does nothing. Every parameter and persistent buffer then holds garbage
    until overwritten: only for models whose whole state_dict is written afterwards. Buffers
    that are computed, not initialised (RoPE inv_freq, position ids), are unaffected."""
    from transformers import PreTrainedModel

    names = [n for n in dir(torch.nn.init) if n.endswith("_") and not n.startswith("_")]
    saved = {n: getattr(torch.nn.init, n) for n in names}
    saved_hf = PreTrainedModel.__dict__.get("initialize_weights")  # transformers 4.5x and 5
    try:
        for n in names:
            setattr(torch.nn.init, n, lambda tensor, *args, **kw: tensor)
        if saved_hf is not None:
            PreTrainedModel.initialize_weights = lambda self: None
        yield
    finally:
        for n, f in saved.items():
            setattr(torch.nn.init, n, f)
        if saved_hf is not None:
            PreTrainedModel.initialize_weights = saved_hf


def predict_once(policy, batch, noise, device):
    """policy.predict_action_chunk(batch, noise=noise) under no_grad on `device`, as the benchmark
    calls it (bench_*.py --device): on cuda the policy is moved there first (its weights move, no
    second copy; the checkpoint is already written) and the batch and noise follow. Returns the
    chunk on the CPU and the call's seconds (synchronised on cuda)."""
    if device != "cpu":
        policy.to(device)
        policy.config.device = device
    batch = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    sync()
    t0 = time.perf_counter()
    with torch.no_grad():
        out = policy.predict_action_chunk(batch, noise=noise.to(device).clone())
    sync()
    return out.cpu(), time.perf_counter() - t0


def record(out, policy, batch, images, noise, device, seconds):
    """The one recorded call (predict_once, its time in seconds["predict"]) and the
    golden.safetensors the benchmarks read: image.{i}, state_norm, noise, actions_norm (u8 kept,
    the rest f32). Returns (actions_norm, the saved tensors)."""
    from safetensors.torch import save_file

    actions_norm, seconds["predict"] = predict_once(policy, batch, noise, device)
    golden = {f"image.{i}": img for i, img in enumerate(images)}
    golden.update({"state_norm": batch["observation.state"][0], "noise": noise[0], "actions_norm": actions_norm[0]})
    golden = {k: (t if t.dtype == torch.uint8 else t.float()).contiguous() for k, t in golden.items()}
    save_file(golden, os.path.join(out, "golden.safetensors"))
    return actions_norm, golden


def run_fields(device, seconds):
    """golden.json's fields about this run: the device, the phases' seconds, torch's threads."""
    return {
        "device": device if device == "cpu" else f"{device} ({torch.cuda.get_device_name()})",
        "seconds": {k: round(v, 1) for k, v in seconds.items()},  # this run's phases, on torch_threads
        "torch_threads": torch.get_num_threads(),
    }


def versions():
    """golden.json's "versions": the libraries that made the folder."""
    import lerobot
    import numpy as np
    import transformers

    return {"lerobot": lerobot.__version__, "torch": torch.__version__,
            "transformers": transformers.__version__, "numpy": np.__version__}


def tensor_index(golden):
    """golden.json's "tensors": dtype and shape of each saved tensor, by name."""
    return {k: [str(t.dtype).replace("torch.", ""), list(t.shape)] for k, t in sorted(golden.items())}
