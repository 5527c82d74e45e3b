"""lerobot's own pi0 / pi05 latency, for the README's table next to vla-bench's.

    HF_HUB_OFFLINE=1 /work/venv-pi/bin/python tools/golden/bench_pi0.py DIR [--iters 3] [--threads 2]

DIR is a folder written by tools/golden/pi0.py (e.g. --size full --out /tmp/pi05-full; the venv
setup is in that script's docstring). Times policy.predict_action_chunk on DIR's recorded inputs
(the cameras, the recorded token ids and attention mask, the normalised state, the recorded
noise) in f32 on the CPU with --threads torch threads, after one warm-up call, and checks the
chunk against the recorded one. The pre/post processors (normalisation, tokenization) are outside
the timing.
"""

import argparse
import json
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir")
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()

    import torch
    from safetensors.torch import load_file

    from pi0 import patch_sizes

    torch.set_num_threads(a.threads)
    d = os.path.abspath(a.dir)
    meta = json.load(open(os.path.join(d, "golden.json")))
    arch_sizes = json.load(open(os.path.join(d, "arch.json")))
    if meta["arch"] == "pi0":
        from lerobot.policies.pi0 import modeling_pi0 as modeling
        Policy = modeling.PI0Policy
    else:
        from lerobot.policies.pi05 import modeling_pi05 as modeling
        Policy = modeling.PI05Policy
    patch_sizes(modeling, arch_sizes)
    g = load_file(os.path.join(d, "golden.safetensors"))
    t0 = time.perf_counter()
    policy = Policy.from_pretrained(d).eval()
    load_s = time.perf_counter() - t0
    cams = [k for k in policy.config.input_features if k.startswith("observation.images.")]
    batch = {
        "observation.state": g["state_norm"][None],
        "observation.language.tokens": torch.tensor([meta["token_ids"]]),
        "observation.language.attention_mask": torch.tensor([meta["attention_mask"]], dtype=torch.bool),
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
    print(f"lerobot {meta['versions']['lerobot']} {meta['arch']}, torch {torch.__version__}, {a.threads} threads, "
          f"{len(cams)} cameras, load {load_s:.0f} s")
    print(f"predict_action_chunk ms: min {times[0]:.1f} median {times[len(times) // 2]:.1f} max {times[-1]:.1f}")
    print(f"max abs diff vs recorded normalised chunk: {err:.2e}")


if __name__ == "__main__":
    main()
