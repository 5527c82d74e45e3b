"""lerobot's own SmolVLA latency, for the README's table next to vla-bench's.

    HF_HUB_OFFLINE=1 /work/venv-lerobot/bin/python tools/golden/bench_smolvla.py DIR [--iters 3] [--threads 2] [--device cpu|cuda]

DIR is a folder written by tools/golden/smolvla.py (e.g. --size base --out /tmp/smolvla-base).
Times policy.predict_action_chunk on DIR's recorded inputs (two cameras, the task's token ids,
the normalised state, the recorded noise) in f32 on the CPU with --threads torch threads (or on
the GPU with --device cuda, synchronising before each clock reading; tools/golden/DEVICE.md), after
one warm-up call, and checks the chunk against the recorded one. The pre/post processors
(normalisation, tokenization) are outside the timing; they take well under a millisecond.
"""

import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main():
    from _bench import lerobot_version, load_policy, parse_args, recorded_batch, time_and_report

    a = parse_args(__doc__)

    import torch
    from safetensors.torch import load_file
    from lerobot.policies.smolvla.modeling_smolvla import SmolVLAPolicy

    torch.set_num_threads(a.threads)
    d = os.path.abspath(a.dir)
    os.chdir(d)  # the checkpoint names its stand-in VLM folder relatively ("vlm")
    meta = json.load(open("golden.json"))
    g = load_file("golden.safetensors")
    policy = load_policy(SmolVLAPolicy, d, a.device)
    batch, n_cams = recorded_batch(policy, g, meta["token_ids"])
    time_and_report(policy, batch, g, a.iters,
                    f"lerobot {lerobot_version(meta)}, torch {torch.__version__}, {a.threads} threads, {n_cams} cameras",
                    a.device)


if __name__ == "__main__":
    main()
