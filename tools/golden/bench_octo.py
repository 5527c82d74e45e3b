"""The reference Octo's latency at octo-small-1.5's size (octo-models/octo's own JAX code), for the
benchmark tables next to vla-bench's.

    # once: the full-size checkpoint, random weights (~0.55 GB; outside the repo)
    /work/venv-octo/bin/python tools/golden/bench_octo.py --upstream /tmp/upstream/octo --make /tmp/octo-full
    # the timing
    /work/venv-octo/bin/python tools/golden/bench_octo.py --upstream /tmp/upstream/octo --ckpt /tmp/octo-full \\
        [--iters 3] [--threads 2]
    # the same folder for vla-rs
    vla-convert octo --ckpt /tmp/octo-full --out /tmp/octo-full.gguf --no-tokenizer

The checkout and venv are in tools/golden/octo.py's docstring (this tool reuses its import shim, config,
statistics and weight redraw; nothing of octo is copied here).

--make DIR: octo-small-1.5's structure (scripts/configs/octo_pretrain_config.py + config.py "vit_s") at its
real sizes, no hub: token_embedding_size 384, 12 layers, 6 heads, mlp 1536, max_horizon 10, window 2,
repeat_task_tokens, use_correct_attention, readouts {action: 1}; "primary" 256 x 256 and "wrist" 128 x 128
ImageTokenizers with task_stack_keys (6 input channels), SmallStem16 at its defaults (features (32, 96, 192,
384), num_features 512: 256 + 64 tokens per step; 16 + 2 x (256 + 64 + 16 + 1) = 690 tokens in all);
LanguageTokenizer over a T5-base-sized encoder (d_model 768, 12 layers, 12 heads, d_kv 64, d_ff 3072, relu,
vocab 32128, 32 buckets, max distance 128) whose T5Config lives in DIR/t5-base-random (config.json names it
relatively, as tools/golden/octo.py does with t5-tiny; the name must contain "t5" for LanguageTokenizer to
pick FlaxT5EncoderModel); the text processor's tokenizer files in that folder are the tiny fixture's
(tests/fixtures/octo-tiny/t5-tiny: 400 ids, all < 32128; they only make the ids, the prompt "pick up the
red block and put it in the bowl." = 12 pieces + </s>, padded to 16); DiffusionActionHead at its defaults
(horizon 4, dim 7, time_dim 32, 3 blocks, hidden 256, 20 steps); dataset statistics for "bridge_dataset"
only (7-d action, gripper unmasked). Weights: OctoModel.from_config, then every leaf redrawn as octo.py's
rerandomize does (seed 0; T5 too: the weights are random, not t5-base's), saved by
OctoModel.save_pretrained (orbax 0.4.4, one aggregate msgpack, step 1000).

--ckpt DIR: OctoModel.load_pretrained(DIR) (from inside DIR, for the relative T5 folder), then times what a
user runs per control step: model.sample_actions(obs, tasks, unnormalization_statistics=bridge's,
rng=key). Octo jits sample_actions whole (@partial(jax.jit, ...) on the method; the model, params
included, is a pytree argument), so the T5 encoder, both stems, the transformer and the head's 20-step
jax.lax.scan DDPM loop are ONE XLA computation; nothing extra is jitted here. Inputs: one observation,
window 2, both cameras uint8 (uniform random, seed 0), timestep_pad_mask all True (no pad_mask_dict, as
octo.py's goldens); the task from model.create_tasks(texts=[prompt]) once, outside the timing (timed on
its own). Each timed call ends in np.asarray of the actions (blocks). The first call (trace + compile +
run) is reported separately; then --iters timed calls. Also, each under its own jax.jit: the T5 encoder
alone (FlaxT5EncoderModule on the checkpoint's hf_model params, the task's ids and mask), the transformer +
head without T5 (the task's language_instruction replaced by T5's output array, a path octo's
LanguageTokenizer takes itself for precomputed embeddings; then the head's predict_action), and the head
alone (predict_action on fixed transformer outputs). The T5 + (transformer + head) pair is checked against
sample_actions' actions (same rng).

Threads: --threads N pins the process to the first N CPUs it may use (os.sched_setaffinity before jax /
numpy load, what `taskset -c` does; the threads created later inherit it). XLA's CPU client sizes its
intra-op (Eigen) pool from the schedulable CPUs, so the pool has N workers (checked: the thread count
grows with the affinity). N = 1 also sets XLA_FLAGS --xla_cpu_multi_thread_eigen=false (Eigen's dots and
convolutions on the calling thread). `intra_op_parallelism_threads=N` is not an XLA flag (a TF session
option; XLA_FLAGS ignores the bare token), so it is not passed. OMP / OpenBLAS threads are set to N too.
"""

import argparse
import importlib.util
import json
import os
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
T5_DIR = "t5-base-random"
TOKENIZER_FILES = ["special_tokens_map.json", "spiece.model", "tokenizer.json", "tokenizer_config.json"]
T5_SIZES = dict(d_model=768, num_heads=12, d_kv=64, d_ff=3072, num_layers=12, relative_attention_num_buckets=32,
                relative_attention_max_distance=128, feed_forward_proj="relu", layer_norm_epsilon=1e-6,
                dropout_rate=0.0)
T5_VOCAB = 32128
CAMERAS = {"primary": 256, "wrist": 128}
STEM = dict(features=[32, 96, 192, 384], num_features=512)
D = 384
TRANSFORMER = dict(num_layers=12, mlp_dim=1536, num_attention_heads=6)
HEAD = dict(time_dim=32, num_blocks=3, hidden_dim=256)
DATASET = "bridge_dataset"
GENERATOR = "tools/golden/bench_octo.py --make (vla-rs): octo-small-1.5-shaped Octo, random weights"


def pin(threads):
    """Before jax / numpy load: the first `threads` CPUs of this process's set; XLA / OpenMP env."""
    cpus = sorted(os.sched_getaffinity(0))
    if threads > len(cpus):
        sys.exit(f"--threads {threads}: only {len(cpus)} CPUs available ({cpus})")
    os.sched_setaffinity(0, cpus[:threads])
    for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[k] = str(threads)
    if threads == 1:
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false").strip()
    return cpus[:threads]


def golden_module():
    """tools/golden/octo.py, imported under another name (the upstream package is `octo`)."""
    spec = importlib.util.spec_from_file_location("octo_golden", os.path.join(HERE, "octo.py"))
    og = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(og)  # sets HF_HUB_OFFLINE, USE_TF=0, USE_TORCH=0, JAX_PLATFORMS=cpu
    og.CAMERAS, og.STEM, og.D, og.T5_DIR = dict(CAMERAS), dict(STEM), D, T5_DIR
    return og


def du(path):
    return sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(path) for f in fs)


# ----------------------------------------------------------------------------- --make

def make(a, out):
    og = golden_module()
    om = og.import_octo(a.upstream)
    import jax
    import numpy as np
    from transformers import T5Config
    from octo.utils.spec import ModuleSpec

    if os.path.exists(out):
        cfg = os.path.join(out, "config.json")
        if not (os.path.isfile(cfg) and json.load(open(cfg)).get("generator") == GENERATOR):
            sys.exit(f"{out} exists and was not written by --make; not removing it")
        shutil.rmtree(out)
    t0 = time.perf_counter()
    t5 = os.path.join(out, T5_DIR)
    os.makedirs(t5)
    src = os.path.join(ROOT, "tests", "fixtures", "octo-tiny", "t5-tiny")
    for f in TOKENIZER_FILES:
        shutil.copyfile(os.path.join(src, f), os.path.join(t5, f))
    T5Config(vocab_size=T5_VOCAB, **T5_SIZES, is_encoder_decoder=True, pad_token_id=0, eos_token_id=1,
             decoder_start_token_id=0, num_decoder_layers=T5_SIZES["num_layers"]).save_pretrained(t5)
    gen = np.random.default_rng(a.seed)
    with og.chdir(out):
        config = og.make_config("diffusion")
        config["model"]["transformer_kwargs"].update(TRANSFORMER)
        config["model"]["heads"]["action"]["kwargs"].update(HEAD)
        config["generator"] = GENERATOR
        text_processor = ModuleSpec.instantiate(config["text_processor"])()
        stats = {DATASET: og.make_stats(gen)[DATASET]}
        model = om.OctoModel.from_config(config, og.example_batch("diffusion"), text_processor,
                                         rng=jax.random.PRNGKey(a.seed), dataset_statistics=stats)
        params, _ = og.rerandomize(model.params, gen)
        model = model.replace(params=jax.tree_util.tree_map(jax.numpy.asarray, params))
        del params
        model.save_pretrained(og.STEP, checkpoint_path=out)
        ids = model.create_tasks(texts=[og.PROMPT])["language_instruction"]["input_ids"][0]
    n = int(sum(np.prod(x.shape) for x in jax.tree_util.tree_leaves(model.params)))
    t5n = int(sum(np.prod(x.shape) for x in jax.tree_util.tree_leaves(
        model.params["octo_transformer"]["task_tokenizers_language"]["hf_model"])))
    ck = os.path.join(out, str(og.STEP), "default", "checkpoint")
    print(f"wrote {out} in {time.perf_counter() - t0:.0f} s: {n / 1e6:.1f} M parameters ({t5n / 1e6:.1f} M T5), "
          f"checkpoint {os.path.getsize(ck) / 1e6:.0f} MB, folder {du(out) / 1e6:.0f} MB; prompt ids {ids.tolist()}")
    print(json.dumps({"tool": "bench_octo", "make": out, "params": n, "t5_params": t5n,
                      "checkpoint_bytes": os.path.getsize(ck), "folder_bytes": du(out)}))


# ----------------------------------------------------------------------------- timing

def timed(fn, iters):
    """First call (ms), then `iters` calls: (first, sorted times, last output)."""
    t0 = time.perf_counter()
    out = fn()
    first = (time.perf_counter() - t0) * 1e3
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        out = fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return first, sorted(times), out


def stat(first, times):
    return {"median": round(times[len(times) // 2], 2), "min": round(times[0], 2), "max": round(times[-1], 2),
            "first_call": round(first, 1), "compile_approx": round(first - times[len(times) // 2], 1)}


def line(name, s):
    return (f"{name} ms: median {s['median']:.1f} min {s['min']:.1f} max {s['max']:.1f} "
            f"(first call {s['first_call']:.0f}: ~{s['compile_approx'] / 1e3:.1f} s trace + compile)")


def bench(a):
    cpus = pin(a.threads)
    og = golden_module()
    om = og.import_octo(a.upstream)
    d = os.path.abspath(a.ckpt)
    # inside DIR throughout: LanguageTokenizer.setup reads the relative T5 folder whenever jax traces the module
    with og.chdir(d):
        return bench_in(a, og, om, d, cpus)


def bench_in(a, og, om, d, cpus):
    import flax
    import jax
    import jaxlib
    import numpy as np
    from transformers import AutoConfig, FlaxT5EncoderModel

    t0 = time.perf_counter()
    model = om.OctoModel.load_pretrained(d)
    load_s = time.perf_counter() - t0
    ob = model.example_batch["observation"]
    cams = {k[len("image_"):]: tuple(v.shape[2:4]) for k, v in ob.items() if k.startswith("image_")}
    window = ob["timestep_pad_mask"].shape[1]
    gen = np.random.default_rng(0)
    obs = {f"image_{c}": gen.integers(0, 256, (1, window, *hw, 3), dtype=np.uint8) for c, hw in cams.items()}
    obs["timestep_pad_mask"] = np.ones((1, window), bool)
    t0 = time.perf_counter()
    tasks = model.create_tasks(texts=[og.PROMPT])
    tasks_ms = (time.perf_counter() - t0) * 1e3
    enc = model.config["model"]["task_tokenizers"]["language"]["kwargs"]["encoder"]
    t5cfg = AutoConfig.from_pretrained(enc)
    li = tasks["language_instruction"]
    n_ids = int(np.asarray(li["attention_mask"]).sum())
    st = model.dataset_statistics[DATASET]["action"]
    k = len(st["mean"])
    rng = jax.random.PRNGKey(0)
    params = model.params
    n = int(sum(np.prod(x.shape) for x in jax.tree_util.tree_leaves(params)))
    res = {}

    # what a user runs: octo's own jitted sample_actions
    first, times, actions = timed(
        lambda: np.asarray(model.sample_actions(obs, tasks, unnormalization_statistics=st, rng=rng)), a.iters)
    res["sample_actions"] = stat(first, times)
    assert actions.shape == (1, 4, k) and np.isfinite(actions).all(), actions

    # T5 alone
    t5 = FlaxT5EncoderModel(t5cfg, _do_init=False).module
    t5p = params["octo_transformer"]["task_tokenizers_language"]["hf_model"]
    t5_fn = jax.jit(lambda p, ids, m: t5.apply({"params": p}, input_ids=ids, attention_mask=m,
                                                 deterministic=True).last_hidden_state)
    ids, mask = np.asarray(li["input_ids"]), np.asarray(li["attention_mask"])
    first, times, emb = timed(lambda: np.asarray(t5_fn(t5p, ids, mask)), a.iters)
    res["t5"] = stat(first, times)

    # the transformer + head on the T5 output (LanguageTokenizer takes an array as precomputed embeddings)
    def tr_head(p, obs, tasks, rng):
        bound = model.module.bind({"params": p})
        tout = bound.octo_transformer(obs, tasks, obs["timestep_pad_mask"], train=False)
        return bound.heads["action"].predict_action(tout, train=False, rng=rng, embodiment_action_dim=k)

    tr_head = jax.jit(tr_head)
    tasks_emb = dict(tasks, language_instruction=emb)
    first, times, norm = timed(lambda: np.asarray(tr_head(params, obs, tasks_emb, rng)), a.iters)
    res["transformer_head"] = stat(first, times)
    mask_ = np.asarray(st["mask"])
    un = norm[..., :k]
    un = np.where(mask_, un * np.asarray(st["std"]) + np.asarray(st["mean"]), un)
    split_err = float(np.abs(un - actions).max())

    # the head alone: 20 DDPM steps on fixed transformer outputs
    tout = model.run_transformer(obs, tasks, obs["timestep_pad_mask"], train=False)
    head_fn = jax.jit(lambda p, tout, rng: model.module.bind({"params": p}).heads["action"].predict_action(
        tout, train=False, rng=rng, embodiment_action_dim=k))
    first, times, _ = timed(lambda: np.asarray(head_fn(params, tout, rng)), a.iters)
    res["head"] = stat(first, times)

    threads_now = len(os.listdir("/proc/self/task"))
    print(f"Octo reference (octo-models/octo, jax {jax.__version__} / jaxlib {jaxlib.__version__}, flax "
          f"{flax.__version__}, CPU f32, {a.threads} threads: affinity {cpus}, XLA_FLAGS "
          f"{os.environ.get('XLA_FLAGS', '')!r}, {threads_now} process threads), {n / 1e6:.1f} M parameters, "
          f"cameras {cams}, window {window}, {n_ids} of {ids.shape[1]} ids, load {load_s:.1f} s, "
          f"create_tasks {tasks_ms:.1f} ms (outside the timing); {a.iters} runs after the first call")
    print(line("sample_actions (all, octo's jit)", res["sample_actions"]))
    print(line("T5 encoder alone", res["t5"]))
    print(line("transformer + head (no T5)", res["transformer_head"]))
    print(line("diffusion head alone (20 steps)", res["head"]))
    print(f"T5 then transformer + head vs sample_actions (max abs diff, un-normalized): {split_err:.2e}")
    print(json.dumps({"tool": "bench_octo", "ckpt": d, "threads": a.threads, "iters": a.iters, "params": n,
                      "cameras": {c: list(hw) for c, hw in cams.items()}, "window": window, "ids": n_ids,
                      "load_s": round(load_s, 2), "create_tasks_ms": round(tasks_ms, 2), "ms": res,
                      "split_max_abs_diff": split_err, "jax": jax.__version__, "flax": flax.__version__,
                      "xla_flags": os.environ.get("XLA_FLAGS", ""), "affinity": cpus}))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--upstream", default="/tmp/upstream/octo", help="a checkout of octo-models/octo (241fb35)")
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--make", metavar="DIR", help="write the full-size random checkpoint to DIR")
    g.add_argument("--ckpt", metavar="DIR", help="time the checkpoint in DIR")
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0, help="--make's weights and statistics")
    a = ap.parse_args()
    if a.make:
        make(a, os.path.abspath(a.make))
    else:
        bench(a)


if __name__ == "__main__":
    main()
