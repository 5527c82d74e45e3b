"""Golden fixture for Qwen3-VL's vision tower and language model (GR00T N1.7's and VLA-JEPA's
backbone), from transformers' own `Qwen3VLModel` with random weights, every tensor re-randomized.

Rerun (offline; the venv is outside the repo and CI never needs it):

    HF_HUB_OFFLINE=1 /work/venv-lerobot/bin/python tools/golden/qwen3vl.py
        # transformers 4.57.6 (lerobot 0.4.4's venv): writes tests/fixtures/qwen3vl-tiny/

The image goes through transformers' `Qwen2VLImageProcessor` (what Qwen3-VL's processor uses for
images) with resizing off (the frame is already a multiple of patch x merge), so `pixel_values`
are its flattened patches: the still frame repeated `temporal_patch_size` times, patches in
2 x 2 merge-block order, values `(x / 255 - mean) / std`. The prompt is ids: text, then
<|vision_start|>, one <|image_pad|> per merged token, <|vision_end|>, then text; the model
computes its own multimodal RoPE positions (`get_rope_index`).

Writes model.safetensors (the weights under transformers' `Qwen3VLModel` names: `visual.*`,
`language_model.*`), golden.json (the vision and text configs, the ids, versions) and
golden.safetensors: image (u8 HWC), pixels [3, S, S] (the normalised frame before
patchification), pixel_values [patches, 3 * 2 * p * p], grid_thw, patch_embeds (after the
Conv3d), pos_embeds (the interpolated position table, merge-block order), out [tokens, hidden]
(after the merger), deepstack.{j} [tokens, hidden], position_ids [3, T] (t, h, w; as f32),
inputs_embeds [T, hidden] (image tokens spliced in), last_hidden [T, hidden] (after the final
norm; deepstack features added after the first layers).
"""
import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import torch
from safetensors.torch import save_file

SIZE = 64          # image side: 4 x 4 patches of 16, merged 2 x 2 -> 2 x 2 tokens
VISION = dict(depth=4, hidden_size=32, hidden_act="gelu_pytorch_tanh", intermediate_size=80,
              num_heads=2, in_channels=3, patch_size=16, spatial_merge_size=2, temporal_patch_size=2,
              out_hidden_size=64, num_position_embeddings=36, deepstack_visual_indexes=[0, 2])
TEXT = dict(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16, hidden_act="silu",
            max_position_embeddings=512, rms_norm_eps=1e-6, rope_theta=5000000.0,
            rope_scaling={"rope_type": "default", "mrope_section": [2, 3, 3], "mrope_interleaved": True},
            attention_bias=False, tie_word_embeddings=True)
IMAGE_PAD, VISION_START, VISION_END, VIDEO_PAD = 290, 291, 292, 293
BEFORE, AFTER = [5, 17, 42, 7], [11, 250, 3, 99, 120, 8]


def main():
    from transformers import Qwen2VLImageProcessor
    from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLConfig
    from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLModel

    out = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "qwen3vl-tiny")
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    cfg = Qwen3VLConfig(vision_config=VISION, text_config=TEXT, image_token_id=IMAGE_PAD,
                        video_token_id=VIDEO_PAD, vision_start_token_id=VISION_START,
                        vision_end_token_id=VISION_END)
    cfg._attn_implementation = "eager"
    cfg.vision_config._attn_implementation = "eager"
    cfg.text_config._attn_implementation = "eager"
    model = Qwen3VLModel._from_config(cfg).eval()
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
    n_img = int(grid_thw.prod()) // 4
    ids = BEFORE + [VISION_START] + [IMAGE_PAD] * n_img + [VISION_END] + AFTER
    input_ids = torch.tensor([ids])
    pixels = (torch.from_numpy(image).permute(2, 0, 1).float() / 255 - 0.5) / 0.5

    visual, caught = model.visual, {}
    hooks = [visual.patch_embed.register_forward_hook(lambda m, i, o: caught.__setitem__("patch_embeds", o)),
             visual.register_forward_hook(lambda m, i, o: caught.update(
                 {"out": o[0], **{f"deepstack.{j}": d for j, d in enumerate(o[1])}})),
             model.language_model.register_forward_hook(lambda m, args, kw, o: caught.update(
                 {"inputs_embeds": kw["inputs_embeds"][0], "position_ids": kw["position_ids"][:, 0]}),
                 with_kwargs=True)]
    with torch.no_grad():
        res = model(input_ids=input_ids, pixel_values=pixel_values, image_grid_thw=grid_thw)
        pos = visual.fast_pos_embed_interpolate(grid_thw)
    for h in hooks:
        h.remove()
    tensors = {"image": torch.from_numpy(image), "pixels": pixels, "pixel_values": pixel_values,
               "grid_thw": grid_thw.to(torch.int64), "pos_embeds": pos,
               "position_ids": caught.pop("position_ids").to(torch.float32),
               "last_hidden": res.last_hidden_state[0], **caught}
    save_file({k: v.contiguous() for k, v in tensors.items()}, os.path.join(out, "golden.safetensors"))
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, os.path.join(out, "model.safetensors"))
    import transformers
    json.dump({"vision": VISION, "text": TEXT, "image_size": SIZE, "token_ids": ids,
               "image_token_id": IMAGE_PAD, "n_img_tokens": n_img,
               "transformers": transformers.__version__, "torch": torch.__version__},
              open(os.path.join(out, "golden.json"), "w"), indent=1)
    print({k: tuple(v.shape) for k, v in tensors.items()})


if __name__ == "__main__":
    main()
