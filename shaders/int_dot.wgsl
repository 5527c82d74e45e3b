// Shared by matmul_quant.wgsl and foldquant.wgsl (prepended): the signed dot product of two
// words of four packed i8, with `dot4I8Packed` under INT_DOT, plain i32 multiplies otherwise.

fn dot4(a: u32, b: u32) -> i32 {
#if INT_DOT
    return dot4I8Packed(a, b);
#else
    let sh = vec4<u32>(24u, 16u, 8u, 0u);
    let av = bitcast<vec4<i32>>(vec4<u32>(a) << sh) >> vec4<u32>(24u);
    let bv = bitcast<vec4<i32>>(vec4<u32>(b) << sh) >> vec4<u32>(24u);
    return dot(av, bv);
#endif
}
