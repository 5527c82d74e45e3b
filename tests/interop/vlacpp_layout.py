"""What the vla.cpp-layout writers (vlacpp_pi0_writer.py, vlacpp_pi05_writer.py,
vlacpp_smolvla_writer.py) share, as vla.cpp's converters share `gguf_blocks`: reading a
checkpoint's safetensors with numpy alone, the SigLIP tower's names in vla.cpp's layout, and
for pi0 / pi0.5 the keys (`write_pi_kv`) and the decoder blocks (`write_decoder_blocks`)."""
import json
import struct

import numpy as np

DT = {"F32": np.float32, "F64": np.float64}


def safetensors(path):
    """Every tensor of a safetensors file, as float32 numpy arrays."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, v in head.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        out[k] = np.frombuffer(data[a:b], dtype=DT[v["dtype"]]).reshape(v["shape"]).astype(np.float32)
    return out


def siglip_layers(sd, vis):
    """The number of encoder layers under the vision model prefix `vis`."""
    n = 0
    while f"{vis}.encoder.layers.{n}.layer_norm1.weight" in sd:
        n += 1
    return n


def write_siglip(add, sd, vis, pos=None):
    """The SigLIP tower under `vis` as vla.cpp names it (`write_siglip_tower`): the patch
    embedding as stored (SigLIP's 4-D convolution, SigLIP2's Linear), `vit.pos_embd` without
    `.weight` (`pos` where given, else the stored table), `vit.blk.{i}.*`, `vit.post_ln`."""
    e = f"{vis}.embeddings"
    add("vit.patch_embd.weight", sd[f"{e}.patch_embedding.weight"])
    add("vit.patch_embd.bias", sd[f"{e}.patch_embedding.bias"])
    add("vit.pos_embd", sd[f"{e}.position_embedding.weight"] if pos is None else pos)
    for i in range(siglip_layers(sd, vis)):
        L = f"{vis}.encoder.layers.{i}"
        for s, d in [("layer_norm1", "ln1"), ("layer_norm2", "ln2"), ("self_attn.q_proj", "attn_q"),
                     ("self_attn.k_proj", "attn_k"), ("self_attn.v_proj", "attn_v"),
                     ("self_attn.out_proj", "attn_o"), ("mlp.fc1", "fc1"), ("mlp.fc2", "fc2")]:
            add(f"vit.blk.{i}.{d}.weight", sd[f"{L}.{s}.weight"])
            add(f"vit.blk.{i}.{d}.bias", sd[f"{L}.{s}.bias"])
    add("vit.post_ln.weight", sd[f"{vis}.post_layernorm.weight"])
    add("vit.post_ln.bias", sd[f"{vis}.post_layernorm.bias"])


# A lerobot pi0 / pi0.5 checkpoint's prefixes (after its leading "model." is dropped).
PI_VLM = "paligemma_with_expert.paligemma.model.language_model"
PI_AEX = "paligemma_with_expert.gemma_expert.model"
PI_VIS = "paligemma_with_expert.paligemma.model.vision_tower.vision_model"
PI_MMP = "paligemma_with_expert.paligemma.model.multi_modal_projector"
PI_HEAD = "paligemma_with_expert.paligemma.lm_head.weight"

# A decoder layer's tensors (Gemma, Qwen2, Qwen3: transformers names them alike):
# (checkpoint suffix, vla.cpp's name), as `gguf_blocks.DECODER_MAP`.
DECODER = [("input_layernorm.weight", "attn_norm.weight"), ("self_attn.q_proj.weight", "attn_q.weight"),
           ("self_attn.k_proj.weight", "attn_k.weight"), ("self_attn.v_proj.weight", "attn_v.weight"),
           ("self_attn.o_proj.weight", "attn_o.weight"),
           ("post_attention_layernorm.weight", "ffn_norm.weight"),
           ("mlp.gate_proj.weight", "ffn_gate.weight"), ("mlp.up_proj.weight", "ffn_up.weight"),
           ("mlp.down_proj.weight", "ffn_down.weight")]


def decoder_layers(sd, prefix):
    """The number of decoder layers under `prefix`."""
    n = 0
    while f"{prefix}.layers.{n}.self_attn.q_proj.weight" in sd:
        n += 1
    return n


def write_pi_kv(w, arch, ckpt, sd, cfg, norm_eps, adarms):
    """vla.cpp's `gguf_blocks.write_pi_kv` for a lerobot pi0 / pi0.5 checkpoint: its sizes from
    the tensors (head size and vision heads from arch.json, where vla.cpp's converter takes
    Gemma 2B / So400m constants) and config.json."""
    vlm, aex, vis = PI_VLM, PI_AEX, PI_VIS
    q0 = sd[f"{vlm}.layers.0.self_attn.q_proj.weight"]
    k0 = sd[f"{vlm}.layers.0.self_attn.k_proj.weight"]
    sizes = json.load(open(f"{ckpt}/arch.json"))
    head_dim, vit_heads = sizes["vlm"]["head_dim"], sizes["vision"]["heads"]
    conv = sd[f"{vis}.embeddings.patch_embedding.weight"]
    pos = sd[f"{vis}.embeddings.position_embedding.weight"]
    patch = conv.shape[2]
    grid = int(round(pos.shape[0] ** 0.5))
    ex_h = sd[f"{aex}.layers.0.mlp.gate_proj.weight"].shape[1]
    kv = lambda k: f"{arch}.{k}"
    w.add_string(f"{arch}.architecture", arch)
    w.add_string(kv("paligemma_variant"), cfg["paligemma_variant"])
    w.add_string(kv("action_expert_variant"), cfg["action_expert_variant"])
    for k, v in [("hidden", q0.shape[1]),
                 ("intermediate", sd[f"{vlm}.layers.0.mlp.gate_proj.weight"].shape[0]),
                 ("n_q_heads", q0.shape[0] // head_dim), ("n_kv_heads", k0.shape[0] // head_dim),
                 ("head_dim", head_dim), ("n_layers", decoder_layers(sd, vlm)),
                 ("vocab_size", sd[PI_HEAD].shape[0]), ("expert_h", ex_h),
                 ("expert_inter", sd[f"{aex}.layers.0.mlp.gate_proj.weight"].shape[0]),
                 ("chunk_size", cfg["chunk_size"]), ("num_steps", cfg["num_inference_steps"]),
                 ("n_action_steps", cfg["n_action_steps"]),
                 ("max_state_dim", cfg["max_state_dim"]), ("max_action_dim", cfg["max_action_dim"]),
                 ("real_state_dim", cfg["input_features"]["observation.state"]["shape"][0]),
                 ("real_action_dim", cfg["output_features"]["action"]["shape"][0]),
                 ("tokenizer_max_length", cfg["tokenizer_max_length"])]:
        w.add_uint32(kv(k), int(v))
    if adarms:
        w.add_bool(kv("use_adarms_expert"), True)
        w.add_uint32(kv("adarms_cond_dim"), int(ex_h))
        w.add_string(kv("norm_mode"), "quantiles")
    w.add_float64(kv("min_period"), float(cfg["min_period"]))
    w.add_float64(kv("max_period"), float(cfg["max_period"]))
    w.add_float64(kv("rope_theta"), 10000.0)
    w.add_float32(kv("rms_norm_eps"), 1e-6)
    w.add_float32(kv("norm_eps"), norm_eps)
    for k, v in [("vit_hidden", conv.shape[0]), ("vit_layers", siglip_layers(sd, vis)),
                 ("vit_heads", vit_heads), ("image_size", grid * patch), ("patch_size", patch),
                 ("n_img_tokens", pos.shape[0])]:
        w.add_uint32(kv(k), int(v))
    w.add_float32(kv("vit_ln_eps"), 1e-6)


def write_pi_backbone(add, sd):
    """What pi0 and pi0.5 files share: `token_embd.weight` from the LM head, the language
    model (`vlm.output_norm`, `vlm.blk.{i}.*`, Gemma's gains as the checkpoint holds them),
    the SigLIP tower and `mm.proj`."""
    add("token_embd.weight", sd[PI_HEAD])
    add("vlm.output_norm.weight", sd[f"{PI_VLM}.norm.weight"])
    for i in range(decoder_layers(sd, PI_VLM)):
        for s, d in DECODER:
            add(f"vlm.blk.{i}.{d}", sd[f"{PI_VLM}.layers.{i}.{s}"])
    write_siglip(add, sd, PI_VIS)
    add("mm.proj.weight", sd[f"{PI_MMP}.linear.weight"])
    add("mm.proj.bias", sd[f"{PI_MMP}.linear.bias"])


def finish(w):
    """Writes and closes the gguf-py writer `w`."""
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
