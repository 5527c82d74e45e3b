"""Golden fixture for OpenVLA-OFT: moojink/openvla-oft's own model code, random weights.

Rerun (offline; the venv and the upstream checkout are outside the repo, CI never needs them):

    # the reference, a public GitHub repository (MIT), at the commit the fixture was made from
    git clone https://github.com/moojink/openvla-oft /tmp/upstream/openvla-oft
    git -C /tmp/upstream/openvla-oft checkout 213c5ff
    HF_HUB_OFFLINE=1 /work/venv-lerobot061/bin/python tools/golden/openvla_oft.py \
        --upstream /tmp/upstream/openvla-oft                       # tests/fixtures/openvla-oft-tiny
    HF_HUB_OFFLINE=1 /work/venv-lerobot061/bin/python tools/golden/openvla_oft.py \
        --upstream /tmp/upstream/openvla-oft --check tests/fixtures/openvla-oft-tiny
        # reload the folder in a fresh process as the LIBERO client does (openvla_utils.py's
        # load_component_state_dict for the .pt files) and reproduce `actions` bit for bit

The venv is the lerobot 0.6.1 one of the other golden tools (torch 2.10, transformers 5.5.4, timm
1.0.31, tokenizers 0.22, diffusers 0.39 for the import of action_heads.py); only the files under
prismatic/ of the checkout are imported (its package __init__ files, which pull its training stack,
are skipped), plus `normalize_proprio` and (for --check) `load_component_state_dict`, compiled alone
from experiments/robot/openvla_utils.py (the module itself imports tensorflow). The default seed is
0; regenerating gives byte-identical files.

What runs is the reference's `OpenVLAForActionPrediction.predict_action`
(prismatic/extern/hf/modeling_prismatic.py:944-1058) with its `L1RegressionActionHead` and
`ProprioProjector` (prismatic/models/action_heads.py:84-109, projectors.py:6-24), on the LIBERO
constants of prismatic/vla/constants.py (chunk 8, action 7, proprio 8, BOUNDS_Q99; Llama-2 ids:
ACTION_TOKEN_BEGIN_IDX 31743, STOP_INDEX 2), as the LIBERO client calls it
(experiments/robot/openvla_utils.py:715-798, get_vla_action: two images, proprio, L1 head). What the reference does,
checked in its code, and reproduced here by running it:
- prompt `In: What action should the robot take to {task.lower()}?\\nOut:` (openvla_utils.py:757),
  tokenized by the processor's Llama tokenizer (BOS 1 first, no EOS); `predict_action` appends the
  "empty" token 29871 (SentencePiece "▁") when the ids do not end with it (modeling_prismatic.py:
  972-976), so n = len(ids) + 1 and NUM_PROMPT_TOKENS = n - 1 (:985);
- it appends 56 = 8 x 7 placeholder ids (1) and the stop id 2 (:734-755); labels are -100 over the
  prompt, 31744 over the rest, 2 at the stop (:757-770); `get_current_action_mask |
  get_next_actions_mask` (prismatic/training/train_utils.py:8-39) selects exactly the 56
  placeholders (the stop label 2 < 31743); their embeddings are multiplied by ~mask, i.e. ZEROED
  (:889-891), not replaced by learned queries;
- images: each camera gives 6 channels (DINOv2's normalisation, then SigLIP's; the processor's
  `torch.vstack`, processing_prismatic.py:128-145), cameras concatenated on dim 1 (openvla_utils.py:
  760-770); the model splits [6] * n then [3, 3]: featurizer = timm_model_ids[0] = DINOv2,
  fused_featurizer = SigLIP (modeling_prismatic.py:186-228; configuration_prismatic.py:36);
  per camera cat(dino, siglip) on the feature axis, cameras on the patch axis (256 each);
- projector fc1 -> GELU -> fc2 -> GELU -> fc3 (:231-262); the ProprioProjector feature of the
  normalised state is appended after the patches (:449-459) and NUM_PATCHES = 256 * 2 + 1 = 513
  (:1017-1021);
- LM sequence (`_build_multimodal_attention`, :461-485): [BOS, 512 patches, proprio, ids[1:n]
  (ending in 29871), 56 zeros, stop 2]: length L = 1 + 513 + (n - 1) + 56 + 1, positions 0..L-1;
- head input: `hidden_states[-1]` (after the final RMSNorm, in 4.40.1 and 5.5.4 alike; asserted
  below) rows [NUM_PATCHES + NUM_PROMPT_TOKENS, + 56) = [512 + n, 568 + n) (:913-918): that window
  is SHIFTED ONE LEFT of the 56 zeroed slots (which sit at [513 + n, 569 + n)): it holds the 29871
  token and the first 55 slots, not the last one. Training reads the same rows
  (vla-scripts/finetune.py:343-345, 375-383: `last[:, num_patches:-1]` masked with labels[:, 1:]).
  `L1RegressionActionHead.predict_action` reshapes them (1, 8, 7 * hidden) (row i = the window's
  tokens 7i..7i+6 side by side) into MLPResNet(num_blocks=2): LN -> fc1 -> ReLU -> 2 x [x + ReLU(
  Linear(LN(x)))] -> LN -> fc2 (action_heads.py:38-82; all LayerNorm eps 1e-5);
- un-normalisation BOUNDS_Q99 with mask, no clip: `where(mask, 0.5 (a + 1) (q99 - q01 + 1e-8) +
  q01, a)` (:772-791); proprio normalised by the client's `normalize_proprio` (BOUNDS_Q99 with a
  mask, then clipped to [-1, 1], masked-out dims included; openvla_utils.py:649-679).

Changes, all made in this process only:
- bidirectional Llama, as moojink/transformers-openvla-oft bc339d9 (the 4.40.1 fork the reference
  pins) makes it: its only change (src/transformers/models/llama/modeling_llama.py:669-731,
  LlamaSdpaAttention) calls SDPA with `is_causal=False` and replaces the 4-D causal mask by its
  last row repeated, which without padding (inference: batch 1, attention_mask all ones) is all
  zeros: no mask at all. Stock transformers 5.5.4 is causal; the emulation is a forward pre-hook on
  the language model that asserts the 2-D mask is all ones and passes a 4-D all-zero additive float
  mask instead (masking_utils returns a 4-D mask as is; SDPA then runs with is_causal False). The
  tool asserts that position 0's last hidden state changes when the last token's input changes,
  and that the result differs from stock (causal) transformers, where it does not. The released
  model runs SDPA: get_vla leaves attn_implementation="flash_attention_2" commented out
  (openvla_utils.py:282-290) and 4.40.1 then picks SDPA (fork modeling_utils.py:1455-1466,
  1611-1637, which reads `_supports_sdpa` on the class, where the reference's property object is
  truthy). The fork patches only LlamaSdpaAttention: with eager or flash_attention_2 it would still
  be causal. SDPA is used here too;
- sizes: timm.create_model builds the real timm models (`vit_large_patch14_reg4_dinov2.lvd142m`,
  `vit_so400m_patch14_siglip_224`: registers, LayerScale, no_embed_class, no class token, exact
  GELU, img_size 224) narrowed and 3 blocks deep (the reference reads block 2 of 3, its
  penultimate, as the released 23 of 24 and 26 of 27), with timm's 16 heads each: DINOv2 64 wide
  (MLP 128), SigLIP 48 wide (MLP 72) (as tools/golden/vla_adapter.py); Llama from transformers' own
  LlamaConfig (llm_backbone_id "llama2-7b-pure" -> model_type llama,
  configuration_prismatic.py:59): 32 wide, 4 layers, 4 heads of 8 (no GQA, as Llama-2-7B), MLP 86
  (Llama-2's 11008 / 4096 ratio), no bias, rope_theta 1e4, rms_norm_eps 1e-6, untied lm_head,
  vocab 32064. OpenVLA's HF config is made by scripts/extern/convert_prismatic_weights_to_hf.py:
  128-151 as PrismaticConfig without text_config, i.e. 4.40.1's LlamaConfig() defaults (fork
  configuration_llama.py:127-136: rms_norm_eps 1e-6, not Llama-2-7b-hf's 1e-5; rope_theta 1e4;
  untied) with vocab_size 32000 + pad_to_multiple_of 64 = 32064 and pad_token_id 32000 (<PAD>,
  added to the tokenizer: prismatic/models/backbones/llm/llama2.py:73-76); vla.cpp hard-codes
  1e-6 too;
- the tokenizer is built here (no network, no sentencepiece): a SentencePiece-style BPE with
  Llama-2's tokenizer.json layout as transformers 4.40 converts it (normalizer Prepend("▁") +
  Replace(" ", "▁"), no pre-tokenizer, BPE with byte_fallback and fuse_unk, TemplateProcessing
  "<s> $A"), and Llama-2's id layout: <unk> 0, <s> 1, </s> 2, <0x00>..<0xFF> 3..258, merged pieces
  from 259, placeholders "<unused{id}>" up to 29870 (unreachable: no merge makes them), single
  characters from 29871 with "▁" first (as Llama-2's 29871 "▁", 29872 "e", ...), <PAD> 32000
  (added, as OpenVLA's); ids from the last character to 31999 are unused. "\\n" has no piece, so it
  falls back to <0x0A> = 13 as in Llama-2. No tokenizer.model (the slow SentencePiece file) is
  written. transformers (PreTrainedTokenizerFast over the file, as 4.40's LlamaTokenizerFast) and
  `tokenizers` are asserted to give the same ids;
- timm 1.x: the model refuses timm outside {0.9.10, 0.9.11, 0.9.12, 0.9.16} (`timm.__version__`
  is set to 0.9.16 for the check) and `get_intermediate_layers` returns a list where 0.9 returned a
  tuple, which `unpack_tuple` expects (it is made to unpack a list too); the tensor is the same;
- transformers 5: `post_init` calls `tie_weights(recompute_mapping=...)`, which the reference's
  `tie_weights()` (forwarding to the language model's) is made to accept; it reads the
  `_supports_sdpa` property, which forwards to the language model's (Llama: True), during
  `__init__` before the language model exists (4.40.1 read it on the class), so it becomes True;
  `transformers.tokenization_utils` no longer has the four type names processing_prismatic.py
  imports from it (PaddingStrategy, PreTokenizedInput, TextInput, TruncationStrategy): they are set
  on it from tokenization_utils_base, which defines them;
- float32 throughout (the reference runs bf16: get_vla loads torch_dtype bfloat16, the head is cast
  to bf16, openvla_utils.py:285, 492, and the processor output is cast to bf16, :760, 765); every tensor
  re-randomized (norm gains 1 + 0.2 N, biases 0.2 N, matrices N / sqrt(fan_in), LayerScale 0.5 +
  0.2 N, embeddings 0.5 N) and then rounded to bfloat16 values, so the checkpoint can be stored in
  bf16 (as released: finetune.py:655-661 merges and saves the VLA from bf16; the head is trained
  and saved in bf16, :889-896; the proprio projector in f32, :879-885) without changing a single
  golden value: the forward is float32 on bf16-exact weights;
- inputs: two cameras (primary 224 x 224, wrist 200 x 240: the processor's bicubic stretch),
  straight into the processor (the client's TF JPEG / lanczos / center-crop steps are not run, as in
  vla_adapter.py); the processor is the reference's PrismaticImageProcessor with
  PREPROCESSOR (openvla/openvla-7b's preprocessor_config.json, which the OFT finetunes save again
  through processor.save_pretrained, finetune.py:627; the same file as VLA-Adapter's
  pretrained_models/configs/preprocessor_config.json @838a36d; not in this repository, so from that
  copy): its tvf_normalize_params are ImageNet's statistics rounded to bf16 for DINOv2
  ([0.484375, 0.455078125, 0.40625] / [0.228515625, 0.2236328125, 0.224609375]), 0.5 for SigLIP;
  the state normalised by the reference's normalize_proprio; one suite "libero_spatial_no_noops".

Files (tests/fixtures/openvla-oft-tiny): the checkpoint as the reference saves it: config.json
(OpenVLAConfig), model.safetensors (the VLA's state dict but the untied lm_head, which the L1
head never reads: 2 MB here; bf16, or f32 with --f32),
action_head--latest_checkpoint.pt (bf16, or f32 with --f32) and
proprio_projector--latest_checkpoint.pt (f32) (torch.save of the DDP-wrapped modules' state dicts:
keys prefixed "module."), dataset_statistics.json, preprocessor_config.json, tokenizer.json,
tokenizer_config.json; golden.json (task, prompt, ids, the sequence layout, sizes, versions) and
golden.safetensors (float32 unless said): image.{i} u8 [H, W, 3]; pixels.1.dino, pixels.1.sig [3,
224, 224] (the wrist camera, which the processor resizes); dino.{i} [256, 64], sig.{i} [256, 48]
(each tower's output); patches [512, 32] (projector); proprio_norm [8], state [8] (raw);
proprio_feat [1, 32]; lm_in [L, 32] (the LM's whole input embeddings); hidden.{l} [56, 32] for l in
1..4 (decoder layer l's output, before the final norm, at the head's 56 rows); actions_hidden [56,
32] (the final-normed last hidden state at those rows, the head's input); head.x0 [8, 32] (after
fc1 + ReLU); head.blk.{i} [8, 32]; actions_norm [8, 7] (head output); actions [8, 7] (unnormalised,
as predict_action returns); ids [n - 1] (the tokenizer's ids, without 29871).
"""
import argparse
import ast
import importlib.machinery
import importlib.util
import json
import os
import shutil
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

SUITE = "libero_spatial_no_noops"
TASK = "Pick up the black bowl between the plate and the ramekin and place it on the plate"
DINO = dict(embed_dim=64, depth=3, num_heads=16, mlp_ratio=2.0)
SIG = dict(embed_dim=48, depth=3, num_heads=16, mlp_ratio=1.5)
VOCAB = 32064  # Llama-2 32000 + <PAD>, padded to a multiple of 64
TEXT = dict(hidden_size=32, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=4,
            intermediate_size=86, rms_norm_eps=1e-6, rope_theta=10000.0, max_position_embeddings=2048,
            tie_word_embeddings=False, hidden_act="silu", attention_bias=False, mlp_bias=False,
            attention_dropout=0.0, vocab_size=VOCAB, pad_token_id=32000, bos_token_id=1, eos_token_id=2)
FRAMES = [(224, 224), (200, 240)]
TIMM_VERSION = []  # the real one, before the model's check is satisfied
EMPTY, STOP, PAD = 29871, 2, 32000
# openvla/openvla-7b's preprocessor_config.json (see the module doc)
PREPROCESSOR = {
    "auto_map": {"AutoImageProcessor": "processing_prismatic.PrismaticImageProcessor",
                 "AutoProcessor": "processing_prismatic.PrismaticProcessor"},
    "image_processor_type": "PrismaticImageProcessor", "image_resize_strategy": "resize-naive",
    "input_sizes": [[3, 224, 224], [3, 224, 224]], "interpolations": ["bicubic", "bicubic"],
    "means": [[0.485, 0.456, 0.406], [0.5, 0.5, 0.5]], "processor_class": "PrismaticProcessor",
    "stds": [[0.229, 0.224, 0.225], [0.5, 0.5, 0.5]],
    "tvf_crop_params": [{"output_size": [224, 224]}, {"output_size": [224, 224]}],
    "tvf_do_letterbox": False, "tvf_letterbox_fill": None,
    "tvf_normalize_params": [
        {"inplace": False, "mean": [0.484375, 0.455078125, 0.40625], "std": [0.228515625, 0.2236328125, 0.224609375]},
        {"inplace": False, "mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5]}],
    "tvf_resize_params": [{"antialias": True, "interpolation": 3, "max_size": None, "size": [224, 224]},
                          {"antialias": True, "interpolation": 3, "max_size": None, "size": [224, 224]}],
    "use_fused_vision_backbone": True,
}
# LIBERO-style instructions the tokenizer is trained on (the fixture's task among them)
TASKS = [
    TASK, "pick up the black bowl on the stove and place it on the plate", "open the middle drawer of the cabinet",
    "put the bowl on the plate", "put the wine bottle on top of the cabinet", "open the top drawer and put the bowl inside",
    "push the plate to the front of the stove", "put the cream cheese in the bowl", "turn on the stove",
    "put the bowl on top of the cabinet", "pick up the alphabet soup and place it in the basket",
    "pick up the ketchup and place it in the basket", "put both the soup and the sauce in the basket",
    "stack the left bowl on the right bowl and place them in the tray", "put the yellow and white mug in the microwave",
]


# ----------------------------------------------------------------------------- the tokenizer

def build_tokenizer(out):
    """A SentencePiece-style BPE in Llama-2's tokenizer.json layout and id layout (module doc), trained
    on the instructions; returns the `tokenizers.Tokenizer` and writes tokenizer.json and
    tokenizer_config.json (OpenVLA's: add_bos_token, <PAD> as pad token, LlamaTokenizer class)."""
    from collections import Counter

    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers
    sp = "\u2581"
    lines = []
    for t in TASKS:
        lines += f"In: What action should the robot take to {t.lower()}?\nOut: ".split("\n")
    norm = normalizers.Sequence([normalizers.Prepend(sp), normalizers.Replace(" ", sp)])
    tr = Tokenizer(models.BPE(unk_token="<unk>"))
    tr.normalizer = norm  # words split at "▁" for training only, as SentencePiece's pieces never span one
    tr.pre_tokenizer = pre_tokenizers.Split(sp, behavior="merged_with_next")
    tr.train_from_iterator(lines * 4, trainers.BpeTrainer(vocab_size=260, show_progress=False, min_frequency=2))
    trained = json.loads(tr.to_str())["model"]
    merges = [m if isinstance(m, str) else " ".join(m) for m in trained["merges"]]
    merged = ["".join(m.split(" ")) for m in merges]
    chars = Counter(c for line in lines for c in norm.normalize_str(line))
    chars = sorted(chars, key=lambda c: (c != sp, -chars[c], c))  # "▁" first, then by frequency
    assert set(chars) | set(merged) >= set(trained["vocab"]) and "\n" not in chars
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    vocab.update({f"<0x{b:02X}>": 3 + b for b in range(256)})
    vocab.update({p: 259 + i for i, p in enumerate(merged)})
    # the ids between the merged pieces and the characters are unreachable placeholders (Llama-2 has
    # merged pieces there): no merge makes them and their characters have no pieces
    vocab.update({f"<unused{i}>": i for i in range(259 + len(merged), EMPTY)})
    vocab.update({c: EMPTY + i for i, c in enumerate(chars)})
    assert sorted(vocab.values()) == list(range(EMPTY + len(chars))) and EMPTY + len(chars) <= PAD
    assert vocab[sp] == EMPTY

    def special(content, id_):
        return {"id": id_, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
                "normalized": False, "special": True}
    spec = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [special("<unk>", 0), special("<s>", 1), special("</s>", 2), special("<PAD>", PAD)],
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": sp}, {"type": "Replace", "pattern": {"String": " "}, "content": sp}]},
        "pre_tokenizer": None,
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "<s>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": sp}, "content": " "}, {"type": "ByteFallback"},
            {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": vocab, "merges": merges},
    }
    tok = Tokenizer.from_str(json.dumps(spec))
    tok.save(os.path.join(out, "tokenizer.json"), pretty=False)  # one line: ~29.6k placeholders
    added = {str(t["id"]): {k: t[k] for k in ["content", "lstrip", "normalized", "rstrip", "single_word", "special"]}
             for t in spec["added_tokens"]}
    json.dump({"add_bos_token": True, "add_eos_token": False, "added_tokens_decoder": added, "bos_token": "<s>",
               "clean_up_tokenization_spaces": False, "eos_token": "</s>", "legacy": False,
               "model_max_length": 2048, "pad_token": "<PAD>", "padding_side": "right", "sp_model_kwargs": {},
               "tokenizer_class": "LlamaTokenizer", "unk_token": "<unk>", "use_default_system_prompt": False},
              open(os.path.join(out, "tokenizer_config.json"), "w"), indent=2)
    return tok


def encode(tok, out, prompt):
    """The processor's tokenization: transformers' fast tokenizer over tokenizer.json as is (4.40's
    LlamaTokenizerFast loads the file unchanged), checked against `tokenizers` itself."""
    from transformers import PreTrainedTokenizerFast
    fast = PreTrainedTokenizerFast(tokenizer_file=os.path.join(out, "tokenizer.json"), bos_token="<s>",
                                   eos_token="</s>", unk_token="<unk>", pad_token="<PAD>")
    enc = fast(prompt, return_tensors="pt")
    assert enc["input_ids"][0].tolist() == tok.encode(prompt).ids
    return fast, enc


# ----------------------------------------------------------------------------- the reference

class _Finder:
    def __init__(self, root):
        self.root = root

    def find_spec(self, name, path=None, target=None):
        if not name.startswith("prismatic."):
            return None
        file = os.path.join(self.root, *name.split(".")) + ".py"
        if not os.path.isfile(file):
            return None
        return importlib.util.spec_from_file_location(name, file, loader=importlib.machinery.SourceFileLoader(name, file))


def import_reference(root):
    """The reference's modules from the checkout `root`, its package __init__ files skipped."""
    for pkg in ["prismatic", "prismatic.extern", "prismatic.extern.hf", "prismatic.models", "prismatic.vla",
                "prismatic.training"]:
        m = types.ModuleType(pkg)
        m.__path__ = [os.path.join(root, *pkg.split("."))]
        sys.modules[pkg] = m
    sys.meta_path.insert(0, _Finder(root))
    import timm
    import timm.models.vision_transformer as tvit
    import transformers.tokenization_utils_base as tub
    assert tvit.VisionTransformer.get_intermediate_layers  # exists in timm 1.x
    constants = __import__("prismatic.vla.constants", fromlist=["x"])
    assert (constants.NUM_ACTIONS_CHUNK, constants.ACTION_DIM, constants.PROPRIO_DIM) == (8, 7, 8)
    assert (constants.ACTION_TOKEN_BEGIN_IDX, constants.STOP_INDEX) == (31743, STOP)
    assert constants.ACTION_PROPRIO_NORMALIZATION_TYPE == constants.NormalizationType.BOUNDS_Q99
    mp = __import__("prismatic.extern.hf.modeling_prismatic", fromlist=["x"])
    cp = __import__("prismatic.extern.hf.configuration_prismatic", fromlist=["x"])
    # transformers 5's tokenization_utils no longer re-exports the type names processing_prismatic imports;
    # it is an alias module that the lazy transformers package re-creates on some imports: those first
    import transformers.image_processing_utils  # noqa: F401
    import transformers.processing_utils  # noqa: F401
    from transformers import PreTrainedTokenizerBase  # noqa: F401
    tu = sys.modules["transformers.tokenization_utils"]
    for name in ["PaddingStrategy", "PreTokenizedInput", "TextInput", "TruncationStrategy"]:
        setattr(tu, name, getattr(tub, name))
    pp = __import__("prismatic.extern.hf.processing_prismatic", fromlist=["x"])
    heads = __import__("prismatic.models.action_heads", fromlist=["x"])
    proj = __import__("prismatic.models.projectors", fromlist=["x"])

    def unpack(fn):  # timm 1.x returns a list where 0.9 returned a tuple
        def wrapper(*a, **k):
            r = fn(*a, **k)
            return r[0] if isinstance(r, (tuple, list)) else r
        return wrapper
    mp.unpack_tuple = unpack
    real_create = timm.create_model

    def create(model_id, **kw):
        sizes = DINO if "dinov2" in model_id else SIG
        return real_create(model_id, **kw, **sizes)
    mp.timm.create_model = create
    TIMM_VERSION.append(timm.__version__)
    mp.timm.__version__ = "0.9.16"
    # transformers 5 calls tie_weights(recompute_mapping=...); the reference's takes no argument
    cls = mp.PrismaticForConditionalGeneration
    cls.tie_weights = lambda self, *a, **k: self.language_model.tie_weights(*a, **k)
    # transformers 5 reads `_supports_sdpa` on the instance before the language model exists; the
    # reference's property forwards to the language model's (LlamaForCausalLM: True)
    mp.PrismaticPreTrainedModel._supports_sdpa = True
    return mp, cp, pp, heads, proj, constants


def reference_function(file, name, namespace):
    """One top-level function of a reference file, compiled alone (its module's imports are not run)."""
    tree = ast.parse(open(file).read(), file)
    fn = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
    assert len(fn) == 1, (file, name)
    code = compile(ast.Module(body=fn, type_ignores=[]), file, "exec")
    exec(code, namespace)
    return namespace[name]


def client_function(root, name, constants):
    """normalize_proprio / load_component_state_dict of experiments/robot/openvla_utils.py."""
    return reference_function(
        os.path.join(root, "experiments", "robot", "openvla_utils.py"), name,
        {"np": np, "torch": torch, "Dict": dict, "Any": object, "NormalizationType": constants.NormalizationType,
         "ACTION_PROPRIO_NORMALIZATION_TYPE": constants.ACTION_PROPRIO_NORMALIZATION_TYPE})


def build(mods, gen):
    mp, cp, _pp, heads, proj, constants = mods
    cfg = cp.OpenVLAConfig(vision_backbone_id="dinosiglip-vit-so-224px", llm_backbone_id="llama2-7b-pure",
                           arch_specifier="no-align+fused-gelu-mlp", use_fused_vision_backbone=True,
                           image_resize_strategy="resize-naive", text_config=dict(TEXT), llm_max_length=2048,
                           pad_token_id=PAD, pad_to_multiple_of=64, norm_stats=None, n_action_bins=256)
    cfg._attn_implementation = "sdpa"
    vla = mp.OpenVLAForActionPrediction(cfg).float().eval()
    assert type(vla.language_model).__name__ == "LlamaForCausalLM"
    assert vla.language_model.config._attn_implementation == "sdpa"
    vla.vision_backbone.set_num_images_in_input(len(FRAMES))
    h = TEXT["hidden_size"]
    head = heads.L1RegressionActionHead(input_dim=h, hidden_dim=h, action_dim=constants.ACTION_DIM).float().eval()
    pp = proj.ProprioProjector(llm_dim=h, proprio_dim=constants.PROPRIO_DIM).float().eval()
    for m in [vla, head, pp]:
        rerandomize(m, gen)
    return vla, head, pp


def rerandomize(module, gen):
    embeddings = {f"{n}.weight" for n, m in module.named_modules() if isinstance(m, torch.nn.Embedding)}
    seen = set()
    with torch.no_grad():
        for name, t in module.state_dict(keep_vars=True).items():
            if t.data_ptr() in seen or t.dtype != torch.float32:
                continue
            seen.add(t.data_ptr())
            r = torch.randn(t.shape, generator=gen, dtype=torch.float32)
            leaf = name.rsplit(".", 1)[-1]
            if leaf == "scale_factor":
                v = 0.5 + 0.2 * r
            elif t.ndim == 1 and ("norm" in name or leaf == "weight"):
                v = 1.0 + 0.2 * r
            elif t.ndim == 1:
                v = 0.2 * r
            elif name in embeddings or name.endswith(("cls_token", "reg_token", "pos_embed")):
                v = 0.5 * r
            else:
                v = r / t[0].numel() ** 0.5
            t.data.copy_(v.to(torch.bfloat16).float())  # bf16-exact (module doc)


# the same statistics and frames as VLA-Adapter's fixture
from vla_adapter import frames, make_stats  # noqa: E402,F401


def bidirectional(module, args, kwargs):
    """The fork's mask (module doc): no padding, so all zeros; stock transformers would be causal."""
    m = kwargs.get("attention_mask")
    assert m is not None and m.ndim == 2 and m.shape[0] == 1 and bool(m.all()), "padding: not emulated"
    e = kwargs["inputs_embeds"]
    kwargs["attention_mask"] = torch.zeros(e.shape[0], 1, e.shape[1], e.shape[1], dtype=e.dtype)
    return args, kwargs


# ----------------------------------------------------------------------------- --check

def check(root, folder):
    """Reload the fixture as the LIBERO client does (get_vla, get_action_head, get_proprio_projector,
    get_processor: the state dicts through the reference's load_component_state_dict, "module."
    stripped; the stored dtype upcast to float32) and reproduce golden `actions` bit for bit."""
    from safetensors import safe_open
    from safetensors.torch import load_file
    from transformers import PreTrainedTokenizerFast
    from PIL import Image
    mp, cp, procmod, heads, proj, constants = import_reference(root)
    info = json.load(open(os.path.join(folder, "golden.json")))
    with safe_open(os.path.join(folder, "golden.safetensors"), "pt") as f:
        g = {k: f.get_tensor(k) for k in f.keys()}
    cfg = cp.OpenVLAConfig.from_json_file(os.path.join(folder, "config.json"))
    cfg._attn_implementation = "sdpa"
    vla = mp.OpenVLAForActionPrediction(cfg).float().eval()
    sd = {k: v.float() for k, v in load_file(os.path.join(folder, "model.safetensors")).items()}
    missing, unexpected = vla.load_state_dict(sd, strict=False)
    assert missing == ["language_model.lm_head.weight"] and not unexpected, (missing, unexpected)
    vla.vision_backbone.set_num_images_in_input(len(info["frames"]))
    vla.norm_stats = json.load(open(os.path.join(folder, "dataset_statistics.json")))
    vla.language_model.register_forward_pre_hook(bidirectional, with_kwargs=True)
    load = client_function(root, "load_component_state_dict", constants)
    h = cfg.text_config.hidden_size
    head = heads.L1RegressionActionHead(input_dim=h, hidden_dim=h, action_dim=constants.ACTION_DIM)
    head.load_state_dict({k: v.float() for k, v in load(os.path.join(folder, "action_head--latest_checkpoint.pt")).items()})
    pp = proj.ProprioProjector(llm_dim=h, proprio_dim=constants.PROPRIO_DIM)
    pp.load_state_dict(load(os.path.join(folder, "proprio_projector--latest_checkpoint.pt")))
    head, pp = head.float().eval(), pp.float().eval()
    pre = json.load(open(os.path.join(folder, "preprocessor_config.json")))
    improc = procmod.PrismaticImageProcessor(**{k: v for k, v in pre.items() if k != "auto_map"})
    tok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(folder, "tokenizer.json"), bos_token="<s>",
                                  eos_token="</s>", unk_token="<unk>", pad_token="<PAD>")
    processor = procmod.PrismaticProcessor(improc, tok)
    inputs = [processor(info["prompt"], Image.fromarray(g[f"image.{i}"].numpy()).convert("RGB"))
              for i in range(len(info["frames"]))]
    assert inputs[0]["input_ids"][0].tolist() == info["ids"]
    pixel_values = torch.cat([x["pixel_values"] for x in inputs], dim=1)
    state = g["state"].double().numpy()
    proprio = client_function(root, "normalize_proprio", constants)(state, vla.norm_stats[info["suite"]]["proprio"])
    assert torch.equal(torch.from_numpy(proprio).float(), g["proprio_norm"])
    with torch.no_grad():
        actions, hidden = vla.predict_action(input_ids=inputs[0]["input_ids"], unnorm_key=info["suite"],
                                             proprio=proprio, proprio_projector=pp, action_head=head,
                                             pixel_values=pixel_values, attention_mask=inputs[0]["attention_mask"])
    actions = torch.from_numpy(np.asarray(actions, dtype=np.float64)).float()
    d = (actions - g["actions"]).abs().max().item()
    dh = (hidden[0] - g["actions_hidden"]).abs().max().item()
    print(f"check {folder}: actions max |diff| {d:.3g}, actions_hidden {dh:.3g}")
    assert d == 0.0 and dh == 0.0


# ----------------------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--upstream", required=True, help="a checkout of moojink/openvla-oft")
    ap.add_argument("--out", default=os.path.join(HERE, "..", "..", "tests", "fixtures", "openvla-oft-tiny"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--f32", action="store_true", help="store model.safetensors and the head in float32")
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

    tok = build_tokenizer(out)
    mods = import_reference(root)
    _mp, _cp, procmod, _heads, _proj, constants = mods
    vla, head, pp = build(mods, gen)
    stats = make_stats(gen)
    vla.norm_stats = stats
    imgs = frames(gen)

    # the processor as AutoProcessor loads it: PrismaticImageProcessor(**preprocessor_config.json)
    # (its __init__ derives tvf_* from means/stds with timm, then the JSON's tvf_* values are set over them)
    from PIL import Image
    improc = procmod.PrismaticImageProcessor(**{k: v for k, v in PREPROCESSOR.items() if k != "auto_map"})
    for k in ["tvf_resize_params", "tvf_crop_params", "tvf_normalize_params"]:
        assert json.loads(json.dumps(getattr(improc, k))) == PREPROCESSOR[k], k
    prompt = f"In: What action should the robot take to {TASK.lower()}?\nOut:"
    fast, _ = encode(tok, out, prompt)
    processor = procmod.PrismaticProcessor(improc, fast)
    pils = [Image.fromarray(i.numpy()).convert("RGB") for i in imgs]
    inputs = [processor(prompt, p) for p in pils]  # openvla_utils.py:760-770, without the bf16 cast
    ids, attn = inputs[0]["input_ids"], inputs[0]["attention_mask"]
    pixel_values = torch.cat([x["pixel_values"] for x in inputs], dim=1)
    assert pixel_values.shape == (1, 6 * len(FRAMES), 224, 224) and pixel_values.dtype == torch.float32
    assert ids[0, 0].item() == 1 and ids[0, -1].item() != EMPTY and int(ids.max()) < VOCAB

    state = (torch.rand(8, generator=gen) * 3 - 1.5).double().numpy()  # float32 values, as stored
    proprio = client_function(root, "normalize_proprio", constants)(state, stats[SUITE]["proprio"])

    golden, rec = {}, {}
    hooks = []
    calls = {"dino": 0, "sig": 0}

    def tower(name):
        def hook(_m, _i, o):
            golden[f"{name}.{calls[name]}"] = o[0].detach().clone()
            calls[name] += 1
        return hook
    hooks.append(vla.vision_backbone.featurizer.register_forward_hook(tower("dino")))
    hooks.append(vla.vision_backbone.fused_featurizer.register_forward_hook(tower("sig")))
    hooks.append(vla.projector.register_forward_hook(lambda m, i, o: golden.__setitem__("patches", o[0].detach().clone())))
    lm = vla.language_model
    lm.register_forward_pre_hook(bidirectional, with_kwargs=True)  # stays for the checks below

    def lm_hook(m, args, kwargs, o):
        rec["lm_in"] = kwargs["inputs_embeds"][0].detach().clone()
        rec["hidden"] = [x[0].detach().clone() for x in o.hidden_states]
    hooks.append(lm.register_forward_hook(lm_hook, with_kwargs=True))
    rec["layers"] = []
    for layer in lm.model.layers:
        hooks.append(layer.register_forward_hook(
            lambda m, i, o: rec["layers"].append((o[0] if isinstance(o, tuple) else o)[0].detach().clone())))
    hooks.append(pp.register_forward_hook(lambda m, i, o: golden.__setitem__("proprio_feat", o.detach().clone())))
    hooks.append(head.model.fc1.register_forward_hook(
        lambda m, i, o: golden.__setitem__("head.x0", torch.relu(o)[0].detach().clone())))
    for b in range(len(head.model.mlp_resnet_blocks)):
        hooks.append(head.model.mlp_resnet_blocks[b].register_forward_hook(
            lambda m, i, o, b=b: golden.__setitem__(f"head.blk.{b}", o[0].detach().clone())))
    hooks.append(head.model.register_forward_hook(
        lambda m, i, o: golden.__setitem__("actions_norm", o[0].detach().clone())))
    with torch.no_grad():
        actions, actions_hidden = vla.predict_action(input_ids=ids, unnorm_key=SUITE, proprio=proprio,
                                                     proprio_projector=pp, action_head=head,
                                                     pixel_values=pixel_values, attention_mask=attn)
    for h in hooks:
        h.remove()

    # the layout, checked on the recorded tensors
    n = ids.shape[1] + 1  # with 29871
    npatch = 256 * len(FRAMES) + 1  # NUM_PATCHES, proprio included
    n_act = constants.NUM_ACTIONS_CHUNK * constants.ACTION_DIM
    seq_len = 1 + npatch + (n - 1) + n_act + 1
    start = npatch + (n - 1)  # NUM_PATCHES + NUM_PROMPT_TOKENS
    lm_in, hidden = rec["lm_in"], rec["hidden"]
    emb = vla.get_input_embeddings().weight.detach()
    assert lm_in.shape == (seq_len, TEXT["hidden_size"]) and len(hidden) == TEXT["num_hidden_layers"] + 1
    assert torch.equal(lm_in[0], emb[1])  # BOS
    assert torch.equal(lm_in[1:npatch], golden["patches"]) and torch.equal(lm_in[npatch], golden["proprio_feat"][0])
    assert torch.equal(lm_in[npatch + 1: npatch + n - 1], emb[ids[0, 1:]])
    assert torch.equal(lm_in[npatch + n - 1], emb[EMPTY])  # 29871, the last prompt token
    assert not lm_in[npatch + n: npatch + n + n_act].any()  # the 56 zeroed slots
    assert torch.equal(lm_in[-1], emb[STOP]) and npatch + n + n_act == seq_len - 1
    assert torch.equal(hidden[0], lm_in)
    layers = rec["layers"]
    for i in range(TEXT["num_hidden_layers"] - 1):
        assert torch.equal(hidden[i + 1], layers[i])
    assert torch.allclose(hidden[-1], lm.model.norm(layers[-1]), atol=0, rtol=0)  # post final norm
    assert torch.equal(actions_hidden[0], hidden[-1][start: start + n_act])
    # the emulated fork is bidirectional: position 0 depends on the last (stop) token
    with torch.no_grad():
        def last(x):  # through the language model's pre-hook, as predict_action calls it
            return lm(inputs_embeds=x[None], attention_mask=torch.ones(1, x.shape[0], dtype=torch.long),
                      output_hidden_states=True, return_dict=True).hidden_states[-1][0]
        again = last(lm_in)
        assert torch.equal(again, hidden[-1])
        bumped = lm_in.clone()
        bumped[-1] += 1.0
        bidir = (last(bumped)[0] - again[0]).abs().max().item()
        assert bidir > 1e-4, "position 0 ignores a later token"
        causal = lm.model(inputs_embeds=lm_in[None], attention_mask=torch.ones(1, seq_len, dtype=torch.long))
        causal = causal.last_hidden_state[0]
        vs_causal = (causal - again).abs().max().item()
        assert vs_causal > 1e-3  # the model alone (no pre-hook) is stock transformers: causal
        causal_b = lm.model(inputs_embeds=bumped[None], attention_mask=torch.ones(1, seq_len, dtype=torch.long))
        assert torch.allclose(causal_b.last_hidden_state[0, 0], causal[0], rtol=0, atol=1e-6)
        # each tower's output is its block depth-2's raw output, prefix tokens dropped, no final norm
        for name, tw, px in [("dino", vla.vision_backbone.featurizer, pixel_values[:, 0:3]),
                             ("sig", vla.vision_backbone.fused_featurizer, pixel_values[:, 3:6])]:
            x = tw.norm_pre(tw._pos_embed(tw.patch_embed(px)))
            for blk in tw.blocks[:-1]:
                x = blk(x)
            assert torch.equal(x[0, tw.num_prefix_tokens:], golden[f"{name}.0"]), name

    golden["lm_in"] = lm_in
    for layer in range(1, TEXT["num_hidden_layers"] + 1):
        golden[f"hidden.{layer}"] = layers[layer - 1][start: start + n_act]
    golden["actions_hidden"] = actions_hidden[0]
    for i, img in enumerate(imgs):
        golden[f"image.{i}"] = img
    golden["pixels.1.dino"], golden["pixels.1.sig"] = pixel_values[0, 6:9], pixel_values[0, 9:12]
    golden["ids"] = ids[0].to(torch.float32)
    golden["proprio_norm"] = torch.from_numpy(proprio).float()
    golden["state"] = torch.from_numpy(state).float()
    golden["actions"] = torch.from_numpy(np.asarray(actions, dtype=np.float64)).float()
    assert golden["actions_norm"].shape == (8, 7) and golden["actions"].shape == (8, 7)
    save_file({k: v.contiguous() for k, v in sorted(golden.items())}, os.path.join(out, "golden.safetensors"))

    # the checkpoint as the reference saves it
    store = torch.float32 if args.f32 else torch.bfloat16
    vla.config.norm_stats = stats
    # the untied lm_head (32064 x hidden) is left out: the L1 head never reads the logits, and it
    # would double the file (the converter ignores it where a real checkpoint has it)
    sd = {k: v.detach().clone().contiguous() for k, v in vla.state_dict().items()
          if not k.startswith("language_model.lm_head.")}
    assert all(torch.equal(v.to(torch.bfloat16).float(), v) for v in sd.values())
    save_file({k: v.to(store) for k, v in sd.items()}, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    vla.config.dtype = store
    vla.config.to_json_file(os.path.join(out, "config.json"))
    json.dump(stats, open(os.path.join(out, "dataset_statistics.json"), "w"), indent=1)
    json.dump(PREPROCESSOR, open(os.path.join(out, "preprocessor_config.json"), "w"), indent=2)

    class DDP(torch.nn.Module):  # what training saves: the DistributedDataParallel wrapper's state dict
        def __init__(self, m):
            super().__init__()
            self.module = m
    torch.save({k: v.to(store) for k, v in DDP(head).state_dict().items()},
               os.path.join(out, "action_head--latest_checkpoint.pt"))
    torch.save(DDP(pp).state_dict(), os.path.join(out, "proprio_projector--latest_checkpoint.pt"))
    import tokenizers
    import transformers
    info = {
        "generator": "tools/golden/openvla_oft.py", "upstream": "moojink/openvla-oft 213c5ff",
        "bidirectional": "moojink/transformers-openvla-oft bc339d9, emulated (no mask)",
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "tokenizers": tokenizers.__version__,
                     "timm": f"{TIMM_VERSION[0]} (reported as 0.9.16 to the model's check)", "numpy": np.__version__},
        "seed": args.seed, "suite": SUITE, "task": TASK, "prompt": prompt, "ids": ids[0].tolist(),
        "ids_model": ids[0].tolist() + [EMPTY] + [1] * n_act + [STOP],
        "layout": {"ranges": "[start, end) in the LM sequence", "seq_len": seq_len, "bos": 0,
                   "patches": [1, npatch], "proprio": npatch, "prompt": [npatch + 1, npatch + n],
                   "empty": npatch + n - 1, "slots": [npatch + n, npatch + n + n_act], "stop": seq_len - 1,
                   "head_rows": [start, start + n_act], "num_patches": npatch, "num_prompt_tokens": n - 1},
        "weights_dtype": "float32" if args.f32 else "bfloat16 (bf16-exact values; goldens computed in float32)",
        "checks": {"pos0_change_when_stop_input_bumped": bidir, "max_diff_vs_causal_stock": vs_causal},
        "head_input": "actions_hidden (56, hidden) reshaped (8, 7 * hidden): row i = rows 7i..7i+6 side by side",
        "frames": FRAMES, "n_prompt": n, "sizes": {"dino": DINO, "sig": SIG, "text": TEXT},
    }
    json.dump(info, open(os.path.join(out, "golden.json"), "w"), indent=1)
    print("ids", ids[0].tolist())
    print("actions", actions)
    print("wrote", out)


if __name__ == "__main__":
    main()
