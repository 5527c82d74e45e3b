// Scaled dot-product attention, one workgroup per (query head h, query row i):
// o[i, h] = softmax(q[i, h] . k[j, kvh] * scale over allowed j) @ v[:, kvh], kvh = h / group;
// q [Sq, Hq, D], k [Sk, Hkv, D], v [Sk, Hkv, Dv], o [Sq, Hq, Dv] (heads inside positions).
// Keys j >= end are never visited (end = i + Sk - Sq + 1 under CAUSAL, else Sk); ALLOWED
// also skips keys whose mask[i, j] is 0. A row with no allowed key gets zeros.
// Template: ROWS = score-row kernel (`attn_rows`: all Sk scores in workgroup memory,
// array size SK_CAP, exact max then exp then P@V); otherwise the fused flash-style kernel
// (`attn_flash`: online softmax over tiles of WG keys, running max / sum / output
// rescaled per tile, no Sk-sized storage). PARTS2: keys and values in two parts, k and v
// holding keys [0, sk0), k2 and v2 the rest (a KV cache and the new rows). (The GPU kernel set runs attention_tiled.wgsl,
// or tiled GEMMs and norm.wgsl's in-place softmax.) SUBGROUPS as in norm.wgsl.

struct Params {
    rows: u32,     // Hq * Sq
    sq: u32,
    sk: u32,
    d: u32,
    dv: u32,
    group: u32,    // Hq / Hkv
    scale: f32,
    hq: u32,
    sk0: u32,      // PARTS2: keys in the first part
    _p0: u32,
    _p1: u32,
    _p2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> q: ACT;
@group(0) @binding(2) var<storage, read> k: ACT;
@group(0) @binding(3) var<storage, read> v: ACT;
#if ALLOWED
@group(0) @binding(4) var<storage, read> mask: ACT;
#endif
@group(0) @binding(5) var<storage, read_write> o: ACT;
#if PARTS2
@group(0) @binding(7) var<storage, read> k2: ACT;
@group(0) @binding(8) var<storage, read> v2: ACT;
#endif

override WG: u32 = 64u;
const D_MAX: u32 = 256u;
// output columns per invocation: Dv <= ACC * WG
const ACC: u32 = 4u;
// scores of masked keys; no real score reaches it
const NEG_MAX: f32 = -3.4028235e38;

var<workgroup> qs: array<f32, D_MAX>;
#if ROWS
override SK_CAP: u32 = 1024u;
var<workgroup> probs: array<f32, SK_CAP>;
#else
var<workgroup> probs: array<f32, WG>;
#endif
// `red`, `lid`, `combine` and `reduce` come from reduce.wgsl.

struct Row {
    i: u32,
    o_base: u32,   // first element of this row in q and o (in units of D and Dv)
    k_base: u32,   // first element of this kv head in k: key j at k_base + j * k_step
    v_base: u32,   // ... in v
    k_step: u32,   // Hkv * D
    v_step: u32,   // Hkv * Dv
    end: u32,      // keys [0, end) are candidates
}

// Loads the (unscaled) q row into workgroup memory and returns the row's addressing.
fn start(row: u32) -> Row {
    let h = row / p.sq;
    let i = row % p.sq;
    let kvh = h / p.group;
    let hkv = p.hq / p.group;
    let at = i * p.hq + h;
    for (var c = lid; c < p.d; c += WG) { qs[c] = LD(q, at * p.d + c); }
    workgroupBarrier();
    var end = p.sk;
#if CAUSAL
    end = u32(clamp(i32(i) + i32(p.sk) - i32(p.sq) + 1, 0, i32(p.sk)));
#endif
    return Row(i, at, kvh * p.d, kvh * p.dv, hkv * p.d, hkv * p.dv, end);
}

// The scaled score of key j (< end), NEG_MAX when masked.
fn score(r: Row, j: u32) -> f32 {
#if ALLOWED
    if (LD(mask, r.i * p.sk + j) == 0.0) { return NEG_MAX; }
#endif
    var s = 0.0;
#if PARTS2
    if (j >= p.sk0) {
        let kb2 = r.k_base + (j - p.sk0) * r.k_step;
        for (var c = 0u; c < p.d; c++) { s = fma(qs[c], LD(k2, kb2 + c), s); }
        return s * p.scale;
    }
#endif
    let kb = r.k_base + j * r.k_step;
    for (var c = 0u; c < p.d; c++) { s = fma(qs[c], LD(k, kb + c), s); }
    return s * p.scale;
}

// acc + sum of probs[j - p0] * v[j, c] over keys j in [lo, hi).
fn pv(r: Row, c: u32, lo: u32, hi: u32, p0: u32, acc: f32) -> f32 {
    var t = acc;
#if PARTS2
    let mid = clamp(p.sk0, lo, hi);
#else
    let mid = hi;
#endif
    var vi = r.v_base + lo * r.v_step + c;
    for (var j = lo; j < mid; j++) {
        t = fma(probs[j - p0], LD(v, vi), t);
        vi += r.v_step;
    }
#if PARTS2
    vi = r.v_base + (mid - p.sk0) * r.v_step + c;
    for (var j = mid; j < hi; j++) {
        t = fma(probs[j - p0], LD(v2, vi), t);
        vi += r.v_step;
    }
#endif
    return t;
}

#if ROWS
@compute @workgroup_size(WG)
fn attn_rows(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
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
    let r = start(row);
    var m = NEG_MAX;
    for (var j = lid; j < r.end; j += WG) {
        let s = score(r, j);
        probs[j] = s;
        m = max(m, s);
    }
    m = reduce(m, true);
    var l_sum = 0.0;
    for (var j = lid; j < r.end; j += WG) {
        let s = probs[j];
        let e = select(exp(s - m), 0.0, s <= NEG_MAX);
        probs[j] = e;
        l_sum += e;
    }
    // (reduce's barriers also publish probs)
    l_sum = reduce(l_sum, false);
    let inv = select(1.0 / l_sum, 0.0, l_sum == 0.0);
    for (var c = lid; c < p.dv; c += WG) {
        ST(o, r.o_base * p.dv + c, pv(r, c, 0u, r.end, 0u, 0.0) * inv);
    }
}
#else
@compute @workgroup_size(WG)
fn attn_flash(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
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
    let r = start(row);
    var m = NEG_MAX;       // running max (uniform across the workgroup)
    var l_sum = 0.0;       // running sum of exp(s - m)
    var acc: array<f32, ACC>;
    for (var t0 = 0u; t0 < r.end; t0 += WG) {
        let j = t0 + lid;
        var s = NEG_MAX;
        if (j < r.end) { s = score(r, j); }
        let m_new = max(m, reduce(s, true));
        let e = select(exp(s - m_new), 0.0, s <= NEG_MAX);
        probs[lid] = e;
        let alpha = exp(m - m_new);
        l_sum = l_sum * alpha + reduce(e, false);
        m = m_new;
        let n = min(WG, r.end - t0);
        for (var a = 0u; a < ACC; a++) {
            let c = lid + a * WG;
            if (c < p.dv) {
                acc[a] = pv(r, c, t0, t0 + n, t0, acc[a] * alpha);
            }
        }
    }
    let inv = select(1.0 / l_sum, 0.0, l_sum == 0.0);
    for (var a = 0u; a < ACC; a++) {
        let c = lid + a * WG;
        if (c < p.dv) { ST(o, r.o_base * p.dv + c, acc[a] * inv); }
    }
}
#endif
