// FoldQuant sites (Op::FqLinear; docs/FOLDQUANT.md section 4), bit-exact with the cpu
// reference (src/ops/foldquant.rs) where the adapter's f32 division is correctly rounded
// (lavapipe: tested; WGSL allows 2.5 ULP, so a GPU may put a code one step off where a value
// sits on a rounding boundary). Two entries:
//
//   fq_act   one workgroup of 64 invocations per token row: with NORM the fused RMSNorm
//            first (32 partial sums of squares, partial l taking the 64-chunks l, l + 32,
//            ... in order, combined by an xor tree as a CUDA warp does; rstd = 1 /
//            sqrt(sum / k + eps); y = (x * rstd) * (gain + offset)), then the row divided by ascale
//            (BEFORE), the natural-order Hadamard butterfly over each `block`-long chunk
//            scaled by c (block > 1), divided by ascale (AFTER); the row's amax (workgroup
//            max); scale = max(clip * amax / qmax, 1e-12); codes = clamp(round_even(y *
//            (1 / scale)), +-qmax), packed four to a word. The rotated row goes through `yr`.
//            BITNET (BitNet's ActQuant, src/ops/ternary.rs): a = max(amax, 1e-5); codes =
//            clamp(round_even(y * (127 / a)), -128, 127); scale = a / 127.
//   fq_gemm  one invocation per output: the integer dot of the row's codes with a weight
//            row's codes (dot4I8Packed under INT_DOT; W4: INT4 codes two a byte, low nibble
//            first, widened to i8 lanes a word at a time; W2: ternary codes sixteen a word,
//            byte i bits 2j.. of word w holding column 16w + 4j + i as code + 1), then ((f32(acc) * scale) * wscale)
//            + bias (BIAS; else + 0.0) (+ residual: RESIDUAL), with f32(acc) rounded to
//            nearest-even by hand (WGSL leaves it unspecified past 2^24) and the product
//            made opaque (xor with a run-time zero) so that it cannot contract into the add.
//   fq_gemm_tiled  the same sums and epilogue over 32 x 32 output tiles through workgroup
//            memory (the GPU kernel set; below).

struct Params {
    rows: u32,
    k: u32,
    n: u32,
    block: u32,
    qmax: f32,
    clip: f32,
    c: f32,
    zero: u32,
    stages: u32,  // log2(block)
    eps: f32,     // NORM
    offset: f32,  // NORM: added to the gain
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: ACT;
@group(0) @binding(2) var<storage, read> ascale: array<f32>;
@group(0) @binding(3) var<storage, read_write> yr: array<f32>;
@group(0) @binding(4) var<storage, read_write> codes: array<u32>;
@group(0) @binding(5) var<storage, read_write> scales: array<f32>;
@group(0) @binding(6) var<storage, read> w: array<u32>;
@group(0) @binding(7) var<storage, read> wscale: array<f32>;
@group(0) @binding(8) var<storage, read> addend: ACT;
@group(0) @binding(9) var<storage, read_write> y: ACT;
@group(0) @binding(10) var<storage, read> gain: ACT;

const WG: u32 = 64u;

var<workgroup> red: array<f32, 64>;
var<workgroup> row_scale: f32;
var<workgroup> row_inv: f32;
var<workgroup> row_rstd: f32;

// x * x kept from contracting into the add that follows (xor with a run-time zero).
fn opaque(v: f32) -> f32 {
    return bitcast<f32>(bitcast<u32>(v) ^ p.zero);
}

@compute @workgroup_size(64)
fn fq_act(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let row = wg.y * nwg.x + wg.x;
    if (row >= p.rows) {
        return;
    }
    let base = row * p.k;
    let bs = p.block;
#if NORM
    if (li < 32u) {
        var s = 0.0;
        for (var c = li; c * 64u < p.k; c += 32u) {
            let end = min(p.k, c * 64u + 64u);
            for (var i = c * 64u; i < end; i++) {
                let v = LD(x, base + i);
                s = s + opaque(v * v);
            }
        }
        red[li] = s;
    }
    workgroupBarrier();
    if (li == 0u) {
        var t: array<f32, 32>;
        for (var l = 0u; l < 32u; l++) {
            t[l] = red[l];
        }
        for (var st = 0u; st < 5u; st++) {
            let off = 16u >> st;
            var u: array<f32, 32>;
            for (var l = 0u; l < 32u; l++) {
                u[l] = t[l] + t[l ^ off];
            }
            t = u;
        }
        let mean = t[0] / f32(p.k);
        row_rstd = 1.0 / sqrt(mean + p.eps);
    }
    workgroupBarrier();
#endif
    var amax = 0.0;
    for (var ch = li; ch < p.k / bs; ch += WG) {
        let o = base + ch * bs;
        for (var i = 0u; i < bs; i++) {
            var v = LD(x, o + i);
#if NORM
            v = (v * row_rstd) * (LD(gain, ch * bs + i) + p.offset);
#endif
#if BEFORE
            v = v / ascale[ch * bs + i];
#endif
            yr[o + i] = v;
        }
        for (var st = 0u; st < p.stages; st++) {
            let h = 1u << st;
            for (var i = 0u; i < bs; i += 2u * h) {
                for (var j = i; j < i + h; j++) {
                    let u = yr[o + j];
                    let t = yr[o + j + h];
                    yr[o + j] = u + t;
                    yr[o + j + h] = u - t;
                }
            }
        }
        for (var i = 0u; i < bs; i++) {
            var v = yr[o + i];
            if (bs > 1u) {
                v = v * p.c;
            }
#if AFTER
            v = v / ascale[ch * bs + i];
#endif
            yr[o + i] = v;
            amax = max(amax, abs(v));
        }
    }
    red[li] = amax;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        if (li < s) {
            red[li] = max(red[li], red[li + s]);
        }
        workgroupBarrier();
    }
    if (li == 0u) {
#if BITNET
        let a = max(red[0], 1e-5);
        row_inv = 127.0 / a;
        row_scale = a / 127.0;
#else
        var scale = (p.clip * red[0]) / p.qmax;
        if (scale < 1e-12) {
            scale = 1e-12;
        }
        row_scale = scale;
        row_inv = 1.0 / scale;
#endif
        scales[row] = row_scale;
    }
    workgroupBarrier();
    let inv = row_inv;
#if BITNET
    let lo = -128.0;
#else
    let lo = -p.qmax;
#endif
    let words = p.k / 4u;
    for (var wd = li; wd < words; wd += WG) {
        var word = 0u;
        for (var i = 0u; i < 4u; i++) {
            let v = yr[base + 4u * wd + i] * inv;
            let q = i32(min(max(round(v), lo), p.qmax));
            word |= (bitcast<u32>(q) & 0xffu) << (8u * i);
        }
        codes[row * words + wd] = word;
    }
}


// f32(v) rounded to nearest-even, as Rust's `v as f32`.
fn f32_rn(v: i32) -> f32 {
    let m = u32(abs(v));
    if (m < 16777216u) {
        return f32(v);
    }
    let shift = 8u - countLeadingZeros(m);
    let kept = m >> shift;
    let rem = m & ((1u << shift) - 1u);
    let half = 1u << (shift - 1u);
    var r = kept;
    if (rem > half || (rem == half && (kept & 1u) == 1u)) {
        r = r + 1u;
    }
    let mag = f32(r) * f32(1u << shift);
    return select(mag, -mag, v < 0);
}

#if W2
// The four ternary codes at bits 2j of w's bytes (stored code + 1) as four packed i8: the
// bytes lifted by 0x80 so that subtracting 1 from each borrows from none.
fn ternary_lanes(w: u32, j: u32) -> u32 {
    let c = (w >> (2u * j)) & 0x03030303u;
    return ((c | 0x80808080u) - 0x01010101u) ^ 0x80808080u;
}
#endif

#if W4
// The four two's-complement nibbles in h's low 16 bits (low nibble first) as four packed i8.
fn nibble_lanes(h: u32) -> u32 {
    let n = (vec4<u32>(h) >> vec4<u32>(0u, 4u, 8u, 12u)) << vec4<u32>(28u);
    let b = bitcast<vec4<u32>>(bitcast<vec4<i32>>(n) >> vec4<u32>(28u)) & vec4<u32>(0xffu);
    return b.x | (b.y << 8u) | (b.z << 16u) | (b.w << 24u);
}
#endif

@compute @workgroup_size(64)
fn fq_gemm(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let idx = (wg.y * nwg.x + wg.x) * WG + li;
    if (idx >= p.rows * p.n) {
        return;
    }
    let r = idx / p.n;
    let j = idx % p.n;
    let words = p.k / 4u;
    var acc = 0i;
#if W4
    // a weight word holds 8 codes (columns 8t .. 8t + 7): its low half the first four
    let wwords = p.k / 8u;
    for (var t = 0u; t < wwords; t++) {
        let ww = w[j * wwords + t];
        acc += dot4(codes[r * words + 2u * t], nibble_lanes(ww));
        acc += dot4(codes[r * words + 2u * t + 1u], nibble_lanes(ww >> 16u));
    }
#else
#if W2
    // a weight word holds 16 codes: activation word t meets bits 2 (t % 4) of word t / 4
    let wwords = p.k / 16u;
    for (var t = 0u; t < words; t++) {
        acc += dot4(codes[r * words + t], ternary_lanes(w[j * wwords + t / 4u], t % 4u));
    }
#else
    for (var t = 0u; t < words; t++) {
        acc += dot4(codes[r * words + t], w[j * words + t]);
    }
#endif
#endif
    store(acc, r, j);
}

// The epilogue of output (r, j) from its integer dot: ((f32(acc) * scale) * wscale) + bias
// (or + 0.0), then + residual.
fn store(acc: i32, r: u32, j: u32) {
    let idx = r * p.n + j;
    let prod = (f32_rn(acc) * scales[r]) * wscale[j];
    var out = opaque(prod);
#if BIAS
    out = out + LD(addend, j);
#else
    out = out + 0.0;
#endif
#if RESIDUAL
    out = out + LD(addend, idx);
#endif
    ST(y, idx, out);
}

// fq_gemm_tiled (the GPU kernel set, K a multiple of 32): one workgroup of 64 per 32 x 32
// outputs, each invocation 4 rows x 4 outputs; the codes of the tile's rows and weight rows
// go through workgroup memory 8 words (32 codes) at a time, INT4 weights widened to i8 lanes
// as they are loaded. Same integer sums and epilogue as fq_gemm, so the same bits.
const TM: u32 = 32u;
const TN: u32 = 32u;
const KT: u32 = 8u;
var<workgroup> a_tile: array<u32, 256>; // [TM][KT]
var<workgroup> w_tile: array<u32, 256>; // [TN][KT]

@compute @workgroup_size(64)
fn fq_gemm_tiled(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let words = p.k / 4u;
    let r0 = wg.y * TM;
    let n0 = wg.x * TN;
    let tr = (li / 8u) * 4u;
    let tc = (li % 8u) * 4u;
    var acc: array<array<i32, 4>, 4>;
    for (var k0 = 0u; k0 < words; k0 += KT) {
        for (var e = 0u; e < 4u; e++) {
            let t = li * 4u + e;
            let row = t / KT;
            let q = k0 + t % KT;
            var a = 0u;
            if (r0 + row < p.rows) {
                a = codes[(r0 + row) * words + q];
            }
            a_tile[t] = a;
            var b = 0u;
            let j = n0 + row;
            if (j < p.n) {
#if W4
                // activation word q meets half q % 2 of weight word q / 2
                b = nibble_lanes(w[j * (words / 2u) + q / 2u] >> (16u * (q % 2u)));
#else
#if W2
                b = ternary_lanes(w[j * (words / 4u) + q / 4u], q % 4u);
#else
                b = w[j * words + q];
#endif
#endif
            }
            w_tile[t] = b;
        }
        workgroupBarrier();
        for (var kk = 0u; kk < KT; kk++) {
            var a: array<u32, 4>;
            var b: array<u32, 4>;
            for (var i = 0u; i < 4u; i++) {
                a[i] = a_tile[(tr + i) * KT + kk];
                b[i] = w_tile[(tc + i) * KT + kk];
            }
            for (var i = 0u; i < 4u; i++) {
                for (var j = 0u; j < 4u; j++) {
                    acc[i][j] += dot4(a[i], b[j]);
                }
            }
        }
        workgroupBarrier();
    }
    for (var i = 0u; i < 4u; i++) {
        for (var j = 0u; j < 4u; j++) {
            let r = r0 + tr + i;
            let c = n0 + tc + j;
            if (r < p.rows && c < p.n) {
                store(acc[i][j], r, c);
            }
        }
    }
}
