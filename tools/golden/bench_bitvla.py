"""The reference BitVLA's latency at the released sizes (ustcwhy/BitVLA's own code), in bf16 as its
LIBERO client runs it, for the benchmark tables next to vla-bench's.

    /work/venv-bitvla/bin/python tools/golden/bench_bitvla.py --upstream /tmp/upstream/BitVLA \\
        [--iters 2] [--threads 2]

The checkout and venv are in tools/golden/bitvla.py's docstring. Nothing is written: the model is
built at the released sizes (BitSigLIP so400m 26 layers, BitNet b1.58 2B, the L1 head 2560 wide)
directly in bf16 with the default random initialisation (latency does not depend on the values; the
BitLinear layers fake-quantize their weights and activations on every forward, as the released model
runs), and the client's `get_bitnet_vla_action` (processor, towers, language model, head,
un-normalisation) is timed on two cameras at 224, the fixture's tokenizer and a LIBERO task, pixels
cast to bf16 as the client casts them, with --threads torch threads, after one warm-up call.
"""

import argparse
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--iters", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()

    import numpy as np
    import torch
    import bitvla as bv

    torch.set_num_threads(a.threads)
    bv.VIT = dict(bv.VIT, hidden_size=1152, intermediate_size=4304, num_hidden_layers=26, num_attention_heads=16)
    bv.TEXT = dict(bv.TEXT, hidden_size=2560, intermediate_size=6912, num_hidden_layers=30, num_attention_heads=20,
                   num_key_value_heads=5)
    root = os.path.abspath(a.upstream)
    ref = bv.import_reference(root, pixels="bfloat16")
    gen = torch.Generator().manual_seed(0)
    t0 = time.perf_counter()
    torch.set_default_dtype(torch.bfloat16)
    cfg = ref.cfgmod.Bitvla_Config(
        vision_config=dict(bv.VIT), text_config=dict(bv.TEXT), image_token_index=bv.IMAGE,
        projector_hidden_act="gelu", vision_feature_select_strategy="full", vision_feature_layer=-1,
        multimodal_projector_bias=True, image_seq_length=256, norm_stats=None, n_action_bins=256,
        vocab_size=bv.VOCAB)
    vla = ref.wrap.BitVLAForActionPrediction(cfg).eval()
    bc = ref.bc
    vla.set_constant(image_token_idx=bc.BITNET_DEFAULT_IMAGE_TOKEN_IDX, proprio_pad_idx=bc.BITNET_PROPRIO_PAD_IDX,
                     ignore_idx=bc.BITNET_IGNORE_INDEX, action_token_begin_idx=bc.BITNET_ACTION_TOKEN_BEGIN_IDX,
                     stop_index=bc.BITNET_STOP_INDEX)
    h = bv.TEXT["hidden_size"]
    head = ref.heads.L1RegressionActionHead(input_dim=h, hidden_dim=h, action_dim=7).eval()
    pp = ref.proj.ProprioProjector(llm_dim=h, proprio_dim=8).eval()
    torch.set_default_dtype(torch.float32)
    vla.norm_stats = bv.make_stats(gen)
    fixture = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "fixtures", "bitvla-tiny")
    processor = bv.make_processor(root, fixture)
    build_s = time.perf_counter() - t0
    n = sum(p.numel() for m in (vla, head, pp) for p in m.parameters())
    imgs = [i.numpy() for i in bv.frames(gen)]
    state = (torch.rand(8, generator=gen) * 3 - 1.5).double().numpy()
    times = []
    for i in range(a.iters + 1):
        t = time.perf_counter()
        actions, _ = bv.predict(ref, vla, head, pp, processor, imgs, state)
        times.append((time.perf_counter() - t) * 1e3)
        assert np.isfinite(actions).all()
    run = sorted(times[1:])
    print(f"BitVLA reference (bf16, {a.threads} threads, {n / 1e9:.2f} B parameters, built in {build_s:.0f} s, "
          f"attention: siglip {cfg.vision_config._attn_implementation}, bitnet {cfg.text_config._attn_implementation}): "
          f"predict ms median {run[len(run) // 2]:.0f} min {run[0]:.0f} max {run[-1]:.0f} "
          f"(warm-up {times[0]:.0f}; {a.iters} runs)")


if __name__ == "__main__":
    main()
