// Weight decoders shared by matmul.wgsl, matmul_quant.wgsl and embedding.wgsl (prepended to each; the
// including file declares `w: array<u32>`, the raw weight chunk as GGUF stores it).
// Template: one of W_F32 | W_F16 | W_BF16 (float element e) or QUANT plus one of
// Q8_0 | Q4_0 | Q4_1 | Q5_0 | Q5_1 (ggml blocks of 32, 34/18/20/22/24 bytes: not 4-byte
// aligned, read by byte offset from the u32 words).

#if ADD_C
// The matmul's fused addend (Op::MatMul's third input), for output row m and column n of y
// (all chunks): c[n], a bias, or c[m, n] with C_FULL. Uses the including file's `p.n`.
@group(0) @binding(6) var<storage, read> c: ACT;

fn addend(m: u32, n: u32) -> f32 {
#if C_FULL
    return LD(c, m * p.n + n);
#else
    return LD(c, n);
#endif
}
#endif

// 4 bytes at byte offset o, any alignment.
fn word_at(o: u32) -> u32 {
    let i = o >> 2u;
    let sh = (o & 3u) * 8u;
    let lo = w[i];
    if (sh == 0u) {
        return lo;
    }
    return (lo >> sh) | (w[i + 1u] << (32u - sh));
}

fn byte_at(o: u32) -> u32 {
    return (w[o >> 2u] >> ((o & 3u) * 8u)) & 0xffu;
}

// f16 at an even byte offset.
fn half_at(o: u32) -> f32 {
    return unpack2x16float(w[o >> 2u])[(o >> 1u) & 1u];
}

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
#endif

#if QUANT
#if Q8_0
const BLOCK_BYTES: u32 = 34u;
#endif
#if Q4_0
const BLOCK_BYTES: u32 = 18u;
#endif
#if Q4_1
const BLOCK_BYTES: u32 = 20u;
#endif
#if Q5_0
const BLOCK_BYTES: u32 = 22u;
#endif
#if Q5_1
const BLOCK_BYTES: u32 = 24u;
#endif

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

// The block at byte offset b.
fn load_block(b: u32) -> WBlock {
    var r: WBlock;
    r.d = half_at(b);
#if Q8_0
    for (var t = 0u; t < 8u; t++) {
        r.q[t] = word_at(b + 2u + 4u * t);
    }
#endif
#if Q4_0
    for (var t = 0u; t < 4u; t++) {
        let v = word_at(b + 2u + 4u * t);
        r.q[t] = signed4(v & 0x0f0f0f0fu);
        r.q[t + 4u] = signed4((v >> 4u) & 0x0f0f0f0fu);
    }
#endif
#if Q4_1
    r.m = half_at(b + 2u);
    for (var t = 0u; t < 4u; t++) {
        let v = w[(b >> 2u) + 1u + t];
        r.q[t] = v & 0x0f0f0f0fu;
        r.q[t + 4u] = (v >> 4u) & 0x0f0f0f0fu;
    }
#endif
#if Q5_0
    let qh = word_at(b + 2u);
    for (var t = 0u; t < 4u; t++) {
        let v = word_at(b + 6u + 4u * t);
        r.q[t] = signed5((v & 0x0f0f0f0fu) | spread4(qh >> (4u * t)));
        r.q[t + 4u] = signed5(((v >> 4u) & 0x0f0f0f0fu) | spread4(qh >> (16u + 4u * t)));
    }
#endif
#if Q5_1
    r.m = half_at(b + 2u);
    let qh = w[(b >> 2u) + 1u];
    for (var t = 0u; t < 4u; t++) {
        let v = w[(b >> 2u) + 2u + t];
        r.q[t] = (v & 0x0f0f0f0fu) | spread4(qh >> (4u * t));
        r.q[t + 4u] = ((v >> 4u) & 0x0f0f0f0fu) | spread4(qh >> (16u + 4u * t));
    }
#endif
    return r;
}

// Element e of the row starting at byte rb.
fn load_q(rb: u32, e: u32) -> f32 {
    let b = rb + (e / 32u) * BLOCK_BYTES;
    let j = e % 32u;
    let d = half_at(b);
#if Q8_0
    return f32(bitcast<i32>(byte_at(b + 2u + j) << 24u) >> 24u) * d;
#endif
#if Q4_0
    let q = (byte_at(b + 2u + (j & 15u)) >> (4u * (j >> 4u))) & 15u;
    return (f32(q) - 8.0) * d;
#endif
#if Q4_1
    let q = (byte_at(b + 4u + (j & 15u)) >> (4u * (j >> 4u))) & 15u;
    return f32(q) * d + half_at(b + 2u);
#endif
#if Q5_0
    let q = ((byte_at(b + 6u + (j & 15u)) >> (4u * (j >> 4u))) & 15u) | (((word_at(b + 2u) >> j) & 1u) << 4u);
    return (f32(q) - 16.0) * d;
#endif
#if Q5_1
    let q = ((byte_at(b + 8u + (j & 15u)) >> (4u * (j >> 4u))) & 15u) | (((w[(b >> 2u) + 1u] >> j) & 1u) << 4u);
    return f32(q) * d + half_at(b + 2u);
#endif
}
#endif
