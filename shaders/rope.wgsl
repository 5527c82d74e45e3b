// Rotary position embeddings, one invocation per element of x (rank 3; layout
// [seq, heads, D] or [heads, seq, D]). Pair i of n_rot/2 at position pos turns by
// pos * freq[i], freq[i] = freq_scale * theta^(-2i/n_rot) computed on the host in f64 and
// passed as an f32 (hi, lo) pair. The angle is formed as an exact-ish two-product, reduced
// by multiples of pi/2 (Cody-Waite) and fed to minimax sin/cos polynomials, so accuracy
// does not depend on the driver's sin/cos for large arguments.
// Pairs: mode 0 (normal) (x[2i], x[2i+1]); mode 1 (neox) (x[i], x[i + n_rot/2]).

struct Params {
    n: u32,        // elements
    d: u32,        // head dim
    n_rot: u32,
    heads: u32,
    seq: u32,
    head_seq: u32, // 1: [heads, seq, D]; 0: [seq, heads, D]
    neox: u32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: ACT;
@group(0) @binding(2) var<storage, read> pos: ACT;
@group(0) @binding(3) var<storage, read> freq: array<vec2<f32>>;
@group(0) @binding(4) var<storage, read_write> y: ACT;

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

@compute @workgroup_size(256)
fn rope(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let e = (wg.y * nwg.x + wg.x) * WG + lid;
    if (e >= p.n) { return; }
    let c = e % p.d;
    if (c >= p.n_rot) {
        ST(y, e, LD(x, e));
        return;
    }
    let row = e / p.d;
    let s = select(row / p.heads, row % p.seq, p.head_seq == 1u);
    let half = p.n_rot / 2u;
    var i: u32;
    var first: bool;
    var stride: u32;
    if (p.neox == 1u) {
        first = c < half;
        i = select(c - half, c, first);
        stride = half;
    } else {
        first = (c & 1u) == 0u;
        i = c / 2u;
        stride = 1u;
    }
    let e0 = select(e - stride, e, first);
    let x0 = LD(x, e0);
    let x1 = LD(x, e0 + stride);
    let sc = sin_cos(LD(pos, s), freq[i]);
    ST(y, e, select(x0 * sc.x + x1 * sc.y, x0 * sc.y - x1 * sc.x, first));
}
