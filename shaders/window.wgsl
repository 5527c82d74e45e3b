// Sliding-window ops over channels-last feature maps x [H, W, C] (a ResNet's layout):
//   im2col:   y[r, (c * KH + ky) * KW + kx] = x[iy, ix, c], 0 in the padding, r = oy * OW + ox
//   max_pool: y[oy, ox, c] = max over the window of x[iy, ix, c], the padding skipped
// with iy = oy * SH + ky * DH - PH and ix = ox * SW + kx * DW - PW. One invocation per output
// element. A conv is im2col followed by a matmul by its weight [O, C * KH * KW].

struct Params {
    h: u32,
    w: u32,
    c: u32,
    ow: u32,
    kh: u32,
    kw: u32,
    sh: u32,
    sw: u32,
    ph: u32,
    pw: u32,
    dh: u32,
    dw: u32,
    n: u32, // output elements
}

@group(0) @binding(0) var<uniform> prm: Params;
@group(0) @binding(1) var<storage, read> x: ACT;
@group(0) @binding(2) var<storage, read_write> y: ACT;

const WG: u32 = 256u;

// The input row (axis 0) or column (axis 1) that kernel offset k of output o reads; a value
// >= the size (the subtraction wraps) where it reads padding.
fn src_row(o: u32, k: u32) -> u32 {
    return o * prm.sh + k * prm.dh - prm.ph;
}

fn src_col(o: u32, k: u32) -> u32 {
    return o * prm.sw + k * prm.dw - prm.pw;
}

@compute @workgroup_size(256)
fn im2col(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
    let i = (wg.y * nwg.x + wg.x) * WG + lid;
    if (i >= prm.n) { return; }
    let cols = prm.c * prm.kh * prm.kw;
    let r = i / cols;
    let j = i % cols;
    let ci = j / (prm.kh * prm.kw);
    let ky = (j / prm.kw) % prm.kh;
    let kx = j % prm.kw;
    let iy = src_row(r / prm.ow, ky);
    let ix = src_col(r % prm.ow, kx);
    var v = 0.0;
    if (iy < prm.h && ix < prm.w) {
        v = LD(x, (iy * prm.w + ix) * prm.c + ci);
    }
    ST(y, i, v);
}

@compute @workgroup_size(256)
fn max_pool(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
    let i = (wg.y * nwg.x + wg.x) * WG + lid;
    if (i >= prm.n) { return; }
    let ci = i % prm.c;
    let r = i / prm.c;
    let oy = r / prm.ow;
    let ox = r % prm.ow;
    var m = -3.4028234663852886e38;
    for (var ky = 0u; ky < prm.kh; ky++) {
        let iy = src_row(oy, ky);
        if (iy >= prm.h) { continue; }
        for (var kx = 0u; kx < prm.kw; kx++) {
            let ix = src_col(ox, kx);
            if (ix >= prm.w) { continue; }
            m = max(m, LD(x, (iy * prm.w + ix) * prm.c + ci));
        }
    }
    ST(y, i, m);
}
