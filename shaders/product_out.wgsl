// Where a weight product's output element (m, col) goes, col counted over all the weight's
// chunks (prepended to matmul.wgsl, matmul_quant.wgsl and gemm_tiled.wgsl; the including
// file declares `y` and Params' n, n0, n01). `at`: the first element of the output batch
// (attention's products; 0 for weight products).
// Template: OUT_PARTS, sibling products fused into one (their weights concatenated at
// upload, src/backend/wgpu/fuse/): columns [0, n0) go to y, [n0, n01) to y1 and,
// with OUT_PARTS3, [n01, n) to y2, each in rows of its own width. Not with batches.
#if OUT_PARTS
@group(0) @binding(10) var<storage, read_write> y1: ACT;
#if OUT_PARTS3
@group(0) @binding(11) var<storage, read_write> y2: ACT;
#endif
#endif

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
