//! Softmax over the last dimension.

use rayon::prelude::*;

use super::kernels::exp_shifted;
use super::{f32s, out};
use crate::{Error, Result, Tensor};

/// In-place numerically stable softmax of one row. `-inf` entries get probability 0; a row
/// that is entirely `-inf` (fully masked) becomes all zeros rather than NaN.
pub fn softmax_row(row: &mut [f32]) {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if max == f32::NEG_INFINITY {
        row.fill(0.0);
        return;
    }
    let sum = exp_shifted(row, max);
    let inv = 1.0 / sum;
    for v in row.iter_mut() {
        *v *= inv;
    }
}

/// Softmax over the last dimension of `x` (see [`softmax_row`]).
pub fn softmax(x: &Tensor) -> Result<Tensor<'static>> {
    let Some(&d) = x.shape().last() else {
        return Err(Error::shape("softmax", "x must have rank >= 1"));
    };
    let mut v = f32s(x)?.into_owned();
    if d > 0 {
        v.par_chunks_mut(d).for_each(softmax_row);
    }
    out(x.shape().to_vec(), v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testutil::{assert_close, Rng};

    #[test]
    fn hand_values() {
        // softmax([0, ln 2, ln 5]) = [1, 2, 5] / 8
        let x = Tensor::from_f32(vec![1, 3], vec![0.0, 2f32.ln(), 5f32.ln()]).unwrap();
        let y = softmax(&x).unwrap();
        assert_close(y.as_f32().unwrap(), &[0.125, 0.25, 0.625], 1e-6);
    }

    #[test]
    fn rows_sum_to_one_and_large_values_are_stable() {
        let mut r = Rng::new(2);
        let mut v: Vec<f32> = r.vec(7 * 13).iter().map(|x| x * 50.0).collect();
        v[0] = 1000.0;
        v[1] = 999.0;
        let x = Tensor::from_f32(vec![7, 13], v).unwrap();
        let y = softmax(&x).unwrap();
        for row in y.as_f32().unwrap().chunks(13) {
            let s: f32 = row.iter().sum();
            assert!((s - 1.0).abs() < 1e-5, "{s}");
            assert!(row.iter().all(|p| (0.0..=1.0).contains(p)));
        }
        // 1000 vs 999 dominate row 0: p0/p1 = e.
        let row0 = &y.as_f32().unwrap()[..13];
        assert!((row0[0] / row0[1] - std::f32::consts::E).abs() < 1e-3);
    }

    #[test]
    fn neg_inf_entries_and_fully_masked_rows() {
        let ninf = f32::NEG_INFINITY;
        let x = Tensor::from_f32(vec![2, 3], vec![1.0, ninf, 1.0, ninf, ninf, ninf]).unwrap();
        let y = softmax(&x).unwrap();
        assert_eq!(y.as_f32().unwrap(), &[0.5, 0.0, 0.5, 0.0, 0.0, 0.0]);
        assert!(softmax(&Tensor::scalar(1.0)).is_err());
    }
}
