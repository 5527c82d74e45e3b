// Embedding gather: y[i, e] = table[ids[i], e] for one row chunk of the table, decoded from
// its stored dtype (weight_decode.wgsl is prepended; only gathered elements are decoded).
// ids are f32 holding integers. An id that is not an integer in [0, V) (negative, too large,
// fractional, NaN) gives a row of zeros, written by the dispatch with `zero_bad` set; the
// table is never read out of bounds.

struct Params {
    n_ids: u32,
    d: u32,        // row length
    vocab: u32,    // V, all chunks
    row_start: u32,
    rows: u32,     // table rows in this chunk
    row_blocks: u32, // blocks a row (quantized tables)
    zero_bad: u32, // write zeros for invalid ids (first chunk only)
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> ids: ACT;
@group(0) @binding(2) var<storage, read> w: array<u32>;
@group(0) @binding(3) var<storage, read_write> y: ACT;

@compute @workgroup_size(256)
fn embedding(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let o = (wg.y * nwg.x + wg.x) * 256u + li;
    if (o >= p.n_ids * p.d) {
        return;
    }
    let i = o / p.d;
    let e = o % p.d;
    let f = LD(ids, i);
    // (&& short-circuits: u32(f) only for f in u32 range)
    let valid = f >= 0.0 && f == floor(f) && f < 4294967040.0 && u32(f) < p.vocab;
    if (!valid) {
        if (p.zero_bad != 0u) {
            ST(y, o, 0.0);
        }
        return;
    }
    let id = u32(f);
    if (id < p.row_start || id - p.row_start >= p.rows) {
        return;
    }
    let r = id - p.row_start;
#if QUANT
    quant_rows(p.rows, p.row_blocks);
    ST(y, o, load_q(r * p.row_blocks, e));
#else
    ST(y, o, load_w(r * p.d + e));
#endif
}
