//! The CPU tensor: a row-major shape plus storage that is either f32 values or the raw
//! bytes of a ggml type (F16, BF16, Q8_0, ...). Storage may be borrowed (e.g. a slice of a
//! memory-mapped GGUF file, zero-copy) or owned.
//!
//! Shapes are row-major, last dimension fastest (PyTorch order). For a GGUF tensor this is
//! the reverse of ggml's `ne`, so the last dimension is ggml's `ne[0]`, and a quantized
//! tensor's blocks never straddle two rows: its last dimension must be a multiple of the
//! type's block size.
//!
//! Ops in [`crate::ops`] take `&Tensor` of any supported dtype (non-f32 inputs are
//! dequantized on the fly, weights of `matmul` one row block at a time) and return owned f32
//! tensors.
//!
//! Byte order: ggml data is little-endian; this crate assumes a little-endian host.

use std::borrow::Cow;
use std::fmt;

use crate::gguf::{quant, GgmlType};
use crate::{Error, Result};

#[derive(Clone)]
enum Data<'a> {
    F32(Cow<'a, [f32]>),
    /// Any non-f32 ggml type, as stored.
    Raw {
        dtype: GgmlType,
        bytes: Cow<'a, [u8]>,
    },
}

/// A row-major tensor that may borrow its storage for `'a`.
#[derive(Clone)]
pub struct Tensor<'a> {
    shape: Vec<usize>,
    data: Data<'a>,
}

/// Product of `shape`, or `None` on overflow. The empty shape (a scalar) has 1 element.
pub(crate) fn checked_numel(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

fn numel_or_err(op: &'static str, shape: &[usize]) -> Result<usize> {
    checked_numel(shape).ok_or_else(|| Error::shape(op, format!("shape {shape:?} overflows")))
}

/// Checks that a `dtype` tensor of `shape` is representable: blocks do not straddle rows.
fn check_blocks(op: &'static str, shape: &[usize], dtype: GgmlType) -> Result<()> {
    let bs = dtype.block_size();
    if bs > 1 {
        match shape.last() {
            Some(&last) if last % bs == 0 => {}
            Some(&last) => {
                return Err(Error::shape(
                    op,
                    format!("{dtype} needs the last dim ({last}) to be a multiple of {bs}"),
                ))
            }
            None => {
                return Err(Error::shape(
                    op,
                    format!("{dtype} tensor cannot be a scalar"),
                ))
            }
        }
    }
    Ok(())
}

fn le_f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn bytes_to_f32(bytes: Cow<'_, [u8]>) -> Cow<'_, [f32]> {
    match bytes {
        Cow::Borrowed(b) => match bytemuck::try_cast_slice::<u8, f32>(b) {
            Ok(s) => Cow::Borrowed(s),
            Err(_) => Cow::Owned(le_f32s(b)),
        },
        Cow::Owned(v) => Cow::Owned(le_f32s(&v)),
    }
}

/// Decodes `dst.len()` elements of `dtype` from the start of `src` into f32.
/// `src` must hold at least the bytes of `dst.len()` elements, a whole number of blocks.
pub fn dequantize_into(dtype: GgmlType, src: &[u8], dst: &mut [f32]) -> Result<()> {
    let need = dtype
        .bytes_for(dst.len() as u64)
        .ok_or_else(|| Error::shape("dequantize", format!("{} elements of {dtype}", dst.len())))?
        as usize;
    if src.len() < need {
        return Err(Error::shape(
            "dequantize",
            format!(
                "{} elements of {dtype} need {need} bytes, got {}",
                dst.len(),
                src.len()
            ),
        ));
    }
    quant::dequantize(dtype, &src[..need], dst)
}

impl<'a> Tensor<'a> {
    /// An f32 tensor from owned (`Vec<f32>`) or borrowed (`&[f32]`) values.
    pub fn from_f32(shape: impl Into<Vec<usize>>, data: impl Into<Cow<'a, [f32]>>) -> Result<Self> {
        let shape = shape.into();
        let data = data.into();
        let n = numel_or_err("from_f32", &shape)?;
        if n != data.len() {
            return Err(Error::shape(
                "from_f32",
                format!(
                    "shape {shape:?} has {n} elements but {} values were given",
                    data.len()
                ),
            ));
        }
        Ok(Tensor {
            shape,
            data: Data::F32(data),
        })
    }

    /// Unsigned bytes (camera frames as they arrive), kept unchanged in ggml's one-byte
    /// integer storage (`I8`): [`crate::graph::Op::InputU8`] reads them as 0..=255.
    pub fn from_u8(shape: impl Into<Vec<usize>>, bytes: impl Into<Cow<'a, [u8]>>) -> Result<Self> {
        Self::from_bytes(shape, GgmlType::I8, bytes)
    }

    /// A tensor over the raw little-endian bytes of `dtype` (e.g. a GGUF tensor's data).
    ///
    /// Checks that the byte length matches the shape and that the last dim is a multiple of
    /// the block size. F32 bytes are reinterpreted in place when aligned (borrowed bytes stay
    /// borrowed) and copied otherwise.
    pub fn from_bytes(
        shape: impl Into<Vec<usize>>,
        dtype: GgmlType,
        bytes: impl Into<Cow<'a, [u8]>>,
    ) -> Result<Self> {
        let shape = shape.into();
        let bytes = bytes.into();
        let n = numel_or_err("from_bytes", &shape)?;
        check_blocks("from_bytes", &shape, dtype)?;
        let need = dtype.bytes_for(n as u64).ok_or_else(|| {
            Error::shape(
                "from_bytes",
                format!("shape {shape:?} of {dtype} overflows"),
            )
        })?;
        if bytes.len() as u64 != need {
            return Err(Error::shape(
                "from_bytes",
                format!(
                    "shape {shape:?} of {dtype} needs {need} bytes, got {}",
                    bytes.len()
                ),
            ));
        }
        let data = if dtype == GgmlType::F32 {
            Data::F32(bytes_to_f32(bytes))
        } else {
            Data::Raw { dtype, bytes }
        };
        Ok(Tensor { shape, data })
    }

    /// An f32 tensor of zeros.
    pub fn zeros(shape: impl Into<Vec<usize>>) -> Result<Tensor<'static>> {
        let shape = shape.into();
        let n = numel_or_err("zeros", &shape)?;
        Tensor::from_f32(shape, vec![0.0f32; n])
    }

    /// A 0-dimensional f32 tensor.
    pub fn scalar(v: f32) -> Tensor<'static> {
        Tensor {
            shape: Vec::new(),
            data: Data::F32(Cow::Owned(vec![v])),
        }
    }

    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    pub fn dtype(&self) -> GgmlType {
        match &self.data {
            Data::F32(_) => GgmlType::F32,
            Data::Raw { dtype, .. } => *dtype,
        }
    }

    pub fn numel(&self) -> usize {
        // Validated at construction.
        checked_numel(&self.shape).unwrap_or(usize::MAX)
    }

    pub fn is_f32(&self) -> bool {
        matches!(self.data, Data::F32(_))
    }

    /// Whether the storage is borrowed (zero-copy).
    pub fn is_borrowed(&self) -> bool {
        match &self.data {
            Data::F32(c) => matches!(c, Cow::Borrowed(_)),
            Data::Raw { bytes, .. } => matches!(bytes, Cow::Borrowed(_)),
        }
    }

    /// The values of an f32 tensor; an error for any other dtype (see [`Tensor::to_f32`]).
    pub fn as_f32(&self) -> Result<&[f32]> {
        match &self.data {
            Data::F32(c) => Ok(c),
            Data::Raw { dtype, .. } => Err(Error::TypeNotSupported {
                op: "as_f32",
                ty: dtype.to_string(),
            }),
        }
    }

    /// Mutable values of an f32 tensor (copies borrowed storage first).
    pub fn as_f32_mut(&mut self) -> Result<&mut [f32]> {
        match &mut self.data {
            Data::F32(c) => Ok(c.to_mut()),
            Data::Raw { dtype, .. } => Err(Error::TypeNotSupported {
                op: "as_f32_mut",
                ty: dtype.to_string(),
            }),
        }
    }

    /// The stored bytes (for f32, the values' bytes).
    pub fn raw_bytes(&self) -> &[u8] {
        match &self.data {
            Data::F32(c) => bytemuck::cast_slice(c),
            Data::Raw { bytes, .. } => bytes,
        }
    }

    /// The values as f32: borrowed if already f32, dequantized otherwise.
    pub fn f32_cow(&self) -> Result<Cow<'_, [f32]>> {
        match &self.data {
            Data::F32(c) => Ok(Cow::Borrowed(&c[..])),
            Data::Raw { dtype, bytes } => {
                let mut out = vec![0.0f32; self.numel()];
                dequantize_into(*dtype, bytes, &mut out)?;
                Ok(Cow::Owned(out))
            }
        }
    }

    /// The values as an owned `Vec<f32>` (dequantizing if needed).
    pub fn to_vec_f32(&self) -> Result<Vec<f32>> {
        Ok(self.f32_cow()?.into_owned())
    }

    /// An owned f32 copy of this tensor (dequantizing if needed).
    pub fn to_f32(&self) -> Result<Tensor<'static>> {
        Ok(Tensor {
            shape: self.shape.clone(),
            data: Data::F32(Cow::Owned(self.to_vec_f32()?)),
        })
    }

    /// The same tensor with owned storage.
    pub fn into_owned(self) -> Tensor<'static> {
        let data = match self.data {
            Data::F32(c) => Data::F32(Cow::Owned(c.into_owned())),
            Data::Raw { dtype, bytes } => Data::Raw {
                dtype,
                bytes: Cow::Owned(bytes.into_owned()),
            },
        };
        Tensor {
            shape: self.shape,
            data,
        }
    }

    /// A zero-copy view of this tensor, borrowing its storage.
    pub fn view(&self) -> Tensor<'_> {
        let data = match &self.data {
            Data::F32(c) => Data::F32(Cow::Borrowed(&c[..])),
            Data::Raw { dtype, bytes } => Data::Raw {
                dtype: *dtype,
                bytes: Cow::Borrowed(&bytes[..]),
            },
        };
        Tensor {
            shape: self.shape.clone(),
            data,
        }
    }

    /// The same data under a new shape with the same element count (no copy). At most one
    /// dimension may be `usize::MAX`, meaning "inferred". Quantized tensors keep their last
    /// dim a multiple of the block size.
    pub fn reshape(mut self, shape: impl Into<Vec<usize>>) -> Result<Self> {
        let mut shape = shape.into();
        let n = self.numel();
        let infer: Vec<usize> = (0..shape.len())
            .filter(|&i| shape[i] == usize::MAX)
            .collect();
        if infer.len() > 1 {
            return Err(Error::shape("reshape", "more than one inferred dimension"));
        }
        if let Some(&i) = infer.first() {
            let rest: usize = shape
                .iter()
                .enumerate()
                .filter(|&(j, _)| j != i)
                .try_fold(1usize, |a, (_, &d)| a.checked_mul(d))
                .ok_or_else(|| Error::shape("reshape", format!("shape {shape:?} overflows")))?;
            if rest == 0 || !n.is_multiple_of(rest) {
                return Err(Error::shape(
                    "reshape",
                    format!("cannot infer a dim of {shape:?} for {n} elements"),
                ));
            }
            shape[i] = n / rest;
        }
        let m = numel_or_err("reshape", &shape)?;
        if m != n {
            return Err(Error::shape(
                "reshape",
                format!(
                    "cannot reshape {:?} ({n} elements) to {shape:?} ({m})",
                    self.shape
                ),
            ));
        }
        check_blocks("reshape", &shape, self.dtype())?;
        self.shape = shape;
        Ok(self)
    }

    /// Rows `start..start+len` along axis 0, zero-copy, for any dtype (e.g. one part of a
    /// fused QKV weight). For a rank-1 quantized tensor, bounds must fall on block edges.
    pub fn rows(&self, start: usize, len: usize) -> Result<Tensor<'_>> {
        let Some(&d0) = self.shape.first() else {
            return Err(Error::shape("rows", "scalar has no rows"));
        };
        let end = start
            .checked_add(len)
            .filter(|&e| e <= d0)
            .ok_or_else(|| Error::shape("rows", format!("rows {start}+{len} out of 0..{d0}")))?;
        let inner = self.numel().checked_div(d0).unwrap_or(0);
        let mut shape = self.shape.clone();
        shape[0] = len;
        let data = match &self.data {
            Data::F32(c) => Data::F32(Cow::Borrowed(&c[start * inner..end * inner])),
            Data::Raw { dtype, bytes } => {
                let off = |r: usize| {
                    dtype.bytes_for((r * inner) as u64).ok_or_else(|| {
                        Error::shape("rows", format!("row {r} is not on a {dtype} block edge"))
                    })
                };
                let (a, b) = (off(start)? as usize, off(end)? as usize);
                Data::Raw {
                    dtype: *dtype,
                    bytes: Cow::Borrowed(&bytes[a..b]),
                }
            }
        };
        Ok(Tensor { shape, data })
    }

    /// Dequantizes rows `start..start+dst.len()/row_len` of the tensor viewed as
    /// `[numel/row_len, row_len]`, where `row_len` is the last dim. Used by matmul and
    /// embedding to touch one row block at a time.
    pub(crate) fn dequantize_rows(&self, start: usize, dst: &mut [f32]) -> Result<()> {
        let row_len = self.shape.last().copied().unwrap_or(1);
        let offset = start * row_len;
        match &self.data {
            Data::F32(c) => {
                dst.copy_from_slice(&c[offset..offset + dst.len()]);
                Ok(())
            }
            Data::Raw { dtype, bytes } => {
                let off = dtype
                    .bytes_for(offset as u64)
                    .ok_or_else(|| Error::shape("dequantize_rows", "row is not on a block edge"))?
                    as usize;
                dequantize_into(*dtype, &bytes[off..], dst)
            }
        }
    }
}

impl fmt::Debug for Tensor<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Tensor({:?}, {}", self.shape, self.dtype())?;
        if let Data::F32(c) = &self.data {
            let n = c.len().min(8);
            write!(f, ", {:?}{}", &c[..n], if c.len() > n { "..." } else { "" })?;
        }
        write!(f, ")")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::{bf16, f16};

    #[test]
    fn from_f32_checks_length() {
        assert!(Tensor::from_f32(vec![2, 3], vec![0.0; 6]).is_ok());
        let e = Tensor::from_f32(vec![2, 3], vec![0.0; 5]).unwrap_err();
        assert!(matches!(e, Error::Shape { .. }));
        let s = Tensor::from_f32(vec![], vec![1.5]).unwrap();
        assert_eq!(s.numel(), 1);
        assert!(Tensor::from_f32(vec![usize::MAX, 3], vec![]).is_err());
    }

    #[test]
    fn from_bytes_f32_borrows_when_aligned_and_copies_when_not() {
        let vals = [1.0f32, -2.0, 3.5, 4.25];
        let bytes: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        // A buffer with room to pick an aligned and a misaligned start.
        let mut buf = vec![0u8; bytes.len() + 8];
        let align = buf.as_ptr().align_offset(4);
        buf[align..align + 16].copy_from_slice(&bytes);
        let t = Tensor::from_bytes(vec![2, 2], GgmlType::F32, &buf[align..align + 16]).unwrap();
        assert!(t.is_borrowed());
        assert_eq!(t.as_f32().unwrap(), &vals);
        let mis = align + 1;
        buf[mis..mis + 16].copy_from_slice(&bytes);
        let t = Tensor::from_bytes(vec![4], GgmlType::F32, &buf[mis..mis + 16]).unwrap();
        assert!(!t.is_borrowed());
        assert_eq!(t.as_f32().unwrap(), &vals);
        assert_eq!(t.dtype(), GgmlType::F32);
    }

    #[test]
    fn from_bytes_validates_size_and_blocks() {
        // Q8_0: 32 elems per 34-byte block.
        assert!(Tensor::from_bytes(vec![2, 32], GgmlType::Q8_0, vec![0u8; 68]).is_ok());
        assert!(Tensor::from_bytes(vec![2, 32], GgmlType::Q8_0, vec![0u8; 67]).is_err());
        // 64 elements, but rows of 16 split blocks.
        assert!(Tensor::from_bytes(vec![4, 16], GgmlType::Q8_0, vec![0u8; 68]).is_err());
        assert!(Tensor::from_bytes(vec![3], GgmlType::F16, vec![0u8; 6]).is_ok());
        assert!(Tensor::from_bytes(vec![3], GgmlType::F16, vec![0u8; 8]).is_err());
    }

    #[test]
    fn f16_bf16_to_f32() {
        let vals = [0.5f32, -1.25, 3.0, 65504.0, 1e-3];
        let fb: Vec<u8> = vals
            .iter()
            .flat_map(|&v| f16::from_f32(v).to_le_bytes())
            .collect();
        let t = Tensor::from_bytes(vec![5], GgmlType::F16, &fb[..]).unwrap();
        assert!(t.as_f32().is_err());
        let f = t.to_f32().unwrap();
        for (a, b) in f.as_f32().unwrap().iter().zip(vals) {
            assert!((a - b).abs() <= b.abs() * 1e-3, "{a} vs {b}");
        }
        // Misaligned F16 bytes.
        let mut buf = vec![0u8; fb.len() + 1];
        buf[1..].copy_from_slice(&fb);
        let t2 = Tensor::from_bytes(vec![5], GgmlType::F16, &buf[1..]).unwrap();
        assert_eq!(t2.to_vec_f32().unwrap(), f.to_vec_f32().unwrap());

        let bb: Vec<u8> = vals
            .iter()
            .flat_map(|&v| bf16::from_f32(v).to_le_bytes())
            .collect();
        let t = Tensor::from_bytes(vec![5], GgmlType::BF16, bb).unwrap();
        for (a, b) in t.to_vec_f32().unwrap().iter().zip(vals) {
            assert!((a - b).abs() <= b.abs() * 1e-2, "{a} vs {b}");
        }
    }

    #[test]
    fn reshape_and_rows() {
        let t = Tensor::from_f32(vec![2, 3], (0..6).map(|i| i as f32).collect::<Vec<_>>()).unwrap();
        let r = t.view().reshape(vec![3, usize::MAX]).unwrap();
        assert_eq!(r.shape(), &[3, 2]);
        assert!(t.view().reshape(vec![4, 2]).is_err());
        let rows = r.rows(1, 2).unwrap();
        assert_eq!(rows.shape(), &[2, 2]);
        assert_eq!(rows.as_f32().unwrap(), &[2.0, 3.0, 4.0, 5.0]);
        assert!(r.rows(2, 2).is_err());

        let q = Tensor::from_bytes(vec![3, 32], GgmlType::Q8_0, vec![7u8; 102]).unwrap();
        let qr = q.rows(1, 2).unwrap();
        assert_eq!(qr.shape(), &[2, 32]);
        assert_eq!(qr.raw_bytes().len(), 68);
        assert!(q.view().reshape(vec![6, 16]).is_err());
        assert!(q.view().reshape(vec![1, 96]).is_ok());
        let owned = qr.into_owned();
        assert!(!owned.is_borrowed());
    }

    #[test]
    fn as_f32_mut_copies_borrowed() {
        let v = [1.0f32, 2.0];
        let mut t = Tensor::from_f32(vec![2], &v[..]).unwrap();
        assert!(t.is_borrowed());
        t.as_f32_mut().unwrap()[0] = 9.0;
        assert_eq!(t.as_f32().unwrap(), &[9.0, 2.0]);
        assert_eq!(v[0], 1.0);
    }
}
