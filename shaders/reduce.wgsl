// Workgroup reductions shared by the row kernels (norm.wgsl, attention.wgsl), which are
// compiled with this file appended. The including file declares `override WG` and calls
// `setup` at entry.

var<workgroup> red: array<f32, WG>;
var<private> lid: u32;
#if SUBGROUPS
var<private> sg_lane: u32;
var<private> sg_size: u32;
#endif

fn combine(a: f32, c: f32, is_max: bool) -> f32 {
    return select(a + c, max(a, c), is_max);
}

// Records the invocation's ids for reduce(); call first in every entry point.
fn setup(l: u32
#if SUBGROUPS
, lane: u32, size: u32
#endif
) {
    lid = l;
#if SUBGROUPS
    sg_lane = lane;
    sg_size = size;
#endif
}

// The sum (or max) of `v` over the workgroup, returned to every invocation.
fn reduce(v: f32, is_max: bool) -> f32 {
#if SUBGROUPS
    // both, so no subgroup op sits under a branch
    let s = select(subgroupAdd(v), subgroupMax(v), is_max);
    let n_sg = (WG + sg_size - 1u) / sg_size;
    if (sg_lane == 0u) { red[lid / sg_size] = s; }
    workgroupBarrier();
    var r = red[0];
    for (var i = 1u; i < n_sg; i++) { r = combine(r, red[i], is_max); }
    workgroupBarrier();
    return r;
#else
    red[lid] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (lid < s) { red[lid] = combine(red[lid], red[lid + s], is_max); }
        workgroupBarrier();
    }
    let r = red[0];
    workgroupBarrier();
    return r;
#endif
}
