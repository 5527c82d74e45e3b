// Elementwise ops. `binary`: y = a (op) b with numpy broadcasting over rank <= 4 (strides 0
// on broadcast dims). `unary`: scale / GELU (tanh, erf) / SiLU; with GATED, times b[i]
// (a gated FFN's act(gate) * up in one pass). `bytes`: y[i] = byte i of `words` (little-endian
// u32 words) as f32 (run-time byte inputs such as camera frames). `add_gated`: y[i] = a[i]
// + b[i] * c[off + i % w] (a gated residual, its gate read in place from a modulation
// vector). silu and gelu_tanh come from activation.wgsl (prepended).

struct BinaryParams {
    n: u32,
    op: u32,        // 0 add, 1 mul
    _pad0: u32,
    _pad1: u32,
    shape: vec4<u32>,
    a_strides: vec4<u32>,
    b_strides: vec4<u32>,
}

struct UnaryParams {
    n: u32,
    op: u32,        // 0 scale, 1 gelu_tanh, 2 gelu_erf, 3 silu
    scalar: f32,
    _pad: u32,
}

struct GatedAddParams {
    n: u32,
    w: u32,   // the gate's length (the last dim)
    off: u32, // the gate's first element in c
    _pad: u32,
}

@group(0) @binding(0) var<uniform> bp: BinaryParams;
@group(0) @binding(0) var<uniform> up: UnaryParams;
@group(0) @binding(0) var<uniform> gp: GatedAddParams;
@group(0) @binding(1) var<storage, read> a: ACT;
@group(0) @binding(2) var<storage, read> b: ACT;
@group(0) @binding(3) var<storage, read_write> y: ACT;
@group(0) @binding(4) var<storage, read> words: array<u32>;
@group(0) @binding(5) var<storage, read> c: ACT;

const WG: u32 = 256u;

fn flat_index(wg: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
    return (wg.y * nwg.x + wg.x) * WG + lid;
}

@compute @workgroup_size(256)
fn binary(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wg, nwg, lid);
    if (i >= bp.n) { return; }
    // unravel i over the padded output shape
    var rem = i;
    var ia = 0u;
    var ib = 0u;
    for (var d = 3; d >= 0; d--) {
        let c = rem % bp.shape[d];
        rem = rem / bp.shape[d];
        ia += c * bp.a_strides[d];
        ib += c * bp.b_strides[d];
    }
    if (bp.op == 0u) {
        ST(y, i, LD(a, ia) + LD(b, ib));
    } else {
        ST(y, i, LD(a, ia) * LD(b, ib));
    }
}

// erf with |error| < 1.5e-7 (Abramowitz & Stegun 7.1.26).
fn erf_approx(x: f32) -> f32 {
    let t = 1.0 / (1.0 + 0.3275911 * abs(x));
    let poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))));
    let r = 1.0 - poly * exp(-x * x);
    return select(-r, r, x >= 0.0);
}

@compute @workgroup_size(256)
fn unary(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wg, nwg, lid);
    if (i >= up.n) { return; }
    let x = LD(a, i);
    var r: f32;
    switch up.op {
        case 0u: { r = x * up.scalar; }
        case 1u: { r = gelu_tanh(x); }
        case 2u: { r = 0.5 * x * (1.0 + erf_approx(x * 0.7071067811865476)); }
        case 3u: { r = silu(x); }
        default: { r = max(x, 0.0); }
    }
#if GATED
    r = r * LD(b, i);
#endif
    ST(y, i, r);
}

@compute @workgroup_size(256)
fn bytes(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wg, nwg, lid);
    if (i >= up.n) { return; }
    ST(y, i, f32((words[i / 4u] >> (8u * (i % 4u))) & 0xffu));
}

@compute @workgroup_size(256)
fn add_gated(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wg, nwg, lid);
    if (i >= gp.n) { return; }
    ST(y, i, LD(a, i) + LD(b, i) * LD(c, gp.off + i % gp.w));
}
