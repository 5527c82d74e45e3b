"""The reference TurboVLA's latency at the released LIBERO model's size (H-EmbodVis/TurboVLA's own PyTorch code),
for the benchmark tables next to vla-bench's.

    # once: the full-size checkpoint, random weights (~0.9 GB; outside the repo)
    /work/venv-lerobot061/bin/python tools/golden/bench_turbovla.py --upstream /tmp/upstream/turbovla \\
        --make /tmp/turbovla-full
    # the timing
    /work/venv-lerobot061/bin/python tools/golden/bench_turbovla.py --upstream /tmp/upstream/turbovla \\
        --ckpt /tmp/turbovla-full [--iters 3] [--threads 2] [--warmup 1]
    # the same checkpoint for vla-rs
    vla-convert turbovla --ckpt /tmp/turbovla-full/turbovla.pth --bert /tmp/turbovla-full/bert \\
        --dinov3 /tmp/turbovla-full/dinov3 --statistics libero --out /tmp/turbovla-full.gguf

The upstream files and the venv are in tools/golden/turbovla.py's docstring. This tool reuses that script's upstream
import (sys.path, the debug-tracer stubs for files missing under --upstream, AutoModel.from_pretrained building
BERT / DINOv3 from their config.json with from_config, the load_state_dict pre-hook renaming DINOv3's released
transformers-4.x `layer.N` keys for transformers 5), its TurboVLAConfig (every non-size field as the tiny fixtures'),
backbone folders, weight redraw, released state-dict names and LIBERO observation; nothing of TurboVLA is copied here.
tools/golden/turbovla.py is imported as `turbovla_golden` (the upstream package is `turbovla`); it sets
policy.EXPECTED_IMAGE_SIZE to its tiny 64, which this tool puts back to the released 256.

--make DIR: the released LIBERO model's sizes (TurboVLAConfig's defaults are those sizes):
- DINOv3 ViT-B/16 (dinov3/config.json as facebook/dinov3-vitb16-pretrain-lvd1689m's: hidden 768, 12 layers, 12
  heads, intermediate 3072, patch 16, 4 registers, rope_theta 100, LayerScale, gelu, no gated MLP, no key bias,
  image_size 224 as the hub's config; the views are 256 x 256: vision.image_size 256, 16 x 16 patches a view);
  preprocessor_config.json with ImageNet mean / std and 1/255.
- BERT-base-uncased (bert/config.json: 768, 12 layers, 12 heads, intermediate 3072, 512 positions, 2 token types,
  vocab 30522). bert/vocab.txt + tokenizer.json (+ tokenizer_config.json, special_tokens_map.json as the tiny
  fixtures'): 30522 entries laid out as bert-base-uncased's specials ([PAD] 0, [unused0..98] 1..99, [UNK] 100,
  [CLS] 101, [SEP] 102, [MASK] 103, [unused99..993] 104..998, "!" 999, so "." is 1012 and "?" 1029): the first 3000
  are tools/golden/tokenizer_wordpiece.py's build_vocab() (single characters, their ## forms, learned word pieces),
  then the whole words of its LIBERO / prose sentences and of the prompt that are not in yet, then made-up
  lower-case words (its pseudo_words, random.Random(seed), every other one as a ## piece) up to 30522.
- interaction: hidden 256, nheads 8, 6 layers, dim_feedforward 2048, enhancer_inner_dim 1024; action: 7 dims, state
  8, horizon 12, 2 state tokens, 3 decoder layers, mlp_hidden 512, state_hidden 256; text: padding_length 21,
  padding_length_by_instruction {} (no per-instruction groups), max_length 256; 2 views, view position embedding.
- weights: tools/golden/turbovla.py's rerandomize (torch.Generator(seed)), every state-dict entry redrawn: Linear /
  in_proj / patch-conv N(0, 1/sqrt(fan_in)), biases N(0, 0.1), LayerNorm weight U(0.5, 1.5) / bias N(0, 0.1),
  DINOv3 LayerScale and fusion gamma_v / gamma_l U(0.2, 1.0), BERT tables / CLS / registers / action queries N(0, 1),
  view_embedding / state position N(0, 0.5). f32 throughout.
- DIR/turbovla.pth = torch.save({"global_step": 0, "model_state_dict", "model_config": TurboVLAConfig.to_dict()})
  as the trainer saves it (optimizer etc. left out), DINOv3 keys under the released names
  (vision_encoder.backbone.layer.N.*), model_config's model paths "bert" / "dinov3" (relative, beside the file).
  DIR/make.json records what was written (a rerun of --make removes DIR only when that file says this tool wrote it).

--ckpt DIR: TurboVLAPolicy(DIR/turbovla.pth, dinov3_path=DIR/dinov3, bert_path=DIR/bert, device cpu, precision
fp32): the reference's load_turbovla_for_inference (torch.load, strict load_state_dict, fp32; vision
compute_precision fp32, so no autocast anywhere on the CPU), as turbovla.py --check loads the tiny fixture. Timed, on
one LIBERO observation (two 256 x 256 x 3 u8 frames, uniform random, and the 8-d state from turbovla.py's
make_obs, numpy Generator(seed + 1)) with the instruction PROMPT (13 tokens with [CLS] / [SEP], padded to 21):
- predict: policy.predict_env_action_chunk_from_obs(obs, PROMPT), what the LIBERO client calls per chunk: the 180
  degree turn of both frames, state_from_libero_obs, the manual DINOv3 processor (u8 * 1/255, ImageNet mean / std),
  normalize_state, the model's forward under torch.inference_mode, sanitize, the min/max denormalisation and the
  gripper rule.
- forward: model([PROMPT], {"dinov3": pixel_values [1, 2, 3, 256, 256]}, state_norm [1, 8]) under
  torch.inference_mode on the processor's tensors (made once, outside the timing), with forward hooks timing
  text_encoder (tokenizer + BERT + text_projection), vision_encoder (DINOv3 on each view), vision_projection, the
  vision-language interaction and the action head.
torch.set_num_threads(--threads) after the imports (tools/golden/turbovla.py sets 1 when imported); --warmup
untimed calls of each before the --iters timed ones. Prints every iteration's ms, then median (min - max), then one
JSON line.
"""

import argparse
import importlib.util
import json
import os
import random
import shutil
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)

GENERATOR = "tools/golden/bench_turbovla.py --make (vla-rs): released-LIBERO-sized TurboVLA, random weights"
PROMPT = "pick up the black bowl and place it on the plate"
IMAGE_SIZE = 256  # policy.EXPECTED_IMAGE_SIZE as released
PADDING_LENGTH = 21
VOCAB_SIZE = 30522
# facebook/dinov3-vitb16-pretrain-lvd1689m's config.json (transformers 4.56 keys)
DINOV3 = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072, patch_size=16,
              image_size=224, num_channels=3, num_register_tokens=4, rope_theta=100.0, layerscale_value=1.0,
              use_gated_mlp=False, hidden_act="gelu", layer_norm_eps=1e-5, query_bias=True, key_bias=False,
              value_bias=True, proj_bias=True, mlp_bias=True, attention_dropout=0.0, drop_path_rate=0.0,
              pos_embed_rescale=2.0, pos_embed_shift=None, pos_embed_jitter=None, initializer_range=0.02,
              architectures=["DINOv3ViTModel"])
# bert-base-uncased's config.json (vocab_size from vocab.txt)
BERT = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072, hidden_act="gelu",
            hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1, max_position_embeddings=512, type_vocab_size=2,
            initializer_range=0.02, layer_norm_eps=1e-12, pad_token_id=0, architectures=["BertForMaskedLM"])
INTERACTION = dict(hidden_dim=256, nheads=8, num_layers=6, dim_feedforward=2048, enhancer_inner_dim=1024)
ACTION = dict(action_dim=7, state_dim=8, horizon=12, num_state_tokens=2, num_layers=3, mlp_hidden_dim=512,
              state_hidden_dim=256)
STAGES = ["text_encoder", "vision_encoder", "vision_projection", "vision_language_interaction", "action_head"]


def golden_module():
    """tools/golden/turbovla.py, imported under another name (the upstream package is `turbovla`), with the
    released sizes in place of its tiny ones."""
    spec = importlib.util.spec_from_file_location("turbovla_golden", os.path.join(HERE, "turbovla.py"))
    tv = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tv)  # sets HF offline env, torch.set_num_threads(1)
    tv.DINOV3, tv.BERT, tv.IMAGE_SIZE = dict(DINOV3), dict(BERT), IMAGE_SIZE
    return tv


def setup(upstream):
    tv = golden_module()
    up = tv.setup_upstream(upstream)
    up.policy.EXPECTED_IMAGE_SIZE = IMAGE_SIZE  # setup_upstream sets the tiny fixtures' 64
    return tv, up


def du(path):
    return sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(path) for f in fs)


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "?"


# ----------------------------------------------------------------------------- --make


def full_vocab(seed):
    """bert-base-uncased's layout at its size: tokenizer_wordpiece.build_vocab() (3000), whole words, made-up words."""
    import tokenizer_wordpiece as tw
    from tokenizers import normalizers, pre_tokenizers

    vocab = tw.build_vocab()
    seen = set(vocab)
    norm, pre = normalizers.BertNormalizer(lowercase=True), pre_tokenizers.BertPreTokenizer()
    words = []
    for line in [PROMPT] + tw.LIBERO + tw.PROSE + tw.VERBS + tw.COLORS + tw.OBJECTS + tw.PLACES:
        words += [w for w, _ in pre.pre_tokenize_str(norm.normalize_str(line))]
    for w in words:
        if w not in seen and all(c.isalnum() for c in w):
            vocab.append(w)
            seen.add(w)
    rng = random.Random(seed)
    while len(vocab) < VOCAB_SIZE:
        w = tw.pseudo_words(rng, 1)[0]
        w = w if len(vocab) % 2 else "##" + w
        if w not in seen:
            vocab.append(w)
            seen.add(w)
    for token, i in tw.BERT_BASE_UNCASED_IDS.items():
        assert vocab.index(token) == i, (token, vocab.index(token), i)
    assert len(vocab) == len(seen) == VOCAB_SIZE
    return vocab


def write_tokenizer(folder, vocab):
    """vocab.txt and tokenizer.json (BertTokenizerFast's, as tokenizer_wordpiece.py writes them) for this vocabulary;
    tokenizer_config.json / special_tokens_map.json as the tiny fixtures' (nothing vocabulary-specific in them)."""
    from transformers import BertTokenizerFast

    with open(os.path.join(folder, "vocab.txt"), "w", encoding="utf-8") as f:
        f.write("".join(t + "\n" for t in vocab))
    fast = BertTokenizerFast(vocab={t: i for i, t in enumerate(vocab)}, do_lower_case=True, model_max_length=512)
    with open(os.path.join(folder, "tokenizer.json"), "w", encoding="utf-8") as f:
        f.write(fast.backend_tokenizer.to_str())
    src = os.path.join(ROOT, "tests", "fixtures", "tokenizer", "bert-wordpiece")
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        shutil.copyfile(os.path.join(src, name), os.path.join(folder, name))
    return fast.backend_tokenizer


def make(a, out):
    import torch

    tv, up = setup(a.upstream)
    if os.path.exists(out):
        marker = os.path.join(out, "make.json")
        if not (os.path.isfile(marker) and json.load(open(marker)).get("generator") == GENERATOR):
            sys.exit(f"{out} exists and was not written by --make; not removing it")
        shutil.rmtree(out)
    t0 = time.perf_counter()
    vocab = full_vocab(a.seed)
    with tempfile.TemporaryDirectory() as tmp:
        hf = write_tokenizer(tmp, vocab)
        os.makedirs(out)
        dino_dir, bert_dir = tv.write_backbone_folders(out, tmp)
    enc = hf.encode(PROMPT)
    assert vocab.index("[UNK]") not in enc.ids and len(enc.ids) <= PADDING_LENGTH, enc.tokens
    assert json.load(open(os.path.join(bert_dir, "config.json")))["vocab_size"] == VOCAB_SIZE

    torch.manual_seed(a.seed)
    cfg = tv.model_config(up, "tiny", dino_dir, bert_dir)  # the tiny fixtures' non-size fields
    cfg.vision.image_size = IMAGE_SIZE
    cfg.text.padding_length = PADDING_LENGTH
    cfg.text.padding_length_by_instruction = {}
    for k, v in INTERACTION.items():
        setattr(cfg.interaction, k, v)
    for k, v in ACTION.items():
        setattr(cfg.action, k, v)
    cfg.__post_init__()
    defaults = up.cfg.TurboVLAConfig()  # the upstream defaults are the released sizes
    for section in ("interaction", "action"):
        got, want = getattr(cfg, section), getattr(defaults, section)
        assert all(getattr(got, k) == getattr(want, k) for k in (INTERACTION if section == "interaction" else ACTION))
    model = up.model.build_turbovla(cfg)
    gen = torch.Generator().manual_seed(a.seed)
    drawn = tv.rerandomize(model, gen)
    state = tv.released_state_dict(model)
    assert all(t.dtype == torch.float32 for t in state.values())
    n = sum(t.numel() for t in state.values())
    parts = {p: sum(t.numel() for k, t in state.items() if k.startswith(p + "."))
             for p in ("vision_encoder", "text_encoder", "vision_projection", "vision_language_interaction",
                       "action_head")}
    cfg_dict = cfg.to_dict()
    cfg_dict["text"]["model_name_or_path"] = "bert"
    cfg_dict["vision"]["model_name_or_path"] = "dinov3"
    ck = os.path.join(out, tv.CKPT_NAME)
    torch.save({"global_step": 0, "model_state_dict": state, "model_config": cfg_dict}, ck)
    del model, state
    info = {"generator": GENERATOR, "seed": a.seed, "upstream": up.dir, "params": n, "params_by_part": parts,
            "tensors": sum(len(v) for v in drawn.values()),
            "weights_rerandomized": {rule: len(names) for rule, names in sorted(drawn.items())},
            "vocab_size": len(vocab), "prompt": PROMPT, "prompt_ids": enc.ids, "model_config": cfg_dict,
            "checkpoint_bytes": os.path.getsize(ck), "versions": tv.versions()}
    with open(os.path.join(out, "make.json"), "w") as f:
        json.dump(info, f, indent=1)
        f.write("\n")
    print(f"wrote {out} in {time.perf_counter() - t0:.0f} s: {n / 1e6:.1f} M parameters "
          f"({', '.join(f'{k} {v / 1e6:.1f} M' for k, v in parts.items())}), {tv.CKPT_NAME} "
          f"{os.path.getsize(ck) / 1e6:.0f} MB, folder {du(out) / 1e6:.0f} MB; vocab {len(vocab)}; "
          f"prompt ids {enc.ids}")
    print(json.dumps({"tool": "bench_turbovla", "make": out, "params": n, "checkpoint_bytes": os.path.getsize(ck),
                      "folder_bytes": du(out)}))


# ----------------------------------------------------------------------------- timing


def timed(fn, warmup, iters):
    for _ in range(warmup):
        out = fn()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        out = fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return times, out


def stat(times):
    s = sorted(times)
    return {"median": round(s[len(s) // 2], 2), "min": round(s[0], 2), "max": round(s[-1], 2),
            "all": [round(t, 2) for t in times]}


def line(name, s):
    return f"{name} ms: median {s['median']:.1f} (min {s['min']:.1f} - max {s['max']:.1f})"


def bench(a):
    import numpy as np
    import torch
    import transformers

    tv, up = setup(a.upstream)
    torch.set_num_threads(a.threads)
    P = up.policy
    d = os.path.abspath(a.ckpt)
    t0 = time.perf_counter()
    policy = P.TurboVLAPolicy(os.path.join(d, tv.CKPT_NAME), dinov3_path=os.path.join(d, "dinov3"),
                              bert_path=os.path.join(d, "bert"), device="cpu", precision="fp32", verbose=False)
    load_s = time.perf_counter() - t0
    m, cfg = policy.model, policy.loaded_model.config
    assert not m.training and policy.model_dtype == torch.float32
    assert cfg.vision.compute_precision == "fp32" and cfg.interaction.compute_precision == "fp32", cfg
    assert {p.dtype for p in m.parameters()} == {torch.float32}
    n = sum(p.numel() for p in m.parameters())
    obs = tv.make_obs(P, np.random.default_rng(a.seed + 1))
    assert obs["agentview_image"].shape == (IMAGE_SIZE, IMAGE_SIZE, 3)
    res = {}

    # what the LIBERO client calls per chunk
    times, env = timed(lambda: policy.predict_env_action_chunk_from_obs(obs, PROMPT), a.warmup, a.iters)
    res["predict"] = stat(times)

    # the model's forward alone, on the processor's tensors; stage times from forward hooks
    primary, wrist = P.rotate_libero_image(obs["agentview_image"]), P.rotate_libero_image(obs["robot0_eye_in_hand_image"])
    samples, states = policy._build_batch([primary], [wrist], [P.state_from_libero_obs(obs)])
    samples, states = policy._prepare_model_inputs(samples, states)
    stage_ms, handles, started = {s: [] for s in STAGES}, [], {}
    for s in STAGES:
        mod = getattr(m, s)
        handles.append(mod.register_forward_pre_hook(lambda *_, s=s: started.__setitem__(s, time.perf_counter())))
        handles.append(mod.register_forward_hook(
            lambda *_, s=s: stage_ms[s].append((time.perf_counter() - started[s]) * 1e3)))

    def forward():
        with torch.inference_mode():
            return m([PROMPT], samples, states)

    times, pred = timed(forward, a.warmup, a.iters)
    for h in handles:
        h.remove()
    res["forward"] = stat(times)
    per_call = {s: len(v) // (a.warmup + a.iters) for s, v in stage_ms.items()}
    stages = {}
    for s, v in stage_ms.items():  # the timed calls' share (a stage may run more than once a call)
        k = per_call[s]
        v = v[a.warmup * k:]
        stages[s] = stat([sum(v[i * k:(i + 1) * k]) for i in range(a.iters)])
    res["stages"] = stages

    norm = pred.float()[0].numpy()
    assert np.isfinite(norm).all() and np.array_equal(P.sanitize_pred_chunk(norm), norm)
    assert np.array_equal(np.stack([P.normalized_action_to_env_action(r) for r in norm]), env), \
        "forward and predict disagree"
    T, A = norm.shape
    ids = m.text_encoder.tokenizer(PROMPT)["input_ids"] if hasattr(m.text_encoder, "tokenizer") else None
    dino = m.vision_encoder.backbone.config
    print(f"TurboVLA reference (H-EmbodVis/TurboVLA, torch {torch.__version__}, transformers "
          f"{transformers.__version__}, CPU fp32, no autocast, {torch.get_num_threads()} threads, {cpu_name()}), "
          f"{n / 1e6:.1f} M parameters, 2 views at {IMAGE_SIZE} x {IMAGE_SIZE} ({(IMAGE_SIZE // 16) ** 2} patches "
          f"each), text padded to {cfg.text.padding_length}"
          + (f" ({len(ids)} tokens)" if ids is not None else "")
          + f", chunk {T} x {A}; attention: BERT {m.text_encoder.bert.config._attn_implementation}, DINOv3 "
          f"{dino._attn_implementation}; load {load_s:.1f} s; {a.warmup} warm-up + {a.iters} timed calls each")
    for name, key in (("predict (LIBERO obs -> env actions)", "predict"), ("forward (model only)", "forward")):
        print(f"{name} per iteration ms: {' '.join(f'{t:.1f}' for t in res[key]['all'])}")
        print(line(name, res[key]))
    for s, st in stages.items():
        print(line(f"  stage {s}" + (f" (x{per_call[s]})" if per_call[s] != 1 else ""), st))
    print(f"actions_norm: range [{norm.min():.3f}, {norm.max():.3f}], |a| > 0.99: {(np.abs(norm) > 0.99).mean():.0%}; "
          f"env action[0] {np.round(env[0], 3).tolist()}")
    print(json.dumps({"tool": "bench_turbovla", "ckpt": d, "threads": a.threads, "iters": a.iters,
                      "warmup": a.warmup, "params": n, "load_s": round(load_s, 2), "ms": res, "prompt": PROMPT,
                      "image_size": IMAGE_SIZE, "torch": torch.__version__,
                      "transformers": transformers.__version__, "cpu": cpu_name()}))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--upstream", default="/tmp/upstream/turbovla",
                    help="folder holding turbovla/ (see tools/golden/turbovla.py's PROVENANCE)")
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--make", metavar="DIR", help="write the full-size random checkpoint to DIR")
    g.add_argument("--ckpt", metavar="DIR", help="time the checkpoint in DIR")
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=1, help="untimed calls before the timed ones")
    ap.add_argument("--seed", type=int, default=0, help="--make: weights and fillers; --ckpt: the observation (seed + 1)")
    a = ap.parse_args()
    if a.iters < 1 or a.warmup < 0:
        ap.error("--iters must be >= 1 and --warmup >= 0")
    if a.make:
        make(a, os.path.abspath(a.make))
    else:
        bench(a)


if __name__ == "__main__":
    main()
