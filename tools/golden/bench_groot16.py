"""Isaac-GR00T's own GR00T N1.6 latency at the released sizes, for docs/BENCHMARKS.md next to
vla-bench's.

    HF_HUB_OFFLINE=1 /work/venv-lerobot061/bin/python tools/golden/bench_groot16.py --upstream DIR \\
        [--iters 5] [--threads 2]

DIR is the Isaac-GR00T n1.6.1-release checkout tools/golden/groot16.py imports (its docstring
has the venv and the shims). Builds `Gr00tN1d6` at `groot16.SIZES["full"]` in memory with random
weights (no checkpoint is written: 10 GB in f32): the released Eagle config's SigLIP2 (1152 x 27,
252 x 252 frames, 81 tokens), Qwen3-1.7B's sizes with the 16 layers kept, DiT 32 x 32 x 48, 50
actions of 128, 4 steps; the tool's small tokenizer (the sequence's length is printed, for
vla-bench's --tokens), one 256 x 256 camera. Runs the processor once, outside the timing, then
times `model.get_action` on its batch in f32 on the CPU with --threads torch threads after one
warm-up call, the noise given explicitly.
"""

import argparse
import os
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()

    import groot16 as g16
    import numpy as np
    import torch

    torch.set_num_threads(a.threads)
    arch = g16.SIZES["full"]
    t0 = time.perf_counter()
    model, processor, stats, gen = g16.build(arch, os.path.abspath(a.upstream), tempfile.mkdtemp(), 0)
    build_s = time.perf_counter() - t0
    n_params = sum(p.numel() for p in model.parameters())
    cam = arch["image"]["camera_hw"]
    frames = {c: torch.randint(0, 256, (*cam, 3), generator=gen, dtype=torch.uint8).numpy()
              for c in g16.CAMERAS}
    state = {g: np.zeros(d, np.float32) for g, d in g16.STATE_GROUPS}
    h = arch["head"]
    noise = torch.randn(1, h["action_horizon"], h["max_action_dim"], generator=gen)
    batch, _, _, _, _ = g16.predict(model, processor, frames, state, g16.g17.TASK, noise)
    seq = int(batch["input_ids"].shape[1])
    n_img = int((batch["input_ids"] == model.backbone.model.config.image_token_index).sum())
    times = []
    with torch.no_grad():
        for i in range(a.iters + 1):
            with g16.explicit_noise(noise):
                t0 = time.perf_counter()
                model.get_action(inputs=dict(batch))
                if i:
                    times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    print(f"Isaac-GR00T n1.6.1 Gr00tN1d6, torch {torch.__version__}, {a.threads} threads, f32, "
          f"{n_params / 1e9:.2f} G parameters (built in {build_s:.0f} s); sequence {seq} rows "
          f"({n_img} image tokens, {seq - n_img} text), {h['action_horizon']} actions, 4 steps")
    print(f"get_action ms: median {times[len(times) // 2]:.0f} (min {times[0]:.0f}, max {times[-1]:.0f}) "
          f"over {a.iters}: {', '.join(f'{t:.0f}' for t in times)}")


if __name__ == "__main__":
    main()
