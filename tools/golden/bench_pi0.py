"""lerobot's own pi0 / pi05 latency, for the README's table next to vla-bench's.

    HF_HUB_OFFLINE=1 /work/venv-pi/bin/python tools/golden/bench_pi0.py DIR [--iters 3] [--threads 2] [--device cpu|cuda]

DIR is a folder written by tools/golden/pi0.py (e.g. --size full --out /tmp/pi05-full; the venv
setup is in that script's docstring). Times policy.predict_action_chunk on DIR's recorded inputs
(the cameras, the recorded token ids and attention mask, the normalised state, the recorded
noise) in f32 on the CPU with --threads torch threads (or on the GPU with --device cuda,
synchronising before each clock reading; tools/golden/DEVICE.md), after one warm-up call, and
checks the chunk against the recorded one. The pre/post processors (normalisation, tokenization)
are outside the timing.
"""

import json
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main():
    from _bench import lerobot_version, load_policy, parse_args, recorded_batch, time_and_report

    a = parse_args(__doc__)

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
    policy = load_policy(Policy, d, a.device)
    load_s = time.perf_counter() - t0
    batch, n_cams = recorded_batch(policy, g, meta["token_ids"], meta["attention_mask"])
    time_and_report(policy, batch, g, a.iters,
                    f"lerobot {lerobot_version(meta)} {meta['arch']}, torch {torch.__version__}, "
                    f"{a.threads} threads, {n_cams} cameras, load {load_s:.0f} s", a.device)


if __name__ == "__main__":
    main()
