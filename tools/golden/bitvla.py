"""Golden fixture for BitVLA: ustcwhy/BitVLA's own model code, random ternary weights.

Rerun (offline; the venv and the upstream checkout are outside the repo, CI never needs them):

    # the reference, a public GitHub repository (MIT), at the commit the fixture was made from
    git clone https://github.com/ustcwhy/BitVLA /tmp/upstream/BitVLA && git -C /tmp/upstream/BitVLA checkout 3738a94
    # torch 2.10 etc. from the lerobot venv of the other tools, transformers 4.51.3 over it
    /work/venv-lerobot061/bin/python -m venv /work/venv-bitvla
    echo /work/venv-lerobot061/lib/python3.11/site-packages \
        > /work/venv-bitvla/lib/python3.11/site-packages/_lerobot061.pth
    /work/venv-bitvla/bin/pip install --no-deps transformers==4.51.3 tokenizers==0.21.4 huggingface-hub==0.36.2
    /work/venv-bitvla/bin/python tools/golden/bitvla.py --upstream /tmp/upstream/BitVLA   # tests/fixtures/bitvla-tiny
    /work/venv-bitvla/bin/python tools/golden/bitvla.py --upstream /tmp/upstream/BitVLA \
        --check tests/fixtures/bitvla-tiny
        # reload the folder in a fresh process as the LIBERO client does and reproduce `actions` bit for bit

Seed 0; regenerating gives byte-identical files. The reference's fork of transformers is 4.51.0.dev0; its
changes that matter are five files, loaded from the checkout over stock 4.51.3 under their own module names
(`transformers.models.{llava.configuration_bitnet, llava.configuration_llava, siglip.modeling_siglip,
llava.modeling_bitnet, llava.modeling_llava}`: BitNet, the BitLinear SigLIP, LLaVA wired to both); every other
difference of the fork from 4.51.3 is upstream dev0-vs-release drift. From openvla-oft/ only the files used
are imported: prismatic/{vla/constants, training/train_utils, models/action_heads, models/projectors}.py (the
package __init__ files, which pull the training stack, are skipped), bitvla/configuration_bit_vla.py (as
the top-level module `configuration_bit_vla` that the wrapper imports, as `pip install -e bitvla/` makes
it) and bitvla/model/bitvla_for_action_prediction.py; the client's functions are compiled alone from
experiments/robot/{bitnet_utils,openvla_utils}.py and bitvla/dataset/bitvla_transform.py (their modules
import tensorflow).

What runs is the LIBERO eval (experiments/robot/libero/run_libero_eval_bitnet.py, model_family "bitnet"):
the folder is loaded as get_bitnet_vla does (bitnet_utils.py:36-85: Auto-class registration,
AutoModelForVision2Seq.from_pretrained, dataset_statistics.json), the head and proprio projector by get_action_head / get_proprio_projector
(openvla_utils.py:405-526, "module." stripped), the processor by AutoProcessor, set_constant with
bitvla/constants.py (image 128010, proprio 128011, action begin 128011, stop 128001), and one query goes
through the reference's own get_bitnet_vla_action (bitnet_utils.py:87-202) with two cameras and the state:
- prompt: "<image>\\n" * 2 + "<proprio_pad>What action should the robot take to {task.lower()}?" through
  llava_to_openai (each image -> "<|image_pad|>") and the chat template of openvla-oft/convert_ckpt.py:50:
  "System: A chat between ... questions.<|eot_id|>User: <|image_pad|><|image_pad|><proprio_pad>What action
  ...?<|eot_id|>Assistant: ", each "<|image_pad|>" repeated (224 / 14)^2 = 256 times, tokenized with BOS
  128000 (the post-processor), no EOS; the last prompt token is the space after "Assistant:";
- predict_action (bitvla/model/bitvla_for_action_prediction.py:312-433) appends 56 ids 1 and the stop 128001;
  image rows get the projector output (primary's 256, then the wrist's), the proprio row the proprio
  projector's, the 56 slots are zeroed (:264-265); the BitNet LM runs eager with use_bi_attn=True: the causal
  mask's last row repeated = no mask (modeling_bitnet.py:419-473); positions 0..L-1;
- SigLIP: hidden_states[vision_feature_layer = -1] (no post_layernorm), strategy "full" (all 256 tokens),
  projector linear_1 -> GELU -> linear_2 (modeling_llava.py:88-108, 283-330);
- head input: hidden_states[-1] (after the final RMSNorm) at rows [n - 1, n + 55), shifted one left of the
  slots [n, n + 56) (:282-287), reshaped (8, 7 H) into the L1 MLPResNet; actions un-normalised BOUNDS_Q99
  with mask, no clip (:231-250); the state normalised by normalize_proprio (openvla_utils.py:657-688);
- every BitLinear (SigLIP q/k/v/out/fc1/fc2 with vit_weight_bits 1, vit_act_bits 8; all BitNet projections)
  fake-quantises online: weights per tensor s = 1 / mean|W|, round(W s).clamp(-1, 1) / s (WeightQuant;
  quantize_weights(), the int2 path computing round(W / mean), is never called in the repo), activations per
  token s = 127 / max|x|.clamp(1e-5), round(x s).clamp(-128, 127) / s (modeling_bitnet.py:85-193,
  modeling_siglip.py:56-171).

Changes, all in this process only:
- float32: the model (the eval loads bf16), the head and proprio projector (cast to bf16 by
  openvla_utils.py:422, 501) and the pixels (the one edit of get_bitnet_vla_action's source: its
  `pixel_values.to(DEVICE, dtype=torch.bfloat16)` becomes float32); weights bf16-exact, so the stored bf16
  checkpoint gives the same numbers;
- the client's image steps before the processor are not run (as openvla_oft.py): prepare_images_for_vla
  keeps check_image_format and the PIL RGB conversion but not its TensorFlow JPEG/lanczos resize of
  non-224 images nor center_crop_image (center_crop=True in the eval); the frames go straight to the
  processor, which resizes the 200 x 240 wrist frame with PIL bicubic;
- model_is_on_hf_hub is False (no network); from_pretrained is not preceded by update_auto_map /
  check_model_logic_mismatch, which would write config.json's auto_map (to the same two classes) and copy
  the two wrapper files into the folder;
- attention: from_pretrained gives BitNet eager (its only non-flash class) and SigLIP eager SiglipAttention:
  the sub-configs carry "_attn_implementation_autoset": true as save_pretrained writes them, so
  SiglipVisionModel skips its own SDPA dispatch (a config without it gives SDPA; same math);
- sizes (the released geometry otherwise): SigLIP 48 wide, 16 heads, MLP 176 (176 % 32 = 16 as 4304 % 32),
  3 layers, 224 / 14; BitNet 32 wide, 4 layers, 4 query heads of 8 and 1 KV head (GQA 4:1 as 20:5), MLP 96 (a multiple of 16, as every released width: 6912, 4304),
  rope_theta 5e5, rms_norm_eps 1e-5, tied embeddings (BitNetConfig's defaults), vocab 128264 (Llama 3's
  128000 + the 10 specials convert_ckpt.py keeps + <|image_pad|>, <proprio_pad> and the 252 <action_i> that
  Bitnet_ActionTokenizer adds, bitnet_action_tokenizer.py:39-44, finetune_bitnet.py:580); vision_use_head
  false and vision_feature_layer -1 are assumptions (the released config.json is not reachable offline;
  "full" is forced by the 256-token count);
- weights re-randomized: norm gains 1 + 0.2 N, biases 0.2 N, matrices N / sqrt(fan_in), embeddings 0.5 N
  (but the rows of the unreachable placeholder ids, which are zero so that git compresses them away),
  rounded to bf16; BitLinear weights ternary by construction: codes uniform on {-1, 0, 1}, |W| = alpha
  (0.75 + 0.5 u) for +-1 and at most 0.15 alpha for 0 (alpha = 1.5 / sqrt(fan_in)), rounded to bf16, and
  asserted unambiguous: |W s| >= 0.9 for +-1, <= 0.3 for 0, and both WeightQuant's and the int2 rounding
  give the codes back;
- the tokenizer is built here (no network): a byte-level BPE trained on the prompts with Llama 3's
  tokenizer.json layout (pre-tokenizer Split(Llama 3 regex, Isolated) + ByteLevel(use_regex false), no
  normalizer, ByteLevel + TemplateProcessing "<|begin_of_text|> $A" post-processor, ByteLevel decoder, BPE
  with ignore_merges) and id layout (bytes 0..255 in GPT-2's byte-to-unicode order, " " = 220, merges from
  256, unreachable placeholders "\\u3000{id}" up to 127999, the specials only in added_tokens at their ids:
  128000 <|begin_of_text|>, 128001 <|end_of_text|>, 128002 <|pad|>, 128009 <|eot_id|>, 128010-128263 as
  above); the fast tokenizer's ids are asserted equal to `tokenizers`'; the processor is LlavaProcessor
  (patch 14, strategy "full") over SiglipImageProcessor's defaults (224 x 224, bicubic, 1/255, mean = std =
  0.5), as the fine-tune's processor.save_pretrained leaves them (finetune_bitnet.py:459).

Files (tests/fixtures/bitvla-tiny): the folder as the fine-tune leaves it: config.json (Bitvla_Config as
save_pretrained writes it: the diff against the defaults), generation_config.json, model.safetensors (bf16,
the tied lm_head left out), action_head--10000_checkpoint.pt (bf16) and proprio_projector--10000_checkpoint.pt
(f32) (the DDP modules' state dicts, keys "module."-prefixed), dataset_statistics.json, preprocessor_config.json,
processor_config.json, tokenizer.json, tokenizer_config.json (with the chat template), special_tokens_map.json;
golden.json (task, prompt, ids, ids_model, the layout, every BitLinear's mean|W|, checks, versions) and
golden.safetensors (float32 unless said; L = 636 rows, n = 579 prompt ids): image.{0,1} u8 [224, 224, 3],
[200, 240, 3]; pixels.1 [3, 224, 224] (the wrist frame, processed); vit.0.hidden.{0,1,2} [256, 48] (camera 0's
embeddings and layers 1, 2 outputs); vit.{c} [256, 48] (each camera's feature, layer 3's output); patches
[512, 32] (projector, camera 0 then 1); state [8] (raw), proprio_norm [8]; proprio_feat [1, 32]; lm_in
[L, 32] (the LM's input embeddings); hidden.{l} [L, 32], l = 1..4 (decoder layer l's output, all rows, before
the final norm); actions_hidden [56, 32] (final-normed, the head's rows); head.x0 [8, 32] (after fc1 + ReLU);
head.blk.{0,1} [8, 32]; actions_norm [8, 7]; actions [8, 7]; ids [n]; and for two BitLinear sites, lm0_q
(LM layer 0 q_proj, all L rows) and vit0_fc1 (SigLIP layer 0 fc1, camera 0): bit.{site}.x (input), .xcodes
(int8 codes, as f32), .xs [rows] (s = 127 / max|x|), .wcodes (ternary codes), .wmean [1] (mean|W|; the
weight scale is 1 / wmean), .y (output). Integer codes flip with rounding-level differences (swapping
SigLIP's eager attention for SDPA moves the chunk by 3e-2): compare stages fed with these inputs;
actions_sdpa [8, 7] is the reference's chunk with SigLIP's SDPA attention (golden.json
checks.actions_max_diff_eager_vs_sdpa_siglip: the reference's own spread, the end-to-end bound).
"""
import argparse
import ast
import copy
import importlib.util
import json
import os
import re
import shutil
import sys
import types
from typing import Any, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

SUITE = "libero_spatial_no_noops"
TASK = "Pick up the black bowl between the plate and the ramekin and place it on the plate"
VOCAB = 128264  # Llama 3's 128000 + 10 specials kept by convert_ckpt.py + <|image_pad|>, <proprio_pad>, 252 actions
BOS, STOP, PAD, IMAGE, PROPRIO, ACTION0, N_BINS = 128000, 128001, 128002, 128010, 128011, 128012, 252
VIT = dict(model_type="siglip_vision_model", hidden_size=48, intermediate_size=176, num_hidden_layers=3,
           num_attention_heads=16, num_channels=3, image_size=224, patch_size=14, hidden_act="gelu_pytorch_tanh",
           layer_norm_eps=1e-6, attention_dropout=0.0, vision_use_head=False, vit_weight_bits=1, vit_act_bits=8,
           vit_weight_quant_method="absmean", vit_act_quant_method="absmax_per_token")
TEXT = dict(model_type="BitNet", vocab_size=VOCAB, hidden_size=32, intermediate_size=96, num_hidden_layers=4,
            num_attention_heads=4, num_key_value_heads=1, hidden_act="relu2", max_position_embeddings=4096,
            rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=True, attention_bias=False,
            attention_dropout=0.0, bos_token_id=BOS, eos_token_id=STOP, pad_token_id=None)
FRAMES = [(224, 224), (200, 240)]
FORK = ["llava/configuration_bitnet", "llava/configuration_llava", "siglip/modeling_siglip", "llava/modeling_bitnet",
        "llava/modeling_llava"]
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIALS = {128000: "<|begin_of_text|>", 128001: "<|end_of_text|>", 128002: "<|pad|>",
            128003: "<|reserved_special_token_1|>", 128004: "<|reserved_special_token_2|>",
            128005: "<|reserved_special_token_3|>", 128006: "<|start_header_id|>", 128007: "<|end_header_id|>",
            128008: "<|reserved_special_token_4|>", 128009: "<|eot_id|>", IMAGE: "<|image_pad|>",
            PROPRIO: "<proprio_pad>", **{ACTION0 + i: f"<action_{i}>" for i in range(N_BINS)}}

from openvla_oft import TASKS, _Finder  # noqa: E402
from vla_adapter import frames, make_stats  # noqa: E402


# ----------------------------------------------------------------------------- the tokenizer

def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + \
        list(range(ord("\xae"), ord("\xff") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for c in cs]


def build_tokenizer(out, system):
    """A byte-level BPE in Llama 3's tokenizer.json layout (module doc); returns `tokenizers.Tokenizer`."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers
    lines = [f"{system}User: What action should the robot take to {t.lower()}?Assistant: " for t in TASKS]
    tr = Tokenizer(models.BPE())
    tr.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tr.train_from_iterator(lines * 4, trainers.BpeTrainer(
        vocab_size=700, show_progress=False, min_frequency=2, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    merges = [m if isinstance(m, str) else " ".join(m) for m in json.loads(tr.to_str())["model"]["merges"]]
    chars = bytes_to_unicode()  # ids 0..255: the bytes in GPT-2's byte-to-unicode order, as Llama 3
    vocab = {chars[i]: i for i in range(256)}
    for i, m in enumerate(merges):
        vocab.setdefault(m.replace(" ", ""), 256 + i)
    assert sorted(vocab.values()) == list(range(len(vocab))) and vocab["\u0120"] == 220  # " " is 220, as Llama 3
    # unreachable placeholders up to 127999 (no merge makes them; U+3000 is no byte's character), so that
    # the specials keep their ids (`tokenizers` numbers added tokens from the model's vocabulary size)
    vocab.update({f"\u3000{i}": i for i in range(len(vocab), BOS)})
    added = [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
              "special": True} for i, c in sorted(SPECIALS.items())]
    bl = {"add_prefix_space": False, "trim_offsets": True, "use_regex": False}
    spec = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": LLAMA3_SPLIT}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", **bl}]},
        "post_processor": {"type": "Sequence", "processors": [
            {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
            {"type": "TemplateProcessing",
             "single": [{"SpecialToken": {"id": SPECIALS[BOS], "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
             "pair": [{"SpecialToken": {"id": SPECIALS[BOS], "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                      {"SpecialToken": {"id": SPECIALS[BOS], "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
             "special_tokens": {SPECIALS[BOS]: {"id": SPECIALS[BOS], "ids": [BOS], "tokens": [SPECIALS[BOS]]}}}]},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": True,
                  "vocab": vocab, "merges": merges},
    }
    tok = Tokenizer.from_str(json.dumps(spec))
    tok.save(os.path.join(out, "tokenizer.json"), pretty=False)
    return tok


def chat_template(root):
    """The chat template openvla-oft/convert_ckpt.py:50 writes into tokenizer_config.json (read from the checkout)."""
    tree = ast.parse(open(os.path.join(root, "openvla-oft", "convert_ckpt.py")).read())
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Subscript) and \
                getattr(node.targets[0].slice, "value", None) == "chat_template":
            return node.value.value
    raise AssertionError("no chat_template in convert_ckpt.py")


def make_processor(root, out):
    """LlavaProcessor(SiglipImageProcessor, the Llama 3 tokenizer) as the fine-tune saves it (module doc)."""
    from transformers import LlavaProcessor, PreTrainedTokenizerFast, SiglipImageProcessor
    tok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(out, "tokenizer.json"), bos_token=SPECIALS[BOS],
                                  eos_token=SPECIALS[STOP], pad_token=SPECIALS[PAD], model_max_length=131072,
                                  chat_template=chat_template(root), clean_up_tokenization_spaces=True)
    improc = SiglipImageProcessor()  # 224 x 224, bicubic, 1/255, mean = std = 0.5
    return LlavaProcessor(image_processor=improc, tokenizer=tok, patch_size=VIT["patch_size"],
                          vision_feature_select_strategy="full", image_token=SPECIALS[IMAGE],
                          num_additional_image_tokens=0)


# ----------------------------------------------------------------------------- the reference

def load_file_module(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def function(file, name, namespace, edit=None):
    """One top-level function of a reference file, compiled alone (its module's imports are not run);
    `edit` = (old, new): a textual change, asserted to occur exactly once in that function."""
    src = open(file).read()
    fn = [n for n in ast.parse(src, file).body if isinstance(n, ast.FunctionDef) and n.name == name]
    assert len(fn) == 1, (file, name)
    text = ast.get_source_segment(src, fn[0])
    if edit:
        assert text.count(edit[0]) == 1, (name, edit)
        text = text.replace(*edit)
    exec(compile("\n" * (fn[0].lineno - 1) + text, file, "exec"), namespace)  # line numbers kept
    return namespace[name]


def import_reference(root, pixels="float32"):
    """The fork's five modified transformers files and the wrapper, from the checkout `root`; the client
    casts the pixels to `pixels` (the released client's bfloat16 is made float32 for the golden values)."""
    import transformers
    import transformers.models.llava  # noqa: F401  (lazy packages: their submodules are not imported yet)
    import transformers.models.siglip  # noqa: F401
    assert transformers.__version__ == "4.51.3", transformers.__version__
    assert "transformers.models.llava.modeling_llava" not in sys.modules
    src = os.path.join(root, "transformers", "src", "transformers", "models")
    fork = {}
    for rel in FORK:
        name = "transformers.models." + rel.replace("/", ".")
        fork[rel.split("/")[1]] = load_file_module(name, os.path.join(src, rel + ".py"))
    oft = os.path.join(root, "openvla-oft")
    for pkg in ["prismatic", "prismatic.vla", "prismatic.models", "prismatic.training"]:
        m = types.ModuleType(pkg)
        m.__path__ = [os.path.join(oft, *pkg.split("."))]
        sys.modules[pkg] = m
    sys.meta_path.insert(0, _Finder(oft))
    consts = __import__("prismatic.vla.constants", fromlist=["x"])
    assert (consts.NUM_ACTIONS_CHUNK, consts.ACTION_DIM, consts.PROPRIO_DIM) == (8, 7, 8)
    assert consts.ACTION_PROPRIO_NORMALIZATION_TYPE == consts.NormalizationType.BOUNDS_Q99
    heads = __import__("prismatic.models.action_heads", fromlist=["x"])
    proj = __import__("prismatic.models.projectors", fromlist=["x"])
    bv = os.path.join(oft, "bitvla")
    bc = load_file_module("bitvla_constants", os.path.join(bv, "constants.py"))
    assert (bc.BITNET_DEFAULT_IMAGE_TOKEN_IDX, bc.BITNET_PROPRIO_PAD_IDX, bc.BITNET_ACTION_TOKEN_BEGIN_IDX,
            bc.BITNET_STOP_INDEX, bc.BITNET_DEFAULT_IMAGE_TOKEN) == (IMAGE, PROPRIO, PROPRIO, STOP, SPECIALS[IMAGE])
    cfgmod = load_file_module("configuration_bit_vla", os.path.join(bv, "configuration_bit_vla.py"))
    wrap = load_file_module("bitvla_for_action_prediction",
                            os.path.join(bv, "model", "bitvla_for_action_prediction.py"))
    assert wrap.LlavaForConditionalGeneration is fork["modeling_llava"].LlavaForConditionalGeneration
    assert wrap.BitVLAForActionPrediction.config_class is cfgmod.Bitvla_Config
    # the client: experiments/robot/{bitnet_utils,openvla_utils}.py, dataset/bitvla_transform.py (module doc)
    from PIL import Image
    from transformers.image_utils import get_image_size, to_numpy_array
    ns = {"np": np, "torch": torch, "copy": copy, "os": os, "json": json, "re": re, "Dict": Dict, "Any": Any,
          "List": List, "Optional": Optional, "NormalizationType": consts.NormalizationType,
          "ACTION_PROPRIO_NORMALIZATION_TYPE": consts.ACTION_PROPRIO_NORMALIZATION_TYPE,
          "LLAVA_DEFAULT_IMAGE_TOKEN": bc.LLAVA_DEFAULT_IMAGE_TOKEN,
          "BITNET_DEFAULT_IMAGE_TOKEN": bc.BITNET_DEFAULT_IMAGE_TOKEN,
          "get_image_size": get_image_size, "to_numpy_array": to_numpy_array, "DEVICE": torch.device("cpu"),
          "BITNET_VLA_IMAGE_SIZE": 224, "model_is_on_hf_hub": lambda path: False}
    ou = os.path.join(oft, "experiments", "robot", "openvla_utils.py")
    for name in ["normalize_proprio", "load_component_state_dict", "find_checkpoint_file", "_load_dataset_stats"]:
        function(ou, name, ns)
    # prepare_images_for_vla without its TensorFlow steps (module doc): check, then PIL RGB
    check_image_format = function(ou, "check_image_format", ns)
    ns["prepare_images_for_vla"] = lambda images, cfg, image_size: [
        (check_image_format(i), Image.fromarray(i).convert("RGB"))[1] for i in images]
    bt = os.path.join(bv, "dataset", "bitvla_transform.py")
    for name in ["replace_image_tokens", "llava_to_openai"]:
        function(bt, name, ns)
    cast = "pixel_values.to(DEVICE, dtype=torch.bfloat16)"
    client = function(os.path.join(oft, "experiments", "robot", "bitnet_utils.py"), "get_bitnet_vla_action", ns,
                      edit=(cast, cast.replace("bfloat16", pixels)))
    return types.SimpleNamespace(fork=fork, consts=consts, heads=heads, proj=proj, bc=bc, cfgmod=cfgmod, wrap=wrap,
                                 ns=ns, client=client)


def build(ref, gen):
    cfg = ref.cfgmod.Bitvla_Config(
        vision_config=dict(VIT), text_config=dict(TEXT), image_token_index=IMAGE, projector_hidden_act="gelu",
        vision_feature_select_strategy="full", vision_feature_layer=-1, multimodal_projector_bias=True,
        image_seq_length=256, norm_stats=None, n_action_bins=256, vocab_size=VOCAB)
    vla = ref.wrap.BitVLAForActionPrediction(cfg).float().eval()
    h = TEXT["hidden_size"]
    head = ref.heads.L1RegressionActionHead(input_dim=h, hidden_dim=h, action_dim=7).float().eval()
    pp = ref.proj.ProprioProjector(llm_dim=h, proprio_dim=8).float().eval()
    for m in [vla, head, pp]:
        rerandomize(m, gen)
    return vla, head, pp


def ternary(shape, gen):
    """A bf16 master weight whose absmean quantization is unambiguous (module doc): codes uniform on
    {-1, 0, 1}; |W| = alpha (0.75 + 0.5 u) where the code is +-1, alpha 0.15 (2 u - 1) where it is 0."""
    alpha = 1.5 / shape[1] ** 0.5
    code = torch.randint(-1, 2, shape, generator=gen).float()
    u = torch.rand(shape, generator=gen)
    w = torch.where(code != 0, code * alpha * (0.75 + 0.5 * u), alpha * 0.15 * (2 * u - 1))
    w = w.to(torch.bfloat16).float()
    mean = w.abs().mean().clamp(min=1e-5)
    s = 1.0 / mean
    for q in [(w * s).round().clamp(-1, 1), (w / mean).round().clamp(-1, 1)]:  # WeightQuant, quantize_to_int2
        assert torch.equal(q, code)
    ws = (w * s).abs()
    assert ws[code != 0].min() > 0.9 and ws[code == 0].max() < 0.3, (ws[code != 0].min(), ws[code == 0].max())
    return w


def rerandomize(module, gen):
    from torch.nn import Linear
    embeddings = {f"{n}.weight" for n, m in module.named_modules() if isinstance(m, torch.nn.Embedding)}
    bitlinear = {f"{n}.weight" for n, m in module.named_modules()
                 if isinstance(m, Linear) and type(m).__name__ == "BitLinear"}
    seen = set()
    with torch.no_grad():
        for name, t in module.state_dict(keep_vars=True).items():
            if t.data_ptr() in seen or t.dtype != torch.float32:
                continue
            seen.add(t.data_ptr())
            if name in bitlinear:
                t.data.copy_(ternary(t.shape, gen))
                continue
            r = torch.randn(t.shape, generator=gen, dtype=torch.float32)
            if t.ndim == 1 and ("norm" in name or name.rsplit(".", 1)[-1] == "weight"):
                v = 1.0 + 0.2 * r
            elif t.ndim == 1:
                v = 0.2 * r
            elif name in embeddings:
                v = 0.5 * r
            else:
                v = r / t[0].numel() ** 0.5
            t.data.copy_(v.to(torch.bfloat16).float())  # bf16-exact (module doc)


def act_quant(x):
    """ActQuant.forward (modeling_bitnet.py:104-110), split into the int8 codes and the per-token scale."""
    s = 127 / x.abs().max(dim=-1, keepdim=True).values.clamp_(min=1e-5)
    return (x * s).round().clamp(-128, 127), s[..., 0]


# ----------------------------------------------------------------------------- the client

def load(ref, folder):
    """The checkpoint folder as the LIBERO client loads it (run_libero_eval_bitnet.py:150-186, 485-491:
    get_bitnet_vla, get_proprio_projector, get_action_head, get_processor, set_constant), in float32."""
    from transformers import AutoConfig, AutoImageProcessor, AutoModelForVision2Seq, AutoProcessor
    from transformers import LlavaProcessor, SiglipImageProcessor
    Cfg, ns = ref.cfgmod.Bitvla_Config, ref.ns
    AutoConfig.register("bitvla", Cfg)  # bitnet_utils.py:55-58
    AutoImageProcessor.register(Cfg, SiglipImageProcessor)
    AutoProcessor.register(Cfg, LlavaProcessor)
    AutoModelForVision2Seq.register(Cfg, ref.wrap.BitVLAForActionPrediction)
    vla = AutoModelForVision2Seq.from_pretrained(folder, torch_dtype=torch.float32, trust_remote_code=True).eval()
    ns["_load_dataset_stats"](vla, folder)
    bc = ref.bc
    vla.set_constant(image_token_idx=bc.BITNET_DEFAULT_IMAGE_TOKEN_IDX, proprio_pad_idx=bc.BITNET_PROPRIO_PAD_IDX,
                     ignore_idx=bc.BITNET_IGNORE_INDEX, action_token_begin_idx=bc.BITNET_ACTION_TOKEN_BEGIN_IDX,
                     stop_index=bc.BITNET_STOP_INDEX)
    assert vla.config.text_config._attn_implementation == "eager"  # BitNet has no SDPA class
    assert vla.config.vision_config._attn_implementation == "eager"  # module doc
    assert type(vla.vision_tower.vision_model.encoder.layers[0].self_attn).__name__ == "SiglipAttention"
    assert not hasattr(vla.vision_tower.vision_model, "post_layernorm")
    assert vla.language_model.lm_head.weight is vla.language_model.model.embed_tokens.weight  # tied
    h = vla.config.text_config.hidden_size
    pp = ref.proj.ProprioProjector(llm_dim=h, proprio_dim=8).eval()
    pp.load_state_dict(ns["load_component_state_dict"](ns["find_checkpoint_file"](folder, "proprio_projector")))
    head = ref.heads.L1RegressionActionHead(input_dim=h, hidden_dim=h, action_dim=7).eval()
    head.load_state_dict(ns["load_component_state_dict"](ns["find_checkpoint_file"](folder, "action_head")))
    processor = AutoProcessor.from_pretrained(folder, trust_remote_code=True)
    assert type(processor).__name__ == "LlavaProcessor" and processor.patch_size == VIT["patch_size"]
    return vla, head, pp, processor


def predict(ref, vla, head, pp, processor, images, state):
    """get_bitnet_vla_action with the eval's GenerateConfig defaults (run_libero_eval_bitnet.py:102-106)."""
    cfg = types.SimpleNamespace(num_images_in_input=2, use_proprio=True, unnorm_key=SUITE, num_open_loop_steps=8,
                                center_crop=True)
    obs = {"full_image": images[0], "wrist_image": images[1], "state": state.copy()}
    with torch.no_grad():
        actions = ref.client(cfg, vla, processor, obs, TASK, action_head=head, proprio_projector=pp)
    return np.stack(actions), obs["state"]  # the client replaces the state by its normalized value (:183)


def check(root, folder):
    """Reload the fixture in a fresh process as the client does and reproduce golden `actions` bit for bit."""
    ref = import_reference(root)
    with safe_open(os.path.join(folder, "golden.safetensors"), "pt") as f:
        g = {k: f.get_tensor(k) for k in f.keys()}
    vla, head, pp, processor = load(ref, folder)
    seen = {}
    hook = head.model.register_forward_pre_hook(lambda m, a: seen.__setitem__("x", a[0]))
    actions, _ = predict(ref, vla, head, pp, processor, [g["image.0"].numpy(), g["image.1"].numpy()],
                         g["state"].double().numpy())
    hook.remove()
    d = (torch.from_numpy(actions).float() - g["actions"]).abs().max().item()
    print(f"check {folder}: actions max |diff| {d:.3g}")
    assert d == 0.0 and torch.equal(seen["x"][0].reshape(56, -1), g["actions_hidden"])


# ----------------------------------------------------------------------------- main

def save_checkpoint(root, out, tok, vla, head, pp, stats):
    """The folder the fine-tune leaves (module doc)."""
    vla.config.norm_stats = stats
    sd = vla.state_dict()
    assert all(torch.equal(v.to(torch.bfloat16).float(), v) for v in sd.values())
    # save_pretrained of a bf16 copy: config.json (the diff against the defaults) and model.safetensors
    # (the tied lm_head left out, as save_pretrained does)
    copy.deepcopy(vla).to(torch.bfloat16).save_pretrained(out, safe_serialization=True)
    with safe_open(os.path.join(out, "model.safetensors"), "pt") as f:
        assert sorted(f.keys()) == sorted(k for k in sd if k != "language_model.lm_head.weight")
        assert all(torch.equal(f.get_tensor(k).float(), sd[k]) for k in f.keys())
    make_processor(root, out).save_pretrained(out)
    from tokenizers import Tokenizer  # save_pretrained writes tokenizer.json indented: the same, on one line
    path = os.path.join(out, "tokenizer.json")
    saved = Tokenizer.from_file(path)
    assert json.loads(saved.to_str()) == json.loads(tok.to_str())
    saved.save(path, pretty=False)
    json.dump(stats, open(os.path.join(out, "dataset_statistics.json"), "w"), indent=1)

    class DDP(torch.nn.Module):  # what training saves: the DistributedDataParallel wrapper's state dict
        def __init__(self, m):
            super().__init__()
            self.module = m
    torch.save({k: v.to(torch.bfloat16) for k, v in DDP(head).state_dict().items()},
               os.path.join(out, "action_head--10000_checkpoint.pt"))
    torch.save(DDP(pp).state_dict(), os.path.join(out, "proprio_projector--10000_checkpoint.pt"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--upstream", required=True, help="a checkout of ustcwhy/BitVLA")
    ap.add_argument("--out", default=os.path.join(HERE, "..", "..", "tests", "fixtures", "bitvla-tiny"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--check", metavar="DIR", help="reload a fixture folder and reproduce its actions")
    args = ap.parse_args()
    torch.set_num_threads(1)
    root = os.path.abspath(args.upstream)
    if args.check:
        return check(root, os.path.abspath(args.check))
    out = os.path.abspath(args.out)
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)

    ref = import_reference(root)
    tok = build_tokenizer(out, chat_template(root).split("<|eot_id|>")[0])
    vla, head, pp = build(ref, gen)
    # the placeholder ids no text reaches get all-zero embeddings: the fixture's safetensors
    # then compresses (git) to the rows a prompt can read
    n_real = sum(1 for t in tok.get_vocab(with_added_tokens=False) if not t.startswith("\u3000"))
    with torch.no_grad():
        vla.get_input_embeddings().weight[n_real:BOS] = 0.0
    stats = make_stats(gen)
    imgs = frames(gen)
    state = (torch.rand(8, generator=gen) * 3 - 1.5).double().numpy()  # float32 values, as stored
    save_checkpoint(root, out, tok, vla, head, pp, stats)
    del vla, head, pp
    vla, head, pp, processor = load(ref, out)  # what runs is the folder as the client loads it

    golden, rec = {}, {"lm_layers": []}
    hooks = []
    vt = vla.vision_tower
    hooks.append(vt.register_forward_hook(lambda m, a, o: rec.update(
        pixels=a[0].detach().clone(), vit_hidden=[x.detach().clone() for x in o.hidden_states])))
    hooks.append(vla.multi_modal_projector.register_forward_hook(
        lambda m, a, o: rec.__setitem__("patches", o.detach().clone())))
    lm = vla.language_model

    def lm_hook(m, args, kwargs, o):
        rec["lm_in"] = kwargs["inputs_embeds"][0].detach().clone()
        rec["hidden"] = [x[0].detach().clone() for x in o.hidden_states]
        assert kwargs["use_bi_attn"] is True and bool(kwargs["attention_mask"].all())
    hooks.append(lm.register_forward_hook(lm_hook, with_kwargs=True))
    for layer in lm.model.layers:
        hooks.append(layer.register_forward_hook(lambda m, a, o: rec["lm_layers"].append(o[0][0].detach().clone())))
    sites = {"lm0_q": lm.model.layers[0].self_attn.q_proj, "vit0_fc1": vt.vision_model.encoder.layers[0].mlp.fc1}
    for key, mod in sites.items():
        hooks.append(mod.register_forward_hook(
            lambda m, a, o, key=key: rec.__setitem__(key, (a[0][0].detach().clone(), o[0].detach().clone()))))
    hooks.append(pp.register_forward_hook(lambda m, a, o: golden.__setitem__("proprio_feat", o.detach().clone())))
    hooks.append(head.model.register_forward_pre_hook(
        lambda m, a: rec.__setitem__("head_in", a[0][0].detach().clone())))
    hooks.append(head.model.fc1.register_forward_hook(
        lambda m, a, o: golden.__setitem__("head.x0", torch.relu(o)[0].detach().clone())))
    for b in range(len(head.model.mlp_resnet_blocks)):
        hooks.append(head.model.mlp_resnet_blocks[b].register_forward_hook(
            lambda m, a, o, b=b: golden.__setitem__(f"head.blk.{b}", o[0].detach().clone())))
    hooks.append(head.model.register_forward_hook(
        lambda m, a, o: golden.__setitem__("actions_norm", o[0].detach().clone())))
    plain = type(processor.tokenizer)

    def tokenize(self, text, **kw):  # what the client tokenizes (bitnet_utils.py:163), checked against `tokenizers`
        enc = plain.__call__(self, text, **kw)
        rec["prompt"], rec["ids"] = text, list(enc.input_ids)
        assert rec["ids"] == tok.encode(text).ids
        return enc
    processor.tokenizer.__class__ = type("Recording", (plain,), {"__call__": tokenize})
    actions, proprio = predict(ref, vla, head, pp, processor, [i.numpy() for i in imgs], state)
    for hk in hooks:
        hk.remove()
    processor.tokenizer.__class__ = plain

    # the layout, checked on the recorded tensors
    ids = rec["ids"]
    n, n_act = len(ids), 56
    L = n + n_act + 1
    img0 = ids.index(IMAGE)
    prow = ids.index(PROPRIO)
    assert ids[0] == BOS and ids[img0: img0 + 512] == [IMAGE] * 512 and prow == img0 + 512 and ids.count(IMAGE) == 512
    assert ids.count(PROPRIO) == 1 and ids[-1] != STOP and BOS not in ids[1:]
    lm_in, hidden, layers = rec["lm_in"], rec["hidden"], rec["lm_layers"]
    emb = vla.get_input_embeddings().weight.detach()
    assert lm_in.shape == (L, TEXT["hidden_size"]) and len(hidden) == len(layers) + 1 == TEXT["num_hidden_layers"] + 1
    patches = rec["patches"].reshape(512, -1)
    assert torch.equal(lm_in[img0: img0 + 512], patches) and torch.equal(lm_in[prow], golden["proprio_feat"][0])
    text_rows = [i for i in range(n) if ids[i] not in (IMAGE, PROPRIO)]
    assert torch.equal(lm_in[text_rows], emb[[ids[i] for i in text_rows]])
    assert not lm_in[n: n + n_act].any() and torch.equal(lm_in[-1], emb[STOP])
    for i in range(len(layers) - 1):
        assert torch.equal(hidden[i + 1], layers[i])
    assert torch.equal(hidden[-1], lm.model.norm(layers[-1]))  # hidden_states[-1] is after the final norm
    start = n - 1  # the head's rows: shifted one left of the 56 slots [n, n + 56)
    assert torch.equal(rec["head_in"].reshape(n_act, -1), hidden[-1][start: start + n_act])
    vh = rec["vit_hidden"]
    assert len(vh) == VIT["num_hidden_layers"] + 1
    with torch.no_grad():
        assert torch.equal(vla.multi_modal_projector(vh[-1]), rec["patches"])  # feature layer -1, "full": all 256
        # bidirectional: position 0 depends on the last (stop) row; the causal (stock) mask would not
        bumped = lm_in.clone()
        bumped[-1] += 1.0
        run = lambda x, bi: lm(inputs_embeds=x[None], attention_mask=torch.ones(1, L, dtype=torch.long),
                               output_hidden_states=True, use_bi_attn=bi).hidden_states[-1][0]
        again = run(lm_in, True)
        assert torch.equal(again, hidden[-1])
        bidir = (run(bumped, True)[0] - again[0]).abs().max().item()
        causal = run(lm_in, False)
        vs_causal = (causal - again).abs().max().item()
        assert bidir > 1e-4 and vs_causal > 1e-3 and torch.equal(run(bumped, False)[0], causal[0])
    # BitLinear sites: the int8 activation codes and scale, the ternary codes and weight mean
    int_diff = {}
    for key, mod in sites.items():
        x, y = rec[key]
        codes, s = act_quant(x)
        w = mod.weight.detach()
        wmean = w.abs().mean().clamp(min=1e-5)
        wcodes = (w * (1.0 / wmean)).round().clamp(-1, 1)
        ref_y = torch.nn.functional.linear(codes / s[:, None], wcodes / (1.0 / wmean), mod.bias)
        integer = (codes @ wcodes.T) / (s[:, None] * (1.0 / wmean)) + (0 if mod.bias is None else mod.bias)
        assert (ref_y - y).abs().max() <= 1e-6 * y.abs().max()
        int_diff[key] = (integer - y).abs().max().item()
        golden.update({f"bit.{key}.x": x, f"bit.{key}.xcodes": codes, f"bit.{key}.xs": s, f"bit.{key}.y": y,
                       f"bit.{key}.wcodes": wcodes, f"bit.{key}.wmean": wmean.reshape(1)})

    # the reference's own sensitivity: the same forward with SigLIP's SDPA attention (the same math,
    # other float rounding), which flips a few int8 codes: how far the chunk moves is the bound a float
    # reimplementation can be held to end to end (stages fed the reference's inputs are held to 1e-5)
    siglip = sys.modules[type(vt.vision_model.encoder.layers[0].self_attn).__module__]
    for layer in vt.vision_model.encoder.layers:
        layer.self_attn.__class__ = siglip.SiglipSdpaAttention
    sdpa, _ = predict(ref, vla, head, pp, processor, [i.numpy() for i in imgs], state)
    for layer in vt.vision_model.encoder.layers:
        layer.self_attn.__class__ = siglip.SiglipAttention
    spread = float(np.abs(sdpa - actions).max())
    assert 0.0 < spread < 0.2, spread
    golden["actions_sdpa"] = torch.from_numpy(sdpa.astype(np.float64)).float()

    golden["lm_in"] = lm_in
    for layer in range(1, TEXT["num_hidden_layers"] + 1):
        golden[f"hidden.{layer}"] = layers[layer - 1]
    golden["actions_hidden"] = hidden[-1][start: start + n_act]
    golden["patches"] = patches
    for c in range(2):
        golden[f"vit.{c}"] = vh[-1][c]
    for i in range(VIT["num_hidden_layers"]):
        golden[f"vit.0.hidden.{i}"] = vh[i][0]  # embeddings (i = 0) and layer i's output, camera 0
    for i, img in enumerate(imgs):
        golden[f"image.{i}"] = img
    golden["pixels.1"] = rec["pixels"][1]  # the wrist camera, resized by the processor
    golden["ids"] = torch.tensor(ids, dtype=torch.float32)
    golden["proprio_norm"] = torch.from_numpy(proprio).float()
    golden["state"] = torch.from_numpy(state).float()
    golden["actions"] = torch.from_numpy(actions.astype(np.float64)).float()
    assert golden["actions_norm"].shape == (8, 7) and golden["actions"].shape == (8, 7)
    save_file({k: v.contiguous() for k, v in sorted(golden.items())}, os.path.join(out, "golden.safetensors"))

    import tokenizers
    import transformers
    info = {
        "generator": "tools/golden/bitvla.py", "upstream": "ustcwhy/BitVLA 3738a94",
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "tokenizers": tokenizers.__version__, "numpy": np.__version__},
        "seed": args.seed, "suite": SUITE, "task": TASK, "prompt": rec["prompt"], "ids": ids,
        "ids_model": ids + [1] * n_act + [STOP],
        "layout": {"ranges": "[start, end) in the LM sequence; positions 0..seq_len-1; no attention mask",
                   "seq_len": L, "bos": 0, "image.0": [img0, img0 + 256], "image.1": [img0 + 256, img0 + 512],
                   "proprio": prow, "prompt_end": n, "slots": [n, n + n_act], "stop": L - 1,
                   "head_rows": [start, start + n_act]},
        "bitlinear_wmean": {n: m.weight.abs().mean().item() for n, m in vla.named_modules()
                            if type(m).__name__ == "BitLinear"},
        "checks": {"pos0_change_when_stop_input_bumped": bidir, "max_diff_vs_causal": vs_causal,
                   "bit_sites_integer_formulation_max_diff": int_diff,
                   "actions_max_diff_eager_vs_sdpa_siglip": spread},
        "head_input": "actions_hidden (56, hidden) reshaped (8, 7 * hidden): row i = rows 7i..7i+6 side by side",
        "frames": FRAMES, "sizes": {"vit": VIT, "text": TEXT},
        "weights_dtype": "bfloat16 (bf16-exact values; goldens computed in float32)",
    }
    json.dump(info, open(os.path.join(out, "golden.json"), "w"), indent=1)
    print("prompt", repr(rec["prompt"][:200]), "...")
    print("ids", len(ids), "actions", actions)
    print("wrote", out)


if __name__ == "__main__":
    main()
