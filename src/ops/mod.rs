//! CPU reference ops.
//!
//! Every op takes `&Tensor` inputs of any supported dtype (non-f32 inputs are converted to
//! f32 first; `matmul`/`linear`/`embedding` weights are dequantized one row block at a time,
//! or, for Q8_0/Q4_0/Q5_0 on CPUs with AVX512-VNNI, multiplied as integers: `qgemm`)
//! and returns an owned f32 tensor. Bad shapes are reported as [`crate::Error::Shape`], never
//! panics. Shapes are row-major (PyTorch order).
//!
//! Layout conventions:
//! - linear weights are `[N, K]` (out, in); `matmul(x [.., M, K], w [N, K]) -> [.., M, N]`;
//! - RoPE input is `[seq, heads, head_dim]` by default ([`RopeLayout`] selects
//!   `[heads, seq, head_dim]`);
//! - attention takes `q [Sq, Hq, D]`, `k [Sk, Hkv, D]`, `v [Sk, Hkv, Dv]` (heads inside
//!   positions, as projections lay them out) and returns `[Sq, Hq, Dv]`;
//! - images are `[C, H, W]`; the convolution ops ([`im2col`], [`max_pool`]) take feature
//!   maps channels last, `[H, W, C]`.

mod activation;
mod attention;
mod attention_kernels;
mod conv;
mod elementwise;
mod embedding;
mod fdot;
pub mod foldquant;
pub(crate) mod kernels;
mod matmul;
mod norm;
mod panels;
pub mod peak;
mod qgemm;
mod rope;
mod shape;
mod softmax;
pub mod ternary;

pub use activation::{
    erf, erfc, geglu, gelu_erf, gelu_erf_f32, gelu_tanh, gelu_tanh_f32, relu, sigmoid, silu,
    silu_f32, swiglu, tanh,
};
pub use attention::{attention, Mask};
pub use conv::{conv_matmul, im2col, max_pool, patch_embed, Window};
pub use elementwise::{add, add_scalar, broadcast_shape, div, mul, scale, sub};
pub use embedding::embedding;
pub use kernels::dot;
pub use matmul::{bmm, linear, matmul, matmul_add, matmul_add_packed, PackedWeight};
pub use norm::{layer_norm, layer_norm_no_affine, rms_norm, rms_norm_gemma, rms_norm_offset};
pub use qgemm::IntTiles;
pub use rope::{rope, RopeConfig, RopeLayout, RopeMode};
pub use shape::{concat, permute, reshape, slice, transpose};
pub use softmax::{softmax, softmax_row};

use std::borrow::Cow;

use crate::{Result, Tensor};

/// An f32 view of `t`, converting if needed.
pub(crate) fn f32s<'t>(t: &'t Tensor<'_>) -> Result<Cow<'t, [f32]>> {
    t.f32_cow()
}

/// Builds an owned f32 tensor whose shape and length are known to agree.
pub(crate) fn out(shape: Vec<usize>, data: Vec<f32>) -> Result<Tensor<'static>> {
    Tensor::from_f32(shape, data)
}

/// Shared test helpers: a tiny deterministic PRNG and comparisons.
#[cfg(test)]
pub(crate) mod testutil {
    pub struct Rng(u64);
    impl Rng {
        pub fn new(seed: u64) -> Self {
            Rng(seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407))
        }
        pub fn next_u32(&mut self) -> u32 {
            // xorshift64*
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            (self.0.wrapping_mul(0x2545F4914F6CDD1D) >> 32) as u32
        }
        /// Uniform in [-1, 1).
        pub fn f32(&mut self) -> f32 {
            (self.next_u32() as f64 / 2147483648.0 - 1.0) as f32
        }
        pub fn vec(&mut self, n: usize) -> Vec<f32> {
            (0..n).map(|_| self.f32()).collect()
        }
    }

    #[track_caller]
    pub fn assert_close(a: &[f32], b: &[f32], tol: f32) {
        assert_eq!(a.len(), b.len(), "lengths differ");
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            let d = (x - y).abs();
            assert!(
                d <= tol * (1.0 + y.abs()) && !x.is_nan(),
                "element {i}: {x} vs {y} (diff {d}, tol {tol})"
            );
        }
    }
}
