// Generic strided copy: for i in 0..n, unravel i over `shape` (dims innermost first, `rank`
// of them) into coordinates c_d, then
//   y[out_offset + sum(c_d * out_strides_d)] = x[in_offset + sum(c_d * in_strides_d)].
// Serves slice, permute and each input of a concat (written at its offset in the output).
// The host collapses contiguous dims first, so most copies run with rank 1-3.

struct Params {
    n: u32,
    rank: u32,
    in_offset: u32,
    out_offset: u32,
    shape: array<vec4<u32>, 2>,       // MAX_RANK = 8, innermost first
    in_strides: array<vec4<u32>, 2>,
    out_strides: array<vec4<u32>, 2>,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: ACT;
@group(0) @binding(2) var<storage, read_write> y: ACT;

const WG: u32 = 256u;

@compute @workgroup_size(256)
fn copy(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = (wg.y * nwg.x + wg.x) * WG + lid;
    if (i >= p.n) { return; }
    var rem = i;
    var src = p.in_offset;
    var dst = p.out_offset;
    for (var d = 0u; d < p.rank; d++) {
        let dim = p.shape[d >> 2u][d & 3u];
        let c = rem % dim;
        rem = rem / dim;
        src += c * p.in_strides[d >> 2u][d & 3u];
        dst += c * p.out_strides[d >> 2u][d & 3u];
    }
    ST(y, dst, LD(x, src));
}
