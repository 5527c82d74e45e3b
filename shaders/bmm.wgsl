// Batched matmul of two f32 activations: y[b, m, n] = sum_k a[b, m, k] * B[b, k, n], where
// B[b, k, n] = b[b, n, k] (TRANS_B) or b[b, k, n]. Register-blocked like matmul.wgsl: each
// invocation computes a 4x4 block, a workgroup 32x32, grid z = batch. No workgroup memory.

struct Params {
    m: u32,
    n: u32,
    k: u32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: ACT;
@group(0) @binding(2) var<storage, read> b: ACT;
@group(0) @binding(3) var<storage, read_write> y: ACT;

@compute @workgroup_size(8, 8)
fn bmm(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let n0 = wg.x * 32u + lid.x * 4u;
    let m0 = wg.y * 32u + lid.y * 4u;
    let a_base = wg.z * p.m * p.k;
    let b_base = wg.z * p.n * p.k;
    var acc: array<array<f32, 4>, 4>;
    // Out-of-range rows/cols read a valid one; their results are discarded below.
    var arow: array<u32, 4>;
    var bcol: array<u32, 4>;
    for (var i = 0u; i < 4u; i++) {
        arow[i] = a_base + min(m0 + i, p.m - 1u) * p.k;
#if TRANS_B
        bcol[i] = b_base + min(n0 + i, p.n - 1u) * p.k;
#else
        bcol[i] = b_base + min(n0 + i, p.n - 1u);
#endif
    }
    for (var kk = 0u; kk < p.k; kk++) {
        var av: array<f32, 4>;
        var bv: array<f32, 4>;
        for (var i = 0u; i < 4u; i++) {
            av[i] = LD(a, arow[i] + kk);
#if TRANS_B
            bv[i] = LD(b, bcol[i] + kk);
#else
            bv[i] = LD(b, bcol[i] + kk * p.n);
#endif
        }
        for (var i = 0u; i < 4u; i++) {
            for (var j = 0u; j < 4u; j++) {
                acc[i][j] = fma(av[i], bv[j], acc[i][j]);
            }
        }
    }
    let y_base = wg.z * p.m * p.n;
    for (var i = 0u; i < 4u; i++) {
        let m = m0 + i;
        if (m >= p.m) { break; }
        for (var j = 0u; j < 4u; j++) {
            let n = n0 + j;
            if (n >= p.n) { break; }
            ST(y, y_base + m * p.n + n, acc[i][j]);
        }
    }
}
