// Patch embedding (ViT / SigLIP), im2col-free: stride = kernel, no padding.
//   y[patch, o] = b[o] + sum_{c, ky, kx} img[c, py*P + ky, px*Q + kx] * w[o, c, ky, kx]
// img [C, H, W], w [O, C, P, Q], b [O], y [PH*PW, O] with PH = H / P, PW = W / Q (the
// remainder rows / columns are never read). One invocation: one patch x OB outputs, each
// pixel loaded once and reused for OB weights (register blocking over O).

struct Params {
    c: u32,
    h: u32,
    w: u32,
    o: u32,
    p: u32,       // kernel rows
    q: u32,       // kernel cols
    pw: u32,      // patches per row
    n_items: u32, // patches * ceil(O / OB)
}

@group(0) @binding(0) var<uniform> prm: Params;
@group(0) @binding(1) var<storage, read> img: ACT;
@group(0) @binding(2) var<storage, read> wt: ACT;
@group(0) @binding(3) var<storage, read> bias: ACT;
@group(0) @binding(4) var<storage, read_write> y: ACT;

const WG: u32 = 64u;
const OB: u32 = 4u;

@compute @workgroup_size(64)
fn patch_embed(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
    let item = (wg.y * nwg.x + wg.x) * WG + lid;
    if (item >= prm.n_items) { return; }
    let n_ob = (prm.o + OB - 1u) / OB;
    let pi = item / n_ob;
    let o0 = (item % n_ob) * OB;
    let py = pi / prm.pw;
    let px = pi % prm.pw;
    let k = prm.c * prm.p * prm.q; // weights per output channel

    var acc: array<f32, OB>;
    var wbase: array<u32, OB>;
    for (var j = 0u; j < OB; j++) {
        // clamp a ragged last block to a valid channel; its results are not stored
        let o = min(o0 + j, prm.o - 1u);
        acc[j] = LD(bias, o);
        wbase[j] = o * k;
    }
    var wk = 0u; // (c, ky, kx) flattened, the weight's inner order
    for (var ci = 0u; ci < prm.c; ci++) {
        for (var ky = 0u; ky < prm.p; ky++) {
            let row = (ci * prm.h + py * prm.p + ky) * prm.w + px * prm.q;
            for (var kx = 0u; kx < prm.q; kx++) {
                let v = LD(img, row + kx);
                for (var j = 0u; j < OB; j++) {
                    acc[j] = fma(v, LD(wt, wbase[j] + wk), acc[j]);
                }
                wk++;
            }
        }
    }
    for (var j = 0u; j < OB; j++) {
        let o = o0 + j;
        if (o >= prm.o) { break; }
        ST(y, pi * prm.o + o, acc[j]);
    }
}
