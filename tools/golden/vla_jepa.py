"""Golden fixture for VLA-JEPA: lerobot 0.6.1 `vla_jepa` with random weights, every tensor re-randomized.

Rerun (anyone, offline; the venv is outside the repo and CI never needs it):

    python3.11 -m venv /work/venv-lerobot061
    /work/venv-lerobot061/bin/pip install --ignore-requires-python "lerobot[vla-jepa]==0.6.1" "networkx<3.7"
        # lerobot 0.6.1 declares Python >= 3.12 (see tools/golden/groot17.py for the venv notes);
        # the vla-jepa extra pulls transformers 5.5.4 and diffusers 0.39. Then, once (the tool also
        # does it itself, through groot17's import):
    /work/venv-lerobot061/bin/python tools/golden/py311_compat.py
    HF_HUB_OFFLINE=1 /work/venv-lerobot061/bin/python tools/golden/vla_jepa.py        # tiny, committed
    HF_HUB_OFFLINE=1 /work/venv-lerobot061/bin/python tools/golden/vla_jepa.py --size tiny-hd128
        # tiny with the released head_dim 128 and mrope [24, 20, 20] (vla.cpp's loaders fix those
        # sections): tests/fixtures/vla-jepa-tiny-hd128, committed, read by the vla.cpp-layout test
    HF_HUB_OFFLINE=1 /work/venv-lerobot061/bin/python tools/golden/vla_jepa.py --size full --dry
        # the released sizes (lerobot/VLA-JEPA-LIBERO: Qwen3-VL-2B, all 28 LM layers, DiT-B 16 blocks,
        # V-JEPA2 ViT-L + the 12-block predictor) built on the meta device: parameter counts, key
        # shapes and the image geometry; writes nothing
    HF_HUB_OFFLINE=1 /work/venv-lerobot061/bin/python tools/golden/vla_jepa.py --check tests/fixtures/vla-jepa-tiny
        # reload the folder in a fresh process, reproduce `actions`, then the float64 reference
    HF_HUB_OFFLINE=1 /work/venv-lerobot061/bin/python tools/golden/vla_jepa.py --size full --out DIR
        # random weights at the released sizes (~2.8 B parameters, ~11 GB f32; never run here)

The default seed is 3, the first whose random chunk snaps the gripper both ways (normalised 0 and 1
before un-normalising), which the tool asserts; regenerating gives byte-identical files.

Nothing is downloaded. lerobot's VLAJEPAPolicy builds VLAJEPAModel (modeling_vla_jepa.py:82), which
loads `Qwen3VLForConditionalGeneration.from_pretrained(qwen_model_name)` and its AutoProcessor
(qwen_interface.py:37-41), adds 28 `<|action_k|>` tokens and one `<|embodied_action|>` token to the
tokenizer at run time (qwen_interface.py:53), builds the DiT action head, and - because the released
LIBERO checkpoint has `enable_world_model=True` - also loads `AutoModel.from_pretrained(
jepa_encoder_name)` (a V-JEPA2 video encoder) and its AutoVideoProcessor and builds the
ActionConditionedVideoPredictor (modeling_vla_jepa.py:104-128). The world model is training-only (its
weights are in model.safetensors as model.video_encoder.* / model.video_predictor.*; inference never
touches them) but the encoder's `tubelet_size` sets the prompt (modeling_vla_jepa.py:140-149), so the
fixture keeps it, tiny. This tool writes both base models from explicit configs: `backbone/` (Qwen3-VL
config, tokenizer, chat template, image/video processor configs, a weights file with no tensors: every
weight comes from the policy's model.safetensors) and `jepa/` (VJEPA2Config, VJEPA2VideoProcessor config,
a weights file with no tensors). Paths in config.json are relative ("./backbone", "./jepa"): reload
from inside the fixture folder (--check does).

Configuration: the released lerobot/VLA-JEPA-LIBERO as lerobot's conversion script builds it
(convert_vla_jepa_checkpoints.py, found in the public code index: `_ARCH` + LIBERO variant: cameras
observation.images.image (agentview) and observation.images.image2 (wrist), state 8, action 7,
enable_world_model=True, resize_images_to=(224, 224) from the source config's resolution_size,
binarize_gripper_action=True, clip_normalized_actions=True, pre_snap_gripper_action default True,
DiT-B with action_num_heads=12 / action_attention_head_dim=64 given explicitly, 16 DiT blocks, action
hidden 1024, chunk 7, 4 steps, 32 embodied tokens, 8 action tokens per step, 8 video frames,
tubelet 2, dataset statistics {action, observation.state} from the source dataset_statistics.json) -
the same flags and code paths, tiny sizes (SIZES below).

Deviations from the stock code, all in this process only: `torch_dtype="float32"` (the released
config keeps the default "bfloat16": Qwen and the V-JEPA2 encoder load in bf16); the bf16 autocast
that `_encode_qwen` always enters (modeling_vla_jepa.py:203, `_get_autocast_context`, active on CPU
too) is replaced by a null context; the initial noise, which VLAJEPAActionHead.predict_action draws
with `torch.randn(B, chunk, action_dim)` on the global RNG (action_head.py:315; the `noise` argument
of predict_action_chunk is ignored, modeling_vla_jepa.py:442), is replaced by the explicit `noise`
tensor. Nothing else is patched; the pre/postprocessors are lerobot's own, saved and reloaded.

What is reconstructed rather than copied from the released assets (no network here): the Qwen
tokenizer (groot17.build_tokenizer: a small byte-level BPE laid out as Qwen's, the 26 Qwen3-VL added
tokens in their real order; the action/embodied tokens are then appended by lerobot itself exactly as
for the real vocabulary), the chat template (groot17.CHAT_TEMPLATE, Qwen3-VL-Instruct's), the image
processor config (Qwen3-VL-2B's layout: patch 16, temporal 2, merge 2, mean = std = 0.5, bicubic;
the tiny min_pixels is scaled so that, as in the real model, smart_resize enlarges the resized
camera frame: real 224 x 224 -> 256 x 256 because min_pixels = 256 * 256; tiny 64 x 64 -> 96 x 96),
and the dataset statistics (random; the gripper action range is LIBERO's [-1, 1]).

Writes into the output folder (default tests/fixtures/vla-jepa-tiny/):
  config.json, model.safetensors, policy_{pre,post}processor*.{json,safetensors}
                       the checkpoint exactly as lerobot saves it (policy.save_pretrained and the
                       processors' save_pretrained); qwen_model_name -> "./backbone",
                       jepa_encoder_name -> "./jepa"
  backbone/            Qwen3-VL config.json, model.safetensors (no tensors), preprocessor_config.json,
                       video_preprocessor_config.json, tokenizer files, chat_template.jinja
  jepa/                V-JEPA2 config.json, model.safetensors (no tensors), video_preprocessor_config.json
  arch.json            every size used and the formulas below
  golden.safetensors   inputs, every stage, lerobot's outputs (names below), float32 unless noted
  golden.json          versions, seeds, prompt as templated and as expanded, token ids, token spans,
                       grids, position ids, statistics, timestep buckets, tensor list

golden.safetensors (two cameras, batch of one; {c} = 0 for observation.images.image, 1 for image2):
  image.{c} u8 [H,W,3] raw camera frame (non-square, not the model size); resized.{c} [3,h,w] the
  float frame after resize_images_to (u8/255, F.interpolate mode="area"); pixels [N, 3*2*16*16] the
  Qwen2VL image processor output as it enters the vision tower (both images, image 0's rows first);
  image_grid_thw i64 [2,3]; vit_patch [N, vd]; vit_pos [N, vd]; vit_rope [N, vhd/2]; vit_block.{i}
  [N, vd]; vit_out [N, vd]; vision [N/4, lm] (merger output: the rows spliced at <|image_pad|>, image 0
  then image 1); deepstack.{j} [N/4, lm]; token_ids i64 [T]; attention_mask i64 [T];
  mm_token_type_ids i64 [T]; image_mask u8 [T]; action_token_mask u8 [T] (<|action_k|> rows, unused at
  inference); embodied_mask u8 [T] (<|embodied_action|> rows); position_ids i64 [3,T] (M-RoPE t/h/w);
  lm_in [T, lm]; lm_layer.{l} [T, lm] (decoder layer l output, before the deepstack add that follows
  layers 0..n_deepstack-1); lm_out [T, lm] (= lm_layer.{last}: no final norm); embodied [32, lm]
  (lm_out at the embodied rows, in order: the action head's conditioning tokens); state [8] raw;
  state_norm [8]; state_features [1, D] (state encoder output); noise [7, 7]; per Euler step s:
  temb.{s} [D] (timestep encoder output), action_features.{s} [7, D] (action encoder output +
  position embedding), dit_in.{s} [40, D] (the DiT input sequence), dit_out.{s} [40, H] (after
  proj_out_2), velocity.{s} [7, 7] (action decoder output); actions_norm [7, 7] (predict_action
  output); actions_snapped [7, 7] (clipped to [-1, 1], gripper snapped to {0, 1}); actions [7, 7]
  (postprocessed, world units; gripper in {-1, +1}).

--check (run by the tool on what it wrote, in a fresh process) reloads the folder with lerobot and
reproduces `actions`, then recomputes every golden tensor from model.safetensors, arch.json, the
statistics and the raw camera frames with an independent float64 implementation (reference_forward
below: the formulas in arch.json made executable); token positions, grids and masks must match
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
import groot17 as g17  # noqa: E402  (patches lerobot's PEP 695 files; reused: tokenizer, Qwen3-VL config, helpers)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
_TMP = tempfile.mkdtemp(prefix="vla-jepa-golden-")
atexit.register(shutil.rmtree, _TMP, ignore_errors=True)
os.environ["HF_LEROBOT_HOME"] = os.path.join(_TMP, "lerobot-home")
os.environ["HF_MODULES_CACHE"] = os.path.join(_TMP, "modules")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

# The backbone/ and jepa/ weights files hold no tensors (model.safetensors has them all): keep
# transformers' per-key "MISSING" load report out of the output.
transformers.logging.set_verbosity_error()

TASK = "Put both the alphabet soup and the tomato sauce in the basket"  # as given: no lowercasing
CAMERAS = ["image", "image2"]  # lerobot/VLA-JEPA-LIBERO: agentview, wrist (convert_vla_jepa_checkpoints.py)
STATE_DIM, ACTION_DIM, CHUNK = 8, 7, 7
N_EMBODIED, TOKENS_PER_STEP, VIDEO_FRAMES, TUBELET = 32, 8, 8, 2
NUM_STEPS, BUCKETS = 4, 1000
GRIPPER_DIM, GRIPPER_THRESHOLD = 6, 0.5

# "full" is lerobot/VLA-JEPA-LIBERO: Qwen/Qwen3-VL-2B-Instruct (all 28 LM layers; the head reads the
# last one), DiT-B (12 x 64 = 768) x 16 blocks, action hidden 1024, V-JEPA2 ViT-L fpc64-256 + a
# 12-block x 8-head predictor. tiny keeps the structure: deepstack taps 3 of 5 vision blocks (real
# 5/11/17 of 24) and the LM has 4 layers, so the 3 deepstack adds (after LM layers 0..2) precede the
# layer the head reads, as in the real 28; mrope [4, 2, 2] of head_dim 16 keeps the interleaved
# layout of [24, 20, 20] of 128; the DiT's inner width (heads x head_dim = 32) differs from its
# output / MLP width (24), as 768 vs 1024; 4 DiT blocks keep the cross / self / cross / self
# alternation; the vocabulary has more rows than the expanded tokenizer (no resize, as 151936 >
# 151698); resize_images_to is factor-aligned (64 = 2 * 32, as 224 = 7 * 32) and smaller than
# min_pixels allows, so smart_resize enlarges it (64 -> 96, as 224 -> 256) and the bicubic runs.
SIZES = {
    "tiny": dict(
        vision=dict(g17.SIZES["tiny"]["vision"]),
        text=dict(hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                  intermediate_size=96, rope_theta=5000000.0, mrope_section=[4, 2, 2], rms_norm_eps=1e-6,
                  vocab_size=416, max_position_embeddings=4096),
        head=dict(num_heads=2, head_dim=16, num_layers=4, hidden_size=24),
        jepa=dict(hidden_size=16, num_attention_heads=2, num_hidden_layers=1, mlp_ratio=4.0, pred_hidden_size=16,
                  pred_num_attention_heads=2, pred_num_hidden_layers=1, pred_num_mask_tokens=2, crop_size=64,
                  frames_per_clip=8, patch_size=16, tubelet_size=TUBELET),
        predictor=dict(depth=1, num_heads=2),
        image=dict(resize_to=(64, 64), min_pixels=96 * 96, max_pixels=1024 * 1024,
                   cameras={"image": (100, 150), "image2": (120, 96)})),
    "full": dict(
        vision=dict(g17.SIZES["full"]["vision"]),
        text=dict(hidden_size=2048, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                  intermediate_size=6144, rope_theta=5000000.0, mrope_section=[24, 20, 20], rms_norm_eps=1e-6,
                  vocab_size=151936, max_position_embeddings=262144),
        head=dict(num_heads=12, head_dim=64, num_layers=16, hidden_size=1024),
        jepa=dict(hidden_size=1024, num_attention_heads=16, num_hidden_layers=24, mlp_ratio=4.0, pred_hidden_size=384,
                  pred_num_attention_heads=12, pred_num_hidden_layers=12, pred_num_mask_tokens=10, crop_size=256,
                  frames_per_clip=64, patch_size=16, tubelet_size=TUBELET),
        predictor=dict(depth=12, num_heads=8),
        image=dict(resize_to=(224, 224), min_pixels=256 * 256, max_pixels=16777216,
                   cameras={"image": (256, 256), "image2": (256, 256)})),
}

# tiny with the language model's released head_dim 128 and mrope sections [24, 20, 20]: vla.cpp's loaders
# fix those sections (its files carry none), so the tests of vla.cpp's layout read this one
SIZES["tiny-hd128"] = {**SIZES["tiny"], "text": {**SIZES["tiny"]["text"], "head_dim": 128,
                                                  "mrope_section": [24, 20, 20]}}

FORMULAS = {
    "frame": "per camera, in camera order (observation.images.image, then image2): the u8 HWC frame is "
             "the float CHW tensor x = u8 / 255 (float32; lerobot's dataset / env convention; VISUAL "
             "normalisation is IDENTITY, to_pixel_values keeps float, qwen_interface.py:117); "
             "resize_images_to (h, w) (modeling_vla_jepa.py:314): F.interpolate(mode='area') = "
             "adaptive average pooling: out[i] = mean of in[floor(i*In/Out) .. ceil((i+1)*In/Out) - 1] "
             "per axis (both axes, float32); no resize when resize_images_to is None (then the camera "
             "size goes straight to smart_resize)",
    "pixels": "Qwen2VLImageProcessor (torchvision backend) on the float [0, 1] frames with "
              "do_rescale=False (qwen_interface.py:102-113): (h2, w2) = smart_resize(h, w, factor = "
              "patch*merge = 32, min_pixels, max_pixels): h_bar = round(h/32)*32 (Python round), w_bar "
              "likewise; if h_bar*w_bar > max: beta = sqrt(h*w/max), h_bar = max(32, floor(h/beta/32)*32); "
              "elif < min: beta = sqrt(min/(h*w)), h_bar = ceil(h*beta/32)*32 (w likewise); released: "
              "224 x 224 < 256*256 -> 256 x 256; then torchvision resize(float CHW, (h2, w2), BICUBIC, "
              "antialias=True) = torch's separable anti-aliased bicubic on float (PIL's filter, a = -0.5, "
              "support 2 * max(1, In/Out), center = (i + 0.5) * In/Out, weights normalised per output "
              "pixel, width pass then height pass, no clamping, no rounding; identity when the size is "
              "unchanged); (x - 0.5) / 0.5; a still image is repeated to temporal_patch_size = 2 "
              "frames; grid (1, h2/16, w2/16); rows in merge-window order: for block row br, block col "
              "bc, intra row ir, intra col ic (2x2 windows, row-major), patch (r, c) = (2br+ir, 2bc+ic); "
              "each row = [channel][time][py][px] flattened (3*2*16*16 = 1536); the images' rows are "
              "concatenated in camera order",
    "vision_embed": "per image: x = pixels @ W.reshape(D, 1536).T + b (the Conv3d with kernel = stride = "
                    "(2,16,16)); x += pos: the learned table of n = num_position_embeddings rows is an N x "
                    "N grid (N = sqrt(n)); for grid (gh, gw): hs = linspace(0, N-1, gh), ws = linspace(0, "
                    "N-1, gw) (float32), h0 = int(hs), h1 = min(h0+1, N-1), dh = hs - h0 (same for w), "
                    "pos(r,c) = (1-dh)(1-dw) T[h0,w0] + (1-dh)dw T[h0,w1] + dh(1-dw) T[h1,w0] + dh dw "
                    "T[h1,w1], then permuted to the merge-window order",
    "vision_block": "x += proj(attn(LN1(x))); x += fc2(gelu_tanh(fc1(LN2(x)))); LN eps 1e-6 with affine; "
                    "qkv = one Linear(D, 3D) with bias, split [q | k | v], heads of hd = D/heads; full "
                    "bidirectional attention within each image only (cu_seqlens per image; the two "
                    "cameras never attend to each other), scale hd^-0.5; 2-D RoPE on q and k: inv_f = "
                    "1/10000^(arange(0, hd/2, 2) / (hd/2)) (hd/4 frequencies), angles = [row * inv_f, col "
                    "* inv_f] (hd/2), emb = cat(angles, angles), q' = q cos(emb) + rotate_half(q) sin(emb), "
                    "rotate_half(x) = cat(-x[hd/2:], x[:hd/2]); (row, col) = the patch's position in its "
                    "image's full-resolution grid",
    "merger": "merger (after the last block): LN(D, eps 1e-6) per patch, then each 2x2 window's 4 "
              "consecutive rows concatenated (4D), fc1 (4D -> 4D) -> GELU (erf) -> fc2 (4D -> lm_hidden); "
              "deepstack mergers (use_postshuffle_norm): concatenate first, LN(4D, eps 1e-6), then the same "
              "MLP; deepstack j reads the output of vision block deepstack_visual_indexes[j]",
    "prompt": "instruction = the task string as given (no lowercasing or punctuation stripping; no task -> "
              "'Execute the robot action.'); text = prompt_template.format(instruction, actions, e_actions) "
              "= 'Your task is {instruction}. Infer the temporal dynamics from frames {actions} and produce "
              "the corresponding policy actions {e_actions}.' with actions = <|action_0|> x 8, "
              "<|action_1|> x 8, <|action_2|> x 8 (num_video_frames // tubelet_size - 1 = 3 steps of "
              "num_action_tokens_per_timestep = 8; modeling_vla_jepa.py:140-149) and e_actions = "
              "<|embodied_action|> x 32 (num_embodied_action_tokens_per_instruction), both written "
              "without separators; messages = [{user: [image, image, text]}] (one image item per camera, "
              "then the text; qwen_interface.py:84-93); chat template with add_generation_prompt=True -> "
              "'<|im_start|>user\\n<|vision_start|><|image_pad|><|vision_end|><|vision_start|>"
              "<|image_pad|><|vision_end|>{text}<|im_end|>\\n<|im_start|>assistant\\n'; the processor "
              "repeats each <|image_pad|> grid_t*grid_h*grid_w/4 times; tokenized with no BOS/EOS; "
              "padding left (batch of one: none). The 28 tokens <|action_0|>..<|action_27|> (chunk_size * "
              "4) and <|embodied_action|> are added to the tokenizer at run time by lerobot "
              "(qwen_interface.py:53-75, add_tokens(special_tokens=True)) right after Qwen's own: real ids "
              "151669..151696 and 151697; each is one token; the embedding table is resized only if it "
              "has fewer rows than the tokenizer (never for Qwen3-VL-2B: 151936 rows)",
    "position_ids": "M-RoPE ids (Qwen3VLModel.get_rope_index, from mm_token_type_ids: 1 on <|image_pad|> "
                    "rows, else 0): walk the tokens in runs of text / image; text run of length L at "
                    "cursor p: t = h = w = p..p+L-1, p += L; image with merged grid (gt, gh/2, gw/2) at "
                    "cursor p: t = p, h = p + row, w = p + col (row-major over the merged grid), p += "
                    "max(gh/2, gw/2) (not the token count); 3 rows [t, h, w]",
    "lm": "Qwen3-VL text decoder, all num_hidden_layers layers (28 for the released model); x0 = "
          "embed(ids) with the merger rows replacing the <|image_pad|> rows in order (image 0's, then image "
          "1's); each layer: x += o(attn(RMSNorm(x))); x += down(silu(gate(h)) * up(h)), h = RMSNorm(x); "
          "q/k RMSNorm per head (eps 1e-6) before RoPE; GQA; causal; no biases; after layer l < "
          "len(deepstack): x[image rows] += deepstack[l] (image rows of both images, in order); M-RoPE: "
          "inv_f = 1/theta^(arange(0, hd, 2)/hd) (hd/2 frequencies), frequency j uses the h position if j "
          "% 3 == 1 and j < 3*sec[1], the w position if j % 3 == 2 and j < 3*sec[2], else t; emb = "
          "cat(angles, angles); rotate_half",
    "head_input": "the head reads the output of the LAST decoder layer, BEFORE the final RMSNorm "
                  "(modeling_vla_jepa.py:154-181: a forward hook on language_model.layers[-1]; the "
                  "model.norm weight is in the checkpoint but unused; the lm_head logits are computed and "
                  "discarded), at the rows whose id is <|embodied_action|>, in sequence order "
                  "(modeling_vla_jepa.py:196, 206): conditioning tokens C [32, lm_hidden], cast to float32 "
                  "(modeling_vla_jepa.py:323). The <|action_k|> rows are only read in training (world model)",
    "state": "state_norm = (state - mean) / (std + 1e-8) (lerobot NormalizerProcessorStep, STATE = "
             "MEAN_STD, observation.state statistics); passed as [B, 1, state_dim] (the first / current "
             "step only)",
    "state_encoder": "state_features = layer2(ReLU(layer1(state_norm))): Linear(state_dim -> "
                     "action_hidden_size), Linear(action_hidden_size -> D), D = inner = heads * head_dim",
    "timestep": "temb = linear_2(SiLU(linear_1(tp))), tp = [cos(t*f), sin(t*f)] (256 channels), f_i = "
                "exp(-ln(10000) * i / 127), i = 0..127 (diffusers Timesteps(256, flip_sin_to_cos=True, "
                "downscale_freq_shift=1)), t = the integer bucket; linear_1: 256 -> D, linear_2: D -> D",
    "action_encoder": "a = layer1(x) (action_dim -> D); tau = [sin(t*g), cos(t*g)], g_i = exp(-i * "
                      "ln(10000) / (D/2)), i < D/2, t = the integer bucket (same for every row); "
                      "action_features = layer3(SiLU(layer2(cat(a, tau)))) (2D -> D -> D) + "
                      "position_embedding[0..chunk-1] (nn.Embedding(max(1024, chunk + 8 + 4), D): only "
                      "the action rows get positions)",
    "dit_sequence": "seq = [state_features (1 row), future_tokens.weight (32 rows, learned, the same for "
                    "every step), action_features (chunk rows)] -> 1 + 32 + 7 = 40 rows of width D "
                    "(action_head.py:260-277); without state the first row is absent",
    "dit": "DiT (action_head.py:142): block i: x += attn1(AdaLN(x, temb)); x += FF(LN(x)); AdaLN: "
           "[scale, shift] = Linear(SiLU(temb)).chunk(2) (scale FIRST), LN(x, eps 1e-5, no affine) * (1 + "
           "scale) + shift; even blocks (i % 2 == 0) cross-attend: q from x, k/v = Linear(lm_hidden -> D) "
           "of the 32 conditioning tokens C (all of them, no mask; C is the same for every block and "
           "step); odd blocks self-attend over the 40 rows (no mask, not causal); attention: heads x "
           "head_dim = D, q/k/v/out Linear with bias, softmax(q k^T / sqrt(head_dim)); FF: Linear(D, "
           "4D) -> GELU(tanh) -> Linear(4D, D); the post-attention LN has no affine (eps 1e-5); out: "
           "[shift, scale] = proj_out_1(SiLU(temb)).chunk(2) (shift FIRST), LN(x, eps 1e-6, no affine) "
           "* (1 + scale) + shift; proj_out_2: D -> action_hidden_size (H)",
    "decoder": "velocity = layer2(ReLU(layer1(dit_out[-chunk:]))): Linear(H -> H), Linear(H -> action_dim); "
               "only the last chunk rows (the action rows) are decoded",
    "euler": "x_0 = noise [chunk, action_dim] ~ N(0, 1); N = num_inference_timesteps; dt = 1/N; for k in "
             "0..N-1: t = k/N, bucket = int(t * 1000) (truncation: 0, 250, 500, 750), x += dt * v(x, "
             "bucket); output x_N (normalised actions). Direction: t = 0 is noise, t = 1 is data (training "
             "uses x_t = (1 - t) noise + t actions, target velocity = actions - noise)",
    "postprocess": "policy_postprocessor (processor_vla_jepa.py:103-139), in order: clip to [-1, 1] "
                   "(clip_normalized_actions); pre-snap: a[:, 6] = 1 if a[:, 6] >= 0.5 else 0 "
                   "(pre_snap_gripper_action, gripper_dim 6, threshold 0.5; still in normalised space); "
                   "un-normalise MIN_MAX over every action dim: (a + 1) / 2 * (max - min) + min (max - min "
                   "replaced by 1e-8 where 0; action statistics min/max, not quantiles); binarize: a[:, "
                   "6] = -1 if a[:, 6] > 0.5 else +1 (binarize_gripper_action, compared in world units: "
                   "for LIBERO's gripper range [-1, 1] the snapped 1 -> +1 -> -1 and the snapped 0 -> 0 -> "
                   "+1); all chunk rows are returned (n_action_steps = chunk = 7)",
}


# ----------------------------------------------------------------------------- assets

def build_backbone(out, tok, arch):
    """backbone/: what Qwen/Qwen3-VL-2B-Instruct holds, with a weights file that has no tensors."""
    cfg = g17.build_backbone(out, tok, {"vision": arch["vision"], "text": arch["text"], "image": arch["image"]})
    save_file({}, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    return cfg


def build_jepa(out, arch):
    """jepa/: what facebook/vjepa2-vitl-fpc64-256 holds (config, video processor), no tensors."""
    from transformers import VJEPA2Config
    from transformers.models.vjepa2.video_processing_vjepa2 import VJEPA2VideoProcessor
    j = arch["jepa"]
    VJEPA2Config(**j, dtype="float32").save_pretrained(out)
    VJEPA2VideoProcessor(crop_size=j["crop_size"]).save_pretrained(out)
    save_file({}, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})


def make_stats(gen):
    """dataset_stats as lerobot's converter passes them: {action, observation.state} x {min, max, mean, std}."""
    def group(d):
        lo = torch.randn(d, generator=gen)
        span = 0.5 + 2.0 * torch.rand(d, generator=gen)
        return {"min": lo, "max": lo + span, "mean": lo + 0.5 * span + 0.1 * torch.randn(d, generator=gen),
                "std": 0.1 + 0.4 * torch.rand(d, generator=gen)}
    action, state = group(ACTION_DIM), group(STATE_DIM)
    action["min"][GRIPPER_DIM], action["max"][GRIPPER_DIM] = -1.0, 1.0  # LIBERO's gripper command range
    action["mean"][GRIPPER_DIM], action["std"][GRIPPER_DIM] = 0.0, 1.0
    return {"action": action, "observation.state": state}


def make_config(arch, backbone, jepa, dtype="float32"):
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.vla_jepa.configuration_vla_jepa import VLAJEPAConfig
    h, im = arch["head"], arch["image"]
    feats = {f"observation.images.{c}": PolicyFeature(type=FeatureType.VISUAL, shape=(3, *im["resize_to"]))
             for c in CAMERAS}
    feats["observation.state"] = PolicyFeature(type=FeatureType.STATE, shape=(STATE_DIM,))
    return VLAJEPAConfig(
        device="cpu", input_features=feats,
        output_features={"action": PolicyFeature(type=FeatureType.ACTION, shape=(ACTION_DIM,))},
        qwen_model_name=backbone, jepa_encoder_name=jepa, enable_world_model=True, torch_dtype=dtype,
        chunk_size=CHUNK, n_action_steps=CHUNK, num_video_frames=VIDEO_FRAMES, jepa_tubelet_size=TUBELET,
        num_action_tokens_per_timestep=TOKENS_PER_STEP, num_embodied_action_tokens_per_instruction=N_EMBODIED,
        num_inference_timesteps=NUM_STEPS, action_hidden_size=h["hidden_size"], action_model_type="DiT-B",
        action_num_heads=h["num_heads"], action_attention_head_dim=h["head_dim"], action_num_layers=h["num_layers"],
        action_dropout=0.2, repeated_diffusion_steps=8, action_noise_beta_alpha=1.5, action_noise_beta_beta=1.0,
        action_noise_s=0.999, action_num_timestep_buckets=BUCKETS, predictor_depth=arch["predictor"]["depth"],
        predictor_num_heads=arch["predictor"]["num_heads"], resize_images_to=tuple(im["resize_to"]),
        binarize_gripper_action=True, pre_snap_gripper_action=True, clip_normalized_actions=True,
        gripper_dim=GRIPPER_DIM, gripper_threshold=GRIPPER_THRESHOLD)


def rewrite_paths(out):
    p = os.path.join(out, "config.json")
    d = json.load(open(p))
    d["qwen_model_name"], d["jepa_encoder_name"] = "./backbone", "./jepa"
    json.dump(d, open(p, "w"), indent=4)


# ----------------------------------------------------------------------------- lerobot patches

@contextlib.contextmanager
def no_autocast():
    """_encode_qwen always enters a bf16 autocast (CPU included): a null context instead (f32 fixture)."""
    from lerobot.policies.vla_jepa import modeling_vla_jepa as mv
    real = mv._get_autocast_context
    mv._get_autocast_context = lambda device_type, dtype=torch.bfloat16: contextlib.nullcontext()
    try:
        yield
    finally:
        mv._get_autocast_context = real


@contextlib.contextmanager
def explicit_noise(noise):
    """Within the block, `torch.randn(B, chunk, action_dim, ...)` (positional sizes, as
    action_head.py:315 calls it) returns `noise`; every other call draws as usual."""
    real, calls = torch.randn, []

    def randn(*args, **kw):
        if tuple(args) == tuple(noise.shape) and "size" not in kw:
            calls.append(1)
            return noise.clone().to(kw.get("dtype") or noise.dtype)
        return real(*args, **kw)

    torch.randn = randn
    try:
        yield calls
    finally:
        torch.randn = real


def make_obs(images, state):
    obs = {"observation.state": state.clone(), "task": TASK}
    for c, img in zip(CAMERAS, images):
        obs[f"observation.images.{c}"] = img.permute(2, 0, 1).float() / 255.0
    return obs


def run_policy(policy, pre, post, images, state, noise):
    """lerobot's inference path: preprocessor -> predict_action_chunk -> postprocessor (whole chunk)."""
    batch = pre(make_obs(images, state))
    with no_autocast(), explicit_noise(noise[None]) as calls:
        chunk = policy.predict_action_chunk(dict(batch))
    assert len(calls) == 1, "predict_action drew no noise through torch.randn(B, chunk, action_dim)"
    return batch, chunk, post(chunk)


def load_fixture(fixture):
    from lerobot.policies.factory import make_pre_post_processors
    from lerobot.policies.vla_jepa.modeling_vla_jepa import VLAJEPAPolicy
    cwd = os.getcwd()
    os.chdir(fixture)  # config.json says qwen_model_name "./backbone", jepa_encoder_name "./jepa"
    try:
        policy = VLAJEPAPolicy.from_pretrained(fixture, strict=True).eval()
        assert policy.config.qwen_model_name == "./backbone" and policy.config.torch_dtype == "float32"
        pre, post = make_pre_post_processors(policy.config, pretrained_path=fixture)
    finally:
        os.chdir(cwd)
    return policy, pre, post


# ----------------------------------------------------------------------------- independent reference
# A second implementation of the whole inference from the fixture files alone (numpy / plain torch
# ops in float64, no lerobot, no transformers, no diffusers), run by --check.

def area_resize(x, oh, ow):
    """F.interpolate(mode='area') = adaptive average pooling, on [C, H, W] float64."""
    def axis(n_in, n_out):
        m = np.zeros((n_out, n_in))
        for i in range(n_out):
            s, e = (i * n_in) // n_out, -((-(i + 1) * n_in) // n_out)
            m[i, s:e] = 1.0 / (e - s)
        return m
    return np.einsum("hH,cHW,wW->chw", axis(x.shape[1], oh), x, axis(x.shape[2], ow))


def bicubic_aa_float(x, oh, ow):
    """torch's anti-aliased bicubic (antialias=True, align_corners=False) on float [C, H, W], float64:
    separable, PIL's filter (a = -0.5), support 2 * max(1, scale), normalised weights, no clamping."""
    def filt(t, a=-0.5):
        t = abs(t)
        if t < 1.0:
            return ((a + 2.0) * t - (a + 3.0)) * t * t + 1.0
        return (((t - 5.0) * t + 8.0) * t - 4.0) * a if t < 2.0 else 0.0

    def axis(n_in, n_out):
        if n_in == n_out:
            return np.eye(n_in)
        scale = n_in / n_out
        support, inv = (2.0 * scale, 1.0 / scale) if scale >= 1.0 else (2.0, 1.0)
        m = np.zeros((n_out, n_in))
        for i in range(n_out):
            c = scale * (i + 0.5)
            lo = max(int(c - support + 0.5), 0)
            hi = min(int(c + support + 0.5), n_in)
            w = np.array([filt((j + lo - c + 0.5) * inv) for j in range(hi - lo)])
            m[i, lo:hi] = w / w.sum()
        return m
    return np.einsum("hH,cHW,wW->chw", axis(x.shape[1], oh), x, axis(x.shape[2], ow))


def reference_pixels(frame, A):
    """frame float64 [3, h, w] in [0, 1] -> (rows [N, 3*T*P*P], (gt, gh, gw))."""
    v, im = A["vision"], A["image_processor"]
    P, TP, M = v["patch_size"], v["temporal_patch_size"], v["spatial_merge_size"]
    h2, w2 = g17.smart_resize(frame.shape[1], frame.shape[2], P * M, im["min_pixels"], im["max_pixels"])
    x = (bicubic_aa_float(frame, h2, w2) - 0.5) / 0.5
    gh, gw = h2 // P, w2 // P
    rows = []
    for r, c in g17.merge_order(gh, gw, M):
        patch = x[:, r * P:(r + 1) * P, c * P:(c + 1) * P]  # C, py, px
        rows.append(np.stack([patch] * TP, 1).reshape(-1))  # C, T, py, px
    return np.stack(rows), (1, gh, gw)


def reference_forward(fixture):
    """Every golden tensor from model.safetensors + arch.json + statistics + the raw frames."""
    import torch.nn.functional as F
    f64 = torch.float64
    from safetensors import safe_open
    st_file = safe_open(os.path.join(fixture, "model.safetensors"), framework="pt")
    A = json.load(open(os.path.join(fixture, "arch.json")))
    J = json.load(open(os.path.join(fixture, "golden.json")))
    G = load_file(os.path.join(fixture, "golden.safetensors"))
    keys = set(st_file.keys())

    class Weights:  # loaded on use, float64
        def __contains__(self, k):
            return k in keys

        def __getitem__(self, k):
            return st_file.get_tensor(k).to(f64)

    W = Weights()
    errs = {}

    def err(name, x):
        errs[name] = float((x.to(f64) - G[name].to(f64)).abs().max()) if tuple(x.shape) == tuple(G[name].shape) \
            else float("inf")

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

    def attn(q, k, v, heads, kv_heads, hd, causal=False):
        t, n = q.shape[0], k.shape[0]
        q = q.view(t, heads, hd).transpose(0, 1)
        k = k.view(n, kv_heads, hd).transpose(0, 1).repeat_interleave(heads // kv_heads, 0)
        v = v.view(n, kv_heads, hd).transpose(0, 1).repeat_interleave(heads // kv_heads, 0)
        sc = q @ k.transpose(1, 2) / math.sqrt(hd)
        if causal:
            sc = sc + torch.full((t, n), float("-inf"), dtype=f64).triu(1)
        return (sc.softmax(-1) @ v).transpose(0, 1).reshape(t, heads * hd)

    gelu_tanh = lambda x: F.gelu(x, approximate="tanh")  # noqa: E731
    V, L, H = A["vision"], A["lm"], A["action_head"]
    M = V["spatial_merge_size"]

    # --- images: raw u8 -> area resize -> pixels (float: tolerance, not exactness)
    rows_all, grids = [], []
    for c in range(len(A["cameras"])):
        raw = G[f"image.{c}"].numpy().astype(np.float64).transpose(2, 0, 1) / 255.0
        rh, rw = A["image_transform"]["resize_images_to"]
        fr = area_resize(raw, rh, rw)
        err(f"resized.{c}", torch.from_numpy(fr))
        rows, grid = reference_pixels(fr, A)
        rows_all.append(rows)
        grids.append(grid)
    rows = np.concatenate(rows_all)
    err("pixels", torch.from_numpy(rows))
    errs["image_grid_thw"] = float([list(g) for g in grids] != G["image_grid_thw"].tolist())

    # --- vision tower, image by image (attention never crosses images)
    VP = A["weights"]["vision"]
    D, heads = V["hidden_size"], V["num_heads"]
    hd = D // heads
    N = int(round(V["num_position_embeddings"] ** 0.5))
    table = W[VP + "pos_embed.weight"].view(N, N, D)
    inv = 1.0 / 10000.0 ** (torch.arange(0, hd // 2, 2, dtype=f64) / (hd // 2))
    outs = {k: [] for k in ["vit_patch", "vit_pos", "vit_rope", "vit_out", "vision"]}
    outs.update({f"vit_block.{b}": [] for b in range(V["depth"])})
    outs.update({f"deepstack.{j}": [] for j in range(len(V["deepstack_visual_indexes"]))})

    def merger(u, p, post):
        if post:
            u = ln(u.reshape(-1, 4 * D), p + ".norm", 1e-6)
        else:
            u = ln(u, p + ".norm", 1e-6).reshape(-1, 4 * D)
        return lin(F.gelu(lin(u, p + ".linear_fc1")), p + ".linear_fc2")

    for rws, (_, gh, gw) in zip(rows_all, grids):
        x = torch.from_numpy(rws).to(f64) @ W[VP + "patch_embed.proj.weight"].reshape(D, -1).T + W[VP + "patch_embed.proj.bias"]
        outs["vit_patch"].append(x)
        hs = [r * (N - 1) / (gh - 1) for r in range(gh)] if gh > 1 else [0.0]
        ws = [c * (N - 1) / (gw - 1) for c in range(gw)] if gw > 1 else [0.0]
        order = g17.merge_order(gh, gw, M)
        pos = []
        for r, c in order:
            h0, w0 = int(hs[r]), int(ws[c])
            h1, w1 = min(h0 + 1, N - 1), min(w0 + 1, N - 1)
            dh, dw = hs[r] - h0, ws[c] - w0
            pos.append((1 - dh) * (1 - dw) * table[h0, w0] + (1 - dh) * dw * table[h0, w1]
                       + dh * (1 - dw) * table[h1, w0] + dh * dw * table[h1, w1])
        pos = torch.stack(pos)
        outs["vit_pos"].append(pos)
        x = x + pos
        ang = torch.stack([torch.cat([r * inv, c * inv]) for r, c in order])
        outs["vit_rope"].append(ang)
        emb = torch.cat([ang, ang], -1)
        cos, sin = emb.cos()[:, None], emb.sin()[:, None]
        n_tok = x.shape[0]
        for b in range(V["depth"]):
            B = VP + f"blocks.{b}."
            h = ln(x, B + "norm1", 1e-6)
            qkv = lin(h, B + "attn.qkv").view(n_tok, 3, heads, hd)
            q, k, v = qkv[:, 0], qkv[:, 1], qkv[:, 2]
            q, k = q * cos + rot_half(q) * sin, k * cos + rot_half(k) * sin
            x = x + lin(attn(q.reshape(n_tok, D), k.reshape(n_tok, D), v.reshape(n_tok, D), heads, heads, hd),
                        B + "attn.proj")
            x = x + lin(gelu_tanh(lin(ln(x, B + "norm2", 1e-6), B + "mlp.linear_fc1")), B + "mlp.linear_fc2")
            outs[f"vit_block.{b}"].append(x)
            if b in V["deepstack_visual_indexes"]:
                j = V["deepstack_visual_indexes"].index(b)
                outs[f"deepstack.{j}"].append(merger(x, VP + f"deepstack_merger_list.{j}", True))
        outs["vit_out"].append(x)
        outs["vision"].append(merger(x, VP + "merger", False))
    outs = {k: torch.cat(v) for k, v in outs.items()}
    for k, v in outs.items():
        err(k, v)
    vis = outs["vision"]
    deep = [outs[f"deepstack.{j}"] for j in range(len(V["deepstack_visual_indexes"]))]

    # --- prompt bookkeeping (exact)
    ids = G["token_ids"]
    img = ids == A["tokens"]["image_pad"]
    emb_rows = ids == A["tokens"]["embodied_action"]
    act_rows = torch.isin(ids, torch.tensor(A["tokens"]["action_token_ids"]))
    errs["image_mask"] = float(not torch.equal(img, G["image_mask"].bool()))
    errs["embodied_mask"] = float(not torch.equal(emb_rows, G["embodied_mask"].bool()))
    errs["action_token_mask"] = float(not torch.equal(act_rows, G["action_token_mask"].bool()))
    pid = g17.reference_position_ids(ids.tolist(), A["tokens"]["image_pad"], grids, M)
    errs["position_ids"] = float(not torch.equal(pid, G["position_ids"]))

    # --- language model
    LP = A["weights"]["lm"]
    emb_key = LP + "embed_tokens.weight" if LP + "embed_tokens.weight" in W else A["weights"]["lm_head"]
    x = W[emb_key][ids].clone()
    x[img] = vis
    err("lm_in", x)
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
        last = x  # what the forward hook on layers[-1] sees: the layer output, before any deepstack add
        if l < len(deep):
            x = x.clone()
            x[img] = x[img] + deep[l]
    err("lm_out", last)
    cond = last[emb_rows]
    err("embodied", cond)

    # --- action head
    HP = A["weights"]["action_head"]
    st = J["statistics"]
    mean, std = (torch.tensor(st["observation.state"][k], dtype=f64) for k in ["mean", "std"])
    sn = (G["state"].to(f64) - mean) / (std + 1e-8)
    err("state_norm", sn)
    sf = lin(F.relu(lin(sn[None], HP + "state_encoder.layer1")), HP + "state_encoder.layer2")
    err("state_features", sf)
    dt, n_steps, w = A["dit"], H["num_inference_timesteps"], A["dit"]["width"]
    xa = G["noise"].to(f64)
    fut = W[HP + "future_tokens.weight"]
    for k in range(n_steps):
        bucket = float(int(k / n_steps * H["num_timestep_buckets"]))
        f = torch.exp(-math.log(10000) * torch.arange(128, dtype=f64) / 127) * bucket
        TE = HP + "model.timestep_encoder.timestep_embedder."
        temb = lin(F.silu(lin(torch.cat([f.cos(), f.sin()]), TE + "linear_1")), TE + "linear_2")
        err(f"temb.{k}", temb)
        g2 = torch.exp(-torch.arange(w // 2, dtype=f64) * (math.log(10000.0) / (w // 2))) * bucket
        tau = torch.cat([g2.sin(), g2.cos()]).expand(xa.shape[0], -1)
        a = lin(xa, HP + "action_encoder.layer1")
        a = lin(F.silu(lin(torch.cat([a, tau], -1), HP + "action_encoder.layer2")), HP + "action_encoder.layer3")
        a = a + W[HP + "position_embedding.weight"][: xa.shape[0]]
        err(f"action_features.{k}", a)
        x = torch.cat([sf, fut, a])
        err(f"dit_in.{k}", x)
        for b in range(dt["layers"]):
            B = HP + f"model.transformer_blocks.{b}."
            scale, shift = lin(F.silu(temb), B + "norm1.linear").chunk(2)
            hq = ln(x, None, 1e-5) * (1 + scale) + shift
            kv = cond if b % 2 == 0 else hq
            x = x + lin(attn(lin(hq, B + "attn1.to_q"), lin(kv, B + "attn1.to_k"), lin(kv, B + "attn1.to_v"),
                             dt["heads"], dt["heads"], dt["head_dim"]), B + "attn1.to_out.0")
            x = x + lin(gelu_tanh(lin(ln(x, None, 1e-5), B + "ff.net.0.proj")), B + "ff.net.2")
        shift, scale = lin(F.silu(temb), HP + "model.proj_out_1").chunk(2)
        x = lin(ln(x, None, 1e-6) * (1 + scale) + shift, HP + "model.proj_out_2")
        err(f"dit_out.{k}", x)
        v = lin(F.relu(lin(x[-xa.shape[0]:], HP + "action_decoder.layer1")), HP + "action_decoder.layer2")
        err(f"velocity.{k}", v)
        xa = xa + v / n_steps
    err("actions_norm", xa)
    # --- postprocess
    gd, thr = A["postprocess"]["gripper_dim"], A["postprocess"]["gripper_threshold"]
    a = xa.clamp(-1, 1)
    a[:, gd] = (a[:, gd] >= thr).to(f64)
    err("actions_snapped", a)
    mn, mx = (torch.tensor(st["action"][k], dtype=f64) for k in ["min", "max"])
    den = torch.where(mx - mn == 0, torch.full_like(mn, 1e-8), mx - mn)
    a = (a + 1) / 2 * den + mn
    a[:, gd] = 1 - 2 * (a[:, gd] > thr).to(f64)
    err("actions", a)
    return errs


# ----------------------------------------------------------------------------- run

def check(fixture):
    """Reload the fixture in this (fresh) process and reproduce the golden actions."""
    fixture = os.path.abspath(fixture)
    g = load_file(os.path.join(fixture, "golden.safetensors"))
    policy, pre, post = load_fixture(fixture)
    model, final, ids = policy.model, [], []
    real_pa = model.action_model.predict_action
    model.action_model.predict_action = lambda c, s=None: (lambda o: final.append(o.clone()) or o)(real_pa(c, s))
    real_bi = model.qwen.build_inputs
    model.qwen.build_inputs = lambda **kw: (lambda o: ids.append(o["input_ids"].clone()) or o)(real_bi(**kw))
    images = [g[f"image.{c}"] for c in range(len(CAMERAS))]
    with torch.no_grad():
        batch, chunk, actions = run_policy(policy, pre, post, images, g["state"], g["noise"])
    assert torch.equal(ids[0][0], g["token_ids"])
    err = {"actions_norm": float((final[0][0] - g["actions_norm"]).abs().max()),
           "chunk": float((chunk[0] - g["actions_norm"]).abs().max()),
           "actions": float((actions[0] - g["actions"]).abs().max())}
    print("reload check (max abs err):", json.dumps(err))
    assert max(err.values()) < 1e-5, err
    ref = reference_forward(fixture)
    print("independent float64 reference (max abs err):", json.dumps({k: float(f"{v:.2e}") for k, v in ref.items()}))
    exact = ["image_grid_thw", "image_mask", "embodied_mask", "action_token_mask", "position_ids"]
    assert all(ref[k] == 0.0 for k in exact), {k: ref[k] for k in exact}
    if json.load(open(os.path.join(fixture, "arch.json")))["size"].startswith("tiny"):
        assert max(ref.values()) < 1e-4, ref
    return err


def generate(a, out):
    arch = SIZES[a.size]
    im = arch["image"]
    os.makedirs(out)
    tok = g17.build_tokenizer(os.path.join(_TMP, "tokenizer"))
    backbone, jepa = os.path.join(out, "backbone"), os.path.join(out, "jepa")
    build_backbone(backbone, tok, arch)
    for f in ["vocab.json", "merges.txt"]:  # the slow files as trained, byte-identical
        shutil.copy(os.path.join(_TMP, "tokenizer", f), os.path.join(backbone, f))
    build_jepa(jepa, arch)
    gen = torch.Generator().manual_seed(a.seed)
    stats = make_stats(gen)

    import diffusers
    import lerobot
    from lerobot.policies.vla_jepa.modeling_vla_jepa import VLAJEPAPolicy
    from lerobot.policies.vla_jepa.processor_vla_jepa import make_vla_jepa_pre_post_processors

    cfg = make_config(arch, backbone, jepa)
    torch.manual_seed(a.seed)
    policy = VLAJEPAPolicy(cfg).eval()
    model = policy.model
    for n, t in list(policy.named_parameters()) + list(policy.named_buffers()):
        assert t.dtype in (torch.float32, torch.int64, torch.bool), (n, t.dtype)
    g17.rerandomize(policy, gen)
    qwen = model.qwen.model  # Qwen3VLForConditionalGeneration
    visual, lm = qwen.model.visual, qwen.model.language_model
    assert len(lm.layers) == arch["text"]["num_hidden_layers"]
    tied = qwen.lm_head.weight.data_ptr() == lm.embed_tokens.weight.data_ptr()
    assert tied
    tokzr = model.qwen.processor.tokenizer
    assert lm.embed_tokens.weight.shape[0] == arch["text"]["vocab_size"] >= len(tokzr), "no resize, as in the real model"
    pre, post = make_vla_jepa_pre_post_processors(cfg, stats)
    policy.save_pretrained(out)
    pre.save_pretrained(out)
    post.save_pretrained(out)
    rewrite_paths(out)

    images = [torch.randint(0, 256, (*im["cameras"][c], 3), generator=gen, dtype=torch.uint8) for c in CAMERAS]
    smean, sstd = stats["observation.state"]["mean"], stats["observation.state"]["std"]
    state = smean + sstd * 1.5 * torch.randn(STATE_DIM, generator=gen)
    noise = torch.randn(CHUNK, ACTION_DIM, generator=gen)

    templated, built = [], []
    proc = model.qwen.processor
    real_tpl = proc.apply_chat_template
    def apply_chat_template(messages, **kw):
        templated.append(real_tpl(messages, tokenize=False, add_generation_prompt=True))
        return real_tpl(messages, **kw)
    proc.apply_chat_template = apply_chat_template
    real_bi = model.qwen.build_inputs

    def build_inputs(**kw):
        o = real_bi(**kw)
        built.append(({k: v for k, v in kw.items()}, o))
        return o
    model.qwen.build_inputs = build_inputs

    rec = {k: [] for k in ["vit_patch", "vit_pos", "vit_rope", "vit", "lm_kw", "lm_layer", "state_features", "temb",
                           "action_enc", "dit_in", "dit_out", "dec", "final", "cond"]}
    rec.update({f"vit_block.{b}": [] for b in range(len(visual.blocks))})
    det = lambda o: o.detach().clone()  # noqa: E731
    head, dit = model.action_model, model.action_model.model
    hooks = [visual.patch_embed.register_forward_hook(lambda m, i, o: rec["vit_patch"].append(det(o))),
             visual.register_forward_hook(lambda m, i, o: rec["vit"].append(o)),
             lm.register_forward_pre_hook(lambda m, args, kw: rec["lm_kw"].append(
                 {k: (det(v) if torch.is_tensor(v) else v) for k, v in kw.items()}), with_kwargs=True),
             head.state_encoder.register_forward_hook(lambda m, i, o: rec["state_features"].append(det(o))),
             head.action_encoder.register_forward_hook(lambda m, i, o: rec["action_enc"].append(det(o))),
             dit.timestep_encoder.register_forward_hook(lambda m, i, o: rec["temb"].append(det(o))),
             dit.register_forward_pre_hook(lambda m, args, kw: rec["dit_in"].append(
                 (det(kw["hidden_states"]), det(kw["encoder_hidden_states"]), kw["timestep"].tolist())), with_kwargs=True),
             dit.register_forward_hook(lambda m, i, o: rec["dit_out"].append(det(o))),
             head.action_decoder.register_forward_hook(lambda m, i, o: rec["dec"].append(det(o)))]
    for b, blk in enumerate(visual.blocks):
        hooks.append(blk.register_forward_hook(lambda m, i, o, b=b: rec[f"vit_block.{b}"].append(det(o))))
    for l, layer in enumerate(lm.layers):
        hooks.append(layer.register_forward_hook(
            lambda m, i, o, l=l: rec["lm_layer"].append((l, det(o[0] if isinstance(o, tuple) else o)))))
    real_pos, real_rope = visual.fast_pos_embed_interpolate, visual.rot_pos_emb
    visual.fast_pos_embed_interpolate = lambda g: (lambda o: rec["vit_pos"].append(det(o)) or o)(real_pos(g))
    visual.rot_pos_emb = lambda g: (lambda o: rec["vit_rope"].append(det(o)) or o)(real_rope(g))
    real_pa = head.predict_action

    def predict_action(cond, state=None):
        rec["cond"].append((det(cond), None if state is None else det(state)))
        o = real_pa(cond, state)
        rec["final"].append(det(o))
        return o
    head.predict_action = predict_action
    with torch.no_grad():
        batch, chunk, actions = run_policy(policy, pre, post, images, state, noise)
    for hk in hooks:
        hk.remove()
    del visual.fast_pos_embed_interpolate, visual.rot_pos_emb, head.predict_action, model.qwen.build_inputs
    del proc.apply_chat_template

    assert len(rec["vit"]) == 1 and len(rec["dec"]) == NUM_STEPS and len(rec["final"]) == 1 and len(built) == 1
    kw_bi, qin = built[0]
    resized = [det(img) for img in kw_bi["images"][0]]
    ids, mask = qin["input_ids"][0], qin["attention_mask"][0]
    assert bool(mask.all()), "batch of one: no padding expected"
    grid = qin["image_grid_thw"]
    img_id = qwen.config.image_token_id
    img_mask = ids == img_id
    emb_id, act_ids = model.embodied_action_token_id, model.action_token_ids
    emb_mask, act_mask = ids == emb_id, torch.isin(ids, torch.tensor(act_ids))
    assert int(emb_mask.sum()) == N_EMBODIED and int(act_mask.sum()) == TOKENS_PER_STEP * (VIDEO_FRAMES // TUBELET - 1)
    assert act_ids == list(range(len(tok), len(tok) + CHUNK * 4)) and emb_id == len(tok) + CHUNK * 4
    kw = rec["lm_kw"][0]
    pos3 = kw["position_ids"][:, 0]
    assert pos3.shape[0] == 3
    n_deep = len(visual.config.deepstack_visual_indexes)
    assert len(kw["deepstack_visual_embeds"]) == n_deep and torch.equal(kw["visual_pos_masks"][0], img_mask)
    vout = rec["vit"][0]
    deep = [det(d) for d in vout.deepstack_features]
    for j in range(n_deep):
        assert torch.equal(deep[j], kw["deepstack_visual_embeds"][j])
    vision = vout.pooler_output
    vision = torch.cat(list(vision)) if isinstance(vision, (tuple, list)) else vision
    lm_layers = dict(rec["lm_layer"])
    lm_out = lm_layers[len(lm.layers) - 1][0]
    cond, st_in = rec["cond"][0]
    assert torch.equal(cond[0], lm_out[emb_mask]), "the head reads the last layer's output at the embodied rows"
    assert st_in.shape == (1, 1, STATE_DIM)
    # The tokenizer.json in backbone/ + the 29 added tokens gives the same ids as the processor's tokenizer.
    from tokenizers import Tokenizer
    t_json = Tokenizer.from_file(os.path.join(backbone, "tokenizer.json"))
    from tokenizers import AddedToken
    t_json.add_special_tokens([AddedToken(f"<|action_{i}|>", special=True) for i in range(CHUNK * 4)]
                              + [AddedToken("<|embodied_action|>", special=True)])
    expanded = tokzr.decode(ids.tolist(), skip_special_tokens=False)
    assert t_json.encode(expanded, add_special_tokens=True).ids == ids.tolist()
    assert chunk.shape == (1, CHUNK, ACTION_DIM) and actions.shape == (1, CHUNK, ACTION_DIM)
    assert torch.equal(chunk[0], rec["final"][0][0])
    # Normalisation and postprocess formulas (FORMULAS["state"], ["postprocess"]).
    sn = batch["observation.state"][0]
    assert torch.allclose(sn, (state - smean) / (sstd + 1e-8), atol=1e-6) and torch.equal(st_in[0, 0], sn)
    snapped = chunk[0].clamp(-1, 1).clone()
    snapped[:, GRIPPER_DIM] = (snapped[:, GRIPPER_DIM] >= GRIPPER_THRESHOLD).float()
    amin, amax = stats["action"]["min"], stats["action"]["max"]
    ref_a = (snapped + 1) / 2 * (amax - amin) + amin
    ref_a[:, GRIPPER_DIM] = 1 - 2 * (ref_a[:, GRIPPER_DIM] > GRIPPER_THRESHOLD).float()
    assert torch.allclose(actions[0], ref_a, atol=1e-6)
    g_col = snapped[:, GRIPPER_DIM]
    assert bool((g_col == 0).any() and (g_col == 1).any()), "the seed must exercise both gripper branches"

    golden = {"pixels": qin["pixel_values"], "vit_patch": rec["vit_patch"][0], "vit_pos": rec["vit_pos"][0],
              "vit_rope": rec["vit_rope"][0], "vit_out": det(vout.last_hidden_state), "vision": det(vision),
              "lm_in": kw["inputs_embeds"][0], "lm_out": lm_out, "embodied": cond[0], "state": state,
              "state_norm": sn, "state_features": rec["state_features"][0][0], "noise": noise,
              "actions_norm": rec["final"][0][0], "actions_snapped": snapped, "actions": actions[0]}
    for c in range(len(CAMERAS)):
        golden[f"image.{c}"] = images[c]
        golden[f"resized.{c}"] = resized[c]
    for b in range(len(visual.blocks)):
        golden[f"vit_block.{b}"] = rec[f"vit_block.{b}"][0]
    for j in range(n_deep):
        golden[f"deepstack.{j}"] = deep[j]
    for l in range(len(lm.layers)):
        golden[f"lm_layer.{l}"] = lm_layers[l][0]
    pos_emb = head.position_embedding.weight[:CHUNK]
    for k in range(NUM_STEPS):
        golden[f"temb.{k}"] = rec["temb"][k][0]
        golden[f"action_features.{k}"] = rec["action_enc"][k][0] + pos_emb
        golden[f"dit_in.{k}"] = rec["dit_in"][k][0][0]
        golden[f"dit_out.{k}"] = rec["dit_out"][k][0]
        golden[f"velocity.{k}"] = rec["dec"][k][0]
        assert torch.equal(rec["dit_in"][k][1][0], cond[0])
        assert torch.equal(golden[f"dit_in.{k}"][-CHUNK:], golden[f"action_features.{k}"])
        assert torch.equal(golden[f"dit_in.{k}"][1:1 + N_EMBODIED], head.future_tokens.weight)
        assert torch.equal(golden[f"dit_in.{k}"][:1], golden["state_features"])
    golden = {k: (t if t.dtype == torch.uint8 else t.float()).contiguous().clone() for k, t in golden.items()}
    golden.update({"token_ids": ids.to(torch.int64).contiguous(), "attention_mask": mask.to(torch.int64).contiguous(),
                   "mm_token_type_ids": qin["mm_token_type_ids"][0].to(torch.int64).contiguous(),
                   "image_mask": img_mask.to(torch.uint8).contiguous(),
                   "embodied_mask": emb_mask.to(torch.uint8).contiguous(),
                   "action_token_mask": act_mask.to(torch.uint8).contiguous(),
                   "image_grid_thw": grid.to(torch.int64).contiguous(),
                   "position_ids": pos3.to(torch.int64).contiguous()})
    assert torch.equal(golden["vision"], kw["inputs_embeds"][0][img_mask])
    save_file(golden, os.path.join(out, "golden.safetensors"))

    buckets = [int(t[2][0]) for t in rec["dit_in"]]
    assert buckets == [int(k / NUM_STEPS * BUCKETS) for k in range(NUM_STEPS)], buckets
    x = noise.clone()
    for k in range(NUM_STEPS):
        x = x + (1.0 / NUM_STEPS) * golden[f"velocity.{k}"]  # action_head.py:336
    assert torch.allclose(x, golden["actions_norm"], atol=1e-6)

    keys = list(load_file(os.path.join(out, "model.safetensors")).keys())
    assert all(k.startswith("model.") for k in keys)
    VP, LP, HP = "model.qwen.model.model.visual.", "model.qwen.model.model.language_model.", "model.action_model."
    h, vis, txt = arch["head"], arch["vision"], arch["text"]
    inner = h["num_heads"] * h["head_dim"]
    lm_head_key = "model.qwen.model.lm_head.weight"
    groups = {}
    for k in keys:
        g = next((p for p in ["model.qwen.model.model.visual", "model.qwen.model.model.language_model",
                              "model.qwen.model.lm_head", "model.action_model", "model.video_encoder",
                              "model.video_predictor"] if k.startswith(p)), "other")
        groups[g] = groups.get(g, 0) + 1
    arch_json = {
        "size": a.size,
        "weights": {"vision": VP, "lm": LP, "lm_head": lm_head_key, "action_head": HP,
                    "unused_at_inference": ["model.video_encoder.", "model.video_predictor.",
                                            LP + "norm.weight", lm_head_key + " (tied to embed_tokens; "
                                            "stored only if embed_tokens is not)"],
                    "tensor_count_by_prefix": groups,
                    "embed_tokens_stored_as": LP + "embed_tokens.weight" if LP + "embed_tokens.weight" in keys
                    else lm_head_key},
        "weights_stored": sorted(keys),
        "cameras": [f"observation.images.{c}" for c in CAMERAS],
        "image_transform": {"input": "u8 HWC / 255 -> float32 CHW", "resize_images_to": list(im["resize_to"]),
                            "resize_mode": "area (adaptive average pooling)",
                            "camera_hw": {c: list(im["cameras"][c]) for c in CAMERAS}},
        "image_processor": {"min_pixels": im["min_pixels"], "max_pixels": im["max_pixels"], "factor": 32,
                            "do_rescale": False, "mean": [0.5] * 3, "std": [0.5] * 3,
                            "resample": "bicubic (torchvision on float, antialias=True, no clamp)",
                            "grid_thw": grid.tolist(), "processed_hw": [[int(g[1]) * 16, int(g[2]) * 16] for g in grid]},
        "vision": {**vis, "head_dim": vis["hidden_size"] // vis["num_heads"], "ln_eps": 1e-6, "rope_theta": 10000.0,
                   "merger_act": "gelu (erf)", "attn_impl": visual.config._attn_implementation,
                   "merged_tokens_per_image": [int(g.prod()) // 4 for g in grid]},
        "lm": {"arch": "qwen3_vl_text", "hidden": txt["hidden_size"], "layers_config": txt["num_hidden_layers"],
               "layers_used": txt["num_hidden_layers"], "head_reads_layer": txt["num_hidden_layers"] - 1,
               "heads": txt["num_attention_heads"], "kv_heads": txt["num_key_value_heads"], "head_dim": txt["head_dim"],
               "intermediate": txt["intermediate_size"], "rope_theta": txt["rope_theta"],
               "mrope_section": txt["mrope_section"], "mrope_interleaved": True, "rms_eps": txt["rms_norm_eps"],
               "vocab": txt["vocab_size"], "tokenizer_vocab_after_expansion": len(tokzr), "qk_norm": True,
               "tied_embeddings": tied, "deepstack_into_layers": list(range(n_deep)), "final_norm_applied": False,
               "attn_impl": lm.config._attn_implementation},
        "tokens": {"image_pad": img_id, "video_pad": qwen.config.video_token_id,
                   "vision_start": qwen.config.vision_start_token_id, "vision_end": qwen.config.vision_end_token_id,
                   "embodied_action": emb_id, "action_token_ids": act_ids,
                   "n_embodied": N_EMBODIED, "n_action_tokens_in_prompt": int(act_mask.sum()),
                   "real_ids": {"image_pad": 151655, "action_0": 151669, "action_27": 151696,
                                "embodied_action": 151697, "vocab_rows": 151936}},
        "dit": {"preset": "DiT-B", "layers": h["num_layers"], "width": inner, "heads": h["num_heads"],
                "head_dim": h["head_dim"], "ff_inner": 4 * inner, "output_dim": h["hidden_size"],
                "cross_attention_dim": txt["hidden_size"],
                "block_kinds": ["cross" if i % 2 == 0 else "self" for i in range(h["num_layers"])],
                "timestep_proj_channels": 256, "ln_eps": 1e-5, "norm_out_eps": 1e-6, "adaln_chunk": "scale, shift",
                "proj_out_chunk": "shift, scale"},
        "action_head": {"hidden_size": h["hidden_size"], "inner": inner, "chunk": CHUNK, "action_dim": ACTION_DIM,
                        "state_dim": STATE_DIM, "future_tokens": N_EMBODIED,
                        "position_embedding_rows": int(head.position_embedding.weight.shape[0]),
                        "sequence": ["state (1)", f"future_tokens ({N_EMBODIED})", f"actions ({CHUNK})"],
                        "num_timestep_buckets": BUCKETS, "num_inference_timesteps": NUM_STEPS},
        "normalisation": {"state": "MEAN_STD (eps 1e-8 added to std)", "action": "MIN_MAX (min/max)",
                          "visual": "IDENTITY"},
        "postprocess": {"clip": True, "pre_snap_gripper": True, "binarize_gripper": True,
                        "gripper_dim": GRIPPER_DIM, "gripper_threshold": GRIPPER_THRESHOLD,
                        "steps": [s["registry_name"] for s in json.load(open(os.path.join(
                            out, "policy_postprocessor.json")))["steps"]]},
        "world_model": {"enabled": True, "used_at_inference": False, "jepa": arch["jepa"],
                        "predictor": arch["predictor"], "tubelet_size_sets_prompt": TUBELET},
        "state_dim": STATE_DIM, "action_dim": ACTION_DIM,
        "released": RELEASED,
        "notes": NOTES,
        "formulas": FORMULAS,
    }
    json.dump(arch_json, open(os.path.join(out, "arch.json"), "w"), indent=1)

    vendor = os.path.dirname(sys.modules["lerobot.policies.vla_jepa.modeling_vla_jepa"].__file__)
    pos = img_mask.nonzero().flatten().tolist()
    epos = emb_mask.nonzero().flatten().tolist()
    apos = act_mask.nonzero().flatten().tolist()
    n_img = [int(g.prod()) // 4 for g in grid]
    info = {
        "generator": "tools/golden/vla_jepa.py",
        "size": a.size,
        "seed": a.seed,
        "versions": {"python": sys.version.split()[0], "lerobot": lerobot.__version__, "torch": torch.__version__,
                     "transformers": transformers.__version__, "diffusers": diffusers.__version__,
                     "numpy": np.__version__, "tokenizers": __import__("tokenizers").__version__,
                     "lerobot_vla_jepa_sha256": {
                         f: hashlib.sha256(open(os.path.join(vendor, f), "rb").read()).hexdigest()[:16]
                         for f in ["modeling_vla_jepa.py", "qwen_interface.py", "action_head.py",
                                   "configuration_vla_jepa.py", "processor_vla_jepa.py", "world_model.py"]},
                     "transformers_qwen3_vl_sha256": hashlib.sha256(open(sys.modules[
                         "transformers.models.qwen3_vl.modeling_qwen3_vl"].__file__, "rb").read()).hexdigest()[:16],
                     "pep695_patched_files": sorted(g17.PEP695.get("files", {}))},
        "task": TASK,
        "instruction": kw_bi["instructions"][0],
        "prompt_text": model.config.prompt_template.format(
            instruction=kw_bi["instructions"][0], actions=kw_bi["action_prompt"], e_actions=kw_bi["embodied_prompt"]),
        "prompt_templated": templated[0][0] if isinstance(templated[0], list) else templated[0],
        "prompt_expanded": expanded,
        "token_ids": ids.tolist(),
        "n_tokens": len(ids),
        "image_token_id": img_id,
        "image_token_spans": [[pos[0], pos[n_img[0] - 1] + 1], [pos[n_img[0]], pos[-1] + 1]],
        "action_token_span": [apos[0], apos[-1] + 1],
        "embodied_token_id": emb_id,
        "embodied_token_span": [epos[0], epos[-1] + 1],
        "image_grid_thw": grid.tolist(),
        "position_ids": pos3.tolist(),
        "camera_keys": [f"observation.images.{c}" for c in CAMERAS],
        "camera_hw": [list(im["cameras"][c]) for c in CAMERAS],
        "resize_images_to": list(im["resize_to"]),
        "num_steps": NUM_STEPS,
        "timestep_buckets": buckets,
        "chunk": CHUNK,
        "state_dim": STATE_DIM,
        "action_dim": ACTION_DIM,
        "statistics": {k: {s: [float(x) for x in v] for s, v in d.items()} for k, d in stats.items()},
        "model": arch_json,
        "tensors": {k: [str(t.dtype).replace("torch.", ""), list(t.shape)] for k, t in sorted(golden.items())},
    }
    assert epos == list(range(epos[0], epos[0] + N_EMBODIED)), "the 32 embodied tokens are contiguous"
    json.dump(info, open(os.path.join(out, "golden.json"), "w"), indent=1)
    print(json.dumps({k: info[k] for k in ["versions", "prompt_templated", "n_tokens", "image_token_spans",
                                            "action_token_span", "embodied_token_span", "image_grid_thw",
                                            "timestep_buckets"]}))
    print("actions:", actions[0].tolist())
    print("max|actions_norm|:", float(golden["actions_norm"].abs().max()))


NOTES = [
    "Only the 32 embodied rows of the LAST decoder layer reach the head (as cross-attention keys/values "
    "of the even DiT blocks); images reach the head only through the LM. The LM is causal, so rows after "
    "the last <|embodied_action|> ('.<|im_end|>\\n<|im_start|>assistant\\n') cannot change C: an "
    "implementation may stop the LM at the last embodied row and skip the final norm and lm_head (lerobot "
    "computes all of them and discards them).",
    "The <|action_k|> prompt tokens (24 of them) and the whole world model (model.video_encoder.*, "
    "model.video_predictor.*, in the checkpoint because enable_world_model=True) only serve training; the "
    "action tokens still sit in the prompt and so shift positions and feed attention.",
    "Embedding table: lerobot's save_pretrained drops one of two tied tensors, and this fixture stores it as "
    "model.qwen.model.lm_head.weight (no embed_tokens); the released checkpoint was written by the converter "
    "with safetensors save_file of the mapped .pt state dict and holds "
    "model.qwen.model.model.language_model.embed_tokens.weight (vla.cpp's converter reads that one). "
    "Accept either.",
    "Released geometry: LIBERO frames (256 x 256) are area-resized to resize_images_to = 224 x 224 and "
    "then bicubic-enlarged back to 256 x 256 by smart_resize (min_pixels = 256 * 256): 16 x 16 patches, 64 "
    "tokens per camera, 2 cameras.",
    "The stock code runs the whole Qwen encoding under bf16 autocast even on CPU and loads Qwen in bf16 "
    "(torch_dtype default); the action head stays float32 (it is built in float32 and gets "
    "embodied.float()). This fixture is float32 throughout (see the tool's docstring).",
    "predict_action_chunk(batch, noise) ignores `noise`: the head draws torch.randn(B, chunk, action_dim) "
    "itself (action_head.py:315).",
    "The gripper steps of the postprocessor serialise no config (policy_postprocessor.json shows "
    "'config': {}): after a reload they always use gripper_dim 6 and threshold 0.5, whatever config.json "
    "says. Which steps run is decided by the saved JSON, not by the config flags.",
    "binarize_gripper_action maps the un-normalised gripper to -1 when > 0.5 and +1 otherwise; with "
    "LIBERO's gripper range [-1, 1] the snapped normalised 1 becomes -1 and 0 becomes +1.",
]

RELEASED = {
    "checkpoint": "lerobot/VLA-JEPA-LIBERO (converted from ginwind/VLA-JEPA LIBERO/*.pt)",
    "sources": ["lerobot 0.6.1 policies/vla_jepa defaults (configuration_vla_jepa.py)",
                "convert_vla_jepa_checkpoints.py (lerobot's converter: _ARCH, LIBERO variant, resolution_size 224)",
                "ginwind/VLA-JEPA scripts/config/vlajepa_robot_ft.yaml (DiT-B, 16 layers, hidden 1024, 4 steps)",
                "vla.cpp convert_vla_jepa_to_gguf.py (ViT 1024 x 24, deepstack 5/11/17, LM 2048 x 28, "
                "16/8 heads x 128, DiT 768 = 12 x 64, 16 blocks, cross 2048, out 1024, image_token 151655, "
                "embodied 151697, action_0 151669)"],
    "backbone": "Qwen/Qwen3-VL-2B-Instruct (vision 1024 x 24, patch 16, deepstack 5/11/17, merger -> 2048; "
                "LM 2048 x 28 layers, all used; vocab rows 151936; tied embeddings)",
    "cameras": ["observation.images.image", "observation.images.image2"],
    "input_feature_shape": [3, 224, 224],
    "resize_images_to": [224, 224],
    "image_processor": {"min_pixels": 65536, "max_pixels": 16777216, "processed_hw": [256, 256],
                        "grid_thw": [1, 16, 16], "image_tokens_per_camera": 64},
    "state_dim": 8, "action_dim": 7, "chunk_size": 7, "n_action_steps": 7,
    "dit": {"preset": "DiT-B", "heads": 12, "head_dim": 64, "inner": 768, "layers": 16, "output_dim": 1024},
    "num_inference_timesteps": 4, "num_embodied_tokens": 32, "num_action_tokens_per_timestep": 8,
    "num_video_frames": 8, "tubelet_size": 2, "enable_world_model": True, "torch_dtype": "bfloat16 (default)",
    "normalization_mapping": {"VISUAL": "IDENTITY", "STATE": "MEAN_STD", "ACTION": "MIN_MAX"},
    "binarize_gripper_action": True, "pre_snap_gripper_action": True, "clip_normalized_actions": True,
    "world_model": "facebook/vjepa2-vitl-fpc64-256 encoder (1024 x 24, tubelet 2) + predictor 12 blocks x 8 "
                   "heads (embed 2 views x 1024 -> 1024); training only",
    "unverified": "the hub config.json itself was not readable here (offline); the values above are the "
                  "converter's and the port's defaults",
}


def dry_full(a):
    """--size full --dry: the released sizes on the meta device (no weights, nothing written)."""
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration, VJEPA2Config, VJEPA2Model
    from lerobot.policies.vla_jepa.action_head import VLAJEPAActionHead
    from lerobot.policies.vla_jepa.world_model import ActionConditionedVideoPredictor
    arch = SIZES["full"]
    tok = g17.build_tokenizer(os.path.join(_TMP, "tokenizer"))
    qcfg = g17.qwen3vl_config(tok, arch, dtype="bfloat16")
    cfg = make_config(arch, "unused", "unused", dtype="bfloat16")
    torch.distributions.Distribution.set_default_validate_args(False)  # the head's Beta on meta tensors
    with torch.device("meta"):
        qwen = Qwen3VLForConditionalGeneration(Qwen3VLConfig(**qcfg))
        head = VLAJEPAActionHead(cfg, cross_attention_dim=arch["text"]["hidden_size"])
        vj = VJEPA2Model(VJEPA2Config(**arch["jepa"]))
        pred = ActionConditionedVideoPredictor(
            num_frames=VIDEO_FRAMES // TUBELET, img_size=tuple(arch["image"]["resize_to"]), patch_size=16,
            tubelet_size=1, embed_dim=arch["jepa"]["hidden_size"] * TUBELET, action_embed_dim=arch["text"]["hidden_size"],
            predictor_embed_dim=arch["jepa"]["hidden_size"], depth=arch["predictor"]["depth"],
            num_heads=arch["predictor"]["num_heads"], mlp_ratio=4.0, num_action_tokens_per_step=TOKENS_PER_STEP)
    sd = {}
    for pre_, m in [("model.qwen.model.", qwen), ("model.action_model.", head), ("model.video_encoder.", vj),
                    ("model.video_predictor.", pred)]:
        sd.update({pre_ + k: tuple(v.shape) for k, v in m.state_dict().items()})
    groups = {}
    for k, s in sd.items():
        g = ".".join(k.split(".")[:5]) if k.startswith("model.qwen") else ".".join(k.split(".")[:2])
        groups[g] = groups.get(g, 0) + math.prod(s)
    im = arch["image"]
    geometry = {}
    for h, w in [(256, 256), (224, 224), (480, 640)]:
        rh, rw = im["resize_to"]
        h3, w3 = g17.smart_resize(rh, rw, 32, im["min_pixels"], im["max_pixels"])
        geometry[f"{h}x{w}"] = {"resized": [rh, rw], "pixels": [h3, w3], "grid_thw": [1, h3 // 16, w3 // 16],
                                "image_tokens": h3 // 32 * w3 // 32}
        h4, w4 = g17.smart_resize(h, w, 32, im["min_pixels"], im["max_pixels"])
        geometry[f"{h}x{w}"]["without_resize_images_to"] = {"pixels": [h4, w4], "image_tokens": h4 // 32 * w4 // 32}
    real_vocab = 151936
    emb_rows = sd["model.qwen.model.model.language_model.embed_tokens.weight"][0]
    out = {"param_counts_M": {g: round(n / 1e6, 3) for g, n in sorted(groups.items())},
           "total_M (lm_head tied: counted once)": round(sum(n for g, n in groups.items() if "lm_head" not in g) / 1e6, 1),
           "inference_M (no world model, no lm_head)": round(sum(
               n for g, n in groups.items() if "lm_head" not in g and "video_" not in g) / 1e6, 1),
           "embed_rows": emb_rows, "real_vocab_rows": real_vocab,
           "key_shapes": {k: "x".join(map(str, s)) for k, s in sd.items() if any(x in k for x in [
               "patch_embed", "pos_embed", "visual.blocks.0.", "visual.merger.", "deepstack_merger_list.0.",
               "language_model.layers.0.", "embed_tokens", "transformer_blocks.0.", "transformer_blocks.1.",
               "state_encoder", "action_encoder", "action_decoder", "future_tokens", "position_embedding",
               "timestep_encoder", "proj_out"]) and "video_" not in k},
           "image_geometry": geometry,
           "prompt_tokens_besides_text": {"image": 2 * 64, "vision_start_end": 4, "action": 24, "embodied": 32,
                                          "chat_frame": "<|im_start|>user\\n ... <|im_end|>\\n<|im_start|>assistant\\n"}}
    print(json.dumps(out, indent=1))
    assert emb_rows == real_vocab


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", choices=sorted(SIZES), default="tiny")
    ap.add_argument("--out", help="output folder (default: tests/fixtures/vla-jepa-SIZE for the tiny sizes)")
    ap.add_argument("--seed", type=int, default=3,
                    help="3: the first seed whose chunk snaps the gripper both ways (0 and 1 before un-normalising)")
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
        ap.error("--size full writes ~10 GB: give --out (outside the repo), or use --dry")
    out = os.path.abspath(a.out or os.path.join(root, "tests", "fixtures", f"vla-jepa-{a.size}"))
    if os.path.isdir(out):
        shutil.rmtree(out)
    generate(a, out)
    gc.collect()
    if not a.no_check:  # a fresh process, a fresh HF_LEROBOT_HOME: the folder alone must suffice
        subprocess.run([sys.executable, os.path.abspath(__file__), "--check", out], check=True,
                       env={**os.environ, "HF_HUB_OFFLINE": "1"})


if __name__ == "__main__":
    main()
