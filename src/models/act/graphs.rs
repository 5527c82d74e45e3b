//! ACT's predict as one graph: every camera through the ResNet (channels last, BatchNorm
//! folded into the convolutions), its feature map projected to tokens, the transformer
//! encoder over [latent, state, image tokens], the decoder's chunk queries cross-attending
//! to it, and the action head. Parts are public so the golden test checks each stage.

use super::{ActConfig, STAGES};
use crate::graph::{Graph, GraphBuilder, NodeId, Window};
use crate::layers::{self, Scope};
use crate::preprocess::FrameKey;
use crate::{Result, Tensor};

/// LayerNorm's epsilon (PyTorch's default, which lerobot's ACT keeps).
const LN_EPS: f32 = 1e-5;
/// The 2-D position table's epsilon and temperature (`ACTSinusoidalPositionEmbedding2d`).
const POS_EPS: f32 = 1e-6;
const POS_TEMPERATURE: f32 = 10_000.0;

/// The input name of camera `i`'s frame (`[h, w, 3]`, bytes or [0, 1] floats).
pub fn frame_input(i: usize) -> String {
    format!("image.{i}")
}

/// The input name of the normalised state (`[1, state_dim]`).
pub const STATE: &str = "state";

/// One camera's frame to the backbone's input `[h, w, 3]`: `(x * unit - mean) / (std +
/// 1e-8)` per channel as lerobot's normaliser, `unit` 1/255 for bytes, with the camera's
/// statistics (`pixels`: per channel, the scale and offset of that affine map).
pub fn frame_pixels(
    g: &mut GraphBuilder,
    i: usize,
    key: FrameKey,
    pixels: &[[f32; 2]; 3],
) -> Result<NodeId> {
    let unit = if key.bytes { 1.0 / 255.0 } else { 1.0 };
    let scale: Vec<f32> = pixels.iter().map(|p| p[0] * unit).collect();
    let offset: Vec<f32> = pixels.iter().map(|p| p[1]).collect();
    let id = format!("act.pixels.{i}.{}", if key.bytes { "u8" } else { "f32" });
    let input = frame_input(i);
    layers::scaled_frame(g, (&input, key), &id, &scale, Some(&offset))
}

/// The ResNet (torchvision's layout, BasicBlocks): `x [h, w, 3]` -> the last stage's map
/// `[fh, fw, C]`.
pub fn backbone(g: &mut GraphBuilder, cfg: &ActConfig, x: NodeId) -> Result<NodeId> {
    Ok(backbone_stages(g, cfg, x)?[STAGES])
}

/// The ResNet's maps, channels last: the stem's (after its max pool), then each stage's.
pub fn backbone_stages(
    g: &mut GraphBuilder,
    cfg: &ActConfig,
    x: NodeId,
) -> Result<[NodeId; STAGES + 1]> {
    let bb = Scope::new("bb");
    let x = layers::conv2d(
        g,
        x,
        &bb.pp("conv1"),
        cfg.widths[0],
        Window::square(7, 2, 3),
    )?;
    let x = g.relu(x);
    let mut x = g.max_pool(x, Window::square(3, 2, 1))?;
    let mut maps = [x; STAGES + 1];
    for stage in 0..STAGES {
        let width = cfg.widths[stage + 1];
        for block in 0..cfg.blocks[stage] {
            let p = bb.pp(format!("layer{}", stage + 1)).pp(block);
            let stride = if stage > 0 && block == 0 { 2 } else { 1 };
            let y = layers::conv2d(g, x, &p.pp("conv1"), width, Window::square(3, stride, 1))?;
            let y = g.relu(y);
            let y = layers::conv2d(g, y, &p.pp("conv2"), width, Window::square(3, 1, 1))?;
            let skip = match cfg.has_downsample(stage, block) {
                true => layers::conv2d(g, x, &p.pp("down"), width, Window::square(1, stride, 0))?,
                false => x,
            };
            let y = g.add(y, skip)?;
            x = g.relu(y);
        }
        maps[stage + 1] = x;
    }
    Ok(maps)
}

/// `ACTSinusoidalPositionEmbedding2d` over an `fh x fw` map, `[fh * fw, d]` rows in (h, w)
/// order: the row coordinate's `d / 2` channels, then the column's, each alternating sin
/// and cos of `(k + 1) / (n + 1e-6) * 2 pi` over `10000^(2 floor(j / 2) / (d / 2))`, in f32
/// as the reference computes it.
pub fn position_table(fh: usize, fw: usize, d: usize) -> Vec<f32> {
    let half = d / 2;
    let two_pi = 2.0 * std::f32::consts::PI;
    let coord = |k: usize, n: usize| (k + 1) as f32 / (n as f32 + POS_EPS) * two_pi;
    let inv: Vec<f32> = (0..half)
        .map(|j| POS_TEMPERATURE.powf((2 * (j / 2)) as f32 / half as f32))
        .collect();
    let wave = |v: f32, j: usize| match j % 2 {
        0 => (v / inv[j]).sin(),
        _ => (v / inv[j]).cos(),
    };
    let mut t = vec![0.0f32; fh * fw * d];
    for r in 0..fh {
        for c in 0..fw {
            let row = &mut t[(r * fw + c) * d..][..d];
            let (y, x) = (coord(r, fh), coord(c, fw));
            for j in 0..half {
                row[j] = wave(y, j);
                row[half + j] = wave(x, j);
            }
        }
    }
    t
}

/// One camera's tokens `[fh * fw, D]` (the feature map projected by `img_proj`) and their
/// position rows.
pub fn camera_tokens(g: &mut GraphBuilder, cfg: &ActConfig, map: NodeId) -> Result<[NodeId; 2]> {
    let s = g.shape(map).to_vec();
    let (fh, fw, c) = (s[0], s[1], s[2]);
    let d = cfg.dim_model;
    let rows = g.reshape(map, &[fh * fw, c])?;
    let tokens = layers::linear(g, rows, "img_proj", d, true)?;
    let pos = Tensor::from_f32(vec![fh * fw, d], position_table(fh, fw, d))?;
    let pos = g.constant(&format!("act.pos2d.{fh}x{fw}"), pos)?;
    Ok([tokens, pos])
}

/// The encoder's input tokens and position rows, `[N, D]` each: the latent token (the
/// projection of the zero latent: `latent_tok`), the state's (when the model takes one),
/// then every camera's.
pub fn encoder_inputs(
    g: &mut GraphBuilder,
    cfg: &ActConfig,
    cameras: &[[NodeId; 2]],
) -> Result<[NodeId; 2]> {
    let d = cfg.dim_model;
    let latent = g.weight("latent_tok", &[d])?;
    let mut tokens = vec![g.reshape(latent, &[1, d])?];
    if cfg.state_dim > 0 {
        let state = g.input(STATE, &[1, cfg.state_dim]);
        tokens.push(layers::linear(g, state, "state_proj", d, true)?);
    }
    let mut pos = vec![g.weight("pos_1d", &[cfg.n_1d(), d])?];
    for [t, p] in cameras {
        tokens.push(*t);
        pos.push(*p);
    }
    Ok([g.concat(&tokens, 0)?, g.concat(&pos, 0)?])
}

/// `nn.MultiheadAttention` with its projections split (`<p>_q`, `<p>_k`, `<p>_v`, `<p>_o`,
/// each with a bias), no mask.
fn attention(
    g: &mut GraphBuilder,
    cfg: &ActConfig,
    [q, k, v]: [NodeId; 3],
    p: &str,
) -> Result<NodeId> {
    let (d, h) = (cfg.dim_model, cfg.n_heads);
    let mut heads = |x: NodeId, part: &str| -> Result<NodeId> {
        let y = layers::linear(g, x, &format!("{p}_{part}"), d, true)?;
        layers::split_heads(g, y, h, d / h)
    };
    let (q, k, v) = (heads(q, "q")?, heads(k, "k")?, heads(v, "v")?);
    let o = layers::attend(g, q, &[(k, v)], None)?;
    layers::linear(g, o, &format!("{p}_o"), d, true)
}

/// `linear2(act(linear1(x)))`: `fc1`, ReLU or (erf) GELU, `fc2`.
fn ffn(g: &mut GraphBuilder, cfg: &ActConfig, x: NodeId, p: &Scope) -> Result<NodeId> {
    let h = layers::linear(g, x, &p.pp("fc1"), cfg.dim_feedforward, true)?;
    let h = match cfg.gelu {
        true => g.gelu_erf(h),
        false => g.relu(h),
    };
    layers::linear(g, h, &p.pp("fc2"), cfg.dim_model, true)
}

fn norm(g: &mut GraphBuilder, x: NodeId, p: &Scope, name: &str) -> Result<NodeId> {
    layers::layer_norm(g, x, &p.pp(name), LN_EPS)
}

/// A residual sublayer, post-norm (`norm(x + f(x))`) or pre-norm (`x + f(norm(x))`), as
/// lerobot's `ACTEncoderLayer` / `ACTDecoderLayer` order them.
fn sublayer(
    g: &mut GraphBuilder,
    cfg: &ActConfig,
    x: NodeId,
    p: &Scope,
    ln: &str,
    f: impl FnOnce(&mut GraphBuilder, NodeId) -> Result<NodeId>,
) -> Result<NodeId> {
    match cfg.pre_norm {
        true => {
            let h = norm(g, x, p, ln)?;
            let y = f(g, h)?;
            g.add(x, y)
        }
        false => {
            let y = f(g, x)?;
            let y = g.add(x, y)?;
            norm(g, y, p, ln)
        }
    }
}

/// Encoder layer `i`: self-attention (queries and keys read `x + pos`), then the FFN.
pub fn encoder_layer(
    g: &mut GraphBuilder,
    cfg: &ActConfig,
    x: NodeId,
    pos: NodeId,
    i: usize,
) -> Result<NodeId> {
    let p = Scope::new(format!("enc.blk.{i}"));
    let attn = p.pp("attn");
    let x = sublayer(g, cfg, x, &p, "ln1", |g, h| {
        let qk = g.add(h, pos)?;
        attention(g, cfg, [qk, qk, h], &attn)
    })?;
    sublayer(g, cfg, x, &p, "ln2", |g, h| ffn(g, cfg, h, &p))
}

/// The encoder: its layers, then `enc.norm` where pre-norm (lerobot's is the identity
/// otherwise).
pub fn encoder(g: &mut GraphBuilder, cfg: &ActConfig, x: NodeId, pos: NodeId) -> Result<NodeId> {
    let mut x = x;
    for i in 0..cfg.n_encoder_layers {
        x = encoder_layer(g, cfg, x, pos, i)?;
    }
    match cfg.pre_norm {
        true => layers::layer_norm(g, x, "enc.norm", LN_EPS),
        false => Ok(x),
    }
}

/// Decoder layer `i` over the chunk's rows `x`: self-attention, cross-attention to the
/// encoder's output `memory` (keys read `memory + memory_pos`), the FFN; queries read
/// `x + dec.pos` in both attentions.
pub fn decoder_layer(
    g: &mut GraphBuilder,
    cfg: &ActConfig,
    x: NodeId,
    [memory, memory_keys]: [NodeId; 2],
    i: usize,
) -> Result<NodeId> {
    let p = Scope::new(format!("dec.blk.{i}"));
    let dec_pos = g.weight("dec.pos", &[cfg.chunk_size, cfg.dim_model])?;
    let (attn, cross) = (p.pp("attn"), p.pp("cross"));
    let x = sublayer(g, cfg, x, &p, "ln1", |g, h| {
        let qk = g.add(h, dec_pos)?;
        attention(g, cfg, [qk, qk, h], &attn)
    })?;
    let x = sublayer(g, cfg, x, &p, "ln2", |g, h| {
        let q = g.add(h, dec_pos)?;
        attention(g, cfg, [q, memory_keys, memory], &cross)
    })?;
    sublayer(g, cfg, x, &p, "ln3", |g, h| ffn(g, cfg, h, &p))
}

/// The decoder from zero queries, its final `dec.norm`, then the action head: the chunk,
/// normalised, `[chunk, action_dim]`.
pub fn decoder(
    g: &mut GraphBuilder,
    cfg: &ActConfig,
    memory: NodeId,
    memory_pos: NodeId,
) -> Result<NodeId> {
    let (chunk, d) = (cfg.chunk_size, cfg.dim_model);
    let zeros = Tensor::from_f32(vec![chunk, d], vec![0.0; chunk * d])?;
    let mut x = g.constant("act.queries", zeros)?;
    let keys = g.add(memory, memory_pos)?;
    for i in 0..cfg.n_decoder_layers {
        x = decoder_layer(g, cfg, x, [memory, keys], i)?;
    }
    let x = layers::layer_norm(g, x, "dec.norm", LN_EPS)?;
    layers::linear(g, x, "action_head", cfg.action_dim, true)
}

/// The whole predict for frames `frames` (one a camera): the normalised chunk.
pub fn predict(
    g: GraphBuilder,
    cfg: &ActConfig,
    frames: &[FrameKey],
    pixels: &[[[f32; 2]; 3]],
) -> Result<Graph> {
    let mut g = g;
    let mut cameras = Vec::with_capacity(frames.len());
    for (i, (&key, px)) in frames.iter().zip(pixels).enumerate() {
        let x = frame_pixels(&mut g, i, key, px)?;
        let map = backbone(&mut g, cfg, x)?;
        cameras.push(camera_tokens(&mut g, cfg, map)?);
    }
    let [tokens, pos] = encoder_inputs(&mut g, cfg, &cameras)?;
    let memory = encoder(&mut g, cfg, tokens, pos)?;
    let chunk = decoder(&mut g, cfg, memory, pos)?;
    g.build(&[chunk])
}
