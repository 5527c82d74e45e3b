// Rotary position embeddings, one invocation per element of x (rank 3; layout
// [seq, heads, D] or [heads, seq, D]). Pair i of n_rot/2 at position pos turns by
// pos * freq[i], freq[i] = freq_scale * theta^(-2i/n_rot) computed on the host in f64 and
// passed as an f32 (hi, lo) pair. The angle is formed as an exact-ish two-product, reduced
// by multiples of pi/2 (Cody-Waite) and fed to minimax sin/cos polynomials, so accuracy
// does not depend on the driver's sin/cos for large arguments.
// Pairs: mode 0 (normal) (x[2i], x[2i+1]); mode 1 (neox) (x[i], x[i + n_rot/2]).
// Template: TWO, a second tensor x2 -> y2 at the same positions, head dim and settings with
// heads2 heads (a layer's keys beside its queries; src/backend/wgpu/fuse/): invocations
// past x's n elements take x2's.

struct Params {
    n: u32,        // elements
    d: u32,        // head dim
    n_rot: u32,
    heads: u32,
    seq: u32,
    head_seq: u32, // 1: [heads, seq, D]; 0: [seq, heads, D]
    neox: u32,
    n2: u32,       // TWO: x2's elements
    heads2: u32,   // ... and heads
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: ACT;
@group(0) @binding(2) var<storage, read> pos: ACT;
@group(0) @binding(3) var<storage, read> freq: array<vec2<f32>>;
@group(0) @binding(4) var<storage, read_write> y: ACT;
#if TWO
@group(0) @binding(5) var<storage, read> x2: ACT;
@group(0) @binding(6) var<storage, read_write> y2: ACT;
#endif

const WG: u32 = 256u;

// (sin, cos) of pos * (f.x + f.y).
fn sin_cos(ps: f32, f: vec2<f32>) -> vec2<f32> {
    let ah = ps * f.x;
    let al = fma(ps, f.x, -ah) + ps * f.y;
    let k = round(ah * 0.63661977236758134);
    var r = fma(-k, 1.5703125, ah);
    r = fma(-k, 4.837512969970703125e-4, r);
    r = fma(-k, 7.54978995489188216e-8, r);
    r += al;
    let z = r * r;
    let s = fma(r * z, fma(z, fma(z, -1.9515295891e-4, 8.3321608736e-3), -1.6666654611e-1), r);
    let c = fma(z * z, fma(z, fma(z, 2.443315711809948e-5, -1.388731625493765e-3), 4.166664568298827e-2),
                fma(-0.5, z, 1.0));
    switch (i32(k) & 3) {
        case 0: { return vec2(s, c); }
        case 1: { return vec2(c, -s); }
        case 2: { return vec2(-s, -c); }
        default: { return vec2(-c, s); }
    }
}

// Where element e of a tensor of `heads` heads reads its pair: the pair's first element
// e0 and second e0 + stride, which one e is, its frequency i and its position's index s;
// `rot` false past n_rot (copied).
struct Pair {
    e0: u32,
    stride: u32,
    i: u32,
    s: u32,
    first: bool,
    rot: bool,
}

fn pair_of(e: u32, heads: u32) -> Pair {
    var q: Pair;
    let c = e % p.d;
    q.rot = c < p.n_rot;
    let row = e / p.d;
    q.s = select(row / heads, row % p.seq, p.head_seq == 1u);
    let half = p.n_rot / 2u;
    if (p.neox == 1u) {
        q.first = c < half;
        q.i = select(c - half, c, q.first);
        q.stride = half;
    } else {
        q.first = (c & 1u) == 0u;
        q.i = c / 2u;
        q.stride = 1u;
    }
    q.e0 = select(e - q.stride, e, q.first);
    return q;
}

// Element `first` or not of the pair (x0, x1) turned at position index s by frequency i.
fn turned(q: Pair, x0: f32, x1: f32) -> f32 {
    let sc = sin_cos(LD(pos, q.s), freq[q.i]);
    return select(x0 * sc.x + x1 * sc.y, x0 * sc.y - x1 * sc.x, q.first);
}

@compute @workgroup_size(256)
fn rope(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let e = (wg.y * nwg.x + wg.x) * WG + lid;
    if (e < p.n) {
        let q = pair_of(e, p.heads);
        if (!q.rot) {
            ST(y, e, LD(x, e));
            return;
        }
        ST(y, e, turned(q, LD(x, q.e0), LD(x, q.e0 + q.stride)));
        return;
    }
#if TWO
    let e2 = e - p.n;
    if (e2 < p.n2) {
        let q = pair_of(e2, p.heads2);
        if (!q.rot) {
            ST(y2, e2, LD(x2, e2));
            return;
        }
        ST(y2, e2, turned(q, LD(x2, q.e0), LD(x2, q.e0 + q.stride)));
    }
#endif
}
