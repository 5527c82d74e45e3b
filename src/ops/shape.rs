//! Shape ops: reshape, permute/transpose, concat, slice. All but `reshape` copy into a new
//! f32 tensor.

use rayon::prelude::*;

use super::{f32s, out};
use crate::{Error, Result, Tensor};

/// A zero-copy view of `x` with a new shape (see [`Tensor::reshape`]).
pub fn reshape<'t>(x: &'t Tensor<'_>, shape: impl Into<Vec<usize>>) -> Result<Tensor<'t>> {
    x.view().reshape(shape)
}

fn check_axis(op: &'static str, axis: usize, rank: usize) -> Result<()> {
    if axis >= rank {
        return Err(Error::shape(
            op,
            format!("axis {axis} out of range for rank {rank}"),
        ));
    }
    Ok(())
}

/// General axis permutation: output dim `i` is input dim `perm[i]` (like `torch.permute`).
pub fn permute(x: &Tensor, perm: &[usize]) -> Result<Tensor<'static>> {
    const OP: &str = "permute";
    let r = x.rank();
    let mut seen = vec![false; r];
    if perm.len() != r
        || perm
            .iter()
            .any(|&p| p >= r || std::mem::replace(&mut seen[p], true))
    {
        return Err(Error::shape(
            OP,
            format!("{perm:?} is not a permutation of {r} axes"),
        ));
    }
    let xs = x.shape();
    let mut in_strides = vec![1usize; r];
    for i in (0..r.saturating_sub(1)).rev() {
        in_strides[i] = in_strides[i + 1] * xs[i + 1];
    }
    let oshape: Vec<usize> = perm.iter().map(|&p| xs[p]).collect();
    let ostr: Vec<usize> = perm.iter().map(|&p| in_strides[p]).collect();
    let xd = f32s(x)?;
    let n = x.numel();
    if r == 0 || n == 0 {
        return out(oshape, xd.into_owned());
    }
    let last = oshape[r - 1];
    let last_stride = ostr[r - 1];
    let mut o = vec![0.0f32; n];
    o.par_chunks_mut(last).enumerate().for_each(|(row, orow)| {
        // Offset of this output row's first element in the input.
        let mut rem = row;
        let mut base = 0;
        for d in (0..r - 1).rev() {
            base += (rem % oshape[d]) * ostr[d];
            rem /= oshape[d];
        }
        if last_stride == 1 {
            // The last axis stays last (e.g. [S, H, D] -> [H, S, D]): rows are copied whole.
            orow.copy_from_slice(&xd[base..base + last]);
        } else {
            for (j, v) in orow.iter_mut().enumerate() {
                *v = xd[base + j * last_stride];
            }
        }
    });
    out(oshape, o)
}

/// Swaps axes `a` and `b`.
pub fn transpose(x: &Tensor, a: usize, b: usize) -> Result<Tensor<'static>> {
    check_axis("transpose", a, x.rank())?;
    check_axis("transpose", b, x.rank())?;
    let mut perm: Vec<usize> = (0..x.rank()).collect();
    perm.swap(a, b);
    permute(x, &perm)
}

/// Concatenates tensors of equal rank whose dims agree except along `axis`.
pub fn concat(xs: &[&Tensor], axis: usize) -> Result<Tensor<'static>> {
    const OP: &str = "concat";
    let Some(first) = xs.first() else {
        return Err(Error::shape(OP, "no tensors to concatenate"));
    };
    let r = first.rank();
    check_axis(OP, axis, r)?;
    for t in xs {
        let ok = t.rank() == r && (0..r).all(|i| i == axis || t.shape()[i] == first.shape()[i]);
        if !ok {
            return Err(Error::shape(
                OP,
                format!(
                    "{:?} does not match {:?} off axis {axis}",
                    t.shape(),
                    first.shape()
                ),
            ));
        }
    }
    let outer: usize = first.shape()[..axis].iter().product();
    let inner: usize = first.shape()[axis + 1..].iter().product();
    let datas: Vec<_> = xs.iter().map(|t| f32s(t)).collect::<Result<_>>()?;
    let chunks: Vec<usize> = xs.iter().map(|t| t.shape()[axis] * inner).collect();
    let total: usize = chunks.iter().sum();
    let mut o = Vec::with_capacity(outer * total);
    for i in 0..outer {
        for (d, &c) in datas.iter().zip(&chunks) {
            o.extend_from_slice(&d[i * c..(i + 1) * c]);
        }
    }
    let mut shape = first.shape().to_vec();
    shape[axis] = xs.iter().map(|t| t.shape()[axis]).sum();
    out(shape, o)
}

/// Elements `start..start+len` along `axis`.
pub fn slice(x: &Tensor, axis: usize, start: usize, len: usize) -> Result<Tensor<'static>> {
    const OP: &str = "slice";
    check_axis(OP, axis, x.rank())?;
    let dim = x.shape()[axis];
    if start.checked_add(len).is_none_or(|e| e > dim) {
        return Err(Error::shape(
            OP,
            format!("{start}+{len} out of 0..{dim} on axis {axis}"),
        ));
    }
    let outer: usize = x.shape()[..axis].iter().product();
    let inner: usize = x.shape()[axis + 1..].iter().product();
    let xd = f32s(x)?;
    let mut o = Vec::with_capacity(outer * len * inner);
    for i in 0..outer {
        let b = (i * dim + start) * inner;
        o.extend_from_slice(&xd[b..b + len * inner]);
    }
    let mut shape = x.shape().to_vec();
    shape[axis] = len;
    out(shape, o)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testutil::Rng;

    fn iota(shape: &[usize]) -> Tensor<'static> {
        let n = shape.iter().product::<usize>();
        Tensor::from_f32(shape.to_vec(), (0..n).map(|i| i as f32).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn transpose_2d_hand() {
        let y = transpose(&iota(&[2, 3]), 0, 1).unwrap();
        assert_eq!(y.shape(), &[3, 2]);
        assert_eq!(y.as_f32().unwrap(), &[0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
    }

    #[test]
    fn permute_matches_index_formula_and_inverse_is_identity() {
        let (a, b, c) = (7, 13, 17);
        let mut r = Rng::new(9);
        let v = r.vec(a * b * c);
        let x = Tensor::from_f32(vec![a, b, c], v.clone()).unwrap();
        let y = permute(&x, &[2, 0, 1]).unwrap();
        assert_eq!(y.shape(), &[c, a, b]);
        let yv = y.as_f32().unwrap();
        for i in 0..a {
            for j in 0..b {
                for k in 0..c {
                    assert_eq!(yv[(k * a + i) * b + j], v[(i * b + j) * c + k]);
                }
            }
        }
        // Inverse of [2,0,1] is [1,2,0].
        let z = permute(&y, &[1, 2, 0]).unwrap();
        assert_eq!(z.shape(), &[a, b, c]);
        assert_eq!(z.as_f32().unwrap(), &v[..]);
        // A swap applied twice is the identity.
        let w = permute(&permute(&x, &[1, 0, 2]).unwrap(), &[1, 0, 2]).unwrap();
        assert_eq!(w.as_f32().unwrap(), &v[..]);
        assert!(permute(&x, &[0, 0, 1]).is_err());
        assert!(permute(&x, &[0, 1]).is_err());
    }

    #[test]
    fn concat_and_slice() {
        let a = iota(&[2, 2]);
        let b = Tensor::from_f32(vec![2, 1], vec![10.0, 11.0]).unwrap();
        let c = concat(&[&a, &b], 1).unwrap();
        assert_eq!(c.shape(), &[2, 3]);
        assert_eq!(c.as_f32().unwrap(), &[0.0, 1.0, 10.0, 2.0, 3.0, 11.0]);
        let d = concat(&[&a, &a], 0).unwrap();
        assert_eq!(
            d.as_f32().unwrap(),
            &[0.0, 1.0, 2.0, 3.0, 0.0, 1.0, 2.0, 3.0]
        );
        assert!(concat(&[&a, &b], 0).is_err());
        assert!(concat(&[], 0).is_err());

        let x = iota(&[3, 4, 2]);
        let s = slice(&x, 1, 1, 2).unwrap();
        assert_eq!(s.shape(), &[3, 2, 2]);
        assert_eq!(&s.as_f32().unwrap()[..4], &[2.0, 3.0, 4.0, 5.0]);
        assert_eq!(&s.as_f32().unwrap()[4..8], &[10.0, 11.0, 12.0, 13.0]);
        // Slicing the pieces of a concat gives them back.
        let back = slice(&c, 1, 2, 1).unwrap();
        assert_eq!(back.as_f32().unwrap(), b.as_f32().unwrap());
        assert!(slice(&x, 1, 3, 2).is_err());
        assert!(slice(&x, 3, 0, 1).is_err());
        let r = reshape(&x, vec![6, 4]).unwrap();
        assert!(r.is_borrowed());
        assert_eq!(r.shape(), &[6, 4]);
    }
}
