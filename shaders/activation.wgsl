// Activations shared by elementwise.wgsl and the gated epilogues of gemm_tiled.wgsl and
// matmul_quant.wgsl's matvec (prepended to each).

fn silu(x: f32) -> f32 {
    return x / (1.0 + exp(-x));
}

fn gelu_tanh(x: f32) -> f32 {
    // tanh overflows to NaN on some drivers for large |u|: clamp, tanh(15) == 1 in f32
    let u = clamp(0.7978845608028654 * (x + 0.044715 * x * x * x), -15.0, 15.0);
    return 0.5 * x * (1.0 + tanh(u));
}

#if GATED
// A gated product's output act(gate) * up: SILU, else tanh-GELU.
fn gated_act(gate: f32, up: f32) -> f32 {
#if SILU
    return silu(gate) * up;
#else
    return gelu_tanh(gate) * up;
#endif
}
#endif
