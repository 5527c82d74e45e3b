"""lerobot's own GR00T N1.5 latency, for the README's table next to vla-bench's.

    HF_HUB_OFFLINE=1 /work/venv-lerobot/bin/python tools/golden/bench_groot.py DIR [--iters 3] [--threads 2]

DIR is a folder written by tools/golden/groot.py (e.g. --size full --out /tmp/groot-full; the venv
setup is in that script's docstring). Times policy.predict_action_chunk on DIR's recorded inputs
(the cameras, state and task through lerobot's preprocessor once, outside the timing; the recorded
noise) in f32 on the CPU with --threads torch threads, after one warm-up call, and checks the chunk
against the recorded normalised one.
"""

import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main():
    from _bench import parse_args

    a = parse_args(__doc__)

    import groot  # sets HF_LEROBOT_HOME to a temporary folder before lerobot is imported
    import torch
    from safetensors.torch import load_file

    torch.set_num_threads(a.threads)
    d = os.path.abspath(a.dir)
    groot.install_eagle_cache(d)
    groot.patch_lerobot()
    from lerobot.policies.groot.modeling_groot import GrootPolicy
    from lerobot.processor import PolicyProcessorPipeline

    g = load_file(os.path.join(d, "golden.safetensors"))
    cwd = os.getcwd()
    os.chdir(d)  # config.json says base_model_path "./base"
    t0 = time.perf_counter()
    try:
        policy = GrootPolicy.from_pretrained(d).eval()
    finally:
        os.chdir(cwd)
    load_s = time.perf_counter() - t0
    pre = PolicyProcessorPipeline.from_pretrained(d, config_filename="policy_preprocessor.json")
    images = [g[f"image.{i}"] for i in range(sum(k.startswith("image.") for k in g))]
    batch = pre(groot.make_obs(images, g["state"]))
    noise = g["noise"][None]
    times = []
    with torch.no_grad():
        for i in range(a.iters + 1):
            with groot.explicit_noise(noise):
                t0 = time.perf_counter()
                out = policy.predict_action_chunk(dict(batch))
                if i:
                    times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    import lerobot

    print(f"lerobot {lerobot.__version__} groot (N1.5), torch {torch.__version__}, {a.threads} threads, "
          f"{len(images)} cameras, load {load_s:.0f} s")
    print(f"predict_action_chunk ms: min {times[0]:.1f} median {times[len(times) // 2]:.1f} max {times[-1]:.1f}")
    err = (out[0] - g["actions_norm"][:, : out.shape[-1]]).abs().max().item()
    print(f"max abs diff vs recorded normalised chunk (first {out.shape[-1]} dims): {err:.2e}")


if __name__ == "__main__":
    main()
