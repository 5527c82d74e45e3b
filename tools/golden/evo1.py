"""Golden fixture for Evo-1: lerobot 0.6.1 `evo1` with random weights, every tensor re-randomized.

Rerun (anyone, offline; the venv is outside the repo and CI never needs it):

    python3.11 -m venv /work/venv-lerobot061
    /work/venv-lerobot061/bin/pip install --ignore-requires-python "lerobot[evo1]==0.6.1" "networkx<3.7"
        # lerobot 0.6.1 declares Python >= 3.12 (see tools/golden/groot17.py for the venv notes); the
        # evo1 extra pulls transformers 5.5.4 (no flash-attn: the policy falls back to eager). Then,
        # once (the tool also does it itself, through groot17's import):
    /work/venv-lerobot061/bin/python tools/golden/py311_compat.py
    HF_HUB_OFFLINE=1 /work/venv-lerobot061/bin/python tools/golden/evo1.py        # tiny, committed
    HF_HUB_OFFLINE=1 /work/venv-lerobot061/bin/python tools/golden/evo1.py --size full --dry
        # the released sizes (OpenGVLab/InternVL3-1B-hf: InternViT-300M 1024 x 24 at 448, Qwen2.5-0.5B
        # cut to 14 of 24 layers; the flow-matching head 896 x 8 blocks, chunk 50) built on the meta
        # device: parameter counts and every checkpoint key with its shape; writes nothing
    HF_HUB_OFFLINE=1 /work/venv-lerobot061/bin/python tools/golden/evo1.py --check tests/fixtures/evo1-tiny
        # reload the folder in a fresh process, reproduce `actions`, then the float64 reference
    HF_HUB_OFFLINE=1 /work/venv-lerobot061/bin/python tools/golden/evo1.py --size full --out DIR
        # random weights at the released sizes (~0.77 B parameters: model.safetensors ~3.1 GB f32,
        # golden.safetensors ~0.4 GB; not committed; for tests/evo1_golden.rs full_size_matches_lerobot
        # with VLA_EVO1_GOLDEN=DIR): the same files and tensor names as tiny, with 2 cameras ("image",
        # "wrist_image", 256 x 256 raw frames, upscaled to 448) of max_views = 3 (view 2 absent), chunk 50
        # and the default 32 Euler steps (so velocity.{s}, time_emb.{s}, action_tokens.{s} for s < 32).
        # The tokenizer is tiny's reconstruction (371 ids: <img> = 362, </img> = 363, <IMG_CONTEXT> =
        # 364); the LM has the real 151674 embedding rows, more than the tokenizer (as vla_jepa.py's and
        # groot17.py's full sizes); the real ids are recorded in arch.json tokens.real_ids. --check runs
        # the float64 reference too (reported, bounded only for tiny, as vla_jepa.py)

The default seed is 0; regenerating gives byte-identical files.

Nothing is downloaded. lerobot's Evo1Policy builds Evo1Model (evo1_model.py:38), whose InternVL3Embedder
(internvl3_embedder.py:105) loads `AutoTokenizer.from_pretrained(vlm_model_name)` and
`AutoModel.from_pretrained(vlm_model_name)` (transformers' native InternVLModel: vision_tower,
multi_modal_projector, language_model; no lm_head) and cuts the language model to its first
vlm_num_layers layers; then FlowmatchingActionHead (flow_matching.py:173). This tool writes the
backbone folder from explicit configs: `backbone/` = InternVLConfig (config.json), the tokenizer and a
weights file with no tensors (every weight comes from the policy's model.safetensors). The path in
config.json is relative ("./backbone"): reload from inside the fixture folder (--check does).

Configuration: lerobot's Evo1Config defaults (what OpenGVLab/InternVL3-1B-hf based checkpoints such as
zuoxingdong/evo1_libero use: max_state_dim = max_action_dim = 24, image_resolution 448, vlm_num_layers
14, embed_dim 896, hidden_dim = state_hidden_dim = 1024, 8 heads, 8 blocks, 32 Euler steps,
MIN_MAX state/action, training_stage stage2 as the released LIBERO checkpoint) - the same flags and
code paths, tiny sizes (SIZES below). Tiny keeps: 2 ViT layers (CLS token, learned absolute position
table, LayerScale, qkv bias, patch 14), a 6 x 6 patch grid pixel-shuffled to 3 x 3 = 9 tokens per view
(real 32 x 32 -> 16 x 16 = 256), the projector LN/Linear/GELU/Linear, a 4-layer Qwen2 LM cut to 3
(real 24 -> 14) with GQA 4/2 (real 14/2) and q/k/v bias, 2 DiT blocks, chunk 5 of 24-wide padded
actions (state 8, action 7 as LIBERO), 4 Euler steps (default 32), three cameras with non-square raw
frames of sizes other than the model's (downscale on both axes, mixed, upscale on both axes: every
branch of the resize), and max_views = 4 (real default 3) so that one view is absent: its zero image
still runs through the ViT and its 9 `<IMG_CONTEXT>` tokens stay in the prompt, but the attention mask
hides them from the LM and from the head's cross-attention (internvl3_embedder.py:275-302), exactly
what a 2-camera LIBERO setup with max_views = 3 does.

Deviations from the stock code, all in this process only: `vlm_dtype="float32"` (the default
"bfloat16" loads and runs InternVL in bf16, CPU included; the action head is float32 either way);
the initial noise, which FlowmatchingActionHead.get_action draws with `torch.rand(B, chunk *
max_action_dim) * 2 - 1` on the global RNG (flow_matching.py:414), is replaced by the explicit
uniform draw `noise_u01` (so x_0 = noise_u01 * 2 - 1 = `noise`). Nothing else is patched; the
pre/postprocessors are lerobot's own, saved and reloaded (make_pre_post_processors re-runs
reconcile_evo1_processors).

What is reconstructed rather than copied from the released assets (no network here): the tokenizer
(groot17.build_tokenizer: a small byte-level BPE laid out as Qwen's, with InternVL3's 31 added tokens
in their real order: Qwen2.5's 22, then <img> </img> <IMG_CONTEXT> <quad> </quad> <ref> </ref> <box>
</box>; real ids 151643.. so <img> = 151665, </img> = 151666, <IMG_CONTEXT> = 151667; the vocabulary
has exactly len(tokenizer) rows as the real 151674), the chat template (groot17's Qwen template: Evo-1
never applies a chat template), and the dataset statistics (random).

Writes into the output folder (default tests/fixtures/evo1-tiny/):
  config.json, model.safetensors, policy_{pre,post}processor*.{json,safetensors}
                       the checkpoint exactly as lerobot saves it (policy.save_pretrained and the
                       processors' save_pretrained); vlm_model_name -> "./backbone"
  backbone/            InternVL config.json, model.safetensors (no tensors), tokenizer files
  arch.json            every size used, the checkpoint keys, and the formulas below
  golden.safetensors   inputs, every stage, lerobot's outputs (names below), float32 unless noted
  golden.json          versions, seed, prompt, token ids, spans, statistics, time indices, tensor list

golden.safetensors (batch of one; V = max_views = 4 views, c = 0..2 the present cameras in config
order, view 3 absent; N = (S/14)^2 patches, S = image size; n = N/4 image tokens per view; T tokens):
  image.{c} u8 [H,W,3] raw camera frame; frame.{c} u8 [S,S,3] after the resize (torchvision v1 bicubic,
  antialias, float32 kernel, rounded); pixels [V,3,S,S] (ImageNet-normalised, absent view = the
  normalised zero image); vit_embed [V,1+N,D] (CLS + patch embeddings + position table); vit_layer.{l}
  [V,1+N,D]; vit_out [V,1+N,D] (= the last layer: no final norm); vit_shuffled [V,n,4D] (CLS dropped,
  pixel shuffle); vision [V,n,lm] (projector output: the rows spliced at <IMG_CONTEXT>, view by view);
  token_ids i64 [T]; attention_mask i64 [T] (what the LM gets: 0 on the absent view's <IMG_CONTEXT>
  rows; the tokenizer's own mask is all ones); image_mask u8 [T] (<IMG_CONTEXT> rows); lm_in [T,lm];
  lm_layer.{l} [T,lm] (decoder layer outputs, l < layers used); lm_out [T,lm] (final RMSNorm of the
  last kept layer: the head's context tokens); context_mask u8 [T] (= attention_mask != 0); state [8]
  raw; state_norm [24]; state_emb [E] (state encoder output, appended as the last context token);
  noise_u01 [chunk,24] (what torch.rand returned); noise [chunk,24] (= noise_u01 * 2 - 1: x_0 before
  the action mask); action_mask u8 [24]; per Euler step s: time_emb.{s} [E] (the sinusoid row),
  action_tokens.{s} [chunk,E] (action encoder output), velocity.{s} [chunk,24] (masked head output);
  at step 0 only: dit_block.{b} [chunk,E], dit_out [chunk,E] (after norm_out), pooled [E]
  (seq_pool_proj output); actions_norm [chunk,24] (predict_action_chunk output); actions [chunk,7]
  (postprocessed: world units, cropped); select_action [7] (postprocessed first select_action step).

--check (run by the tool on what it wrote, in a fresh process) reloads the folder with lerobot and
reproduces `actions`, then recomputes every golden tensor from model.safetensors, arch.json, the
statistics, the tokenizer.json and the raw camera frames with an independent float64 implementation
(reference_forward below: the formulas in arch.json made executable); frames (on an AVX2/AVX512
torch), token ids and masks must match exactly.
"""
import argparse
import contextlib
import gc
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import groot17 as g17  # noqa: E402  (patches lerobot's PEP 695 files; reused: tokenizer builder, rerandomize)
import resize_ref  # noqa: E402
from _noise import explicit_rand  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
_TMP = g17._TMP  # groot17 made it (and points HF_LEROBOT_HOME / HF_MODULES_CACHE into it)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

# The backbone/ weights file holds no tensors (model.safetensors has them all): keep transformers'
# per-key "MISSING" load report out of the output.
transformers.logging.set_verbosity_error()

TASK = "  Put both the alphabet soup and the tomato sauce in the basket  "  # strip()ped by lerobot
CAMERAS = ["image", "wrist_image", "image2"]  # config order = view order in the prompt (tiny; use_size)
STATE_DIM, ACTION_DIM, CHUNK, PAD = 8, 7, 5, 24  # CHUNK: tiny's (use_size sets the size's)
NUM_STEPS, DEFAULT_STEPS = 4, 32  # NUM_STEPS: tiny's (use_size sets the size's)
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)

# InternVL3-1B-hf's added tokens, in their real order (ids 151643..151673 after the 151643 BPE ids).
ADDED = [("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True), ("<|object_ref_start|>", True),
         ("<|object_ref_end|>", True), ("<|box_start|>", True), ("<|box_end|>", True), ("<|quad_start|>", True),
         ("<|quad_end|>", True), ("<|vision_start|>", True), ("<|vision_end|>", True), ("<|vision_pad|>", True),
         ("<|image_pad|>", True), ("<|video_pad|>", True), ("<tool_call>", False), ("</tool_call>", False),
         ("<|fim_prefix|>", False), ("<|fim_middle|>", False), ("<|fim_suffix|>", False), ("<|fim_pad|>", False),
         ("<|repo_name|>", False), ("<|file_sep|>", False), ("<img>", True), ("</img>", True),
         ("<IMG_CONTEXT>", True), ("<quad>", True), ("</quad>", True), ("<ref>", True), ("</ref>", True),
         ("<box>", True), ("</box>", True)]
REAL_IDS = {"<|endoftext|>": 151643, "<img>": 151665, "</img>": 151666, "<IMG_CONTEXT>": 151667,
            "vocab_rows": 151674}

# "full" is OpenGVLab/InternVL3-1B-hf + lerobot's Evo1Config defaults. tiny keeps the structure (see the
# module docstring): image 84 = 6 patches of 14, pixel shuffle 6 x 6 -> 3 x 3; the LM cut 4 -> 3 layers
# with GQA 4 / 2; the head's MLP hidden (48) and state hidden (40) differ from each other and from E.
SIZES = {
    "tiny": dict(
        vision=dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, image_size=84,
                    patch_size=14),
        text=dict(hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                  intermediate_size=96, max_position_embeddings=4096),
        lm_layers_used=3,
        head=dict(embed_dim=64, hidden_dim=48, state_hidden_dim=40, num_heads=4, num_layers=2),
        max_views=4,
        cameras={"image": (100, 150), "wrist_image": (120, 96), "image2": (60, 80)}),
    "full": dict(
        vision=dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096,
                    image_size=448, patch_size=14),
        text=dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                  intermediate_size=4864, max_position_embeddings=32768, vocab_size=151674),
        lm_layers_used=14,
        head=dict(embed_dim=896, hidden_dim=1024, state_hidden_dim=1024, num_heads=8, num_layers=8),
        max_views=3, chunk=50, steps=32,
        cameras={"image": (256, 256), "wrist_image": (256, 256)}),
}


def use_size(size):
    """Point the module's per-size globals (cameras in config order, chunk, Euler steps) at SIZES[size]."""
    global CAMERAS, CHUNK, NUM_STEPS
    arch = SIZES[size]
    CAMERAS = list(arch["cameras"])
    CHUNK = arch.get("chunk", 5)
    NUM_STEPS = arch.get("steps", 4)
    return arch


def use_fixture(fixture):
    """use_size for the size a folder written by this tool was made at (its arch.json)."""
    return use_size(json.load(open(os.path.join(fixture, "arch.json")))["size"])
VISION_COMMON = dict(attention_bias=True, use_qk_norm=False, hidden_act="gelu", norm_type="layer_norm",
                     layer_norm_eps=1e-6, layer_scale_init_value=0.1, use_mean_pooling=True,
                     use_absolute_position_embeddings=True, use_mask_token=False, num_channels=3,
                     hidden_dropout_prob=0.0, attention_dropout=0.0, projection_dropout=0.0)
TEXT_COMMON = dict(model_type="qwen2", hidden_act="silu", rms_norm_eps=1e-6, attention_dropout=0.0,
                   rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, use_sliding_window=False,
                   tie_word_embeddings=True)

FORMULAS = {
    "frame": "per present camera, in config order: the u8 HWC frame enters lerobot as float CHW x = u8/255 "
             "(float32; VISUAL normalisation is IDENTITY); internvl3_embedder.py:62 re-quantises "
             "(x * 255).clamp(0, 255).to(uint8) (truncation; exact inverse of u8/255 in float32, so the "
             "original bytes), then torchvision.transforms.functional.resize(u8 [B,3,H,W], [S, S], BICUBIC, "
             "antialias=True) (v1 API, _functional_tensor.py:441-474): identity if already S x S; else u8 -> "
             "float32, F.interpolate(mode='bicubic', align_corners=False, antialias=True) = torch's separable "
             "AA kernel (width pass, then height pass, float32 between; Keys cubic a = -0.5, support 2 * "
             "max(1, in/out) taps, weights normalised to sum 1), clamp [0, 255], round half to even, u8. "
             "The aspect ratio is NOT kept: any H x W is squashed to S x S; no crop, no tiling (one tile "
             "per view). Bit-exact emulation: tools/golden/resize_ref.py tv1_bicubic_u8",
    "pixels": "float32 u8/255, then (x - mean) / std per channel, ImageNet mean (0.485, 0.456, 0.406), "
              "std (0.229, 0.224, 0.225) (internvl3_embedder.py:36, 99-101), RGB order, CHW; absent views "
              "(fewer cameras than max_views) are zero images appended BEFORE normalisation, so they hold "
              "-mean/std; views ordered [present cameras in config order, then absent ones]",
    "vit_embed": "patch embedding = Conv2d(3, D, kernel 14, stride 14, bias) = pixels patch rows (C, py, px "
                 "flattened) @ W.reshape(D, 588).T + b, patches row-major over the (S/14) x (S/14) grid; "
                 "x = [cls_token; patches] + position_embeddings[0] (a learned [1, 1+N, D] table, CLS "
                 "first; interpolated only if the grid differs from the checkpoint's, never at 448 / the "
                 "fixture size) (modeling_internvl.py:285-308)",
    "vit_layer": "InternVLVisionLayer (modeling_internvl.py:347-372): h = LN_before(x) (LayerNorm eps 1e-6, "
                 "affine); q, k, v = separate Linear(D, D) with bias (no qk-norm for InternViT-300M); "
                 "heads of hd = D/heads, bidirectional, softmax(q k^T * hd^-0.5) v; o = "
                 "projection_layer (Linear with bias); x = x + lambda_1 * o; h = LN_after(x); x = x + "
                 "lambda_2 * fc2(GELU_erf(fc1(h))) (LayerScale: per-channel vectors lambda_1, lambda_2); "
                 "all 1+N tokens of one view attend to each other only (views are separate batch rows)",
    "vit_out": "last_hidden_state = the last layer's output: use_mean_pooling=True makes the final "
               "vision layernorm an Identity (modeling_internvl.py:436-438); vision_feature_layer = -1",
    "pixel_shuffle": "drop CLS (vision_feature_select_strategy 'default'); G = S/14; x[r, c] = patch row r, "
                     "col c; downsample_ratio 0.5 (modeling_internvl.py:668-701): output token t = i*(G/2) + "
                     "j (row-major over the G/2 x G/2 grid) = concat of x[2i, 2j], x[2i, 2j+1], x[2i+1, 2j], "
                     "x[2i+1, 2j+1] (4D channels, that order: channel block (di, dj) at offset (2 di + dj) D)",
    "projector": "multi_modal_projector: LayerNorm(4D, eps 1e-5 = nn.LayerNorm default, affine) -> "
                 "linear_1 (4D -> lm) -> GELU (exact erf, projector_hidden_act 'gelu') -> linear_2 (lm -> lm) "
                 "(modeling_internvl.py:485-500)",
    "prompt": "for each view v = 1..max_views (absent ones included): 'Image-{v}: ' + '<img>' + "
              "'<IMG_CONTEXT>' * image_seq_length + '</img>' + '\\n', concatenated, then task.strip(); no "
              "chat template, no system prompt, no BOS/EOS (internvl3_embedder.py:227-240); tokenized by "
              "the Qwen2 BPE (padding=True, truncation at max_text_length 1024; batch of one: no padding)",
    "attention_mask": "tokenizer mask (all ones for a batch of one) with 0 on the <IMG_CONTEXT> rows of "
                      "absent views (internvl3_embedder.py:275-302: the k-th <IMG_CONTEXT> row belongs to "
                      "view k // image_seq_length); the same bool mask is the head's context mask",
    "lm_in": "embed_tokens(ids), then the projector rows replace the <IMG_CONTEXT> rows in order (view 0's "
             "n rows, then view 1's, ...; absent views included) (modeling_internvl.py:636-650, "
             "masked_scatter)",
    "lm": "Qwen2 decoder (modeling_qwen2.py:269-309), the first lm_layers_used layers only (lerobot "
          "replaces language_model.layers by layers[:vlm_num_layers], internvl3_embedder.py:170-173): x += "
          "o_proj(attn(RMSNorm(x))); x += down(silu(gate(h)) * up(h)), h = RMSNorm(x); RMSNorm eps 1e-6, x * "
          "rsqrt(mean(x^2) + eps) * w; q/k/v Linear WITH bias, o_proj without; GQA (kv head g serves q heads "
          "g*heads/kv .. ); scale hd^-0.5; RoPE: positions 0..T-1 (plain arange, even for masked rows), "
          "inv_f = 1/theta^(arange(0, hd, 2)/hd), theta 1e6, emb = cat(angles, angles), q' = q cos + "
          "rotate_half(q) sin, rotate_half(x) = cat(-x2, x1); mask = causal AND key attention_mask (masked "
          "keys get -inf / finfo.min; masked query rows are still computed); softmax in float32",
    "lm_out": "outputs.hidden_states[-1] = the FINAL RMSNorm (language_model.norm) of the last kept layer's "
              "output (transformers' capture_outputs replaces hidden_states[-1] by last_hidden_state, "
              "output_capturing.py:256-263), cast to float32: context tokens C [T, lm] "
              "(internvl3_embedder.py:354); all T rows are kept (return_cls_only False)",
    "state": "preprocessor: pad the raw state with zeros to max_state_dim (24), then MIN_MAX with the "
             "statistics padded by min = -1, max = +1 (processor_evo1.py:252-302): s' = 2 (s - min) / d - 1, "
             "d = max - min (d replaced by 1e-8 where d == 0), no clipping; padded dims stay 0",
    "state_encoder": "state_emb = fc2(ReLU(fc1(s'))) (CategorySpecificMLP; num_categories 1: plain "
                     "nn.Linear, keys .fc1.linear.*; > 1: y = x @ W[e] + b[e], W [cat, in, out]); "
                     "context = [C (T rows), state_emb (1 row)], context mask = [attention_mask != 0, True] "
                     "(flow_matching.py:284-321)",
    "time": "N = num_inference_timesteps; for step i: t = i/N, index = min(int(t * 999), 999) (Python "
            "float, truncation), time_emb = pe[index] with pe[p, 2k] = sin(p * f_k), pe[p, 2k+1] = cos(p * "
            "f_k), f_k = exp(2k * -(ln 10000 / E)) (INTERLEAVED sin/cos, float32 table of 1000 rows, stored "
            "in the checkpoint as time_pos_enc.pe) (flow_matching.py:26-40, 449-453). No MLP on it",
    "action_encoder": "a = ReLU(W1(x)) (24 -> E), a += pe_h[row] (the same interleaved sinusoid, E wide, "
                      "rows 0..chunk-1, buffer action_encoder.pos_encoding.pe), a = ReLU(W2(a)) (E -> E), "
                      "a = W3(a) (E -> E) (flow_matching.py:126-145); x is the masked current sample",
    "dit_block": "BasicTransformerBlock (flow_matching.py:148-170): h = LN1(x) (eps 1e-5, affine); attn = "
                 "nn.MultiheadAttention(E, heads, batch_first): q = h Wq^T + bq, k = context Wk^T + bk, v = "
                 "context Wv^T + bv ([Wq; Wk; Wv] = in_proj_weight [3E, E], in_proj_bias [3E]), per head "
                 "softmax(q k^T / sqrt(E/heads)) v over the T+1 context rows (key_padding_mask hides masked "
                 "ones), out_proj; the context is NOT normalised; x = x + attn; h2 = LN2(x) + time_emb "
                 "(broadcast over rows); x = x + ff2(GELU_erf(ff1(h2))) (E -> 4E -> E). Cross-attention "
                 "only: the action rows never attend to each other",
    "head_out": "x = norm_out(x) (LayerNorm eps 1e-5); pooled = seq_pool_proj(flatten(x)) (chunk*E -> E, "
                "row-major: row 0's E values first); v = mlp_head.fc2(ReLU(mlp_head.fc1(pooled))) (E -> "
                "hidden_dim -> chunk*24), reshaped [chunk, 24], times the action mask (flow_matching.py:437-447)",
    "euler": "x_0 = (u * 2 - 1) * mask, u ~ U[0, 1) of shape [chunk * 24] viewed [chunk, 24] (torch.rand, "
             "flow_matching.py:414-423); mask = 1 on the first action_dim columns (the action feature's "
             "length), 0 on the padding; dt = 1/N; for i in 0..N-1: x = x + dt * v(x * mask, t = i/N); "
             "output x_N * mask (normalised). Direction: t = 0 is noise, t = 1 is data (training: x_t = "
             "(1 - t) noise + t actions, target actions - noise)",
    "postprocess": "policy_postprocessor: MIN_MAX un-normalise over all 24 columns with the padded "
                   "statistics: a = (x + 1) / 2 * d + min (d as above; padded columns: identity), then "
                   "Evo1ActionProcessorStep keeps the first action_dim columns (binarize_gripper False by "
                   "default), then float32 on the CPU (processor_evo1.py:377-430). predict_action_chunk "
                   "returns the whole chunk [B, chunk, 24] (normalised); select_action queues the first "
                   "n_action_steps rows and pops one [B, 24] per call",
}


# ----------------------------------------------------------------------------- assets

def build_tokenizer(out):
    """groot17's Qwen-layout byte-level BPE with InternVL3's added tokens (in their real order)."""
    real = g17.ADDED
    g17.ADDED = ADDED
    try:
        return g17.build_tokenizer(out)
    finally:
        g17.ADDED = real


def internvl_config(tok, arch, dtype="float32"):
    v, t = arch["vision"], dict(arch["text"])
    t.setdefault("vocab_size", len(tok))
    ids = {k: tok.convert_tokens_to_ids(k) for k in ["<|endoftext|>", "<|im_end|>", "<IMG_CONTEXT>"]}
    g = v["image_size"] // v["patch_size"]
    return dict(
        architectures=["InternVLForConditionalGeneration"], model_type="internvl", downsample_ratio=0.5,
        image_seq_length=(g // 2) ** 2, image_token_id=ids["<IMG_CONTEXT>"], projector_hidden_act="gelu",
        vision_feature_layer=-1, vision_feature_select_strategy="default", tie_word_embeddings=True, dtype=dtype,
        vision_config=dict(model_type="internvl_vision", **VISION_COMMON, **{
            **v, "image_size": [v["image_size"]] * 2, "patch_size": [v["patch_size"]] * 2}),
        text_config=dict(**TEXT_COMMON, **t, bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"],
                         dtype=dtype))


def build_backbone(out, tok, arch):
    """backbone/: what OpenGVLab/InternVL3-1B-hf holds for Evo-1 (config, tokenizer), no tensors."""
    from transformers import InternVLConfig
    cfg = InternVLConfig(**internvl_config(tok, arch))
    cfg.save_pretrained(out)
    tok.save_pretrained(out)
    save_file({}, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    return cfg


def make_stats(gen):
    """dataset_stats as lerobot passes them: {action, observation.state} x {min, max, mean, std}."""
    def group(d):
        lo = torch.randn(d, generator=gen)
        span = 0.5 + 2.0 * torch.rand(d, generator=gen)
        return {"min": lo, "max": lo + span, "mean": lo + 0.5 * span + 0.1 * torch.randn(d, generator=gen),
                "std": 0.1 + 0.4 * torch.rand(d, generator=gen)}
    action, state = group(ACTION_DIM), group(STATE_DIM)
    for g in (action, state):  # one constant dimension each (the last): max == min -> d = 1e-8
        g["max"][-1] = g["min"][-1]
    return {"action": action, "observation.state": state}


def make_config(arch, backbone, dtype="float32"):
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.evo1.configuration_evo1 import Evo1Config
    h, s = arch["head"], arch["vision"]["image_size"]
    feats = {f"observation.images.{c}": PolicyFeature(type=FeatureType.VISUAL, shape=(3, *arch["cameras"][c]))
             for c in arch["cameras"]}
    feats["observation.state"] = PolicyFeature(type=FeatureType.STATE, shape=(STATE_DIM,))
    chunk = CHUNK
    return Evo1Config(
        device="cpu", input_features=feats,
        output_features={"action": PolicyFeature(type=FeatureType.ACTION, shape=(ACTION_DIM,))},
        training_stage="stage2", vlm_model_name=backbone, vlm_num_layers=arch["lm_layers_used"], vlm_dtype=dtype,
        image_resolution=(s, s), max_views=arch["max_views"], max_state_dim=PAD, max_action_dim=PAD,
        chunk_size=chunk, n_action_steps=chunk, embed_dim=arch["text"]["hidden_size"],
        hidden_dim=h["hidden_dim"], state_hidden_dim=h["state_hidden_dim"], num_heads=h["num_heads"],
        num_layers=h["num_layers"], num_inference_timesteps=NUM_STEPS)


def rewrite_paths(out):
    p = os.path.join(out, "config.json")
    d = json.load(open(p))
    d["vlm_model_name"] = "./backbone"
    json.dump(d, open(p, "w"), indent=4)


def rerandomize(policy, gen):
    """groot17.rerandomize (norm gains 1 + 0.2 N, biases 0.2 N, matrices N/sqrt(fan_in), embeddings
    0.5 N), except the two sinusoid tables (persistent buffers *.pe, restored: their formula is part of
    the spec); the ViT's CLS token and position table then get 0.5 N(0, 1) so they matter."""
    keep = {n: b.detach().clone() for n, b in policy.named_buffers() if n.endswith(".pe")}
    g17.rerandomize(policy, gen)
    with torch.no_grad():
        for n, b in policy.named_buffers():
            if n in keep:
                b.copy_(keep[n])
        emb = policy.model.embedder.model.vision_tower.embeddings
        for t in [emb.cls_token, emb.position_embeddings]:
            t.copy_(0.5 * torch.randn(t.shape, generator=gen))
    return sorted(keep)


# ----------------------------------------------------------------------------- lerobot's path

def make_obs(images, state, task=TASK):
    obs = {"observation.state": state.clone(), "task": task}
    for c, img in zip(CAMERAS, images):
        obs[f"observation.images.{c}"] = img.permute(2, 0, 1).float() / 255.0
    return obs


def run_policy(policy, pre, post, images, state, noise_u01):
    """lerobot's inference path: preprocessor -> predict_action_chunk -> postprocessor (whole chunk),
    then reset + select_action (first step, postprocessed)."""
    batch = pre(make_obs(images, state))
    with explicit_rand(noise_u01.reshape(1, -1)) as calls:
        chunk = policy.predict_action_chunk(dict(batch))
    assert len(calls) == 1, "get_action drew no noise through torch.rand(B, chunk * max_action_dim)"
    policy.reset()
    with explicit_rand(noise_u01.reshape(1, -1)) as calls:
        step = policy.select_action(dict(batch))
    assert len(calls) == 1
    return batch, chunk, post(chunk), post(step)


@contextlib.contextmanager
def in_dir(d):
    cwd = os.getcwd()
    os.chdir(d)  # config.json says vlm_model_name "./backbone"
    try:
        yield
    finally:
        os.chdir(cwd)


def load_fixture(fixture):
    from lerobot.policies.evo1.modeling_evo1 import Evo1Policy
    from lerobot.policies.factory import make_pre_post_processors
    with in_dir(fixture):
        policy = Evo1Policy.from_pretrained(fixture, strict=True).eval()
        assert policy.config.vlm_model_name == "./backbone" and policy.config.vlm_dtype == "float32"
        pre, post = make_pre_post_processors(policy.config, pretrained_path=fixture)
    return policy, pre, post


# ----------------------------------------------------------------------------- independent reference
# A second implementation of the whole inference from the fixture files alone (numpy / plain torch
# ops in float64, no lerobot, no transformers), run by --check.

def reference_prompt(n_views, n_img, task):
    """FORMULAS['prompt']."""
    return "".join(f"Image-{v + 1}: <img>{'<IMG_CONTEXT>' * n_img}</img>\n" for v in range(n_views)) + task.strip()


def reference_forward(fixture):
    """Every golden tensor from model.safetensors + arch.json + statistics + tokenizer.json + raw frames."""
    import torch.nn.functional as F
    from safetensors import safe_open
    from tokenizers import Tokenizer
    f64 = torch.float64
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

    def exact(name, x):
        errs[name] = float(not torch.equal(x.to(G[name].dtype), G[name]))

    def lin(x, p, bias=True):
        return x @ W[p + ".weight"].T + (W[p + ".bias"] if bias else 0)

    def ln(x, p, eps):
        y = (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + eps)
        return y * W[p + ".weight"] + W[p + ".bias"]

    def rms(x, w, eps):
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w

    def rot_half(u):
        h = u.shape[-1] // 2
        return torch.cat([-u[..., h:], u[..., :h]], -1)

    def attn(q, k, v, heads, kv_heads, hd, allowed=None):
        """q [t, heads*hd], k/v [n, kv*hd]; allowed [t, n] bool (None: all)."""
        t, n = q.shape[0], k.shape[0]
        q = q.view(t, heads, hd).transpose(0, 1)
        k = k.view(n, kv_heads, hd).transpose(0, 1).repeat_interleave(heads // kv_heads, 0)
        v = v.view(n, kv_heads, hd).transpose(0, 1).repeat_interleave(heads // kv_heads, 0)
        sc = q @ k.transpose(1, 2) / math.sqrt(hd)
        if allowed is not None:
            sc = sc.masked_fill(~allowed, float("-inf"))
        return (sc.softmax(-1) @ v).transpose(0, 1).reshape(t, heads * hd)

    gelu = lambda x: F.gelu(x)  # noqa: E731  (erf)
    V, L, H, P = A["vision"], A["lm"], A["action_head"], A["weights"]
    S, p14, D = V["image_size"], V["patch_size"], V["hidden_size"]
    grid = S // p14
    n_img, n_views = A["image_tokens_per_view"], A["max_views"]

    # --- images: raw u8 -> resize (float32 torch kernel emulation: exact) -> pixels (float64)
    frames = []
    frame_diff = 0
    for c in range(len(A["cameras"])):
        fr = resize_ref.tv1_bicubic_u8(G[f"image.{c}"].numpy(), S, S)
        frame_diff = max(frame_diff, int(np.abs(fr.astype(int) - G[f"frame.{c}"].numpy().astype(int)).max()))
        frames.append(torch.from_numpy(fr.astype(np.float64)).permute(2, 0, 1) / 255.0)
    errs["frame"] = float(frame_diff)
    while len(frames) < n_views:
        frames.append(torch.zeros(3, S, S, dtype=f64))
    mean = torch.tensor(A["image_transform"]["mean"], dtype=f64).view(3, 1, 1)
    std = torch.tensor(A["image_transform"]["std"], dtype=f64).view(3, 1, 1)
    pix = torch.stack([(f - mean) / std for f in frames])
    err("pixels", pix)

    # --- vision tower, view by view
    VP = P["vision"]
    heads = V["num_attention_heads"]
    hd = D // heads
    x = pix.unfold(2, p14, p14).unfold(3, p14, p14)  # V, C, gh, gw, py, px
    x = x.permute(0, 2, 3, 1, 4, 5).reshape(n_views, grid * grid, 3 * p14 * p14)
    x = x @ W[VP + "embeddings.patch_embeddings.projection.weight"].reshape(D, -1).T \
        + W[VP + "embeddings.patch_embeddings.projection.bias"]
    cls = W[VP + "embeddings.cls_token"].reshape(1, 1, D).expand(n_views, 1, D)
    x = torch.cat([cls, x], 1) + W[VP + "embeddings.position_embeddings"]
    err("vit_embed", x)
    eps_v = V["layer_norm_eps"]
    outs = []
    for l in range(V["num_hidden_layers"]):
        B = VP + f"encoder.layer.{l}."
        ys = []
        for v in range(n_views):
            xv = x[v]
            h = ln(xv, B + "layernorm_before", eps_v)
            a = attn(lin(h, B + "attention.q_proj"), lin(h, B + "attention.k_proj"), lin(h, B + "attention.v_proj"),
                     heads, heads, hd)
            xv = xv + W[B + "lambda_1"] * lin(a, B + "attention.projection_layer")
            h = ln(xv, B + "layernorm_after", eps_v)
            xv = xv + W[B + "lambda_2"] * lin(gelu(lin(h, B + "mlp.fc1")), B + "mlp.fc2")
            ys.append(xv)
        x = torch.stack(ys)
        err(f"vit_layer.{l}", x)
        outs.append(x)
    err("vit_out", x)
    g2 = grid // 2
    sh = torch.empty(n_views, g2 * g2, 4 * D, dtype=f64)
    for i in range(g2):
        for j in range(g2):
            for di in range(2):
                for dj in range(2):
                    blk = 2 * di + dj
                    sh[:, i * g2 + j, blk * D:(blk + 1) * D] = x[:, 1 + (2 * i + di) * grid + (2 * j + dj)]
    err("vit_shuffled", sh)
    PP = P["projector"]
    vis = lin(gelu(lin(ln(sh, PP + "layer_norm", 1e-5), PP + "linear_1")), PP + "linear_2")
    err("vision", vis)

    # --- prompt (exact)
    tk = Tokenizer.from_file(os.path.join(fixture, "backbone", "tokenizer.json"))
    prompt = reference_prompt(n_views, n_img, J["task"])
    errs["prompt"] = float(prompt != J["prompt"])
    ids = torch.tensor(tk.encode(prompt, add_special_tokens=True).ids, dtype=torch.int64)
    exact("token_ids", ids)
    img_rows = ids == A["tokens"]["img_context"]
    exact("image_mask", img_rows.to(torch.uint8))
    n_present = len(A["cameras"])
    am = torch.ones(len(ids), dtype=torch.int64)
    k = img_rows.long().cumsum(0) - 1
    am[img_rows & (k // n_img >= n_present)] = 0
    exact("attention_mask", am)
    exact("context_mask", (am != 0).to(torch.uint8))

    # --- language model
    LP = P["lm"]
    x = W[LP + "embed_tokens.weight"][ids].clone()
    x[img_rows] = vis.reshape(-1, vis.shape[-1])
    err("lm_in", x)
    t, lh = x.shape[0], L["head_dim"]
    inv = 1.0 / L["rope_theta"] ** (torch.arange(0, lh, 2, dtype=f64) / lh)
    ang = torch.arange(t, dtype=f64)[:, None] * inv[None]
    emb = torch.cat([ang, ang], -1)
    cos, sin = emb.cos()[:, None], emb.sin()[:, None]
    allowed = torch.ones(t, t, dtype=torch.bool).tril() & (am != 0)[None, :]
    for l in range(L["layers_used"]):
        B = LP + f"layers.{l}."
        h = rms(x, W[B + "input_layernorm.weight"], L["rms_eps"])
        q = lin(h, B + "self_attn.q_proj").view(t, L["heads"], lh)
        kk = lin(h, B + "self_attn.k_proj").view(t, L["kv_heads"], lh)
        q, kk = q * cos + rot_half(q) * sin, kk * cos + rot_half(kk) * sin
        a = attn(q.reshape(t, -1), kk.reshape(t, -1), lin(h, B + "self_attn.v_proj"), L["heads"], L["kv_heads"], lh,
                 allowed)
        x = x + lin(a, B + "self_attn.o_proj", False)
        h = rms(x, W[B + "post_attention_layernorm.weight"], L["rms_eps"])
        x = x + lin(F.silu(lin(h, B + "mlp.gate_proj", False)) * lin(h, B + "mlp.up_proj", False),
                    B + "mlp.down_proj", False)
        err(f"lm_layer.{l}", x)
    ctx = rms(x, W[LP + "norm.weight"], L["rms_eps"])
    err("lm_out", ctx)

    # --- action head
    HP = P["action_head"]
    st = J["statistics"]

    def padded(feat, k, fill):
        v = torch.tensor(st[feat][k], dtype=f64)
        return torch.cat([v, torch.full((PAD - len(v),), fill, dtype=f64)])
    smin, smax = padded("observation.state", "min", -1.0), padded("observation.state", "max", 1.0)
    sd = torch.where(smax - smin == 0, torch.full_like(smin, 1e-8), smax - smin)
    s = torch.cat([G["state"].to(f64), torch.zeros(PAD - STATE_DIM, dtype=f64)])
    sn = 2 * (s - smin) / sd - 1
    err("state_norm", sn)
    lin2 = lambda x, p: lin(x, p + ".linear")  # noqa: E731  (CategorySpecificLinear, one category)
    se = lin2(F.relu(lin2(sn, HP + "state_encoder.fc1")), HP + "state_encoder.fc2")
    err("state_emb", se)
    context = torch.cat([ctx, se[None]])
    kp_ok = torch.cat([am != 0, torch.ones(1, dtype=torch.bool)])
    E, heads_h, chunk, n_steps = H["embed_dim"], H["num_heads"], H["chunk"], H["num_inference_timesteps"]
    mask = torch.zeros(PAD, dtype=f64)
    mask[:ACTION_DIM] = 1
    exact("action_mask", mask.to(torch.uint8))
    u = G["noise_u01"].to(f64)
    err("noise", u * 2 - 1)
    xa = (u * 2 - 1) * mask

    def sinus(pos, dim):
        f = torch.exp(torch.arange(0, dim, 2, dtype=f64) * -(math.log(10000.0) / dim))
        out = torch.zeros(dim, dtype=f64)
        out[0::2], out[1::2] = torch.sin(pos * f), torch.cos(pos * f)
        return out
    pe_rows = torch.stack([sinus(float(r), E) for r in range(chunk)])
    ctx_kv = []  # the context's keys / values: the same at every step (NOTES), computed once per block
    for b in range(H["num_layers"]):
        B = HP + f"transformer_blocks.{b}."
        _, wk, wv = W[B + "attn.in_proj_weight"].chunk(3)
        _, bk, bv = W[B + "attn.in_proj_bias"].chunk(3)
        ctx_kv.append((context @ wk.T + bk, context @ wv.T + bv))
    for i in range(n_steps):
        idx = min(int(i / n_steps * 999), 999)
        errs.setdefault("time_index", 0.0)
        errs["time_index"] += float(idx != J["time_index"][i])
        temb = sinus(float(idx), E)
        err(f"time_emb.{i}", temb)
        AE = HP + "action_encoder."
        a = F.relu(lin2(xa * mask, AE + "W1")) + pe_rows
        a = lin2(F.relu(lin2(a, AE + "W2")), AE + "W3")
        err(f"action_tokens.{i}", a)
        xx = a
        for b in range(H["num_layers"]):
            B = HP + f"transformer_blocks.{b}."
            wq = W[B + "attn.in_proj_weight"][:E]
            bq = W[B + "attn.in_proj_bias"][:E]
            h = ln(xx, B + "norm1", 1e-5)
            o = attn(h @ wq.T + bq, *ctx_kv[b], heads_h, heads_h, E // heads_h, kp_ok[None, :].expand(chunk, -1))
            xx = xx + lin(o, B + "attn.out_proj")
            h2 = ln(xx, B + "norm2", 1e-5) + temb
            xx = xx + lin(gelu(lin(h2, B + "ff.0")), B + "ff.2")
            if i == 0:
                err(f"dit_block.{b}", xx)
        xx = ln(xx, HP + "norm_out", 1e-5)
        pooled = lin(xx.reshape(-1), HP + "seq_pool_proj")
        v = lin2(F.relu(lin2(pooled, HP + "mlp_head.fc1")), HP + "mlp_head.fc2").view(chunk, PAD) * mask
        if i == 0:
            err("dit_out", xx)
            err("pooled", pooled)
        err(f"velocity.{i}", v)
        xa = xa + (1.0 / n_steps) * v
    xa = xa * mask
    err("actions_norm", xa)
    amin, amax = padded("action", "min", -1.0), padded("action", "max", 1.0)
    ad = torch.where(amax - amin == 0, torch.full_like(amin, 1e-8), amax - amin)
    act = ((xa + 1) / 2 * ad + amin)[:, :ACTION_DIM]
    err("actions", act)
    err("select_action", act[0])
    return errs


# ----------------------------------------------------------------------------- run

def check(fixture):
    """Reload the fixture in this (fresh) process and reproduce the golden actions."""
    fixture = os.path.abspath(fixture)
    use_fixture(fixture)
    size = json.load(open(os.path.join(fixture, "arch.json")))["size"]
    g = load_file(os.path.join(fixture, "golden.safetensors"))
    policy, pre, post = load_fixture(fixture)
    final = []
    head = policy.model.action_head
    real_ga = head.get_action
    head.get_action = lambda *a, **k: (lambda o: final.append(o.clone()) or o)(real_ga(*a, **k))
    images = [g[f"image.{c}"] for c in range(len(CAMERAS))]
    with torch.no_grad():
        batch, chunk, actions, step = run_policy(policy, pre, post, images, g["state"], g["noise_u01"])
    err = {"actions_norm": float((final[0].view(chunk.shape)[0] - g["actions_norm"]).abs().max()),
           "chunk": float((chunk[0] - g["actions_norm"]).abs().max()),
           "state_norm": float((batch["observation.state"][0] - g["state_norm"]).abs().max()),
           "actions": float((actions[0] - g["actions"]).abs().max()),
           "select_action": float((step[0] - g["select_action"]).abs().max())}
    print("reload check (max abs err):", json.dumps(err))
    assert max(err.values()) < 1e-5, err
    del policy, pre, post, head, real_ga, final, batch, chunk, actions, step, g
    gc.collect()
    ref = reference_forward(fixture)
    print("independent float64 reference (max abs err):", json.dumps({k: float(f"{v:.2e}") for k, v in ref.items()}))
    exact = ["token_ids", "image_mask", "attention_mask", "context_mask", "action_mask", "prompt", "time_index"]
    assert all(ref[k] == 0.0 for k in exact), {k: ref[k] for k in exact}
    cap = torch.backends.cpu.get_cpu_capability()
    assert ref["frame"] == 0.0 or (cap not in ("AVX2", "AVX512") and ref["frame"] <= 1.0), (cap, ref["frame"])
    if size == "tiny":  # full (as vla_jepa.py's): float32 through 24 + 14 layers and 32 steps, no bound
        assert max(v for k, v in ref.items() if k != "frame") < 1e-4, ref
    return err


def generate(a, out):
    arch = use_size(a.size)
    os.makedirs(out)
    tok = build_tokenizer(os.path.join(_TMP, "tokenizer"))
    backbone = os.path.join(out, "backbone")
    build_backbone(backbone, tok, arch)
    for f in ["vocab.json", "merges.txt"]:  # the slow files as trained, byte-identical
        shutil.copy(os.path.join(_TMP, "tokenizer", f), os.path.join(backbone, f))
    gen = torch.Generator().manual_seed(a.seed)
    stats = make_stats(gen)

    import lerobot
    from lerobot.policies.evo1 import internvl3_embedder as ie
    from lerobot.policies.evo1.modeling_evo1 import Evo1Policy
    from lerobot.policies.evo1.processor_evo1 import make_evo1_pre_post_processors

    cfg = make_config(arch, backbone)
    torch.manual_seed(a.seed)
    policy = Evo1Policy(cfg).eval()
    emb = policy.model.embedder
    vlm = emb.model  # InternVLModel
    vt, proj, lm = vlm.vision_tower, vlm.multi_modal_projector, vlm.language_model
    head = policy.model.action_head
    for n, t in list(policy.named_parameters()) + list(policy.named_buffers()):
        assert t.dtype in (torch.float32, torch.int64, torch.bool), (n, t.dtype)
    assert len(lm.layers) == arch["lm_layers_used"] < arch["text"]["num_hidden_layers"]
    assert type(vlm).__name__ == "InternVLModel" and not hasattr(vlm, "lm_head")
    kept_buffers = rerandomize(policy, gen)
    # tiny: rows = len(tokenizer), as the real model (151674 = 151674). full: the real 151674 rows, more
    # than the reconstructed tokenizer's (as vla_jepa.py's / groot17.py's full: no resize in lerobot).
    assert len(emb.tokenizer) == len(tok) <= lm.embed_tokens.weight.shape[0] == arch["text"].get("vocab_size", len(tok))
    pre, post = make_evo1_pre_post_processors(cfg, stats)
    policy.save_pretrained(out)
    pre.save_pretrained(out)
    post.save_pretrained(out)
    rewrite_paths(out)

    images = [torch.randint(0, 256, (*arch["cameras"][c], 3), generator=gen, dtype=torch.uint8) for c in CAMERAS]
    smin, smax = stats["observation.state"]["min"], stats["observation.state"]["max"]
    state = smin + (smax - smin + 0.3) * (1.4 * torch.rand(STATE_DIM, generator=gen) - 0.2)  # some out of range
    state[-1] = smin[-1]  # the constant dimension holds its constant: normalised to -1
    noise_u01 = torch.rand(CHUNK, PAD, generator=gen)

    rec = {k: [] for k in ["resized", "pixels", "vit_embed", "vit_out", "shuffled", "vision", "vlm_kw", "lm_kw",
                           "lm_out", "get_action", "state_emb", "action_tokens", "blk0_in", "dit_out", "pooled",
                           "mlp", "prompts"]}
    rec.update({f"vit_layer.{l}": [] for l in range(len(vt.encoder.layer))})
    rec.update({f"lm_layer.{l}": [] for l in range(len(lm.layers))})
    rec.update({f"dit_block.{b}": [] for b in range(len(head.transformer_blocks))})
    det = lambda o: o.detach().clone()  # noqa: E731
    hooks = [
        vt.register_forward_pre_hook(lambda m, args, kw: rec["pixels"].append(det(kw["pixel_values"])),
                                     with_kwargs=True),
        vt.embeddings.register_forward_hook(lambda m, i, o: rec["vit_embed"].append(det(o))),
        vt.register_forward_hook(lambda m, i, o: rec["vit_out"].append(det(o.last_hidden_state))),
        proj.register_forward_pre_hook(lambda m, i: rec["shuffled"].append(det(i[0]))),
        proj.register_forward_hook(lambda m, i, o: rec["vision"].append(det(o))),
        vlm.register_forward_pre_hook(lambda m, args, kw: rec["vlm_kw"].append(
            {k: det(v) for k, v in kw.items() if torch.is_tensor(v)}), with_kwargs=True),
        lm.register_forward_pre_hook(lambda m, args, kw: rec["lm_kw"].append(
            {k: det(v) for k, v in kw.items() if torch.is_tensor(v)}), with_kwargs=True),
        lm.register_forward_hook(lambda m, i, o: rec["lm_out"].append(det(o.last_hidden_state))),
        head.state_encoder.register_forward_hook(lambda m, i, o: rec["state_emb"].append(det(o))),
        head.action_encoder.register_forward_hook(lambda m, i, o: rec["action_tokens"].append(det(o))),
        head.transformer_blocks[0].register_forward_pre_hook(lambda m, i: rec["blk0_in"].append(
            tuple(det(t) if torch.is_tensor(t) else t for t in i))),
        head.norm_out.register_forward_hook(lambda m, i, o: rec["dit_out"].append(det(o))),
        head.seq_pool_proj.register_forward_hook(lambda m, i, o: rec["pooled"].append(det(o))),
        head.mlp_head.register_forward_hook(lambda m, i, o: rec["mlp"].append(det(o)))]
    for l, layer in enumerate(vt.encoder.layer):
        hooks.append(layer.register_forward_hook(lambda m, i, o, l=l: rec[f"vit_layer.{l}"].append(det(o))))
    for l, layer in enumerate(lm.layers):
        hooks.append(layer.register_forward_hook(
            lambda m, i, o, l=l: rec[f"lm_layer.{l}"].append(det(o[0] if isinstance(o, tuple) else o))))
    for b, blk in enumerate(head.transformer_blocks):
        hooks.append(blk.register_forward_hook(lambda m, i, o, b=b: rec[f"dit_block.{b}"].append(det(o))))
    real_resize, real_prompts, real_ga = ie._batched_resize_01, emb._build_multimodal_prompts, head.get_action
    ie._batched_resize_01 = lambda im, sz: (lambda o: rec["resized"].append(det(o)) or o)(real_resize(im, sz))
    emb._build_multimodal_prompts = lambda *x: (lambda o: rec["prompts"].append(list(o)) or o)(real_prompts(*x))

    def get_action(fused, **kw):
        o = real_ga(fused, **kw)
        rec["get_action"].append(({k: (det(v) if torch.is_tensor(v) else v) for k, v in kw.items()}, det(fused), det(o)))
        return o
    head.get_action = get_action
    try:
        with torch.no_grad():
            batch, chunk, actions, step = run_policy(policy, pre, post, images, state, noise_u01)
    finally:
        ie._batched_resize_01 = real_resize
        del emb._build_multimodal_prompts, head.get_action
        for hk in hooks:
            hk.remove()

    # Everything below was recorded twice (predict_action_chunk, then select_action): keep the first,
    # and check the second is identical.
    n_views, n_present, n_img = arch["max_views"], len(CAMERAS), vlm.config.image_seq_length
    assert len(rec["pixels"]) == 2 and torch.equal(rec["pixels"][0], rec["pixels"][1])
    assert len(rec["mlp"]) == 2 * NUM_STEPS and len(rec["get_action"]) == 2
    kw, fused, out_ga = rec["get_action"][0]
    assert torch.equal(out_ga.view(1, CHUNK, PAD), chunk) and torch.equal(rec["get_action"][1][2], out_ga)
    S = arch["vision"]["image_size"]
    frames = [(r[0] * 255.0).round().to(torch.uint8).permute(1, 2, 0).contiguous() for r in rec["resized"][:n_present]]
    for f, r in zip(frames, rec["resized"][:n_present]):
        assert torch.equal(f.permute(2, 0, 1).float() / 255.0, r[0])
    for c in range(n_present):  # the resize reference is exact on this machine
        assert np.array_equal(resize_ref.tv1_bicubic_u8(images[c].numpy(), S, S), frames[c].numpy()), c
    vkw, lkw = rec["vlm_kw"][0], rec["lm_kw"][0]
    ids, am = vkw["input_ids"][0], vkw["attention_mask"][0]
    assert torch.equal(lkw["attention_mask"][0], am)
    img_mask = ids == vlm.config.image_token_id
    assert int(img_mask.sum()) == n_views * n_img and int((am == 0).sum()) == (n_views - n_present) * n_img
    ctx_mask = kw["context_mask"][0]
    assert torch.equal(ctx_mask, am.bool())
    lm_out = rec["lm_out"][0][0]
    assert torch.equal(fused[0], lm_out), "the head reads the final-normed last kept layer (all rows)"
    n_lm = len(lm.layers)
    lm_layers = [rec[f"lm_layer.{l}"][0][0] for l in range(n_lm)]
    assert torch.allclose(lm.norm(lm_layers[-1]), lm_out, atol=0, rtol=0)
    pixels, vision = rec["pixels"][0], rec["vision"][0]
    assert torch.equal(lkw["inputs_embeds"][0][img_mask], vision.reshape(-1, vision.shape[-1]))
    sn = batch["observation.state"][0]
    assert sn.shape == (PAD,) and torch.equal(kw["state"][0], sn)
    amask = kw["action_mask"][0]
    assert torch.equal(amask, torch.arange(PAD) < ACTION_DIM)
    blk0 = rec["blk0_in"][:NUM_STEPS]
    context = blk0[0][1][0]
    state_emb = rec["state_emb"][0][0]
    assert torch.equal(context[-1], state_emb) and torch.equal(context[:-1], fused[0])
    assert torch.equal(blk0[0][3][0], ~torch.cat([ctx_mask, torch.ones(1, dtype=torch.bool)]))
    time_index = [min(int(i / NUM_STEPS * 999), 999) for i in range(NUM_STEPS)]
    noise = noise_u01 * 2 - 1
    velocity = [(rec["mlp"][i][0].view(CHUNK, PAD) * amask) for i in range(NUM_STEPS)]
    x = noise * amask
    for i in range(NUM_STEPS):
        assert torch.equal(blk0[i][2][0], head.time_pos_enc.pe[0, time_index[i]])
        x = x + (1.0 / NUM_STEPS) * velocity[i]  # flow_matching.py:472
    assert torch.allclose(x * amask, chunk[0], atol=1e-6)
    assert torch.equal(step, actions[:, 0])

    golden = {"pixels": pixels, "vit_embed": rec["vit_embed"][0], "vit_out": rec["vit_out"][0],
              "vit_shuffled": rec["shuffled"][0], "vision": vision, "lm_in": lkw["inputs_embeds"][0],
              "lm_out": lm_out, "state": state, "state_norm": sn, "state_emb": state_emb, "noise_u01": noise_u01,
              "noise": noise, "dit_out": rec["dit_out"][0][0], "pooled": rec["pooled"][0][0],
              "actions_norm": chunk[0], "actions": actions[0], "select_action": step[0]}
    for c in range(n_present):
        golden[f"image.{c}"] = images[c]
        golden[f"frame.{c}"] = frames[c]
    for l in range(len(vt.encoder.layer)):
        golden[f"vit_layer.{l}"] = rec[f"vit_layer.{l}"][0]
    for l in range(n_lm):
        golden[f"lm_layer.{l}"] = lm_layers[l]
    for b in range(len(head.transformer_blocks)):
        golden[f"dit_block.{b}"] = rec[f"dit_block.{b}"][0][0]
    for i in range(NUM_STEPS):
        golden[f"time_emb.{i}"] = blk0[i][2][0]
        golden[f"action_tokens.{i}"] = rec["action_tokens"][i][0]
        golden[f"velocity.{i}"] = velocity[i]
        assert torch.equal(blk0[i][0][0], golden[f"action_tokens.{i}"])
    assert torch.equal(golden["vit_out"], golden[f"vit_layer.{len(vt.encoder.layer) - 1}"])
    golden = {k: (t if t.dtype == torch.uint8 else t.float()).contiguous().clone() for k, t in golden.items()}
    golden.update({"token_ids": ids.to(torch.int64).contiguous(), "attention_mask": am.to(torch.int64).contiguous(),
                   "image_mask": img_mask.to(torch.uint8).contiguous(),
                   "context_mask": ctx_mask.to(torch.uint8).contiguous(),
                   "action_mask": amask.to(torch.uint8).contiguous()})
    save_file(golden, os.path.join(out, "golden.safetensors"))

    from safetensors import safe_open
    with safe_open(os.path.join(out, "model.safetensors"), framework="pt") as f:  # shapes only, no weights
        key_shapes = {k: list(f.get_slice(k).get_shape()) for k in sorted(f.keys())}
    VP, PP = "model.embedder.model.vision_tower.", "model.embedder.model.multi_modal_projector."
    LP, HP = "model.embedder.model.language_model.", "model.action_head."
    v, txt, h = arch["vision"], arch["text"], arch["head"]
    prompt = rec["prompts"][0][0]
    tokzr = emb.tokenizer
    tok_ids = {t: tokzr.convert_tokens_to_ids(t) for t in ["<img>", "</img>", "<IMG_CONTEXT>", "<|endoftext|>"]}
    arch_json = {
        "size": a.size,
        "weights": {"vision": VP, "projector": PP, "lm": LP, "action_head": HP,
                    "buffers_in_checkpoint": [f"model.{k}" for k in kept_buffers],
                    "not_in_checkpoint": ["lm_head (AutoModel -> InternVLModel has none)",
                                          f"language_model.layers.{arch['lm_layers_used']}.. (cut)",
                                          "rotary inv_freq (non-persistent)"]},
        "weights_stored": key_shapes,
        "cameras": [f"observation.images.{c}" for c in CAMERAS],
        "camera_hw": {c: list(arch["cameras"][c]) for c in CAMERAS},
        "max_views": n_views, "absent_views": list(range(n_present, n_views)),
        "image_tokens_per_view": n_img,
        "image_transform": {"input": "u8 HWC / 255 -> float32 CHW; lerobot re-quantises to u8",
                            "resize": "torchvision v1 resize(u8, [S, S], BICUBIC, antialias=True): float32 "
                                      "kernel, clamp, round half even; aspect ratio not kept",
                            "size": S, "mean": list(IMAGENET_MEAN), "std": list(IMAGENET_STD),
                            "absent_view": "zeros before normalisation"},
        "vision": {**VISION_COMMON, **v, "head_dim": v["hidden_size"] // v["num_attention_heads"],
                   "num_positions": (S // v["patch_size"]) ** 2 + 1, "cls_token": True, "final_norm": False,
                   "feature_layer": -1, "drop_cls": True, "downsample_ratio": 0.5,
                   "attn_impl": vt.config._attn_implementation},
        "projector": {"ln_eps": 1e-5, "act": "gelu (erf)", "in": 4 * v["hidden_size"], "out": txt["hidden_size"]},
        "lm": {"arch": "qwen2", "hidden": txt["hidden_size"], "layers_config": txt["num_hidden_layers"],
               "layers_used": arch["lm_layers_used"], "heads": txt["num_attention_heads"],
               "kv_heads": txt["num_key_value_heads"], "head_dim": txt["hidden_size"] // txt["num_attention_heads"],
               "intermediate": txt["intermediate_size"], "rope_theta": TEXT_COMMON["rope_parameters"]["rope_theta"],
               "rms_eps": TEXT_COMMON["rms_norm_eps"], "qkv_bias": True, "o_bias": False,
               "vocab": int(lm.embed_tokens.weight.shape[0]), "final_norm_applied": True,
               "positions": "arange(T)", "attn_impl": lm.config._attn_implementation},
        "tokens": {"img_start": tok_ids["<img>"], "img_end": tok_ids["</img>"], "img_context": tok_ids["<IMG_CONTEXT>"],
                   "pad": tok_ids["<|endoftext|>"], "real_ids": REAL_IDS},
        "action_head": {"embed_dim": h["embed_dim"], "hidden_dim": h["hidden_dim"],
                        "state_hidden_dim": h["state_hidden_dim"], "num_heads": h["num_heads"],
                        "num_layers": h["num_layers"], "ff_inner": 4 * h["embed_dim"], "chunk": CHUNK,
                        "max_action_dim": PAD, "max_state_dim": PAD, "num_categories": 1,
                        "num_inference_timesteps": NUM_STEPS, "default_num_inference_timesteps": DEFAULT_STEPS,
                        "time_index": time_index,
                        "time_index_default_32": [min(int(i / DEFAULT_STEPS * 999), 999) for i in range(DEFAULT_STEPS)],
                        "ln_eps": 1e-5, "ff_act": "gelu (erf)",
                        "context": "[lm_out (T rows), state_emb (1 row)]"},
        "normalisation": {"state": "MIN_MAX, stats padded min -1 / max +1 to 24, d == 0 -> 1e-8, no clip",
                          "action": "MIN_MAX (same padding)", "visual": "IDENTITY"},
        "postprocess": {"steps": [s["registry_name"] for s in json.load(open(os.path.join(
                            out, "policy_postprocessor.json")))["steps"]],
                        "crop_to": ACTION_DIM, "binarize_gripper": False},
        "state_dim": STATE_DIM, "action_dim": ACTION_DIM,
        "released": RELEASED,
        "notes": NOTES,
        "formulas": FORMULAS,
    }
    json.dump(arch_json, open(os.path.join(out, "arch.json"), "w"), indent=1)

    vendor = os.path.dirname(sys.modules["lerobot.policies.evo1.modeling_evo1"].__file__)
    pos = img_mask.nonzero().flatten().tolist()
    info = {
        "generator": "tools/golden/evo1.py",
        "size": a.size,
        "seed": a.seed,
        "versions": {"python": sys.version.split()[0], "lerobot": lerobot.__version__, "torch": torch.__version__,
                     "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
                     "transformers": transformers.__version__, "numpy": np.__version__,
                     "tokenizers": __import__("tokenizers").__version__,
                     "torchvision": __import__("torchvision").__version__,
                     "lerobot_evo1_sha256": {
                         f: hashlib.sha256(open(os.path.join(vendor, f), "rb").read()).hexdigest()[:16]
                         for f in ["modeling_evo1.py", "evo1_model.py", "flow_matching.py", "internvl3_embedder.py",
                                   "configuration_evo1.py", "processor_evo1.py"]},
                     "transformers_internvl_sha256": hashlib.sha256(open(sys.modules[
                         "transformers.models.internvl.modeling_internvl"].__file__, "rb").read()).hexdigest()[:16],
                     "pep695_patched_files": sorted(g17.PEP695.get("files", {}))},
        "task": TASK,
        "prompt": prompt,
        "token_ids": ids.tolist(),
        "n_tokens": len(ids),
        "image_token_id": int(vlm.config.image_token_id),
        "image_token_spans": [[pos[k * n_img], pos[(k + 1) * n_img - 1] + 1] for k in range(n_views)],
        "absent_view_rows": (am == 0).nonzero().flatten().tolist(),
        "camera_keys": [f"observation.images.{c}" for c in CAMERAS],
        "camera_hw": [list(arch["cameras"][c]) for c in CAMERAS],
        "num_steps": NUM_STEPS,
        "time_index": time_index,
        "chunk": CHUNK,
        "state_dim": STATE_DIM,
        "action_dim": ACTION_DIM,
        "statistics": {k: {s: [float(x) for x in v] for s, v in d.items()} for k, d in stats.items()},
        "model": arch_json,
        "tensors": {k: [str(t.dtype).replace("torch.", ""), list(t.shape)] for k, t in sorted(golden.items())},
    }
    json.dump(info, open(os.path.join(out, "golden.json"), "w"), indent=1)
    print(json.dumps({k: info[k] for k in ["versions", "n_tokens", "image_token_spans", "time_index"]}))
    print("prompt:", json.dumps(prompt[:60] + " ... " + prompt[-80:]))
    print("actions:", actions[0].tolist())


NOTES = [
    "The head sees the VLM only through cross-attention keys/values: all T rows of the final-normed LM "
    "output plus the state embedding, never the image features directly. The action rows never attend "
    "to each other; the whole chunk is decoded from ONE pooled vector (seq_pool_proj over the flattened "
    "chunk x E, then the MLP head to chunk x 24).",
    "The context (LM output, state embedding) does not change across Euler steps: its k/v projections "
    "can be computed once per block; lerobot recomputes them every step.",
    "Absent views (fewer cameras than max_views) cost a full ViT pass on a constant image in lerobot, "
    "but their <IMG_CONTEXT> rows are masked as keys in the LM and in the head: their values never "
    "reach a present row (an implementation may skip them, keeping the token positions).",
    "vlm_dtype defaults to bfloat16: the stock policy loads and runs InternVL in bf16 on every device "
    "(no autocast needed); use_amp adds a bf16 autocast only on CUDA. The head is float32.",
    "Noise is uniform in [-1, 1) (torch.rand * 2 - 1), not Gaussian, and masked to the action columns; "
    "predict_action_chunk takes no noise argument.",
    "The time embedding is a raw sinusoid row indexed by int(t * 999) (no MLP), added after norm2 "
    "inside every block (before the FFN only, not before the attention).",
    "Dropout is 0 and the policy is in eval mode at inference; gradient checkpointing (stage2) is "
    "inactive under no_grad.",
    "The resize follows the float32 torch kernel, not PIL (despite the comment in "
    "internvl3_embedder.py:48-52): results differ from PIL by a level here and there, and between torch "
    "CPU capabilities (DEFAULT vs AVX2/AVX512) by one level on ~0.001% of pixels.",
    "The prompt keeps the image blocks of absent views ('Image-3: <img>...</img>'), so the token "
    "count depends on max_views, not on the number of cameras.",
]

RELEASED = {
    "backbone": "OpenGVLab/InternVL3-1B-hf (InternViT-300M-448px-V2.5: 1024 x 24, 16 heads, patch 14, "
                "LayerScale, qkv bias, no qk-norm, use_mean_pooling; projector 4096 -> 896; Qwen2.5-0.5B LM "
                "896 x 24 layers, 14/2 heads x 64, inter 4864, rope 1e6, vocab 151674), cut to 14 LM layers",
    "evo1_config_defaults": {"max_state_dim": 24, "max_action_dim": 24, "max_views": 3, "chunk_size": 50,
                             "n_action_steps": 50, "image_resolution": [448, 448], "embed_dim": 896,
                             "hidden_dim": 1024, "state_hidden_dim": 1024, "num_heads": 8, "num_layers": 8,
                             "num_inference_timesteps": 32, "num_categories": 1, "vlm_dtype": "bfloat16",
                             "max_text_length": 1024, "return_cls_only": False},
    "checkpoints_seen": ["zuoxingdong/evo1_libero (stage 2, lerobot/libero, 448 x 448, 14-step replanning)",
                         "javadcc/evo1-libero-lerobot (converted from the original Evo-1 LIBERO .pt)"],
    "unverified": "the hub config.json files were not readable here (offline): chunk size, cameras and "
                  "n_action_steps of a given checkpoint must be read from its config.json",
}


def dry_full(a):
    """--size full --dry: the released sizes on the meta device (no weights, nothing written)."""
    from transformers import InternVLConfig, InternVLModel
    from lerobot.policies.evo1.flow_matching import FlowmatchingActionHead
    arch = SIZES["full"]
    tok = build_tokenizer(os.path.join(_TMP, "tokenizer"))
    cfg = internvl_config(tok, arch, dtype="bfloat16")
    cfg["image_token_id"] = REAL_IDS["<IMG_CONTEXT>"]
    h, chunk = arch["head"], arch["chunk"]
    with torch.device("meta"):
        vlm = InternVLModel(InternVLConfig(**cfg))
        vlm.language_model.layers = torch.nn.ModuleList(vlm.language_model.layers[:arch["lm_layers_used"]])
        head = FlowmatchingActionHead(
            embed_dim=h["embed_dim"], hidden_dim=h["hidden_dim"], action_dim=chunk * PAD, horizon=chunk,
            per_action_dim=PAD, num_heads=h["num_heads"], num_layers=h["num_layers"], dropout=0.0,
            num_inference_timesteps=DEFAULT_STEPS, num_categories=1, state_dim=PAD,
            state_hidden_dim=h["state_hidden_dim"])
    sd = {}
    for pre_, m in [("model.embedder.model.", vlm), ("model.action_head.", head)]:
        sd.update({pre_ + k: tuple(v.shape) for k, v in m.state_dict().items()})
    params = {("model.embedder.model." + k): tuple(v.shape) for k, v in vlm.named_parameters()}
    params.update({("model.action_head." + k): tuple(v.shape) for k, v in head.named_parameters()})
    groups = {}
    for k, s in params.items():
        parts = k.split(".")
        g = ".".join(parts[:4]) if k.startswith("model.embedder") else ".".join(parts[:3])
        groups[g] = groups.get(g, 0) + math.prod(s)
    n_img = cfg["image_seq_length"]
    prompt_tokens = {f"{v}_views": v * (n_img + 2) for v in [2, 3]}
    out = {"param_counts_M": {g: round(n / 1e6, 3) for g, n in sorted(groups.items())},
           "total_params_M": round(sum(groups.values()) / 1e6, 3),
           "total_params": sum(groups.values()),
           "buffers_in_checkpoint": {k: "x".join(map(str, s)) for k, s in sd.items() if k not in params},
           "image_tokens_per_view": n_img, "image_tokens_in_prompt": prompt_tokens,
           "time_index_32": [min(int(i / DEFAULT_STEPS * 999), 999) for i in range(DEFAULT_STEPS)],
           "checkpoint_keys": {k: "x".join(map(str, s)) for k, s in sd.items()}}
    print(json.dumps(out, indent=1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", choices=sorted(SIZES), default="tiny")
    ap.add_argument("--out", help="output folder (default: tests/fixtures/evo1-tiny for --size tiny)")
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
    if a.out is None and a.size != "tiny":
        ap.error("--size full writes ~3.5 GB: give --out (outside the repo), or use --dry")
    out = os.path.abspath(a.out or os.path.join(root, "tests", "fixtures", "evo1-tiny"))
    if os.path.isdir(out):
        shutil.rmtree(out)
    generate(a, out)
    gc.collect()
    if not a.no_check:  # a fresh process, a fresh HF_LEROBOT_HOME: the folder alone must suffice
        subprocess.run([sys.executable, os.path.abspath(__file__), "--check", out], check=True,
                       env={**os.environ, "HF_HUB_OFFLINE": "1"})


if __name__ == "__main__":
    main()
