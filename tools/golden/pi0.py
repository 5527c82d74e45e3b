"""Golden fixture for pi0 and pi05: lerobot 0.4.4 with random weights, every tensor re-randomized.

Rerun (anyone, offline; the venv is outside the repo and CI never needs it). lerobot's pi0/pi05
need transformers 4.53.2 patched with openpi's `transformers_replace` (adaRMS norms, gated
residuals, no sqrt(width) scaling inside GemmaModel, no 1/sqrt(width) on image features; lerobot
refuses to build without `transformers.models.siglip.check`). The patch is copied over the venv's
transformers as openpi's README says, from openpi commit 15a9616a00943ada6c20a0f158e3adb39df2ccac
(the transformers_replace files last changed in 5546575, "add pytorch support for openpi"):

    python3.11 -m venv /work/venv-pi
    /work/venv-pi/bin/pip install "lerobot[pi]==0.4.4" "transformers==4.53.2" "tokenizers<0.22"
        # (here: venv-pi has only transformers 4.53.2 + tokenizers 0.21.4 and reads everything else,
        #  lerobot 0.4.4 and torch 2.10, from another venv through a .pth file; either works)
    git clone https://github.com/Physical-Intelligence/openpi && git -C openpi checkout 15a9616a00943ada6c20a0f158e3adb39df2ccac
    cp -r openpi/src/openpi/models_pytorch/transformers_replace/* \\
        /work/venv-pi/lib/python3.11/site-packages/transformers/
        # overwrites models/gemma/{configuration,modeling}_gemma.py, models/paligemma/modeling_paligemma.py,
        # models/siglip/modeling_siglip.py and adds models/siglip/check.py
    HF_HUB_OFFLINE=1 /work/venv-pi/bin/python tools/golden/pi0.py --arch pi0     # tiny, committed
    HF_HUB_OFFLINE=1 /work/venv-pi/bin/python tools/golden/pi0.py --arch pi05    # tiny, committed
    HF_HUB_OFFLINE=1 /work/venv-pi/bin/python tools/golden/pi0.py --arch pi0 --size full --out /tmp/pi0-full
        # the real sizes (SigLIP So400m/14 at 224, Gemma 2B + Gemma 300M expert, vocab 257152,
        # chunk 50): a 14 GB model.safetensors, 18.7 GB peak RSS, ~4 min on 2 cores; not committed

--bench-only (lerobot 0.4.4 with openpi's patch as above, or 0.6.1 with plain transformers 5):
the folder for tools/golden/bench_pi0.py alone, e.g. on the GPU machine (tools/golden/DEVICE.md),
where lerobot is 0.6.1 and neither openpi's patch nor the recorded intermediates are available:

    /work/venv-lerobot061/bin/python tools/golden/pi0.py --arch pi05 --size full --bench-only --out /tmp/pi05-full
    /work/venv-lerobot061/bin/python tools/golden/bench_pi0.py /tmp/pi05-full --iters 3   # diff ~0

The same checkpoint, arch.json and inputs as without the flag under the same lerobot (same seed,
same draws; the policy is built without its own random init, which rerandomize() overwrites
anyway: tools/golden/_bench_only.py), then one policy.predict_action_chunk call on the recorded
noise, nothing wrapped (only the tokenizer step's get_task, to record the prompt) and no
`transformers.models.siglip.check`, on --device (cpu, or cuda after the checkpoint is written:
pass the benchmark's --device so its diff reads ~0). golden.safetensors holds only image.{i},
state_norm, noise and actions_norm, here [chunk, action_dim] (predict_action_chunk's output,
already cut to the action dims); golden.json has "bench_only": true, the device and the phases'
seconds, no openpi fields in "versions" and no prefix_len. Such a folder is not for the Rust
golden tests (they need the intermediates). On Python 3.11 lerobot 0.6.1's PEP 695 lines are
rewritten first (tools/golden/py311_compat.py; nothing happens on 3.12). Under 0.6.1 the weights
differ from 0.4.4's (its state_dict lists them in another order, so the draws land elsewhere),
and pi05's prompt carries only the state's own 6 bins (0.6.1 no longer pads the state to
max_state_dim before discretizing). Full size here (lerobot 0.6.1, 2 cores): model.safetensors
16.1 GB (pi0) / 16.6 GB (pi05: 0.6.1 saves the untied lm_heads, 0.4.4's was 14 GB), ~2 min,
17.5 GB peak RSS.

lerobot hard-codes the Gemma sizes (`get_gemma_config`) and the PaliGemma vocab, SigLIP
intermediate size and projection width; this script replaces those in lerobot's module namespace
(`get_gemma_config`, `PaliGemmaForConditionalGeneration`, `GemmaForCausalLM`) so tiny models can
be built; the variant names in config.json stay "gemma_2b" / "gemma_300m", so the sizes actually
used are written to arch.json. The language tokenizer ("google/paligemma-3b-pt-224" in lerobot) is
replaced by a small stand-in built here with `tokenizers`, laid out like Gemma's tokenizer.json
(normalizer Replace " " -> "▁", no pre-tokenizer, BPE with byte_fallback and <0x00>..<0xFF>,
<pad>=0 <eos>=1 <bos>=2 <unk>=3, <bos> added by a TemplateProcessing post-processor, merges that
never join across a "▁" word start nor involve digits, as Gemma's split_digits).

Writes into the output folder (default tests/fixtures/{pi0,pi05}-tiny/):
  tokenizer/           the stand-in tokenizer (GemmaTokenizerFast folder)
  config.json, model.safetensors, policy_{pre,post}processor*.{json,safetensors}
                       the checkpoint exactly as lerobot saves it (policy.save_pretrained and the
                       processors' save_pretrained), except that the tokenizer step's
                       tokenizer_name is rewritten to the relative path "tokenizer"
  arch.json            the Gemma / SigLIP sizes used (config.json only names the variants)
  golden.safetensors   inputs and lerobot's outputs (names below), float32 unless noted
  golden.json          versions, the prompt as tokenized, token ids, shapes, seeds, sizes

golden.safetensors: image.{i} (u8, HWC, the raw camera frame), state (raw), state_norm (after
the preprocessor, not yet zero-padded), noise [chunk, max_action_dim], pixels.{i} [3,S,S]
(_preprocess_images output: resize_with_pad in [0,1] padding with -1.0, then x*2-1, so padding
is -3.0), vit.{i} [patches, vit_hidden] (SigLIP last_hidden_state, after post_layernorm),
vision.{i} [T, vlm_width] (embed_image: SigLIP + multi_modal_projector, no scaling),
kv.{l}.k / kv.{l}.v [P, kv_heads, head_dim] (the prefix cache of the PaliGemma language model:
keys after RoPE, values; rows of padded language tokens are there too but are never attended),
prefix_out [P, vlm_width] (the prefill's output after the final norm; unused by the policy),
velocity.{s} [chunk, max_action_dim] (denoise_step output at step s, time 1 - s/num_steps),
time_cond.{s} [expert_width] (pi05 only: the adaRMS condition
silu(time_mlp_out(silu(time_mlp_in(sinusoidal(t)))))), actions_norm [chunk, max_action_dim]
(sample_actions output), actions [chunk, action_dim] (after the postprocessor: unnormalised).

golden.json: the prompt exactly as tokenized (pi0: task + "\n"; pi05: "Task: ..., State: <32
bins>;\nAction: " built from the normalised state zero-padded to max_state_dim), token_ids (right
padded with 0 to tokenizer_max_length), attention_mask, n_valid_tokens, prefix_len (all prefix
rows, pads included) and n_valid_prefix. lerobot's positions: prefix cumsum(pad_mask) - 1 (pads
repeat the last position), suffix from n_valid_prefix on; pi0's suffix is [state, chunk actions],
pi05's the chunk actions alone.
"""
import argparse
import contextlib
import hashlib
import json
import os
import shutil
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # _bench_only, py311_compat (--bench-only)

import numpy as np
import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
import transformers
from transformers import GemmaTokenizerFast

from _bench_only import record, run_fields, skip_weight_init, tensor_index, versions

OPENPI_COMMIT = "15a9616a00943ada6c20a0f158e3adb39df2ccac"
TASK = "Pick up the red cube and place it in the box"  # "P" is not in the tokenizer: byte fallback
CORPUS = ["pick up the red cube and place it in the box", "put the green cube in the bowl",
          "Task: pick up the red cube, State: 12 200 128 7;\nAction: ", "open the drawer and take out the sponge",
          "place the cube on the plate", "stack the red cube on the blue cube", "wipe the table with the towel", "0 1 2 3 4 5 6 7 8 9"]

# arch.json layout. "full" is pi0 / pi05 as released: So400m/14 at 224 (lerobot: intermediate
# 4304, projection 2048), gemma_2b (PaliGemma) and gemma_300m (action expert), vocab 257152.
SIZES = {
    "tiny": dict(vision=dict(hidden=40, layers=2, heads=4, inter=72, image_size=40, patch_size=8, ln_eps=1e-6),
                 vlm=dict(width=64, depth=3, mlp_dim=144, num_heads=8, num_kv_heads=1, head_dim=16,
                          vocab_size=384, rms_eps=1e-6, rope_theta=10000.0),
                 expert=dict(width=56, depth=3, mlp_dim=96, num_heads=8, num_kv_heads=1, head_dim=16)),
    "full": dict(vision=dict(hidden=1152, layers=27, heads=16, inter=4304, image_size=224, patch_size=14, ln_eps=1e-6),
                 vlm=dict(width=2048, depth=18, mlp_dim=16384, num_heads=8, num_kv_heads=1, head_dim=256,
                          vocab_size=257152, rms_eps=1e-6, rope_theta=10000.0),
                 expert=dict(width=1024, depth=18, mlp_dim=4096, num_heads=8, num_kv_heads=1, head_dim=256)),
}
# tokenizer_max_length: tiny pi0 leaves pad positions after the prompt; pi05's prompt carries 32
# discretized state values (4 tokens each), so it keeps lerobot's default 200 (with padding too).
TOKEN_LEN = {("tiny", "pi0"): 16, ("tiny", "pi05"): 200, ("full", "pi0"): 48, ("full", "pi05"): 200}
CHUNK = {"tiny": 10, "full": 50}  # chunk_size = n_action_steps; 10 denoising steps for both
STATE_DIM = ACTION_DIM = 6
CAMERAS = [(48, 80), (22, 30)]  # (h, w): neither square nor the model's size; one shrinks, one grows


def build_tokenizer(out):
    """A small Gemma-style tokenizer: BPE merges trained with the words split at "▁" and digits
    and punctuation isolated (as SentencePiece does for Gemma), then saved with no pre-tokenizer."""
    tr = Tokenizer(models.BPE())
    tr.normalizer = normalizers.Replace(" ", "▁")
    tr.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split("▁", "merged_with_next"), pre_tokenizers.Split("\n", "isolated"),
        pre_tokenizers.Punctuation("isolated"), pre_tokenizers.Digits(individual_digits=True)])
    tr.train_from_iterator(CORPUS * 20, trainers.BpeTrainer(vocab_size=120, show_progress=False))
    trained = json.loads(tr.to_str())["model"]
    specials = ["<pad>", "<eos>", "<bos>", "<unk>"]
    vocab = {t: i for i, t in enumerate(specials + [f"<0x{b:02X}>" for b in range(256)])}
    for t, _ in sorted(trained["vocab"].items(), key=lambda kv: kv[1]):
        vocab[t] = len(vocab)
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in trained["merges"]]
    tok = Tokenizer(models.BPE(vocab, merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Replace(" ", "▁")
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    tok.add_special_tokens(specials)
    # transformers 4 adds the "<bos> $A" post-processor by default; 5 (GemmaTokenizer on the
    # tokenizers backend) only when add_bos_token is given explicitly
    v5 = int(transformers.__version__.split(".")[0]) >= 5
    ft = GemmaTokenizerFast(tokenizer_object=tok, **({"add_bos_token": True} if v5 else {}))
    ft.save_pretrained(out)
    return len(ft)


def patch_sizes(modeling, arch):
    """Make lerobot build the sizes in `arch` (variant names stay gemma_2b / gemma_300m)."""
    vis, vlm, exp = arch["vision"], arch["vlm"], arch["expert"]
    # lerobot 0.4.4 builds transformers' (openpi-patched) classes; 0.6.1 its own pi_gemma subclasses
    pali_name = next(n for n in ("PaliGemmaForConditionalGeneration", "PaliGemmaForConditionalGenerationWithPiGemma")
                     if hasattr(modeling, n))
    gemma_name = next(n for n in ("GemmaForCausalLM", "PiGemmaForCausalLM") if hasattr(modeling, n))
    real_pali, real_gemma = getattr(modeling, pali_name), getattr(modeling, gemma_name)

    def rope_theta(c):  # transformers 5 keeps it in rope_parameters
        return c.rope_theta if hasattr(c, "rope_theta") else c.rope_parameters["rope_theta"]

    def gemma_config(variant):
        c = {"gemma_2b": vlm, "gemma_300m": exp}[variant]
        return modeling.GemmaConfig(c["width"], c["depth"], c["mlp_dim"], c["num_heads"], c["num_kv_heads"], c["head_dim"])

    def paligemma(config):
        v, t = config.vision_config, config.text_config
        v.hidden_size, v.num_hidden_layers, v.num_attention_heads = vis["hidden"], vis["layers"], vis["heads"]
        v.intermediate_size, v.patch_size, v.layer_norm_eps = vis["inter"], vis["patch_size"], vis["ln_eps"]
        v.projection_dim = vlm["width"]
        assert v.image_size == vis["image_size"] and not v.vision_use_head
        config._vocab_size = t.vocab_size = v.vocab_size = vlm["vocab_size"]
        config.image_token_index = vlm["vocab_size"]
        assert t.rms_norm_eps == vlm["rms_eps"] and rope_theta(t) == vlm["rope_theta"]
        return real_pali(config=config)

    def gemma_expert(config):
        config.vocab_size = vlm["vocab_size"]
        assert config.rms_norm_eps == vlm["rms_eps"] and rope_theta(config) == vlm["rope_theta"]
        return real_gemma(config=config)

    modeling.get_gemma_config = gemma_config
    setattr(modeling, pali_name, paligemma)
    setattr(modeling, gemma_name, gemma_expert)


def rerandomize(policy, gen):
    """Every tensor gets fresh values: lerobot's init leaves biases at 0 and norm gains at 1 (or 0
    for Gemma's (1 + w) RMSNorm), which would hide a dropped bias or gain. Gemma RMSNorm weights
    w ~ 0.2 N(0,1) (gain 1 + w), SigLIP LayerNorm weights 1 + 0.2 N(0,1); pi05's adaRMS `dense`
    (cond -> [scale, shift, gate]) gets 0.2 N(0,1)/sqrt(fan_in) weights and 0.2 N(0,1) biases, plus
    1 on the gate's third so the expert's residual branches are not gated to ~0."""
    with torch.no_grad():
        for name, t in policy.state_dict().items():
            assert t.dtype == torch.float32, (name, t.dtype)
            siglip_ln = "vision_tower" in name and "norm" in name and name.endswith("weight")
            gemma_rms = name.endswith("layernorm.weight") or name.endswith(".norm.weight")
            if t.ndim > 1 and not siglip_ln and not gemma_rms and ".dense." not in name and t.is_contiguous():
                # the last branch below, drawn in place (no 2 GB temporaries for the 257152-row
                # embeddings): the same values as r / sqrt(fan_in), bit for bit
                t.normal_(generator=gen).div_(t[0].numel() ** 0.5)
                continue
            r = torch.randn(t.shape, generator=gen, dtype=torch.float32)
            if siglip_ln:
                v = 1.0 + 0.2 * r  # SigLIP nn.LayerNorm
            elif gemma_rms:
                v = 0.2 * r  # Gemma RMSNorm: x * rsqrt(mean(x^2) + eps) * (1 + w)
            elif ".dense." in name:  # adaRMS
                if t.ndim == 2:
                    v = 0.2 * r / t.shape[1] ** 0.5
                else:
                    v = 0.2 * r
                    v[2 * t.shape[0] // 3:] += 1.0
            elif t.ndim == 1:
                v = 0.2 * r
            else:
                v = r / t[0].numel() ** 0.5
            t.copy_(v)


def relativize_tokenizer(out):
    p = os.path.join(out, "policy_preprocessor.json")
    d = json.load(open(p))
    n = 0
    for s in d["steps"]:
        if "tokenizer_name" in s.get("config", {}):
            s["config"]["tokenizer_name"] = "tokenizer"
            n += 1
    assert n == 1
    json.dump(d, open(p, "w"), indent=4)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", choices=["pi0", "pi05"], required=True)
    ap.add_argument("--size", choices=sorted(SIZES), default="tiny")
    ap.add_argument("--out", help="output folder (default: tests/fixtures/{arch}-tiny for --size tiny)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--bench-only", action="store_true",
                    help="write only what bench_pi0.py reads (the checkpoint, arch.json; golden.safetensors: image.{i}, "
                         "state_norm, noise, actions_norm from one predict_action_chunk call; golden.json: token_ids, "
                         "attention_mask, versions, arch, ...): no intermediates, no wrapped model functions, no openpi "
                         "check, so it runs under lerobot 0.6.1 too; not for the Rust golden tests")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="with --bench-only: where the recorded predict_action_chunk call runs (the policy is built "
                         "and saved on the CPU, then moved); match the benchmark's --device so its diff reads ~0")
    a = ap.parse_args()
    if a.device != "cpu" and not a.bench_only:
        ap.error("--device is for --bench-only (the full recording runs on the CPU)")
    if a.bench_only:
        import py311_compat
        py311_compat.patch_pep695()  # lerobot 0.6.x on Python 3.11; a no-op on 3.12 or once patched
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    if a.out is None and a.size != "tiny":
        ap.error("--size full writes 14 GB (lerobot 0.4.4) to 16.6 GB (0.6.1): give --out (outside the repo)")
    out = os.path.abspath(a.out or os.path.join(root, "tests", "fixtures", f"{a.arch}-tiny"))
    if os.path.isdir(out):
        shutil.rmtree(out)
    tok_dir = os.path.join(out, "tokenizer")
    n_vocab_tok = build_tokenizer(tok_dir)
    arch = SIZES[a.size]
    assert n_vocab_tok <= arch["vlm"]["vocab_size"]

    from lerobot.configs.types import FeatureType, NormalizationMode, PolicyFeature
    from lerobot.processor import TokenizerProcessorStep
    if a.arch == "pi0":
        from lerobot.policies.pi0 import modeling_pi0 as modeling
        from lerobot.policies.pi0 import processor_pi0 as processor
        from lerobot.policies.pi0.configuration_pi0 import PI0Config as Config
        make_processors, Policy = processor.make_pi0_pre_post_processors, modeling.PI0Policy
    else:
        from lerobot.policies.pi05 import modeling_pi05 as modeling
        from lerobot.policies.pi05 import processor_pi05 as processor
        from lerobot.policies.pi05.configuration_pi05 import PI05Config as Config
        make_processors, Policy = processor.make_pi05_pre_post_processors, modeling.PI05Policy
    if not a.bench_only:
        from transformers.models.siglip import check
        assert check.check_whether_transformers_replace_is_installed_correctly()
    patch_sizes(modeling, arch)
    # The tokenizer step loads "google/paligemma-3b-pt-224": point it at the stand-in.
    processor.TokenizerProcessorStep = lambda **kw: TokenizerProcessorStep(**{**kw, "tokenizer_name": tok_dir})

    gen = torch.Generator().manual_seed(a.seed)
    cams = [f"observation.images.cam{i}" for i in range(len(CAMERAS))]
    feats = {"observation.state": PolicyFeature(type=FeatureType.STATE, shape=(STATE_DIM,))}
    for k, (h, w) in zip(cams, CAMERAS):
        feats[k] = PolicyFeature(type=FeatureType.VISUAL, shape=(3, h, w))
    s = arch["vision"]["image_size"]
    cfg = Config(device="cpu", dtype="float32", image_resolution=(s, s), chunk_size=CHUNK[a.size], n_action_steps=CHUNK[a.size],
                 num_inference_steps=10, max_state_dim=32, max_action_dim=32,
                 tokenizer_max_length=TOKEN_LEN[a.size, a.arch], input_features=feats,
                 output_features={"action": PolicyFeature(type=FeatureType.ACTION, shape=(ACTION_DIM,))})
    norm_mode = cfg.normalization_mapping["STATE"]
    assert norm_mode == (NormalizationMode.MEAN_STD if a.arch == "pi0" else NormalizationMode.QUANTILES)
    torch.manual_seed(a.seed)
    t0 = time.perf_counter()
    with skip_weight_init() if a.bench_only else contextlib.nullcontext():  # rerandomize overwrites it all
        policy = Policy(cfg).eval()
    t1 = time.perf_counter()
    rerandomize(policy, gen)
    seconds = {"build": t1 - t0, "rerandomize": time.perf_counter() - t1}

    randn = lambda *shape: torch.randn(*shape, generator=gen)
    rand = lambda *shape: torch.rand(*shape, generator=gen)
    if a.arch == "pi0":
        stats = {k: {"mean": randn(n), "std": 0.5 + rand(n)}
                 for k, n in [("observation.state", STATE_DIM), ("action", ACTION_DIM)]}
        state = 2.0 * randn(STATE_DIM)
    else:
        stats = {}
        for k, n in [("observation.state", STATE_DIM), ("action", ACTION_DIM)]:
            q01 = randn(n)
            stats[k] = {"q01": q01, "q99": q01 + 0.5 + 2.0 * rand(n)}
        q = stats["observation.state"]  # inside [q01, q99]: the discretized bins stay in 0..255
        state = q["q01"] + (q["q99"] - q["q01"]) * (0.05 + 0.9 * rand(STATE_DIM))
    pre, post = make_processors(cfg, dataset_stats=stats)
    t0 = time.perf_counter()
    policy.save_pretrained(out)
    pre.save_pretrained(out)
    post.save_pretrained(out)
    relativize_tokenizer(out)
    seconds["save"] = time.perf_counter() - t0
    json.dump(arch, open(os.path.join(out, "arch.json"), "w"), indent=1)

    # Inputs: u8 HWC frames, a raw state, a task string, explicit noise.
    images = [torch.randint(0, 256, (h, w, 3), generator=gen, dtype=torch.uint8) for h, w in CAMERAS]
    noise = randn(1, cfg.chunk_size, cfg.max_action_dim)
    obs = {"observation.state": state.clone(), "task": TASK}
    for k, img in zip(cams, images):
        obs[k] = img.permute(2, 0, 1).float() / 255.0
    tok_step = next(p for p in pre.steps if isinstance(p, TokenizerProcessorStep))
    prompts, get_task = [], tok_step.get_task
    tok_step.get_task = lambda tr: prompts.append(get_task(tr)) or prompts[-1]
    batch = pre(obs)
    prompt = prompts[0][0]
    tokens = batch["observation.language.tokens"][0]
    mask = batch["observation.language.attention_mask"][0]
    n_valid = int(mask.sum())
    assert bool(mask[:n_valid].all()) and n_valid < len(tokens), "expected right padding"
    assert tokens.tolist()[:n_valid] == tok_step.input_tokenizer(prompt)["input_ids"]
    assert tokens[0] == 2 and (tokens[n_valid:] == 0).all()
    if a.bench_only:
        return write_bench_only(out, a, seconds, cfg, arch, norm_mode, policy, batch, images, noise, prompt, tokens, mask)

    # Record intermediates with lerobot's own modules.
    model, pwe = policy.model, policy.model.paligemma_with_expert
    golden = {f"image.{i}": img for i, img in enumerate(images)}
    with torch.no_grad():
        pixels, _ = policy._preprocess_images(dict(batch))
        for i, px in enumerate(pixels):
            golden[f"pixels.{i}"] = px[0]
            golden[f"vit.{i}"] = pwe.paligemma.vision_tower(pixel_values=px).last_hidden_state[0]
            golden[f"vision.{i}"] = pwe.embed_image(px)[0]
    prefill, velocities, conds, final = [], [], [], []
    pwe_forward, embed_suffix = pwe.forward, model.embed_suffix
    denoise_step, sample_actions = model.denoise_step, model.sample_actions

    def rec_forward(*args, **kw):
        out = pwe_forward(*args, **kw)
        if kw["inputs_embeds"][1] is None:
            prefill.append(out)
        return out

    def rec_suffix(*args, **kw):
        out = embed_suffix(*args, **kw)
        conds.append(out[3])
        return out

    def rec_denoise(*args, **kw):
        v = denoise_step(*args, **kw)
        velocities.append(v.clone())
        return v

    def rec_sample(*args, **kw):
        x = sample_actions(*args, **kw)
        final.append(x.clone())
        return x

    pwe.forward, model.embed_suffix = rec_forward, rec_suffix
    model.denoise_step, model.sample_actions = rec_denoise, rec_sample
    actions = post(policy.predict_action_chunk(dict(batch), noise=noise.clone()))
    assert len(prefill) == 1 and len(velocities) == cfg.num_inference_steps and len(final) == 1

    (prefix_out, _), cache = prefill[0]
    golden["prefix_out"] = prefix_out[0]
    for l in range(arch["vlm"]["depth"]):
        k, v = cache[l]
        golden[f"kv.{l}.k"], golden[f"kv.{l}.v"] = k[0].transpose(0, 1), v[0].transpose(0, 1)
    for st, v in enumerate(velocities):
        golden[f"velocity.{st}"] = v[0]
    if a.arch == "pi05":
        for st, c in enumerate(conds):
            golden[f"time_cond.{st}"] = c[0]
    else:
        assert all(c is None for c in conds)
    golden.update({"state": state, "state_norm": batch["observation.state"][0], "noise": noise[0],
                   "actions_norm": final[0][0], "actions": actions[0]})
    golden = {k: (t if t.dtype == torch.uint8 else t.float()).contiguous() for k, t in golden.items()}
    save_file(golden, os.path.join(out, "golden.safetensors"))

    replace = os.path.join(os.path.dirname(transformers.__file__), "models")
    n_img = int(golden["vision.0"].shape[0])
    info = {
        "generator": "tools/golden/pi0.py",
        "arch": a.arch,
        "size": a.size,
        "seed": a.seed,
        "versions": {**versions(),
                     "openpi": OPENPI_COMMIT,
                     "transformers_replace_sha256": {
                         f: hashlib.sha256(open(os.path.join(replace, f), "rb").read()).hexdigest()[:16]
                         for f in ["gemma/configuration_gemma.py", "gemma/modeling_gemma.py",
                                   "paligemma/modeling_paligemma.py", "siglip/modeling_siglip.py",
                                   "siglip/check.py"]}},
        "task": TASK,
        "prompt": prompt,
        "token_ids": tokens.tolist(),
        "attention_mask": [int(x) for x in mask.tolist()],
        "n_valid_tokens": n_valid,
        "tokenizer_max_length": cfg.tokenizer_max_length,
        "n_images": len(CAMERAS),
        "cameras_hw": CAMERAS,
        "image_size": s,
        "img_tokens_per_camera": n_img,
        "prefix_len": int(golden["kv.0.k"].shape[0]),
        "n_valid_prefix": len(CAMERAS) * n_img + n_valid,
        "chunk_size": cfg.chunk_size,
        "num_steps": cfg.num_inference_steps,
        "max_state_dim": cfg.max_state_dim,
        "max_action_dim": cfg.max_action_dim,
        "state_dim": STATE_DIM,
        "action_dim": ACTION_DIM,
        "normalization": str(norm_mode.value),
        "min_period": cfg.min_period,
        "max_period": cfg.max_period,
        "model": arch,
        "tensors": tensor_index(golden),
    }
    json.dump(info, open(os.path.join(out, "golden.json"), "w"), indent=1)
    print(json.dumps({k: info[k] for k in ["versions", "prompt", "token_ids", "n_valid_tokens", "prefix_len"]}))
    print("actions[0]:", actions[0, 0].tolist())


def write_bench_only(out, a, seconds, cfg, arch, norm_mode, policy, batch, images, noise, prompt, tokens, mask):
    """--bench-only: the normalised chunk from one unwrapped predict_action_chunk call, and the
    inputs bench_pi0.py feeds it (see the docstring)."""

    actions_norm, golden = record(out, policy, batch, images, noise, a.device, seconds)
    info = {
        "generator": "tools/golden/pi0.py --bench-only",
        "bench_only": True,
        "arch": a.arch,
        "size": a.size,
        "seed": a.seed,
        "versions": versions(),
        "task": TASK,
        "prompt": prompt,
        "token_ids": tokens.tolist(),
        "attention_mask": [int(x) for x in mask.tolist()],
        "n_valid_tokens": int(mask.sum()),
        "tokenizer_max_length": cfg.tokenizer_max_length,
        "n_images": len(CAMERAS),
        "cameras_hw": CAMERAS,
        "image_size": arch["vision"]["image_size"],
        "chunk_size": cfg.chunk_size,
        "num_steps": cfg.num_inference_steps,
        "max_state_dim": cfg.max_state_dim,
        "max_action_dim": cfg.max_action_dim,
        "state_dim": STATE_DIM,
        "action_dim": ACTION_DIM,
        "normalization": str(norm_mode.value),
        "model": arch,
        "tensors": tensor_index(golden),
        **run_fields(a.device, seconds),
    }
    json.dump(info, open(os.path.join(out, "golden.json"), "w"), indent=1)
    print(json.dumps({k: info[k] for k in ["device", "seconds", "torch_threads", "versions", "prompt", "token_ids", "n_valid_tokens"]}))
    print("actions_norm[0]:", actions_norm[0, 0].tolist())


if __name__ == "__main__":
    main()
