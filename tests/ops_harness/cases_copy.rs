//! Patch embedding, sliding windows (im2col, a conv as im2col + matmul, GroupNorm and Octo's
//! SmallStem stage, max pooling), data
//! movement (slice / permute / concat) and reshape views, including
//! graphs shaped to make the wgpu buffer planner reuse slots (a planner that lets a later
//! node overwrite a slot still needed by a reshape view, or an input, shows up here).

use super::{Cases, NMSE_MATMUL};
use vla::backend::{Backend, CpuBackend};
use vla::gguf::GgmlType;
use vla::graph::{GraphBuilder, Window};
use vla::Tensor;

/// Copies are exact.
const EXACT: f64 = 0.0;

pub fn add(c: &mut Cases) {
    patch_embed(c);
    windows(c);
    slices(c);
    permutes(c);
    concats(c);
    views(c);
}

fn patch_embed(c: &mut Cases) {
    // (C, H, W, O, P, Q, weight dtype)
    for (ch, h, w, o, p, q, ty) in [
        (3, 32, 32, 8, 16, 16, GgmlType::F32),    // SigLIP-like, small
        (3, 30, 30, 7, 14, 14, GgmlType::F32),    // remainder dropped, odd O
        (3, 32, 32, 7, 16, 16, GgmlType::F16),    // f16 weight converted at upload
        (2, 17, 23, 9, 4, 5, GgmlType::F32),      // non-square kernel, ragged both ways
        (1, 5, 5, 1, 5, 5, GgmlType::F32),        // one patch, one channel
        (3, 224, 224, 64, 14, 14, GgmlType::F32), // realistic image size
    ] {
        let img = c.tensor(&[ch, h, w]);
        let (wt, b) = (c.weight(&[o, ch, p, q], ty), c.tensor(&[o]));
        let name = format!("patch_embed {ty} [{ch}, {h}, {w}] o{o} k{p}x{q}");
        c.add(
            name,
            vec![("w", wt), ("b", b)],
            vec![("img", img)],
            NMSE_MATMUL,
            move |g| {
                let x = g.input("img", &[ch, h, w]);
                let (wt, b) = (g.stored_weight("w")?, g.stored_weight("b")?);
                g.patch_embed(x, wt, b)
            },
        );
    }
}

fn windows(c: &mut Cases) {
    let win = |k: (usize, usize), s: (usize, usize), p: (usize, usize), d: (usize, usize)| Window {
        kernel: k,
        stride: s,
        padding: p,
        dilation: d,
    };
    // im2col: ([H, W, C], window)
    for (shape, w) in [
        ([35, 45, 3], Window::square(7, 2, 3)), // a ResNet stem, odd sizes
        ([9, 12, 16], Window::square(3, 1, 1)), // a basic block's conv
        ([9, 12, 16], Window::square(3, 2, 1)), // its strided first conv
        ([5, 6, 24], Window::square(1, 2, 0)),  // a downsample
        ([11, 7, 5], win((3, 2), (2, 3), (2, 1), (2, 3))), // non-square, dilated
        ([1, 1, 1], Window::square(1, 1, 0)),
        ([3, 3, 600], Window::square(3, 1, 1)), // output past one grid dimension
    ] {
        let x = c.tensor(&shape);
        c.add(
            format!("im2col {shape:?} {w:?}"),
            vec![],
            vec![("x", x)],
            EXACT,
            move |g| {
                let x = g.input("x", &shape);
                g.im2col(x, w)
            },
        );
    }
    // a conv: im2col then the product by a conv weight [O, C, KH, KW] read as a matrix
    for (ty, shape, o, k) in [
        (GgmlType::F32, [13, 10, 6], 9, 3),
        (GgmlType::BF16, [13, 10, 6], 9, 3),
        (GgmlType::F16, [8, 8, 4], 5, 1),
        // many rows by a small f32 kernel: a ResNet block's shape
        (GgmlType::F32, [61, 43, 8], 16, 3),
    ] {
        let x = c.tensor(&shape);
        let cols = shape[2] * k * k;
        let (wt, b) = (c.weight(&[o, cols], ty), c.tensor(&[o]));
        c.add(
            format!("conv {ty} {shape:?} o{o} k{k}"),
            vec![("w", wt), ("b", b)],
            vec![("x", x)],
            NMSE_MATMUL,
            move |g| {
                let x = g.input("x", &shape);
                let cols = g.im2col(x, Window::square(k, 2, k / 2))?;
                let (wt, b) = (g.stored_weight("w")?, g.stored_weight("b")?);
                g.matmul_add(cols, wt, b)
            },
        );
    }
    // GroupNorm over a channels-last map [P, C] (Octo's SmallStem: the groups brought
    // together, a LayerNorm over each, and back), odd sizes, one and several channels a group
    for (p, ch, groups) in [(25, 32, 32), (143, 64, 32), (7, 12, 4), (1600, 32, 32)] {
        let x = c.tensor(&[p, ch]);
        let (w, b) = (c.tensor(&[ch]), c.tensor(&[ch]));
        c.add(
            format!("group_norm [{p}, {ch}] {groups} groups"),
            vec![("gn.weight", w), ("gn.bias", b)],
            vec![("x", x)],
            super::NMSE_DEFAULT,
            move |g| {
                let x = g.input("x", &[p, ch]);
                vla::layers::group_norm(g, x, "gn", groups, 1e-6)
            },
        );
    }
    // a SmallStem stage: a 3x3 stride-2 conv, GroupNorm, ReLU, on an odd-sized map
    for (shape, o) in [([21, 17, 6], 32), ([10, 10, 32], 64)] {
        let x = c.tensor(&shape);
        let cols = shape[2] * 9;
        let (wt, b) = (c.weight(&[o, cols], GgmlType::F32), c.tensor(&[o]));
        let (gw, gb) = (c.tensor(&[o]), c.tensor(&[o]));
        c.add(
            format!("smallstem stage {shape:?} o{o}"),
            vec![
                ("conv.weight", wt),
                ("conv.bias", b),
                ("gn.weight", gw),
                ("gn.bias", gb),
            ],
            vec![("x", x)],
            NMSE_MATMUL,
            move |g| {
                let x = g.input("x", &shape);
                let y = vla::layers::conv2d(g, x, "conv", o, Window::square(3, 2, 1))?;
                let (h, w) = (g.shape(y)[0], g.shape(y)[1]);
                let y = g.reshape(y, &[h * w, o])?;
                let y = vla::layers::group_norm(g, y, "gn", 32, 1e-6)?;
                Ok(g.relu(y))
            },
        );
    }
    // max pooling: ([H, W, C], window)
    for (shape, w) in [
        ([35, 45, 8], Window::square(3, 2, 1)), // ResNet's, odd sizes
        ([6, 6, 3], Window::square(2, 2, 0)),
        ([7, 5, 2], win((3, 2), (1, 2), (1, 1), (1, 1))),
        ([1, 1, 1], Window::square(1, 1, 0)),
        ([40, 40, 700], Window::square(3, 2, 1)), // past one grid dimension
    ] {
        let x = c.tensor(&shape);
        c.add(
            format!("max_pool {shape:?} {w:?}"),
            vec![],
            vec![("x", x)],
            EXACT,
            move |g| {
                let x = g.input("x", &shape);
                g.max_pool(x, w)
            },
        );
    }
}

fn slices(c: &mut Cases) {
    for (shape, axis, start, len) in [
        (vec![7, 13], 0, 2, 3),
        (vec![7, 13], 1, 5, 8),
        (vec![2, 5, 4, 3], 2, 1, 2),
        (vec![2, 5, 4, 3], 3, 2, 1),
        (vec![3, 1000], 1, 0, 1000), // the whole axis: one contiguous run
        (vec![2, 3, 2, 3, 2, 3], 4, 1, 1),
        (vec![4, 6], 1, 3, 0), // empty
    ] {
        let x = c.tensor(&shape);
        c.add(
            format!("slice {shape:?} axis {axis} [{start}, +{len})"),
            vec![],
            vec![("x", x)],
            EXACT,
            move |g| {
                let x = g.input("x", &shape);
                g.slice(x, axis, start, len)
            },
        );
    }
}

fn permutes(c: &mut Cases) {
    for (shape, perm) in [
        (vec![2, 3], vec![1, 0]),
        (vec![33, 65], vec![1, 0]),
        (vec![2, 3, 4], vec![2, 0, 1]),
        (vec![2, 3, 4], vec![0, 1, 2]),        // identity
        (vec![16, 4, 8, 5], vec![1, 0, 2, 3]), // [S, H, D] heads to the front, batched
        (vec![3, 4, 5, 6], vec![0, 2, 1, 3]),
        (vec![4, 1, 7, 1], vec![3, 2, 0, 1]), // size-1 dims
        (vec![2, 3, 4, 5, 6], vec![4, 3, 2, 1, 0]),
        (vec![2, 3, 2, 3, 2, 3], vec![5, 3, 1, 4, 2, 0]),
        (vec![2; 8], vec![7, 6, 5, 4, 3, 2, 1, 0]), // 8 non-mergeable dims: the kernel's max
    ] {
        let x = c.tensor(&shape);
        c.add(
            format!("permute {shape:?} {perm:?}"),
            vec![],
            vec![("x", x)],
            EXACT,
            move |g| {
                let x = g.input("x", &shape);
                g.permute(x, &perm)
            },
        );
    }
}

fn concats(c: &mut Cases) {
    for (shapes, axis) in [
        (vec![vec![3, 4], vec![5, 4]], 0),
        (vec![vec![3, 4], vec![3, 1], vec![3, 7]], 1),
        (
            vec![vec![2, 3, 4], vec![2, 5, 4], vec![2, 1, 4], vec![2, 2, 4]],
            1,
        ),
        (vec![vec![2, 3, 4], vec![2, 3, 3]], 2),
        (vec![vec![6, 2], vec![0, 2], vec![1, 2]], 0), // an empty input
        (vec![vec![1, 2, 3, 2, 2], vec![1, 2, 3, 1, 2]], 3),
        (vec![vec![9]], 0),
    ] {
        let inputs: Vec<(String, Tensor<'static>)> = shapes
            .iter()
            .enumerate()
            .map(|(k, s)| (format!("x{k}"), c.tensor(s)))
            .collect();
        let name = format!("concat {shapes:?} axis {axis}");
        let names: Vec<String> = inputs.iter().map(|(n, _)| n.clone()).collect();
        let ins = inputs
            .iter()
            .map(|(n, t)| (n.as_str(), t.clone()))
            .collect();
        c.add(name, vec![], ins, EXACT, move |g| {
            let xs: Vec<_> = names
                .iter()
                .zip(&shapes)
                .map(|(n, s)| g.input(n.as_str(), s))
                .collect();
            g.concat(&xs, axis)
        });
    }
    // the same node twice (its last use is this node, twice over)
    let x = c.tensor(&[3, 5]);
    c.add(
        "concat [x, x] axis 1".into(),
        vec![],
        vec![("x", x)],
        EXACT,
        |g| {
            let x = g.input("x", &[3, 5]);
            let y = g.scale(x, 2.0);
            let z = g.concat(&[y, y], 1)?;
            let s = g.scale(z, 0.5); // a slot freed twice would be handed out twice
            let t = g.scale(s, 3.0);
            g.add(t, z)
        },
    );
}

/// Reshape views and slot reuse around them.
fn views(c: &mut Cases) {
    // x -> reshape -> permute -> add(x2)
    let (x, x2) = (c.tensor(&[6, 20]), c.tensor(&[4, 6, 5]));
    c.add(
        "reshape -> permute -> add".into(),
        vec![],
        vec![("x", x), ("x2", x2)],
        EXACT,
        |g| {
            let x = g.input("x", &[6, 20]);
            let r = g.reshape(x, &[6, 4, 5])?;
            let p = g.permute(r, &[1, 0, 2])?;
            let x2 = g.input("x2", &[4, 6, 5]);
            g.add(p, x2)
        },
    );

    // a view that outlives many reused slots: r is read last, its base x dies early
    let x = c.tensor(&[8, 16]);
    c.add(
        "reshape view read after its base dies".into(),
        vec![],
        vec![("x", x)],
        EXACT,
        |g| {
            let x = g.input("x", &[8, 16]);
            let r = g.reshape(x, &[16, 8])?;
            let mut h = g.scale(x, 1.5); // x's last direct use
            for k in 0..6 {
                h = g.scale(h, 1.0 + k as f32 * 0.25); // same-size nodes: slot reuse
            }
            let h = g.reshape(h, &[16, 8])?;
            let p = g.permute(r, &[1, 0])?; // reads x's slot through the view
            let p = g.reshape(p, &[16, 8])?;
            g.add(p, h)
        },
    );

    // reshape of an input that is used elsewhere too, and a reshape of a reshape
    let x = c.tensor(&[2, 3, 4]);
    c.add(
        "reshape of a shared input, chained".into(),
        vec![],
        vec![("x", x)],
        EXACT,
        |g| {
            let x = g.input("x", &[2, 3, 4]);
            let r = g.reshape(x, &[6, 4])?;
            let r2 = g.reshape(r, &[24])?;
            let s = g.slice(r2, 0, 4, 12)?;
            let s = g.reshape(s, &[3, 4])?;
            let t = g.slice(x, 0, 1, 1)?; // x read again after its views
            let t = g.reshape(t, &[3, 4])?;
            let u = g.mul(s, t)?;
            let u = g.reshape(u, &[1, 3, 4])?;
            g.concat(&[x, u], 0)
        },
    );

    // mul(x, x): both inputs are one node whose last use is here, while a view of it lives
    let x = c.tensor(&[5, 7]);
    c.add(
        "mul(x, x) with a live view of x".into(),
        vec![],
        vec![("x", x)],
        EXACT,
        |g| {
            let x = g.input("x", &[5, 7]);
            let y = g.scale(x, 2.0);
            let r = g.reshape(y, &[7, 5])?;
            let sq = g.mul(y, y)?;
            let a = g.scale(sq, 0.5); // would land in y's slot if it were freed
            let b = g.scale(a, 0.5);
            let b = g.reshape(b, &[7, 5])?;
            g.add(r, b)
        },
    );

    // an input declared after a slot of its size was freed: inputs are written before any
    // dispatch runs, so sharing a slot with an earlier node would clobber the input
    let (a, b) = (c.tensor(&[64]), c.tensor(&[64]));
    c.add(
        "late input vs freed slot".into(),
        vec![],
        vec![("a", a), ("b", b)],
        EXACT,
        |g| {
            let a = g.input("a", &[64]);
            let t = g.scale(a, 2.0);
            let u = g.scale(t, 3.0); // t's slot is free after this
            let b = g.input("b", &[64]);
            g.add(u, b)
        },
    );

    // reshape of an f32 weight (a view of an uploaded buffer, not of a slot)
    let (w, x) = (c.weight(&[6, 4], GgmlType::F32), c.tensor(&[4, 6]));
    c.add(
        "reshape of an f32 weight".into(),
        vec![("w", w)],
        vec![("x", x)],
        EXACT,
        |g| {
            let w = g.stored_weight("w")?;
            let r = g.reshape(w, &[4, 6])?;
            let x = g.input("x", &[4, 6]);
            g.add(r, x)
        },
    );

    // (the builder refuses reshapes of non-f32 weights)
    let w = c.weight(&[3, 5], GgmlType::F32);
    c.add(
        "reshape of an f32 weight as the output".into(),
        vec![("w", w)],
        vec![],
        EXACT,
        |g| {
            let w = g.stored_weight("w")?;
            g.reshape(w, &[5, 3])
        },
    );

    // the graph output is a view
    let x = c.tensor(&[3, 8]);
    c.add(
        "reshape as the output".into(),
        vec![],
        vec![("x", x)],
        EXACT,
        |g| {
            let x = g.input("x", &[3, 8]);
            let p = g.permute(x, &[1, 0])?;
            g.reshape(p, &[2, 4, 3])
        },
    );
}

/// Graphs with several outputs, views among them, against the CPU reference.
#[test]
fn views_as_outputs() {
    let backends = super::gpu_backends();
    let mut rng = super::Rng(0x9E3779B97F4A7C15);
    let x = Tensor::from_f32(vec![4, 6], rng.vec(24)).unwrap();
    let weights = std::collections::HashMap::new();
    let mut g = GraphBuilder::new(&weights);
    let xi = g.input("x", &[4, 6]);
    let y = g.scale(xi, 2.0);
    let ry = g.reshape(y, &[6, 4]).unwrap(); // a view of an output, also an output
    let p = g.permute(ry, &[1, 0]).unwrap();
    let z = g.add(p, xi).unwrap();
    let rz = g.reshape(z, &[24]).unwrap();
    let dead = g.reshape(z, &[2, 12]).unwrap(); // never read
    let _ = dead;
    let w = g.scale(rz, -1.0);
    let rx = g.reshape(xi, &[24]).unwrap(); // a view of an input as an output
    let graph = g.build(&[y, ry, rz, w, rx]).unwrap();
    let want = CpuBackend
        .compile(&graph, &weights)
        .unwrap()
        .run(&[("x", &x)])
        .unwrap();
    for b in &backends {
        let mut exe = b.compile(&graph, &weights).unwrap();
        for _ in 0..2 {
            let got = exe.run(&[("x", &x)]).unwrap();
            for (k, (g, w)) in got.iter().zip(&want).enumerate() {
                assert_eq!(g.shape(), w.shape(), "output {k}");
                assert_eq!(
                    g.to_vec_f32().unwrap(),
                    w.to_vec_f32().unwrap(),
                    "output {k}"
                );
            }
        }
    }
}

/// A reshape nobody reads must not pin its base's slot for the rest of the graph.
#[test]
fn dead_view_releases_its_slot() {
    let Some(b) = super::gpu_backends().into_iter().next() else {
        return;
    };
    let weights = std::collections::HashMap::new();
    let mut g = GraphBuilder::new(&weights);
    let x = g.input("x", &[1000]);
    let _dead = g.reshape(x, &[10, 100]).unwrap();
    let y = g.scale(x, 2.0);
    let z = g.scale(y, 2.0);
    let w = g.scale(z, 2.0);
    let graph = g.build(&[w]).unwrap();
    let exe = b.compile(&graph, &weights).unwrap();
    // x, y, z, w in a chain need two slots of 4000 bytes
    assert_eq!(exe.stats().peak_activation_bytes, 8000);
}

/// Too many non-mergeable dims is a clear error, not a wrong answer.
#[test]
fn permute_deeper_than_the_kernel_is_an_error() {
    let Some(b) = super::gpu_backends().into_iter().next() else {
        return;
    };
    let weights = std::collections::HashMap::new();
    let mut g = GraphBuilder::new(&weights);
    let x = g.input("x", &[2; 9]);
    let p = g.permute(x, &[8, 7, 6, 5, 4, 3, 2, 1, 0]).unwrap();
    let graph = g.build(&[p]).unwrap();
    let e = b
        .compile(&graph, &weights)
        .err()
        .expect("a 9-D strided copy is refused");
    let msg = e.to_string();
    assert!(msg.contains("permute") && msg.contains("9-D"), "{msg}");
}

/// A weight the kernels read in its stored dtype cannot be a computed node or a view.
#[test]
fn matmul_of_a_reshaped_weight_is_an_error() {
    let Some(b) = super::gpu_backends().into_iter().next() else {
        return;
    };
    let mut weights = std::collections::HashMap::new();
    weights.insert(
        "w".to_owned(),
        Tensor::from_f32(vec![2, 12], vec![0.5; 24]).unwrap(),
    );
    let mut g = GraphBuilder::new(&weights);
    let x = g.input("x", &[3, 6]);
    let w = g.stored_weight("w").unwrap();
    let r = g.reshape(w, &[4, 6]).unwrap();
    let y = g.matmul(x, r).unwrap();
    let graph = g.build(&[y]).unwrap();
    let e = b.compile(&graph, &weights).err().expect("refused");
    assert!(e.to_string().contains("reshaped weight"), "{e}");
}
