//! Binary elementwise ops with numpy-style broadcasting, and scalar ops.

use rayon::prelude::*;

use super::{f32s, out};
use crate::{Error, Result, Tensor};

/// The numpy broadcast of two shapes (align right; each dim pair equal or one of them 1).
pub fn broadcast_shape(a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    let r = a.len().max(b.len());
    let mut s = vec![0; r];
    for i in 0..r {
        let da = if i + a.len() >= r {
            a[i + a.len() - r]
        } else {
            1
        };
        let db = if i + b.len() >= r {
            b[i + b.len() - r]
        } else {
            1
        };
        s[i] = if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            return Err(Error::shape(
                "broadcast",
                format!("shapes {a:?} and {b:?} do not broadcast"),
            ));
        };
    }
    Ok(s)
}

/// Strides of `shape` laid out row-major, expressed in the index space of `out_shape`
/// (0 for broadcast dims).
fn broadcast_strides(shape: &[usize], out_shape: &[usize]) -> Vec<usize> {
    let r = out_shape.len();
    let mut st = vec![0; r];
    let mut acc = 1;
    for i in (0..shape.len()).rev() {
        let oi = i + r - shape.len();
        st[oi] = if shape[i] == 1 { 0 } else { acc };
        acc *= shape[i];
    }
    st
}

/// Whether `b` (left-padded with 1s) equals the trailing dims of `out`, so that
/// `b[i % b.numel()]` is its broadcast value at flat index `i`.
fn is_trailing(b: &[usize], out: &[usize]) -> bool {
    let b = {
        let lead = b.iter().take_while(|&&d| d == 1).count();
        &b[lead..]
    };
    b.len() <= out.len() && out[out.len() - b.len()..] == *b
}

fn binary(
    op: &'static str,
    a: &Tensor,
    b: &Tensor,
    f: impl Fn(f32, f32) -> f32 + Sync + Send,
) -> Result<Tensor<'static>> {
    let shape = broadcast_shape(a.shape(), b.shape()).map_err(|e| match e {
        Error::Shape { reason, .. } => Error::shape(op, reason),
        e => e,
    })?;
    let ad = f32s(a)?;
    let bd = f32s(b)?;
    let n: usize = shape.iter().product();
    const CH: usize = 4096;
    let mut o = vec![0.0f32; n];
    // A full operand and one repeating along the leading dims (same shape, a bias row):
    // row by row, no index arithmetic per element, so the loops vectorise.
    let trailing = |full: &[f32], rep: &[f32], o: &mut [f32], swap: bool| {
        let nr = rep.len();
        let ch = nr * (CH / nr).max(1);
        o.par_chunks_mut(ch)
            .zip(full.par_chunks(ch))
            .for_each(|(oc, fc)| {
                for (orow, frow) in oc.chunks_mut(nr).zip(fc.chunks(nr)) {
                    for ((v, &x), &y) in orow.iter_mut().zip(frow).zip(rep) {
                        *v = if swap { f(y, x) } else { f(x, y) };
                    }
                }
            });
    };
    if n > 0 && a.shape() == shape.as_slice() && is_trailing(b.shape(), &shape) {
        trailing(&ad, &bd, &mut o, false);
    } else if n > 0 && b.shape() == shape.as_slice() && is_trailing(a.shape(), &shape) {
        trailing(&bd, &ad, &mut o, true);
    } else {
        // General case: walk the output index, tracking each operand's offset.
        let sa = broadcast_strides(a.shape(), &shape);
        let sb = broadcast_strides(b.shape(), &shape);
        let r = shape.len();
        let mut idx = vec![0usize; r];
        let (mut ia, mut ib) = (0usize, 0usize);
        for v in o.iter_mut() {
            *v = f(ad[ia], bd[ib]);
            for d in (0..r).rev() {
                idx[d] += 1;
                ia += sa[d];
                ib += sb[d];
                if idx[d] < shape[d] {
                    break;
                }
                ia -= sa[d] * shape[d];
                ib -= sb[d] * shape[d];
                idx[d] = 0;
            }
        }
    }
    out(shape, o)
}

/// `a + b` with broadcasting (e.g. a bias `[N]` over `[M, N]`).
pub fn add(a: &Tensor, b: &Tensor) -> Result<Tensor<'static>> {
    binary("add", a, b, |x, y| x + y)
}

/// `a - b` with broadcasting.
pub fn sub(a: &Tensor, b: &Tensor) -> Result<Tensor<'static>> {
    binary("sub", a, b, |x, y| x - y)
}

/// `a * b` with broadcasting.
pub fn mul(a: &Tensor, b: &Tensor) -> Result<Tensor<'static>> {
    binary("mul", a, b, |x, y| x * y)
}

/// `a / b` with broadcasting.
pub fn div(a: &Tensor, b: &Tensor) -> Result<Tensor<'static>> {
    binary("div", a, b, |x, y| x / y)
}

/// `x * s`.
pub fn scale(x: &Tensor, s: f32) -> Result<Tensor<'static>> {
    let mut v = f32s(x)?.into_owned();
    v.par_chunks_mut(4096)
        .for_each(|c| c.iter_mut().for_each(|a| *a *= s));
    out(x.shape().to_vec(), v)
}

/// `x + s`.
pub fn add_scalar(x: &Tensor, s: f32) -> Result<Tensor<'static>> {
    let mut v = f32s(x)?.into_owned();
    v.par_chunks_mut(4096)
        .for_each(|c| c.iter_mut().for_each(|a| *a += s));
    out(x.shape().to_vec(), v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testutil::Rng;

    fn t(shape: &[usize], v: Vec<f32>) -> Tensor<'static> {
        Tensor::from_f32(shape.to_vec(), v).unwrap()
    }

    #[test]
    fn same_shape_and_bias() {
        let a = t(&[2, 3], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let b = t(&[3], vec![10.0, 20.0, 30.0]);
        assert_eq!(
            add(&a, &b).unwrap().as_f32().unwrap(),
            &[11.0, 22.0, 33.0, 14.0, 25.0, 36.0]
        );
        assert_eq!(
            add(&b, &a).unwrap().as_f32().unwrap(),
            &[11.0, 22.0, 33.0, 14.0, 25.0, 36.0]
        );
        assert_eq!(
            mul(&a, &a).unwrap().as_f32().unwrap(),
            &[1.0, 4.0, 9.0, 16.0, 25.0, 36.0]
        );
        assert_eq!(
            sub(&b, &a).unwrap().as_f32().unwrap(),
            &[9.0, 18.0, 27.0, 6.0, 15.0, 24.0]
        );
        assert_eq!(
            div(&a, &t(&[1], vec![2.0])).unwrap().as_f32().unwrap(),
            &[0.5, 1.0, 1.5, 2.0, 2.5, 3.0]
        );
        assert_eq!(scale(&a, -1.0).unwrap().as_f32().unwrap()[5], -6.0);
        assert_eq!(add_scalar(&a, 1.0).unwrap().as_f32().unwrap()[0], 2.0);
        let s = add(&a, &Tensor::scalar(1.0)).unwrap();
        assert_eq!(s.shape(), &[2, 3]);
        assert_eq!(s.as_f32().unwrap()[5], 7.0);
        // Many rows: several parallel chunks of whole rows, both operand orders.
        let (rows, cols) = (3001, 7);
        let big: Vec<f32> = (0..rows * cols).map(|i| i as f32).collect();
        let row: Vec<f32> = (0..cols).map(|j| 0.5 + j as f32).collect();
        let (bt, rt) = (t(&[rows, cols], big.clone()), t(&[1, cols], row.clone()));
        let d1 = sub(&bt, &rt).unwrap();
        let d2 = sub(&rt, &bt).unwrap();
        for i in 0..rows * cols {
            assert_eq!(d1.as_f32().unwrap()[i], big[i] - row[i % cols]);
            assert_eq!(d2.as_f32().unwrap()[i], row[i % cols] - big[i]);
        }
    }

    #[test]
    fn general_broadcast_matches_explicit_loops() {
        // a [4, 1, 3] * b [5, 1] -> [4, 5, 3]
        let mut r = Rng::new(8);
        let av = r.vec(12);
        let bv = r.vec(5);
        let y = mul(&t(&[4, 1, 3], av.clone()), &t(&[5, 1], bv.clone())).unwrap();
        assert_eq!(y.shape(), &[4, 5, 3]);
        let yv = y.as_f32().unwrap();
        for i in 0..4 {
            for j in 0..5 {
                for k in 0..3 {
                    assert_eq!(yv[(i * 5 + j) * 3 + k], av[i * 3 + k] * bv[j]);
                }
            }
        }
        // Column broadcast [2, 3] + [2, 1].
        let c = add(&t(&[2, 3], vec![0.0; 6]), &t(&[2, 1], vec![1.0, 2.0])).unwrap();
        assert_eq!(c.as_f32().unwrap(), &[1.0, 1.0, 1.0, 2.0, 2.0, 2.0]);
        // Middle-dim broadcast with a trailing-looking operand [1, 3] over [2, 1, 3]... and
        // a [3, 1] vs [1, 4] outer sum.
        let o = add(
            &t(&[3, 1], vec![0.0, 10.0, 20.0]),
            &t(&[1, 4], vec![1.0, 2.0, 3.0, 4.0]),
        )
        .unwrap();
        assert_eq!(o.shape(), &[3, 4]);
        assert_eq!(o.as_f32().unwrap()[4..8], [11.0, 12.0, 13.0, 14.0]);
    }

    #[test]
    fn incompatible_shapes_error() {
        let e = add(&t(&[2, 3], vec![0.0; 6]), &t(&[2], vec![0.0; 2])).unwrap_err();
        assert!(matches!(e, Error::Shape { op: "add", .. }));
        assert_eq!(
            broadcast_shape(&[8, 1, 6, 1], &[7, 1, 5]).unwrap(),
            vec![8, 7, 6, 5]
        );
        assert_eq!(broadcast_shape(&[0, 3], &[1, 3]).unwrap(), vec![0, 3]);
    }
}
