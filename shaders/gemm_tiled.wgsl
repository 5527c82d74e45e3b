// The GPU-grade tiled GEMM: C[b][m, n_off + n] = sum_k A[b][m, k] * B[b / group][n, k]
// (or B[b / group][k, n] with B_KN), for float matmuls (one row chunk of the weight per
// dispatch, b = 0) and for attention's two products (b = the query head, group = query
// heads per kv head: scores Q K^T with the SCORES epilogue, then P V with B_KN). Rows of
// A and B are lda / ldb apart (attention reads heads inside positions: strided rows).
// A workgroup computes a BM x BN output tile, each of its 16 x WG_Y invocations TM x TN
// outputs strided by the workgroup's size (rows ly + WG_Y * i, columns lx + 16 * j), so
// output stores are coalesced. K is walked in tiles of 16: the A and B tiles go through
// workgroup memory, loaded with consecutive invocations reading consecutive addresses
// (coalesced) and stored row-major with a 17-float pitch, so the strided reads of the
// inner loop hit distinct banks. Out-of-range rows, columns and k read as zero.
// Outputs go through product_out.wgsl's finish_y (1 / rms, addend, gated activation, store;
// OUT_PARTS: fused sibling products; ADD_C, C_FULL, C_GATE: weight_decode.wgsl's add_c).
// Template: W_F32 | W_F16 | W_BF16 selects weight_decode.wgsl's load_w for B (f32 for
// attention); tile shape TILE_S (16 x 64, 64 invocations, for small M), TILE_M (64 x 64)
// or TILE_L (128 x 128, 8 x 8 outputs each); B_KN; SCORES (scale, then CAUSAL keys
// j > i + shift and ALLOWED mask zeros get NEG_MAX). VEC4 (4 x 4 tiles only): the inner
// loop on four named vec4 accumulators, no arrays indexed by loop counters (for drivers
// that keep such arrays in memory). GATED (4 x 4 tiles, no VEC4, no ADD_C): a second B,
// w2 (the up projection, same dtype and chunking), through its own tile and accumulators;
// the epilogue writes act(A B^T) * (A B2^T), act SILU or else tanh-GELU (activation.wgsl,
// prepended). NORM (not with SCORES or B_KN): A's rows RMS-normalised as they are read,
// x / rms(x) * (gain + offset): the gain scales the B tiles along k, invocation t < BM sums
// the squares of tile row t, and the outputs are multiplied by 1 / rms of their row.
// SPLIT_K (weight products: one batch, no SCORES, no B_KN): workgroup z sums k in
// [z * k_chunk, (z + 1) * k_chunk) only and writes its raw sums to `part` (chunk-local
// [z][m][n]; GATED: the up product's sums in a second such block; NORM: the row sums of
// squares [z][m] after them, from the first column tile); `gemm_combine` (one invocation an
// output) adds the splits up and applies the epilogue.

struct Params {
    m: u32,
    n: u32,        // row stride of C (all chunks)
    k: u32,
    n_off: u32,    // first column of this dispatch in C (first weight row of the chunk)
    rows: u32,     // columns computed here (weight rows in the chunk; B_KN: B's row stride)
    n0: u32,       // OUT_PARTS: where y1's columns start (product_out.wgsl)
    n01: u32,      // ... and y2's
    gate_off: u32, // C_GATE: the gate's first element (weight_decode.wgsl)
    a_batch: u32,  // elements between batches of A, B and C
    b_batch: u32,
    c_batch: u32,
    group: u32,    // batches of A per batch of B
    scale: f32,
    shift: i32,
    lda: u32,      // elements between rows of A
    ldb: u32,      // ... of B (B_KN: between its k rows)
    eps: f32,      // NORM
    offset: f32,
    k_chunk: u32,  // SPLIT_K: k per split (a multiple of BK)
    splits: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: ACT;
@group(0) @binding(2) var<storage, read> w: array<u32>;
@group(0) @binding(3) var<storage, read_write> y: ACT;
#if ALLOWED
@group(0) @binding(4) var<storage, read> mask: ACT;
#endif
#if NORM
@group(0) @binding(8) var<storage, read> gain: ACT;
#endif
#if SPLIT_K
@group(0) @binding(9) var<storage, read_write> part: array<f32>;
// blocks of partial products in `part` before the row sums of squares
#if GATED
const PRODUCTS: u32 = 2u;
#else
const PRODUCTS: u32 = 1u;
#endif
#endif
// load_w and (GATED) load_w2 come from weight_decode.wgsl (prepended).

#if TILE_S
const WG_Y: u32 = 4u;
const TM: u32 = 4u;
const TN: u32 = 4u;
#endif
#if TILE_M
const WG_Y: u32 = 16u;
const TM: u32 = 4u;
const TN: u32 = 4u;
#endif
#if TILE_L
const WG_Y: u32 = 16u;
const TM: u32 = 8u;
const TN: u32 = 8u;
#endif
const WG_X: u32 = 16u;
const THREADS: u32 = WG_X * WG_Y;
const BM: u32 = TM * WG_Y;
const BN: u32 = TN * WG_X;
const BK: u32 = 16u;
const PITCH: u32 = BK + 1u;
const NEG_MAX: f32 = -3.4028235e38;

var<workgroup> xs: array<f32, BM * PITCH>;
var<workgroup> ws: array<f32, BN * PITCH>;
#if GATED
var<workgroup> ws2: array<f32, BN * PITCH>;
#endif
#if NORM
var<workgroup> sumsq: array<f32, BM>;
#endif

@compute @workgroup_size(WG_X, WG_Y)
fn gemm_tiled(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
    @builtin(local_invocation_index) t: u32,
) {
    let m_base = wg.y * BM;
    let n_base = wg.x * BN;
    let a_base = wg.z * p.a_batch;
    let b_base = (wg.z / p.group) * p.b_batch;
#if VEC4
    var acc0 = vec4<f32>(0.0);
    var acc1 = vec4<f32>(0.0);
    var acc2 = vec4<f32>(0.0);
    var acc3 = vec4<f32>(0.0);
#else
    var acc: array<array<f32, TN>, TM>;
#endif
#if GATED
    var acc2: array<array<f32, TN>, TM>;
#endif
#if NORM
    var ss = 0.0;  // invocation t < BM: the squares of row t of A
#endif
#if SPLIT_K
    let k_lo = wg.z * p.k_chunk;
    let k_hi = min(p.k, k_lo + p.k_chunk);
#else
    let k_lo = 0u;
    let k_hi = p.k;
#endif
    for (var k0 = k_lo; k0 < k_hi; k0 += BK) {
        for (var e = t; e < BM * BK; e += THREADS) {
            let r = e / BK;
            let c = e % BK;
            let m = m_base + r;
            let kk = k0 + c;
            var v = 0.0;
            if (m < p.m && kk < k_hi) {
                v = LD(a, a_base + m * p.lda + kk);
            }
            xs[r * PITCH + c] = v;
        }
        for (var e = t; e < BN * BK; e += THREADS) {
#if B_KN
            // consecutive invocations: consecutive n of one k row
            let r = e % BN;
            let c = e / BN;
#else
            let r = e / BK;
            let c = e % BK;
#endif
            let n = n_base + r;
            let kk = k0 + c;
            var v = 0.0;
#if GATED
            var v2 = 0.0;
#endif
            if (n < p.rows && kk < k_hi) {
#if B_KN
                v = load_w(b_base + kk * p.ldb + n);
#else
                v = load_w(b_base + n * p.ldb + kk);
#if GATED
                v2 = load_w2(b_base + n * p.ldb + kk);
#endif
#endif
#if NORM
                let g = LD(gain, kk) + p.offset;
                v *= g;
#if GATED
                v2 *= g;
#endif
#endif
            }
            ws[r * PITCH + c] = v;
#if GATED
            ws2[r * PITCH + c] = v2;
#endif
        }
        workgroupBarrier();
#if NORM
        if (t < BM) {
            for (var c = 0u; c < BK; c++) {
                let x = xs[t * PITCH + c];
                ss = fma(x, x, ss);
            }
        }
#endif
#if VEC4
        for (var kk = 0u; kk < BK; kk++) {
            let b = vec4<f32>(
                ws[lid.x * PITCH + kk],
                ws[(lid.x + WG_X) * PITCH + kk],
                ws[(lid.x + 2u * WG_X) * PITCH + kk],
                ws[(lid.x + 3u * WG_X) * PITCH + kk],
            );
            acc0 = fma(vec4<f32>(xs[lid.y * PITCH + kk]), b, acc0);
            acc1 = fma(vec4<f32>(xs[(lid.y + WG_Y) * PITCH + kk]), b, acc1);
            acc2 = fma(vec4<f32>(xs[(lid.y + 2u * WG_Y) * PITCH + kk]), b, acc2);
            acc3 = fma(vec4<f32>(xs[(lid.y + 3u * WG_Y) * PITCH + kk]), b, acc3);
        }
#else
        for (var kk = 0u; kk < BK; kk++) {
            var av: array<f32, TM>;
            var bv: array<f32, TN>;
            for (var i = 0u; i < TM; i++) {
                av[i] = xs[(lid.y + WG_Y * i) * PITCH + kk];
            }
            for (var j = 0u; j < TN; j++) {
                bv[j] = ws[(lid.x + WG_X * j) * PITCH + kk];
            }
            for (var i = 0u; i < TM; i++) {
                for (var j = 0u; j < TN; j++) {
                    acc[i][j] = fma(av[i], bv[j], acc[i][j]);
                }
            }
#if GATED
            for (var j = 0u; j < TN; j++) {
                bv[j] = ws2[(lid.x + WG_X * j) * PITCH + kk];
            }
            for (var i = 0u; i < TM; i++) {
                for (var j = 0u; j < TN; j++) {
                    acc2[i][j] = fma(av[i], bv[j], acc2[i][j]);
                }
            }
#endif
        }
#endif
        workgroupBarrier();
    }
#if VEC4
    let acc = array<vec4<f32>, 4>(acc0, acc1, acc2, acc3);
#endif
#if SPLIT_K
    let plane = p.m * p.rows;
#if NORM
    if (wg.x == 0u && t < BM && m_base + t < p.m) {
        part[PRODUCTS * p.splits * plane + wg.z * p.m + m_base + t] = ss;
    }
#endif
#else
#if NORM
    if (t < BM) {
        sumsq[t] = ss;
    }
    workgroupBarrier();
#endif
    let c_base = wg.z * p.c_batch;
#endif
    for (var i = 0u; i < TM; i++) {
        let m = m_base + lid.y + WG_Y * i;
        if (m >= p.m) {
            break;
        }
        for (var j = 0u; j < TN; j++) {
            let n = n_base + lid.x + WG_X * j;
            if (n < p.rows) {
#if SPLIT_K
                // raw sums; gemm_combine runs the epilogue
                part[wg.z * plane + m * p.rows + n] = acc[i][j];
#if GATED
                part[(p.splits + wg.z) * plane + m * p.rows + n] = acc2[i][j];
#endif
#else
                var v = acc[i][j];
#if SCORES
                v *= p.scale;
#if CAUSAL
                if (i32(n) > i32(m) + p.shift) {
                    v = NEG_MAX;
                }
#endif
#if ALLOWED
                if (LD(mask, m * p.n + n) == 0.0) {
                    v = NEG_MAX;
                }
#endif
#endif
                var inv_rms = 1.0;
#if NORM
                inv_rms = inverseSqrt(sumsq[lid.y + WG_Y * i] / f32(p.k) + p.eps);
#endif
                var up = 0.0;
#if GATED
                up = acc2[i][j];
#endif
                finish_y(c_base, m, p.n_off + n, v, up, inv_rms);
#endif
            }
        }
    }
}

#if SPLIT_K
// The splits' sums of one output (m, n) of this chunk added up, then the epilogue.
@compute @workgroup_size(256)
fn gemm_combine(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) l: u32) {
    let i = (wg.y * nwg.x + wg.x) * 256u + l;
    let plane = p.m * p.rows;
    if (i >= plane) {
        return;
    }
    let m = i / p.rows;
    let n = i % p.rows;
    var v = 0.0;
    for (var z = 0u; z < p.splits; z++) {
        v += part[z * plane + i];
    }
    var v2 = 0.0;
#if GATED
    for (var z = 0u; z < p.splits; z++) {
        v2 += part[(p.splits + z) * plane + i];
    }
#endif
    var inv_rms = 1.0;
#if NORM
    let ss_at = PRODUCTS * p.splits * plane;
    var ss = 0.0;
    for (var z = 0u; z < p.splits; z++) {
        ss += part[ss_at + z * p.m + m];
    }
    inv_rms = inverseSqrt(ss / f32(p.k) + p.eps);
#endif
    finish_y(0u, m, p.n_off + n, v, v2, inv_rms);
}
#endif
