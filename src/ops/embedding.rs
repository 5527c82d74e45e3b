//! Embedding lookup.

use rayon::prelude::*;

use super::out;
use crate::{Error, Result, Tensor};

/// Gathers rows `ids` of `table [V, D]` (any dtype, quantized included; only the gathered
/// rows are dequantized). Returns `[ids.len(), D]`; an id `>= V` is an error.
pub fn embedding(table: &Tensor, ids: &[u32]) -> Result<Tensor<'static>> {
    const OP: &str = "embedding";
    if table.rank() != 2 {
        return Err(Error::shape(
            OP,
            format!("table must be [V, D], got {:?}", table.shape()),
        ));
    }
    let (v, d) = (table.shape()[0], table.shape()[1]);
    if let Some(&bad) = ids.iter().find(|&&i| i as usize >= v) {
        return Err(Error::shape(
            OP,
            format!("token id {bad} out of range for vocab {v}"),
        ));
    }
    let mut o = vec![0.0f32; ids.len() * d];
    if d > 0 {
        o.par_chunks_mut(d)
            .zip(ids.par_iter())
            .try_for_each(|(row, &id)| table.dequantize_rows(id as usize, row))?;
    }
    out(vec![ids.len(), d], o)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::{quant, GgmlType};
    use half::f16;

    #[test]
    fn gathers_rows_f32_and_f16() {
        let table = Tensor::from_f32(vec![3, 2], vec![0.0, 1.0, 10.0, 11.0, 20.0, 21.0]).unwrap();
        let y = embedding(&table, &[2, 0, 2]).unwrap();
        assert_eq!(y.shape(), &[3, 2]);
        assert_eq!(y.as_f32().unwrap(), &[20.0, 21.0, 0.0, 1.0, 20.0, 21.0]);
        let e = embedding(&table, &[3]).unwrap_err();
        assert!(matches!(e, Error::Shape { .. }));
        assert_eq!(embedding(&table, &[]).unwrap().shape(), &[0, 2]);

        let bytes: Vec<u8> = [0.5f32, 1.5, -2.0, 4.0]
            .iter()
            .flat_map(|&v| f16::from_f32(v).to_le_bytes())
            .collect();
        let t16 = Tensor::from_bytes(vec![2, 2], GgmlType::F16, bytes).unwrap();
        assert_eq!(
            embedding(&t16, &[1]).unwrap().as_f32().unwrap(),
            &[-2.0, 4.0]
        );
    }

    /// Needs the real `gguf::quant` (panics on the todo!() stubs).
    #[test]
    fn quantized_rows_equal_full_dequantization() {
        let (v, d) = (5, 64);
        let w: Vec<f32> = (0..v * d)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0)
            .collect();
        for ty in [GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q5_1] {
            let bytes = quant::quantize(ty, &w).unwrap();
            let mut full = vec![0.0f32; v * d];
            quant::dequantize(ty, &bytes, &mut full).unwrap();
            let t = Tensor::from_bytes(vec![v, d], ty, bytes).unwrap();
            let y = embedding(&t, &[4, 1]).unwrap();
            assert_eq!(&y.as_f32().unwrap()[..d], &full[4 * d..5 * d]);
            assert_eq!(&y.as_f32().unwrap()[d..], &full[d..2 * d]);
        }
    }
}
