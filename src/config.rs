//! Model configs as nested parts, each listing its `<arch>.<key>` metadata once.
//!
//! A part implements [`Section`]: [`Section::keys`] names every key with the field it fills,
//! and the same list serves reading ([`read`]), writing ([`write`]) and error messages;
//! [`Section::check`] bounds the part's own values. An arch's config is a struct of parts
//! whose `keys` calls theirs, plus the arch's own keys.
//!
//! The bounds ([`limits`]) exist because many sizes are fixed by no tensor's shape (layer
//! counts, sequence lengths, chunk size, step count): a hostile or broken file could
//! otherwise make a load or every request allocate without end, loop for hours, divide by
//! zero, or hand ggml an epsilon it aborts on.

use crate::gguf::{GgufFile, GgufWriter};
use crate::{Error, Result};

/// Bounds far above any released policy's sizes (SmolVLA, pi0, pi0.5: 16-27 layers, under
/// 1,000 tokens, chunks of 50, 10 steps, 32-dimensional state and action).
pub mod limits {
    pub const MAX_LAYERS: usize = 1024;
    pub const MAX_PATCHES_PER_SIDE: usize = 1024;
    pub const MAX_IMAGES: usize = 16;
    /// Prefix plus suffix tokens: the attention masks hold (prefix + suffix)^2 floats.
    pub const MAX_SEQUENCE: usize = 8192;
    pub const MAX_CHUNK: usize = 1024;
    /// Denoising steps, the model's own or `--steps`.
    pub const MAX_STEPS: usize = 1000;
    /// State and action widths (padded and real).
    pub const MAX_ROBOT_DIM: usize = 4096;
}

/// Visits a config's keys: a reader fills each field from the file, a writer stores it.
pub trait Keys {
    fn usize(&mut self, key: &str, v: &mut usize) -> Result<()>;
    fn f32(&mut self, key: &str, v: &mut f32) -> Result<()>;
    /// A real number the checkpoint wrote as a decimal (stored as f32; see [`Meta::decimal`]).
    fn decimal(&mut self, key: &str, v: &mut f64) -> Result<()>;
    /// A key that may be absent: `absent` is its value then.
    fn usize_or(&mut self, key: &str, v: &mut usize, absent: usize) -> Result<()>;
    /// A real-valued key that may be absent (files written before it existed).
    fn f32_or(&mut self, key: &str, v: &mut f32, absent: f32) -> Result<()>;
    /// A value derived from others, written for readers such as vla.cpp, never read (so
    /// `v` runs only on a checked config: [`write`] checks first).
    fn derived(&mut self, key: &str, v: &dyn Fn() -> usize) -> Result<()>;

    fn u32(&mut self, key: &str, v: &mut u32) -> Result<()> {
        let mut x = *v as usize;
        self.usize(key, &mut x)?;
        *v = u32::try_from(x).map_err(|_| {
            Error::InvalidArgument(format!("metadata {key:?} = {x} is out of range"))
        })?;
        Ok(())
    }
}

/// `<arch>.<key>`: an array of u32 (token ids, layer indices), each checked to fit.
pub fn read_u32s(file: &GgufFile, arch: &str, key: &str) -> Result<Vec<u32>> {
    let key = format!("{arch}.{key}");
    file.get_array(&key)?
        .iter()
        .map(|v| {
            v.as_u64()
                .and_then(|x| u32::try_from(x).ok())
                .ok_or_else(|| Error::InvalidArgument(format!("{key}: expected an array of u32")))
        })
        .collect()
}

/// Writes `<arch>.<key>` as an array of u32 ([`read_u32s`]).
pub fn write_u32s(w: &mut GgufWriter, arch: &str, key: &str, v: &[u32]) -> Result<()> {
    use crate::gguf::{Value, ValueType};
    let items = v.iter().map(|&i| Value::U32(i)).collect();
    w.add_metadata(format!("{arch}.{key}"), Value::Array(ValueType::U32, items))
}

/// One part of a config: its keys and its own checks.
pub trait Section {
    fn keys(&mut self, k: &mut dyn Keys) -> Result<()>;
    /// The first of the part's checks that fails, as a sentence naming the key.
    fn check(&self) -> std::result::Result<(), String>;
}

/// Reads `section`'s keys under `<arch>.` into `s` (which holds what the file does not
/// say: the arch's fixed options), then checks it.
pub fn read<S: Section>(file: &GgufFile, arch: &str, mut s: S) -> Result<S> {
    s.keys(&mut Meta::new(file, arch))?;
    check(&s, arch)?;
    Ok(s)
}

/// [`Section::check`] as an error naming the arch.
pub fn check<S: Section>(s: &S, arch: &str) -> Result<()> {
    s.check()
        .map_err(|why| Error::InvalidArgument(format!("{arch} config: {why}")))
}

/// Checks `section`, then writes `<arch>.architecture` and its keys under `<arch>.`.
pub fn write<S: Section + Clone>(section: &S, w: &mut GgufWriter, arch: &str) -> Result<()> {
    w.add_metadata(format!("{arch}.architecture"), arch)?;
    write_keys(section, w, arch)
}

/// Checks `section`, then writes its keys under `<arch>.` (an arch whose
/// `<arch>.architecture` names a variant writes that itself).
pub fn write_keys<S: Section + Clone>(section: &S, w: &mut GgufWriter, arch: &str) -> Result<()> {
    check(section, arch)?;
    section.clone().keys(&mut Schema { w, arch })
}

/// `x` in `lo..=hi`, or a sentence naming `key`.
pub fn bounded(key: &str, x: usize, lo: usize, hi: usize) -> std::result::Result<(), String> {
    if (lo..=hi).contains(&x) {
        Ok(())
    } else {
        Err(format!("{key} {x}: expected {lo} to {hi}"))
    }
}

/// `x > 0`, or a sentence naming `key`.
pub fn positive(key: &str, x: usize) -> std::result::Result<(), String> {
    if x > 0 {
        Ok(())
    } else {
        Err(format!("{key} 0: must be positive"))
    }
}

/// The first failing `(ok, why)` pair's sentence.
pub fn first_failing(checks: &[(bool, &str)]) -> std::result::Result<(), String> {
    match checks.iter().find(|(ok, _)| !ok) {
        Some((_, why)) => Err((*why).to_owned()),
        None => Ok(()),
    }
}

/// Typed access to `<arch>.<key>` entries, with errors naming the full key.
pub struct Meta<'f> {
    file: &'f GgufFile,
    arch: String,
}

impl<'f> Meta<'f> {
    pub fn new(file: &'f GgufFile, arch: &str) -> Self {
        Meta {
            file,
            arch: arch.to_owned(),
        }
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

    /// A real number the checkpoint wrote as a decimal: GGUF metadata holds it as f32, so
    /// this is the shortest decimal that rounds to that f32 (0.004, not 0.004000000189989805);
    /// a value no f32 holds exactly (an f64 entry) is returned as it is. Needed where the
    /// reference computes in f64 from the decimal and the value is amplified: the time
    /// embedding's fastest angle at t = 1 is 2 pi / 0.004 ~ 1571 rad, which 0.004's f32
    /// rounding (4.7e-8 relative) shifts by 7e-5.
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

impl Keys for Meta<'_> {
    fn usize(&mut self, key: &str, v: &mut usize) -> Result<()> {
        *v = Meta::usize(self, key)?;
        Ok(())
    }

    fn f32(&mut self, key: &str, v: &mut f32) -> Result<()> {
        *v = self.f64(key)? as f32;
        Ok(())
    }

    fn decimal(&mut self, key: &str, v: &mut f64) -> Result<()> {
        *v = Meta::decimal(self, key)?;
        Ok(())
    }

    fn usize_or(&mut self, key: &str, v: &mut usize, absent: usize) -> Result<()> {
        *v = match self.file.get_u64(&self.key(key)) {
            Err(Error::MetadataNotFound(_)) => absent,
            _ => Meta::usize(self, key)?,
        };
        Ok(())
    }

    fn f32_or(&mut self, key: &str, v: &mut f32, absent: f32) -> Result<()> {
        *v = match self.file.get_f64(&self.key(key)) {
            Err(Error::MetadataNotFound(_)) => absent,
            _ => self.f64(key)? as f32,
        };
        Ok(())
    }

    fn derived(&mut self, _key: &str, _v: &dyn Fn() -> usize) -> Result<()> {
        Ok(())
    }
}

/// Writes `<arch>.<key>` entries.
struct Schema<'w, 'a> {
    w: &'w mut GgufWriter<'a>,
    arch: &'w str,
}

impl Keys for Schema<'_, '_> {
    fn usize(&mut self, key: &str, v: &mut usize) -> Result<()> {
        self.put(key, *v)
    }

    fn f32(&mut self, key: &str, v: &mut f32) -> Result<()> {
        self.w.add_metadata(format!("{}.{key}", self.arch), *v)
    }

    fn decimal(&mut self, key: &str, v: &mut f64) -> Result<()> {
        self.f32(key, &mut (*v as f32))
    }

    fn usize_or(&mut self, key: &str, v: &mut usize, _absent: usize) -> Result<()> {
        self.usize(key, v)
    }

    fn f32_or(&mut self, key: &str, v: &mut f32, _absent: f32) -> Result<()> {
        self.f32(key, v)
    }

    fn derived(&mut self, key: &str, v: &dyn Fn() -> usize) -> Result<()> {
        self.put(key, v())
    }
}

impl Schema<'_, '_> {
    fn put(&mut self, key: &str, v: usize) -> Result<()> {
        let v = u32::try_from(v)
            .map_err(|_| Error::InvalidArgument(format!("{key} = {v} does not fit u32")))?;
        self.w.add_metadata(format!("{}.{key}", self.arch), v)
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

    #[derive(Clone, Debug, Default, PartialEq)]
    struct Part {
        n: usize,
        eps: f32,
        period: f64,
        opt: usize,
    }

    impl Section for Part {
        fn keys(&mut self, k: &mut dyn Keys) -> Result<()> {
            k.usize("n", &mut self.n)?;
            k.f32("eps", &mut self.eps)?;
            k.decimal("period", &mut self.period)?;
            k.usize_or("opt", &mut self.opt, 7)?;
            let n = self.n;
            k.derived("twice_n", &|| 2 * n)
        }

        fn check(&self) -> std::result::Result<(), String> {
            positive("n", self.n)
        }
    }

    #[test]
    fn one_key_list_reads_back_what_it_wrote_and_checks_it() {
        let part = Part {
            n: 3,
            eps: 1e-6,
            period: 4e-3,
            opt: 1,
        };
        let mut w = GgufWriter::new();
        write(&part, &mut w, "t").unwrap();
        let f = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
        assert_eq!(read(&f, "t", Part::default()).unwrap(), part);
        assert_eq!(f.get_u64("t.twice_n").unwrap(), 6);
        assert_eq!(f.get_str("t.architecture").unwrap(), "t");

        // A config that fails its checks is neither written nor read.
        let zero = Part { n: 0, ..part };
        let err = write(&zero, &mut GgufWriter::new(), "t").unwrap_err();
        assert!(err.to_string().contains("t config: n 0"), "{err}");
        let mut w = GgufWriter::new();
        w.add_metadata("t.n", 0u32).unwrap();
        w.add_metadata("t.eps", 0.5f32).unwrap();
        w.add_metadata("t.period", 1.0f32).unwrap();
        let f = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
        let err = read(&f, "t", Part::default()).unwrap_err().to_string();
        assert!(err.contains("t config: n 0"), "{err}");
    }

    #[test]
    fn an_absent_optional_key_takes_its_default_and_a_missing_key_is_named() {
        let mut w = GgufWriter::new();
        w.add_metadata("t.n", 2u32).unwrap();
        w.add_metadata("t.eps", 0.5f32).unwrap();
        w.add_metadata("t.period", 1.0f32).unwrap();
        let f = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
        assert_eq!(read(&f, "t", Part::default()).unwrap().opt, 7);

        let mut w = GgufWriter::new();
        w.add_metadata("t.n", 2u32).unwrap();
        let f = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
        let err = read(&f, "t", Part::default()).unwrap_err().to_string();
        assert!(err.contains("t.eps"), "{err}");
    }
}
