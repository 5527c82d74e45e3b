// Where a weight product's output element (m, col) goes, col counted over all the weight's
// chunks (prepended to matmul.wgsl, matmul_quant.wgsl and gemm_tiled.wgsl; the including
// file declares `y` and Params' n, n0, n01). `at`: the first element of the output batch
// (attention's products; 0 for weight products).
// Template: OUT_PARTS, sibling products fused into one (their weights concatenated at
// upload, src/backend/wgpu/fuse/): columns [0, n0) go to y, [n0, n01) to y1 and,
// with OUT_PARTS3, [n01, n) to y2, each in rows of its own width. Not with batches.
// finish_y is every product's epilogue, in one order: 1 / rms of the row (the kernels' NORM
// reads), the addend (weight_decode.wgsl's add_c: ADD_C), the gated activation of the
// product and the up product (activation.wgsl's gated_act: GATED), the store.
#if OUT_PARTS
@group(0) @binding(10) var<storage, read_write> y1: ACT;
#if OUT_PARTS3
@group(0) @binding(11) var<storage, read_write> y2: ACT;
#endif
#endif

// The product v (and, GATED, the up product u) of output (m, col), both scaled by inv_rms
// (1 without a norm read), finished and stored.
fn finish_y(at: u32, m: u32, col: u32, v: f32, u: f32, inv_rms: f32) {
    var t = v * inv_rms;
#if ADD_C
    t = add_c(m, col, t);
#endif
#if GATED
    t = gated_act(t, u * inv_rms);
#endif
    store_y(at, m, col, t);
}

fn store_y(at: u32, m: u32, col: u32, v: f32) {
#if OUT_PARTS
    if (col < p.n0) {
        ST(y, m * p.n0 + col, v);
    } else if (col < p.n01) {
        ST(y1, m * (p.n01 - p.n0) + col - p.n0, v);
    }
#if OUT_PARTS3
    else {
        ST(y2, m * (p.n - p.n01) + col - p.n01, v);
    }
#endif
#else
    ST(y, at + m * p.n + col, v);
#endif
}
