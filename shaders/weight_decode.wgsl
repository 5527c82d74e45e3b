// Weight decoders shared by matmul.wgsl, matmul_quant.wgsl and embedding.wgsl (prepended to each; the
// including file declares `w: array<u32>`, a weight chunk as uploaded).
// Template: one of W_F32 | W_F16 | W_BF16 (float element e, the chunk as GGUF stores it)
// or QUANT plus one of Q8_0 | Q4_0 | Q4_1 | Q5_0 | Q5_1: ggml's blocks of 32 repacked at
// upload (src/backend/wgpu/repack.rs) into CODE_WORDS aligned words of codes a block,
// block after block, then one word a block of f16 scale d and minimum m; a kernel calls
// quant_rows(chunk rows, blocks a row) first, which places the scales.

#if ADD_C
// The matmul's fused addend (Op::MatMul's third input) added to the product v at output row
// m and column n of y (all chunks): c[n], a bias, or c[m, n] with C_FULL; with C_GATE (and
// C_FULL) c[m, n] + v * gate[p.gate_off + n], a gated residual (Op::AddGated taking the
// product, fused by src/backend/wgpu/fuse/). Uses the including file's `p.n`, `p.gate_off`.
@group(0) @binding(6) var<storage, read> c: ACT;
#if C_GATE
@group(0) @binding(12) var<storage, read> gate: ACT;
#endif

fn add_c(m: u32, n: u32, v: f32) -> f32 {
#if C_FULL
#if C_GATE
    return LD(c, m * p.n + n) + v * LD(gate, p.gate_off + n);
#else
    return v + LD(c, m * p.n + n);
#endif
#else
    return v + LD(c, n);
#endif
}
#endif

// Float element e of a chunk: float_at(the word holding it, e); W_SHIFT: e >> W_SHIFT is
// that word's index.
#if W_F32
const W_SHIFT: u32 = 0u;
fn float_at(word: u32, e: u32) -> f32 {
    return bitcast<f32>(word);
}
#endif
#if W_F16
const W_SHIFT: u32 = 1u;
fn float_at(word: u32, e: u32) -> f32 {
    return unpack2x16float(word)[e & 1u];
}
#endif
#if W_BF16
const W_SHIFT: u32 = 1u;
fn float_at(word: u32, e: u32) -> f32 {
    return bitcast<f32>(select(word << 16u, word & 0xffff0000u, (e & 1u) == 1u));
}
#endif
#if QUANT
#else
fn load_w(e: u32) -> f32 {
    return float_at(w[e >> W_SHIFT], e);
}

#if GATED
// A gated product's second (up) weight, in w's dtype and chunking.
@group(0) @binding(7) var<storage, read> w2: array<u32>;

fn load_w2(e: u32) -> f32 {
    return float_at(w2[e >> W_SHIFT], e);
}
#endif
#endif

#if QUANT
#if Q8_0
const CODE_WORDS: u32 = 8u;
#endif
#if Q4_0
const CODE_WORDS: u32 = 4u;
#endif
#if Q4_1
const CODE_WORDS: u32 = 4u;
#endif
#if Q5_0
const CODE_WORDS: u32 = 5u;
#endif
#if Q5_1
const CODE_WORDS: u32 = 5u;
#endif

// The word index of the first scale word: the chunk's blocks' codes come first.
var<private> scales_at: u32;

// Call first: the chunk holds `rows` rows of `nb` blocks.
fn quant_rows(rows: u32, nb: u32) {
    scales_at = rows * nb * CODE_WORDS;
}

// A weight block as 8 words of packed i8 (element 4t+i in byte i of word t), in the
// activations' order, with its scale d and min m (0 for the _0 types): value = q*d + m.
struct WBlock {
    q: array<u32, 8>,
    d: f32,
    m: f32,
}

// Nibbles n (0..15, one per byte) to the signed bytes n - 8.
fn signed4(v: u32) -> u32 {
    let t = v ^ 0x08080808u;
    return t | ((t & 0x08080808u) * 0x1eu);
}

// 5-bit values n (0..31, one per byte) to the signed bytes n - 16.
fn signed5(v: u32) -> u32 {
    let t = v ^ 0x10101010u;
    return t | ((t & 0x10101010u) * 0x0eu);
}

// Bits 0..3 of `bits` to bit 4 of bytes 0..3.
fn spread4(bits: u32) -> u32 {
    return ((bits & 1u) << 4u) | ((bits & 2u) << 11u) | ((bits & 4u) << 18u) | ((bits & 8u) << 25u);
}

// Block `blk` of the chunk (row r's block b is r * nb + b).
fn load_block(blk: u32) -> WBlock {
    var r: WBlock;
    let dm = unpack2x16float(w[scales_at + blk]);
    r.d = dm.x;
    r.m = dm.y;
    let c = blk * CODE_WORDS;
#if Q8_0
    for (var t = 0u; t < 8u; t++) {
        r.q[t] = w[c + t];
    }
#endif
#if Q4_0
    for (var t = 0u; t < 4u; t++) {
        let v = w[c + t];
        r.q[t] = signed4(v & 0x0f0f0f0fu);
        r.q[t + 4u] = signed4((v >> 4u) & 0x0f0f0f0fu);
    }
#endif
#if Q4_1
    for (var t = 0u; t < 4u; t++) {
        let v = w[c + t];
        r.q[t] = v & 0x0f0f0f0fu;
        r.q[t + 4u] = (v >> 4u) & 0x0f0f0f0fu;
    }
#endif
#if Q5_0
    let qh = w[c];
    for (var t = 0u; t < 4u; t++) {
        let v = w[c + 1u + t];
        r.q[t] = signed5((v & 0x0f0f0f0fu) | spread4(qh >> (4u * t)));
        r.q[t + 4u] = signed5(((v >> 4u) & 0x0f0f0f0fu) | spread4(qh >> (16u + 4u * t)));
    }
#endif
#if Q5_1
    let qh = w[c];
    for (var t = 0u; t < 4u; t++) {
        let v = w[c + 1u + t];
        r.q[t] = (v & 0x0f0f0f0fu) | spread4(qh >> (4u * t));
        r.q[t + 4u] = ((v >> 4u) & 0x0f0f0f0fu) | spread4(qh >> (16u + 4u * t));
    }
#endif
    return r;
}

// Byte i of the codes starting at word c.
fn code_byte(c: u32, i: u32) -> u32 {
    return (w[c + (i >> 2u)] >> ((i & 3u) * 8u)) & 0xffu;
}

// Element e of the row whose first block is `first`.
fn load_q(first: u32, e: u32) -> f32 {
    let blk = first + e / 32u;
    let j = e % 32u;
    let dm = unpack2x16float(w[scales_at + blk]);
    let c = blk * CODE_WORDS;
#if Q8_0
    return f32(bitcast<i32>(code_byte(c, j) << 24u) >> 24u) * dm.x;
#endif
#if Q4_0
    let q = (code_byte(c, j & 15u) >> (4u * (j >> 4u))) & 15u;
    return (f32(q) - 8.0) * dm.x;
#endif
#if Q4_1
    let q = (code_byte(c, j & 15u) >> (4u * (j >> 4u))) & 15u;
    return f32(q) * dm.x + dm.y;
#endif
#if Q5_0
    let q = ((code_byte(c + 1u, j & 15u) >> (4u * (j >> 4u))) & 15u) | (((w[c] >> j) & 1u) << 4u);
    return (f32(q) - 16.0) * dm.x;
#endif
#if Q5_1
    let q = ((code_byte(c + 1u, j & 15u) >> (4u * (j >> 4u))) & 15u) | (((w[c] >> j) & 1u) << 4u);
    return f32(q) * dm.x + dm.y;
#endif
}
#endif
