"""Shared by bench_smolvla.py and bench_pi0.py: the command line, the recorded inputs of a
folder written by the golden scripts, and the timing loop around predict_action_chunk."""

import argparse
import time


def parse_args(doc):
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir")
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="where the policy and inputs live; cuda times with torch.cuda.synchronize")
    return ap.parse_args()


def load_policy(Policy, d, device):
    """Policy.from_pretrained(d) with the checkpoint's config.device (cpu in the golden folders)
    replaced by `device`, so lerobot loads the weights there; in eval mode."""
    from lerobot.configs.policies import PreTrainedConfig

    config = PreTrainedConfig.from_pretrained(d)
    config.device = device
    return Policy.from_pretrained(d, config=config).eval()


def lerobot_version(meta):
    """The running lerobot's version, and the folder's when it was recorded with another."""
    from importlib.metadata import version

    v, rec = version("lerobot"), meta["versions"]["lerobot"]
    return v if v == rec else f"{v} (folder recorded with {rec})"


def recorded_batch(policy, g, token_ids, attention_mask=None):
    """lerobot's batch from the recorded cameras, normalised state and token ids; the mask
    defaults to all ones. Returns the batch and the number of cameras."""
    import torch

    tokens = torch.tensor([token_ids])
    mask = torch.ones_like(tokens, dtype=torch.bool) if attention_mask is None else torch.tensor([attention_mask], dtype=torch.bool)
    batch = {
        "observation.state": g["state_norm"][None],
        "observation.language.tokens": tokens,
        "observation.language.attention_mask": mask,
    }
    cams = [k for k in policy.config.input_features if k.startswith("observation.images.")]
    for i, k in enumerate(cams):
        batch[k] = g[f"image.{i}"].permute(2, 0, 1)[None].float() / 255.0
    return batch, len(cams)


def time_and_report(policy, batch, g, iters, header, device="cpu"):
    """One warm-up call, then `iters` timed ones on the recorded noise; prints `header`, the
    times and the chunk's max abs difference from the recorded normalised one. The batch and
    noise go to `device`; on cuda the clock is read after torch.cuda.synchronize."""
    import torch

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    batch = {k: v.to(device) for k, v in batch.items()}
    noise = g["noise"][None].to(device)
    times = []
    with torch.no_grad():
        for i in range(iters + 1):
            sync()
            t0 = time.perf_counter()
            out = policy.predict_action_chunk(dict(batch), noise=noise.clone())
            sync()
            if i:
                times.append((time.perf_counter() - t0) * 1e3)
    err = (out[0].cpu() - g["actions_norm"][:, : out.shape[-1]]).abs().max().item()
    times.sort()
    if device != "cpu":
        header += f", {torch.cuda.get_device_name()}"
    print(header)
    print(f"predict_action_chunk ms: min {times[0]:.1f} median {times[len(times) // 2]:.1f} max {times[-1]:.1f}")
    print(f"max abs diff vs recorded normalised chunk: {err:.2e}")
