"""Golden fixture for Octo: octo-models/octo's own JAX code (octo-small-1.5's structure, scaled down), random weights.

Rerun (offline; the venv and the upstream checkout are outside the repo, CI never needs them):

    # the reference, a public GitHub repository (MIT), at the commit the fixture was made from
    git clone https://github.com/octo-models/octo /tmp/upstream/octo && git -C /tmp/upstream/octo checkout 241fb35
    python3.11 -m venv /work/venv-octo
    /work/venv-octo/bin/pip install jax==0.4.20 jaxlib==0.4.20 flax==0.7.5 distrax==0.1.5 chex==0.1.85 \\
        optax==0.1.5 numpy==1.24.3 ml_dtypes==0.2.0 "scipy<1.13" einops tensorflow_probability==0.23.0 \\
        ml_collections transformers==4.51.3 sentencepiece tokenizers safetensors msgpack
        # pip picks orbax-checkpoint 0.4.4 (flax 0.7.5's dependency) and tokenizers 0.21.4
    /work/venv-octo/bin/python tools/golden/octo.py --upstream /tmp/upstream/octo
        # tests/fixtures/octo-tiny (committed): the DiffusionActionHead model, then --check in a fresh process
    /work/venv-octo/bin/python tools/golden/octo.py --upstream /tmp/upstream/octo --variant l1
        # tests/fixtures/octo-tiny-l1 (committed): L1ActionHead (MAP), the December attention rule, proprio
    /work/venv-octo/bin/python tools/golden/octo.py --upstream /tmp/upstream/octo --check tests/fixtures/octo-tiny
        # reload the folder in a fresh process with OctoModel.load_pretrained and reproduce the golden
        # actions (bit-identical, <= 1e-6 asserted), the prompt's ids (also through tokenizer.json alone), the
        # raw checkpoint file against the restored params; replay the recorded noise in numpy; then recompute
        # every golden tensor with an independent float64 implementation (reference_forward: the formulas
        # below made executable, reading the msgpack with `msgpack` alone; no octo / flax / jax)

Seed 0; regenerating gives byte-identical files (checked: two runs, `cmp` on every file).

The upstream code is imported from --upstream (sys.path); nothing of it is copied here. What the tool changes, in
its own process only:
- TensorFlow and dlimp are not installed: octo/model/octo_model.py imports tensorflow for tf.io.gfile only and
  octo/data/utils/{text_processing,data_utils}.py import tensorflow / dlimp at module level (NormalizationType
  and HFTokenizer, the only names used from them, need neither). A fake `tensorflow` module whose io.gfile
  maps GFile / join / exists to open / os.path.join / os.path.exists (every other attribute a do-nothing
  object) and a fake `dlimp` are put into sys.modules only while octo's modules are imported (they keep their
  reference), after jax, flax, distrax, tensorflow_probability's JAX substrate, orbax and transformers are
  imported with USE_TF=0 USE_TORCH=0, and removed right after: those libraries, etils (orbax's paths) and
  einops probe for tensorflow and must see it absent. The checkpoint is written by orbax-checkpoint 0.4.4
  itself (OctoModel.save_pretrained), not by this tool.
- Paths: config.json names the tiny T5 folder as the RELATIVE path "t5-tiny" (LanguageTokenizer's `encoder`
  and HFTokenizer's `tokenizer_name`; the released models say "t5-base", a hub name). LanguageTokenizer picks
  FlaxT5EncoderModel because "t5" is in that string. The tool chdirs into the checkpoint folder before
  building / loading the model, so "t5-tiny" resolves to <ckpt>/t5-tiny (HF_HUB_OFFLINE=1). A reader must
  resolve it the same way (or take the tokenizer folder from its command line).

Configuration (OctoModule.create with the dict scripts/configs/octo_pretrain_config.py + config.py build for
octo-small-1.5, scaled down; everything not listed at Octo's defaults), config.json["model"]:
- observation_tokenizers, in this order (= token order): "primary" ImageTokenizer(obs_stack_keys
  ["image_primary"], task_stack_keys ["image_primary"], encoder SmallStem16(features (32, 32, 32, 64),
  num_features 48)), "wrist" the same with image_wrist; l1 also "proprio" LowdimObsTokenizer(obs_keys
  ["proprio"], discretize True, n_bins 16, low -2, high 2, bin_type "uniform"). SmallStem16: 4 x [StdConv 3x3
  stride 2 padding 1 (bias) -> GroupNorm(32 groups, eps 1e-6) -> relu], then Conv "embedding" kernel = stride =
  patch_size // 16 = 1, VALID (bias). Frames: primary 80 x 80 (-> 40, 20, 10, 5: 25 tokens), wrist 48 x 48
  (-> 3 x 3: 9 tokens).
- task_tokenizers: "language" LanguageTokenizer(encoder "t5-tiny", finetune_encoder False): FlaxT5EncoderModel
  .module of t5-tiny/config.json: d_model 24, num_heads 3, d_kv 8, d_ff 40, num_layers 2, relative_attention
  _num_buckets 32, relative_attention_max_distance 128, feed_forward_proj "relu", layer_norm_epsilon 1e-6,
  vocab_size 400 (= len(tokenizer): 300 SentencePiece pieces + 100 <extra_id_*>), dropout 0.
- readouts {"action": 1}; repeat_task_tokens True; max_horizon 10; window 2 (example_batch's second axis);
  token_embedding_size 32; transformer_kwargs num_layers 2, mlp_dim 64, num_attention_heads 4, dropout_rate 0,
  attention_dropout_rate 0, add_position_embedding False; use_correct_attention True (l1: False).
- heads "action": DiffusionActionHead(readout_key "readout_action", use_map False, action_horizon 4, action_dim
  7, time_dim 8, num_blocks 2, hidden_dim 32, diffusion_steps 20, use_layer_norm True, dropout_rate 0,
  n_diffusion_samples 1, max_action 5); l1: L1ActionHead(readout_key "readout_action", use_map True,
  action_horizon 4, action_dim 7) (max_action 5, MAPHead(num_heads 8, mlp_dim 4 d) over the readout token).
- text_processor: HFTokenizer(tokenizer_name "t5-tiny", encode_with_model False, tokenizer_kwargs max_length
  16, padding "max_length", truncation True, return_tensors "np").
- config.json also has window_size 2 and dataset_kwargs.frame_transform_kwargs.resize_size {primary: [80, 80],
  wrist: [48, 48]} as a training run would save them, seed, pretrained_loaders [] (no T5 weights loaded).

Tokenizer (no hub): SentencePiece trains a UNIGRAM model (vocab 300, normalization nmt_nfkc as T5's, pad 0
"<pad>", eos 1 "</s>", unk 2 "<unk>", no bos, byte_fallback off, one thread) on a made-up robot-instruction
corpus this tool writes (templates, no randomness); transformers' T5TokenizerFast(vocab_file, extra_ids 100)
converts it (legacy behaviour, as t5-base; add_prefix_space True, which makes the converter write
Metaspace(prepend_scheme "always") like t5-base's tokenizer.json: without it transformers 4.51.3 writes
"never" and the fast tokenizer drops the leading "▁" of the first word, disagreeing with the slow one) and
save_pretrained writes t5-tiny/{spiece.model, tokenizer.json, tokenizer_config.json, special_tokens_map.json};
T5Config.save_pretrained writes t5-tiny/config.json. The slow T5Tokenizer's, the fast one's and AutoTokenizer's
(what HFTokenizer loads) ids are asserted equal. The prompt "pick up the red block and put it in the bowl."
-> 12 pieces + "</s>" (1), padded with 0 to 16 (attention_mask 1 x 13, 0 x 3): the padding path is covered.
(SentencePiece's unigram seeds are substrings that occur in at least two DISTINCT whitespace-split words: the
corpus has "pick," "put." "and," so that these words can become whole pieces.)

Weights: OctoModel.from_config(rng PRNGKey(seed)) then EVERY leaf redrawn (numpy Generator(seed), leaves in
sorted path order): conv / Dense / attention kernels N(0, 1 / fan_in) (fan_in = kh kw cin for convs, the input
width for Dense and q/k/v, heads * head_dim for attention out kernels); biases 0.1 N; LayerNorm / GroupNorm
scales and T5's RMSNorm "weight" U(0.8, 1.2); T5's token table N(0, 1) and relative_attention_bias N(0, 1);
Octo's *_pos_embedding N(0, 0.5) (its init is 0.02); MAPHead's probe N(0, 1); FourierFeatures' kernel
(".../time_preprocess/kernel" [4, 1]) N(0, 0.2) (Octo's own init scale). The T5 weights are random (not
t5-base) and live inside the Octo checkpoint, under octo_transformer/task_tokenizers_language/hf_model.

Dataset statistics (dataset_statistics.json, as Octo writes them): "bridge_dataset" action 7-d (mask False on
the gripper, dim 6) and "small_arm" action 5-d (mask False on dim 4), each action {mean, std, max, min, p99,
p01, mask}, proprio 5-d {mean, std, max, min, p99, p01} (the model never reads these), num_transitions,
num_trajectories (ints). Values: mean N(0, 0.3), std U(0.05, 0.5), min / max = mean -/+ 3 std, p01 / p99 =
mean -/+ 2.3 std.

Inputs: observation {image_primary u8 [1, 2, 80, 80, 3], image_wrist u8 [1, 2, 48, 48, 3] (uniform random),
timestep_pad_mask bool [1, 2] all True; l1 also proprio f32 [1, 2, 5] = U(-2.5, 2.5), some outside [-2, 2]}: no
observation pad_mask_dict (as Octo's HistoryWrapper gives; the image tokenizers' masks are then all ones).
Task: OctoModel.create_tasks(texts=[prompt]) (zeros for example_batch's task images and timestep,
pad_mask_dict {image_primary: False, image_wrist: False, timestep: False, language_instruction: True}, the
text processor's {input_ids, attention_mask}). Actions: OctoModel.sample_actions (jitted) with rng
PRNGKey(seed), unnormalization_statistics = dataset_statistics[name]["action"], NORMAL.

What the reference does that a reader may not expect (all reproduced by the golden tensors):
- Goal images: task_stack_keys stacks the TASK image on the observation image along channels BEFORE the stem,
  so each stem's first conv has 6 input channels; with a language task the goal is zeros -> normalized to
  -1.0 (u8 / 127.5 - 1). The task's pad_mask_dict False for image_* does NOT mask anything: the image
  tokenizers take their pad mask from observations["pad_mask_dict"] (absent -> ones).
- StdConv standardizes the STORED kernel on every call: w' = (w - mean) / (std + 1e-5), mean / population std
  over (kh, kw, cin) per output channel; the checkpoint holds the raw kernel. The "embedding" conv is a
  plain nn.Conv (not standardized).
- GroupNorm / LayerNorm (flax 0.7.5): var = max(E[x^2] - E[x]^2, 0) (the "fast variance"), eps 1e-6 inside
  the rsqrt; 32 groups (32-wide stages: one channel per group over H x W; the 64-wide stage: 2 channels).
- Language pad mask: the language tokens' mask is pad_mask_dict["language_instruction"] broadcast over all
  16 positions, NOT the tokenizer's attention_mask: the transformer attends to the T5 outputs of the padding
  positions too. T5 itself uses attention_mask (padded keys get finfo(f32).min added).
- T5 (Flax): no 1/sqrt(d_kv) scaling; the relative position bias (layer 0's table [32 buckets, 3 heads],
  shared by all layers) is added to the logits together with the padding mask; bucket(rel = key - query):
  half = 16, b = 16 (rel > 0), n = |rel|, b += n if n < 8 else min(8 + trunc(log(n / 8) / log(128 / 8) * 8),
  15); pre-norm layers x += SA(RMS(x)); x += wo(relu(wi(RMS(x)))); RMS(x) = x / sqrt(mean(x^2) + 1e-6) *
  weight (no mean, no bias); final_layer_norm; no embedding scaling; q/k/v/o/wi/wo have no biases.
- Sequence: [task_language 16] then for each window step t: [obs_primary 25, obs_wrist 9, (l1: obs_proprio 5),
  obs_task_language 16 (the projected + pos-embedded language tokens repeated: repeat_task_tokens), readout
  _action 1]. Task tokens = Dense(t5.out) + task_language_pos_embedding [1, 16, 32]; obs tokens = Dense(tokens) +
  obs_*_pos_embedding[:, t] (shape [1, max_horizon = 10, n, 32]); readout = 0 + readout_action_pos_embedding
  [:, t]. The repeated language group gets no second pos embedding.
- Attention mask (BlockTransformer.generate_attention_mask): token i attends to j iff rule(group(i), group(j))
  and step(j) <= step(i) (prefix step -1), AND j's pad flag. Rules: task_* -> task_* only; obs_* -> task_*,
  obs_*; readout_action -> task_*, obs_*, readout_action. group(i) = searchsorted(cumsum(group sizes), i, side)
  within the prefix / the step: side "right" (use_correct_attention True) is the true group; side "left" (the
  December 2023 models, use_correct_attention False: the l1 variant) gives the FIRST token of every group but
  the first to the PREVIOUS group (with one readout token, the readout itself counts as obs_task_language:
  observation tokens then attend to it, and it loses its own readout rule).
- Transformer: pre-LN Encoder1DBlock (LN -> MHA(mask) -> +x; LN -> Dense(mlp) -> gelu (tanh approximation,
  flax's default) -> Dense -> +x), then encoder_norm. MHA: q k^T / sqrt(head_dim), masked logits set to
  finfo(f32).min before softmax.
- Diffusion head: embedding = mean over the readout tokens (one token). Per window step (both steps run; only
  the last is returned). ScoreActor: t_ff = [cos(f), sin(f)], f = (float32(2 pi) * t) @ W^T with the time t
  passed as INT32 (jnp.arange in the scan) and promoted to f32; cond = Dense(16) -> swish -> Dense(8);
  x = concat[cond (8), embedding (32), noisy (28)] -> Dense(32) -> 2 x [LN -> Dense(128) -> swish ->
  Dense(32), + residual] -> swish -> Dense(28) = eps. Schedule: cosine_beta_schedule(20) in f32 (betas
  clipped to 0.999: beta_19 = 0.999), alphas = 1 - betas, alpha_hats = cumprod. Step (time 19 .. 0):
  x = (x - (1 - alpha_t) / sqrt(1 - alpha_hat_t) eps) / sqrt(alpha_t); x += (t > 0) sqrt(beta_t) z;
  x = clip(x, -5, 5); x = where(mask, x, sqrt(1 - alpha_hat_t) z) with mask False for dims >=
  embodiment_action_dim (= len(stats mean)) of each of the 4 horizon rows (the masked dims are fed back).
  z is drawn at every step, also at t = 0.
- Un-normalization (sample_actions, NORMAL): a = a[..., :len(mask)]; where(mask, a * std + mean, a): the
  gripper (mask False) stays normalized.
- L1 head: MAPHead(probe [1, 1, 32], MHA 8 heads of 4, LN, MlpBlock 128, mask = readout mask) -> Dense(28) ->
  tanh(x / 5) * 5.
- Proprio (l1): clip(x, -2 + 1e-6, 2 - 1e-6), bin = argmax((x < thr[1:]) & (x >= thr[:-1])), thr =
  linspace(-2, 2, 17) (f32), one_hot(16) -> Dense(32) + obs_proprio_pos_embedding: 5 tokens per step.

Noise (diffusion only): DiffusionActionHead.predict_action draws, from the rng given to sample_actions:
rng, key = split(rng); x_19 = normal(key, (1, 2, 28)); then in jax.lax.scan over time 19 .. 0: rng, key =
split(rng); z = normal(key, (1, 2, 28)). The tool replays that key chain outside (jax 0.4.20's threefry2x32,
jax_threefry_partitionable off), stores noise.init [2, 28] and noise.steps [20, 2, 28] (scan order: row 0 is
time 19), and checks that a numpy loop over the head's own eps with these noises gives the sampler's output,
for both the bridge (7 dims) and the small_arm (5 dims, masked path) runs: to <= 1e-5 (measured 3.1e-6 and
9.5e-7), not 1e-6: the jitted eps differs from a separately compiled one in the last float32 bit, and the
first step multiplies it by 1 / sqrt(alpha_19) = 31.6 (beta_19 = 0.999); for the same reason
actions.normalized, taken from the head's predict_action (run_transformer jitted) rather than from inside
sample_actions, matches sample_actions' un-normalized values to ~2e-6. A reader's sampler should expect
errors of ~30x its eps error. With random weights half of actions.normalized sits on the clip (+-5): the first
step saturates most entries and the small late-step coefficients do not pull them back; sampler.x / sampler.eps
give every step.

Files (tests/fixtures/octo-tiny, octo-tiny-l1): the checkpoint as OctoModel.save_pretrained leaves it:
config.json, example_batch.msgpack (load_pretrained needs it: the input shapes), dataset_statistics.json,
1000/default/checkpoint (orbax 0.4.4, aggregate: ONE msgpack of the params tree, flax's encoding: nested maps
with string keys, top level {"heads_action", "octo_transformer"} (no "params" wrapper), every array an ext
type 1 whose payload is msgpack [shape, dtype name, C-order bytes] ("float32", little endian); no chunked
arrays at this size; golden.json "checkpoint" lists every path and shape) and 1000/default/_METADATA (orbax's
JSON tree metadata; a reader can ignore it); t5-tiny/ (tokenizer + T5 config.json; byte-identical in both
fixtures); golden.json (versions, seed, sizes, prompt, ids, statistics used, rules, every param path with its
shape and draw) and golden.safetensors (float32 unless said; batch dim dropped; N = 16 + 2 * 51 = 118 tokens,
l1 16 + 2 * 56 = 128):
  image.primary u8 [2, 80, 80, 3], image.wrist u8 [2, 48, 48, 3] (both window steps); input_ids i32 [16],
  attention_mask i32 [16]; proprio [2, 5] (l1: the model input), proprio.bins i32 [2, 5] (l1);
  stem.{primary,wrist}.{0..3} [h, w, c] (window step 0, after conv + GroupNorm + relu; the stem's input,
  not stored, is concat[u8 / 127.5 - 1, -1 x 3] [h, w, 6]);
  stem.{primary,wrist}.out [h, w, 48] (the embedding conv); t5.out [16, 24] (last_hidden_state);
  tokens.language [16, 32]; tokens.primary [2, 25, 32]; tokens.wrist [2, 9, 32]; tokens.proprio [2, 5, 32] (l1);
  tokens.readout [2, 1, 32] (after projection + pos embedding: the transformer's input rows);
  transformer.in [N, 32]; attention.mask u8 [N, N] (1 = row attends to column; rule AND pad; the l1 fixture's
  December rule differs from the correct one in 165 entries: every observation token attends to the readout);
  transformer.layer.{0,1} [N, 32] (each Encoder1DBlock's output); transformer.out [N, 32] (after
  encoder_norm); embedding [2, 32] (the head's pooled readout per step: mean for diffusion, MAPHead output for
  l1); diffusion.{betas, alphas, alpha_hats} [20] (diffusion, float32 as jnp computes them); noise.init [2, 28],
  noise.steps [20, 2, 28] (diffusion); eps.first [2, 28] (diffusion: the first eps, time 19, on noise.init);
  sampler.eps, sampler.x [20, 2, 28] (diffusion, bridge run, from the numpy replay: eps and x after each step,
  scan order); actions.normalized [4, 7] (last window step, before un-normalizing); actions [4, 7]
  (bridge_dataset); actions.small_arm.normalized [4, 7] (diffusion: the small_arm run's sampler output; dims
  5, 6 are the masked path's noise; l1: the same as actions.normalized); actions.small_arm [4, 5].

--check also runs reference_forward: measured max |ref - golden| / max(1, max |golden|) <= 2e-6 for every
stage of both fixtures, 1.9e-5 for sampler.x (asserted: 1e-4 for the stages, 1e-3 for the sampler and actions,
exact for attention.mask and proprio.bins).

Sizes: octo-tiny 155,696 params (checkpoint 627 KB), octo-tiny-l1 151,188; each folder ~1.95 MB on disk,
~1.2 MB compressed (t5-tiny's spiece.model and tokenizer.json, 610 KB, are mostly nmt_nfkc's precompiled
charsmap, as in t5-base's; git stores the identical copies once). ~1 min per fixture on 2 cores, check included.
"""
import argparse
import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import types

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ["USE_TF"] = "0"
os.environ["USE_TORCH"] = "0"
os.environ.setdefault("JAX_PLATFORMS", "cpu")
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))

UPSTREAM = "octo-models/octo 241fb35"
STEP = 1000  # the checkpoint's step folder
T5_DIR = "t5-tiny"  # relative to the checkpoint folder, as config.json names it
PROMPT = "pick up the red block and put it in the bowl."
WINDOW = 2
MAX_LEN = 16
VOCAB_SPM = 300
EXTRA_IDS = 100
T5_SIZES = dict(d_model=24, num_heads=3, d_kv=8, d_ff=40, num_layers=2, relative_attention_num_buckets=32,
                relative_attention_max_distance=128, feed_forward_proj="relu", layer_norm_epsilon=1e-6,
                dropout_rate=0.0)
STEM = dict(features=[32, 32, 32, 64], num_features=48)
CAMERAS = {"primary": 80, "wrist": 48}
D = 32
ACTION_DIM, HORIZON, STEPS = 7, 4, 20
PROPRIO_DIM = 5
VARIANTS = {"diffusion": "octo-tiny", "l1": "octo-tiny-l1"}
# the numpy replay against the jitted sampler: eps differs from the scan's by float32 rounding (XLA fuses
# differently), and the first step multiplies it by 1 / sqrt(alpha_19) = 31.6 (beta_19 = 0.999)
REPLAY_TOL = 1e-5


# ----------------------------------------------------------------------------- imports

def import_octo(upstream):
    """Imports the real libraries first (they probe for tensorflow), then fakes tensorflow / dlimp, then octo."""
    import distrax  # noqa: F401
    import flax  # noqa: F401
    import jax  # noqa: F401
    import orbax.checkpoint  # noqa: F401
    import tensorflow_probability.substrates.jax  # noqa: F401
    import transformers  # noqa: F401
    from transformers import AutoConfig, AutoTokenizer, FlaxAutoModel, FlaxT5EncoderModel  # noqa: F401

    class Nothing:
        def __getattr__(self, k):
            return Nothing()

        def __call__(self, *a, **k):
            return Nothing()

    assert "tensorflow" not in sys.modules and "dlimp" not in sys.modules
    tf = types.ModuleType("tensorflow")
    tf.__getattr__ = lambda k: Nothing()
    tf.io = types.SimpleNamespace(gfile=types.SimpleNamespace(
        GFile=open, join=os.path.join, exists=os.path.exists, makedirs=os.makedirs))
    dl = types.ModuleType("dlimp")
    dl.__getattr__ = lambda k: Nothing()
    sys.modules["tensorflow"], sys.modules["dlimp"] = tf, dl
    sys.path.insert(0, os.path.abspath(upstream))
    try:
        import octo.data.utils.text_processing  # noqa: F401
        import octo.model.components.action_heads  # noqa: F401
        import octo.model.components.tokenizers  # noqa: F401
        import octo.model.components.vit_encoders  # noqa: F401
        import octo.model.octo_model as om
        import octo.utils.spec  # noqa: F401
    finally:
        # octo's modules keep their reference to the fakes; nothing else may see them (etils and einops probe
        # sys.modules / find_spec("tensorflow") at run time)
        del sys.modules["tensorflow"], sys.modules["dlimp"]
    assert os.path.abspath(om.__file__).startswith(os.path.abspath(upstream)), om.__file__
    return om


@contextlib.contextmanager
def chdir(d):
    old = os.getcwd()
    os.chdir(d)
    try:
        yield
    finally:
        os.chdir(old)


# ----------------------------------------------------------------------------- tokenizer

def corpus():
    """A made-up robot-instruction corpus (deterministic templates)."""
    verbs = ["pick up", "put", "place", "move", "push", "slide", "lift", "grasp", "open", "close", "stack",
             "wipe", "turn", "pour", "drop", "take", "bring", "flip", "knock over", "rotate"]
    colors = ["red", "green", "blue", "yellow", "orange", "purple", "white", "black", "pink", "silver"]
    objects = ["block", "cube", "bowl", "cup", "spoon", "sponge", "towel", "drawer", "can", "bottle", "carrot",
               "banana", "pot", "pan", "lid", "knife", "plate", "marker", "cloth", "eggplant"]
    places = ["in the bowl", "on the plate", "into the drawer", "on the table", "to the left", "to the right",
              "in the sink", "on the stove", "next to the cup", "behind the pot", "on top of the block",
              "in the basket", "near the towel", "inside the box"]
    out = []
    for i, v in enumerate(verbs):
        for j, c in enumerate(colors):
            for k, o in enumerate(objects):
                p = places[(i + j + k) % len(places)]
                if (i + 2 * j + 3 * k) % 3 == 0:
                    out.append(f"{v} the {c} {o} {p}.")
                elif (i + j + k) % 3 == 1:
                    out.append(f"{v} the {c} {o} and put it {p}")
                else:
                    out.append(f"Please {v} the {o}, then {verbs[(i + k) % len(verbs)]} the {c} one {p}.")
    extra = ("carefully slowly quickly gently firmly gripper arm robot camera wrist elbow shoulder joint "
             "kitchen counter shelf cabinet fridge microwave oven faucet handle knob button switch lever door "
             "window curtain laundry basket hanger shirt sock glove hat shoe umbrella keyboard mouse laptop phone "
             "charger cable book notebook pencil eraser scissors tape glue paper envelope stamp tomato potato "
             "onion garlic lemon apple orange grape cherry strawberry pepper salt sugar flour butter cheese bread "
             "sandwich pizza noodle rice soup coffee tea milk juice water bottle jar vase flower plant tree leaf "
             "rock stone brick wood metal plastic glass ceramic rubber foam sponge brush broom mop bucket hammer "
             "screwdriver wrench pliers drill nail screw bolt nut washer spring wheel gear chain rope string wire "
             "first second third fourth fifth upper lower middle corner edge center surface bottom front back "
             "above below beside between across along around through toward away from until while before after").split()
    for i, w in enumerate(extra):
        a, b = extra[(7 * i + 3) % len(extra)], extra[(11 * i + 5) % len(extra)]
        out.append(f"{verbs[i % len(verbs)]} the {w} {places[i % len(places)]}, then {verbs[(3 * i) % len(verbs)]} "
                   f"the {a} {b}.")
        way = ["up", "down", "left", "right"][i % 4]
        out.append(f"The {w} is {colors[i % len(colors)]}; move it {i % 40 + 1} cm {way}.")
    # SentencePiece's unigram seeds are substrings found in at least two DISTINCT whitespace-split words, so a
    # frequent word becomes a whole piece only if it also occurs with punctuation attached:
    out += ["what to pick, what to put, and where?", "Things to do: pick. put. this and, that and."]
    out += [PROMPT, "pick up the red block and put it in the bowl", "What should the robot do?",
            "open the top drawer, put the sponge inside, then close it.", "Move 10 cm left; rotate 90 degrees!"]
    return out


def build_tokenizer(folder):
    """spiece.model (SentencePiece unigram) -> T5TokenizerFast -> save_pretrained(folder); T5Config too."""
    import io

    import sentencepiece as spm
    from transformers import T5Config, T5Tokenizer, T5TokenizerFast
    os.makedirs(folder)
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus()), model_writer=model, model_type="unigram", vocab_size=VOCAB_SPM,
        normalization_rule_name="nmt_nfkc", pad_id=0, eos_id=1, unk_id=2, bos_id=-1, pad_piece="<pad>",
        eos_piece="</s>", unk_piece="<unk>", character_coverage=1.0, num_threads=1, byte_fallback=False,
        shuffle_input_sentence=False, minloglevel=2)
    tmpdir = tempfile.mkdtemp()
    tmp = os.path.join(tmpdir, "spiece.model")
    with open(tmp, "wb") as f:
        f.write(model.getvalue())
    fast = T5TokenizerFast(vocab_file=tmp, extra_ids=EXTRA_IDS, add_prefix_space=True)
    slow = T5Tokenizer(vocab_file=tmp, extra_ids=EXTRA_IDS)
    fast.save_pretrained(folder)
    shutil.rmtree(tmpdir)
    saved = os.path.join(folder, "spiece.model")
    assert open(saved, "rb").read() == model.getvalue(), "spiece.model not saved as trained"
    assert sorted(os.listdir(folder)) == ["special_tokens_map.json", "spiece.model", "tokenizer.json",
                                          "tokenizer_config.json"], os.listdir(folder)
    from transformers import AutoTokenizer
    auto = AutoTokenizer.from_pretrained(folder)  # what HFTokenizer loads
    assert type(auto).__name__ == "T5TokenizerFast", type(auto)
    for s in corpus()[::37] + [PROMPT, "Zebra XYZ <extra_id_0> 123", "  two  spaces, Café."]:
        assert fast(s)["input_ids"] == slow(s)["input_ids"] == auto(s)["input_ids"], s
    cfg = T5Config(vocab_size=len(fast), **T5_SIZES, is_encoder_decoder=True, pad_token_id=0, eos_token_id=1,
                   decoder_start_token_id=0, num_decoder_layers=T5_SIZES["num_layers"])
    cfg.save_pretrained(folder)
    return len(fast)


# ----------------------------------------------------------------------------- config

def make_config(variant):
    """The training config as config.to_dict() would hold it, json-normalized (tuples -> lists)."""
    from octo.data.utils.text_processing import HFTokenizer
    from octo.model.components.action_heads import DiffusionActionHead, L1ActionHead
    from octo.model.components.tokenizers import ImageTokenizer, LanguageTokenizer, LowdimObsTokenizer
    from octo.model.components.vit_encoders import SmallStem16
    from octo.utils.spec import ModuleSpec
    obs_tok = {
        cam: ModuleSpec.create(ImageTokenizer, obs_stack_keys=[f"image_{cam}"], task_stack_keys=[f"image_{cam}"],
                               encoder=ModuleSpec.create(SmallStem16, **STEM))
        for cam in CAMERAS}
    if variant == "l1":
        obs_tok["proprio"] = ModuleSpec.create(LowdimObsTokenizer, obs_keys=["proprio"], discretize=True,
                                               n_bins=16, low=-2.0, high=2.0, bin_type="uniform")
        head = ModuleSpec.create(L1ActionHead, readout_key="readout_action", use_map=True,
                                 action_horizon=HORIZON, action_dim=ACTION_DIM)
    else:
        head = ModuleSpec.create(DiffusionActionHead, readout_key="readout_action", use_map=False,
                                 action_horizon=HORIZON, action_dim=ACTION_DIM, n_diffusion_samples=1,
                                 dropout_rate=0.0, time_dim=8, num_blocks=2, hidden_dim=32,
                                 diffusion_steps=STEPS, use_layer_norm=True)
    model = dict(
        observation_tokenizers=obs_tok,
        task_tokenizers={"language": ModuleSpec.create(LanguageTokenizer, encoder=T5_DIR, finetune_encoder=False)},
        heads={"action": head},
        readouts={"action": 1},
        token_embedding_size=D,
        transformer_kwargs=dict(attention_dropout_rate=0.0, add_position_embedding=False, num_layers=2,
                                mlp_dim=64, num_attention_heads=4, dropout_rate=0.0),
        max_horizon=10,
        use_correct_attention=variant != "l1",
        repeat_task_tokens=True,
    )
    cfg = dict(
        seed=0,
        model=model,
        window_size=WINDOW,
        text_processor=ModuleSpec.create(
            HFTokenizer, tokenizer_name=T5_DIR, encode_with_model=False,
            tokenizer_kwargs={"max_length": MAX_LEN, "padding": "max_length", "truncation": True,
                              "return_tensors": "np"}),
        pretrained_loaders=[],
        dataset_kwargs=dict(
            traj_transform_kwargs=dict(window_size=WINDOW, action_horizon=HORIZON, max_action_dim=ACTION_DIM),
            frame_transform_kwargs=dict(resize_size={c: [s, s] for c, s in CAMERAS.items()})),
        generator="tools/golden/octo.py (vla-rs): tiny random Octo, variant " + variant,
    )
    return json.loads(json.dumps(cfg))


def example_batch(variant):
    """What a training run's first batch looks like (one example; zeros)."""
    import numpy as np
    obs = {f"image_{c}": np.zeros((1, WINDOW, s, s, 3), np.uint8) for c, s in CAMERAS.items()}
    if variant == "l1":
        obs["proprio"] = np.zeros((1, WINDOW, PROPRIO_DIM), np.float32)
    obs["timestep"] = np.zeros((1, WINDOW), np.int32)
    obs["pad_mask_dict"] = {k: np.ones((1, WINDOW), bool) for k in obs}
    obs["timestep_pad_mask"] = np.ones((1, WINDOW), bool)
    obs["task_completed"] = np.zeros((1, WINDOW, HORIZON), bool)
    task = {f"image_{c}": np.zeros((1, s, s, 3), np.uint8) for c, s in CAMERAS.items()}
    task["timestep"] = np.zeros((1,), np.int32)
    task["language_instruction"] = {"input_ids": np.zeros((1, MAX_LEN), np.int32),
                                    "attention_mask": np.zeros((1, MAX_LEN), np.int32)}
    task["pad_mask_dict"] = {k: np.ones((1,), bool) for k in task}
    return {"observation": obs, "task": task,
            "action": np.zeros((1, WINDOW, HORIZON, ACTION_DIM), np.float32),
            "action_pad_mask": np.ones((1, WINDOW, HORIZON, ACTION_DIM), bool)}


def make_stats(gen):
    import numpy as np

    def block(d, mask=None, n=None):
        mean = (0.3 * gen.standard_normal(d)).astype(np.float32)
        std = gen.uniform(0.05, 0.5, d).astype(np.float32)
        s = {"mean": mean, "std": std, "max": mean + 3 * std, "min": mean - 3 * std,
             "p99": mean + 2.3 * std, "p01": mean - 2.3 * std}
        if mask is not None:
            s["mask"] = np.array(mask, bool)
        return s

    return {
        "bridge_dataset": {"action": block(7, [True] * 6 + [False]), "proprio": block(PROPRIO_DIM),
                           "num_transitions": np.array(2135463), "num_trajectories": np.array(60064)},
        "small_arm": {"action": block(5, [True] * 4 + [False]), "proprio": block(PROPRIO_DIM),
                      "num_transitions": np.array(48211), "num_trajectories": np.array(512)},
    }


# ----------------------------------------------------------------------------- weights

def rerandomize(params, gen):
    """Every leaf redrawn (see the docstring); returns the new tree and {path: rule}."""
    import numpy as np
    from flax.traverse_util import flatten_dict, unflatten_dict
    flat = flatten_dict(params)
    out, rules = {}, {}
    for path in sorted(flat):
        v = np.asarray(flat[path])
        name, p = path[-1], "/".join(path)
        shape = v.shape
        if name == "kernel" and path[-2] == "time_preprocess":  # FourierFeatures [time_dim / 2, 1]
            new, rule = 0.2 * gen.standard_normal(shape), "N(0, 0.2)"
        elif name == "kernel":
            if v.ndim == 4:  # conv [kh, kw, cin, cout]
                fan_in = shape[0] * shape[1] * shape[2]
            elif v.ndim == 3 and path[-2] == "out":  # MHA out [heads, head_dim, d]
                fan_in = shape[0] * shape[1]
            else:  # Dense [in, out], MHA q/k/v [in, heads, head_dim]
                fan_in = shape[0]
            new, rule = gen.standard_normal(shape) / np.sqrt(fan_in), f"N(0, 1/{fan_in})"
        elif name == "bias":
            new, rule = 0.1 * gen.standard_normal(shape), "0.1 N"
        elif name in ("scale", "weight"):
            new, rule = gen.uniform(0.8, 1.2, shape), "U(0.8, 1.2)"
        elif name == "embedding":
            new, rule = gen.standard_normal(shape), "N(0, 1)"
        elif name.endswith("_pos_embedding"):
            new, rule = 0.5 * gen.standard_normal(shape), "0.5 N"
        elif name == "probe":
            new, rule = gen.standard_normal(shape), "N(0, 1)"
        else:
            raise KeyError(f"no rule for {p} {shape}")
        assert v.dtype == np.float32, (p, v.dtype)
        out[path] = new.astype(np.float32)
        rules[p] = rule
    return unflatten_dict(out), rules


def param_shapes(params):
    from flax.traverse_util import flatten_dict
    return {"/".join(k): list(v.shape) for k, v in sorted(flatten_dict(params).items())}


# ----------------------------------------------------------------------------- running

def make_inputs(gen, variant):
    import numpy as np
    obs = {f"image_{c}": gen.integers(0, 256, (1, WINDOW, s, s, 3), dtype=np.uint8) for c, s in CAMERAS.items()}
    if variant == "l1":
        obs["proprio"] = gen.uniform(-2.5, 2.5, (1, WINDOW, PROPRIO_DIM)).astype(np.float32)
    obs["timestep_pad_mask"] = np.ones((1, WINDOW), bool)
    return obs


def key_chain(seed):
    """DiffusionActionHead.predict_action's draws for sample_actions(rng=PRNGKey(seed)), replayed."""
    import jax
    import numpy as np
    shape = (1, WINDOW, HORIZON * ACTION_DIM)
    rng = jax.random.PRNGKey(seed)
    rng, key = jax.random.split(rng)
    init = np.asarray(jax.random.normal(key, shape))
    steps = []
    for _ in range(STEPS):
        rng, key = jax.random.split(rng)
        steps.append(np.asarray(jax.random.normal(key, shape)))
    return init, np.stack(steps)


def sample(model, obs, tasks, stats_name, seed):
    """OctoModel.sample_actions as a user calls it, un-normalized with dataset stats_name: [1, 4, len(mean)]."""
    import jax
    import numpy as np
    st = model.dataset_statistics[stats_name]["action"]
    rng = jax.random.PRNGKey(seed)
    a = np.asarray(model.sample_actions(obs, tasks, unnormalization_statistics=st, rng=rng))
    return a


def sampler_only(model, obs, tasks, seed, embodiment_action_dim):
    """The head's predict_action output before un-normalizing (same rng), [1, 4, 7]."""
    import jax
    import numpy as np
    out = model.run_transformer(obs, tasks, obs["timestep_pad_mask"], train=False)
    head = model.module.bind({"params": model.params}).heads["action"]
    return np.asarray(head.predict_action(out, train=False, rng=jax.random.PRNGKey(seed),
                                          embodiment_action_dim=embodiment_action_dim)), out


def replay(model, tout, init, steps, embodiment_action_dim):
    """The DDPM loop in Python with the recorded noises; eps from the head's own module (jitted)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    head = model.module.bind({"params": model.params}).heads["action"]
    module, variables = head.unbind()
    betas, alphas, ahats = (np.asarray(head.betas), np.asarray(head.alphas), np.asarray(head.alpha_hats))
    eps_fn = jax.jit(lambda t, x: module.apply(variables, tout, t, x, train=False))
    mask = np.ones((1, WINDOW, HORIZON, ACTION_DIM), bool)
    mask[..., embodiment_action_dim:] = False
    mask = mask.reshape(1, WINDOW, HORIZON * ACTION_DIM)
    x = init.astype(np.float32)
    eps_first = None
    traj = {"x": [], "eps": []}
    for i, t in enumerate(range(STEPS - 1, -1, -1)):
        tt = jnp.broadcast_to(jnp.int32(t), (*x.shape[:-1], 1))
        eps = np.asarray(eps_fn(tt, jnp.asarray(x)))
        if eps_first is None:
            eps_first = eps
        a1 = np.float32(1) / np.sqrt(alphas[t])
        a2 = (np.float32(1) - alphas[t]) / np.sqrt(np.float32(1) - ahats[t])
        x = a1 * (x - a2 * eps)
        z = steps[i]
        x = x + np.float32(t > 0) * (np.sqrt(betas[t]) * z)
        x = np.clip(x, -5, 5).astype(np.float32)
        x = np.where(mask, x, np.sqrt(np.float32(1) - ahats[t]) * z).astype(np.float32)
        traj["x"].append(x)
        traj["eps"].append(eps)
    traj = {k: np.stack(v) for k, v in traj.items()}
    return x.reshape(1, WINDOW, HORIZON, ACTION_DIM)[:, -1], eps_first, (betas, alphas, ahats), traj


def capture(model, obs, tasks):
    """One eager pass of OctoModule.octo_transformer with a method interceptor: {path/method: (args, out)}."""
    import flax.linen as nn
    rec = {}

    def icpt(next_fun, args, kwargs, ctx):
        out = next_fun(*args, **kwargs)
        key = "/".join(ctx.module.scope.path) + ":" + ctx.method_name
        rec.setdefault(key, []).append((args, kwargs, out))
        return out

    with nn.intercept_methods(icpt):
        tout, state = model.module.apply({"params": model.params}, obs, tasks, obs["timestep_pad_mask"],
                                         train=False, method="octo_transformer", mutable=["intermediates"])
    return rec, tout, state


def one(rec, key):
    v = rec[key]
    assert len(v) == 1, (key, len(v))
    return v[0]


def goldens(model, obs, tasks, variant, seed):
    """Every golden tensor (numpy, batch dim dropped) and the checks' numbers."""
    import jax
    import numpy as np
    g, checks = {}, {}
    f32 = lambda x: np.asarray(x, np.float32)  # noqa: E731
    for c in CAMERAS:
        g[f"image.{c}"] = np.asarray(obs[f"image_{c}"][0])
    li = tasks["language_instruction"]
    g["input_ids"] = np.asarray(li["input_ids"][0], np.int32)
    g["attention_mask"] = np.asarray(li["attention_mask"][0], np.int32)
    if variant == "l1":
        g["proprio"] = f32(obs["proprio"][0])

    rec, tout, state = capture(model, obs, tasks)
    pre = "octo_transformer/"
    for c, s in CAMERAS.items():
        stem = f"{pre}observation_tokenizers_{c}/SmallStem16_0"
        (x_in,), _, _ = one(rec, f"{stem}/StdConv_0:__call__")[:3]
        # the stem's input (not stored: u8 / 127.5 - 1, then the zero goal image -> -1)
        img = obs[f"image_{c}"][0].astype(np.float32)
        assert x_in.shape == (WINDOW, s, s, 6), x_in.shape
        assert np.array_equal(np.asarray(x_in[..., :3]), img / np.float32(127.5) - 1)
        assert np.all(np.asarray(x_in[..., 3:]) == -1.0)
        for i in range(4):
            gn = one(rec, f"{stem}/GroupNorm_{i}:__call__")[2]
            g[f"stem.{c}.{i}"] = f32(jax.nn.relu(gn)[0])
        g[f"stem.{c}.out"] = f32(one(rec, f"{stem}/embedding:__call__")[2][0])
    t5 = one(rec, f"{pre}task_tokenizers_language/hf_model:__call__")[2]
    g["t5.out"] = f32(t5.last_hidden_state[0])
    tr_args, _, tr_out = one(rec, f"{pre}BlockTransformer_0/Transformer_0:__call__")
    x_in, mask = tr_args[0], tr_args[1]
    g["transformer.in"] = f32(x_in[0])
    g["attention.mask"] = np.asarray(mask)[0, 0].astype(np.uint8)
    for i in range(2):
        g[f"transformer.layer.{i}"] = f32(
            one(rec, f"{pre}BlockTransformer_0/Transformer_0/encoderblock_{i}:__call__")[2][0])
    g["transformer.out"] = f32(tr_out[0])
    assert np.array_equal(np.asarray(state["intermediates"]["octo_transformer"]["BlockTransformer_0"]
                                     ["attention_mask"][0]), np.asarray(mask))

    # the layout: prefix then per step the groups in config order, the repeated language, the readout
    groups = [("primary", 25), ("wrist", 9)] + ([("proprio", PROPRIO_DIM)] if variant == "l1" else []) + \
             [("language_repeat", MAX_LEN), ("readout", 1)]
    per_step = sum(n for _, n in groups)
    n_tok = MAX_LEN + WINDOW * per_step
    assert x_in.shape[1] == n_tok, (x_in.shape, n_tok)
    xi = g["transformer.in"]
    g["tokens.language"] = xi[:MAX_LEN].copy()
    sl = {}
    for t in range(WINDOW):
        o = MAX_LEN + t * per_step
        for name, n in groups:
            sl.setdefault(name, []).append(xi[o:o + n])
            o += n
    for name in ["primary", "wrist", "proprio", "readout"]:
        if name in sl:
            g[f"tokens.{name}"] = np.stack(sl[name])
    for t in range(WINDOW):
        assert np.array_equal(sl["language_repeat"][t], g["tokens.language"])
    # cross-check the slices against the tokenizer outputs + projections + pos embeddings
    P = model.params["octo_transformer"]
    assert np.allclose(P["task_language_pos_embedding"][0] + t5.last_hidden_state[0] @
                       P["task_language_projection"]["kernel"] + P["task_language_projection"]["bias"],
                       g["tokens.language"], atol=1e-5)
    for t in range(WINDOW):
        assert np.allclose(g["tokens.readout"][t], P["readout_action_pos_embedding"][0, t], atol=0)
        stem_tokens = one(rec, f"{pre}observation_tokenizers_primary/SmallStem16_0/embedding:__call__")[2]
        ref = (np.asarray(stem_tokens[t]).reshape(-1, STEM["num_features"]) @ P["obs_primary_projection"]["kernel"]
               + P["obs_primary_projection"]["bias"] + P["obs_primary_pos_embedding"][0, t])
        assert np.allclose(ref, g["tokens.primary"][t], atol=1e-5)
    if variant == "l1":
        from octo.model.components.tokenizers import BinTokenizer
        bt = BinTokenizer(n_bins=16, bin_type="uniform", low=-2.0, high=2.0)
        g["proprio.bins"] = np.asarray(bt.apply({}, obs["proprio"])[0], np.int32)
        oh = np.eye(16, dtype=np.float32)[g["proprio.bins"]]
        ref = oh @ P["obs_proprio_projection"]["kernel"] + P["obs_proprio_projection"]["bias"] + \
            P["obs_proprio_pos_embedding"][0, :WINDOW]
        assert np.allclose(ref, g["tokens.proprio"], atol=1e-5)

    # the jitted transformer (as sample_actions runs it) against the eager capture
    tj = model.run_transformer(obs, tasks, obs["timestep_pad_mask"], train=False)
    ro = np.asarray(tj["readout_action"].tokens[0])
    checks["transformer_jit_vs_eager"] = float(np.abs(ro - np.asarray(tout["readout_action"].tokens[0])).max())
    assert checks["transformer_jit_vs_eager"] < 1e-5, checks

    head = model.module.bind({"params": model.params}).heads["action"]
    if variant == "l1":
        rec_h = {}
        import flax.linen as nn

        def icpt(next_fun, args, kwargs, ctx):
            out = next_fun(*args, **kwargs)
            rec_h.setdefault("/".join(ctx.module.scope.path) + ":" + ctx.method_name, []).append(out)
            return out

        with nn.intercept_methods(icpt):
            head(tj, train=False)
        g["embedding"] = f32(rec_h["heads_action/map_head:__call__"][0][0, :, 0])
    else:
        g["embedding"] = f32(np.asarray(tj["readout_action"].tokens[0]).mean(axis=-2))

    stats = model.dataset_statistics
    a_bridge = sample(model, obs, tasks, "bridge_dataset", seed)
    a_small = sample(model, obs, tasks, "small_arm", seed)
    norm_b, _ = sampler_only(model, obs, tasks, seed, 7)
    norm_s, _ = sampler_only(model, obs, tasks, seed, 5)
    g["actions.normalized"] = f32(norm_b[0])
    g["actions"] = f32(a_bridge[0])
    g["actions.small_arm.normalized"] = f32(norm_s[0])
    g["actions.small_arm"] = f32(a_small[0])
    for name, a, n in [("bridge_dataset", a_bridge, norm_b), ("small_arm", a_small, norm_s)]:
        st = stats[name]["action"]
        k = len(st["mean"])
        ref = np.where(st["mask"], n[..., :k] * st["std"] + st["mean"], n[..., :k])
        checks[f"unnormalize_{name}"] = float(np.abs(ref - a).max())
        assert checks[f"unnormalize_{name}"] <= REPLAY_TOL, checks  # separately compiled: rounding x 31.6

    if variant == "diffusion":
        init, steps = key_chain(seed)
        g["noise.init"] = f32(init[0])
        g["noise.steps"] = f32(steps[:, 0])
        for name, dim, ref in [("small_arm", 5, norm_s), ("bridge", 7, norm_b)]:
            out, eps_first, sched, traj = replay(model, tj, init, steps, dim)
            checks[f"replay_{name}"] = float(np.abs(out - ref).max())
            assert checks[f"replay_{name}"] <= REPLAY_TOL, checks
        g["sampler.x"] = f32(traj["x"][:, 0])
        g["sampler.eps"] = f32(traj["eps"][:, 0])
        g["eps.first"] = f32(eps_first[0])
        for k, v in zip(["betas", "alphas", "alpha_hats"], sched):
            g[f"diffusion.{k}"] = f32(v)
        # eps.first straight from the head's __call__ as well
        e = np.asarray(head(tj, time=np.full((1, WINDOW, 1), STEPS - 1, np.int32), noisy_actions=init,
                            train=False))
        checks["eps_first_call_vs_replay"] = float(np.abs(e[0] - g["eps.first"]).max())
        assert checks["eps_first_call_vs_replay"] <= 1e-6, checks
        checks["saturated_fraction_normalized"] = float((np.abs(g["actions.normalized"]) >= 5.0).mean())
    else:
        # L1: the head's own output, last window step
        pred = np.asarray(head(tj, train=False))[0, -1]
        checks["l1_head_vs_sample"] = float(np.abs(pred - g["actions.normalized"]).max())
        assert checks["l1_head_vs_sample"] == 0.0, checks
    return g, checks


# ----------------------------------------------------------------------------- the checkpoint file

def read_checkpoint(folder):
    """<step>/default/checkpoint as the raw msgpack (flax's decoding), {path: array}."""
    import flax
    from flax.traverse_util import flatten_dict
    steps = sorted(d for d in os.listdir(folder) if d.isdigit())
    assert steps == [str(STEP)], steps
    raw = open(os.path.join(folder, steps[0], "default", "checkpoint"), "rb").read()
    tree = flax.serialization.msgpack_restore(raw)
    return {"/".join(k): v for k, v in flatten_dict(tree).items()}, raw


def msgpack_layout(raw):
    """The top of the raw msgpack, decoded without flax: which keys, which ext types, chunked arrays or not."""
    import msgpack
    exts, chunked = set(), []

    def ext_hook(code, data):
        exts.add(code)
        return ("ext", code, len(data))

    tree = msgpack.unpackb(raw, ext_hook=ext_hook, raw=False, strict_map_key=False)

    def walk(t, p):
        if isinstance(t, dict):
            if "__msgpack_chunked_array__" in t:
                chunked.append(p)
                return
            for k, v in t.items():
                walk(v, p + [str(k)])

    walk(tree, [])
    return {"top_level_keys": sorted(tree.keys()), "ext_types": sorted(exts), "chunked_arrays": chunked,
            "bytes": len(raw)}


# ----------------------------------------------------------------------------- independent float64 reference

def raw_params(fixture):
    """The checkpoint decoded with msgpack alone (no flax): ext type 1 = msgpack (shape, dtype name, C bytes)."""
    import msgpack
    import numpy as np
    steps = sorted(d for d in os.listdir(fixture) if d.isdigit())
    raw = open(os.path.join(fixture, steps[0], "default", "checkpoint"), "rb").read()

    def ext_hook(code, data):
        assert code == 1, code
        shape, dtype, buf = msgpack.unpackb(data, raw=False)
        return np.frombuffer(buf, dtype=np.dtype(dtype)).reshape(shape)

    flat = {}

    def walk(t, p):
        if isinstance(t, dict):
            assert "__msgpack_chunked_array__" not in t, p
            for k, v in t.items():
                walk(v, p + [k])
        else:
            flat["/".join(p)] = np.asarray(t, np.float64)

    walk(msgpack.unpackb(raw, ext_hook=ext_hook, raw=False), [])
    return flat


def rule_mask(prefix, step, window, correct):
    """BlockTransformer's mask from the rules as the docstring states them (not Octo's code): prefix / step are
    [(role, name, size)], role in task / obs / readout. 1 = may attend (the pad flags are all 1 here)."""
    import numpy as np

    def group(i, sizes):
        c = np.cumsum(sizes)
        return int(np.argmax(c > i)) if correct else int(np.argmax(c >= i))

    meta = [(*prefix[group(i, [g[2] for g in prefix])][:2], -1) for i in range(sum(g[2] for g in prefix))]
    n_step = sum(g[2] for g in step)
    for t in range(window):
        meta += [(*step[group(i, [g[2] for g in step])][:2], t) for i in range(n_step)]
    n = len(meta)
    m = np.zeros((n, n), np.uint8)
    for i, (ri, ni, ti) in enumerate(meta):
        for j, (rj, nj, tj) in enumerate(meta):
            if rj == "task":
                ok = True
            elif ri == "task":
                ok = False
            elif rj == "obs":
                ok = True
            else:  # rj readout
                ok = ri == "readout" and ni == nj
            m[i, j] = ok and tj <= ti
    return m


def reference_forward(fixture):
    """Every golden stage recomputed in float64 from the raw checkpoint, golden.json and the raw inputs."""
    import numpy as np
    from safetensors.numpy import load_file
    info = json.load(open(os.path.join(fixture, "golden.json")))
    stats = json.load(open(os.path.join(fixture, "dataset_statistics.json")))
    g = load_file(os.path.join(fixture, "golden.safetensors"))
    P = raw_params(fixture)
    variant = info["variant"]
    T = "octo_transformer/"
    ref = {}

    def dense(x, pre, bias=True):
        y = x @ P[pre + "/kernel"]
        return y + P[pre + "/bias"] if bias else y

    def ln(x, pre, eps=1e-6):
        m = x.mean(-1, keepdims=True)
        v = ((x - m) ** 2).mean(-1, keepdims=True)
        return (x - m) / np.sqrt(v + eps) * P[pre + "/scale"] + P[pre + "/bias"]

    def softmax(x):
        e = np.exp(x - x.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    gelu = lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))  # noqa: E731
    swish = lambda x: x / (1 + np.exp(-x))  # noqa: E731
    big_neg = float(np.finfo(np.float32).min)

    def conv(x, w, b, stride, pad):
        H, W_, _ = x.shape
        kh, kw, _, co = w.shape
        xp = np.pad(x, ((pad, pad), (pad, pad), (0, 0)))
        ho, wo = (H + 2 * pad - kh) // stride + 1, (W_ + 2 * pad - kw) // stride + 1
        out = np.zeros((ho, wo, co))
        for i in range(kh):
            for j in range(kw):
                out += xp[i:i + stride * (ho - 1) + 1:stride, j:j + stride * (wo - 1) + 1:stride] @ w[i, j]
        return out + b

    def stem(img, cam):
        pre = f"{T}observation_tokenizers_{cam}/SmallStem16_0/"
        x = np.concatenate([img / 127.5 - 1, -np.ones_like(img, dtype=np.float64)], -1)
        outs = []
        for i in range(4):
            w = P[pre + f"StdConv_{i}/kernel"]
            w = (w - w.mean((0, 1, 2))) / (w.std((0, 1, 2)) + 1e-5)
            x = conv(x, w, P[pre + f"StdConv_{i}/bias"], 2, 1)
            h, w_, c = x.shape
            xg = x.reshape(h, w_, 32, c // 32)
            m = xg.mean((0, 1, 3), keepdims=True)
            v = xg.var((0, 1, 3), keepdims=True)
            x = ((xg - m) / np.sqrt(v + 1e-6)).reshape(h, w_, c) * P[pre + f"GroupNorm_{i}/scale"] + \
                P[pre + f"GroupNorm_{i}/bias"]
            x = np.maximum(x, 0)
            outs.append(x)
        outs.append(conv(x, P[pre + "embedding/kernel"], P[pre + "embedding/bias"], 1, 0))
        return outs

    # stems, both window steps
    toks = {}
    for cam in CAMERAS:
        for t in range(WINDOW):
            o = stem(g[f"image.{cam}"][t].astype(np.float64), cam)
            if t == 0:
                for i in range(4):
                    ref[f"stem.{cam}.{i}"] = o[i]
                ref[f"stem.{cam}.out"] = o[4]
            toks.setdefault(cam, []).append(
                dense(o[4].reshape(-1, o[4].shape[-1]), f"{T}obs_{cam}_projection")
                + P[f"{T}obs_{cam}_pos_embedding"][0, t])
    # T5 encoder
    H5 = f"{T}task_tokenizers_language/hf_model/"
    t5 = info["config"]["t5"]
    ids, am = g["input_ids"].astype(np.int64), g["attention_mask"]
    L, nh, dk = len(ids), t5["num_heads"], t5["d_kv"]
    rel = np.arange(L)[None, :] - np.arange(L)[:, None]  # memory - query
    nb = t5["relative_attention_num_buckets"] // 2
    bucket = (rel > 0) * nb
    n = np.abs(rel)
    exact = nb // 2
    with np.errstate(divide="ignore"):
        large = exact + (np.log(n / exact) / np.log(t5["relative_attention_max_distance"] / exact) * (nb - exact))
    large = np.minimum(large, nb - 1)
    bucket = (bucket + np.where(n < exact, n, large)).astype(np.int64)
    bias = P[H5 + "encoder/block/0/layer/0/SelfAttention/relative_attention_bias/embedding"][bucket].transpose(2, 0, 1)
    bias = bias + np.where(am > 0, 0.0, big_neg)[None, None, :]
    rms = lambda x, w: x / np.sqrt((x ** 2).mean(-1, keepdims=True) + t5["layer_norm_epsilon"]) * w  # noqa: E731
    x = P[H5 + "shared/embedding"][ids]
    for b in range(t5["num_layers"]):
        pre = H5 + f"encoder/block/{b}/layer/"
        h = rms(x, P[pre + "0/layer_norm/weight"])
        q, k, v = [(h @ P[pre + f"0/SelfAttention/{w}/kernel"]).reshape(L, nh, dk) for w in "qkv"]
        a = softmax(np.einsum("qhd,khd->hqk", q, k) + bias)
        x = x + np.einsum("hqk,khd->qhd", a, v).reshape(L, nh * dk) @ P[pre + "0/SelfAttention/o/kernel"]
        h = rms(x, P[pre + "1/layer_norm/weight"])
        x = x + np.maximum(h @ P[pre + "1/DenseReluDense/wi/kernel"], 0) @ P[pre + "1/DenseReluDense/wo/kernel"]
    ref["t5.out"] = rms(x, P[H5 + "encoder/final_layer_norm/weight"])
    lang = dense(ref["t5.out"], f"{T}task_language_projection") + P[f"{T}task_language_pos_embedding"][0]
    ref["tokens.language"] = lang
    for cam in CAMERAS:
        ref[f"tokens.{cam}"] = np.stack(toks[cam])
    step_groups = [("obs", f"obs_{c}", len(toks[c][0])) for c in CAMERAS]
    if variant == "l1":
        x = np.clip(g["proprio"].astype(np.float32), np.float32(-2 + 1e-6), np.float32(2 - 1e-6))
        thr = np.linspace(-2, 2, 17, dtype=np.float32)
        bins = np.argmax((x[..., None] < thr[1:]) & (x[..., None] >= thr[:-1]), -1)
        ref["proprio.bins"] = bins
        ref["tokens.proprio"] = np.stack([dense(np.eye(16)[bins[t]], f"{T}obs_proprio_projection")
                                          + P[f"{T}obs_proprio_pos_embedding"][0, t] for t in range(WINDOW)])
        step_groups.append(("obs", "obs_proprio", PROPRIO_DIM))
    ref["tokens.readout"] = P[f"{T}readout_action_pos_embedding"][0, :WINDOW]
    step_groups += [("obs", "obs_task_language", MAX_LEN), ("readout", "readout_action", 1)]
    names = [s[1][4:] if s[1] != "obs_task_language" else None for s in step_groups[:-1]]
    seq = [lang]
    for t in range(WINDOW):
        for nm in names:
            seq.append(lang if nm is None else ref[f"tokens.{nm}"][t])
        seq.append(ref["tokens.readout"][t])
    x = np.concatenate(seq, 0)
    ref["transformer.in"] = x
    mask = rule_mask([("task", "task_language", MAX_LEN)], step_groups, WINDOW, info["config"]["use_correct_attention"])
    ref["attention.mask"] = mask
    TR = f"{T}BlockTransformer_0/Transformer_0/"
    nh, N = 4, x.shape[0]
    for layer in range(2):
        pre = TR + f"encoderblock_{layer}/"
        h = ln(x, pre + "LayerNorm_0")
        q, k, v = [np.einsum("nd,dhk->nhk", h, P[pre + f"MultiHeadDotProductAttention_0/{w}/kernel"])
                   + P[pre + f"MultiHeadDotProductAttention_0/{w}/bias"] for w in ["query", "key", "value"]]
        logits = np.einsum("qhd,khd->hqk", q / np.sqrt(q.shape[-1]), k)
        a = softmax(np.where(mask[None] > 0, logits, big_neg))
        o = np.einsum("hqk,khd->qhd", a, v)
        x = x + np.einsum("qhd,hdo->qo", o, P[pre + "MultiHeadDotProductAttention_0/out/kernel"]) + \
            P[pre + "MultiHeadDotProductAttention_0/out/bias"]
        h = ln(x, pre + "LayerNorm_1")
        x = x + dense(gelu(dense(h, pre + "MlpBlock_0/Dense_0")), pre + "MlpBlock_0/Dense_1")
        ref[f"transformer.layer.{layer}"] = x
    ref["transformer.out"] = ln(x, TR + "encoder_norm")
    per = (N - MAX_LEN) // WINDOW
    readout = np.stack([ref["transformer.out"][MAX_LEN + t * per + per - 1] for t in range(WINDOW)])  # [W, 32]
    HA = "heads_action/"
    if variant == "l1":
        pre = HA + "map_head/"
        probe = P[pre + "probe"][0]  # [1, 32]
        emb = []
        for t in range(WINDOW):
            kv = readout[t:t + 1]
            q, k, v = [np.einsum("nd,dhk->nhk", src, P[pre + f"MultiHeadDotProductAttention_0/{w}/kernel"])
                       + P[pre + f"MultiHeadDotProductAttention_0/{w}/bias"]
                       for src, w in [(probe, "query"), (kv, "key"), (kv, "value")]]
            a = softmax(np.einsum("qhd,khd->hqk", q / np.sqrt(q.shape[-1]), k))
            out = np.einsum("qhd,hdo->qo", np.einsum("hqk,khd->qhd", a, v),
                            P[pre + "MultiHeadDotProductAttention_0/out/kernel"]) + \
                P[pre + "MultiHeadDotProductAttention_0/out/bias"]
            y = ln(out, pre + "LayerNorm_0")
            out = out + dense(gelu(dense(y, pre + "MlpBlock_0/Dense_0")), pre + "MlpBlock_0/Dense_1")
            emb.append(out[0])
        ref["embedding"] = np.stack(emb)
        mean = dense(ref["embedding"][-1], HA + "mean_proj")
        norm = {"bridge_dataset": (np.tanh(mean / 5) * 5).reshape(HORIZON, ACTION_DIM)}
        norm["small_arm"] = norm["bridge_dataset"]
        ref["actions.normalized"] = norm["bridge_dataset"]
    else:
        ref["embedding"] = readout
        D_ = HA + "diffusion_model/"
        steps_ = np.arange(STEPS + 1) / STEPS
        ac = np.cos((steps_ + 0.008) / 1.008 * np.pi * 0.5) ** 2
        ac = ac / ac[0]
        betas = np.clip(1 - ac[1:] / ac[:-1], 0, 0.999)
        alphas = 1 - betas
        ahats = np.cumprod(alphas)
        ref["diffusion.betas"], ref["diffusion.alphas"], ref["diffusion.alpha_hats"] = betas, alphas, ahats

        def eps(t, x):
            f = 2 * np.pi * t * P[D_ + "time_preprocess/kernel"][:, 0]
            cond = dense(swish(dense(np.concatenate([np.cos(f), np.sin(f)]), D_ + "cond_encoder/Dense_0")),
                         D_ + "cond_encoder/Dense_1")
            h = dense(np.concatenate([np.broadcast_to(cond, (WINDOW, cond.shape[0])), readout, x], -1),
                      D_ + "reverse_network/Dense_0")
            for b in range(2):
                pre = D_ + f"reverse_network/MLPResNetBlock_{b}/"
                h = h + dense(swish(dense(ln(h, pre + "LayerNorm_0"), pre + "Dense_0")), pre + "Dense_1")
            return dense(swish(h), D_ + "reverse_network/Dense_1")

        norm = {}
        for name, dim in [("bridge_dataset", 7), ("small_arm", 5)]:
            keep = (np.arange(HORIZON * ACTION_DIM) % ACTION_DIM) < dim
            x = g["noise.init"].astype(np.float64)
            xs, es = [], []
            for i, t in enumerate(range(STEPS - 1, -1, -1)):
                e = eps(t, x)
                z = g["noise.steps"][i].astype(np.float64)
                x = (x - (1 - alphas[t]) / np.sqrt(1 - ahats[t]) * e) / np.sqrt(alphas[t])
                x = np.clip(x + (t > 0) * np.sqrt(betas[t]) * z, -5, 5)
                x = np.where(keep, x, np.sqrt(1 - ahats[t]) * z)
                xs.append(x)
                es.append(e)
            norm[name] = x[-1].reshape(HORIZON, ACTION_DIM)
            if name == "bridge_dataset":
                ref["eps.first"], ref["sampler.x"], ref["sampler.eps"] = es[0], np.stack(xs), np.stack(es)
                ref["actions.normalized"] = norm[name]
            else:
                ref["actions.small_arm.normalized"] = norm[name]
    for name, key in [("bridge_dataset", "actions"), ("small_arm", "actions.small_arm")]:
        st = {k: np.asarray(v) for k, v in stats[name]["action"].items()}
        k_ = len(st["mean"])
        a = norm[name][:, :k_]
        ref[key] = np.where(st["mask"], a * st["std"] + st["mean"], a)
    err, scale = {}, {}
    for k, v in ref.items():
        gv = g[k].astype(np.float64)
        assert gv.shape == v.shape, (k, gv.shape, v.shape)
        err[k] = float(np.abs(gv - v).max())
        scale[k] = max(1.0, float(np.abs(gv).max()))
    return err, scale


# ----------------------------------------------------------------------------- generate / check

def file_sha(paths):
    return {os.path.basename(p): hashlib.sha256(open(p, "rb").read()).hexdigest()[:16] for p in paths}


def generate(a, out):
    import numpy as np
    om = import_octo(a.upstream)
    import flax
    import jax
    import jaxlib
    import orbax.checkpoint
    import safetensors
    import sentencepiece
    import tokenizers
    import transformers
    from safetensors.numpy import save_file

    os.makedirs(out)
    vocab = build_tokenizer(os.path.join(out, T5_DIR))
    assert vocab == VOCAB_SPM + EXTRA_IDS, vocab
    gen = np.random.default_rng(a.seed)
    with chdir(out):
        config = make_config(a.variant)
        from octo.utils.spec import ModuleSpec
        text_processor = ModuleSpec.instantiate(config["text_processor"])()
        stats = make_stats(gen)
        model = om.OctoModel.from_config(config, example_batch(a.variant), text_processor,
                                         rng=jax.random.PRNGKey(a.seed), dataset_statistics=stats)
        params, rules = rerandomize(model.params, gen)
        model = model.replace(params=jax.tree_util.tree_map(jax.numpy.asarray, params))
        model.save_pretrained(STEP, checkpoint_path=out)
        obs = make_inputs(gen, a.variant)
        tasks = model.create_tasks(texts=[PROMPT])
        g, checks = goldens(model, obs, tasks, a.variant, a.seed)
    save_file({k: np.ascontiguousarray(v) for k, v in sorted(g.items())}, os.path.join(out, "golden.safetensors"))

    ckpt, raw = read_checkpoint(out)
    shapes = param_shapes(model.params)
    assert {k: list(v.shape) for k, v in ckpt.items()} == shapes
    ids = [int(i) for i in g["input_ids"]]
    tok = text_processor.tokenizer
    n_params = int(sum(np.prod(s) for s in shapes.values()))
    up = os.path.abspath(a.upstream)
    upstream_files = [os.path.join(up, "octo", p) for p in [
        "model/octo_model.py", "model/octo_module.py", "model/components/block_transformer.py",
        "model/components/tokenizers.py", "model/components/vit_encoders.py", "model/components/transformer.py",
        "model/components/action_heads.py", "model/components/diffusion.py", "data/utils/text_processing.py"]]
    n_step = int((g["transformer.in"].shape[0] - MAX_LEN) // WINDOW)
    info = {
        "generator": "tools/golden/octo.py",
        "upstream": UPSTREAM,
        "variant": a.variant,
        "seed": a.seed,
        "versions": {"python": sys.version.split()[0], "jax": jax.__version__, "jaxlib": jaxlib.__version__,
                     "flax": flax.__version__, "orbax_checkpoint": orbax.checkpoint.__version__,
                     "transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
                     "sentencepiece": sentencepiece.__version__, "numpy": np.__version__,
                     "safetensors": safetensors.__version__,
                     "octo_commit": UPSTREAM.split()[-1], "octo_sha256": file_sha(upstream_files)},
        "config": {
            "token_embedding_size": D, "num_layers": 2, "mlp_dim": 64, "num_attention_heads": 4, "head_dim": D // 4,
            "max_horizon": 10, "window": WINDOW, "repeat_task_tokens": True,
            "use_correct_attention": a.variant != "l1", "readouts": {"action": 1},
            "cameras": {c: {"side": s, "in_channels": 6, "features": STEM["features"],
                            "num_features": STEM["num_features"], "patch": 1, "grid": int(g[f"stem.{c}.out"].shape[0]),
                            "tokens": int(g[f"stem.{c}.out"].shape[0] ** 2)} for c, s in CAMERAS.items()},
            "groupnorm": {"groups": 32, "eps": 1e-6}, "layernorm_eps": 1e-6, "stdconv_eps": 1e-5,
            "t5": dict(T5_SIZES, vocab_size=vocab), "max_length": MAX_LEN,
            "proprio": ({"dim": PROPRIO_DIM, "n_bins": 16, "low": -2.0, "high": 2.0, "bin_type": "uniform",
                         "tokens": PROPRIO_DIM} if a.variant == "l1" else None),
            "head": ({"type": "DiffusionActionHead", "use_map": False, "action_horizon": HORIZON,
                      "action_dim": ACTION_DIM, "time_dim": 8, "num_blocks": 2, "hidden_dim": 32,
                      "diffusion_steps": STEPS, "use_layer_norm": True, "max_action": 5.0,
                      "cond_mlp": [16, 8], "block_mlp": 128}
                     if a.variant == "diffusion" else
                     {"type": "L1ActionHead", "use_map": True, "action_horizon": HORIZON, "action_dim": ACTION_DIM,
                      "max_action": 5.0, "map_heads": 8, "map_mlp_dim": 4 * D}),
            "tokens_total": int(g["transformer.in"].shape[0]), "tokens_per_step": n_step,
            "sequence": ["task_language 16"] + ["step t: obs_primary 25, obs_wrist 9, "
                                                + ("obs_proprio 5, " if a.variant == "l1" else "")
                                                + "obs_task_language 16, readout_action 1"],
            "params": n_params,
        },
        "prompt": PROMPT,
        "input_ids": ids,
        "tokens": tok.convert_ids_to_tokens(ids),
        "attention_mask": [int(i) for i in g["attention_mask"]],
        "task_pad_mask_dict": {k: bool(v[0]) for k, v in tasks["pad_mask_dict"].items()},
        "dataset": "bridge_dataset (actions, actions.normalized); small_arm (actions.small_arm*)",
        "unnormalization": "NORMAL: a = a[..., :len(mask)]; where(mask, a * std + mean, a)",
        "statistics": jax.tree_util.tree_map(lambda x: np.asarray(x).tolist(), stats),
        "attention_rule": ("use_correct_attention True: group(i) = searchsorted(cumsum(sizes), i, side='right')"
                           if a.variant != "l1" else
                           "use_correct_attention False (December 2023 models): group(i) = searchsorted(cumsum("
                           "sizes), i, side='left'): the first token of each group after the first belongs to "
                           "the previous group"),
        "noise": ({"rng": f"jax.random.PRNGKey({a.seed}) (threefry2x32) given to sample_actions",
                   "chain": "rng, key = split(rng); noise.init = normal(key, (1, 2, 28)); for each of the 20 "
                            "scan steps: rng, key = split(rng); z = normal(key, (1, 2, 28))",
                   "steps_order": "noise.steps[i] is used at time 19 - i (scan over jnp.arange(19, -1, -1))"}
                  if a.variant == "diffusion" else None),
        "checks": checks,
        "checkpoint": {"path": f"{STEP}/default/checkpoint", "format": "orbax 0.4.4 aggregate msgpack (flax "
                       "msgpack_serialize of the params tree: nested maps, arrays as ext type 1)",
                       "layout": msgpack_layout(raw), "param_rules": rules, "params": shapes},
        "files": sorted(os.path.relpath(os.path.join(dp, f), out) for dp, _, fs in os.walk(out) for f in fs
                        if f != "golden.json") + ["golden.json"],
        "magnitudes": {k: round(float(np.abs(v.astype(np.float64)).max()), 4) for k, v in sorted(g.items())},
        "tensors": {k: [str(v.dtype), list(v.shape)] for k, v in sorted(g.items())},
    }
    json.dump(info, open(os.path.join(out, "golden.json"), "w"), indent=1)
    print(json.dumps({"params": n_params, "tokens": info["config"]["tokens_total"], "checks": checks}))
    print("actions[0]:", g["actions"][0].tolist())


def check(a, fixture):
    import numpy as np
    fixture = os.path.abspath(fixture)
    om = import_octo(a.upstream)
    import jax
    from flax.traverse_util import flatten_dict
    from safetensors.numpy import load_file
    info = json.load(open(os.path.join(fixture, "golden.json")))
    g = load_file(os.path.join(fixture, "golden.safetensors"))
    variant, seed = info["variant"], info["seed"]
    with chdir(fixture):
        model = om.OctoModel.load_pretrained(fixture)
        obs = {f"image_{c}": g[f"image.{c}"][None] for c in CAMERAS}
        if variant == "l1":
            obs["proprio"] = g["proprio"][None]
        obs["timestep_pad_mask"] = np.ones((1, WINDOW), bool)
        tasks = model.create_tasks(texts=[PROMPT])
        err = {}
        li = tasks["language_instruction"]
        assert np.array_equal(np.asarray(li["input_ids"][0], np.int32), g["input_ids"]), li
        assert np.array_equal(np.asarray(li["attention_mask"][0], np.int32), g["attention_mask"]), li
        for name, key in [("bridge_dataset", "actions"), ("small_arm", "actions.small_arm")]:
            err[key] = float(np.abs(sample(model, obs, tasks, name, seed)[0] - g[key]).max())
        tj = model.run_transformer(obs, tasks, obs["timestep_pad_mask"], train=False)
        n = g["transformer.out"].shape[0]
        order = [f"obs_{c}" for c in CAMERAS] + (["obs_proprio"] if variant == "l1" else []) + \
            ["obs_task_language", "readout_action"]  # the sequence order (tj's keys come back sorted)
        got = np.concatenate([np.asarray(tj["task_language"].tokens[0])] + [
            np.concatenate([np.asarray(tj[k].tokens[0, t]) for k in order], axis=0) for t in range(WINDOW)], axis=0)
        assert got.shape[0] == n, got.shape
        tr_err = float(np.abs(got - g["transformer.out"]).max())  # jitted here, eager in the golden
        print("transformer.out, jitted vs the golden's eager pass (max abs diff):", tr_err)
        assert tr_err <= 1e-5 * max(1.0, float(np.abs(g["transformer.out"]).max())), tr_err
        if variant == "diffusion":
            init, steps = key_chain(seed)
            err["noise.init"] = float(np.abs(init[0] - g["noise.init"]).max())
            err["noise.steps"] = float(np.abs(steps[:, 0] - g["noise.steps"]).max())
            rep = {}
            out, _, _, _ = replay(model, tj, g["noise.init"][None], g["noise.steps"][:, None], 7)
            rep["replay.actions.normalized"] = float(np.abs(out[0] - g["actions.normalized"]).max())
            out, _, _, _ = replay(model, tj, g["noise.init"][None], g["noise.steps"][:, None], 5)
            rep["replay.actions.small_arm.normalized"] = float(
                np.abs(out[0] - g["actions.small_arm.normalized"]).max())
            print("numpy replay of the recorded noise (max abs diff):", json.dumps(rep))
            assert max(rep.values()) <= REPLAY_TOL, rep
    # the raw file the converter reads: the same tree and values as the restored params
    ckpt, raw = read_checkpoint(fixture)
    restored = {"/".join(k): np.asarray(v) for k, v in flatten_dict(jax.device_get(model.params)).items()}
    assert set(ckpt) == set(restored) and all(np.array_equal(ckpt[k], restored[k]) for k in ckpt)
    assert {k: list(v.shape) for k, v in ckpt.items()} == info["checkpoint"]["params"]
    assert msgpack_layout(raw) == info["checkpoint"]["layout"]
    print("reload check (max abs diff):", json.dumps(err))
    assert max(err.values()) <= 1e-6, err
    # what a reader sees: the tokenizer.json alone (HF `tokenizers`), the raw msgpack, the rules as documented
    import tokenizers
    tk = tokenizers.Tokenizer.from_file(os.path.join(fixture, T5_DIR, "tokenizer.json"))
    ids = tk.encode(PROMPT).ids
    assert ids == [int(i) for i in g["input_ids"][:len(ids)]] and not g["input_ids"][len(ids):].any(), ids
    assert g["attention_mask"].tolist() == [1] * len(ids) + [0] * (MAX_LEN - len(ids))
    rerr, scale = reference_forward(fixture)
    rel = {k: v / scale[k] for k, v in rerr.items()}
    print("independent float64 reference (max abs err / max(1, max |golden|)):",
          json.dumps({k: float(f"{v:.2e}") for k, v in sorted(rel.items())}))
    exact = ["attention.mask", "proprio.bins"]
    assert all(rerr[k] == 0 for k in exact if k in rerr), rerr
    # the sampler: float32 rounding, amplified by 1 / sqrt(alpha_19) = 31.6 and fed back through 20 steps
    loose = [k for k in rel if k.startswith(("actions", "sampler."))]
    assert max(v for k, v in rel.items() if k not in loose) <= 1e-4, rel
    assert max([rel[k] for k in loose] + [0]) <= 1e-3, rel
    return err


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--upstream", default="/tmp/upstream/octo", help="a checkout of octo-models/octo (241fb35)")
    ap.add_argument("--variant", choices=sorted(VARIANTS), default="diffusion")
    ap.add_argument("--out", help="output folder (default tests/fixtures/octo-tiny, octo-tiny-l1 for --variant l1)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--check", metavar="DIR", help="only reload DIR and reproduce its golden actions")
    ap.add_argument("--no-check", action="store_true", help="skip the reload check after generating")
    a = ap.parse_args()
    if a.check:
        check(a, a.check)
        return
    out = os.path.abspath(a.out or os.path.join(ROOT, "tests", "fixtures", VARIANTS[a.variant]))
    if os.path.isdir(out):
        shutil.rmtree(out)
    generate(a, out)
    if not a.no_check:  # a fresh process: the folder alone must suffice
        subprocess.run([sys.executable, os.path.abspath(__file__), "--upstream", a.upstream, "--check", out],
                       check=True)


if __name__ == "__main__":
    main()
