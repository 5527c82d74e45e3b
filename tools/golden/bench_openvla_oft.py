"""The reference OpenVLA-OFT's latency at the released sizes (moojink/openvla-oft's own code), in
bf16 as its LIBERO client runs it, for the benchmark tables next to vla-bench's.

    HF_HUB_OFFLINE=1 /work/venv-lerobot061/bin/python tools/golden/bench_openvla_oft.py \\
        --upstream /tmp/upstream/openvla-oft [--iters 2] [--threads 2]

The checkout and venv are in tools/golden/openvla_oft.py's docstring. Nothing is read or
written: the model is built at Llama 2 7B's sizes with timm's own towers (7.7 B parameters)
directly in bf16 (f32 would be 30 GB), with the default random initialisation (latency does not
depend on the values), the fork's bidirectional attention emulated as openvla_oft.py does, and
`predict_action` (towers, language model, head, un-normalisation) timed on two cameras at 224 and
the small tokenizer's ids for a LIBERO task, inputs cast to bf16 as the client casts them, with
--threads torch threads, after one warm-up call.
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
    ap.add_argument("--iters", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()

    import torch
    import openvla_oft as oft

    torch.set_num_threads(a.threads)
    oft.DINO, oft.SIG = dict(), dict()  # timm's own sizes
    oft.TEXT = dict(oft.TEXT, hidden_size=4096, num_hidden_layers=32, num_attention_heads=32,
                    num_key_value_heads=32, intermediate_size=11008)
    root = os.path.abspath(a.upstream)
    mp, cp, procmod, heads, proj, constants = mods = oft.import_reference(root)
    gen = torch.Generator().manual_seed(0)
    t0 = time.perf_counter()
    torch.set_default_dtype(torch.bfloat16)
    cfg = cp.OpenVLAConfig(vision_backbone_id="dinosiglip-vit-so-224px", llm_backbone_id="llama2-7b-pure",
                           arch_specifier="no-align+fused-gelu-mlp", use_fused_vision_backbone=True,
                           image_resize_strategy="resize-naive", text_config=dict(oft.TEXT), llm_max_length=2048,
                           pad_token_id=oft.PAD, pad_to_multiple_of=64, norm_stats=None, n_action_bins=256)
    cfg._attn_implementation = "sdpa"
    vla = mp.OpenVLAForActionPrediction(cfg).eval()
    vla.vision_backbone.set_num_images_in_input(len(oft.FRAMES))
    h = oft.TEXT["hidden_size"]
    head = heads.L1RegressionActionHead(input_dim=h, hidden_dim=h, action_dim=constants.ACTION_DIM).eval()
    pp = proj.ProprioProjector(llm_dim=h, proprio_dim=constants.PROPRIO_DIM).eval()
    torch.set_default_dtype(torch.float32)
    stats = oft.make_stats(gen)
    vla.norm_stats = stats
    vla.language_model.register_forward_pre_hook(oft.bidirectional, with_kwargs=True)
    build_s = time.perf_counter() - t0
    n = sum(p.numel() for m in (vla, head, pp) for p in m.parameters())
    assert all(p.dtype == torch.bfloat16 for m in (vla, head, pp) for p in m.parameters())

    out = tempfile.mkdtemp(prefix="oft-bench-")
    tok = oft.build_tokenizer(out)
    from PIL import Image
    improc = procmod.PrismaticImageProcessor(**{k: v for k, v in oft.PREPROCESSOR.items() if k != "auto_map"})
    prompt = f"In: What action should the robot take to {oft.TASK.lower()}?\nOut:"
    fast, _ = oft.encode(tok, out, prompt)
    processor = procmod.PrismaticProcessor(improc, fast)
    imgs = oft.frames(gen)
    inputs = [processor(prompt, Image.fromarray(i.numpy()).convert("RGB")) for i in imgs]
    ids, attn = inputs[0]["input_ids"], inputs[0]["attention_mask"]
    pixel_values = torch.cat([x["pixel_values"] for x in inputs], dim=1).to(torch.bfloat16)
    state = (torch.rand(8, generator=gen) * 3 - 1.5).double().numpy()
    proprio = oft.client_function(root, "normalize_proprio", constants)(state, stats[oft.SUITE]["proprio"])
    times = []
    with torch.no_grad():
        for i in range(a.iters + 1):
            t0 = time.perf_counter()
            actions, _ = vla.predict_action(input_ids=ids, unnorm_key=oft.SUITE, proprio=proprio,
                                            proprio_projector=pp, action_head=head,
                                            pixel_values=pixel_values, attention_mask=attn)
            if i:
                times.append((time.perf_counter() - t0) * 1e3)
            print(f"call {i}: {(time.perf_counter() - t0) * 1e3:.0f} ms", flush=True)
    times.sort()
    del mods
    print(f"OpenVLA-OFT (moojink/openvla-oft), torch {torch.__version__}, {a.threads} threads, "
          f"{n / 1e9:.2f} B parameters bf16, {len(oft.FRAMES)} cameras, {ids.shape[1] + 1} prompt tokens "
          f"(with the empty token), built in {build_s:.0f} s; finite chunk: {bool(abs(actions).max() < 1e30)}")
    print(f"predict_action ms: min {times[0]:.1f} median {times[len(times) // 2]:.1f} max {times[-1]:.1f}")


if __name__ == "__main__":
    main()
