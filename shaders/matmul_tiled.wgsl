// y[m, n_off + n] = sum_k x[m, k] * w[n, k] for one row chunk of the weight: the GPU-grade
// float matmul. A workgroup computes a BM x 64 output tile, each of its 16 x WG_Y
// invocations 4 x 4 outputs strided by the workgroup's size (rows ly + WG_Y * i, columns
// lx + 16 * j), so output stores are coalesced. K is walked in tiles of 16: the x and w
// tiles are loaded into workgroup memory with consecutive invocations reading consecutive
// k (coalesced), stored row-major with a 17-float row pitch so that the strided reads of
// the inner loop hit distinct banks. Out-of-range rows, columns and k read as zero.
// Template: W_F32 | W_F16 | W_BF16 selects weight_decode.wgsl's load_w; SMALL_M picks
// 16-row tiles of 64 invocations (more workgroups when M is small: the action expert),
// else 64-row tiles of 256.

struct Params {
    m: u32,
    n: u32,       // columns of y (all chunks)
    k: u32,
    n_off: u32,   // first weight row of this chunk
    rows: u32,    // weight rows in this chunk
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<u32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

// load_w comes from weight_decode.wgsl (prepended).

#if SMALL_M
const WG_Y: u32 = 4u;
#else
const WG_Y: u32 = 16u;
#endif
const WG_X: u32 = 16u;
const THREADS: u32 = WG_X * WG_Y;
const BM: u32 = 4u * WG_Y;
const BN: u32 = 4u * WG_X;
const BK: u32 = 16u;
const PITCH: u32 = BK + 1u;

var<workgroup> xs: array<f32, BM * PITCH>;
var<workgroup> ws: array<f32, BN * PITCH>;

@compute @workgroup_size(WG_X, WG_Y)
fn matmul_tiled(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
    @builtin(local_invocation_index) t: u32,
) {
    let m_base = wg.y * BM;
    let n_base = wg.x * BN;
    var acc: array<array<f32, 4>, 4>;
    for (var k0 = 0u; k0 < p.k; k0 += BK) {
        for (var e = t; e < BM * BK; e += THREADS) {
            let r = e / BK;
            let c = e % BK;
            let m = m_base + r;
            let kk = k0 + c;
            var v = 0.0;
            if (m < p.m && kk < p.k) {
                v = x[m * p.k + kk];
            }
            xs[r * PITCH + c] = v;
        }
        for (var e = t; e < BN * BK; e += THREADS) {
            let r = e / BK;
            let c = e % BK;
            let n = n_base + r;
            let kk = k0 + c;
            var v = 0.0;
            if (n < p.rows && kk < p.k) {
                v = load_w(n * p.k + kk);
            }
            ws[r * PITCH + c] = v;
        }
        workgroupBarrier();
        for (var kk = 0u; kk < BK; kk++) {
            var a: array<f32, 4>;
            var b: array<f32, 4>;
            for (var i = 0u; i < 4u; i++) {
                a[i] = xs[(lid.y + WG_Y * i) * PITCH + kk];
                b[i] = ws[(lid.x + WG_X * i) * PITCH + kk];
            }
            for (var i = 0u; i < 4u; i++) {
                for (var j = 0u; j < 4u; j++) {
                    acc[i][j] = fma(a[i], b[j], acc[i][j]);
                }
            }
        }
        workgroupBarrier();
    }
    for (var i = 0u; i < 4u; i++) {
        let m = m_base + lid.y + WG_Y * i;
        if (m >= p.m) {
            break;
        }
        for (var j = 0u; j < 4u; j++) {
            let n = n_base + lid.x + WG_X * j;
            if (n < p.rows) {
                y[m * p.n + p.n_off + n] = acc[i][j];
            }
        }
    }
}
