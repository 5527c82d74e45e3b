"""Golden fixture for GR00T N1.5: lerobot 0.4.4 `groot` with random weights, every tensor re-randomized.

Rerun (anyone, offline; the venv is outside the repo and CI never needs it):

    python3.11 -m venv /work/venv-lerobot
    /work/venv-lerobot/bin/pip install "lerobot[smolvla]==0.4.4" "dm-tree<1" "peft<1"
        # not lerobot[groot]: that extra also requires flash-attn (a CUDA build). The groot code
        # needs transformers 4.57 + diffusers (both come with lerobot[smolvla]) + dm-tree (without
        # it groot_n1.py sets `tree = None` and crashes in prepare_input) + peft (imported by the
        # vendored Eagle model)
    HF_HUB_OFFLINE=1 /work/venv-lerobot/bin/python tools/golden/groot.py            # tiny, committed
    HF_HUB_OFFLINE=1 /work/venv-lerobot/bin/python tools/golden/groot.py --size full --out /tmp/groot-full
        # GR00T-N1.5-3B's real sizes (random weights, ~2.7 B parameters: an ~11 GB f32
        # model.safetensors, tens of GB of RAM, a long run on 2 cores); not committed
    HF_HUB_OFFLINE=1 /work/venv-lerobot/bin/python tools/golden/groot.py --check tests/fixtures/groot-tiny
        # reload the folder in a fresh process and reproduce `actions` (the tool runs this itself)

Nothing is downloaded. lerobot's GrootPolicy builds `GR00TN15.from_pretrained(base_model_path)` (by
default the hub repo nvidia/GR00T-N1.5-3B) and an Eagle 2.5 VL backbone whose config, tokenizer and
processor it reads from HF_LEROBOT_HOME/lerobot/eagle2hg-processor-groot-n1p5 (downloaded from the
hub by default). This tool writes both from explicit configs instead: `base/` is passed as
base_model_path ("./base" in config.json: a path, so lerobot's snapshot_download raises
HFValidationError and falls back to the folder; relative to the working directory, so reload from
inside the fixture folder or override base_model_path), and `eagle/` + `tokenizer/` are copied into a
temporary HF_LEROBOT_HOME before lerobot is imported. Other deviations from the stock code, all in
this process only: the Eagle model forces flash_attention_2 on its SigLIP tower
(modeling_eagle2_5_vl.py:107), replaced here by eager attention; `use_bf16=False` and
`compute_dtype="float32"` (lerobot's default is bf16 autocast); the initial noise, which
FlowmatchingActionHead.get_action draws with `torch.randn` on the global RNG
(flow_matching_action_head.py:359), is replaced by the explicit `noise` tensor.

Writes into the output folder (default tests/fixtures/groot-tiny/):
  config.json, model.safetensors, policy_{pre,post}processor*.{json,safetensors}
                       the checkpoint exactly as lerobot saves it (policy.save_pretrained and the
                       processors' save_pretrained); model.safetensors holds every weight (the
                       tied LM embedding is stored once, as lm_head.weight); config.json's
                       base_model_path is rewritten to "./base"
  base/                config.json of GR00TN15 (backbone_cfg + action_head_cfg: all action-head
                       sizes) and a model.safetensors with no tensors (GR00TN15.from_pretrained
                       needs a weights file; every weight is then overlaid from ../model.safetensors)
  eagle/               the Eagle 2.5 VL config (SigLIP + Qwen3 sizes, image_token_index) and the
                       processor files: processor_config.json (tokens_per_tile),
                       preprocessor_config.json (tile size, mean/std, bicubic), chat_template.json,
                       generation_config.json; copy eagle/* and tokenizer/* into
                       $HF_LEROBOT_HOME/lerobot/eagle2hg-processor-groot-n1p5 to reload
  tokenizer/           a small stand-in for Eagle's Qwen2/Qwen3 byte-level BPE tokenizer, laid out
                       as Qwen's (vocab.json + merges.txt + tokenizer_config.json with the added
                       tokens, as the real assets ship; tokenizer.json is what transformers
                       converts them to: NFC normalizer, Split(Qwen2 regex, isolated) +
                       ByteLevel(add_prefix_space=False, use_regex=False) pre-tokenizer, ByteLevel
                       decoder, no BOS/EOS added)
  arch.json            every size used and the formula notes below
  golden.safetensors   inputs and lerobot's outputs (names below), float32 unless noted
  golden.json          versions, seeds, the prompt as templated and as tokenized, token ids,
                       image-token positions, shapes, embodiment, timestep buckets

golden.safetensors: image.{i} (u8, HWC, the raw camera frame; cameras in sorted key order),
pixels.{i} [3,S,S] (Eagle image processor output: one tile, torchvision resize to SxS bicubic with
antialias on uint8, then (x - 127.5) / 127.5), state (raw), state_norm [state_dim] (min-max to
[-1, 1], before zero-padding to max_state_dim), noise [horizon, max_action_dim], vit.{i}
[patches, vit_hidden] (SigLIP last_hidden_state, after post_layernorm), vision.{i} [patches,
lm_hidden] (mlp1 output, these rows replace the <IMG_CONTEXT> embeddings), lm_out [T, lm_hidden]
(backbone_features: hidden_states[select_layer] of the LM cut to select_layer layers, i.e. the last
kept layer's output after the final model.norm), vl [T, backbone_dim] (after vlln and the VL
self-attention blocks: the DiT's cross-attention keys/values input), velocity.{s} [horizon,
max_action_dim] (action_decoder output at Euler step s, last `horizon` rows), actions_norm
[horizon, max_action_dim] (get_action output), actions [horizon, action_dim] (the postprocessor
applied to each step: lerobot's GrootActionUnpackUnnormalizeStep keeps only the last step of a 3-D
chunk, so it is fed one step at a time), token_ids (i64 [T], the input_ids fed to the LM with the
image tokens expanded), attention_mask (i64 [T]).

--check (run by the tool on what it wrote, in a fresh process) reloads the folder with lerobot and
reproduces `actions` bit for bit, then recomputes every golden tensor from model.safetensors,
arch.json and the golden inputs with an independent float64 implementation (reference_pixels,
reference_forward below: the formulas in arch.json made executable); pixels must match exactly.
"""
import argparse
import atexit
import gc
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# lerobot reads HF_LEROBOT_HOME at import time; dynamic (trust_remote_code) modules go to
# HF_MODULES_CACHE. Both point into a temporary folder, set before anything imports lerobot.
_TMP = tempfile.mkdtemp(prefix="groot-golden-")
atexit.register(shutil.rmtree, _TMP, ignore_errors=True)
os.environ["HF_LEROBOT_HOME"] = os.path.join(_TMP, "lerobot-home")
os.environ["HF_MODULES_CACHE"] = os.path.join(_TMP, "modules")
ASSETS_REPO = "lerobot/eagle2hg-processor-groot-n1p5"  # GrootConfig.tokenizer_assets_repo default
EAGLE_CACHE = os.path.join(os.environ["HF_LEROBOT_HOME"], ASSETS_REPO)

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from _noise import explicit_noise
from resize_ref import torch_bicubic_resize_u8

TASK = "Pick up the red cube and put it in the bowl"
CORPUS = ["pick up the red cube and put it in the bowl", "put the green cube in the bowl",
          "open the drawer and take out the sponge", "place the cube on the plate",
          "stack the red cube on the blue cube", "wipe the table with the towel",
          "You are a helpful assistant.", "system user assistant", "<image 1><image 2>",
          "['pick up the red cube']", "0 1 2 3 4 5 6 7 8 9"]
# Qwen2 / Qwen3 / Eagle special and added tokens, appended after the BPE vocab as Qwen does (ids
# 151643.. in the real vocab; <IMG_CONTEXT> is 151669 there). Special, as Qwen's chat tokens and
# Eagle's <img>, </img>, <IMG_CONTEXT>, except Qwen3's <think> tokens (added, not special).
ADDED = [("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True), ("<think>", False),
         ("</think>", False), ("<IMG_CONTEXT>", True), ("<img>", True), ("</img>", True), ("<box>", True),
         ("</box>", True), ("<quad>", True), ("</quad>", True), ("<ref>", True), ("</ref>", True)]
# Eagle 2.5's chat template (Qwen2-VL layout with numbered <image-N> placeholders that
# Eagle25VLProcessor.replace_media_placeholder expands to "<image N><img><IMG_CONTEXT>*k</img>").
CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}"
    "<image-{{ image_count.value }}>{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}"
    "<video-{{ video_count.value }}>{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}"
    "<|im_end|>\n{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")

# "full" is GR00T-N1.5-3B: Eagle 2.5 VL = SigLIP (So400m/14 at 224, 27 layers, no pixel shuffle,
# mlp1 one Linear 1152 -> 2048) + Qwen3-1.7B cut to its first 12 layers (select_layer 12); action
# head from nvidia/GR00T-N1.5-3B's config.json. tiny keeps the structure with small widths, distinct
# where the structure allows (LM width = vlln = VL self-attention width = DiT cross-attention input;
# DiT output_dim = action head hidden_size; DiT width 32 happens to equal max_action_dim and the
# SigLIP width).
SIZES = {
    "tiny": dict(
        vision=dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                    image_size=56, patch_size=14, layer_norm_eps=1e-6, hidden_act="gelu_pytorch_tanh"),
        text=dict(hidden_size=48, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                  intermediate_size=112, rope_theta=1000000.0, rms_norm_eps=1e-6, vocab_size=400,
                  max_position_embeddings=512),
        select_layer=2,
        head=dict(hidden_size=24, input_embedding_dim=32, backbone_embedding_dim=48, max_seq_len=64,
                  num_target_vision_tokens=8, max_num_embodiments=32,
                  dit=dict(num_attention_heads=2, attention_head_dim=16, num_layers=4, output_dim=24),
                  vlsa=dict(num_attention_heads=3, attention_head_dim=16, num_layers=2))),
    "full": dict(
        vision=dict(hidden_size=1152, num_hidden_layers=27, num_attention_heads=16, intermediate_size=4304,
                    image_size=224, patch_size=14, layer_norm_eps=1e-6, hidden_act="gelu_pytorch_tanh"),
        text=dict(hidden_size=2048, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                  intermediate_size=6144, rope_theta=1000000.0, rms_norm_eps=1e-6, vocab_size=151680,
                  max_position_embeddings=40960),
        select_layer=12,
        head=dict(hidden_size=1024, input_embedding_dim=1536, backbone_embedding_dim=2048, max_seq_len=1024,
                  num_target_vision_tokens=32, max_num_embodiments=32,
                  dit=dict(num_attention_heads=32, attention_head_dim=48, num_layers=16, output_dim=1024),
                  vlsa=dict(num_attention_heads=32, attention_head_dim=64, num_layers=4))),
}
HORIZON, MAX_ACTION_DIM, MAX_STATE_DIM, NUM_STEPS, BUCKETS = 16, 32, 64, 4, 1000
STATE_DIM = ACTION_DIM = 6  # so100-like
EMBODIMENT = "new_embodiment"
CAMERAS = [(40, 96), (40, 96)]  # (h, w): GrootPackInputsStep np.stacks the cameras: one shape. Height grows, width shrinks

FORMULAS = {
    "image": "per camera (sorted key order): u8 HWC -> PIL RGB -> one tile (min/max_dynamic_tiles=1, "
             "use_thumbnail=False from GrootEagleCollateStep): torchvision v2 resize(u8 CHW, (S, S), "
             "BICUBIC, antialias=True), aspect ratio not kept, no pad, no crop; on CPU this is torch's "
             "native uint8 kernel (PIL-like: a=-0.5 cubic, support 2*scale when shrinking, int16 "
             "fixed-point weights, width pass then height pass with a u8 intermediate; see "
             "resize_ref.torch_bicubic_u8), then float (x - 127.5) / 127.5 (rescale 1/255 and mean=std=0.5 fused)",
    "prompt": "chat template with one user turn: content = [image]*n_cameras + [text: Python str([task]), "
              "i.e. repr of a one-element list]; add_generation_prompt; each <image-k> becomes "
              "'<image k><img>' + '<IMG_CONTEXT>' * tokens_per_tile + '</img>'; tokenized with no "
              "BOS/EOS; padding left (batch of one: none)",
    "vision": "SigLIP last_hidden_state (post_layernorm; the pooling head exists but is unused) -> "
              "mlp1 = one Linear(vit_hidden, lm_hidden) with bias, no pixel shuffle; rows replace the "
              "<IMG_CONTEXT> token embeddings in order (camera 0 patches row-major, then camera 1)",
    "lm": "Qwen3 decoder cut to select_layer layers (EagleBackbone pops the rest); causal; positions "
          "0..T-1; RoPE half-split (rotate_half); q/k RMSNorm per head before RoPE; SwiGLU MLP; "
          "backbone_features = hidden_states[select_layer] = model.norm(last kept layer output) "
          "(transformers 4.57 replaces the last hidden state by last_hidden_state); eagle_linear "
          "is Identity (project_to_dim None); the attention mask is not used after the LM",
    "vlln_vlsa": "vl = vlln(LayerNorm, eps 1e-5, affine)(lm_out) -> VL self-attention blocks, each "
                 "x += attn(LN1(x)); x += FF(LN3(x)); LN affine eps 1e-5; attention q/k/v/out with "
                 "bias, no mask, scale 1/sqrt(head_dim); FF Linear(d,4d) -> GELU(tanh) -> Linear(4d,d)",
    "dit_block": "x += attn(AdaLN(x, temb)); x += FF(LN3(x)); AdaLN: [scale, shift] = "
                 "Linear(SiLU(temb)).chunk(2), LN(x, eps 1e-5, no affine) * (1 + scale) + shift; "
                 "LN3 eps 1e-5 no affine; even blocks cross-attend to vl (q from x, k/v from vl), odd "
                 "blocks self-attend; attention with bias, no mask; FF GELU(tanh), inner 4*width",
    "dit_out": "[shift, scale] = proj_out_1(SiLU(temb)).chunk(2); x = LN(x, eps 1e-6, no affine) * "
               "(1 + scale) + shift; proj_out_2 -> output_dim (= action head hidden_size)",
    "timestep": "temb = linear_2(SiLU(linear_1(tp))), tp = [cos(t*f), sin(t*f)] with f_i = "
                "exp(-ln(10000) * i / 127), i = 0..127 (diffusers Timesteps(256, flip_sin_to_cos=True, "
                "downscale_freq_shift=1)), t = the integer bucket",
    "action_encoder": "a = W1(x); tau = [sin(t*g), cos(t*g)], g_i = exp(-ln(10000) * i / (w/2)), "
                      "i < w/2, w = input_embedding_dim; h = swish(W2([a, tau])); W3(h); W[e] is "
                      "stored [in, out]: y = x @ W[e] + b[e]",
    "sequence": "DiT input = [state_encoder(state) (1 row), future_tokens (num_target_vision_tokens "
                "rows), action_encoder(x_t) + position_embedding[0..horizon-1]]; state_encoder = "
                "L2(ReLU(L1(state_padded)))",
    "decoder": "velocity = action_decoder(dit_out)[-horizon:] = L2(ReLU(L1(.))), all of max_action_dim",
    "euler": "x_0 = noise; dt = 1.0 / N; for k in 0..N-1: t = k / N, bucket = int(t * 1000) "
             "(truncation), x = x + dt * v(x, bucket); output x_N (normalised)",
    "normalisation": "state: 2 * (s - min) / (max - min) - 1 (0 where max == min), no clipping, then "
                     "zero-padded to max_state_dim; action: (a + 1) * 0.5 * (max - min) + min on the "
                     "first action_dim columns of each step (min where max == min), no clipping",
}


# ----------------------------------------------------------------------------- assets

def build_tokenizer(out):
    """A byte-level BPE laid out as Qwen's: vocab.json + merges.txt trained with Qwen2's
    pre-tokenizer, the added tokens after the BPE ids. Loaded the way lerobot loads the real assets
    (AutoTokenizer, no tokenizer.json: Qwen2TokenizerFast converted from the slow files), then saved,
    which adds tokenizer.json."""
    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers, trainers
    from transformers import AutoTokenizer
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    tr = Tokenizer(models.BPE())
    tr.normalizer = normalizers.NFC()
    tr.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tr.train_from_iterator(CORPUS * 20, trainers.BpeTrainer(
        vocab_size=360, show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    model = json.loads(tr.to_str())["model"]
    vocab, merges = model["vocab"], [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    raw = os.path.join(_TMP, "tokenizer-raw")
    os.makedirs(raw)
    json.dump(vocab, open(os.path.join(raw, "vocab.json"), "w"), ensure_ascii=False)
    open(os.path.join(raw, "merges.txt"), "w").write("#version: 0.2\n" + "\n".join(merges) + "\n")
    added = {tok: len(vocab) + i for i, (tok, _) in enumerate(ADDED)}
    json.dump(added, open(os.path.join(raw, "added_tokens.json"), "w"), indent=2)
    decoder = {str(i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
                        "special": sp} for (t, sp), i in zip(ADDED, added.values())}
    json.dump({"add_bos_token": False, "add_prefix_space": False, "added_tokens_decoder": decoder,
               "additional_special_tokens": [t for t, sp in ADDED if sp and not t.startswith("<|")],
               "bos_token": None, "clean_up_tokenization_spaces": False, "eos_token": "<|im_end|>",
               "errors": "replace", "model_max_length": 131072, "pad_token": "<|endoftext|>",
               "split_special_tokens": False, "tokenizer_class": "Qwen2Tokenizer", "unk_token": None},
              open(os.path.join(raw, "tokenizer_config.json"), "w"), indent=2)
    tok = AutoTokenizer.from_pretrained(raw, use_fast=True)
    assert type(tok).__name__ == "Qwen2TokenizerFast", type(tok)
    assert [tok.convert_tokens_to_ids(t) for t, _ in ADDED] == list(added.values())
    tok.save_pretrained(out)
    for f in ["vocab.json", "merges.txt", "added_tokens.json"]:  # keep the slow files byte-identical
        shutil.copy(os.path.join(raw, f), os.path.join(out, f))
    return tok


def build_eagle_assets(out, tok, arch):
    """The Eagle 2.5 VL config and processor files lerobot expects next to its vendored .py files."""
    os.makedirs(out, exist_ok=True)
    vis, txt = arch["vision"], arch["text"]
    s, p = vis["image_size"], vis["patch_size"]
    n_img = (s // p) ** 2  # no pixel shuffle
    img_id = tok.convert_tokens_to_ids("<IMG_CONTEXT>")
    cfg = {
        "architectures": ["Eagle25VLForConditionalGeneration"],
        "auto_map": {"AutoConfig": "configuration_eagle2_5_vl.Eagle25VLConfig",
                     "AutoModel": "modeling_eagle2_5_vl.Eagle25VLForConditionalGeneration",
                     "AutoModelForCausalLM": "modeling_eagle2_5_vl.Eagle25VLForConditionalGeneration"},
        "model_type": "eagle_2_5_vl",
        "select_layer": -1, "downsample_ratio": 0.5, "use_pixel_shuffle": False, "mlp_connector_layers": 1,
        "force_image_size": s, "image_token_index": img_id, "dynamic_image_size": True, "use_thumbnail": True,
        "min_dynamic_tiles": 1, "max_dynamic_tiles": 12, "pad2square": False, "mlp_checkpoint": False,
        "use_backbone_lora": 0, "use_llm_lora": 0, "loss_version": "efficient_v2_cp_head", "template": None,
        "initializer_range": 0.02, "torch_dtype": "float32",
        # The real config says flash_attention_2 (Eagle25VLConfig's default, set recursively on the
        # SigLIP and Qwen3 sub-configs); CPU has no flash_attn: eager for both.
        "_attn_implementation": "eager",
        "vision_config": {"model_type": "siglip_vision_model", "num_channels": 3, "attention_dropout": 0.0, **vis},
        "text_config": {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "attention_bias": False,
                        "attention_dropout": 0.0, "hidden_act": "silu", "tie_word_embeddings": True,
                        "bos_token_id": tok.convert_tokens_to_ids("<|endoftext|>"),
                        "eos_token_id": tok.convert_tokens_to_ids("<|im_end|>"), "use_cache": False,
                        "use_sliding_window": False, "sliding_window": None, "rope_scaling": None,
                        "max_window_layers": txt["num_hidden_layers"], "torch_dtype": "float32", **txt},
    }
    assert len(tok) <= txt["vocab_size"], (len(tok), txt["vocab_size"])
    json.dump(cfg, open(os.path.join(out, "config.json"), "w"), indent=2)
    json.dump({"_from_model_config": True, "bos_token_id": cfg["text_config"]["bos_token_id"],
               "eos_token_id": cfg["text_config"]["eos_token_id"]},
              open(os.path.join(out, "generation_config.json"), "w"), indent=2)
    json.dump({"chat_template": CHAT_TEMPLATE}, open(os.path.join(out, "chat_template.json"), "w"), indent=2)
    json.dump({"auto_map": {"AutoProcessor": "processing_eagle2_5_vl.Eagle25VLProcessor"},
               "processor_class": "Eagle25VLProcessor", "image_token": "<IMG_CONTEXT>",
               "video_token": "<IMG_CONTEXT>", "tokens_per_tile": n_img, "image_placeholder": "image",
               "video_placeholder": "video", "image_start_token": "<img>", "image_end_token": "</img>"},
              open(os.path.join(out, "processor_config.json"), "w"), indent=2)
    json.dump({"auto_map": {"AutoImageProcessor": "image_processing_eagle2_5_vl_fast.Eagle25VLImageProcessorFast",
                            "AutoProcessor": "processing_eagle2_5_vl.Eagle25VLProcessor"},
               "image_processor_type": "Eagle25VLImageProcessorFast", "processor_class": "Eagle25VLProcessor",
               "size": {"height": s, "width": s}, "crop_size": None, "do_resize": True, "resample": 3,
               "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True, "image_mean": [0.5, 0.5, 0.5],
               "image_std": [0.5, 0.5, 0.5], "do_convert_rgb": True, "do_pad": True, "do_center_crop": None,
               "max_dynamic_tiles": 12, "min_dynamic_tiles": 1, "use_thumbnail": True, "pad_during_tiling": False,
               "default_to_square": False},
              open(os.path.join(out, "preprocessor_config.json"), "w"), indent=2)
    return img_id, n_img


def install_eagle_cache(fixture):
    """What lerobot's ensure_eagle_cache_ready would download: eagle/* and tokenizer/* (the .py files
    are copied from lerobot's vendored folder by lerobot itself)."""
    os.makedirs(EAGLE_CACHE, exist_ok=True)
    for sub in ["eagle", "tokenizer"]:
        for f in os.listdir(os.path.join(fixture, sub)):
            shutil.copy(os.path.join(fixture, sub, f), os.path.join(EAGLE_CACHE, f))


def head_cfg(arch):
    h = arch["head"]
    return {
        "action_dim": MAX_ACTION_DIM, "action_horizon": HORIZON, "add_pos_embed": True,
        "backbone_embedding_dim": h["backbone_embedding_dim"],
        "diffusion_model_cfg": {"attention_head_dim": h["dit"]["attention_head_dim"],
                                "cross_attention_dim": h["backbone_embedding_dim"], "dropout": 0.2,
                                "final_dropout": True, "interleave_self_attention": True, "norm_type": "ada_norm",
                                "num_attention_heads": h["dit"]["num_attention_heads"],
                                "num_layers": h["dit"]["num_layers"], "output_dim": h["dit"]["output_dim"],
                                "positional_embeddings": None},
        "hidden_size": h["hidden_size"], "input_embedding_dim": h["input_embedding_dim"],
        "max_action_dim": MAX_ACTION_DIM, "max_state_dim": MAX_STATE_DIM, "max_seq_len": h["max_seq_len"],
        "max_num_embodiments": h["max_num_embodiments"], "model_dtype": "float32", "noise_beta_alpha": 1.5,
        "noise_beta_beta": 1.0, "noise_s": 0.999, "num_inference_timesteps": NUM_STEPS,
        "num_target_vision_tokens": h["num_target_vision_tokens"], "num_timestep_buckets": BUCKETS,
        "tune_diffusion_model": True, "tune_projector": True, "use_vlln": True,
        "vl_self_attention_cfg": {"attention_head_dim": h["vlsa"]["attention_head_dim"], "dropout": 0.2,
                                  "final_dropout": True, "num_attention_heads": h["vlsa"]["num_attention_heads"],
                                  "num_layers": h["vlsa"]["num_layers"], "positional_embeddings": None},
    }


def build_base(out, arch):
    """GR00TN15's own folder: config.json (what nvidia/GR00T-N1.5-3B's config.json holds, sizes from
    `arch`) and a weights file with no tensors."""
    from lerobot.policies.groot.groot_n1 import GR00TN15Config
    os.makedirs(out, exist_ok=True)
    h = arch["head"]
    assert h["dit"]["num_attention_heads"] * h["dit"]["attention_head_dim"] == h["input_embedding_dim"]
    assert h["vlsa"]["num_attention_heads"] * h["vlsa"]["attention_head_dim"] == h["backbone_embedding_dim"]
    assert h["backbone_embedding_dim"] == arch["text"]["hidden_size"] and h["dit"]["output_dim"] == h["hidden_size"]
    cfg = GR00TN15Config(
        architectures=["GR00T_N1_5"], action_horizon=HORIZON, action_dim=MAX_ACTION_DIM, compute_dtype="float32",
        torch_dtype="float32",
        backbone_cfg={"eagle_path": "NVEagle/eagle_er-qwen3_1_7B-Siglip2_400M_stage1_5_128gpu_er_v7_1mlp_nops",
                      "load_bf16": False, "project_to_dim": None, "reproject_vision": False,
                      "select_layer": arch["select_layer"], "tune_llm": False, "tune_visual": True,
                      "use_flash_attention": False},
        action_head_cfg=head_cfg(arch))
    cfg.save_pretrained(out)
    save_file({}, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})


# ----------------------------------------------------------------------------- lerobot patches

def patch_lerobot():
    """SigLIP: eager attention instead of the flash_attention_2 forced by the vendored Eagle model
    (it imports SiglipVisionModel from this module when the dynamic module is loaded)."""
    from transformers.models.siglip import modeling_siglip
    real = modeling_siglip.SiglipVisionModel
    if getattr(real, "_golden_eager", False):
        return

    class SiglipVisionModel(real):
        _golden_eager = True

        def __init__(self, config):
            config._attn_implementation = "eager"
            super().__init__(config)

    modeling_siglip.SiglipVisionModel = SiglipVisionModel


def rerandomize(policy, gen):
    """Every tensor gets fresh values (lerobot's init leaves LayerNorm / RMSNorm gains at 1 and
    biases at 0, CategorySpecificLinear biases at 0, which would hide a dropped term). Norm gains
    1 + 0.2 N(0,1); biases 0.2 N(0,1); matrices N(0,1)/sqrt(fan_in) (CategorySpecificLinear W is
    [embodiment, in, out]: fan_in = in); embeddings 0.5 N(0,1)."""
    embeddings = {f"{n}.weight" for n, m in policy.named_modules() if isinstance(m, torch.nn.Embedding)}
    with torch.no_grad():
        for name, t in policy.state_dict().items():
            assert t.dtype == torch.float32, (name, t.dtype)
            r = torch.randn(t.shape, generator=gen, dtype=torch.float32)
            leaf = name.rsplit(".", 1)[-1]
            if t.ndim == 1 and ("norm" in name or "layernorm" in name or "vlln" in name):
                v = (1.0 + 0.2 * r) if leaf == "weight" else 0.2 * r
            elif t.ndim == 1 or (leaf == "b" and t.ndim == 2):
                v = 0.2 * r
            elif leaf == "W" and t.ndim == 3:
                v = r / t.shape[1] ** 0.5
            elif name in embeddings or leaf == "probe":
                v = 0.5 * r
            else:
                v = r / t[0].numel() ** 0.5
            t.copy_(v)


def rewrite_base_path(out):
    p = os.path.join(out, "config.json")
    d = json.load(open(p))
    d["base_model_path"] = "./base"
    json.dump(d, open(p, "w"), indent=4)


# ----------------------------------------------------------------------------- independent reference
# A second implementation of the whole inference from the fixture files alone (plain torch ops in
# float64, no lerobot), run by --check: it is what FORMULAS says, made executable.

def reference_pixels(hwc_u8, s):
    """u8 HWC frame -> [3, s, s] SigLIP input: width pass first (u8 intermediate), then height."""
    x = torch_bicubic_resize_u8(hwc_u8, s, s)
    return torch.from_numpy((x.transpose(2, 0, 1).astype(np.float32) - 127.5) / 127.5)


def reference_forward(fixture):
    """Every golden tensor from model.safetensors + arch.json + the golden inputs; returns max errors."""
    import math
    import torch.nn.functional as F
    f64 = torch.float64
    from safetensors import safe_open
    st_file = safe_open(os.path.join(fixture, "model.safetensors"), framework="pt")

    class Weights:  # loaded on use, float64 (the full-size model does not fit in RAM twice as f64)
        def __contains__(self, k):
            return "_groot_model." + k in st_file.keys()

        def __getitem__(self, k):
            return st_file.get_tensor("_groot_model." + k).to(f64)

    W = Weights()
    G = load_file(os.path.join(fixture, "golden.safetensors"))
    A = json.load(open(os.path.join(fixture, "arch.json")))
    J = json.load(open(os.path.join(fixture, "golden.json")))
    errs = {}

    def err(name, x):
        errs[name] = float((x - G[name].to(f64)).abs().max())

    def lin(x, p, bias=True):
        return x @ W[p + ".weight"].T + (W[p + ".bias"] if bias else 0)

    def ln(x, p, eps):  # p None: no elementwise affine
        y = (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + eps)
        return y if p is None else y * W[p + ".weight"] + W[p + ".bias"]

    def rms(x, w, eps):
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w

    def attn(q, k, v, heads, kv_heads, hd, causal=False):
        t, n = q.shape[0], k.shape[0]
        q = q.view(t, heads, hd).transpose(0, 1)
        k = k.view(n, kv_heads, hd).transpose(0, 1).repeat_interleave(heads // kv_heads, 0)
        v = v.view(n, kv_heads, hd).transpose(0, 1).repeat_interleave(heads // kv_heads, 0)
        sc = q @ k.transpose(1, 2) / math.sqrt(hd)
        if causal:
            sc = sc + torch.full((t, n), float("-inf"), dtype=f64).triu(1)
        return (sc.softmax(-1) @ v).transpose(0, 1).reshape(t, heads * hd)

    gelu = lambda x: F.gelu(x, approximate="tanh")
    sv, lm, ah, vs, dt = A["siglip"], A["lm"], A["action_head"], A["vlsa"], A["dit"]
    # SigLIP -> mlp1
    P, vis = "backbone.eagle_model.vision_model.vision_model.", []
    for i in range(J["n_images"]):
        errs[f"pixels.{i}"] = float((reference_pixels(G[f"image.{i}"].numpy(), sv["image_size"]) - G[f"pixels.{i}"]).abs().max())
        x = F.conv2d(G[f"pixels.{i}"].to(f64)[None], W[P + "embeddings.patch_embedding.weight"],
                     W[P + "embeddings.patch_embedding.bias"], stride=sv["patch_size"])
        x = x.flatten(2)[0].T + W[P + "embeddings.position_embedding.weight"]  # patches row-major
        hd = sv["hidden"] // sv["heads"]
        for l in range(sv["layers"]):
            L = P + f"encoder.layers.{l}."
            h = ln(x, L + "layer_norm1", sv["ln_eps"])
            x = x + lin(attn(lin(h, L + "self_attn.q_proj"), lin(h, L + "self_attn.k_proj"), lin(h, L + "self_attn.v_proj"),
                             sv["heads"], sv["heads"], hd), L + "self_attn.out_proj")
            x = x + lin(gelu(lin(ln(x, L + "layer_norm2", sv["ln_eps"]), L + "mlp.fc1")), L + "mlp.fc2")
        x = ln(x, P + "post_layernorm", sv["ln_eps"])
        err(f"vit.{i}", x)
        vis.append(lin(x, "backbone.eagle_model.mlp1.0"))
        err(f"vision.{i}", vis[-1])
    # Qwen3, cut to layers_used, image rows spliced in at <IMG_CONTEXT>
    Q = "backbone.eagle_model.language_model."
    ids = G["token_ids"]
    emb_key = Q + ("model.embed_tokens.weight" if Q + "model.embed_tokens.weight" in W else "lm_head.weight")
    x = st_file.get_tensor("_groot_model." + emb_key)[ids].to(f64)  # tied: stored once, as lm_head
    x[ids == A["image_token_id"]] = torch.cat(vis)
    t, hd = x.shape[0], lm["head_dim"]
    inv = 1.0 / lm["rope_theta"] ** (torch.arange(0, hd, 2, dtype=f64) / hd)
    fr = torch.arange(t, dtype=f64)[:, None] * inv[None]
    cos, sin = torch.cat([fr, fr], -1).cos()[:, None], torch.cat([fr, fr], -1).sin()[:, None]
    rope = lambda u: u * cos + torch.cat([-u[..., hd // 2:], u[..., :hd // 2]], -1) * sin
    for l in range(lm["layers_used"]):
        L = Q + f"model.layers.{l}."
        h = rms(x, W[L + "input_layernorm.weight"], lm["rms_eps"])
        q = rms(lin(h, L + "self_attn.q_proj", False).view(t, lm["heads"], hd), W[L + "self_attn.q_norm.weight"], lm["rms_eps"])
        k = rms(lin(h, L + "self_attn.k_proj", False).view(t, lm["kv_heads"], hd), W[L + "self_attn.k_norm.weight"], lm["rms_eps"])
        a = attn(rope(q).reshape(t, -1), rope(k).reshape(t, -1), lin(h, L + "self_attn.v_proj", False),
                 lm["heads"], lm["kv_heads"], hd, causal=True)
        x = x + lin(a, L + "self_attn.o_proj", False)
        h = rms(x, W[L + "post_attention_layernorm.weight"], lm["rms_eps"])
        x = x + lin(F.silu(lin(h, L + "mlp.gate_proj", False)) * lin(h, L + "mlp.up_proj", False), L + "mlp.down_proj", False)
    x = rms(x, W[Q + "model.norm.weight"], lm["rms_eps"])
    err("lm_out", x)
    # vlln -> VL self-attention
    H = "action_head."
    x = ln(x, H + "vlln", 1e-5)
    for b in range(vs["blocks"]):
        B = H + f"vl_self_attention.transformer_blocks.{b}."
        h = ln(x, B + "norm1", 1e-5)
        x = x + lin(attn(lin(h, B + "attn1.to_q"), lin(h, B + "attn1.to_k"), lin(h, B + "attn1.to_v"),
                         vs["heads"], vs["heads"], vs["head_dim"]), B + "attn1.to_out.0")
        x = x + lin(gelu(lin(ln(x, B + "norm3", 1e-5), B + "ff.net.0.proj")), B + "ff.net.2")
    vl = x
    err("vl", vl)
    # Flow-matching action head
    e = A["embodiment"]["id"]
    cat_lin = lambda u, p: u @ st_file.get_tensor("_groot_model." + p + ".W")[e].to(f64) + W[p + ".b"][e]
    mn, mx = (torch.tensor(J["stats"]["observation.state"][k], dtype=f64) for k in ["min", "max"])
    sn = 2 * (G["state"].to(f64) - mn) / (mx - mn) - 1
    err("state_norm", sn)
    s = torch.zeros(ah["max_state_dim"], dtype=f64)
    s[:sn.shape[0]] = G["state_norm"].to(f64)
    st = cat_lin(F.relu(cat_lin(s[None], H + "state_encoder.layer1")), H + "state_encoder.layer2")
    w, n_steps = ah["input_embedding_dim"], ah["num_inference_timesteps"]
    xa = G["noise"].to(f64)
    for k in range(n_steps):
        bucket = float(int(k / n_steps * ah["num_timestep_buckets"]))
        f = torch.exp(-math.log(10000) * torch.arange(128, dtype=f64) / 127) * bucket
        TE = H + "model.timestep_encoder.timestep_embedder."
        temb = lin(F.silu(lin(torch.cat([f.cos(), f.sin()]), TE + "linear_1")), TE + "linear_2")
        g2 = torch.exp(-torch.arange(w // 2, dtype=f64) * (math.log(10000.0) / (w // 2))) * bucket
        tau = torch.cat([g2.sin(), g2.cos()]).expand(xa.shape[0], -1)
        a = cat_lin(xa, H + "action_encoder.W1")
        a = cat_lin(F.silu(cat_lin(torch.cat([a, tau], -1), H + "action_encoder.W2")), H + "action_encoder.W3")
        a = a + W[H + "position_embedding.weight"][: xa.shape[0]]
        x = torch.cat([st, W[H + "future_tokens.weight"], a])
        for b in range(dt["layers"]):
            B = H + f"model.transformer_blocks.{b}."
            scale, shift = lin(F.silu(temb), B + "norm1.linear").chunk(2)
            h = ln(x, None, 1e-5) * (1 + scale) + shift
            kv = vl if b % 2 == 0 else h
            x = x + lin(attn(lin(h, B + "attn1.to_q"), lin(kv, B + "attn1.to_k"), lin(kv, B + "attn1.to_v"),
                             dt["heads"], dt["heads"], dt["head_dim"]), B + "attn1.to_out.0")
            x = x + lin(gelu(lin(ln(x, None, 1e-5), B + "ff.net.0.proj")), B + "ff.net.2")
        shift, scale = lin(F.silu(temb), H + "model.proj_out_1").chunk(2)
        x = lin(ln(x, None, 1e-6) * (1 + scale) + shift, H + "model.proj_out_2")
        v = cat_lin(F.relu(cat_lin(x, H + "action_decoder.layer1")), H + "action_decoder.layer2")[-xa.shape[0]:]
        err(f"velocity.{k}", v)
        xa = xa + v / n_steps
    err("actions_norm", xa)
    mn, mx = (torch.tensor(J["stats"]["action"][k], dtype=f64) for k in ["min", "max"])
    err("actions", (xa[:, :mn.shape[0]] + 1) / 2 * (mx - mn) + mn)
    return errs


# ----------------------------------------------------------------------------- run

def make_obs(images, state):
    obs = {"observation.state": state.clone(), "task": TASK}
    for i, img in enumerate(images):
        obs[f"observation.images.cam{i}"] = img.permute(2, 0, 1).float() / 255.0
    return obs


def run_policy(policy, pre, post, images, state, noise):
    """lerobot's inference path: preprocessor -> predict_action_chunk -> postprocessor (per step)."""
    batch = pre(make_obs(images, state))
    with explicit_noise(noise[None]) as calls:
        chunk = policy.predict_action_chunk(dict(batch))
    assert len(calls) == 1, "get_action drew no noise through torch.randn(size=...)"
    steps = [post(chunk[:, t]) for t in range(chunk.shape[1])]
    return batch, chunk, torch.stack([s[0] for s in steps])


def load_fixture(fixture):
    """The policy and its saved pre/post-processors from a folder written by this tool."""
    install_eagle_cache(fixture)
    patch_lerobot()
    from lerobot.policies.groot.modeling_groot import GrootPolicy
    from lerobot.processor import PolicyProcessorPipeline
    from lerobot.processor.converters import policy_action_to_transition, transition_to_policy_action

    cwd = os.getcwd()
    os.chdir(fixture)  # config.json says base_model_path "./base"
    try:
        policy = GrootPolicy.from_pretrained(fixture).eval()
        assert policy.config.base_model_path == "./base" and not policy.config.use_bf16
    finally:
        os.chdir(cwd)
    pre = PolicyProcessorPipeline.from_pretrained(fixture, config_filename="policy_preprocessor.json")
    post = PolicyProcessorPipeline.from_pretrained(
        fixture, config_filename="policy_postprocessor.json", to_transition=policy_action_to_transition,
        to_output=transition_to_policy_action)
    return policy, pre, post


def check(fixture):
    """Reload the fixture in this (fresh) process and reproduce the golden actions."""
    fixture = os.path.abspath(fixture)
    g = load_file(os.path.join(fixture, "golden.safetensors"))
    policy, pre, post = load_fixture(fixture)
    images = [g[f"image.{i}"] for i in range(sum(k.startswith("image.") for k in g))]
    model, final = policy._groot_model, []
    real_get_action = model.get_action
    model.get_action = lambda inputs: (lambda o: final.append(o["action_pred"].clone()) or o)(real_get_action(inputs))
    with torch.no_grad():
        batch, chunk, actions = run_policy(policy, pre, post, images, g["state"], g["noise"])
    assert torch.equal(batch["eagle_input_ids"][0], g["token_ids"])
    assert torch.equal(chunk[0], final[0][0, :, :chunk.shape[-1]])
    err = {"actions_norm": float((final[0][0] - g["actions_norm"]).abs().max()),
           "actions": float((actions - g["actions"]).abs().max()),
           "pixels": max(float((batch["eagle_pixel_values"][i] - g[f"pixels.{i}"]).abs().max())
                         for i in range(len(images)))}
    print("reload check (max abs err):", json.dumps(err))
    assert max(err.values()) < 1e-5, err
    ref = reference_forward(fixture)
    print("independent float64 reference (max abs err):", json.dumps({k: float(f"{v:.2e}") for k, v in ref.items()}))
    assert all(ref[k] == 0.0 for k in ref if k.startswith("pixels.")), "resize/normalise not bit-exact"
    if json.load(open(os.path.join(fixture, "arch.json")))["size"] == "tiny":
        assert max(ref.values()) < 1e-4, ref
    return err


def generate(a, out):
    arch = SIZES[a.size]
    tok = build_tokenizer(os.path.join(out, "tokenizer"))
    img_id, n_img = build_eagle_assets(os.path.join(out, "eagle"), tok, arch)
    install_eagle_cache(out)
    patch_lerobot()

    import diffusers
    import lerobot
    import transformers
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.groot.configuration_groot import GrootConfig
    from lerobot.policies.groot.modeling_groot import GrootPolicy
    from lerobot.policies.groot.processor_groot import (GrootEagleCollateStep, GrootEagleEncodeStep,
                                                        GrootPackInputsStep, make_groot_pre_post_processors)

    base = os.path.join(out, "base")
    build_base(base, arch)
    gen = torch.Generator().manual_seed(a.seed)
    cams = [f"observation.images.cam{i}" for i in range(len(CAMERAS))]
    feats = {"observation.state": PolicyFeature(type=FeatureType.STATE, shape=(STATE_DIM,))}
    for k, (h, w) in zip(cams, CAMERAS):
        feats[k] = PolicyFeature(type=FeatureType.VISUAL, shape=(3, h, w))
    s = arch["vision"]["image_size"]
    cfg = GrootConfig(device="cpu", base_model_path=base, use_bf16=False, chunk_size=HORIZON, n_action_steps=HORIZON,
                      max_state_dim=MAX_STATE_DIM, max_action_dim=MAX_ACTION_DIM, image_size=(s, s),
                      embodiment_tag=EMBODIMENT, input_features=feats,
                      output_features={"action": PolicyFeature(type=FeatureType.ACTION, shape=(ACTION_DIM,))})
    torch.manual_seed(a.seed)
    policy = GrootPolicy(cfg).eval()
    model = policy._groot_model
    assert model.compute_dtype == "float32"
    rerandomize(policy, gen)
    eagle = model.backbone.eagle_model
    lm = eagle.language_model
    assert len(lm.model.layers) == arch["select_layer"] and not eagle.use_pixel_shuffle
    assert eagle.num_image_token == n_img and eagle.image_token_index == img_id
    tied = lm.lm_head.weight.data_ptr() == lm.model.embed_tokens.weight.data_ptr()

    randn = lambda *shape: torch.randn(*shape, generator=gen)
    rand = lambda *shape: torch.rand(*shape, generator=gen)
    stats = {}
    for k, n in [("observation.state", STATE_DIM), ("action", ACTION_DIM)]:
        lo = randn(n)
        stats[k] = {"min": lo, "max": lo + 0.5 + 2.0 * rand(n)}
    st = stats["observation.state"]  # mostly inside [min, max]; some outside: no clipping
    state = st["min"] + (st["max"] - st["min"]) * (-0.1 + 1.2 * rand(STATE_DIM))
    pre, post = make_groot_pre_post_processors(cfg, dataset_stats=stats)
    policy.save_pretrained(out)
    pre.save_pretrained(out)
    post.save_pretrained(out)
    rewrite_base_path(out)

    images = [torch.randint(0, 256, (h, w, 3), generator=gen, dtype=torch.uint8) for h, w in CAMERAS]
    noise = randn(HORIZON, MAX_ACTION_DIM)

    # Record the prompt as templated and as expanded (the two Eagle steps each own a processor).
    enc = next(p for p in pre.steps if isinstance(p, GrootEagleEncodeStep)).proc
    col = next(p for p in pre.steps if isinstance(p, GrootEagleCollateStep)).proc
    assert col.tokens_per_tile == n_img and col.image_token_id == img_id, (col.tokens_per_tile, col.image_token_id)
    assert type(col.image_processor).__name__ == "Eagle25VLImageProcessorFast", type(col.image_processor)
    assert type(col.tokenizer).__name__ == "Qwen2TokenizerFast", type(col.tokenizer)
    templated, expanded = [], []
    real_tpl, real_rmp = enc.apply_chat_template, col.replace_media_placeholder
    enc.apply_chat_template = lambda *x, **k: templated.append(real_tpl(*x, **k)) or templated[-1]
    col.replace_media_placeholder = lambda *x, **k: expanded.append(real_rmp(*x, **k)) or expanded[-1]

    # Record intermediates with hooks on lerobot's own modules.
    rec = {"vit": [], "vision": [], "backbone": [], "lm_norm": [], "lm_hidden": [], "vl": [], "dec": [], "t": [],
           "final": []}
    hooks = [
        eagle.vision_model.register_forward_hook(lambda m, i, o: rec["vit"].append(o.last_hidden_state.detach().clone())),
        eagle.mlp1.register_forward_hook(lambda m, i, o: rec["vision"].append(o.detach().clone())),
        model.backbone.register_forward_hook(
            lambda m, i, o: rec["backbone"].append(o["backbone_features"].detach().clone())),
        lm.model.norm.register_forward_hook(lambda m, i, o: rec["lm_norm"].append(o.detach().clone())),
        lm.model.layers[-1].register_forward_hook(
            lambda m, i, o: rec["lm_hidden"].append((o[0] if isinstance(o, tuple) else o).detach().clone())),
        model.action_head.vl_self_attention.register_forward_hook(lambda m, i, o: rec["vl"].append(o.detach().clone())),
        model.action_head.action_decoder.register_forward_hook(lambda m, i, o: rec["dec"].append(o.detach().clone())),
        model.action_head.model.register_forward_pre_hook(
            lambda m, args, kw: rec["t"].append(kw["timestep"].tolist()), with_kwargs=True),
    ]
    real_get_action = model.get_action
    model.get_action = lambda inputs: (lambda o: rec["final"].append(o["action_pred"].clone()) or o)(real_get_action(inputs))
    with torch.no_grad():
        batch, chunk, actions = run_policy(policy, pre, post, images, state, noise)
    for hk in hooks:
        hk.remove()
    model.get_action = real_get_action
    enc.apply_chat_template, col.replace_media_placeholder = real_tpl, real_rmp

    n_cam = len(CAMERAS)
    assert len(rec["vit"]) == 1 and len(rec["dec"]) == NUM_STEPS and len(rec["final"]) == 1
    tokens, mask = batch["eagle_input_ids"][0], batch["eagle_attention_mask"][0]
    assert bool(mask.all()), "batch of one: no padding expected"
    # The backbone feature is the final-norm output of the last kept layer (hidden_states[select_layer]).
    lm_out = rec["backbone"][0][0]
    assert torch.equal(lm_out, rec["lm_norm"][0][0])
    assert not torch.allclose(lm_out, rec["lm_hidden"][0][0])
    pos = (tokens == img_id).nonzero().flatten().tolist()
    assert len(pos) == n_cam * n_img
    # The tokenizer.json in tokenizer/ gives the same ids as the processor's tokenizer.
    from tokenizers import Tokenizer
    t_json = Tokenizer.from_file(os.path.join(out, "tokenizer", "tokenizer.json"))
    prompt_expanded = expanded[0][0]
    assert t_json.encode(prompt_expanded, add_special_tokens=True).ids == tokens.tolist()
    # The state normalisation and action un-normalisation formulas (FORMULAS).
    sn = batch["state"][0, 0]
    ref_sn = 2 * (state - st["min"]) / (st["max"] - st["min"]) - 1
    assert torch.allclose(sn[:STATE_DIM], ref_sn, atol=1e-6) and not sn[STATE_DIM:].any()
    am = stats["action"]
    ref_a = (chunk[0, :, :ACTION_DIM] + 1) / 2 * (am["max"] - am["min"]) + am["min"]
    assert torch.allclose(actions, ref_a, atol=1e-5)
    assert torch.equal(chunk[0], rec["final"][0][0, :, :ACTION_DIM])

    golden = {f"image.{i}": img for i, img in enumerate(images)}
    for i in range(n_cam):
        golden[f"pixels.{i}"] = batch["eagle_pixel_values"][i]
        golden[f"vit.{i}"] = rec["vit"][0][i]
        golden[f"vision.{i}"] = rec["vision"][0][i]
    for k, v in enumerate(rec["dec"]):
        golden[f"velocity.{k}"] = v[0, -HORIZON:]
    golden.update({"state": state, "state_norm": sn[:STATE_DIM], "noise": noise, "lm_out": lm_out,
                   "vl": rec["vl"][0][0], "actions_norm": rec["final"][0][0], "actions": actions})
    golden = {k: (t if t.dtype == torch.uint8 else t.float()).contiguous() for k, t in golden.items()}
    golden["token_ids"] = tokens.to(torch.int64).contiguous()
    golden["attention_mask"] = mask.to(torch.int64).contiguous()
    save_file(golden, os.path.join(out, "golden.safetensors"))

    buckets = [int(t[0]) for t in rec["t"]]
    assert buckets == [int(k / NUM_STEPS * BUCKETS) for k in range(NUM_STEPS)], buckets
    # Euler: x_{k+1} = x_k + v_k / N, checked from the recorded velocities.
    x = noise.clone()
    for k in range(NUM_STEPS):
        x = x + (1.0 / NUM_STEPS) * golden[f"velocity.{k}"]  # flow_matching_action_head.py:397
    assert torch.allclose(x, golden["actions_norm"], atol=1e-6)

    h = arch["head"]
    emb_map = next(p for p in pre.steps if isinstance(p, GrootPackInputsStep)).embodiment_mapping
    vis, txt = arch["vision"], arch["text"]
    arch_json = {
        "size": a.size,
        "siglip": {"hidden": vis["hidden_size"], "layers": vis["num_hidden_layers"], "heads": vis["num_attention_heads"],
                   "intermediate": vis["intermediate_size"], "image_size": s, "patch_size": vis["patch_size"],
                   "patches": n_img, "ln_eps": vis["layer_norm_eps"], "act": vis["hidden_act"],
                   "attn_impl": eagle.vision_model.config._attn_implementation,
                   "pooling_head": bool(eagle.vision_model.vision_model.use_head)},
        "mlp1": {"in": vis["hidden_size"], "out": txt["hidden_size"], "layers": 1, "pixel_shuffle": False,
                 "bias": True},
        "lm": {"arch": "qwen3", "hidden": txt["hidden_size"], "layers_config": txt["num_hidden_layers"],
               "layers_used": arch["select_layer"], "select_layer": arch["select_layer"],
               "heads": txt["num_attention_heads"], "kv_heads": txt["num_key_value_heads"], "head_dim": txt["head_dim"],
               "intermediate": txt["intermediate_size"], "rope_theta": txt["rope_theta"],
               "rms_eps": txt["rms_norm_eps"], "vocab": txt["vocab_size"], "tokenizer_vocab": len(tok),
               "qk_norm": True, "tied_embeddings": tied, "attn_impl": lm.config._attn_implementation},
        "vlln": {"width": h["backbone_embedding_dim"], "eps": 1e-5},
        "vlsa": {"blocks": h["vlsa"]["num_layers"], "width": h["backbone_embedding_dim"],
                 "heads": h["vlsa"]["num_attention_heads"], "head_dim": h["vlsa"]["attention_head_dim"],
                 "ff_inner": 4 * h["backbone_embedding_dim"], "ln_eps": 1e-5},
        "dit": {"layers": h["dit"]["num_layers"], "width": h["input_embedding_dim"],
                "heads": h["dit"]["num_attention_heads"], "head_dim": h["dit"]["attention_head_dim"],
                "ff_inner": 4 * h["input_embedding_dim"], "output_dim": h["dit"]["output_dim"],
                "cross_attention_dim": h["backbone_embedding_dim"], "cross_attention_blocks": "even (0, 2, ...)",
                "self_attention_blocks": "odd", "timestep_proj_channels": 256, "ln_eps": 1e-5, "norm_out_eps": 1e-6},
        "action_head": {"hidden_size": h["hidden_size"], "input_embedding_dim": h["input_embedding_dim"],
                        "backbone_embedding_dim": h["backbone_embedding_dim"], "action_horizon": HORIZON,
                        "max_action_dim": MAX_ACTION_DIM, "max_state_dim": MAX_STATE_DIM,
                        "num_target_vision_tokens": h["num_target_vision_tokens"], "max_seq_len": h["max_seq_len"],
                        "num_timestep_buckets": BUCKETS, "num_inference_timesteps": NUM_STEPS,
                        "max_num_embodiments": h["max_num_embodiments"]},
        "embodiment": {"tag": EMBODIMENT, "id": emb_map[EMBODIMENT], "mapping": emb_map},
        "image_token_id": img_id, "image_tokens_per_image": n_img, "state_dim": STATE_DIM, "action_dim": ACTION_DIM,
        "formulas": FORMULAS,
    }
    json.dump(arch_json, open(os.path.join(out, "arch.json"), "w"), indent=1)

    vendor = os.path.dirname(sys.modules["lerobot.policies.groot.groot_n1"].__file__)
    info = {
        "generator": "tools/golden/groot.py",
        "size": a.size,
        "seed": a.seed,
        "versions": {"lerobot": lerobot.__version__, "torch": torch.__version__,
                     "transformers": transformers.__version__, "diffusers": diffusers.__version__,
                     "numpy": np.__version__,
                     "lerobot_groot_sha256": {
                         f: hashlib.sha256(open(os.path.join(vendor, f), "rb").read()).hexdigest()[:16]
                         for f in ["groot_n1.py", "processor_groot.py", "action_head/flow_matching_action_head.py",
                                   "action_head/cross_attention_dit.py", "action_head/action_encoder.py",
                                   "eagle2_hg_model/modeling_eagle2_5_vl.py",
                                   "eagle2_hg_model/processing_eagle2_5_vl.py",
                                   "eagle2_hg_model/image_processing_eagle2_5_vl_fast.py"]}},
        "task": TASK,
        "language": str([TASK]),
        "prompt_templated": templated[0],
        "prompt_expanded": prompt_expanded,
        "token_ids": tokens.tolist(),
        "attention_mask": [int(v) for v in mask.tolist()],
        "n_tokens": len(tokens),
        "image_token_id": img_id,
        "image_token_positions": pos,
        "image_token_spans": [[pos[i * n_img], pos[i * n_img] + n_img] for i in range(n_cam)],
        "img_tokens_per_camera": n_img,
        "n_images": n_cam,
        "camera_keys": cams,
        "cameras_hw": CAMERAS,
        "image_size": s,
        "embodiment_tag": EMBODIMENT,
        "embodiment_id": emb_map[EMBODIMENT],
        "num_steps": NUM_STEPS,
        "timestep_buckets": buckets,
        "action_horizon": HORIZON,
        "max_state_dim": MAX_STATE_DIM,
        "max_action_dim": MAX_ACTION_DIM,
        "state_dim": STATE_DIM,
        "action_dim": ACTION_DIM,
        "stats": {k: {n: v.tolist() for n, v in d.items()} for k, d in stats.items()},
        "model": arch_json,
        "tensors": {k: [str(t.dtype).replace("torch.", ""), list(t.shape)] for k, t in sorted(golden.items())},
    }
    json.dump(info, open(os.path.join(out, "golden.json"), "w"), indent=1)
    print(json.dumps({k: info[k] for k in ["versions", "prompt_templated", "n_tokens", "image_token_spans",
                                            "timestep_buckets"]}))
    print("actions[0]:", actions[0].tolist(), "max|actions_norm|:", float(golden["actions_norm"].abs().max()))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", choices=sorted(SIZES), default="tiny")
    ap.add_argument("--out", help="output folder (default: tests/fixtures/groot-tiny for --size tiny)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--check", metavar="DIR", help="only reload DIR and reproduce its golden actions")
    ap.add_argument("--no-check", action="store_true", help="skip the reload check after generating")
    a = ap.parse_args()
    if a.check:
        check(a.check)
        return
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    if a.out is None and a.size != "tiny":
        ap.error("--size full writes ~11 GB: give --out (outside the repo)")
    out = os.path.abspath(a.out or os.path.join(root, "tests", "fixtures", "groot-tiny"))
    if os.path.isdir(out):
        shutil.rmtree(out)
    generate(a, out)
    gc.collect()  # the full-size model must be gone before the check process loads it again
    if not a.no_check:  # a fresh process, a fresh HF_LEROBOT_HOME: the folder alone must suffice
        subprocess.run([sys.executable, os.path.abspath(__file__), "--check", out], check=True,
                       env={**os.environ, "HF_HUB_OFFLINE": "1"})


if __name__ == "__main__":
    main()
