"""Golden fixture for ACT: lerobot 0.4.4 `act` with random weights, every tensor and buffer re-randomized.

Rerun (anyone, offline; the venv is outside the repo and CI never needs it):

    python3 -m venv /work/venv-lerobot
    /work/venv-lerobot/bin/pip install "lerobot==0.4.4"          # act needs no extra
    HF_HUB_OFFLINE=1 /work/venv-lerobot/bin/python tools/golden/act.py                  # tiny, committed
    HF_HUB_OFFLINE=1 /work/venv-lerobot/bin/python tools/golden/act.py --variant prenorm_gelu
        # = --pre-norm --gelu: tests/fixtures/act-tiny-prenorm/ (committed): pre_norm True (the
        # encoder's final LayerNorm exists) and feedforward_activation "gelu", the rest as tiny
    HF_HUB_OFFLINE=1 /work/venv-lerobot/bin/python tools/golden/act.py --variant nostate
        # = --no-state: tests/fixtures/act-tiny-nostate/ (committed): tiny (post-norm, relu) WITHOUT the
        # observation.state input feature (robot_state_feature None): no state token (N = 1 + cameras *
        # h * w encoder tokens), encoder_1d_feature_pos_embed has 1 row, no encoder_robot_state_input_proj
        # nor vae_encoder_robot_state_input_proj, no observation.state statistics, no state in the
        # observation, golden.json state_dim 0, golden.safetensors without state / state_norm
    HF_HUB_OFFLINE=1 /work/venv-lerobot/bin/python tools/golden/act.py --check tests/fixtures/act-tiny
        # reload the folder in a fresh process (ACTPolicy.from_pretrained + the saved processors),
        # reproduce `actions` (max abs diff <= 1e-6), then the float64 reference below
    HF_HUB_OFFLINE=1 /work/venv-lerobot/bin/python tools/golden/act.py --size full --out DIR
        # lerobot's ACTConfig defaults (the ALOHA sizes: resnet18, dim_model 512, 8 heads, ff 3200,
        # 4 encoder / 1 decoder layers, chunk 100 = n_action_steps, latent 32, 4 VAE encoder layers),
        # 2 cameras at 480 x 640 (15 x 20 = 300 tokens each, 602 encoder tokens), state / action 14;
        # 51.6 M parameters (model.safetensors 207 MB f32, golden.safetensors 50 MB), ~45 s on 2 cores
        # plus the check; not committed. --pre-norm / --gelu apply to it too

The default seed is 0; regenerating gives byte-identical files.

Nothing is downloaded: pretrained_backbone_weights=None (lerobot's default is
"ResNet18_Weights.IMAGENET1K_V1"), so torchvision builds the backbone with its own random init, which
rerandomize() then overwrites with everything else.

Deviation from the stock sizes (tiny only): lerobot builds the backbone as
`getattr(torchvision.models, config.vision_backbone)(replace_stride_with_dilation=[False, False,
config.replace_final_stride_with_dilation], weights=..., norm_layer=FrozenBatchNorm2d)`, keeps it up to
layer4 (IntermediateLayerGetter: avgpool and fc are dropped) and reads `backbone_model.fc.in_features`
for the 1x1 input projection (modeling_act.py:323-349). The real resnet18 (11.2 M parameters, 64..512
wide) is too big to commit, so this tool registers, in its own process only (generation and --check),
`torchvision.models.resnet18_tiny` (config.vision_backbone = "resnet18_tiny"; lerobot requires the
name to start with "resnet"): torchvision's own `ResNet(BasicBlock, [2, 2, 2, 2],
replace_stride_with_dilation=..., norm_layer=...)`, rebuilt narrower with torchvision's own
`_make_layer` (inplanes = 8, dilation = 1; conv1 7x7 stride 2 pad 3 no bias and bn1 of width 8; layer1..4
of planes 8, 16, 24, 32 and strides 1, 2, 2, 2; fc = Linear(32, 10), never used). The layout, the
module code and the state-dict keys are exactly torchvision's resnet18 (conv1, bn1,
layer{i}.{j}.conv1/bn1/conv2/bn2, layer{2,3,4}.0.downsample.0/.1); only the widths differ. A reader
must take the widths from the weight shapes, not from the name. The full size uses the real
torchvision resnet18 (random).

Configuration (tiny; lerobot's ACTConfig, everything not listed at its default): input features
observation.state (STATE [6]), observation.images.top and observation.images.wrist (VISUAL [3, 70,
90]: odd, non-square, and not the model's native 480 x 640; ACT never resizes), output action (ACTION
[5]), no environment state; dim_model 32, n_heads 4, dim_feedforward 48, n_encoder_layers 2,
n_decoder_layers 2 (lerobot 0.4.4's ACTDecoder runs every layer, then its LayerNorm), chunk_size 7,
n_action_steps 5, latent_dim 8, use_vae True with n_vae_encoder_layers 1 (its weights are in the
checkpoint; inference never runs it: the latent is zeros), pre_norm False, feedforward_activation
"relu", replace_final_stride_with_dilation False, MEAN_STD for VISUAL, STATE and ACTION (lerobot's
default normalization_mapping), temporal_ensemble_coeff None, device "cpu".

Weights (rerandomize, seeded; lerobot's init leaves biases 0, norm gains 1, BN statistics at the
identity, which would hide a dropped term): backbone convs N(0, sqrt(2 / fan_in)) (He: activations
stay O(1) through the ResNet); FrozenBatchNorm2d buffers weight U(0.5, 1.5), bias N(0, 0.1),
running_mean N(0, 0.1), running_var U(0.5, 2.0) (a BatchNorm fold is tested); every other matrix
(Linear, MultiheadAttention in_proj / out_proj, the 1x1 input-projection conv) N(0, 1 / sqrt(fan_in));
biases N(0, 0.1); LayerNorm weight U(0.5, 1.5), bias N(0, 0.1); nn.Embedding tables N(0, 0.5); the
persistent buffer vae_encoder_pos_enc (a sinusoid table, training only) N(0, 0.5) as well.

--variant nostate (--no-state; with --pre-norm / --gelu / --size full too): input_features without
observation.state, everything else as above; the seeded draws simply skip what does not exist (state
weights, state statistics, the raw state), so its numbers are its own, not tiny's minus the state.
lerobot 0.4.4 builds and saves such a policy, but its ACT.forward still reads
`batch["observation.state"].device` for the zero latent at inference (modeling_act.py:453-456; all
other state uses are guarded by `if self.config.robot_state_feature`) and raises KeyError without it.
policy_batch() therefore hands the policy, and only the policy, an EMPTY observation.state of shape
[1, 0] as a device carrier (it has no values; only .device is read). The observation, the
preprocessor's input and output, the statistics and the golden tensors hold no state; golden.json
notes this under "lerobot_workaround".

Dataset statistics (random, as lerobot passes them to make_act_pre_post_processors): per camera mean
U(0.3, 0.6) and std U(0.15, 0.3) of shape (3, 1, 1), min 0 / max 1 of the same shape; state and
action mean N(0, 1), std U(0.5, 2), min / max = mean -/+ 3 std (min / max are stored as a real
dataset's are, and unused by MEAN_STD). nostate: no observation.state entry at all.

Inputs, as lerobot gets them from a dataset: raw camera frames u8 [H, W, 3] (uniform random), fed as
float32 CHW u8 / 255; the raw state 2 N(0, 1) (nostate: none). preprocessor ->
policy.predict_action_chunk -> postprocessor (world units); then policy.reset() and select_action
(first step, postprocessed).

Writes into the output folder (default tests/fixtures/act-tiny/):
  config.json, model.safetensors, policy_preprocessor.json, policy_postprocessor.json and their step
                       safetensors: the checkpoint exactly as lerobot saves a trained one
                       (policy.save_pretrained and the processors' save_pretrained)
  golden.safetensors   inputs, every stage, lerobot's outputs (names below), float32 unless noted
  golden.json          versions, seed, config summary (every size), cameras in order, statistics,
                       checkpoint keys, formulas, tensor list

golden.safetensors (batch of one, batch dim dropped; c = 0 top, 1 wrist, config order; D = dim_model;
h x w the layer4 grid; N = 2 + cameras * h * w encoder tokens, 1 + cameras * h * w for nostate):
  image.{c} u8 [H,W,3] raw frame; state [S] raw (absent for nostate); pixels.{c} [3,H,W] (normalised:
  what the backbone gets); state_norm [S] (absent for nostate); stem.{c} [C0,h0,w0] (conv1 + bn1 +
  relu + maxpool); layer{i}.{c} [Ci,hi,wi] (i = 1..4); feature_map.{c} [C4,h,w] (= layer4.{c});
  cam_tokens.{c} [h*w,D] (encoder_img_feat_input_proj output, rows in (h w) order); cam_pos.{c} [h*w,D]
  (2-D sinusoid rows); enc_in [N,D] (latent token = projected zero latent, state token (not for
  nostate), then each camera's tokens); enc_pos [N,D] (the 2 learned 1-D rows, 1 for nostate, then
  each camera's 2-D rows); enc_layer.{l} [N,D]; enc_out [N,D] (after the encoder's final norm:
  identity when pre_norm False); dec_layer.{l} [chunk,D]; dec_out [chunk,D] (after the decoder's final
  LayerNorm); actions_norm [chunk,A] (predict_action_chunk output); actions [chunk,A] (postprocessed,
  world units); select_action [A] (first select_action step after reset, postprocessed).

--check (run by the tool on what it wrote, in a fresh process) reloads the folder with lerobot and
reproduces `actions` (and actions_norm, select_action, pixels, state_norm where there is a state) to
<= 1e-6, then recomputes every golden tensor from model.safetensors, the processors' statistics
files and the raw inputs with an independent float64 implementation (reference_forward: golden.json's
formulas made executable; no lerobot modules): <= 1e-4 of max(1, max |golden|) per tensor for tiny,
<= 1e-3 for full (float32 through 4 encoder layers on ~600 tokens of magnitude ~1e2 measured 2.4e-4
there). Measured for tiny (largest tensor): base 3.3e-6, prenorm_gelu 1.2e-6, nostate 1.4e-5
(enc_layer.0: enc_in reaches ~85 there).
"""
import argparse
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
HERE = os.path.dirname(os.path.abspath(__file__))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torchvision  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from torch import nn  # noqa: E402

CAMERAS = ["top", "wrist"]  # config order = encoder token order

# tiny: the committed fixture; full: lerobot's ACTConfig defaults with ALOHA-like features.
SIZES = {
    "tiny": dict(cam_hw=(70, 90), state_dim=6, action_dim=5, vision_backbone="resnet18_tiny",
                 policy=dict(dim_model=32, n_heads=4, dim_feedforward=48, n_encoder_layers=2, n_decoder_layers=2,
                             chunk_size=7, n_action_steps=5, latent_dim=8, n_vae_encoder_layers=1)),
    "full": dict(cam_hw=(480, 640), state_dim=14, action_dim=14, vision_backbone="resnet18",
                 policy=dict(dim_model=512, n_heads=8, dim_feedforward=3200, n_encoder_layers=4, n_decoder_layers=1,
                             chunk_size=100, n_action_steps=100, latent_dim=32, n_vae_encoder_layers=4)),
}
TINY_RESNET = dict(stem=8, planes=[8, 16, 24, 32], strides=[1, 2, 2, 2], blocks=[2, 2, 2, 2], fc_out=10)
BN_EPS = 1e-5  # torchvision.ops.misc.FrozenBatchNorm2d default (ResNet calls norm_layer(planes): no eps)
LN_EPS = 1e-5  # nn.LayerNorm default (ACT passes none)
NORM_EPS = 1e-8  # lerobot NormalizerProcessorStep / UnnormalizerProcessorStep default eps
POS2D_EPS, POS2D_TEMP = 1e-6, 10000

FORMULAS = {
    "image_in": "u8 HWC frame -> float32 CHW x = u8 / 255 (what a lerobot dataset yields); ACT never resizes: "
                "the backbone runs at the camera's own H x W (config shape [3, H, W])",
    "normalise": "NormalizerProcessorStep MEAN_STD (lerobot/processor/normalize_processor.py:333-337), float32: "
                 "y = (x - mean) / (std + eps), eps = 1e-8, no clipping; cameras: per-channel mean/std of shape "
                 "(3, 1, 1) broadcast over H, W; state: per-dim. Keys: policy_preprocessor_step_3_normalizer_"
                 "processor.safetensors '{feature}.mean' / '{feature}.std' (min / max stored too, unused)",
    "unnormalise": "UnnormalizerProcessorStep MEAN_STD inverse: a = x * std + mean (NO eps in the inverse), "
                   "action statistics of policy_postprocessor_step_0_unnormalizer_processor.safetensors",
    "bn_fold": "FrozenBatchNorm2d (torchvision/ops/misc.py): scale = weight * rsqrt(running_var + eps), "
               "shift = bias - running_mean * scale, y = x * scale + shift, eps = 1e-5 (the class default; "
               "torchvision's ResNet passes none); buffers weight, bias, running_mean, running_var (no "
               "num_batches_tracked). Folded into the preceding bias-free conv: W' = W * scale[o], b' = shift",
    "stem": "conv1 (7x7, stride 2, pad 3, no bias) -> bn1 -> ReLU -> maxpool (3x3, stride 2, pad 1, padding "
            "never wins: -inf) ; out = floor((in + 2 pad - k) / stride) + 1 on each axis",
    "basic_block": "torchvision BasicBlock: y = ReLU(bn2(conv2(ReLU(bn1(conv1(x))))) + identity); conv1 3x3 "
                   "stride s pad 1, conv2 3x3 stride 1 pad 1, no biases; identity = x, or downsample.1(downsample"
                   ".0(x)) (1x1 conv stride s, no bias, then FrozenBN) in block 0 of layer2..4 (s = 2; also "
                   "whenever the width changes); layer{i} = block 0 then block 1; dilation 1 everywhere "
                   "(replace_final_stride_with_dilation False)",
    "cam_tokens": "encoder_img_feat_input_proj = Conv2d(C4, D, kernel 1, bias): token[t] = W[:, :, 0, 0] @ "
                  "f[:, y, x] + b, t = y * w + x (einops 'b c h w -> (h w) b c')",
    "pos_2d": "ACTSinusoidalPositionEmbedding2d(d = D / 2) (modeling_act.py): for grid row y in 0..h-1, col x "
              "in 0..w-1 (float32): Y = (y + 1) / (h + 1e-6) * 2 pi, X = (x + 1) / (w + 1e-6) * 2 pi; f_k = "
              "10000 ^ (2 * floor(k / 2) / d), k = 0..d-1; py[k] = sin(Y / f_k) for even k, cos(Y / f_k) for odd "
              "k (interleaved; f_{2m+1} = f_{2m}); px likewise with X; row = concat(py, px) (D channels: the "
              "first D/2 from the row index, the last D/2 from the column index). Depends only on h, w, D; "
              "the same for every camera of the same grid",
    "enc_in": "tokens = [encoder_latent_input_proj(zeros(latent_dim)) (= its bias), "
              "encoder_robot_state_input_proj(state_norm), cam 0 tokens (h*w rows), cam 1 tokens, ...]; "
              "pos = [encoder_1d_feature_pos_embed.weight[0], [1], cam_pos.0 rows, cam_pos.1 rows, ...]",
    "mha": "nn.MultiheadAttention(D, H), batch_first False, no mask, dropout off in eval: [Wq; Wk; Wv] = "
           "in_proj_weight [3D, D], [bq; bk; bv] = in_proj_bias [3D]; q = query Wq^T + bq, k = key Wk^T + bk, "
           "v = value Wv^T + bv; head j = channels j*hd .. (j+1)*hd - 1, hd = D / H; o = softmax(q k^T / "
           "sqrt(hd)) v per head, heads concatenated, out = o out_proj.weight^T + out_proj.bias",
    "ffn": "linear2(act(linear1(x))), D -> dim_feedforward -> D; act = F.relu, or F.gelu (exact erf) for "
           "feedforward_activation 'gelu'",
    "encoder_layer": "post-norm (pre_norm False): x = norm1(x + MHA(q = k = x + pos, v = x)); x = norm2(x + "
                     "FFN(x)). pre-norm: h = norm1(x); x = x + MHA(q = k = h + pos, v = h); x = x + "
                     "FFN(norm2(x)). LayerNorm eps 1e-5, affine. enc_out = encoder.norm(last layer) with "
                     "encoder.norm = LayerNorm when pre_norm, Identity (no weights) otherwise",
    "decoder_layer": "x0 = zeros [chunk, D]; qpos = decoder_pos_embed.weight [chunk, D]; post-norm: x = norm1(x "
                     "+ SA(q = k = x + qpos, v = x)); x = norm2(x + CA(q = x + qpos, k = enc_out + enc_pos, v = "
                     "enc_out)); x = norm3(x + FFN(x)). pre-norm: h = norm1(x); x = x + SA(h + qpos, h + qpos, "
                     "h); h = norm2(x); x = x + CA(h + qpos, enc_out + enc_pos, enc_out); x = x + FFN(norm3(x)). "
                     "Every one of the n_decoder_layers runs; dec_out = decoder.norm(x) (a LayerNorm in both "
                     "modes)",
    "head": "actions_norm = action_head(dec_out) (Linear D -> action_dim); predict_action_chunk returns all "
            "chunk_size rows; select_action queues the first n_action_steps rows and pops one per call",
    "vae": "use_vae True: vae_encoder*, vae_encoder_cls_embed, vae_encoder_robot_state_input_proj, "
           "vae_encoder_action_input_proj, vae_encoder_latent_output_proj and the buffer vae_encoder_pos_enc "
           "are in model.safetensors but only used in training (ACT.forward: `use_vae and ACTION in batch and "
           "self.training`); at inference the latent is zeros(latent_dim)",
}

# --variant nostate (no observation.state input feature): the formulas that mention the state, restated.
FORMULAS_NOSTATE = dict(
    FORMULAS,
    normalise=FORMULAS["normalise"].replace(
        "; state: per-dim.", "; no state (no observation.state feature: no state statistics)."),
    enc_in="tokens = [encoder_latent_input_proj(zeros(latent_dim)) (= its bias), cam 0 tokens (h*w rows), cam 1 "
           "tokens, ...]: no robot state feature, so no state token and no encoder_robot_state_input_proj; "
           "pos = [encoder_1d_feature_pos_embed.weight[0] (its only row), cam_pos.0 rows, cam_pos.1 rows, ...]; "
           "N = 1 + cameras * h * w",
    vae=FORMULAS["vae"].replace("vae_encoder_robot_state_input_proj, ", "").replace(
        "are in model.safetensors", "are in model.safetensors (no vae_encoder_robot_state_input_proj: no state; "
        "vae_encoder_pos_enc has 1 + chunk_size rows)"),
)
assert FORMULAS_NOSTATE["normalise"] != FORMULAS["normalise"] and FORMULAS_NOSTATE["vae"] != FORMULAS["vae"]


# ----------------------------------------------------------------------------- the tiny backbone

def resnet18_tiny(*, weights=None, progress=True, **kwargs):
    """torchvision's resnet18 layout at widths 8 / 8, 16, 24, 32 (see the module docstring)."""
    from torchvision.models.resnet import BasicBlock, ResNet
    assert weights is None, "resnet18_tiny has no pretrained weights"
    m = ResNet(BasicBlock, TINY_RESNET["blocks"], **kwargs)
    rsd = kwargs.get("replace_stride_with_dilation") or [False, False, False]
    m.inplanes, m.dilation = TINY_RESNET["stem"], 1
    m.conv1 = nn.Conv2d(3, m.inplanes, kernel_size=7, stride=2, padding=3, bias=False)
    m.bn1 = m._norm_layer(m.inplanes)
    for i, (planes, stride, n) in enumerate(zip(TINY_RESNET["planes"], TINY_RESNET["strides"], TINY_RESNET["blocks"])):
        dilate = rsd[i - 1] if i > 0 else False
        setattr(m, f"layer{i + 1}", m._make_layer(BasicBlock, planes, n, stride=stride, dilate=dilate))
    m.fc = nn.Linear(TINY_RESNET["planes"][-1] * BasicBlock.expansion, TINY_RESNET["fc_out"])
    return m


def register_backbone():
    torchvision.models.resnet18_tiny = resnet18_tiny


# ----------------------------------------------------------------------------- lerobot's side

def make_config(size, pre_norm, gelu, state=True):
    """state False: no observation.state input feature (robot_state_feature None: no state token)."""
    from lerobot.configs.types import FeatureType, NormalizationMode, PolicyFeature
    from lerobot.policies.act.configuration_act import ACTConfig
    s = SIZES[size]
    feats = {"observation.state": PolicyFeature(type=FeatureType.STATE, shape=(s["state_dim"],))} if state else {}
    for c in CAMERAS:
        feats[f"observation.images.{c}"] = PolicyFeature(type=FeatureType.VISUAL, shape=(3, *s["cam_hw"]))
    cfg = ACTConfig(device="cpu", input_features=feats,
                    output_features={"action": PolicyFeature(type=FeatureType.ACTION, shape=(s["action_dim"],))},
                    vision_backbone=s["vision_backbone"], pretrained_backbone_weights=None,
                    replace_final_stride_with_dilation=False, use_vae=True, pre_norm=pre_norm,
                    feedforward_activation="gelu" if gelu else "relu", **s["policy"])
    assert all(m == NormalizationMode.MEAN_STD for m in cfg.normalization_mapping.values())
    assert cfg.temporal_ensemble_coeff is None and cfg.n_obs_steps == 1
    assert (cfg.robot_state_feature is not None) == state and cfg.env_state_feature is None
    return cfg


def rerandomize(policy, gen):
    """Module by module (named_modules order), every parameter and persistent buffer (see the docstring)."""
    from torchvision.ops.misc import FrozenBatchNorm2d
    done = {}

    def put(name, t, v):
        assert name not in done and v.shape == t.shape and t.dtype == torch.float32, name
        t.copy_(v)
        done[name] = tuple(t.shape)

    randn = lambda shape: torch.randn(shape, generator=gen)  # noqa: E731
    rand = lambda shape, lo, hi: lo + (hi - lo) * torch.rand(shape, generator=gen)  # noqa: E731
    with torch.no_grad():
        for mn, m in policy.named_modules():
            p = (mn + ".") if mn else ""
            if isinstance(m, FrozenBatchNorm2d):
                put(p + "weight", m.weight, rand(m.weight.shape, 0.5, 1.5))
                put(p + "bias", m.bias, 0.1 * randn(m.bias.shape))
                put(p + "running_mean", m.running_mean, 0.1 * randn(m.running_mean.shape))
                put(p + "running_var", m.running_var, rand(m.running_var.shape, 0.5, 2.0))
            elif isinstance(m, nn.Conv2d):
                fan_in = m.weight[0].numel()
                std = math.sqrt(2.0 / fan_in) if mn.startswith("model.backbone.") else 1.0 / math.sqrt(fan_in)
                put(p + "weight", m.weight, std * randn(m.weight.shape))
                if m.bias is not None:
                    put(p + "bias", m.bias, 0.1 * randn(m.bias.shape))
            elif isinstance(m, nn.Linear):  # also MultiheadAttention's out_proj
                put(p + "weight", m.weight, randn(m.weight.shape) / math.sqrt(m.weight.shape[1]))
                if m.bias is not None:
                    put(p + "bias", m.bias, 0.1 * randn(m.bias.shape))
            elif isinstance(m, nn.MultiheadAttention):
                assert m._qkv_same_embed_dim and m.bias_k is None and m.bias_v is None
                put(p + "in_proj_weight", m.in_proj_weight,
                    randn(m.in_proj_weight.shape) / math.sqrt(m.in_proj_weight.shape[1]))
                put(p + "in_proj_bias", m.in_proj_bias, 0.1 * randn(m.in_proj_bias.shape))
            elif isinstance(m, nn.LayerNorm):
                put(p + "weight", m.weight, rand(m.weight.shape, 0.5, 1.5))
                put(p + "bias", m.bias, 0.1 * randn(m.bias.shape))
            elif isinstance(m, nn.Embedding):
                put(p + "weight", m.weight, 0.5 * randn(m.weight.shape))
            if mn == "model" and hasattr(m, "vae_encoder_pos_enc"):
                put(p + "vae_encoder_pos_enc", m.vae_encoder_pos_enc, 0.5 * randn(m.vae_encoder_pos_enc.shape))
    sd = policy.state_dict()
    missing = sorted(set(sd) - set(done))
    assert not missing and set(done) == set(sd), (missing, sorted(set(done) - set(sd)))
    return done


def make_stats(gen, cfg):
    """dataset_stats as lerobot passes them: MEAN_STD needs mean / std; min / max ride along as in a dataset."""
    stats = {}
    for c in CAMERAS:
        mean = 0.3 + 0.3 * torch.rand(3, 1, 1, generator=gen)
        std = 0.15 + 0.15 * torch.rand(3, 1, 1, generator=gen)
        stats[f"observation.images.{c}"] = {"mean": mean, "std": std, "min": torch.zeros(3, 1, 1),
                                            "max": torch.ones(3, 1, 1)}
    for k, ft in [("observation.state", cfg.robot_state_feature), ("action", cfg.action_feature)]:
        if ft is None:  # no state feature: no state statistics (and no draws for them)
            continue
        d = ft.shape[0]
        mean = torch.randn(d, generator=gen)
        std = 0.5 + 1.5 * torch.rand(d, generator=gen)
        stats[k] = {"mean": mean, "std": std, "min": mean - 3 * std, "max": mean + 3 * std}
    return stats


def make_obs(images, state):
    """state None: the observation has no observation.state (the nostate variant)."""
    obs = {} if state is None else {"observation.state": state.clone()}
    for c, img in zip(CAMERAS, images):
        obs[f"observation.images.{c}"] = img.permute(2, 0, 1).float() / 255.0
    return obs


def run_policy(policy, pre, post, images, state):
    """lerobot's inference path: preprocessor -> predict_action_chunk -> postprocessor (whole chunk),
    then reset + select_action (first step, postprocessed)."""
    batch = pre(make_obs(images, state))
    chunk = policy.predict_action_chunk(policy_batch(policy, batch))
    actions = post(chunk)
    policy.reset()
    step = post(policy.select_action(policy_batch(policy, batch)))
    return batch, chunk, actions, step


def policy_batch(policy, batch):
    """The dict the policy gets: a shallow copy of the preprocessor's output. Without a robot state feature,
    lerobot 0.4.4's ACT.forward still reads `batch[OBS_STATE].device` for the zero latent at inference
    (modeling_act.py:453-456, `torch.zeros([batch_size, latent_dim]).to(batch[OBS_STATE].device)`) and raises
    KeyError; everything else in it is guarded by `if self.config.robot_state_feature`. So for the nostate
    variant the policy (never the observation, the preprocessor or the golden) gets an EMPTY device carrier
    observation.state of shape [batch, 0]: it holds no values, and only its .device is read."""
    b = dict(batch)
    if policy.config.robot_state_feature is None:
        assert "observation.state" not in b, "a nostate observation carried observation.state"
        img = b[f"observation.images.{CAMERAS[0]}"]
        b["observation.state"] = torch.zeros(img.shape[0], 0, device=img.device)
    return b


def load_fixture(fixture):
    from lerobot.policies.act.modeling_act import ACTPolicy
    from lerobot.policies.factory import make_pre_post_processors
    register_backbone()
    policy = ACTPolicy.from_pretrained(fixture, strict=True).eval()
    pre, post = make_pre_post_processors(policy.config, pretrained_path=fixture)
    return policy, pre, post


def step_files(out):
    """{pipeline json: [(registry name, state file or None)]} as the processors saved them."""
    res = {}
    for name in ["policy_preprocessor.json", "policy_postprocessor.json"]:
        d = json.load(open(os.path.join(out, name)))
        res[name] = [(s.get("registry_name"), s.get("state_file")) for s in d["steps"]]
    return res


def stats_from_files(fixture):
    """The statistics the processors saved: {feature: {stat: tensor}} from the normaliser step file."""
    pre = [f for _, f in step_files(fixture)["policy_preprocessor.json"] if f]
    post = [f for _, f in step_files(fixture)["policy_postprocessor.json"] if f]
    assert len(pre) == 1 and len(post) == 1, (pre, post)
    res = {}
    for tag, f in [("pre", pre[0]), ("post", post[0])]:
        d = {}
        for k, v in load_file(os.path.join(fixture, f)).items():
            feat, stat = k.rsplit(".", 1)
            d.setdefault(feat, {})[stat] = v
        res[tag] = d
    return res


# ----------------------------------------------------------------------------- independent reference
# The whole inference again from the fixture files alone, float64, plain torch ops (no lerobot module).

def reference_forward(fixture):
    import torch.nn.functional as F
    cfg = json.load(open(os.path.join(fixture, "config.json")))
    info = json.load(open(os.path.join(fixture, "golden.json")))
    g = load_file(os.path.join(fixture, "golden.safetensors"))
    W = {k: v.double() for k, v in load_file(os.path.join(fixture, "model.safetensors")).items()}
    st = stats_from_files(fixture)
    D, H = cfg["dim_model"], cfg["n_heads"]
    hd = D // H
    act = {"relu": F.relu, "gelu": F.gelu}[cfg["feedforward_activation"]]
    errs = {}

    def err(name, x):
        errs[name] = float((x.float() - g[name]).abs().max())

    def lin(x, p):
        return x @ W[p + ".weight"].T + W[p + ".bias"]

    def ln(x, p):
        return F.layer_norm(x, (D,), W[p + ".weight"], W[p + ".bias"], LN_EPS)

    def bn(x, p):
        scale = W[p + ".weight"] / torch.sqrt(W[p + ".running_var"] + BN_EPS)
        shift = W[p + ".bias"] - W[p + ".running_mean"] * scale
        return x * scale[:, None, None] + shift[:, None, None]

    def conv(x, p, stride, pad):
        return F.conv2d(x[None], W[p + ".weight"], None, stride, pad)[0]

    def mha(q, k, v, p):
        wq, wk, wv = W[p + ".in_proj_weight"].chunk(3)
        bq, bk, bv = W[p + ".in_proj_bias"].chunk(3)
        q, k, v = q @ wq.T + bq, k @ wk.T + bk, v @ wv.T + bv
        heads = []
        for j in range(H):
            s = slice(j * hd, (j + 1) * hd)
            a = torch.softmax(q[:, s] @ k[:, s].T / math.sqrt(hd), dim=-1)
            heads.append(a @ v[:, s])
        return lin(torch.cat(heads, dim=1), p + ".out_proj")

    def ffn(x, p):
        return lin(act(lin(x, p + ".linear1")), p + ".linear2")

    def pos2d(h, w):
        d = D // 2
        Y = (torch.arange(h, dtype=torch.float64) + 1) / (h + POS2D_EPS) * 2 * math.pi
        X = (torch.arange(w, dtype=torch.float64) + 1) / (w + POS2D_EPS) * 2 * math.pi
        f = torch.tensor([POS2D_TEMP ** (2 * (k // 2) / d) for k in range(d)], dtype=torch.float64)
        odd = torch.arange(d) % 2 == 1

        def emb(v):
            a = v[:, None] / f
            return torch.where(odd, torch.cos(a), torch.sin(a))
        py, px = emb(Y), emb(X)  # [h, d], [w, d]
        return torch.cat([py[:, None, :].expand(h, w, d), px[None, :, :].expand(h, w, d)], -1).reshape(h * w, D)

    pre = st["pre"]
    # the state is optional (nostate variant): config.json's input_features decide; every other file must agree
    has_state = "observation.state" in cfg["input_features"]
    assert has_state == ("state" in g) == ("state_norm" in g) == ("observation.state" in pre) \
        == ("model.encoder_robot_state_input_proj.weight" in W), "state present in some files only"
    assert W["model.encoder_1d_feature_pos_embed.weight"].shape[0] == 1 + has_state
    tokens, pos = [], []
    tokens.append(W["model.encoder_latent_input_proj.bias"]
                  + W["model.encoder_latent_input_proj.weight"] @ torch.zeros(cfg["latent_dim"], dtype=torch.float64))
    if has_state:
        s_stats = pre["observation.state"]
        state_norm = (g["state"].double() - s_stats["mean"].double()) / (s_stats["std"].double() + NORM_EPS)
        err("state_norm", state_norm)
        tokens.append(lin(state_norm, "model.encoder_robot_state_input_proj"))
    pos += list(W["model.encoder_1d_feature_pos_embed.weight"])
    bb = "model.backbone."
    for c, cam in enumerate(info["cameras"]):
        cs = pre[cam]
        x = g[f"image.{c}"].permute(2, 0, 1).double() / 255.0
        x = (x - cs["mean"].double()) / (cs["std"].double() + NORM_EPS)
        err(f"pixels.{c}", x)
        x = F.relu(bn(conv(x, bb + "conv1", 2, 3), bb + "bn1"))
        x = F.max_pool2d(x[None], 3, 2, 1)[0]
        err(f"stem.{c}", x)
        for i in range(1, 5):
            j = 0
            while f"{bb}layer{i}.{j}.conv1.weight" in W:
                p = f"{bb}layer{i}.{j}"
                stride = 2 if (i > 1 and j == 0) else 1
                y = F.relu(bn(conv(x, p + ".conv1", stride, 1), p + ".bn1"))
                y = bn(conv(y, p + ".conv2", 1, 1), p + ".bn2")
                idn = bn(conv(x, p + ".downsample.0", stride, 0), p + ".downsample.1") \
                    if p + ".downsample.0.weight" in W else x
                x = F.relu(y + idn)
                j += 1
            err(f"layer{i}.{c}", x)
        err(f"feature_map.{c}", x)
        C4, h, w = x.shape
        t = x.reshape(C4, h * w).T @ W["model.encoder_img_feat_input_proj.weight"][:, :, 0, 0].T \
            + W["model.encoder_img_feat_input_proj.bias"]
        p2 = pos2d(h, w)
        err(f"cam_tokens.{c}", t)
        err(f"cam_pos.{c}", p2)
        tokens += list(t)
        pos += list(p2)
    x, pe = torch.stack(tokens), torch.stack(pos)
    err("enc_in", x)
    err("enc_pos", pe)
    pre_norm = cfg["pre_norm"]
    for l in range(cfg["n_encoder_layers"]):
        p = f"model.encoder.layers.{l}"
        if pre_norm:
            h_ = ln(x, p + ".norm1")
            x = x + mha(h_ + pe, h_ + pe, h_, p + ".self_attn")
            x = x + ffn(ln(x, p + ".norm2"), p)
        else:
            x = ln(x + mha(x + pe, x + pe, x, p + ".self_attn"), p + ".norm1")
            x = ln(x + ffn(x, p), p + ".norm2")
        err(f"enc_layer.{l}", x)
    enc = ln(x, "model.encoder.norm") if pre_norm else x
    err("enc_out", enc)
    qpos = W["model.decoder_pos_embed.weight"]
    x = torch.zeros(cfg["chunk_size"], D, dtype=torch.float64)
    for l in range(cfg["n_decoder_layers"]):
        p = f"model.decoder.layers.{l}"
        if pre_norm:
            h_ = ln(x, p + ".norm1")
            x = x + mha(h_ + qpos, h_ + qpos, h_, p + ".self_attn")
            h_ = ln(x, p + ".norm2")
            x = x + mha(h_ + qpos, enc + pe, enc, p + ".multihead_attn")
            x = x + ffn(ln(x, p + ".norm3"), p)
        else:
            x = ln(x + mha(x + qpos, x + qpos, x, p + ".self_attn"), p + ".norm1")
            x = ln(x + mha(x + qpos, enc + pe, enc, p + ".multihead_attn"), p + ".norm2")
            x = ln(x + ffn(x, p), p + ".norm3")
        err(f"dec_layer.{l}", x)
    x = ln(x, "model.decoder.norm")
    err("dec_out", x)
    an = lin(x, "model.action_head")
    err("actions_norm", an)
    a_stats = st["post"]["action"]
    a = an * a_stats["std"].double() + a_stats["mean"].double()
    err("actions", a)
    err("select_action", a[0])
    scale = {k: float(v.abs().max()) for k, v in g.items() if v.dtype != torch.uint8}
    return errs, scale


# ----------------------------------------------------------------------------- run

def check(fixture):
    """Reload the fixture in this (fresh) process and reproduce the golden actions, then the reference."""
    fixture = os.path.abspath(fixture)
    g = load_file(os.path.join(fixture, "golden.safetensors"))
    cams = json.load(open(os.path.join(fixture, "golden.json")))["cameras"]
    assert cams == [f"observation.images.{c}" for c in CAMERAS], cams
    policy, pre, post = load_fixture(fixture)
    has_state = policy.config.robot_state_feature is not None  # False for the nostate variant
    assert has_state == ("state" in g) == ("state_norm" in g), (has_state, sorted(g))
    images = [g[f"image.{c}"] for c in range(len(CAMERAS))]
    with torch.no_grad():
        batch, chunk, actions, step = run_policy(policy, pre, post, images, g["state"] if has_state else None)
    err = {"actions": float((actions[0] - g["actions"]).abs().max()),
           "actions_norm": float((chunk[0] - g["actions_norm"]).abs().max()),
           "select_action": float((step[0] - g["select_action"]).abs().max())}
    if has_state:
        err["state_norm"] = float((batch["observation.state"][0] - g["state_norm"]).abs().max())
    else:
        assert "observation.state" not in batch, sorted(batch)
    for c, cam in enumerate(cams):
        err[f"pixels.{c}"] = float((batch[cam][0] - g[f"pixels.{c}"]).abs().max())
    print("reload check (max abs diff):", json.dumps(err))
    assert max(err.values()) <= 1e-6, err
    ref, scale = reference_forward(fixture)
    rel = {k: v / max(scale[k], 1.0) for k, v in ref.items()}
    print("independent float64 reference (max abs err / max(1, max |golden|)):",
          json.dumps({k: float(f"{v:.2e}") for k, v in rel.items()}))
    # full: float32 through 4 encoder layers on ~600 tokens of magnitude ~1e2 (random weights) gives ~2e-4
    bound = 1e-4 if json.load(open(os.path.join(fixture, "golden.json")))["size"] == "tiny" else 1e-3
    assert max(rel.values()) < bound, rel
    return err


def key_summary(keys_shapes):
    """Checkpoint keys with layer / block indices folded to {l}, {i}, {j}: pattern -> count, shapes."""
    import re
    pat = {}
    for k, s in keys_shapes.items():
        p = re.sub(r"\.layers\.\d+\.", ".layers.{l}.", k)
        p = re.sub(r"\.layer\d\.\d+\.", ".layer{i}.{j}.", p)
        e = pat.setdefault(p, [0, []])
        e[0] += 1
        s = "x".join(map(str, s))
        if s not in e[1]:
            e[1].append(s)
    return {p: {"count": n, "shapes": sh} for p, (n, sh) in sorted(pat.items())}


def generate(a, out):
    import lerobot
    from lerobot.policies.act.modeling_act import ACTPolicy
    from lerobot.policies.act.processor_act import make_act_pre_post_processors

    register_backbone()
    size = SIZES[a.size]
    has_state = not a.no_state
    cfg = make_config(a.size, a.pre_norm, a.gelu, state=has_state)
    torch.manual_seed(a.seed)
    policy = ACTPolicy(cfg).eval()
    model = policy.model
    gen = torch.Generator().manual_seed(a.seed)
    drawn = rerandomize(policy, gen)
    stats = make_stats(gen, cfg)
    pre, post = make_act_pre_post_processors(cfg, dataset_stats=stats)
    os.makedirs(out)
    policy.save_pretrained(out)
    pre.save_pretrained(out)
    post.save_pretrained(out)

    H, Wd = size["cam_hw"]
    images = [torch.randint(0, 256, (H, Wd, 3), generator=gen, dtype=torch.uint8) for _ in CAMERAS]
    state = 2.0 * torch.randn(size["state_dim"], generator=gen) if has_state else None

    # Record with hooks during one predict_action_chunk call.
    rec = {}
    det = lambda o: o.detach().clone()  # noqa: E731
    add = lambda k, v: rec.setdefault(k, []).append(det(v))  # noqa: E731
    bbm = model.backbone  # IntermediateLayerGetter: conv1, bn1, relu, maxpool, layer1..4
    hooks = [bbm.maxpool.register_forward_hook(lambda m, i, o: add("stem", o)),
             model.encoder_img_feat_input_proj.register_forward_hook(lambda m, i, o: add("cam_tokens", o)),
             model.encoder_cam_feat_pos_embed.register_forward_hook(lambda m, i, o: add("cam_pos", o)),
             model.encoder.register_forward_pre_hook(
                 lambda m, args, kw: (add("enc_in", args[0]), add("enc_pos", kw["pos_embed"])) and None,
                 with_kwargs=True),
             model.encoder.register_forward_hook(lambda m, i, o: add("enc_out", o)),
             model.decoder.register_forward_hook(lambda m, i, o: add("dec_out", o)),
             model.vae_encoder.register_forward_hook(lambda m, i, o: add("vae_ran", o))]
    for i in range(1, 5):
        hooks.append(getattr(bbm, f"layer{i}").register_forward_hook(lambda m, i_, o, i=i: add(f"layer{i}", o)))
    for l, layer in enumerate(model.encoder.layers):
        hooks.append(layer.register_forward_hook(lambda m, i, o, l=l: add(f"enc_layer.{l}", o)))
    for l, layer in enumerate(model.decoder.layers):
        hooks.append(layer.register_forward_hook(lambda m, i, o, l=l: add(f"dec_layer.{l}", o)))
    batch = pre(make_obs(images, state))
    assert ("observation.state" in batch) == has_state, sorted(batch)
    with torch.no_grad():
        chunk = policy.predict_action_chunk(policy_batch(policy, batch))
    for hk in hooks:
        hk.remove()
    actions = post(chunk)
    policy.reset()
    with torch.no_grad():
        step = post(policy.select_action(policy_batch(policy, batch)))
    assert "vae_ran" not in rec, "the VAE encoder ran at inference"
    n_cam = len(CAMERAS)
    for k in ["stem", "cam_tokens", "cam_pos"] + [f"layer{i}" for i in range(1, 5)]:
        assert len(rec[k]) == n_cam, (k, len(rec[k]))
    assert len(rec["dec_out"]) == 1 and all(len(rec[f"dec_layer.{l}"]) == 1 for l in range(cfg.n_decoder_layers))
    assert torch.equal(step[0], actions[0, 0])

    golden = {f"image.{c}": img for c, img in enumerate(images)}
    if has_state:
        golden["state"] = state
    for c, cam in enumerate(CAMERAS):
        golden[f"pixels.{c}"] = batch[f"observation.images.{cam}"][0]
    if has_state:
        golden["state_norm"] = batch["observation.state"][0]
    for c in range(n_cam):
        golden[f"stem.{c}"] = rec["stem"][c][0]
        for i in range(1, 5):
            golden[f"layer{i}.{c}"] = rec[f"layer{i}"][c][0]
        golden[f"feature_map.{c}"] = rec["layer4"][c][0].clone()  # = layer4.{c}, stored twice
        golden[f"cam_tokens.{c}"] = rec["cam_tokens"][c][0].flatten(1).T  # [D, h, w] -> [(h w), D]
        golden[f"cam_pos.{c}"] = rec["cam_pos"][c][0].flatten(1).T
    golden["enc_in"] = rec["enc_in"][0][:, 0]
    golden["enc_pos"] = rec["enc_pos"][0][:, 0]
    for l in range(cfg.n_encoder_layers):
        golden[f"enc_layer.{l}"] = rec[f"enc_layer.{l}"][0][:, 0]
    golden["enc_out"] = rec["enc_out"][0][:, 0]
    for l in range(cfg.n_decoder_layers):
        golden[f"dec_layer.{l}"] = rec[f"dec_layer.{l}"][0][:, 0]
    golden["dec_out"] = rec["dec_out"][0][:, 0]
    golden["actions_norm"] = chunk[0]
    golden["actions"] = actions[0]
    golden["select_action"] = step[0]
    # the recorded rows are the encoder's own input: check the assembly order documented in FORMULAS
    hw = golden["cam_tokens.0"].shape[0]
    n1d = 1 + has_state  # latent (+ state)
    assert model.encoder_1d_feature_pos_embed.weight.shape[0] == n1d
    assert golden["enc_in"].shape[0] == n1d + n_cam * hw
    assert torch.equal(golden["enc_in"][n1d:n1d + hw], golden["cam_tokens.0"])
    assert torch.equal(golden["enc_pos"][:n1d], model.encoder_1d_feature_pos_embed.weight)
    assert torch.equal(golden["enc_in"][0], model.encoder_latent_input_proj.bias)
    if not cfg.pre_norm:
        assert torch.equal(golden["enc_out"], golden[f"enc_layer.{cfg.n_encoder_layers - 1}"])
    golden = {k: (t if t.dtype == torch.uint8 else t.float()).contiguous() for k, t in golden.items()}
    save_file(golden, os.path.join(out, "golden.safetensors"))

    ckpt = load_file(os.path.join(out, "model.safetensors"))
    assert set(ckpt) == set(drawn), sorted(set(ckpt) ^ set(drawn))
    assert all(t.dtype == torch.float32 for t in ckpt.values())
    key_shapes = {k: "x".join(map(str, v.shape)) for k, v in sorted(ckpt.items())}
    bb_keys = [k for k in key_shapes if k.startswith("model.backbone.")]
    n_params = sum(p.numel() for p in policy.parameters())
    n_vae = sum(p.numel() for n, p in policy.named_parameters() if n.startswith("model.vae_encoder"))
    fm = golden["feature_map.0"]
    vendor = os.path.dirname(sys.modules["lerobot.policies.act.modeling_act"].__file__)
    stepf = step_files(out)
    summary = {
        "size": a.size, "variant": variant_name(a),
        "dim_model": cfg.dim_model, "n_heads": cfg.n_heads, "head_dim": cfg.dim_model // cfg.n_heads,
        "dim_feedforward": cfg.dim_feedforward, "feedforward_activation": cfg.feedforward_activation,
        "pre_norm": cfg.pre_norm, "n_encoder_layers": cfg.n_encoder_layers, "n_decoder_layers": cfg.n_decoder_layers,
        "decoder_layers_applied": len(model.decoder.layers), "encoder_final_norm": type(model.encoder.norm).__name__,
        "decoder_final_norm": type(model.decoder.norm).__name__,
        "chunk_size": cfg.chunk_size, "n_action_steps": cfg.n_action_steps, "latent_dim": cfg.latent_dim,
        "use_vae": cfg.use_vae, "n_vae_encoder_layers": cfg.n_vae_encoder_layers,
        "vae_params_in_checkpoint": n_vae, "params": n_params,
        "state_dim": size["state_dim"] if has_state else 0, "action_dim": size["action_dim"], "env_state": False,
        "camera_hw": list(size["cam_hw"]),
        "vision_backbone": cfg.vision_backbone, "replace_final_stride_with_dilation": False,
        "backbone": (dict(TINY_RESNET, layout="torchvision resnet18 (BasicBlock x [2,2,2,2])")
                     if a.size == "tiny" else dict(stem=64, planes=[64, 128, 256, 512], strides=[1, 2, 2, 2],
                                                   blocks=[2, 2, 2, 2], fc_out=1000, layout="torchvision resnet18")),
        "backbone_out_channels": int(fm.shape[0]),
        "grids_hw": {"stem": list(golden["stem.0"].shape[1:]),
                     **{f"layer{i}": list(golden[f"layer{i}.0"].shape[1:]) for i in range(1, 5)}},
        "tokens_per_camera": hw, "encoder_tokens": int(golden["enc_in"].shape[0]),
        "n_1d_tokens": int(model.encoder_1d_feature_pos_embed.weight.shape[0]),
        "eps": {"frozen_bn": BN_EPS, "layer_norm": LN_EPS, "normaliser": NORM_EPS, "pos_2d": POS2D_EPS},
        "normalization_mapping": {k: v.value for k, v in cfg.normalization_mapping.items()},
    }
    info = {
        "generator": "tools/golden/act.py",
        "size": a.size,
        "variant": variant_name(a),
        "seed": a.seed,
        "versions": {"python": sys.version.split()[0], "lerobot": lerobot.__version__, "torch": torch.__version__,
                     "torchvision": torchvision.__version__, "numpy": np.__version__,
                     "lerobot_act_sha256": {
                         f: hashlib.sha256(open(os.path.join(vendor, f), "rb").read()).hexdigest()[:16]
                         for f in ["modeling_act.py", "configuration_act.py", "processor_act.py"]}},
        "config": summary,
        "cameras": [f"observation.images.{c}" for c in CAMERAS],
        "processor_steps": {k: [{"registry_name": n, "state_file": f} for n, f in v] for k, v in stepf.items()},
        "statistics": {k: {s: v.flatten().tolist() for s, v in d.items()} for k, d in stats.items()},
        "checkpoint": {"n_tensors": len(key_shapes), "backbone_tensors": len(bb_keys),
                       "patterns": key_summary(key_shapes), "keys": key_shapes},
        "formulas": FORMULAS if has_state else FORMULAS_NOSTATE,
        "magnitudes": {k: round(float(v.float().abs().max()), 3) for k, v in sorted(golden.items())},
        "tensors": {k: [str(t.dtype).replace("torch.", ""), list(t.shape)] for k, t in sorted(golden.items())},
    }
    if not has_state:
        info["lerobot_workaround"] = (
            "lerobot 0.4.4's ACT.forward reads batch['observation.state'].device for the zero latent even "
            "without a robot state feature (modeling_act.py:453-456) and raises KeyError; the tool hands the "
            "policy (only) an empty device carrier observation.state of shape [1, 0] (no values; only .device "
            "is read). The observation, the preprocessor, the statistics and the golden tensors have no state")
    json.dump(info, open(os.path.join(out, "golden.json"), "w"), indent=1)
    print(json.dumps({k: summary[k] for k in ["params", "grids_hw", "encoder_tokens", "backbone_out_channels"]}))
    print("actions[0]:", golden["actions"][0].tolist())


def variant_name(a):
    v = "prenorm_gelu" if (a.pre_norm and a.gelu) else "prenorm" if a.pre_norm else "gelu" if a.gelu else "base"
    if a.no_state:
        v = "nostate" if v == "base" else v + "_nostate"
    return v


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", choices=sorted(SIZES), default="tiny")
    ap.add_argument("--out", help="output folder (default: tests/fixtures/act-tiny, act-tiny-prenorm for "
                                  "--variant prenorm_gelu, act-tiny-nostate for --variant nostate; --size full "
                                  "and other variants need --out)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pre-norm", action="store_true", help="pre_norm True (adds the encoder's final LayerNorm)")
    ap.add_argument("--gelu", action="store_true", help='feedforward_activation "gelu" (default "relu")')
    ap.add_argument("--no-state", action="store_true",
                    help="no observation.state input feature (no state token, no state statistics)")
    ap.add_argument("--variant", choices=["base", "prenorm_gelu", "nostate"], default="base",
                    help="prenorm_gelu = --pre-norm --gelu; nostate = --no-state")
    ap.add_argument("--check", metavar="DIR", help="only reload DIR and reproduce its golden actions")
    ap.add_argument("--no-check", action="store_true", help="skip the reload check after generating")
    a = ap.parse_args()
    if a.check:
        check(a.check)
        return
    if a.variant == "prenorm_gelu":
        a.pre_norm = a.gelu = True
    if a.variant == "nostate":
        a.no_state = True
    root = os.path.abspath(os.path.join(HERE, "..", ".."))
    default = {"base": "act-tiny", "prenorm_gelu": "act-tiny-prenorm",
               "nostate": "act-tiny-nostate"}.get(variant_name(a))
    if a.out is None and (a.size != "tiny" or default is None):
        ap.error("give --out for --size full (~0.25 GB, outside the repo) and for variants other than "
                 "base / prenorm_gelu / nostate")
    out = os.path.abspath(a.out or os.path.join(root, "tests", "fixtures", default))
    if os.path.isdir(out):
        shutil.rmtree(out)
    generate(a, out)
    if not a.no_check:  # a fresh process: the folder alone must suffice
        subprocess.run([sys.executable, os.path.abspath(__file__), "--check", out], check=True,
                       env={**os.environ, "HF_HUB_OFFLINE": "1"})


if __name__ == "__main__":
    main()
