// Row-wise reductions over the last dim, one workgroup per row (rows of any length; each
// invocation strides over the row): `softmax` (IN_PLACE: over y, the GPU kernel set's
// attention scores), `rms_norm` (x / rms(x) * (w + offset); SHIFT: plus w[d + i], pi0.5's
// adaptive norm reading scale and shift in place from its modulation vector w),
// `layer_norm` ((x - mean) / sqrt(var + eps) * w + b; two passes, biased variance).
// Template: SUBGROUPS reduces within subgroups first (subgroupAdd / subgroupMax), then
// across the per-subgroup partials; otherwise a workgroup-memory tree. WG (override) must
// be a power of two.

struct Params {
    rows: u32,
    d: u32,
    eps: f32,
    offset: f32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: ACT;
@group(0) @binding(2) var<storage, read> w: ACT;
@group(0) @binding(3) var<storage, read> b: ACT;
@group(0) @binding(4) var<storage, read_write> y: ACT;

override WG: u32 = 256u;
const NEG_MAX: f32 = -3.4028235e38;

// `red`, `lid`, `combine` and `reduce` come from reduce.wgsl.

// A softmax input value: x, or y itself with IN_PLACE.
fn softmax_in(i: u32) -> f32 {
#if IN_PLACE
    return LD(y, i);
#else
    return LD(x, i);
#endif
}

@compute @workgroup_size(WG)
fn softmax(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) l: u32
#if SUBGROUPS
           , @builtin(subgroup_invocation_id) lane: u32, @builtin(subgroup_size) size: u32
#endif
) {
#if SUBGROUPS
    setup(l, lane, size);
#else
    setup(l);
#endif
    let row = wg.y * nwg.x + wg.x;
    if (row >= p.rows) { return; }
    let base = row * p.d;
    var m = NEG_MAX;
    for (var i = lid; i < p.d; i += WG) { m = max(m, softmax_in(base + i)); }
    m = reduce(m, true);
    var s = 0.0;
    for (var i = lid; i < p.d; i += WG) {
        let v = softmax_in(base + i);
        // -inf entries get 0; an all -inf row has sum 0 and becomes zeros. IN_PLACE (the
        // GPU kernel set's attention scores) counts NEG_MAX, its masked value, as masked.
#if IN_PLACE
        let masked = v <= NEG_MAX;
#else
        let masked = v < NEG_MAX;
#endif
        let e = select(exp(v - m), 0.0, masked);
        ST(y, base + i, e);
        s += e;
    }
    s = reduce(s, false);
    let inv = select(1.0 / s, 0.0, s == 0.0);
    for (var i = lid; i < p.d; i += WG) { ST(y, base + i, LD(y, base + i) * (inv)); }
}

@compute @workgroup_size(WG)
fn rms_norm(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) l: u32
#if SUBGROUPS
            , @builtin(subgroup_invocation_id) lane: u32, @builtin(subgroup_size) size: u32
#endif
) {
#if SUBGROUPS
    setup(l, lane, size);
#else
    setup(l);
#endif
    let row = wg.y * nwg.x + wg.x;
    if (row >= p.rows) { return; }
    let base = row * p.d;
    var ss = 0.0;
    for (var i = lid; i < p.d; i += WG) { let v = LD(x, base + i); ss = fma(v, v, ss); }
    ss = reduce(ss, false);
    let inv = 1.0 / sqrt(ss / f32(p.d) + p.eps);
    for (var i = lid; i < p.d; i += WG) {
        var v = LD(x, base + i) * inv * (LD(w, i) + p.offset);
#if SHIFT
        v += LD(w, p.d + i);
#endif
        ST(y, base + i, v);
    }
}

@compute @workgroup_size(WG)
fn layer_norm(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) l: u32
#if SUBGROUPS
              , @builtin(subgroup_invocation_id) lane: u32, @builtin(subgroup_size) size: u32
#endif
) {
#if SUBGROUPS
    setup(l, lane, size);
#else
    setup(l);
#endif
    let row = wg.y * nwg.x + wg.x;
    if (row >= p.rows) { return; }
    let base = row * p.d;
    var s = 0.0;
    for (var i = lid; i < p.d; i += WG) { s += LD(x, base + i); }
    let mean = reduce(s, false) / f32(p.d);
    var sv = 0.0;
    for (var i = lid; i < p.d; i += WG) { let c = LD(x, base + i) - mean; sv = fma(c, c, sv); }
    let inv = 1.0 / sqrt(reduce(sv, false) / f32(p.d) + p.eps);
    for (var i = lid; i < p.d; i += WG) { ST(y, base + i, (LD(x, base + i) - mean) * inv * LD(w, i) + LD(b, i)); }
}
