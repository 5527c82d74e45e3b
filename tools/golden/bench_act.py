"""lerobot's own ACT latency, for the benchmark tables next to vla-bench's.

    HF_HUB_OFFLINE=1 /work/venv-lerobot/bin/python tools/golden/bench_act.py DIR [--iters 3] [--threads 2]

DIR is a folder written by tools/golden/act.py (e.g. --size full --out /tmp/act-full; the venv setup
is in that script's docstring). Loads it as `act.py --check` does and times
policy.predict_action_chunk on DIR's recorded inputs (the cameras and state through lerobot's
preprocessor once, outside the timing) in f32 on the CPU with --threads torch threads, after one
warm-up call, and checks the chunk against the recorded normalised one (ACT draws no noise).
"""

import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main():
    from _bench import parse_args

    a = parse_args(__doc__)

    import act
    import torch
    from safetensors.torch import load_file

    torch.set_num_threads(a.threads)
    d = os.path.abspath(a.dir)
    g = load_file(os.path.join(d, "golden.safetensors"))
    n_cams = sum(k.startswith("image.") for k in g)
    t0 = time.perf_counter()
    policy, pre, _ = act.load_fixture(d)
    load_s = time.perf_counter() - t0
    batch = pre(act.make_obs([g[f"image.{c}"] for c in range(n_cams)], g["state"]))
    times = []
    with torch.no_grad():
        for i in range(a.iters + 1):
            t0 = time.perf_counter()
            out = policy.predict_action_chunk(dict(batch))
            if i:
                times.append((time.perf_counter() - t0) * 1e3)
    err = (out[0] - g["actions_norm"]).abs().max().item()
    times.sort()
    import lerobot

    h, w = g["image.0"].shape[:2]
    print(f"lerobot {lerobot.__version__} act, torch {torch.__version__}, {a.threads} threads, "
          f"{n_cams} cameras at {h} x {w}, load {load_s:.1f} s")
    print(f"predict_action_chunk ms: min {times[0]:.1f} median {times[len(times) // 2]:.1f} max {times[-1]:.1f}")
    print(f"max abs diff vs recorded normalised chunk: {err:.2e}")


if __name__ == "__main__":
    main()
