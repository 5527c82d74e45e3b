"""lerobot's own SmolVLA latency, for the README's table next to vla-bench's.

    HF_HUB_OFFLINE=1 /work/venv-lerobot/bin/python tools/golden/bench_smolvla.py DIR [--iters 3] [--threads 2]

DIR is a folder written by tools/golden/smolvla.py (e.g. --size base --out /tmp/smolvla-base).
Times policy.predict_action_chunk on DIR's recorded inputs (two cameras, the task's token ids,
the normalised state, the recorded noise) in f32 on the CPU with --threads torch threads, after
one warm-up call, and checks the chunk against the recorded one. The pre/post processors
(normalisation, tokenization) are outside the timing; they take well under a millisecond.
"""

import argparse
import json
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir")
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()

    import torch
    from safetensors.torch import load_file
    from lerobot.policies.smolvla.modeling_smolvla import SmolVLAPolicy

    torch.set_num_threads(a.threads)
    d = os.path.abspath(a.dir)
    os.chdir(d)  # the checkpoint names its stand-in VLM folder relatively ("vlm")
    meta = json.load(open("golden.json"))
    g = load_file("golden.safetensors")
    policy = SmolVLAPolicy.from_pretrained(d).eval()
    cams = [k for k in policy.config.input_features if k.startswith("observation.images.")]
    tokens = torch.tensor([meta["token_ids"]])
    batch = {
        "observation.state": g["state_norm"][None],
        "observation.language.tokens": tokens,
        "observation.language.attention_mask": torch.ones_like(tokens, dtype=torch.bool),
    }
    for i, k in enumerate(cams):
        batch[k] = g[f"image.{i}"].permute(2, 0, 1)[None].float() / 255.0
    noise = g["noise"][None]
    times = []
    with torch.no_grad():
        for i in range(a.iters + 1):
            t0 = time.perf_counter()
            out = policy.predict_action_chunk(dict(batch), noise=noise.clone())
            if i:
                times.append((time.perf_counter() - t0) * 1e3)
    err = (out[0] - g["actions_norm"][:, : out.shape[-1]]).abs().max().item()
    times.sort()
    print(f"lerobot {meta['versions']['lerobot']}, torch {torch.__version__}, {a.threads} threads, {len(cams)} cameras")
    print(f"predict_action_chunk ms: min {times[0]:.1f} median {times[len(times) // 2]:.1f} max {times[-1]:.1f}")
    print(f"max abs diff vs recorded normalised chunk: {err:.2e}")


if __name__ == "__main__":
    main()
