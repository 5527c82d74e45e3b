//! Reading and writing an arch's `<arch>.<key>` metadata, and the seeded generator used
//! for random-weight models.

use crate::gguf::{GgufFile, GgufWriter};
use crate::{Error, Result};

/// Typed access to `<arch>.<key>` entries, with errors naming the full key.
pub struct Meta<'f> {
    file: &'f GgufFile,
    arch: &'static str,
}

impl<'f> Meta<'f> {
    pub fn new(file: &'f GgufFile, arch: &'static str) -> Self {
        Meta { file, arch }
    }

    fn key(&self, k: &str) -> String {
        format!("{}.{k}", self.arch)
    }

    pub fn usize(&self, k: &str) -> Result<usize> {
        let key = self.key(k);
        let v = self.file.get_u64(&key)?;
        usize::try_from(v)
            .ok()
            .filter(|&v| v <= 1 << 24)
            .ok_or_else(|| {
                Error::InvalidArgument(format!("metadata {key:?} = {v} is out of range"))
            })
    }

    pub fn f64(&self, k: &str) -> Result<f64> {
        let key = self.key(k);
        let v = self.file.get_f64(&key)?;
        if v.is_finite() {
            Ok(v)
        } else {
            Err(Error::InvalidArgument(format!(
                "metadata {key:?} = {v} is not finite"
            )))
        }
    }

    pub fn f32(&self, k: &str) -> Result<f32> {
        self.f64(k).map(|v| v as f32)
    }

    /// A real number the checkpoint wrote as a decimal: GGUF metadata holds it as f32, so
    /// this is the shortest decimal that rounds to that f32 (0.004, not 0.004000000189989805);
    /// a value no f32 holds exactly (an f64 entry) is returned as it is. Needed where the reference computes in f64 from the
    /// decimal and the value is amplified: the time embedding's fastest angle at t = 1 is
    /// 2 pi / 0.004 ~ 1571 rad, which 0.004's f32 rounding (4.7e-8 relative) shifts by 7e-5.
    pub fn decimal(&self, k: &str) -> Result<f64> {
        let v = self.f64(k)?;
        let f = v as f32;
        Ok(if f64::from(f) == v {
            f.to_string().parse().unwrap_or(v)
        } else {
            v
        })
    }
}

/// Writes `<arch>.<key>` entries (and `<arch>.architecture`, as vla.cpp files carry it).
pub struct Schema<'w, 'a> {
    w: &'w mut GgufWriter<'a>,
    arch: &'static str,
}

impl<'w, 'a> Schema<'w, 'a> {
    pub fn new(w: &'w mut GgufWriter<'a>, arch: &'static str) -> Result<Self> {
        w.add_metadata(format!("{arch}.architecture"), arch)?;
        Ok(Schema { w, arch })
    }

    pub fn u32(&mut self, k: &str, v: usize) -> Result<()> {
        let v = u32::try_from(v)
            .map_err(|_| Error::InvalidArgument(format!("{k} = {v} does not fit u32")))?;
        self.w.add_metadata(format!("{}.{k}", self.arch), v)
    }

    pub fn f32(&mut self, k: &str, v: f32) -> Result<()> {
        self.w.add_metadata(format!("{}.{k}", self.arch), v)
    }
}

/// SplitMix64: a tiny, well-mixed, seedable generator (no dependency needed for test data).
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_with(value: crate::gguf::Value) -> GgufFile {
        let mut w = GgufWriter::new();
        w.add_metadata("test.period", value).unwrap();
        GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap()
    }

    #[test]
    fn decimal_undoes_the_f32_rounding_of_a_written_decimal() {
        for x in [0.004f64, 1e-3, 0.1, 3.3333] {
            let f = file_with(crate::gguf::Value::F32(x as f32));
            let m = Meta::new(&f, "test");
            assert_ne!(
                m.f64("period").unwrap(),
                x,
                "{x} is exact in f32: not a test of the rounding"
            );
            assert_eq!(m.decimal("period").unwrap(), x);
        }
        // An f64 entry that is not an f32 is taken as written.
        let v = 0.0040000001;
        let f = file_with(crate::gguf::Value::F64(v));
        assert_eq!(Meta::new(&f, "test").decimal("period").unwrap(), v);
    }
}
