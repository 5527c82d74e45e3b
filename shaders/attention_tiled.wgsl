// The GPU kernel set's attention: one fused flash kernel on workgroup tiles.
// q [Sq, Hq, D], k [Sk, Hkv, D], v [Sk, Hkv, Dv] -> o [Sq, Hq, Dv] (heads inside positions).
// A workgroup (wg.y = the kv head) takes BQ query rows that share its kv head: block row r
// is query i = (r0 + r) / group of head kvh * group + (r0 + r) % group, so a position's GQA
// heads sit side by side (one contiguous run of q and o) and every K/V tile is read once for
// all of them. It walks the keys in tiles of BK: the key tile into workgroup memory, the
// BQ x BK scores (q pre-scaled; masked keys get NEG_MAX), the online softmax of each row by
// one invocation (f32 running max and sum; masked keys weigh exactly 0), the value tile into
// the same memory, then the BQ x Dv outputs, ACC per invocation in registers, rescaled by
// each row's alpha when its max grew. Keys past the block's last visible one are never read.
// A row that sees no key gets zeros.
// PARTS2: keys and values in two parts, k and v holding keys [0, sk0), k2 and v2 the rest
// (a KV cache and the new rows).
// SPLIT (few query rows: too few workgroups to fill a GPU): wg.z takes keys
// [wg.z * chunk, (wg.z + 1) * chunk) only and writes its rows' running max, sum and
// unnormalised outputs to `part`; `attn_combine` (COMBINE, a second dispatch) merges the
// splits of each row into o.
// Template: D64 | D128 | D256, the head-dim class (max(D, Dv) at most 64 / 128 / 256): BQ,
// BK and the pitch such that the tiles fit 16 KiB of workgroup memory; CAUSAL; ALLOWED;
// SPLIT; COMBINE (the merge kernel alone).

struct Params {
    rows: u32,     // Sq * group: the query rows of one kv head
    sq: u32,
    sk: u32,
    d: u32,
    dv: u32,
    group: u32,    // Hq / Hkv
    hq: u32,
    hkv: u32,
    scale: f32,
    chunk: u32,    // SPLIT, COMBINE: keys per split, a multiple of BK
    splits: u32,
    sk0: u32,      // PARTS2: keys in the first part
}

@group(0) @binding(0) var<uniform> p: Params;
#if COMBINE
@group(0) @binding(5) var<storage, read_write> o: ACT;
// [splits, hkv * rows, dv + 2]: per split and row (kvh * rows + flat) its max, its sum,
// then its Dv unnormalised outputs
@group(0) @binding(6) var<storage, read> part: array<f32>;
#else
@group(0) @binding(1) var<storage, read> q: ACT;
@group(0) @binding(2) var<storage, read> k: ACT;
@group(0) @binding(3) var<storage, read> v: ACT;
#if ALLOWED
@group(0) @binding(4) var<storage, read> mask: ACT;
#endif
#if PARTS2
@group(0) @binding(7) var<storage, read> k2: ACT;
@group(0) @binding(8) var<storage, read> v2: ACT;
#endif
#if SPLIT
@group(0) @binding(6) var<storage, read_write> part: array<f32>;
#else
@group(0) @binding(5) var<storage, read_write> o: ACT;
#endif
#endif

const WG: u32 = 64u;
#if D64
const BQ: u32 = 16u;
const BK: u32 = 32u;
const PITCH: u32 = 65u;
#endif
#if D128
const BQ: u32 = 8u;
const BK: u32 = 16u;
const PITCH: u32 = 129u;
#endif
#if D256
const BQ: u32 = 4u;
const BK: u32 = 8u;
const PITCH: u32 = 257u;
#endif
// outputs per invocation: BQ * (PITCH - 1) / WG in every class
const ACC: u32 = 16u;
// scores of masked keys; no real score reaches it
const NEG_MAX: f32 = -3.4028235e38;

var<workgroup> qs: array<f32, BQ * PITCH>;  // the block's query rows, scaled
var<workgroup> kv: array<f32, BK * PITCH>;  // the key tile, then the value tile (odd pitch)
var<workgroup> ps: array<f32, BQ * BK>;     // scores, then probabilities
var<workgroup> alpha: array<f32, BQ>;       // each row's rescale this tile; 1 / sum at the end

// Where block row `flat` of kv head `kvh` lies in q and o, in rows of D (Dv).
fn at(flat: u32, kvh: u32) -> u32 {
    return (flat / p.group) * p.hq + kvh * p.group + flat % p.group;
}

#if COMBINE
// One invocation per output value: the splits' partial results, rescaled to their common
// max (a split that saw no key has sum 0 and adds nothing).
@compute @workgroup_size(WG)
fn attn_combine(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) t: u32) {
    let e = (wg.y * nwg.x + wg.x) * WG + t;
    let all_rows = p.hkv * p.rows;
    if (e >= all_rows * p.dv) {
        return;
    }
    let row = e / p.dv;
    let c = e % p.dv;
    let w = p.dv + 2u;
    var mx = NEG_MAX;
    for (var z = 0u; z < p.splits; z++) {
        mx = max(mx, part[(z * all_rows + row) * w]);
    }
    var l = 0.0;
    var x = 0.0;
    for (var z = 0u; z < p.splits; z++) {
        let b = (z * all_rows + row) * w;
        let a = exp(part[b] - mx);
        l += part[b + 1u] * a;
        x += part[b + 2u + c] * a;
    }
    ST(o, at(row % p.rows, row / p.rows) * p.dv + c, select(x / l, 0.0, l == 0.0));
}
#else

// Keys [0, visible(i)) are candidates for query i.
fn visible(i: u32) -> u32 {
#if CAUSAL
    return u32(clamp(i32(i) + i32(p.sk) - i32(p.sq) + 1, 0, i32(p.sk)));
#else
    return p.sk;
#endif
}

@compute @workgroup_size(WG)
fn attn_tiled(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let r0 = wg.x * BQ;
    let kvh = wg.y;
    // the grid covers the rows exactly, so r0 < p.rows
    let n_rows = min(BQ, p.rows - r0);
    for (var e = t; e < BQ * p.d; e += WG) {
        let r = e / p.d;
        let c = e % p.d;
        var x = 0.0;
        if (r < n_rows) {
            x = LD(q, at(r0 + r, kvh) * p.d + c) * p.scale;
        }
        qs[r * PITCH + c] = x;
    }
    // visible() grows with i: the block's last row sees the most keys
#if SPLIT
    let start = wg.z * p.chunk;
    let end = min(visible((r0 + n_rows - 1u) / p.group), start + p.chunk);
#else
    let start = 0u;
    let end = visible((r0 + n_rows - 1u) / p.group);
#endif
    var m = NEG_MAX;  // row t's running max (t < BQ)
    var l = 0.0;      // row t's running sum of exp(s - m)
    var acc: array<f32, ACC>;
    for (var j0 = start; j0 < end; j0 += BK) {
        for (var e = t; e < BK * p.d; e += WG) {
            let j = e / p.d;
            let c = e % p.d;
            var x = 0.0;
            let jg = j0 + j;
            if (jg < end) {
#if PARTS2
                if (jg >= p.sk0) {
                    x = LD(k2, ((jg - p.sk0) * p.hkv + kvh) * p.d + c);
                } else {
                    x = LD(k, (jg * p.hkv + kvh) * p.d + c);
                }
#else
                x = LD(k, (jg * p.hkv + kvh) * p.d + c);
#endif
            }
            kv[j * PITCH + c] = x;
        }
        workgroupBarrier();
        for (var e = t; e < BQ * BK; e += WG) {
            let r = e / BK;
            let j = e % BK;
            var s = 0.0;
            for (var c = 0u; c < p.d; c++) {
                s = fma(qs[r * PITCH + c], kv[j * PITCH + c], s);
            }
            let jg = j0 + j;
            let i = (r0 + r) / p.group;
            var ok = r < n_rows && jg < visible(i);
#if ALLOWED
            if (ok) {
                ok = LD(mask, i * p.sk + jg) != 0.0;
            }
#endif
            ps[e] = select(NEG_MAX, s, ok);
        }
        workgroupBarrier();
        if (t < BQ) {
            var mx = m;
            for (var j = 0u; j < BK; j++) {
                mx = max(mx, ps[t * BK + j]);
            }
            var sum = 0.0;
            for (var j = 0u; j < BK; j++) {
                let s = ps[t * BK + j];
                let w = select(exp(s - mx), 0.0, s <= NEG_MAX);
                ps[t * BK + j] = w;
                sum += w;
            }
            // exp(NEG_MAX - finite) is 0: the first visible tile drops nothing real
            let a = exp(m - mx);
            alpha[t] = a;
            l = l * a + sum;
            m = mx;
        }
        // the scores are done with the key tile: the value tile takes its place
        for (var e = t; e < BK * p.dv; e += WG) {
            let j = e / p.dv;
            let c = e % p.dv;
            var x = 0.0;
            let jg = j0 + j;
            if (jg < end) {
#if PARTS2
                if (jg >= p.sk0) {
                    x = LD(v2, ((jg - p.sk0) * p.hkv + kvh) * p.dv + c);
                } else {
                    x = LD(v, (jg * p.hkv + kvh) * p.dv + c);
                }
#else
                x = LD(v, (jg * p.hkv + kvh) * p.dv + c);
#endif
            }
            kv[j * PITCH + c] = x;
        }
        workgroupBarrier();
        for (var a = 0u; a < ACC; a++) {
            let e = t + a * WG;
            let r = e / p.dv;
            let c = e % p.dv;
            if (r < BQ) {
                var x = acc[a] * alpha[r];
                for (var j = 0u; j < BK; j++) {
                    x = fma(ps[r * BK + j], kv[j * PITCH + c], x);
                }
                acc[a] = x;
            }
        }
        workgroupBarrier();
    }
#if SPLIT
    let w = p.dv + 2u;
    let base = (wg.z * p.hkv + kvh) * p.rows + r0;
    if (t < n_rows) {
        part[(base + t) * w] = m;
        part[(base + t) * w + 1u] = l;
    }
    for (var a = 0u; a < ACC; a++) {
        let e = t + a * WG;
        let r = e / p.dv;
        if (r < n_rows) {
            part[(base + r) * w + 2u + e % p.dv] = acc[a];
        }
    }
#else
    if (t < BQ) {
        alpha[t] = select(1.0 / l, 0.0, l == 0.0);
    }
    workgroupBarrier();
    for (var a = 0u; a < ACC; a++) {
        let e = t + a * WG;
        let r = e / p.dv;
        let c = e % p.dv;
        if (r < n_rows) {
            ST(o, at(r0 + r, kvh) * p.dv + c, acc[a] * alpha[r]);
        }
    }
#endif
}
#endif
