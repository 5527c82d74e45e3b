// Quantized-weight matmul and few-row matvec, y[m, n_off + n] = sum_k x[m, k] * w[n, k],
// for one row chunk of the weight. Prepended with weight_decode.wgsl (add_c: ADD_C, C_FULL,
// C_GATE) and product_out.wgsl (finish_y, the epilogue; OUT_PARTS: fused sibling products).
//
// Quantized weights (QUANT + Q8_0 | Q4_0 | Q4_1 | Q5_0 | Q5_1) are never dequantized to
// floats: `quantize_x` first turns the f32 activations into ggml Q8_1-style blocks of 32
// (xq: 8 words of packed i8, d = amax / 127, q = roundf(x / d); xds: (d, d * sum(q)) rounded
// to f16 as ggml's block_q8_0 / block_q8_1 store them), then
// each weight block meets an activation block in integer dot products:
//   sum_k x*w ~= sumi * d_w * d_x + m_w * s_x          (m_w = 0 for the _0 types)
// with `dot4I8Packed` under INT_DOT, plain i32 multiplies otherwise.
//
// Entries:
//   quantize_x  one invocation per activation block
//   matmul_q    M > 16: register-blocked 4x4 outputs per invocation, 32x32 per workgroup
//   gemm_q      M > 16 with the GPU kernel set (GEMM_Q): the same arithmetic on
//               workgroup-memory tiles
//   matvec      M <= 16, float (W_F32 | W_F16 | W_BF16) or QUANT weights: one workgroup
//               of MV_WG invocations per weight row, splitting K; partial sums reduced with
//               subgroupAdd (SUBGROUPS) and/or workgroup memory. Float weights only: NORM
//               (x's rows RMS-normalised as read: the gain scales w, each row's sum of
//               squares is a third plane of sums, 1 / rms scales the result) and GATED (a
//               second weight w2 in the same chunking; act(x w^T) * (x w2^T), SILU or else
//               tanh-GELU from activation.wgsl).

struct Params {
    m: u32,
    n: u32,       // columns of y (all chunks)
    k: u32,
    n_off: u32,   // first weight row of this chunk
    rows: u32,    // weight rows in this chunk
    n0: u32,      // OUT_PARTS: where y1's columns start (product_out.wgsl)
    n01: u32,     // ... and y2's
    gate_off: u32, // C_GATE: the gate's first element (weight_decode.wgsl)
    eps: f32,     // matvec NORM
    offset: f32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: ACT;
@group(0) @binding(2) var<storage, read> w: array<u32>;
@group(0) @binding(3) var<storage, read_write> y: ACT;
@group(0) @binding(4) var<storage, read_write> xq: array<u32>;
@group(0) @binding(5) var<storage, read_write> xds: array<vec2<f32>>;
#if NORM
@group(0) @binding(8) var<storage, read> gain: ACT;
#endif

const MV_WG: u32 = 64u;
const MAX_M: u32 = 16u;


@compute @workgroup_size(64)
fn quantize_x(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let blk = (wg.y * nwg.x + wg.x) * 64u + li;
    if (blk >= p.m * (p.k / 32u)) {
        return;
    }
    let base = blk * 32u;
    var amax = 0.0;
    for (var i = 0u; i < 32u; i++) {
        amax = max(amax, abs(LD(x, base + i)));
    }
    let d = amax / 127.0;
    let id = select(0.0, 1.0 / d, d > 0.0);
    var sum = 0i;
    for (var t = 0u; t < 8u; t++) {
        var word = 0u;
        for (var i = 0u; i < 4u; i++) {
            // half away from zero, like C's roundf in ggml's quantize_row_q8_0_ref
            let v = LD(x, base + 4u * t + i) * id;
            let q = i32(clamp(sign(v) * floor(abs(v) + 0.5), -127.0, 127.0));
            sum += q;
            word |= (bitcast<u32>(q) & 0xffu) << (8u * i);
        }
        xq[blk * 8u + t] = word;
    }
    // ggml stores both as f16 (block_q8_0.d, block_q8_1.s): round them the same way
    xds[blk] = vec2<f32>(round_to_f16(d), round_to_f16(d * f32(sum)));
}

// v rounded to the nearest f16 value (ties to even, subnormals, overflow to inf), as an
// f32, in integer and exact float steps: unpack2x16float(pack2x16float(v)) may be folded
// away by a driver (lavapipe does), and its rounding mode is not specified.
fn round_to_f16(v: f32) -> f32 {
    let b = bitcast<u32>(v);
    let sign = b & 0x80000000u;
    let a = b & 0x7fffffffu;
    if (a > 0x7f800000u) {
        return v; // NaN
    }
    if (a >= 0x477ff000u) {
        return bitcast<f32>(sign | 0x7f800000u); // 65520 and up round to inf
    }
    if (a < 0x38800000u) {
        // below 2^-14: f16 subnormals are multiples of 2^-24; WGSL's round() ties to even
        return select(1.0, -1.0, sign != 0u) * round(bitcast<f32>(a) * 16777216.0) / 16777216.0;
    }
    // keep 10 mantissa bits, ties to even (a carry moves into the exponent correctly)
    let r = (a + 0xfffu + ((a >> 13u) & 1u)) & 0xffffe000u;
    return bitcast<f32>(sign | r);
}

#if QUANT
// A block's integer dot s with the weight block's scale d and min m and the activation
// block's (d, d * sum(q)) ds. Each type associates the scales as ggml-cpu's scalar vec_dot
// does, so a block's result is the same f32 number (see docs/GGML.md).
fn block_scale(s: i32, d: f32, m: f32, ds: vec2<f32>) -> f32 {
#if Q8_0
    return f32(s) * (d * ds.x);
#endif
#if Q4_0
    return f32(s) * d * ds.x;
#endif
#if Q5_0
    return (d * ds.x) * f32(s);
#endif
#if Q4_1
    return (d * ds.x) * f32(s) + m * ds.y;
#endif
#if Q5_1
    return (d * ds.x) * f32(s) + m * ds.y;
#endif
}

// Activation block xb (row m, block b at m * K/32 + b) times weight block wb.
fn block_dot(xb: u32, wb: WBlock) -> f32 {
    var s = 0i;
    for (var t = 0u; t < 8u; t++) {
        s += dot4(xq[xb * 8u + t], wb.q[t]);
    }
    return block_scale(s, wb.d, wb.m, xds[xb]);
}

@compute @workgroup_size(8, 8)
fn matmul_q(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let nb = p.k / 32u;
    quant_rows(p.rows, nb);
    let n0 = wg.x * 32u + lid.x * 4u;
    let m0 = wg.y * 32u + lid.y * 4u;
    var acc: array<array<f32, 4>, 4>;
    // Clamp out-of-range rows/cols to a valid one: their results are discarded below.
    var xrow: array<u32, 4>;
    var wrow: array<u32, 4>;
    for (var i = 0u; i < 4u; i++) {
        xrow[i] = min(m0 + i, p.m - 1u) * nb;
        wrow[i] = min(n0 + i, p.rows - 1u) * nb;
    }
    for (var b = 0u; b < nb; b++) {
        var wb: array<WBlock, 4>;
        for (var j = 0u; j < 4u; j++) {
            wb[j] = load_block(wrow[j] + b);
        }
        for (var i = 0u; i < 4u; i++) {
            for (var j = 0u; j < 4u; j++) {
                acc[i][j] += block_dot(xrow[i] + b, wb[j]);
            }
        }
    }
    for (var i = 0u; i < 4u; i++) {
        let m = m0 + i;
        if (m >= p.m) { break; }
        for (var j = 0u; j < 4u; j++) {
            let n = n0 + j;
            if (n >= p.rows) { break; }
            finish_y(0u, m, p.n_off + n, acc[i][j], 0.0, 1.0);
        }
    }
}
#endif

#if GEMM_Q
// The GPU kernel set's quantized matmul: matmul_q's arithmetic (blocks added in order, each
// block's result from block_scale) on workgroup-memory tiles, one weight block (32 values
// of K) per step: BM activation blocks and BN weight blocks (decoded once per workgroup,
// not once per invocation) are staged, then each of the 16 x WG_Y invocations adds 4 x 4
// block dots, its rows and columns strided by the workgroup's size. TILE_S: 16 x 64 tiles
// of 64 invocations (small M); otherwise 64 x 64 of 256.
#if TILE_S
const GQ_WG_Y: u32 = 4u;
#else
const GQ_WG_Y: u32 = 16u;
#endif
const GQ_WG_X: u32 = 16u;
const GQ_THREADS: u32 = GQ_WG_X * GQ_WG_Y;
const GQ_BM: u32 = 4u * GQ_WG_Y;
const GQ_BN: u32 = 4u * GQ_WG_X;
// 9-word pitch: the 16 columns one subgroup reads at once sit in distinct banks
const GQ_PITCH: u32 = 9u;

var<workgroup> gq_x: array<u32, GQ_BM * 8u>;
var<workgroup> gq_xds: array<vec2<f32>, GQ_BM>;
var<workgroup> gq_w: array<u32, GQ_BN * GQ_PITCH>;
var<workgroup> gq_wdm: array<vec2<f32>, GQ_BN>;

@compute @workgroup_size(GQ_WG_X, GQ_WG_Y)
fn gemm_q(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
    @builtin(local_invocation_index) t: u32,
) {
    let nb = p.k / 32u;
    quant_rows(p.rows, nb);
    let m_base = wg.y * GQ_BM;
    let n_base = wg.x * GQ_BN;
    var acc: array<array<f32, 4>, 4>;
    for (var b = 0u; b < nb; b++) {
        // rows past M and columns past the chunk read the last valid one (results dropped)
        for (var e = t; e < GQ_BM * 8u; e += GQ_THREADS) {
            let m = min(m_base + e / 8u, p.m - 1u);
            gq_x[e] = xq[(m * nb + b) * 8u + e % 8u];
        }
        for (var e = t; e < GQ_BM; e += GQ_THREADS) {
            gq_xds[e] = xds[min(m_base + e, p.m - 1u) * nb + b];
        }
        for (var e = t; e < GQ_BN; e += GQ_THREADS) {
            let n = min(n_base + e, p.rows - 1u);
            let wb = load_block(n * nb + b);
            for (var q = 0u; q < 8u; q++) {
                gq_w[e * GQ_PITCH + q] = wb.q[q];
            }
            gq_wdm[e] = vec2<f32>(wb.d, wb.m);
        }
        workgroupBarrier();
        for (var i = 0u; i < 4u; i++) {
            let r = lid.y + GQ_WG_Y * i;
            for (var j = 0u; j < 4u; j++) {
                let c = lid.x + GQ_WG_X * j;
                var s = 0i;
                for (var q = 0u; q < 8u; q++) {
                    s += dot4(gq_x[r * 8u + q], gq_w[c * GQ_PITCH + q]);
                }
                let dm = gq_wdm[c];
                acc[i][j] += block_scale(s, dm.x, dm.y, gq_xds[r]);
            }
        }
        workgroupBarrier();
    }
    for (var i = 0u; i < 4u; i++) {
        let m = m_base + lid.y + GQ_WG_Y * i;
        if (m >= p.m) {
            break;
        }
        for (var j = 0u; j < 4u; j++) {
            let n = n_base + lid.x + GQ_WG_X * j;
            if (n < p.rows) {
                finish_y(0u, m, p.n_off + n, acc[i][j], 0.0, 1.0);
            }
        }
    }
}
#endif

// matvec's planes of partial sums a row of x: the product, with GATED the up product, with
// NORM the row's sum of squares (float weights only).
#if GATED
const UP_PLANES: u32 = 1u;
#else
const UP_PLANES: u32 = 0u;
#endif
#if NORM
const SS_PLANES: u32 = 1u;
#else
const SS_PLANES: u32 = 0u;
#endif
const PLANES: u32 = 1u + UP_PLANES + SS_PLANES;
const UP_PLANE: u32 = UP_PLANES;  // (GATED only)
const SS_PLANE: u32 = PLANES - 1u; // (NORM only)
const LANES: u32 = MAX_M * PLANES;

var<workgroup> partial: array<f32, MV_WG * LANES>;

@compute @workgroup_size(64)
fn matvec(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
#if SUBGROUPS
    @builtin(subgroup_invocation_id) lane: u32,
    @builtin(subgroup_id) sg: u32,
    @builtin(num_subgroups) n_sg: u32,
#endif
) {
    // The grid may be folded into 2-D; a workgroup past the last row computes row
    // rows - 1 and writes nothing (no early return before the barriers).
    let r = wg.y * nwg.x + wg.x;
    let row = min(r, p.rows - 1u);
    var acc: array<f32, LANES>; // plane q, row m at q * MAX_M + m
#if QUANT
    let nb = p.k / 32u;
    quant_rows(p.rows, nb);
    for (var b = li; b < nb; b += MV_WG) {
        let wb = load_block(row * nb + b);
        for (var m = 0u; m < MAX_M; m++) {
            if (m < p.m) {
                acc[m] += block_dot(m * nb + b, wb);
            }
        }
    }
#else
    for (var k = li; k < p.k; k += MV_WG) {
        var wv = load_w(row * p.k + k);
#if GATED
        var wv2 = load_w2(row * p.k + k);
#endif
#if NORM
        // x / rms(x) * g . w == (x . (g w)) / rms(x)
        let g = LD(gain, k) + p.offset;
        wv *= g;
#if GATED
        wv2 *= g;
#endif
#endif
        for (var m = 0u; m < MAX_M; m++) {
            if (m < p.m) {
                let xv = LD(x, m * p.k + k);
                acc[m] = fma(xv, wv, acc[m]);
#if GATED
                acc[UP_PLANE * MAX_M + m] = fma(xv, wv2, acc[UP_PLANE * MAX_M + m]);
#endif
#if NORM
                acc[SS_PLANE * MAX_M + m] = fma(xv, xv, acc[SS_PLANE * MAX_M + m]);
#endif
            }
        }
    }
#endif
#if SUBGROUPS
    // constant trip counts (LANES, guarded): acc can stay in registers
    for (var e = 0u; e < LANES; e++) {
        if (e % MAX_M < p.m) {
            let s = subgroupAdd(acc[e]);
            if (lane == 0u) {
                partial[sg * LANES + e] = s;
            }
        }
    }
    workgroupBarrier();
    let parts = n_sg;
#else
    for (var e = 0u; e < LANES; e++) {
        partial[li * LANES + e] = acc[e];
    }
    for (var stride = MV_WG / 2u; stride > 0u; stride >>= 1u) {
        workgroupBarrier();
        if (li < stride) {
            for (var e = 0u; e < LANES; e++) {
                if (e % MAX_M < p.m) {
                    partial[li * LANES + e] += partial[(li + stride) * LANES + e];
                }
            }
        }
    }
    workgroupBarrier();
    let parts = 1u;
#endif
    if (li < p.m && r < p.rows) {
        // plane q of row li, summed over the parts
        var sums: array<f32, PLANES>;
        for (var i = 0u; i < parts; i++) {
            for (var q = 0u; q < PLANES; q++) {
                sums[q] += partial[i * LANES + q * MAX_M + li];
            }
        }
        var inv_rms = 1.0;
#if NORM
        inv_rms = inverseSqrt(sums[SS_PLANE] / f32(p.k) + p.eps);
#endif
        var up = 0.0;
#if GATED
        up = sums[UP_PLANE];
#endif
        finish_y(0u, li, p.n_off + r, sums[0], up, inv_rms);
    }
}
