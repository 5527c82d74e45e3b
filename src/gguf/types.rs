//! ggml tensor types: ids, block sizes and byte sizes, as ggml defines them.

use crate::{Error, Result};

/// A ggml tensor element type. Ids are ggml's `enum ggml_type`; retired ids (4, 5, 31-33, 36-38)
/// and ids newer than ggml 0.26 are not listed and load as [`Error::UnsupportedType`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2_K,
    Q3_K,
    Q4_K,
    Q5_K,
    Q6_K,
    Q8_K,
    IQ2_XXS,
    IQ2_XS,
    IQ3_XXS,
    IQ1_S,
    IQ4_NL,
    IQ3_S,
    IQ2_S,
    IQ4_XS,
    I8,
    I16,
    I32,
    I64,
    F64,
    IQ1_M,
    BF16,
    TQ1_0,
    TQ2_0,
    MXFP4,
    NVFP4,
    Q1_0,
}

/// (type, ggml id, elements per block, bytes per block, name as ggml prints it)
const TABLE: &[(GgmlType, u32, usize, usize, &str)] = {
    use GgmlType::*;
    &[
        (F32, 0, 1, 4, "F32"),
        (F16, 1, 1, 2, "F16"),
        (Q4_0, 2, 32, 18, "Q4_0"),
        (Q4_1, 3, 32, 20, "Q4_1"),
        (Q5_0, 6, 32, 22, "Q5_0"),
        (Q5_1, 7, 32, 24, "Q5_1"),
        (Q8_0, 8, 32, 34, "Q8_0"),
        (Q8_1, 9, 32, 36, "Q8_1"),
        (Q2_K, 10, 256, 84, "Q2_K"),
        (Q3_K, 11, 256, 110, "Q3_K"),
        (Q4_K, 12, 256, 144, "Q4_K"),
        (Q5_K, 13, 256, 176, "Q5_K"),
        (Q6_K, 14, 256, 210, "Q6_K"),
        (Q8_K, 15, 256, 292, "Q8_K"),
        (IQ2_XXS, 16, 256, 66, "IQ2_XXS"),
        (IQ2_XS, 17, 256, 74, "IQ2_XS"),
        (IQ3_XXS, 18, 256, 98, "IQ3_XXS"),
        (IQ1_S, 19, 256, 50, "IQ1_S"),
        (IQ4_NL, 20, 32, 18, "IQ4_NL"),
        (IQ3_S, 21, 256, 110, "IQ3_S"),
        (IQ2_S, 22, 256, 82, "IQ2_S"),
        (IQ4_XS, 23, 256, 136, "IQ4_XS"),
        (I8, 24, 1, 1, "I8"),
        (I16, 25, 1, 2, "I16"),
        (I32, 26, 1, 4, "I32"),
        (I64, 27, 1, 8, "I64"),
        (F64, 28, 1, 8, "F64"),
        (IQ1_M, 29, 256, 56, "IQ1_M"),
        (BF16, 30, 1, 2, "BF16"),
        (TQ1_0, 34, 256, 54, "TQ1_0"),
        (TQ2_0, 35, 256, 66, "TQ2_0"),
        (MXFP4, 39, 32, 17, "MXFP4"),
        (NVFP4, 40, 64, 36, "NVFP4"),
        (Q1_0, 41, 128, 18, "Q1_0"),
    ]
};

impl GgmlType {
    /// The types this crate can dequantize and quantize.
    pub const SUPPORTED: [GgmlType; 8] = [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::Q8_0,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
    ];

    fn row(self) -> &'static (GgmlType, u32, usize, usize, &'static str) {
        TABLE
            .iter()
            .find(|r| r.0 == self)
            .expect("every variant has a table row")
    }

    pub fn from_id(id: u32) -> Result<Self> {
        TABLE
            .iter()
            .find(|r| r.1 == id)
            .map(|r| r.0)
            .ok_or(Error::UnsupportedType(id))
    }

    pub fn id(self) -> u32 {
        self.row().1
    }

    /// Elements per block (1 for plain types).
    pub fn block_size(self) -> usize {
        self.row().2
    }

    /// Bytes per block.
    pub fn type_size(self) -> usize {
        self.row().3
    }

    pub fn name(self) -> &'static str {
        self.row().4
    }

    /// Parses a name as ggml prints it, case-insensitively (`q8_0`, `F16`, ...).
    pub fn from_name(name: &str) -> Result<Self> {
        TABLE
            .iter()
            .find(|r| r.4.eq_ignore_ascii_case(name))
            .map(|r| r.0)
            .ok_or_else(|| Error::InvalidArgument(format!("unknown tensor type {name:?}")))
    }

    pub fn is_supported(self) -> bool {
        Self::SUPPORTED.contains(&self)
    }

    pub fn is_quantized(self) -> bool {
        self.block_size() > 1
    }

    /// Bytes taken by `n` elements, or `None` if `n` is not a whole number of blocks
    /// or the size overflows.
    pub fn bytes_for(self, n: u64) -> Option<u64> {
        let bs = self.block_size() as u64;
        if !n.is_multiple_of(bs) {
            return None;
        }
        (n / bs).checked_mul(self.type_size() as u64)
    }
}

impl std::fmt::Display for GgmlType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_retired_ids_are_errors() {
        for row in TABLE {
            assert_eq!(GgmlType::from_id(row.1).unwrap(), row.0);
            assert_eq!(GgmlType::from_name(row.4).unwrap(), row.0);
        }
        for retired in [4, 5, 31, 32, 33, 36, 37, 38, 42, 1000] {
            let err = GgmlType::from_id(retired).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!("unsupported tensor type {retired}")
            );
        }
    }

    #[test]
    fn byte_sizes() {
        assert_eq!(GgmlType::Q8_0.bytes_for(64), Some(68));
        assert_eq!(GgmlType::Q4_0.bytes_for(33), None);
        assert_eq!(GgmlType::F32.bytes_for(u64::MAX), None);
        assert_eq!(GgmlType::BF16.bytes_for(3), Some(6));
    }
}
