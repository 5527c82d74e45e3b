"""lerobot's own Evo-1 latency, for the README's table next to vla-bench's.

    HF_HUB_OFFLINE=1 /work/venv-lerobot061/bin/python tools/golden/bench_evo1.py DIR [--iters 3] [--threads 2]

DIR is a folder written by tools/golden/evo1.py (e.g. tests/fixtures/evo1-tiny; the venv setup is in
that script's docstring). Loads it as `evo1.py --check` does (from inside DIR: its path is relative,
"./backbone"; vlm_dtype float32) and times policy.predict_action_chunk on DIR's recorded inputs (the
cameras, state and golden.json's task through lerobot's preprocessor once, outside the timing) in f32
on the CPU with --threads torch threads, after one warm-up call. Each call runs with evo1.py's
in-process deviation: the recorded uniform draw `noise_u01` forced in place of the head's
torch.rand(B, chunk * max_action_dim) (predict_action_chunk takes no noise argument). Checks the chunk
against the recorded normalised one (actions_norm).
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

    import evo1  # patches lerobot for Python 3.11 (via groot17), sets HF_LEROBOT_HOME to a temporary folder
    import torch
    from safetensors.torch import load_file

    torch.set_num_threads(a.threads)
    d = os.path.abspath(a.dir)
    evo1.use_fixture(d)  # the folder's size: its cameras, chunk and steps
    g = load_file(os.path.join(d, "golden.safetensors"))
    task = json.load(open(os.path.join(d, "golden.json")))["task"]
    n_cams = sum(k.startswith("image.") for k in g)
    assert n_cams == len(evo1.CAMERAS), f"evo1.py records {len(evo1.CAMERAS)} cameras, {d} has {n_cams}"
    t0 = time.perf_counter()
    policy, pre, _ = evo1.load_fixture(d)
    load_s = time.perf_counter() - t0
    images = [g[f"image.{c}"] for c in range(n_cams)]
    batch = pre(evo1.make_obs(images, g["state"], task))
    u = g["noise_u01"].reshape(1, -1)
    times = []
    with torch.no_grad():
        for i in range(a.iters + 1):
            with evo1.explicit_rand(u) as calls:
                t0 = time.perf_counter()
                out = policy.predict_action_chunk(dict(batch))
                if i:
                    times.append((time.perf_counter() - t0) * 1e3)
            assert len(calls) == 1, "get_action drew no noise through torch.rand(B, chunk * max_action_dim)"
    times.sort()
    import lerobot

    print(f"lerobot {lerobot.__version__} evo1, torch {torch.__version__}, {a.threads} threads, "
          f"{n_cams} cameras of {policy.config.max_views} views, load {load_s:.1f} s")
    print(f"predict_action_chunk ms: min {times[0]:.1f} median {times[len(times) // 2]:.1f} max {times[-1]:.1f}")
    rows, dims = out.shape[1:]
    err = (out[0] - g["actions_norm"][:rows, :dims]).abs().max().item()
    print(f"max abs diff vs recorded normalised chunk ({rows} rows, {dims} dims): {err:.2e}")


if __name__ == "__main__":
    main()
