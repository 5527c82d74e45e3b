"""Golden fixture for the Qwen3-VL vision tower alone (GR00T N1.7's and VLA-JEPA's), from
transformers' own `Qwen3VLVisionModel` with random weights, every tensor re-randomized.

Rerun (offline; the venv is outside the repo and CI never needs it):

    HF_HUB_OFFLINE=1 /work/venv-lerobot/bin/python tools/golden/qwen3vl_vision.py
        # transformers 4.57.6 (lerobot 0.4.4's venv): writes tests/fixtures/qwen3vl-vision-tiny/

The image goes through transformers' `Qwen2VLImageProcessor` (what Qwen3-VL's processor uses for
images) with resizing off (the frame is already a multiple of patch x merge), so `pixel_values`
are its flattened patches: each still frame repeated `temporal_patch_size` times, patches in
2 x 2 merge-block order, values `(x / 255 - mean) / std`.

Writes model.safetensors (the tower's weights under transformers' names), golden.json (the
vision config) and golden.safetensors: image (u8 HWC), pixels [3, S, S] (the normalised frame
before patchification), pixel_values [patches, 3 * 2 * p * p], grid_thw, patch_embeds (after
the Conv3d), pos_embeds (the interpolated position table, merge-block order), block.{i} (each
block's output, merge-block order), out [tokens, out_hidden] (after the merger), deepstack.{j}
[tokens, out_hidden].
"""
import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import torch
from safetensors.torch import save_file

SIZE = 64          # image side: 4 x 4 patches of 16, merged 2 x 2 -> 2 x 2 tokens
CONFIG = dict(depth=4, hidden_size=32, hidden_act="gelu_pytorch_tanh", intermediate_size=80,
              num_heads=2, in_channels=3, patch_size=16, spatial_merge_size=2, temporal_patch_size=2,
              out_hidden_size=48, num_position_embeddings=36, deepstack_visual_indexes=[0, 2])


def main():
    from transformers import Qwen2VLImageProcessor
    from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLVisionConfig
    from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLVisionModel

    out = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "qwen3vl-vision-tiny")
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    cfg = Qwen3VLVisionConfig(**CONFIG)
    cfg._attn_implementation = "eager"
    model = Qwen3VLVisionModel._from_config(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name and name.endswith("weight"):
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=gen))
            elif name.endswith("bias"):
                p.copy_(0.2 * torch.randn(p.shape, generator=gen))
            else:
                fan_in = p[0].numel() if p.dim() > 1 else p.shape[-1]
                p.copy_(torch.randn(p.shape, generator=gen) / fan_in ** 0.5)

    rng = np.random.default_rng(2)
    image = rng.integers(0, 256, size=(SIZE, SIZE, 3), dtype=np.uint8)
    proc = Qwen2VLImageProcessor(patch_size=16, temporal_patch_size=2, merge_size=2,
                                 image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5], do_resize=False)
    enc = proc(images=[image], return_tensors="pt")
    pixel_values, grid_thw = enc["pixel_values"], enc["image_grid_thw"]
    pixels = (torch.from_numpy(image).permute(2, 0, 1).float() / 255 - 0.5) / 0.5

    caught = {}
    hooks = [model.patch_embed.register_forward_hook(lambda m, i, o: caught.__setitem__("patch_embeds", o))]
    for i, blk in enumerate(model.blocks):
        hooks.append(blk.register_forward_hook(lambda m, inp, o, i=i: caught.__setitem__(f"block.{i}", o)))
    with torch.no_grad():
        merged, deepstack = model(pixel_values, grid_thw)
        pos = model.fast_pos_embed_interpolate(grid_thw)
    for h in hooks:
        h.remove()
    tensors = {"image": torch.from_numpy(image).contiguous(), "pixels": pixels.contiguous(),
               "pixel_values": pixel_values.contiguous(), "grid_thw": grid_thw.to(torch.int64),
               "pos_embeds": pos.contiguous(), "out": merged.contiguous(), **caught}
    for j, d in enumerate(deepstack):
        tensors[f"deepstack.{j}"] = d.contiguous()
    save_file({k: v.contiguous() for k, v in tensors.items()}, os.path.join(out, "golden.safetensors"))
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, os.path.join(out, "model.safetensors"))
    import transformers
    json.dump({**CONFIG, "image_size": SIZE, "transformers": transformers.__version__,
               "torch": torch.__version__}, open(os.path.join(out, "golden.json"), "w"), indent=1)
    print({k: tuple(v.shape) for k, v in tensors.items()})


if __name__ == "__main__":
    main()
