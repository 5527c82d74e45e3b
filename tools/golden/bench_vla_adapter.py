"""The reference VLA-Adapter's latency (OpenHelix-Team/VLA-Adapter's own code), for the benchmark
tables next to vla-bench's.

    HF_HUB_OFFLINE=1 /work/venv-lerobot061/bin/python tools/golden/bench_vla_adapter.py DIR \\
        --upstream /tmp/upstream/VLA-Adapter [--iters 3] [--threads 2]

DIR is a folder written by tools/golden/vla_adapter.py (e.g. --size full --out /tmp/va-full; the
checkout and venv are in its docstring). Rebuilds the reference from it as the LIBERO client loads
it (vla_adapter.load_fixture) and times `predict_action` (towers, language model, head and the
un-normalisation: what the client calls per chunk) on DIR's recorded inputs in f32 on the CPU with
--threads torch threads, after one warm-up call, and checks the chunk against the recorded one.
"""

import argparse
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir")
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()

    import numpy as np
    import torch
    import vla_adapter as va

    torch.set_num_threads(a.threads)
    root, d = os.path.abspath(a.upstream), os.path.abspath(a.dir)
    t0 = time.perf_counter()
    vla, head, pp, g, info = va.load_fixture(root, d)
    load_s = time.perf_counter() - t0
    inputs = va.recorded_inputs(root, g, info)
    times = []
    with torch.no_grad():
        for i in range(a.iters + 1):
            t0 = time.perf_counter()
            actions, _ = vla.predict_action(**inputs, proprio_projector=pp, action_head=head)
            if i:
                times.append((time.perf_counter() - t0) * 1e3)
    err = np.abs(np.asarray(actions) - g["actions"].double().numpy()).max()
    times.sort()
    n = sum(p.numel() for m in (vla, head, pp) for p in m.parameters())
    print(f"VLA-Adapter (OpenHelix-Team/VLA-Adapter), torch {torch.__version__}, {a.threads} threads, "
          f"{n / 1e9:.2f} B parameters f32, {len(info['frames'])} cameras, {info['n_prompt']} prompt tokens, "
          f"load {load_s:.1f} s")
    print(f"predict_action ms: min {times[0]:.1f} median {times[len(times) // 2]:.1f} max {times[-1]:.1f}")
    print(f"max abs diff vs recorded chunk: {err:.2e}")


if __name__ == "__main__":
    main()
