"""lerobot's own GR00T N1.7 latency, for the README's table next to vla-bench's.

    HF_HUB_OFFLINE=1 /work/venv-lerobot061/bin/python tools/golden/bench_groot17.py DIR [--iters 3] [--threads 2]

DIR is a folder written by tools/golden/groot17.py (e.g. --size full --out /tmp/groot17-full; the
venv setup is in that script's docstring). Loads it as `groot17.py --check` does (from inside DIR:
its paths are relative, "./base" and "./backbone"; use_bf16=False, float32) and times
policy.predict_action_chunk on DIR's recorded inputs (the camera, state and golden.json's task
through lerobot's preprocessor once, outside the timing; the recorded noise forced in place of
torch.randn) in f32 on the CPU with --threads torch threads, after one warm-up call, and checks the
chunk against the recorded normalised one (the rows and action dims predict_action_chunk returns).
"""

import json
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main():
    from _bench import parse_args

    a = parse_args(__doc__)

    import groot17  # patches lerobot for Python 3.11, sets HF_LEROBOT_HOME to a temporary folder
    import torch
    from safetensors.torch import load_file

    torch.set_num_threads(a.threads)
    d = os.path.abspath(a.dir)
    g = load_file(os.path.join(d, "golden.safetensors"))
    task = json.load(open(os.path.join(d, "golden.json")))["task"]
    n_cams = sum(k.startswith("image.") for k in g)
    assert n_cams == 1, f"groot17.py records one camera, {d} has {n_cams}"
    t0 = time.perf_counter()
    policy, pre, _ = groot17.load_fixture(d)
    load_s = time.perf_counter() - t0
    cwd = os.getcwd()
    os.chdir(d)  # the VLM encode step loads ./backbone lazily, on first use
    try:
        batch = pre({**groot17.make_obs(g["image.0"], g["state"]), "task": task})
    finally:
        os.chdir(cwd)
    noise = g["noise"][None]
    times = []
    with torch.no_grad():
        for i in range(a.iters + 1):
            with groot17.explicit_noise(noise) as calls:
                t0 = time.perf_counter()
                out = policy.predict_action_chunk(dict(batch))
                if i:
                    times.append((time.perf_counter() - t0) * 1e3)
            assert len(calls) == 1, "get_action drew no noise through torch.randn(size=...)"
    times.sort()
    import lerobot

    print(f"lerobot {lerobot.__version__} groot (N1.7), torch {torch.__version__}, {a.threads} threads, "
          f"{n_cams} cameras, load {load_s:.0f} s")
    print(f"predict_action_chunk ms: min {times[0]:.1f} median {times[len(times) // 2]:.1f} max {times[-1]:.1f}")
    rows, dims = out.shape[1:]
    err = (out[0] - g["actions_norm"][:rows, :dims]).abs().max().item()
    print(f"max abs diff vs recorded normalised chunk (first {rows} rows, {dims} dims): {err:.2e}")


if __name__ == "__main__":
    main()
