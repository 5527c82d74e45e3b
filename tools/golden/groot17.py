"""Golden fixture for GR00T N1.7: lerobot 0.6.1 `groot` with random weights, every tensor re-randomized.

Rerun (anyone, offline; the venv is outside the repo and CI never needs it):

    python3.11 -m venv /work/venv-lerobot061
    /work/venv-lerobot061/bin/pip install --ignore-requires-python "lerobot[groot]==0.6.1" "networkx<3.7"
        # lerobot 0.6.1 declares Python >= 3.12; its groot extra (transformers 5.5.4, diffusers 0.39,
        # peft, dm-tree, timm, decord, the dataset extra) does not pull flash-attn. torch 2.10.0
        # (within lerobot's torch>=2.7,<2.12) was reused from /work/venv-lerobot by hard links.
        # networkx 3.7 declares Python >= 3.12. Then, once (the tool also does it itself):
    /work/venv-lerobot061/bin/python tools/golden/py311_compat.py
        # rewrites the 5 lerobot files with PEP 695 syntax so they compile on 3.11 (idempotent,
        # recorded in <site-packages>/lerobot/.pep695_compat.json)
    HF_HUB_OFFLINE=1 /work/venv-lerobot061/bin/python tools/golden/groot17.py        # tiny, committed
    HF_HUB_OFFLINE=1 /work/venv-lerobot061/bin/python tools/golden/groot17.py --size tiny-hd128
        # tiny with the released head_dim 128, mrope [24, 20, 20] and a square camera (vla.cpp's
        # loaders fix those sections and take square frames): tests/fixtures/groot17-tiny-hd128,
        # committed, read by the vla.cpp-layout test
    HF_HUB_OFFLINE=1 /work/venv-lerobot061/bin/python tools/golden/groot17.py --size full --dry
        # the released sizes (Cosmos-Reason2-2B backbone cut to 16 layers + the N1.7 action head)
        # built on the meta device: parameter shapes and counts, the real hard-coded backbone
        # config compared with this tool's `full` sizes, and the image geometry; writes nothing
    HF_HUB_OFFLINE=1 /work/venv-lerobot061/bin/python tools/golden/groot17.py --size full --out DIR
        # random weights at the released sizes (~3.3 B parameters, ~13 GB f32): not committed
    HF_HUB_OFFLINE=1 /work/venv-lerobot061/bin/python tools/golden/groot17.py --check tests/fixtures/groot17-tiny
        # reload the folder in a fresh process, reproduce `actions`, then the float64 reference

Nothing is downloaded. lerobot's GrootPolicy builds `GR00TN17.from_pretrained(base_model_path)`
(by default nvidia/GR00T-N1.7-3B: a raw Isaac-GR00T checkpoint whose config.json, processor_config.json,
statistics.json and embodiment_id.json drive the processors) around a Qwen3-VL backbone: for
model_name "nvidia/Cosmos-Reason2-2B" its config is hard-coded (groot_n1_7.py:751) and only the
processor (tokenizer, image and video processors, chat template) is downloaded from the hub; any
other model_name is read with AutoConfig. This tool writes all of them from explicit configs:
`base/` is the raw N1.7 checkpoint folder (weights file with no tensors), `backbone/` the Qwen3-VL
config + processor files. Paths inside the fixture are relative ("./base" in config.json,
"./backbone" in base/config.json and in the preprocessor's VLM encode step), so reload from inside
the fixture folder (--check does). Deviations from the stock code, all in this process only:
`use_bf16=False` (lerobot's default is bf16 autocast, even on CPU) and model/backbone dtype float32
(the released config says bfloat16); the initial noise, which
GR00TN17ActionHead.get_action_with_features draws with `torch.randn` on the global RNG
(groot_n1_7.py:657), is replaced by the explicit `noise` tensor; the GrootN17VLMEncodeStep
model_name (hard-coded to nvidia/Cosmos-Reason2-2B by make_groot_pre_post_processors,
processor_groot.py:1259) is pointed at backbone/; the action decode transform is "none" (for
embodiment libero_sim lerobot's default "auto" binarises the gripper, processor_groot.py:2292).

What is reconstructed rather than copied from the released assets (no network here): the tokenizer
(a small byte-level BPE trained here, laid out exactly as Qwen's: NFC normalizer, Qwen2 Split
regex, ByteLevel; the Qwen3-VL added tokens in their real order after the BPE ids), the chat
template (Qwen3-VL-Instruct's template as published, reproduced from memory: no default system
turn, an image item becomes <|vision_start|><|image_pad|><|vision_end|>, a text item is copied,
each turn is <|im_start|>{role}\\n...<|im_end|>\\n), the image/video processor configs (Qwen3-VL's:
patch 16, temporal patch 2, merge 2, mean = std = 0.5, bicubic; min/max pixels scaled with the
image size), and the checkpoint's processor_config.json / statistics.json (shaped like the N1.7
LIBERO checkpoint's as lerobot's own tests mock it: albumentations eval transform, shortest edge =
target, crop fraction 0.95, q01/q99 percentile statistics per modality group, clip outliers,
formalize language, 16 valid action steps of the 40 predicted).

Writes into the output folder (default tests/fixtures/groot17-tiny/):
  config.json, model.safetensors, policy_{pre,post}processor*.{json,safetensors}
                       the checkpoint exactly as lerobot saves it (policy.save_pretrained and the
                       processors' save_pretrained); config.json's base_model_path -> "./base",
                       the preprocessor's groot_n1_7_vlm_encode_v1 model_name -> "./backbone"
  base/                the raw N1.7 checkpoint lerobot loads first: config.json (GR00TN17Config:
                       action-head sizes, select_layer, model_name "./backbone"),
                       model.safetensors with no tensors, processor_config.json, statistics.json,
                       embodiment_id.json
  backbone/            Qwen3-VL config.json (vision + text sizes, token ids, mrope sections),
                       preprocessor_config.json, video_preprocessor_config.json and the tokenizer
                       (tokenizer.json, tokenizer_config.json, chat_template.jinja, vocab.json,
                       merges.txt)
  arch.json            every size used and the formulas below
  golden.safetensors   inputs, every stage, lerobot's outputs (names below), float32 unless noted
  golden.json          versions, seeds, prompt as templated and as expanded, token ids, image-token
                       span, grid, position ids, statistics, timestep buckets, tensor list

golden.safetensors (one camera, batch of one):
  image.0 u8 [H,W,3] raw camera frame; frame.0 u8 [h,w,3] after GR00T's eval transform (cv2
  INTER_AREA shortest-edge resize, center crop, shortest-edge resize); pixels [N, 3*2*16*16] the
  Qwen2VL image processor output exactly as it enters the vision tower (smart_resize, torchvision
  bicubic on u8, (x - 127.5) / 127.5, the still frame repeated along time, merge-window patch order);
  image_grid_thw i64 [1,3]; vit_patch [N, vd] (Conv3d patch embedding), vit_pos [N, vd]
  (interpolated learned position embedding), vit_rope [N, vhd/2] (rotary angles: row freqs then
  column freqs), vit_block.{i} [N, vd] (each vision block's output), vit_out [N, vd] (last block),
  vision [N/4, lm] (merger output: the rows spliced at <|image_pad|>), deepstack.{j} [N/4, lm]
  (deepstack merger j, tapped after vision block deepstack_visual_indexes[j]), token_ids i64 [T],
  attention_mask i64 [T], mm_token_type_ids i64 [T], image_mask u8 [T], position_ids i64 [3,T]
  (M-RoPE t/h/w rows; lerobot feeds 4 rows, the first a copy of t), lm_in [T, lm] (input embeddings
  after the image splice), lm_layer.{l} [T, lm] (decoder layer l output, before the deepstack add
  that follows layers 0..n_deepstack-1), lm_out [T, lm] (= lm_layer.{last}: the backbone features,
  no final norm), vlln [T, lm], vl [T, lm] (after the VL self-attention blocks: the DiT's
  cross-attention keys/values input), state [8] raw, state_norm [8] (q01/q99 -> [-1, 1], clipped),
  state_padded [132], state_features [1, D] (state encoder output), noise [40, 132],
  velocity.{s} [40, 132] (action decoder output at Euler step s, last 40 rows), actions_norm
  [40, 132] (get_action output), actions [16, 7] (postprocessed, world units).

--check (run by the tool on what it wrote, in a fresh process) reloads the folder with lerobot and
reproduces `actions`, then recomputes every golden tensor from model.safetensors, arch.json, the
statistics and the raw camera frame with an independent float64 implementation (reference_forward
below: the formulas in arch.json made executable); frame.0, pixels, token positions must match
exactly.
"""
import argparse
import atexit
import contextlib
import gc
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import py311_compat  # noqa: E402
import resize_ref  # noqa: E402
from _noise import explicit_noise  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
_TMP = tempfile.mkdtemp(prefix="groot17-golden-")
atexit.register(shutil.rmtree, _TMP, ignore_errors=True)
os.environ["HF_LEROBOT_HOME"] = os.path.join(_TMP, "lerobot-home")
os.environ["HF_MODULES_CACHE"] = os.path.join(_TMP, "modules")
PEP695 = py311_compat.patch_pep695(verbose=True)  # before anything imports lerobot

import numpy as np  # noqa: E402
import torch  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

TASK = "Pick up the black bowl, and place it on the plate!"
CORPUS = ["pick up the black bowl and place it on the plate", "put the bowl on the stove",
          "open the top drawer and put the bowl inside", "turn on the stove", "put both the alphabet soup "
          "and the tomato sauce in the basket", "pick up the ketchup and place it in the basket",
          "perform the task", "system user assistant", "You are a helpful assistant.",
          "0 1 2 3 4 5 6 7 8 9 seconds"]
# Qwen3-VL's added tokens in their real order (ids 151643.. after the 151643 BPE ids in the real
# vocabulary; here after the small BPE vocab). special = as in Qwen3-VL's tokenizer_config.json.
ADDED = [("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True), ("<|object_ref_start|>", True),
         ("<|object_ref_end|>", True), ("<|box_start|>", True), ("<|box_end|>", True), ("<|quad_start|>", True),
         ("<|quad_end|>", True), ("<|vision_start|>", True), ("<|vision_end|>", True), ("<|vision_pad|>", True),
         ("<|image_pad|>", True), ("<|video_pad|>", True), ("<tool_call>", False), ("</tool_call>", False),
         ("<|fim_prefix|>", False), ("<|fim_middle|>", False), ("<|fim_suffix|>", False), ("<|fim_pad|>", False),
         ("<|repo_name|>", False), ("<|file_sep|>", False), ("<tool_response>", False), ("</tool_response>", False),
         ("<think>", False), ("</think>", False)]
# Qwen3-VL-Instruct's chat template (reconstructed; see the module docstring). The parts lerobot's
# N1.7 prompt uses: one user turn, image items then one text item, add_generation_prompt=False.
CHAT_TEMPLATE = (
    "{%- if messages[0].role == 'system' %}{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0].content is string %}{{- messages[0].content }}{%- else %}"
    "{%- for content in messages[0].content %}{%- if 'text' in content %}{{- content.text }}{%- endif %}{%- endfor %}"
    "{%- endif %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- set image_count = namespace(value=0) %}{%- set video_count = namespace(value=0) %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'user' or message.role == 'assistant' or (message.role == 'system' and not loop.first) %}"
    "{{- '<|im_start|>' + message.role + '\\n' }}"
    "{%- if message.content is string %}{{- message.content }}{%- else %}"
    "{%- for content in message.content %}"
    "{%- if content.type == 'image' or 'image' in content or 'image_url' in content %}"
    "{%- set image_count.value = image_count.value + 1 %}"
    "{%- if add_vision_id %}{{- 'Picture ' ~ image_count.value ~ ': ' }}{%- endif %}"
    "{{- '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{%- elif content.type == 'video' or 'video' in content %}"
    "{%- set video_count.value = video_count.value + 1 %}"
    "{%- if add_vision_id %}{{- 'Video ' ~ video_count.value ~ ': ' }}{%- endif %}"
    "{{- '<|vision_start|><|video_pad|><|vision_end|>' }}"
    "{%- elif 'text' in content %}{{- content.text }}{%- endif %}"
    "{%- endfor %}{%- endif %}{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}{{- '<|im_start|>user\\n<tool_response>\\n' }}"
    "{%- if message.content is string %}{{- message.content }}{%- endif %}{{- '\\n</tool_response><|im_end|>\\n' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")

# "full" is GR00T N1.7 3B: Cosmos-Reason2-2B (Qwen3-VL-2B layout; groot_n1_7.py:751) cut to its first
# 16 LM layers (select_layer 16) + the N1.7 action head (GR00T_N1_7_DEFAULTS, groot_n1_7.py:76).
# tiny keeps the structure: deepstack taps 3 of 5 vision blocks, non-uniform, the last block untapped
# (real: 5/11/17 of 24); LM cut 6 -> 4 layers so the deepstack adds (after LM layers 0..2) all happen
# before the layer the head reads (real: 28 -> 16); mrope sections [4, 2, 2] of head_dim 16 keep the
# real layout [24, 20, 20] of 128 (interleaved t/h/w, then t for the tail); DiT 6 blocks keep the
# text / self / image / self / text / self alternation (attend_text_every_n_blocks 2).
SIZES = {
    "tiny": dict(
        vision=dict(depth=5, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=16, temporal_patch_size=2,
                    spatial_merge_size=2, out_hidden_size=64, num_position_embeddings=64,
                    deepstack_visual_indexes=[0, 2, 3], hidden_act="gelu_pytorch_tanh", in_channels=3),
        text=dict(hidden_size=64, num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                  intermediate_size=96, rope_theta=5000000.0, mrope_section=[4, 2, 2], rms_norm_eps=1e-6,
                  vocab_size=384, max_position_embeddings=4096),
        select_layer=4,
        head=dict(hidden_size=24, input_embedding_dim=32, backbone_embedding_dim=64, max_seq_len=64,
                  max_num_embodiments=4, attend_text_every_n_blocks=2,
                  dit=dict(num_attention_heads=2, attention_head_dim=16, num_layers=6, output_dim=24),
                  vlsa=dict(num_attention_heads=4, attention_head_dim=16, num_layers=2)),
        image=dict(target=64, min_pixels=64 * 64, max_pixels=1024 * 1024, camera_hw=(100, 150))),
    "full": dict(
        vision=dict(depth=24, hidden_size=1024, intermediate_size=4096, num_heads=16, patch_size=16,
                    temporal_patch_size=2, spatial_merge_size=2, out_hidden_size=2048, num_position_embeddings=2304,
                    deepstack_visual_indexes=[5, 11, 17], hidden_act="gelu_pytorch_tanh", in_channels=3),
        text=dict(hidden_size=2048, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                  intermediate_size=6144, rope_theta=5000000.0, mrope_section=[24, 20, 20], rms_norm_eps=1e-6,
                  vocab_size=151936, max_position_embeddings=262144),
        select_layer=16,
        head=dict(hidden_size=1024, input_embedding_dim=1536, backbone_embedding_dim=2048, max_seq_len=1024,
                  max_num_embodiments=32, attend_text_every_n_blocks=2,
                  dit=dict(num_attention_heads=32, attention_head_dim=48, num_layers=32, output_dim=1024),
                  vlsa=dict(num_attention_heads=32, attention_head_dim=64, num_layers=4)),
        image=dict(target=256, min_pixels=256 * 256, max_pixels=16777216, camera_hw=(256, 256))),
}
# tiny with the language model's released head_dim 128 and mrope sections [24, 20, 20] and a square camera:
# vla.cpp's loaders fix those sections and take square frames of image_target_size (its files carry no
# sections and no camera shape), so the tests of vla.cpp's layout read this one
SIZES["tiny-hd128"] = {**SIZES["tiny"], "text": {**SIZES["tiny"]["text"], "head_dim": 128,
                                                  "mrope_section": [24, 20, 20]},
                       "image": {**SIZES["tiny"]["image"], "camera_hw": (96, 96)}}
HORIZON, VALID_HORIZON, MAX_DIM, NUM_STEPS, BUCKETS = 40, 16, 132, 4, 1000
CROP_FRACTION = 0.95
EMBODIMENT = "libero_sim"
CAMERA = "image"  # the checkpoint's video modality key -> observation.images.image
STATE_GROUPS = [("x", 1), ("y", 1), ("z", 1), ("roll", 1), ("pitch", 1), ("yaw", 1), ("gripper", 2)]  # LIBERO
ACTION_GROUPS = [("x", 1), ("y", 1), ("z", 1), ("roll", 1), ("pitch", 1), ("yaw", 1), ("gripper", 1)]
STATE_DIM = sum(d for _, d in STATE_GROUPS)
ACTION_DIM = sum(d for _, d in ACTION_GROUPS)

FORMULAS = {
    "frame": "GR00T eval transform (processor_groot.py:1384, use_albumentations=True): u8 HWC; "
             "resize_shortest_edge(S): if min(h, w) != S: scale = S / min(h, w), size (round(h*scale), "
             "round(w*scale)) with Python round (half to even), cv2.resize INTER_AREA (see resize_ref.py "
             "for OpenCV's exact integer/float arithmetic); center crop with crop_fraction f: ch = int(h*f), "
             "cw = int(w*f) (truncation), top = (h - ch) // 2, left = (w - cw) // 2; resize_shortest_edge(S) "
             "again (the aspect ratio is kept: a non-square camera gives a non-square frame)",
    "pixels": "Qwen2VLImageProcessor (torchvision backend): (h2, w2) = smart_resize(h, w, factor = "
              "patch*merge = 32, min_pixels, max_pixels): h_bar = round(h/32)*32 (Python round), w_bar "
              "likewise; if h_bar*w_bar > max: beta = sqrt(h*w/max), h_bar = max(32, floor(h/beta/32)*32); "
              "elif < min: beta = sqrt(min/(h*w)), h_bar = ceil(h*beta/32)*32 (w likewise); torchvision "
              "resize(u8 CHW, (h2, w2), BICUBIC, antialias) (identity if equal; torch's native u8 kernel, "
              "width pass then height pass); float32 (x - 127.5) / 127.5 (mean = std = 0.5 fused with "
              "1/255); a still image is repeated to temporal_patch_size = 2 frames; grid (1, h2/16, w2/16); "
              "rows in merge-window order: for block row br, block col bc, intra row ir, intra col ic "
              "(2x2 windows, row-major), patch (r, c) = (2br+ir, 2bc+ic); each row = [channel][time]"
              "[py][px] flattened (3*2*16*16 = 1536)",
    "vision_embed": "x = pixels @ W.reshape(D, 1536).T + b (the Conv3d with kernel = stride = (2,16,16)); "
                    "x += pos: the learned table of n = num_position_embeddings rows is an N x N grid "
                    "(N = sqrt(n)); for grid (gh, gw): hs = linspace(0, N-1, gh), ws = linspace(0, N-1, gw) "
                    "(float32), h0 = int(hs), h1 = min(h0+1, N-1), dh = hs - h0 (same for w), "
                    "pos(r,c) = (1-dh)(1-dw) T[h0,w0] + (1-dh)dw T[h0,w1] + dh(1-dw) T[h1,w0] + dh dw T[h1,w1] "
                    "(bilinear, align-corners style), then permuted to the merge-window order",
    "vision_block": "x += proj(attn(LN1(x))); x += fc2(gelu_tanh(fc1(LN2(x)))); LN eps 1e-6 with affine; "
                    "qkv = one Linear(D, 3D) with bias, split [q | k | v], heads of hd = D/heads; full "
                    "bidirectional attention within each image (cu_seqlens per image per temporal frame; "
                    "no windows), scale hd^-0.5; 2-D RoPE on q and k: inv_f = 1/10000^(arange(0, hd/2, 2) "
                    "/ (hd/2)) (hd/4 frequencies), angles = [row * inv_f, col * inv_f] (hd/2), emb = "
                    "cat(angles, angles), q' = q cos(emb) + rotate_half(q) sin(emb), rotate_half(x) = "
                    "cat(-x[hd/2:], x[:hd/2]); (row, col) = the patch's position in the full-resolution grid",
    "merger": "merger (after the last block): LN(D, eps 1e-6) per patch, then each 2x2 window's 4 "
              "consecutive rows concatenated (4D), fc1 (4D -> 4D) -> GELU (erf) -> fc2 (4D -> lm_hidden); "
              "deepstack mergers (use_postshuffle_norm): concatenate first, LN(4D, eps 1e-6), then the same "
              "MLP; deepstack j reads the output of vision block deepstack_visual_indexes[j]",
    "prompt": "language: formalize (lowercase, keep only alnum, whitespace and '_'); conversation = [{user: "
              "[image]*n_frames_x_views + [text]}]; chat template with add_generation_prompt=False -> "
              "'<|im_start|>user\\n<|vision_start|><|image_pad|><|vision_end|>{text}<|im_end|>\\n'; the "
              "processor repeats <|image_pad|> grid_t*grid_h*grid_w/4 times; tokenized with no BOS/EOS, "
              "padding left (batch of one: none)",
    "position_ids": "M-RoPE ids (Qwen3VLModel.get_rope_index): walk the tokens in runs of text / image; "
                    "text run of length L at cursor p: t = h = w = p..p+L-1, p += L; image with merged grid "
                    "(gt, gh/2, gw/2) at cursor p: t = p, h = p + row, w = p + col (row-major over the "
                    "merged grid), p += max(gh/2, gw/2) (not the token count); lerobot passes 4 rows "
                    "[t, t, h, w] (groot_n1_7.py:411): row 0 only feeds the causal mask (no effect with an "
                    "all-ones attention mask)",
    "lm": "Qwen3-VL text decoder cut to select_layer layers (Qwen3Backbone pops the rest); x0 = "
          "embed(ids) with the merger rows replacing the <|image_pad|> rows in order; each layer: x += "
          "o(attn(RMSNorm(x))); x += down(silu(gate(h)) * up(h)), h = RMSNorm(x); q/k RMSNorm per head "
          "(eps 1e-6) before RoPE; GQA; causal; no biases; after layer l < len(deepstack): x[image rows] "
          "+= deepstack[l]; M-RoPE: inv_f = 1/theta^(arange(0, hd, 2)/hd) (hd/2 frequencies, float32), "
          "frequency j uses the h position if j % 3 == 1 and j < 3*sec[1], the w position if j % 3 == 2 "
          "and j < 3*sec[2], else t; emb = cat(angles, angles); rotate_half; backbone_features = the last "
          "kept layer's output captured by a forward hook (groot_n1_7.py:415): NO final model.norm, and "
          "(for the real 16 of 28 layers) after all deepstack adds",
    "vlln_vlsa": "vl = vlln (LayerNorm, eps 1e-5, affine)(features) -> VL self-attention blocks: x += "
                 "attn(LN1(x)); x += FF(LN3(x)); LN affine eps 1e-5; q/k/v/out with bias, no mask, scale "
                 "1/sqrt(head_dim); FF Linear(d, 4d) -> GELU(tanh) -> Linear(4d, d)",
    "dit": "AlternateVLDiT (cross_attention_dit.py:325): sequence = [state_features (1 row), "
           "action_features (horizon rows)] (no future tokens); block i: x += attn(AdaLN(x, temb)); x += "
           "FF(LN3(x)); AdaLN: [scale, shift] = Linear(SiLU(temb)).chunk(2), LN(x, eps 1e-5, no affine) * "
           "(1 + scale) + shift; odd blocks self-attend (no mask); even blocks cross-attend to vl (q from "
           "x, k/v from vl rows, Linear(backbone_dim -> inner)): block i with i % (2 * "
           "attend_text_every_n_blocks) == 0 sees only the non-image tokens (all text and special tokens, "
           "& attention mask), the other even blocks only the <|image_pad|> tokens; out: [shift, scale] = "
           "proj_out_1(SiLU(temb)).chunk(2); LN(x, eps 1e-6, no affine) * (1 + scale) + shift; "
           "proj_out_2 -> output_dim",
    "timestep": "temb = linear_2(SiLU(linear_1(tp))), tp = [cos(t*f), sin(t*f)], f_i = exp(-ln(10000) * "
                "i / 127), i = 0..127 (diffusers Timesteps(256, flip_sin_to_cos=True, "
                "downscale_freq_shift=1)), t = the integer bucket",
    "action_encoder": "a = W1(x); tau = [sin(t*g), cos(t*g)], g_i = exp(-ln(10000) * i / (w/2)), i < w/2, "
                      "w = input_embedding_dim; h = swish(W2([a, tau])); W3(h); + position_embedding[0..H-1]; "
                      "CategorySpecificLinear: y = x @ W[e] + b[e], W stored [emb, in, out]",
    "state_encoder": "state_features = L2(ReLU(L1(state_padded))) (CategorySpecificMLP)",
    "decoder": "velocity = action_decoder(dit_out)[-horizon:] = L2(ReLU(L1(.))), all max_action_dim",
    "euler": "x_0 = noise [horizon, max_action_dim]; dt = 1/N; for k in 0..N-1: t = k/N, bucket = "
             "int(t * 1000) (truncation), x += dt * v(x, bucket); output x_N (normalised)",
    "normalisation": "statistics.json[embodiment]: per modality group, use_percentiles -> min := q01, "
                     "max := q99, flattened in modality_keys order; state: 2 * (s - min) / (max - min) - 1 "
                     "(0 where max == min), clipped to [-1, 1] (clip_outliers), zero-padded to "
                     "max_state_dim; actions: the first valid_horizon (= len(action delta_indices)) rows, "
                     "the first action_dim columns, per group (clip(a, -1, 1) + 1) * 0.5 * (max - min) + min "
                     "(absolute groups; relative groups would add the raw state, not used here)",
}


# ----------------------------------------------------------------------------- assets

def build_tokenizer(out):
    """A byte-level BPE laid out as Qwen's (vocab.json + merges.txt, the added tokens after the BPE
    ids), loaded with AutoTokenizer as lerobot loads the real one, then saved (adds tokenizer.json)."""
    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers, trainers
    from transformers import AutoTokenizer

    qwen2_regex = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                   r"|\s*[\r\n]+|\s+(?!\S)|\s+")
    tr = Tokenizer(models.BPE())
    tr.normalizer = normalizers.NFC()
    tr.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(qwen2_regex), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tr.train_from_iterator(CORPUS * 20, trainers.BpeTrainer(
        vocab_size=340, show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    model = json.loads(tr.to_str())["model"]
    vocab, merges = model["vocab"], [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    raw = os.path.join(_TMP, "tokenizer-raw")
    os.makedirs(raw)
    json.dump(vocab, open(os.path.join(raw, "vocab.json"), "w"), ensure_ascii=False)
    open(os.path.join(raw, "merges.txt"), "w").write("#version: 0.2\n" + "\n".join(merges) + "\n")
    added = {tok: len(vocab) + i for i, (tok, _) in enumerate(ADDED)}
    decoder = {str(i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
                        "special": sp} for (t, sp), i in zip(ADDED, added.values())}
    json.dump({"add_bos_token": False, "add_prefix_space": False, "added_tokens_decoder": decoder,
               "additional_special_tokens": ["<|im_start|>", "<|im_end|>", "<|object_ref_start|>",
                                             "<|object_ref_end|>", "<|box_start|>", "<|box_end|>", "<|quad_start|>",
                                             "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
                                             "<|image_pad|>", "<|video_pad|>"],
               "bos_token": None, "chat_template": CHAT_TEMPLATE, "clean_up_tokenization_spaces": False,
               "eos_token": "<|im_end|>", "errors": "replace", "model_max_length": 262144,
               "pad_token": "<|endoftext|>", "split_special_tokens": False, "tokenizer_class": "Qwen2Tokenizer",
               "unk_token": None},
              open(os.path.join(raw, "tokenizer_config.json"), "w"), indent=2)
    tok = AutoTokenizer.from_pretrained(raw)
    assert [tok.convert_tokens_to_ids(t) for t, _ in ADDED] == list(added.values())
    tok.save_pretrained(out)
    for f in ["vocab.json", "merges.txt"]:  # keep the slow files byte-identical
        shutil.copy(os.path.join(raw, f), os.path.join(out, f))
    return tok


def qwen3vl_config(tok, arch, dtype="float32"):
    vis, txt = arch["vision"], dict(arch["text"])
    sec, theta = txt.pop("mrope_section"), txt.pop("rope_theta")
    ids = {k: tok.convert_tokens_to_ids(t) for k, t in [
        ("image_token_id", "<|image_pad|>"), ("video_token_id", "<|video_pad|>"),
        ("vision_start_token_id", "<|vision_start|>"), ("vision_end_token_id", "<|vision_end|>")]}
    return dict(
        architectures=["Qwen3VLForConditionalGeneration"], model_type="qwen3_vl", tie_word_embeddings=True, **ids,
        text_config=dict(model_type="qwen3_vl_text", attention_bias=False, attention_dropout=0.0, hidden_act="silu",
                         initializer_range=0.02, bos_token_id=tok.convert_tokens_to_ids("<|endoftext|>"),
                         eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"), dtype=dtype, use_cache=True,
                         tie_word_embeddings=True, rope_theta=theta,
                         rope_scaling={"mrope_interleaved": True, "mrope_section": sec, "rope_type": "default"}, **txt),
        vision_config=dict(model_type="qwen3_vl", initializer_range=0.02, **vis), dtype=dtype)


def build_backbone(out, tok, arch):
    """backbone/: what nvidia/Cosmos-Reason2-2B holds (config, tokenizer, image/video processors)."""
    from transformers import Qwen3VLConfig
    cfg = Qwen3VLConfig(**qwen3vl_config(tok, arch))
    cfg.save_pretrained(out)
    im, vis = arch["image"], arch["vision"]
    common = {"patch_size": vis["patch_size"], "temporal_patch_size": vis["temporal_patch_size"],
              "merge_size": vis["spatial_merge_size"], "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
              "do_resize": True, "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
              "do_convert_rgb": True, "resample": 3, "processor_class": "Qwen3VLProcessor"}
    json.dump({**common, "image_processor_type": "Qwen2VLImageProcessorFast",
               "size": {"shortest_edge": im["min_pixels"], "longest_edge": im["max_pixels"]}},
              open(os.path.join(out, "preprocessor_config.json"), "w"), indent=2)
    json.dump({**common, "video_processor_type": "Qwen3VLVideoProcessor", "fps": 2, "do_sample_frames": True,
               "min_frames": 4, "max_frames": 768, "return_metadata": False,
               "size": {"shortest_edge": im["min_pixels"], "longest_edge": im["max_pixels"] * 24}},
              open(os.path.join(out, "video_preprocessor_config.json"), "w"), indent=2)
    tok.save_pretrained(out)
    return cfg


def n17_config(arch, model_name, dtype="float32"):
    """GR00TN17Config overrides (the rest are GR00T_N1_7_DEFAULTS, groot_n1_7.py:76)."""
    h, im = arch["head"], arch["image"]
    return dict(
        architectures=["Gr00tN1d7"], model_name=model_name, backbone_model_type="qwen", model_dtype=dtype,
        dtype=dtype, select_layer=arch["select_layer"], backbone_embedding_dim=h["backbone_embedding_dim"],
        hidden_size=h["hidden_size"], input_embedding_dim=h["input_embedding_dim"], max_seq_len=h["max_seq_len"],
        max_num_embodiments=h["max_num_embodiments"], attend_text_every_n_blocks=h["attend_text_every_n_blocks"],
        max_state_dim=MAX_DIM, max_action_dim=MAX_DIM, action_horizon=HORIZON, num_inference_timesteps=NUM_STEPS,
        num_timestep_buckets=BUCKETS, use_alternate_vl_dit=True,
        image_target_size=[im["target"], im["target"]], image_crop_size=None, shortest_image_edge=im["target"],
        crop_fraction=CROP_FRACTION,
        diffusion_model_cfg={"positional_embeddings": None, "num_layers": h["dit"]["num_layers"],
                             "num_attention_heads": h["dit"]["num_attention_heads"],
                             "attention_head_dim": h["dit"]["attention_head_dim"], "norm_type": "ada_norm",
                             "dropout": 0.2, "final_dropout": True, "output_dim": h["dit"]["output_dim"],
                             "interleave_self_attention": True},
        vl_self_attention_cfg={"positional_embeddings": None, "num_layers": h["vlsa"]["num_layers"],
                               "num_attention_heads": h["vlsa"]["num_attention_heads"],
                               "attention_head_dim": h["vlsa"]["attention_head_dim"], "dropout": 0.2,
                               "final_dropout": True})


def make_stats(gen):
    """statistics.json[embodiment]: per group min/max/mean/std/q01/q99 (q01/q99 inside [min, max])."""
    def group(d):
        lo = torch.randn(d, generator=gen)
        span = 0.5 + 2.0 * torch.rand(d, generator=gen)
        q01 = lo + 0.05 * span * torch.rand(d, generator=gen)
        q99 = lo + span - 0.05 * span * torch.rand(d, generator=gen)
        r = lambda t: [float(v) for v in t]  # noqa: E731
        return {"min": r(lo), "max": r(lo + span), "mean": r(lo + 0.5 * span), "std": r(0.25 * span),
                "q01": r(q01), "q99": r(q99)}
    return {"state": {k: group(d) for k, d in STATE_GROUPS}, "action": {k: group(d) for k, d in ACTION_GROUPS},
            "relative_action": {}}


def build_base(out, arch, backbone_path, stats):
    """base/: the raw N1.7 checkpoint folder (GR00TN17.from_pretrained + the processors read it)."""
    from lerobot.policies.groot.groot_n1_7 import GR00TN17Config
    from lerobot.policies.groot.processor_groot import N1_7_EMBODIMENT_MAPPING
    os.makedirs(out, exist_ok=True)
    h = arch["head"]
    assert h["dit"]["num_attention_heads"] * h["dit"]["attention_head_dim"] == h["input_embedding_dim"]
    assert h["vlsa"]["num_attention_heads"] * h["vlsa"]["attention_head_dim"] == h["backbone_embedding_dim"]
    assert h["backbone_embedding_dim"] == arch["text"]["hidden_size"] and h["dit"]["output_dim"] == h["hidden_size"]
    GR00TN17Config(**n17_config(arch, backbone_path)).save_pretrained(out)
    save_file({}, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    im = arch["image"]
    modality = {EMBODIMENT: {
        "video": {"delta_indices": [0], "modality_keys": [CAMERA]},
        "state": {"delta_indices": [0], "modality_keys": [k for k, _ in STATE_GROUPS]},
        "action": {"delta_indices": list(range(VALID_HORIZON)), "modality_keys": [k for k, _ in ACTION_GROUPS],
                   "action_configs": [{"rep": "absolute", "type": "non_eef", "format": "default"}
                                      for _ in ACTION_GROUPS]},
        "language": {"delta_indices": [0], "modality_keys": ["annotation.human.action.task_description"]}}}
    json.dump({"processor_class": "Gr00tN1d7Processor", "processor_kwargs": {
        "clip_outliers": True, "formalize_language": True, "image_crop_size": None,
        "image_target_size": [im["target"], im["target"]], "shortest_image_edge": im["target"],
        "crop_fraction": CROP_FRACTION, "use_albumentations": True, "letter_box_transform": False,
        "max_action_horizon": HORIZON, "max_state_dim": MAX_DIM, "max_action_dim": MAX_DIM, "use_percentiles": True,
        "use_relative_action": False, "state_dropout_prob": 0.0, "modality_configs": modality}},
        open(os.path.join(out, "processor_config.json"), "w"), indent=1)
    json.dump({EMBODIMENT: stats}, open(os.path.join(out, "statistics.json"), "w"), indent=1)
    json.dump(N1_7_EMBODIMENT_MAPPING, open(os.path.join(out, "embodiment_id.json"), "w"), indent=1)


# ----------------------------------------------------------------------------- lerobot patches

@contextlib.contextmanager
def record_frames():
    """The u8 frames GR00T's eval transform hands to the Qwen3-VL processor."""
    from lerobot.policies.groot import processor_groot as pg
    real, frames = pg._transform_n1_7_image_for_vlm_albumentations, []

    def wrapped(image, **kw):
        out = real(image, **kw)
        frames.append(np.array(out, copy=True))
        return out

    pg._transform_n1_7_image_for_vlm_albumentations = wrapped
    try:
        yield frames
    finally:
        pg._transform_n1_7_image_for_vlm_albumentations = real


def rerandomize(policy, gen):
    """Every tensor gets fresh values (init leaves norm gains at 1 and biases at 0, which would hide a
    dropped term). Norm gains 1 + 0.2 N(0,1); biases 0.2 N(0,1); matrices N(0,1)/sqrt(fan_in)
    (CategorySpecificLinear W is [embodiment, in, out]: fan_in = in; Conv3d: in*kt*kh*kw);
    embeddings 0.5 N(0,1)."""
    embeddings = {f"{n}.weight" for n, m in policy.named_modules() if isinstance(m, torch.nn.Embedding)}
    seen = set()
    with torch.no_grad():
        for name, t in policy.state_dict(keep_vars=True).items():
            if t.data_ptr() in seen:  # tied lm_head / embed_tokens: once
                continue
            seen.add(t.data_ptr())
            assert t.dtype == torch.float32, (name, t.dtype)
            r = torch.randn(t.shape, generator=gen, dtype=torch.float32)
            leaf = name.rsplit(".", 1)[-1]
            if t.ndim == 1 and ("norm" in name or "vlln" in name):
                v = (1.0 + 0.2 * r) if leaf == "weight" else 0.2 * r
            elif t.ndim == 1 or (leaf == "b" and t.ndim == 2):
                v = 0.2 * r
            elif leaf == "W" and t.ndim == 3:
                v = r / t.shape[1] ** 0.5
            elif name in embeddings:
                v = 0.5 * r
            else:
                v = r / t[0].numel() ** 0.5
            t.data.copy_(v)


def rewrite_paths(out):
    """Absolute paths used while generating -> paths relative to the fixture folder."""
    p = os.path.join(out, "config.json")
    d = json.load(open(p))
    d["base_model_path"] = "./base"
    json.dump(d, open(p, "w"), indent=4)
    p = os.path.join(out, "base", "config.json")
    d = json.load(open(p))
    d["model_name"] = "./backbone"
    json.dump(d, open(p, "w"), indent=2)
    p = os.path.join(out, "policy_preprocessor.json")
    d = json.load(open(p))
    for s in d["steps"]:
        if s.get("registry_name") == "groot_n1_7_vlm_encode_v1":
            s["config"]["model_name"] = "./backbone"
    json.dump(d, open(p, "w"), indent=2)


# ----------------------------------------------------------------------------- independent reference
# A second implementation of the whole inference from the fixture files alone (numpy / plain torch
# ops in float64, no lerobot, no transformers), run by --check: what FORMULAS says, made executable.

def reference_frame(raw, target, crop_fraction):
    def shortest(img):
        h, w = img.shape[:2]
        if min(h, w) == target:
            return img
        s = target / float(min(h, w))
        return resize_ref.cv2_area_u8(img, max(1, int(round(h * s))), max(1, int(round(w * s))))
    x = shortest(np.asarray(raw, np.uint8))
    h, w = x.shape[:2]
    ch, cw = max(1, int(h * crop_fraction)), max(1, int(w * crop_fraction))
    top, left = max(0, (h - ch) // 2), max(0, (w - cw) // 2)
    return shortest(x[top:top + ch, left:left + cw])


def smart_resize(h, w, factor, min_pixels, max_pixels):
    hb, wb = round(h / factor) * factor, round(w / factor) * factor
    if hb * wb > max_pixels:
        beta = math.sqrt(h * w / max_pixels)
        hb, wb = max(factor, math.floor(h / beta / factor) * factor), max(factor, math.floor(w / beta / factor) * factor)
    elif hb * wb < min_pixels:
        beta = math.sqrt(min_pixels / (h * w))
        hb, wb = math.ceil(h * beta / factor) * factor, math.ceil(w * beta / factor) * factor
    return hb, wb


def reference_pixels(frame, A):
    """frame u8 HWC -> (rows [N, 3*T*P*P] float32, (gt, gh, gw))."""
    v, im = A["vision"], A["image_processor"]
    P, TP, M = v["patch_size"], v["temporal_patch_size"], v["spatial_merge_size"]
    h2, w2 = smart_resize(frame.shape[0], frame.shape[1], P * M, im["min_pixels"], im["max_pixels"])
    x = resize_ref.torch_bicubic_resize_u8(frame, h2, w2).astype(np.float32)
    x = (x - np.float32(127.5)) / np.float32(127.5)  # HWC
    gh, gw = h2 // P, w2 // P
    rows = []
    for br in range(gh // M):
        for bc in range(gw // M):
            for ir in range(M):
                for ic in range(M):
                    r, c = br * M + ir, bc * M + ic
                    patch = x[r * P:(r + 1) * P, c * P:(c + 1) * P].transpose(2, 0, 1)  # C, py, px
                    rows.append(np.stack([patch] * TP, 1).reshape(-1))  # C, T, py, px
    return np.stack(rows), (1, gh, gw)


def merge_order(gh, gw, M):
    """(row, col) of each patch in merge-window order."""
    return [(br * M + ir, bc * M + ic) for br in range(gh // M) for bc in range(gw // M)
            for ir in range(M) for ic in range(M)]


def reference_position_ids(ids, image_token_id, grids, M):
    """Qwen3-VL M-RoPE ids [3, T] from the token ids and each image's (gt, gh, gw)."""
    pos, p, i, T, gi = [[], [], []], 0, 0, len(ids), 0
    while i < T:
        if ids[i] != image_token_id:
            for a in range(3):
                pos[a].append(p)
            p, i = p + 1, i + 1
            continue
        gt, gh, gw = grids[gi]
        gi += 1
        lh, lw = gh // M, gw // M
        for _t in range(gt):
            for r in range(lh):
                for c in range(lw):
                    pos[0].append(p)
                    pos[1].append(p + r)
                    pos[2].append(p + c)
        i += gt * lh * lw
        p += max(lh, lw)
    return torch.tensor(pos, dtype=torch.int64)


def reference_forward(fixture):
    """Every golden tensor from model.safetensors + arch.json + statistics + the raw frame."""
    import torch.nn.functional as F
    f64 = torch.float64
    from safetensors import safe_open
    st_file = safe_open(os.path.join(fixture, "model.safetensors"), framework="pt")
    A = json.load(open(os.path.join(fixture, "arch.json")))
    J = json.load(open(os.path.join(fixture, "golden.json")))
    G = load_file(os.path.join(fixture, "golden.safetensors"))
    pre = A["weights_prefix"]
    keys = set(st_file.keys())

    class Weights:  # loaded on use, float64
        def __contains__(self, k):
            return pre + k in keys

        def __getitem__(self, k):
            return st_file.get_tensor(pre + k).to(f64)

    W = Weights()
    errs = {}

    def err(name, x):
        errs[name] = float((x.to(f64) - G[name].to(f64)).abs().max())

    def lin(x, p, bias=True):
        return x @ W[p + ".weight"].T + (W[p + ".bias"] if bias else 0)

    def ln(x, p, eps):  # p None: no affine
        y = (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + eps)
        return y if p is None else y * W[p + ".weight"] + W[p + ".bias"]

    def rms(x, w, eps):
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w

    def rot_half(u):
        h = u.shape[-1] // 2
        return torch.cat([-u[..., h:], u[..., :h]], -1)

    def attn(q, k, v, heads, kv_heads, hd, causal=False, mask=None):
        t, n = q.shape[0], k.shape[0]
        q = q.view(t, heads, hd).transpose(0, 1)
        k = k.view(n, kv_heads, hd).transpose(0, 1).repeat_interleave(heads // kv_heads, 0)
        v = v.view(n, kv_heads, hd).transpose(0, 1).repeat_interleave(heads // kv_heads, 0)
        sc = q @ k.transpose(1, 2) / math.sqrt(hd)
        if causal:
            sc = sc + torch.full((t, n), float("-inf"), dtype=f64).triu(1)
        if mask is not None:
            sc = sc.masked_fill(~mask[None, None, :], float("-inf"))
        return (sc.softmax(-1) @ v).transpose(0, 1).reshape(t, heads * hd)

    gelu_tanh = lambda x: F.gelu(x, approximate="tanh")  # noqa: E731
    V, L, H = A["vision"], A["lm"], A["action_head"]
    M = V["spatial_merge_size"]

    # --- image: raw -> frame -> pixels (must be exact)
    raw = G["image.0"].numpy()
    frame = reference_frame(raw, A["image_transform"]["target"], A["image_transform"]["crop_fraction"])
    errs["frame.0"] = float(np.abs(frame.astype(np.int64) - G["frame.0"].numpy().astype(np.int64)).max()) \
        if frame.shape == tuple(G["frame.0"].shape) else float("inf")
    rows, grid = reference_pixels(G["frame.0"].numpy(), A)
    errs["pixels"] = float(np.abs(rows - G["pixels"].numpy()).max()) if rows.shape == tuple(G["pixels"].shape) \
        else float("inf")
    errs["image_grid_thw"] = float(list(grid) != G["image_grid_thw"][0].tolist())
    _, gh, gw = grid

    # --- vision tower
    VP = "backbone.model.model.visual."
    D, heads = V["hidden_size"], V["num_heads"]
    hd = D // heads
    x = torch.from_numpy(rows).to(f64) @ W[VP + "patch_embed.proj.weight"].reshape(D, -1).T + W[VP + "patch_embed.proj.bias"]
    err("vit_patch", x)
    N = int(round(V["num_position_embeddings"] ** 0.5))
    table = W[VP + "pos_embed.weight"].view(N, N, D)
    hs = [r * (N - 1) / (gh - 1) for r in range(gh)] if gh > 1 else [0.0]
    ws = [c * (N - 1) / (gw - 1) for c in range(gw)] if gw > 1 else [0.0]
    order = merge_order(gh, gw, M)
    pos = []
    for r, c in order:
        h0, w0 = int(hs[r]), int(ws[c])
        h1, w1 = min(h0 + 1, N - 1), min(w0 + 1, N - 1)
        dh, dw = hs[r] - h0, ws[c] - w0
        pos.append((1 - dh) * (1 - dw) * table[h0, w0] + (1 - dh) * dw * table[h0, w1]
                   + dh * (1 - dw) * table[h1, w0] + dh * dw * table[h1, w1])
    pos = torch.stack(pos)
    err("vit_pos", pos)
    x = x + pos
    inv = 1.0 / 10000.0 ** (torch.arange(0, hd // 2, 2, dtype=f64) / (hd // 2))
    ang = torch.stack([torch.cat([r * inv, c * inv]) for r, c in order])
    err("vit_rope", ang)
    emb = torch.cat([ang, ang], -1)
    cos, sin = emb.cos()[:, None], emb.sin()[:, None]
    deep = []
    n_tok = x.shape[0]

    def merger(u, p, post):
        if post:
            u = ln(u.reshape(-1, 4 * D), p + ".norm", 1e-6)
        else:
            u = ln(u, p + ".norm", 1e-6).reshape(-1, 4 * D)
        return lin(F.gelu(lin(u, p + ".linear_fc1")), p + ".linear_fc2")

    for b in range(V["depth"]):
        B = VP + f"blocks.{b}."
        h = ln(x, B + "norm1", 1e-6)
        qkv = lin(h, B + "attn.qkv").view(n_tok, 3, heads, hd)
        q, k, v = qkv[:, 0], qkv[:, 1], qkv[:, 2]
        q, k = q * cos + rot_half(q) * sin, k * cos + rot_half(k) * sin
        x = x + lin(attn(q.reshape(n_tok, D), k.reshape(n_tok, D), v.reshape(n_tok, D), heads, heads, hd), B + "attn.proj")
        x = x + lin(gelu_tanh(lin(ln(x, B + "norm2", 1e-6), B + "mlp.linear_fc1")), B + "mlp.linear_fc2")
        err(f"vit_block.{b}", x)
        if b in V["deepstack_visual_indexes"]:
            j = V["deepstack_visual_indexes"].index(b)
            deep.append(merger(x, VP + f"deepstack_merger_list.{j}", True))
            err(f"deepstack.{j}", deep[-1])
    err("vit_out", x)
    vis = merger(x, VP + "merger", False)
    err("vision", vis)

    # --- language model
    LP = "backbone.model.model.language_model."
    ids = G["token_ids"]
    emb_key = LP + "embed_tokens.weight" if LP + "embed_tokens.weight" in W else "backbone.model.lm_head.weight"
    x = W[emb_key][ids].clone()
    img = ids == A["image_token_id"]
    errs["image_mask"] = float(not torch.equal(img, G["image_mask"].bool()))
    x[img] = vis
    err("lm_in", x)
    pid = reference_position_ids(ids.tolist(), A["image_token_id"], [grid], M)
    errs["position_ids"] = float(not torch.equal(pid, G["position_ids"]))
    t, lhd = x.shape[0], L["head_dim"]
    inv = 1.0 / L["rope_theta"] ** (torch.arange(0, lhd, 2, dtype=f64) / lhd)
    sec = L["mrope_section"]
    axis = [1 if (j % 3 == 1 and j < 3 * sec[1]) else 2 if (j % 3 == 2 and j < 3 * sec[2]) else 0
            for j in range(lhd // 2)]
    ang = torch.stack([pid[axis[j]].to(f64) * inv[j] for j in range(lhd // 2)], -1)
    emb = torch.cat([ang, ang], -1)
    cos, sin = emb.cos()[:, None], emb.sin()[:, None]
    for l in range(L["layers_used"]):
        B = LP + f"layers.{l}."
        h = rms(x, W[B + "input_layernorm.weight"], L["rms_eps"])
        q = rms(lin(h, B + "self_attn.q_proj", False).view(t, L["heads"], lhd), W[B + "self_attn.q_norm.weight"], L["rms_eps"])
        k = rms(lin(h, B + "self_attn.k_proj", False).view(t, L["kv_heads"], lhd), W[B + "self_attn.k_norm.weight"], L["rms_eps"])
        q, k = q * cos + rot_half(q) * sin, k * cos + rot_half(k) * sin
        a = attn(q.reshape(t, -1), k.reshape(t, -1), lin(h, B + "self_attn.v_proj", False), L["heads"], L["kv_heads"],
                 lhd, causal=True)
        x = x + lin(a, B + "self_attn.o_proj", False)
        h = rms(x, W[B + "post_attention_layernorm.weight"], L["rms_eps"])
        x = x + lin(F.silu(lin(h, B + "mlp.gate_proj", False)) * lin(h, B + "mlp.up_proj", False), B + "mlp.down_proj", False)
        err(f"lm_layer.{l}", x)
        last = x  # the head reads the last kept layer's output as the hook sees it: before any deepstack add
        if l < len(deep):
            x = x.clone()
            x[img] = x[img] + deep[l]
    err("lm_out", last)
    x = last

    # --- vlln + VL self-attention
    HP = "action_head."
    x = ln(x, HP + "vlln", 1e-5)
    err("vlln", x)
    vs = A["vlsa"]
    for b in range(vs["blocks"]):
        B = HP + f"vl_self_attention.transformer_blocks.{b}."
        h = ln(x, B + "norm1", 1e-5)
        x = x + lin(attn(lin(h, B + "attn1.to_q"), lin(h, B + "attn1.to_k"), lin(h, B + "attn1.to_v"),
                         vs["heads"], vs["heads"], vs["head_dim"]), B + "attn1.to_out.0")
        x = x + lin(gelu_tanh(lin(ln(x, B + "norm3", 1e-5), B + "ff.net.0.proj")), B + "ff.net.2")
    vl = x
    err("vl", vl)

    # --- action head
    e = A["embodiment"]["id"]
    cat_lin = lambda u, p: u @ W[p + ".W"][e] + W[p + ".b"][e]  # noqa: E731
    st = J["stats_flat"]
    mn, mx = (torch.tensor(st["state"][k], dtype=f64) for k in ["min", "max"])
    sn = torch.where(mx != mn, 2 * (G["state"].to(f64) - mn) / (mx - mn) - 1, torch.zeros_like(mn)).clamp(-1, 1)
    err("state_norm", sn)
    s = torch.zeros(H["max_state_dim"], dtype=f64)
    s[:sn.shape[0]] = sn
    err("state_padded", s)
    sf = cat_lin(F.relu(cat_lin(s[None], HP + "state_encoder.layer1")), HP + "state_encoder.layer2")
    err("state_features", sf)
    dt, w, n_steps = A["dit"], H["input_embedding_dim"], H["num_inference_timesteps"]
    txt_mask, img_mask = ~img & G["attention_mask"].bool(), img & G["attention_mask"].bool()
    xa = G["noise"].to(f64)
    for k in range(n_steps):
        bucket = float(int(k / n_steps * H["num_timestep_buckets"]))
        f = torch.exp(-math.log(10000) * torch.arange(128, dtype=f64) / 127) * bucket
        TE = HP + "model.timestep_encoder.timestep_embedder."
        temb = lin(F.silu(lin(torch.cat([f.cos(), f.sin()]), TE + "linear_1")), TE + "linear_2")
        g2 = torch.exp(-torch.arange(w // 2, dtype=f64) * (math.log(10000.0) / (w // 2))) * bucket
        tau = torch.cat([g2.sin(), g2.cos()]).expand(xa.shape[0], -1)
        a = cat_lin(xa, HP + "action_encoder.W1")
        a = cat_lin(F.silu(cat_lin(torch.cat([a, tau], -1), HP + "action_encoder.W2")), HP + "action_encoder.W3")
        a = a + W[HP + "position_embedding.weight"][: xa.shape[0]]
        x = torch.cat([sf, a])
        for b in range(dt["layers"]):
            B = HP + f"model.transformer_blocks.{b}."
            scale, shift = lin(F.silu(temb), B + "norm1.linear").chunk(2)
            h = ln(x, None, 1e-5) * (1 + scale) + shift
            if b % 2 == 1:
                kv, mask = h, None
            else:
                kv = vl
                mask = txt_mask if b % (2 * dt["attend_text_every_n_blocks"]) == 0 else img_mask
            x = x + lin(attn(lin(h, B + "attn1.to_q"), lin(kv, B + "attn1.to_k"), lin(kv, B + "attn1.to_v"),
                             dt["heads"], dt["heads"], dt["head_dim"], mask=mask), B + "attn1.to_out.0")
            x = x + lin(gelu_tanh(lin(ln(x, None, 1e-5), B + "ff.net.0.proj")), B + "ff.net.2")
        shift, scale = lin(F.silu(temb), HP + "model.proj_out_1").chunk(2)
        x = lin(ln(x, None, 1e-6) * (1 + scale) + shift, HP + "model.proj_out_2")
        v = cat_lin(F.relu(cat_lin(x, HP + "action_decoder.layer1")), HP + "action_decoder.layer2")[-xa.shape[0]:]
        err(f"velocity.{k}", v)
        xa = xa + v / n_steps
    err("actions_norm", xa)
    mn, mx = (torch.tensor(st["action"][k], dtype=f64) for k in ["min", "max"])
    a = xa[:J["valid_horizon"], :mn.shape[0]].clamp(-1, 1)
    err("actions", (a + 1) * 0.5 * (mx - mn) + mn)
    return errs


# ----------------------------------------------------------------------------- run

def make_obs(image, state):
    return {"observation.state": state.clone(), "task": TASK,
            f"observation.images.{CAMERA}": image.permute(2, 0, 1).float() / 255.0}


def run_policy(policy, pre, post, image, state, noise):
    """lerobot's inference path: preprocessor -> predict_action_chunk -> postprocessor (whole chunk)."""
    with record_frames() as frames:
        batch = pre(make_obs(image, state))
    with explicit_noise(noise[None]) as calls:
        chunk = policy.predict_action_chunk(dict(batch))
    assert len(calls) == 1, "get_action drew no noise through torch.randn(size=...)"
    return batch, frames, chunk, post(chunk)


def load_fixture(fixture):
    from lerobot.policies.groot.modeling_groot import GrootPolicy
    from lerobot.policies.groot.processor_groot import make_groot_pre_post_processors_from_pretrained
    cwd = os.getcwd()
    os.chdir(fixture)  # config.json says base_model_path "./base"; base says model_name "./backbone"
    try:
        policy = GrootPolicy.from_pretrained(fixture).eval()
        assert policy.config.base_model_path == "./base" and not policy.config.use_bf16
        pre, post = make_groot_pre_post_processors_from_pretrained(policy.config, fixture)
    finally:
        os.chdir(cwd)
    return policy, pre, post


def check(fixture):
    """Reload the fixture in this (fresh) process and reproduce the golden actions."""
    fixture = os.path.abspath(fixture)
    g = load_file(os.path.join(fixture, "golden.safetensors"))
    policy, pre, post = load_fixture(fixture)
    model, final = policy._groot_model, []
    real_get_action = model.get_action
    model.get_action = lambda inputs, options=None: (lambda o: final.append(o["action_pred"].clone()) or o)(
        real_get_action(inputs, options))
    cwd = os.getcwd()
    os.chdir(fixture)  # the VLM encode step loads ./backbone lazily, on first use
    try:
        with torch.no_grad():
            batch, frames, chunk, actions = run_policy(policy, pre, post, g["image.0"], g["state"], g["noise"])
    finally:
        os.chdir(cwd)
    assert torch.equal(batch["input_ids"][0], g["token_ids"])
    err = {"actions_norm": float((final[0][0] - g["actions_norm"]).abs().max()),
           "actions": float((actions[0] - g["actions"]).abs().max()),
           "pixels": float((batch["pixel_values"] - g["pixels"]).abs().max()),
           "frame": float(np.abs(frames[0].astype(int) - g["frame.0"].numpy().astype(int)).max())}
    print("reload check (max abs err):", json.dumps(err))
    assert max(err.values()) < 1e-5, err
    ref = reference_forward(fixture)
    print("independent float64 reference (max abs err):", json.dumps({k: float(f"{v:.2e}") for k, v in ref.items()}))
    exact = ["frame.0", "pixels", "image_grid_thw", "image_mask", "position_ids"]
    assert all(ref[k] == 0.0 for k in exact), {k: ref[k] for k in exact}
    if json.load(open(os.path.join(fixture, "arch.json")))["size"].startswith("tiny"):
        assert max(ref.values()) < 1e-4, ref
    return err


def generate(a, out):
    arch = SIZES[a.size]
    im = arch["image"]
    os.makedirs(out)
    tok = build_tokenizer(os.path.join(_TMP, "tokenizer"))
    backbone = os.path.join(out, "backbone")
    build_backbone(backbone, tok, arch)
    for f in ["vocab.json", "merges.txt"]:  # the slow files as trained, byte-identical
        shutil.copy(os.path.join(_TMP, "tokenizer", f), os.path.join(backbone, f))
    gen = torch.Generator().manual_seed(a.seed)
    stats = make_stats(gen)
    base = os.path.join(out, "base")
    build_base(base, arch, backbone, stats)

    import diffusers
    import lerobot
    import transformers
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.groot.configuration_groot import GrootConfig
    from lerobot.policies.groot.modeling_groot import GrootPolicy
    from lerobot.policies.groot.processor_groot import (GrootN17ActionDecodeStep, GrootN17PackInputsStep,
                                                        GrootN17VLMEncodeStep, make_groot_pre_post_processors)
    from lerobot.policies.groot.utils import prepare_n1_7_language_batch

    feats = {"observation.state": PolicyFeature(type=FeatureType.STATE, shape=(STATE_DIM,)),
             f"observation.images.{CAMERA}": PolicyFeature(type=FeatureType.VISUAL, shape=(3, *im["camera_hw"]))}
    cfg = GrootConfig(device="cpu", base_model_path=base, use_bf16=False, embodiment_tag=EMBODIMENT,
                      action_decode_transform="none", input_features=feats,
                      output_features={"action": PolicyFeature(type=FeatureType.ACTION, shape=(ACTION_DIM,))})
    torch.manual_seed(a.seed)
    policy = GrootPolicy(cfg).eval()
    model = policy._groot_model
    for n, t in list(model.named_parameters()) + list(model.named_buffers()):
        assert t.dtype in (torch.float32, torch.int64, torch.bool), (n, t.dtype)
    rerandomize(policy, gen)
    qwen = model.backbone.model
    visual, lm = model.backbone.visual, model.backbone.language_model
    assert len(lm.layers) == arch["select_layer"], len(lm.layers)
    tied = qwen.lm_head.weight.data_ptr() == lm.embed_tokens.weight.data_ptr()
    assert tied
    pre, post = make_groot_pre_post_processors(cfg)
    enc = next(p for p in pre.steps if isinstance(p, GrootN17VLMEncodeStep))
    pack = next(p for p in pre.steps if isinstance(p, GrootN17PackInputsStep))
    dec = next(p for p in post.steps if isinstance(p, GrootN17ActionDecodeStep))
    enc.model_name = backbone  # hard-coded to nvidia/Cosmos-Reason2-2B (processor_groot.py:1259)
    assert enc.use_albumentations and pack.use_percentiles and pack.clip_outliers and pack.formalize_language
    assert dec.action_decode_transform is None and not dec.use_relative_action
    policy.save_pretrained(out)
    pre.save_pretrained(out)
    post.save_pretrained(out)
    rewrite_paths(out)

    image = torch.randint(0, 256, (*im["camera_hw"], 3), generator=gen, dtype=torch.uint8)
    flat = {"state": {k: sum((stats["state"][g][k] for g, _ in STATE_GROUPS), []) for k in ["q01", "q99"]},
            "action": {k: sum((stats["action"][g][k] for g, _ in ACTION_GROUPS), []) for k in ["q01", "q99"]}}
    smin, smax = torch.tensor(flat["state"]["q01"]), torch.tensor(flat["state"]["q99"])
    state = smin + (smax - smin) * (-0.15 + 1.3 * torch.rand(STATE_DIM, generator=gen))  # some outside: clipped
    noise = torch.randn(HORIZON, MAX_DIM, generator=gen)

    templated, grids = [], []
    proc = enc.proc
    real_tpl = proc.apply_chat_template
    proc.apply_chat_template = lambda *x, **k: templated.append(real_tpl(*x, **k)) or templated[-1]

    rec = {k: [] for k in ["vit_patch", "vit_pos", "vit_rope", "vit", "lm_kw", "lm_layer", "backbone", "vlln", "vl",
                           "state_features", "dec", "t", "final"]}
    rec.update({f"vit_block.{b}": [] for b in range(len(visual.blocks))})
    det = lambda o: o.detach().clone()  # noqa: E731
    hooks = [visual.patch_embed.register_forward_hook(lambda m, i, o: rec["vit_patch"].append(det(o))),
             visual.register_forward_hook(lambda m, i, o: rec["vit"].append(o)),
             lm.register_forward_pre_hook(lambda m, args, kw: rec["lm_kw"].append(
                 {k: (det(v) if torch.is_tensor(v) else v) for k, v in kw.items()}), with_kwargs=True),
             model.backbone.register_forward_hook(lambda m, i, o: rec["backbone"].append(det(o["backbone_features"]))),
             model.action_head.vlln.register_forward_hook(lambda m, i, o: rec["vlln"].append(det(o))),
             model.action_head.vl_self_attention.register_forward_hook(lambda m, i, o: rec["vl"].append(det(o))),
             model.action_head.state_encoder.register_forward_hook(lambda m, i, o: rec["state_features"].append(det(o))),
             model.action_head.action_decoder.register_forward_hook(lambda m, i, o: rec["dec"].append(det(o))),
             model.action_head.model.register_forward_pre_hook(
                 lambda m, args, kw: rec["t"].append(kw["timestep"].tolist()), with_kwargs=True)]
    for b, blk in enumerate(visual.blocks):
        hooks.append(blk.register_forward_hook(lambda m, i, o, b=b: rec[f"vit_block.{b}"].append(det(o))))
    for l, layer in enumerate(lm.layers):
        hooks.append(layer.register_forward_hook(
            lambda m, i, o, l=l: rec["lm_layer"].append((l, det(o[0] if isinstance(o, tuple) else o)))))
    real_pos, real_rope = visual.fast_pos_embed_interpolate, visual.rot_pos_emb
    visual.fast_pos_embed_interpolate = lambda g: (lambda o: rec["vit_pos"].append(det(o)) or o)(real_pos(g))
    visual.rot_pos_emb = lambda g: (lambda o: rec["vit_rope"].append(det(o)) or o)(real_rope(g))
    real_get_action = model.get_action
    model.get_action = lambda inputs, options=None: (lambda o: rec["final"].append(o["action_pred"].clone()) or o)(
        real_get_action(inputs, options))
    with torch.no_grad():
        batch, frames, chunk, actions = run_policy(policy, pre, post, image, state, noise)
    for hk in hooks:
        hk.remove()
    del visual.fast_pos_embed_interpolate, visual.rot_pos_emb
    model.get_action = real_get_action
    proc.apply_chat_template = real_tpl

    assert len(frames) == 1 and len(rec["vit"]) == 1 and len(rec["dec"]) == NUM_STEPS and len(rec["final"]) == 1
    ids, mask = batch["input_ids"][0], batch["attention_mask"][0]
    assert bool(mask.all()), "batch of one: no padding expected"
    grid = batch["image_grid_thw"]
    img_id = qwen.config.image_token_id
    img_mask = ids == img_id
    kw = rec["lm_kw"][0]
    pos4 = kw["position_ids"][:, 0]
    assert pos4.shape[0] == 4 and torch.equal(pos4[0], pos4[1]), "lerobot's legacy 4-row position ids"
    n_deep = len(visual.config.deepstack_visual_indexes)
    assert len(kw["deepstack_visual_embeds"]) == n_deep and torch.equal(kw["visual_pos_masks"][0], img_mask)
    vout = rec["vit"][0]
    deep = [det(d) for d in vout.deepstack_features]
    for j in range(n_deep):
        assert torch.equal(deep[j], kw["deepstack_visual_embeds"][j])
    lm_layers = dict(rec["lm_layer"])
    assert torch.equal(rec["backbone"][0], lm_layers[len(lm.layers) - 1]), "head reads the last kept layer, no norm"
    # The tokenizer.json in backbone/ gives the same ids as the processor's tokenizer.
    from tokenizers import Tokenizer
    t_json = Tokenizer.from_file(os.path.join(backbone, "tokenizer.json"))
    expanded = proc.tokenizer.decode(ids.tolist(), skip_special_tokens=False)
    assert t_json.encode(expanded, add_special_tokens=True).ids == ids.tolist()
    assert chunk.shape == (1, VALID_HORIZON, ACTION_DIM) and actions.shape == (1, VALID_HORIZON, ACTION_DIM)
    assert torch.equal(chunk[0], rec["final"][0][0, :VALID_HORIZON, :ACTION_DIM])
    # Normalisation formulas (FORMULAS["normalisation"]).
    sn = batch["state"][0, 0]
    ref_sn = (2 * (state - smin) / (smax - smin) - 1).clamp(-1, 1)
    assert torch.allclose(sn[:STATE_DIM], ref_sn, atol=1e-6) and not sn[STATE_DIM:].any()
    amin, amax = torch.tensor(flat["action"]["q01"]), torch.tensor(flat["action"]["q99"])
    ref_a = (chunk[0].clamp(-1, 1) + 1) * 0.5 * (amax - amin) + amin
    assert torch.allclose(actions[0], ref_a, atol=1e-5)

    golden = {"image.0": image, "frame.0": torch.from_numpy(frames[0]), "pixels": batch["pixel_values"],
              "vit_patch": rec["vit_patch"][0], "vit_pos": rec["vit_pos"][0], "vit_rope": rec["vit_rope"][0],
              "vit_out": det(vout.last_hidden_state), "vision": det(vout.pooler_output[0] if isinstance(
                  vout.pooler_output, (tuple, list)) else vout.pooler_output),
              "lm_in": kw["inputs_embeds"][0], "lm_out": rec["backbone"][0][0], "vlln": rec["vlln"][0][0],
              "vl": rec["vl"][0][0], "state": state, "state_norm": sn[:STATE_DIM], "state_padded": sn,
              "state_features": rec["state_features"][0][0], "noise": noise, "actions_norm": rec["final"][0][0],
              "actions": actions[0]}
    for b in range(len(visual.blocks)):
        golden[f"vit_block.{b}"] = rec[f"vit_block.{b}"][0]
    for j in range(n_deep):
        golden[f"deepstack.{j}"] = deep[j]
    for l in range(len(lm.layers)):
        golden[f"lm_layer.{l}"] = lm_layers[l][0]
    for k, v in enumerate(rec["dec"]):
        golden[f"velocity.{k}"] = v[0, -HORIZON:]
    golden = {k: (t if t.dtype == torch.uint8 else t.float()).contiguous().clone() for k, t in golden.items()}
    golden.update({"token_ids": ids.to(torch.int64).contiguous(), "attention_mask": mask.to(torch.int64).contiguous(),
                   "mm_token_type_ids": batch["mm_token_type_ids"][0].to(torch.int64).contiguous(),
                   "image_mask": img_mask.to(torch.uint8).contiguous(),
                   "image_grid_thw": grid.to(torch.int64).contiguous(),
                   "position_ids": pos4[1:].to(torch.int64).contiguous()})
    assert torch.equal(golden["vision"], kw["inputs_embeds"][0][img_mask])
    save_file(golden, os.path.join(out, "golden.safetensors"))

    buckets = [int(t[0]) for t in rec["t"]]
    assert buckets == [int(k / NUM_STEPS * BUCKETS) for k in range(NUM_STEPS)], buckets
    x = noise.clone()
    for k in range(NUM_STEPS):
        x = x + (1.0 / NUM_STEPS) * golden[f"velocity.{k}"]  # groot_n1_7.py:708
    assert torch.allclose(x, golden["actions_norm"], atol=1e-5)

    keys = list(load_file(os.path.join(out, "model.safetensors")).keys())
    prefix = "_groot_model."
    assert all(k.startswith(prefix) for k in keys)
    h, vis, txt = arch["head"], arch["vision"], arch["text"]
    emb_map = pack.embodiment_mapping
    pos_row = golden["position_ids"]
    arch_json = {
        "size": a.size,
        "weights_prefix": prefix,
        "weights_stored": sorted(k[len(prefix):] for k in keys),
        "image_transform": {"kind": "albumentations (cv2 INTER_AREA)", "target": im["target"],
                            "shortest_image_edge": im["target"], "crop_fraction": CROP_FRACTION,
                            "letter_box_transform": False, "camera_hw": list(im["camera_hw"]),
                            "frame_hw": list(frames[0].shape[:2])},
        "image_processor": {"min_pixels": im["min_pixels"], "max_pixels": im["max_pixels"], "factor": 32,
                            "mean": [0.5] * 3, "std": [0.5] * 3, "resample": "bicubic (torchvision, antialias, u8)",
                            "grid_thw": grid[0].tolist()},
        "vision": {**vis, "head_dim": vis["hidden_size"] // vis["num_heads"], "ln_eps": 1e-6, "rope_theta": 10000.0,
                   "merger_act": "gelu (erf)", "attn_impl": visual.config._attn_implementation,
                   "merged_tokens": int(grid[0].prod()) // 4},
        "lm": {"arch": "qwen3_vl_text", "hidden": txt["hidden_size"], "layers_config": txt["num_hidden_layers"],
               "layers_used": arch["select_layer"], "select_layer": arch["select_layer"],
               "heads": txt["num_attention_heads"], "kv_heads": txt["num_key_value_heads"], "head_dim": txt["head_dim"],
               "intermediate": txt["intermediate_size"], "rope_theta": txt["rope_theta"],
               "mrope_section": txt["mrope_section"], "mrope_interleaved": True, "rms_eps": txt["rms_norm_eps"],
               "vocab": txt["vocab_size"], "tokenizer_vocab": len(tok), "qk_norm": True, "tied_embeddings": tied,
               "deepstack_into_layers": list(range(n_deep)), "final_norm_applied": False,
               "attn_impl": lm.config._attn_implementation},
        "vlln": {"width": h["backbone_embedding_dim"], "eps": 1e-5},
        "vlsa": {"blocks": h["vlsa"]["num_layers"], "width": h["backbone_embedding_dim"],
                 "heads": h["vlsa"]["num_attention_heads"], "head_dim": h["vlsa"]["attention_head_dim"],
                 "ff_inner": 4 * h["backbone_embedding_dim"], "ln_eps": 1e-5},
        "dit": {"layers": h["dit"]["num_layers"], "width": h["input_embedding_dim"],
                "heads": h["dit"]["num_attention_heads"], "head_dim": h["dit"]["attention_head_dim"],
                "ff_inner": 4 * h["input_embedding_dim"], "output_dim": h["dit"]["output_dim"],
                "cross_attention_dim": h["backbone_embedding_dim"],
                "attend_text_every_n_blocks": h["attend_text_every_n_blocks"],
                "block_kinds": ["text" if i % 2 == 0 and i % (2 * h["attend_text_every_n_blocks"]) == 0 else
                                "image" if i % 2 == 0 else "self" for i in range(h["dit"]["num_layers"])],
                "timestep_proj_channels": 256, "ln_eps": 1e-5, "norm_out_eps": 1e-6},
        "action_head": {"hidden_size": h["hidden_size"], "input_embedding_dim": h["input_embedding_dim"],
                        "backbone_embedding_dim": h["backbone_embedding_dim"], "action_horizon": HORIZON,
                        "valid_action_horizon": VALID_HORIZON, "max_action_dim": MAX_DIM, "max_state_dim": MAX_DIM,
                        "max_seq_len": h["max_seq_len"], "num_timestep_buckets": BUCKETS,
                        "num_inference_timesteps": NUM_STEPS, "max_num_embodiments": h["max_num_embodiments"],
                        "future_tokens": 0, "state_history_length": 1},
        "embodiment": {"tag": EMBODIMENT, "id": emb_map[EMBODIMENT], "mapping": emb_map},
        "image_token_id": img_id, "video_token_id": qwen.config.video_token_id,
        "vision_start_token_id": qwen.config.vision_start_token_id,
        "vision_end_token_id": qwen.config.vision_end_token_id,
        "state_dim": STATE_DIM, "action_dim": ACTION_DIM,
        "state_groups": STATE_GROUPS, "action_groups": ACTION_GROUPS,
        "formulas": FORMULAS,
    }
    json.dump(arch_json, open(os.path.join(out, "arch.json"), "w"), indent=1)

    vendor = os.path.dirname(sys.modules["lerobot.policies.groot.groot_n1_7"].__file__)
    pos = img_mask.nonzero().flatten().tolist()
    import cv2
    info = {
        "generator": "tools/golden/groot17.py",
        "size": a.size,
        "seed": a.seed,
        "versions": {"python": sys.version.split()[0], "lerobot": lerobot.__version__, "torch": torch.__version__,
                     "transformers": transformers.__version__, "diffusers": diffusers.__version__,
                     "numpy": np.__version__, "opencv": cv2.__version__,
                     "tokenizers": __import__("tokenizers").__version__,
                     "lerobot_groot_sha256": {
                         f: hashlib.sha256(open(os.path.join(vendor, f), "rb").read()).hexdigest()[:16]
                         for f in ["groot_n1_7.py", "processor_groot.py", "modeling_groot.py",
                                   "configuration_groot.py", "utils.py", "action_head/cross_attention_dit.py"]},
                     "transformers_qwen3_vl_sha256": hashlib.sha256(open(sys.modules[
                         "transformers.models.qwen3_vl.modeling_qwen3_vl"].__file__, "rb").read()).hexdigest()[:16],
                     "pep695_patched_files": sorted(PEP695.get("files", {}))},
        "task": TASK,
        "language": prepare_n1_7_language_batch(TASK, 1, formalize_language=True)[0],
        "prompt_templated": templated[0],
        "prompt_expanded": expanded,
        "token_ids": ids.tolist(),
        "n_tokens": len(ids),
        "image_token_id": img_id,
        "image_token_span": [pos[0], pos[-1] + 1],
        "image_grid_thw": grid[0].tolist(),
        "position_ids": pos_row.tolist(),
        "camera_key": f"observation.images.{CAMERA}",
        "camera_hw": list(im["camera_hw"]),
        "frame_hw": list(frames[0].shape[:2]),
        "embodiment_tag": EMBODIMENT,
        "embodiment_id": emb_map[EMBODIMENT],
        "num_steps": NUM_STEPS,
        "timestep_buckets": buckets,
        "action_horizon": HORIZON,
        "valid_horizon": VALID_HORIZON,
        "max_state_dim": MAX_DIM,
        "max_action_dim": MAX_DIM,
        "state_dim": STATE_DIM,
        "action_dim": ACTION_DIM,
        "statistics": stats,
        "stats_flat": {"state": {"min": flat["state"]["q01"], "max": flat["state"]["q99"]},
                       "action": {"min": flat["action"]["q01"], "max": flat["action"]["q99"]}},
        "model": arch_json,
        "tensors": {k: [str(t.dtype).replace("torch.", ""), list(t.shape)] for k, t in sorted(golden.items())},
    }
    json.dump(info, open(os.path.join(out, "golden.json"), "w"), indent=1)
    print(json.dumps({k: info[k] for k in ["versions", "prompt_templated", "n_tokens", "image_token_span",
                                            "image_grid_thw", "timestep_buckets"]}))
    print("actions[0]:", actions[0, 0].tolist(), "max|actions_norm|:", float(golden["actions_norm"].abs().max()))


def dry_full(a):
    """--size full --dry: the released sizes on the meta device (no weights, nothing written)."""
    from transformers import Qwen3VLConfig
    from lerobot.policies.groot.groot_n1_7 import GR00TN17, GR00TN17Config
    arch = SIZES["full"]
    tok = build_tokenizer(os.path.join(_TMP, "tokenizer"))
    counts, shapes = {}, {}
    for name, model_name in [("hard-coded Cosmos-Reason2-2B", "nvidia/Cosmos-Reason2-2B"), ("this tool's full", None)]:
        if model_name is None:
            bb = os.path.join(_TMP, "backbone-full")
            cfg = qwen3vl_config(tok, arch, dtype="bfloat16")
            cfg["text_config"]["vocab_size"] = 151936
            Qwen3VLConfig(**cfg).save_pretrained(bb)
            model_name = bb
        n17 = n17_config(arch, model_name, dtype="bfloat16")
        with torch.device("meta"):
            m = GR00TN17(GR00TN17Config(**n17), load_backbone_weights=False)
        sd = {k: tuple(v.shape) for k, v in m.state_dict().items()}
        shapes[name] = sd
        groups = {}
        for k, s in sd.items():
            g = ".".join(k.split(".")[:4]) if k.startswith("backbone") else ".".join(k.split(".")[:2])
            groups[g] = groups.get(g, 0) + math.prod(s)
        counts[name] = groups
        del m
    a_, b_ = shapes.values()
    diff = sorted(k for k in set(a_) | set(b_) if k.startswith("backbone") and a_.get(k) != b_.get(k)
                  and "embed_tokens" not in k and "lm_head" not in k)
    real = counts["hard-coded Cosmos-Reason2-2B"]
    im = arch["image"]
    geometry = {}
    for hw in [(256, 256), (480, 640), (224, 224)]:
        h, w = hw
        s = im["target"] / min(h, w)
        h1, w1 = (h, w) if min(h, w) == im["target"] else (round(h * s), round(w * s))
        ch, cw = int(h1 * CROP_FRACTION), int(w1 * CROP_FRACTION)
        s2 = im["target"] / min(ch, cw)
        h2, w2 = (ch, cw) if min(ch, cw) == im["target"] else (round(ch * s2), round(cw * s2))
        h3, w3 = smart_resize(h2, w2, 32, im["min_pixels"], im["max_pixels"])
        geometry[f"{h}x{w}"] = {"frame": [h2, w2], "pixels": [h3, w3], "grid_thw": [1, h3 // 16, w3 // 16],
                                "image_tokens": h3 // 32 * w3 // 32}
    out = {"param_counts_M": {g: round(n / 1e6, 3) for g, n in sorted(real.items())},
           "total_M (lm_head tied to embed_tokens: counted once)": round(
               sum(n for g, n in real.items() if "lm_head" not in g) / 1e6, 1),
           "backbone_shapes_differ_from_hard_coded": diff,
           "key_shapes": {k: real_s for k, real_s in a_.items() if any(s in k for s in [
               "patch_embed", "pos_embed", "blocks.0.", "merger.", "deepstack_merger_list.0.", "layers.0.",
               "embed_tokens", "action_head.model.transformer_blocks.0.", "action_head.model.transformer_blocks.2.",
               "action_head.state_encoder", "action_head.action_encoder", "action_head.action_decoder",
               "position_embedding", "vlln", "vl_self_attention.transformer_blocks.0.", "timestep_encoder",
               "proj_out"])},
           "image_geometry": geometry}
    print(json.dumps(out, indent=1))
    assert not diff, diff


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", choices=sorted(SIZES), default="tiny")
    ap.add_argument("--out", help="output folder (default: tests/fixtures/groot17-SIZE for the tiny sizes)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--check", metavar="DIR", help="only reload DIR and reproduce its golden actions")
    ap.add_argument("--no-check", action="store_true", help="skip the reload check after generating")
    ap.add_argument("--dry", action="store_true", help="--size full: build on the meta device, write nothing")
    a = ap.parse_args()
    if a.check:
        check(a.check)
        return
    if a.dry:
        dry_full(a)
        return
    root = os.path.abspath(os.path.join(HERE, "..", ".."))
    if a.out is None and not a.size.startswith("tiny"):
        ap.error("--size full writes ~13 GB: give --out (outside the repo), or use --dry")
    out = os.path.abspath(a.out or os.path.join(root, "tests", "fixtures", f"groot17-{a.size}"))
    if os.path.isdir(out):
        shutil.rmtree(out)
    generate(a, out)
    gc.collect()
    if not a.no_check:  # a fresh process, a fresh HF_LEROBOT_HOME: the folder alone must suffice
        subprocess.run([sys.executable, os.path.abspath(__file__), "--check", out], check=True,
                       env={**os.environ, "HF_HUB_OFFLINE": "1"})


if __name__ == "__main__":
    main()
