// y[m, n_off + n] = sum_k x[m, k] * w[n, k] for one row chunk of the weight.
// Register-blocked: each invocation computes a 4x4 block of outputs, a workgroup 32x32.
// No workgroup memory: on lavapipe barriers cost more than they save; real-GPU tuning is
// a separate variant.
// Template: W_F32 | W_F16 | W_BF16 selects weight_decode.wgsl's load_w for the weight.
// Outputs go through product_out.wgsl's finish_y (1 / rms, addend, gated activation, store;
// OUT_PARTS: fused sibling products; ADD_C, C_FULL, C_GATE: weight_decode.wgsl's add_c).

struct Params {
    m: u32,
    n: u32,       // columns of y (all chunks)
    k: u32,
    n_off: u32,   // first weight row of this chunk
    rows: u32,    // weight rows in this chunk
    n0: u32,      // OUT_PARTS: where y1's columns start (product_out.wgsl)
    n01: u32,     // ... and y2's
    gate_off: u32, // C_GATE: the gate's first element (weight_decode.wgsl)
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: ACT;
@group(0) @binding(2) var<storage, read> w: array<u32>;
@group(0) @binding(3) var<storage, read_write> y: ACT;

// load_w comes from weight_decode.wgsl (prepended).

@compute @workgroup_size(8, 8)
fn matmul(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let n0 = wg.x * 32u + lid.x * 4u;
    let m0 = wg.y * 32u + lid.y * 4u;
    var acc: array<array<f32, 4>, 4>;
    // Clamp out-of-range rows/cols to a valid one: their results are discarded below.
    var xrow: array<u32, 4>;
    var wrow: array<u32, 4>;
    for (var i = 0u; i < 4u; i++) {
        xrow[i] = min(m0 + i, p.m - 1u) * p.k;
        wrow[i] = min(n0 + i, p.rows - 1u) * p.k;
    }
    for (var kk = 0u; kk < p.k; kk++) {
        var xv: array<f32, 4>;
        var wv: array<f32, 4>;
        for (var i = 0u; i < 4u; i++) {
            xv[i] = LD(x, xrow[i] + kk);
            wv[i] = load_w(wrow[i] + kk);
        }
        for (var i = 0u; i < 4u; i++) {
            for (var j = 0u; j < 4u; j++) {
                acc[i][j] = fma(xv[i], wv[j], acc[i][j]);
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
