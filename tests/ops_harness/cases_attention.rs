//! Row reductions (softmax, RMSNorm, LayerNorm), RoPE, batched matmul and attention. The
//! attention cases also run on every GPU backend with each attention kernel of both kernel
//! sets forced (`attention_kernels_forced`), since the defaults pick by set and Sk.

use super::{check, gpu_backends, Cases, Rng, NMSE_DEFAULT, NMSE_MATMUL};
use vla::backend::wgpu::{KernelSet, WgpuOptions};
use vla::gguf::GgmlType;
use vla::graph::AttentionMask;
use vla::ops::{RopeConfig, RopeLayout, RopeMode};

/// ggml's test-backend-ops bound for softmax.
const NMSE_SOFTMAX: f64 = 1e-6;
const ROW_LENGTHS: [usize; 6] = [1, 7, 64, 960, 2048, 4097];

pub fn add(c: &mut Cases) {
    row_cases(c);
    rope_cases(c);
    bmm_cases(c);
    attention_cases(c);
    gated_residual_cases(c);
}

/// pi0.5's gated residual `x + y * m[2W..3W]`, the gate read in place from a [3W]
/// modulation vector, over the row lengths (odd ones included).
fn gated_residual_cases(c: &mut Cases) {
    for &d in &ROW_LENGTHS {
        let shape = vec![3, d];
        let (x, y, m) = (c.tensor(&shape), c.tensor(&shape), c.tensor(&[3 * d]));
        c.add(
            format!("add_gated {shape:?} part 2"),
            vec![],
            vec![("x", x), ("y", y), ("m", m)],
            NMSE_DEFAULT,
            move |g| {
                let (x, y) = (g.input("x", &[3, d]), g.input("y", &[3, d]));
                let m = g.input("m", &[3 * d]);
                g.add_gated(x, y, m, 2)
            },
        );
    }
}

fn row_cases(c: &mut Cases) {
    let ninf = f32::NEG_INFINITY;
    for &d in &ROW_LENGTHS {
        let rows = if d >= 2048 { 3 } else { 5 };
        let shape = vec![rows, d];
        // softmax: large logits, some -inf entries, and (rows > 1) a fully masked row
        let mut t = c.tensor(&shape);
        let v = t.as_f32_mut().unwrap();
        v.iter_mut().for_each(|x| *x *= 20.0);
        for (k, x) in v.iter_mut().enumerate() {
            if k % 5 == 3 {
                *x = ninf;
            }
        }
        if rows > 1 {
            v[d..2 * d].fill(ninf);
        }
        c.add(
            format!("softmax {shape:?} with -inf"),
            vec![],
            vec![("x", t)],
            NMSE_SOFTMAX,
            {
                let shape = shape.clone();
                move |g| {
                    let x = g.input("x", &shape);
                    Ok(g.softmax(x))
                }
            },
        );
        let t = c.tensor(&[2, 3, d]);
        c.add(
            format!("softmax [2, 3, {d}]"),
            vec![],
            vec![("x", t)],
            NMSE_SOFTMAX,
            move |g| {
                let x = g.input("x", &[2, 3, d]);
                Ok(g.softmax(x))
            },
        );

        // pi0.5's adaptive norm: scale and shift read from a [3d] modulation vector
        let (x, m) = (c.tensor(&shape), c.tensor(&[3 * d]));
        c.add(
            format!("ada_rms_norm {shape:?}"),
            vec![],
            vec![("x", x), ("m", m)],
            NMSE_DEFAULT,
            {
                let shape = shape.clone();
                move |g| {
                    let x = g.input("x", &shape);
                    let m = g.input("m", &[3 * d]);
                    g.ada_rms_norm(x, m, 1e-6)
                }
            },
        );
        for offset in [0.0, 1.0] {
            let (x, w) = (c.tensor(&shape), c.weight(&[d], GgmlType::F32));
            c.add(
                format!("rms_norm {shape:?} offset {offset}"),
                vec![("w", w)],
                vec![("x", x)],
                NMSE_DEFAULT,
                {
                    let shape = shape.clone();
                    move |g| {
                        let x = g.input("x", &shape);
                        let w = g.stored_weight("w")?;
                        g.rms_norm(x, w, 1e-6, offset)
                    }
                },
            );
        }

        let mut x = c.tensor(&shape);
        x.as_f32_mut()
            .unwrap()
            .iter_mut()
            .for_each(|v| *v = *v * 4.0 + 3.0);
        let (w, b) = (c.weight(&[d], GgmlType::F32), c.weight(&[d], GgmlType::F32));
        c.add(
            format!("layer_norm {shape:?}"),
            vec![("w", w), ("b", b)],
            vec![("x", x)],
            NMSE_DEFAULT,
            {
                let shape = shape.clone();
                move |g| {
                    let x = g.input("x", &shape);
                    let (w, b) = (g.stored_weight("w")?, g.stored_weight("b")?);
                    g.layer_norm(x, w, b, 1e-6)
                }
            },
        );
    }
}

fn rope_cases(c: &mut Cases) {
    // (seq, heads, head_dim, n_rot, theta, freq_scale, max position)
    let shapes = [
        (1, 1, 2, None, 10000.0, 1.0, 5.0),
        (7, 3, 64, None, 10000.0, 1.0, 1000.0),
        (13, 5, 64, Some(32), 100000.0, 1.0, 1000.0),
        (50, 15, 64, None, 100000.0, 1.0, 1100.0),
        (9, 4, 72, Some(48), 10000.0, 0.25, 4000.0),
        (5, 2, 80, None, 10000.0, 1.0, 1000.0),
        (3, 2, 6, Some(0), 10000.0, 1.0, 10.0),
    ];
    for (seq, heads, d, n_rot, theta, freq_scale, max_pos) in shapes {
        for mode in [RopeMode::Normal, RopeMode::Neox] {
            for layout in [RopeLayout::SeqHeadDim, RopeLayout::HeadSeqDim] {
                let shape = match layout {
                    RopeLayout::SeqHeadDim => [seq, heads, d],
                    RopeLayout::HeadSeqDim => [heads, seq, d],
                };
                let x = c.tensor(&shape);
                // integer positions up to max_pos, one fractional
                let mut pos: Vec<f32> = (0..seq)
                    .map(|_| ((c.rng.f32() + 1.0) * 0.5 * max_pos).floor())
                    .collect();
                pos[0] = 0.0;
                if seq > 2 {
                    pos[seq - 1] = max_pos - 0.5;
                }
                let pos = vla::Tensor::from_f32(vec![seq], pos).unwrap();
                let cfg = RopeConfig {
                    mode,
                    theta,
                    n_rot,
                    freq_scale,
                    layout,
                };
                let name = format!("rope {mode:?} {layout:?} {shape:?} n_rot {n_rot:?} fs {freq_scale} pos<{max_pos}");
                c.add(
                    name,
                    vec![],
                    vec![("x", x), ("pos", pos)],
                    NMSE_DEFAULT,
                    move |g| {
                        let x = g.input("x", &shape);
                        let p = g.input("pos", &[seq]);
                        g.rope(x, p, cfg)
                    },
                );
            }
        }
    }
}

fn bmm_cases(c: &mut Cases) {
    for (b, m, n, k) in [
        (1, 1, 1, 1),
        (3, 7, 13, 17),
        (2, 1, 65, 33),
        (4, 33, 5, 300),
        (15, 50, 64, 350),
        (2, 3, 4, 0),
    ] {
        for trans_b in [true, false] {
            let bs = if trans_b { [b, n, k] } else { [b, k, n] };
            let (x, y) = (c.tensor(&[b, m, k]), c.tensor(&bs));
            c.add(
                format!("bmm b{b} m{m} n{n} k{k} trans_b {trans_b}"),
                vec![],
                vec![("a", x), ("b", y)],
                NMSE_MATMUL,
                move |g| {
                    let (x, y) = (g.input("a", &[b, m, k]), g.input("b", &bs));
                    g.bmm(x, y, trans_b)
                },
            );
        }
    }
}

/// (Hq, Hkv, Sq, Sk, D, Dv)
const ATTENTION_SHAPES: [(usize, usize, usize, usize, usize, usize); 12] = [
    (1, 1, 1, 1, 1, 1),
    (15, 5, 50, 350, 64, 64), // SmolVLA expert over prefix + chunk
    (15, 5, 1, 350, 64, 64),
    (4, 2, 5, 37, 64, 48),
    (3, 1, 9, 129, 16, 16),
    (16, 16, 64, 64, 72, 72), // SigLIP-So400m head dim
    (4, 4, 17, 33, 80, 80),
    (2, 1, 7, 5, 8, 8), // Sq > Sk: causal rows 0..1 see nothing
    (2, 1, 3, 2000, 64, 64),
    (1, 1, 2, 5000, 32, 16), // over the auto threshold (flash by default)
    (8, 1, 1, 257, 256, 256),
    (8, 1, 13, 40, 256, 256), // pi0's expert: 8 heads on one kv head, blocks across positions
];

/// Shapes whose keys are also given in two parts (a cache of `Sk - new` rows, then `new`).
const TWO_PART_SHAPES: [(usize, usize); 5] = [(1, 50), (3, 4), (7, 3), (11, 13), (9, 1000)];

fn attention_cases(c: &mut Cases) {
    // (shape index, rows of the second key part; 0 = one part)
    let one = (0..ATTENTION_SHAPES.len()).map(|i| (i, 0));
    for (i, new) in one.chain(TWO_PART_SHAPES) {
        let (hq, hkv, sq, sk, d, dv) = ATTENTION_SHAPES[i];
        for mask in [
            AttentionMask::None,
            AttentionMask::Causal,
            AttentionMask::Allowed,
        ] {
            let (q, k, v) = (
                c.tensor(&[sq, hq, d]),
                c.tensor(&[sk - new, hkv, d]),
                c.tensor(&[sk - new, hkv, dv]),
            );
            let mut inputs = vec![("q", q), ("k", k), ("v", v)];
            if new > 0 {
                inputs.push(("k1", c.tensor(&[new, hkv, d])));
                inputs.push(("v1", c.tensor(&[new, hkv, dv])));
            }
            if mask == AttentionMask::Allowed {
                // a prefix-LM block mask, random holes, and a fully masked last row
                let prefix = sk.saturating_sub(sq).max(1);
                let mut m = vec![0.0f32; sq * sk];
                for i in 0..sq {
                    for j in 0..sk {
                        let allowed = j < prefix || j <= i + prefix || c.rng.f32() > 0.8;
                        m[i * sk + j] = if allowed && c.rng.f32() > -0.9 {
                            1.0
                        } else {
                            0.0
                        };
                    }
                }
                if sq > 1 {
                    m[(sq - 1) * sk..].fill(0.0);
                }
                inputs.push(("mask", vla::Tensor::from_f32(vec![sq, sk], m).unwrap()));
            }
            let scale = if d == 72 { Some(0.125) } else { None };
            let parts = if new > 0 {
                format!(" ({new} new)")
            } else {
                String::new()
            };
            let name =
                format!("attention {mask:?} hq{hq} hkv{hkv} sq{sq} sk{sk}{parts} d{d} dv{dv}");
            c.add(name, vec![], inputs, NMSE_MATMUL, move |g| {
                let q = g.input("q", &[sq, hq, d]);
                let mut kv = vec![(
                    g.input("k", &[sk - new, hkv, d]),
                    g.input("v", &[sk - new, hkv, dv]),
                )];
                if new > 0 {
                    kv.push((
                        g.input("k1", &[new, hkv, d]),
                        g.input("v1", &[new, hkv, dv]),
                    ));
                }
                let m = (mask == AttentionMask::Allowed).then(|| g.input("mask", &[sq, sk]));
                g.attention(q, &kv, mask, m, scale)
            })
            .kernel_sets = true;
        }
    }
}

/// The attention cases on each GPU backend with each kernel set and the flash kernel
/// forced on, then off: portable flash / score-row kernels, the GPU set's fused tiled
/// kernel / GEMM composition.
#[test]
fn attention_kernels_forced() {
    let mut c = Cases {
        rng: Rng(0x9E3779B97F4A7C15),
        list: Vec::new(),
    };
    attention_cases(&mut c);
    let mut failures = Vec::new();
    for base in gpu_backends().into_iter().filter(|b| b.is_default()) {
        for (set, flash) in [KernelSet::Portable, KernelSet::Gpu]
            .into_iter()
            .flat_map(|s| [(s, true), (s, false)])
        {
            let b = base.backend.reconfigured(WgpuOptions {
                flash_attn: Some(flash),
                kernels: Some(set),
                ..base.backend.options()
            });
            let set = set.name();
            for case in &c.list {
                let result = check(&b, case);
                let verdict = match &result {
                    Ok(e) => format!("nmse {e:9.2e} ok"),
                    Err(why) => format!("FAIL {why}"),
                };
                println!("{:<56} {set:<8} flash {flash:<5} {verdict}", case.name);
                if let Err(why) = result {
                    failures.push(format!("{} {set} flash {flash}: {why}", case.name));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "attention failures:\n{}",
        failures.join("\n")
    );
}
