//! Editing a loaded file in place: what a translation at load needs (vla.cpp's layouts into
//! ours) without copying the file. Renamed and dropped tensors keep their data where it is
//! (mapped, unread until used); a substituted tensor's bytes are held in memory beside the
//! file; metadata is set in the parsed header only. Nothing is written back.

use super::GgufFile;
use crate::gguf::{GgmlType, Value};
use crate::{Error, Result};

impl GgufFile {
    /// Sets metadata `key` to `value` (replacing it, or appending it).
    pub fn set_metadata(&mut self, key: impl Into<String>, value: Value) {
        let key = key.into();
        match self.metadata_index.get(&key) {
            Some(&i) => self.metadata[i].1 = value,
            None => {
                self.metadata_index.insert(key.clone(), self.metadata.len());
                self.metadata.push((key, value));
            }
        }
    }

    /// Renames tensor `from` to `to`; an error if `from` is absent or `to` taken.
    pub fn rename_tensor(&mut self, from: &str, to: &str) -> Result<()> {
        if from == to {
            return self.tensor_info(from).map(|_| ());
        }
        if self.tensor_index.contains_key(to) {
            return Err(Error::InvalidArgument(format!(
                "cannot rename tensor {from:?} to {to:?}: the file has one of that name"
            )));
        }
        let i = self
            .tensor_index
            .remove(from)
            .ok_or_else(|| Error::TensorNotFound(from.to_owned()))?;
        self.tensors[i].name = to.to_owned();
        self.tensor_index.insert(to.to_owned(), i);
        if let Some(b) = self.substitutes.remove(from) {
            self.substitutes.insert(to.to_owned(), b);
        }
        Ok(())
    }

    /// Keeps only the tensors `keep` accepts (the others' data stays in the file, unread).
    pub fn retain_tensors(&mut self, keep: impl Fn(&str) -> bool) {
        self.tensors.retain(|t| keep(&t.name));
        self.substitutes.retain(|name, _| keep(name));
        self.tensor_index = super::index_of(&self.tensors, |t| &t.name);
    }

    /// Replaces tensor `name`'s data by `bytes` of type `ty` (its dimensions unchanged),
    /// held in memory; the file's bytes under it are no longer read.
    pub fn substitute(&mut self, name: &str, ty: GgmlType, bytes: Vec<u8>) -> Result<()> {
        let i = self.slot(name)?;
        let info = &mut self.tensors[i];
        let want = ty.bytes_for(info.n_elements());
        if want != Some(bytes.len() as u64) {
            return Err(Error::InvalidArgument(format!(
                "tensor {name:?} {:?}: {} bytes given, {ty} needs {want:?}",
                info.shape(),
                bytes.len()
            )));
        }
        info.ty = ty;
        self.substitutes.insert(name.to_owned(), bytes);
        Ok(())
    }

    /// Splits tensor `name` along its outermost dimension into `parts.len()` equal tensors
    /// named `parts` (vla.cpp's fused q / k / v): each a view of its rows where they lie in
    /// the mapped file, nothing copied.
    pub fn split_outer(&mut self, name: &str, parts: &[String]) -> Result<()> {
        let i = self.unsubstituted(name, "split")?;
        let info = self.tensors[i].clone();
        let k = parts.len() as u64;
        let outer = *info.dims.last().unwrap_or(&0);
        if k == 0 || !outer.is_multiple_of(k) {
            return Err(Error::InvalidArgument(format!(
                "tensor {name:?} {:?}: {outer} rows do not split into {k} parts",
                info.shape()
            )));
        }
        let mut dims = info.dims.clone();
        *dims.last_mut().expect("checked non-empty") = outer / k;
        let n: u64 = dims.iter().product();
        let bytes = info.ty.bytes_for(n).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "tensor {name:?}: a part is not whole {} blocks",
                info.ty
            ))
        })?;
        if let Some(p) = parts
            .iter()
            .find(|p| self.tensor_index.contains_key(p.as_str()))
        {
            return Err(Error::InvalidArgument(format!(
                "cannot split tensor {name:?} into {p:?}: the file has one of that name"
            )));
        }
        let pieces = parts.iter().enumerate().map(|(j, p)| super::TensorInfo {
            name: p.clone(),
            ty: info.ty,
            dims: dims.clone(),
            offset: info.offset + j as u64 * bytes,
        });
        self.tensors.splice(i..=i, pieces);
        self.tensor_index = super::index_of(&self.tensors, |t| &t.name);
        Ok(())
    }

    /// Gives tensor `name` the ggml-order `dims` of as many values (a header edit).
    pub fn reshape_tensor(&mut self, name: &str, dims: &[u64]) -> Result<()> {
        let i = self.slot(name)?;
        let info = &mut self.tensors[i];
        if dims.iter().product::<u64>() != info.n_elements() {
            return Err(Error::InvalidArgument(format!(
                "tensor {name:?} {:?}: {} values are no tensor of ggml dims {dims:?}",
                info.shape(),
                info.n_elements()
            )));
        }
        info.dims = dims.to_vec();
        Ok(())
    }

    /// Keeps the first `n` entries of tensor `name`'s outermost dimension (a header edit: the
    /// rest stays in the file, unread).
    pub fn narrow_outer(&mut self, name: &str, n: u64) -> Result<()> {
        let i = self.unsubstituted(name, "narrowed")?;
        let info = &mut self.tensors[i];
        let outer = info.dims.last_mut().filter(|d| n <= **d && n > 0);
        match outer {
            Some(d) => *d = n,
            None => {
                return Err(Error::InvalidArgument(format!(
                    "tensor {name:?} {:?}: cannot keep {n} of its outermost entries",
                    info.shape()
                )))
            }
        }
        Ok(())
    }

    /// The index of tensor `name` in the header.
    fn slot(&self, name: &str) -> Result<usize> {
        self.tensor_index
            .get(name)
            .copied()
            .ok_or_else(|| Error::TensorNotFound(name.to_owned()))
    }

    /// The index of tensor `name`, which must not be substituted (`what`: the edit refused).
    pub(super) fn unsubstituted(&self, name: &str, what: &str) -> Result<usize> {
        let i = self.slot(name)?;
        if self.substitutes.contains_key(name) {
            return Err(Error::InvalidArgument(format!(
                "tensor {name:?}: a substituted tensor cannot be {what}"
            )));
        }
        Ok(i)
    }

    /// Adds tensor `name` of f32 `values` with ggml-order `dims`, held in memory (what a
    /// translation brings from beside the file: statistics).
    pub fn add_tensor_f32(&mut self, name: &str, dims: &[u64], values: &[f32]) -> Result<()> {
        self.add_tensor(name, GgmlType::F32, dims, le_bytes(values))
    }

    /// Adds tensor `name` of type `ty`, ggml-order `dims` and encoded `bytes`, held in
    /// memory (a translation's repacked weights).
    pub fn add_tensor(
        &mut self,
        name: &str,
        ty: GgmlType,
        dims: &[u64],
        bytes: Vec<u8>,
    ) -> Result<()> {
        if self.tensor_index.contains_key(name) {
            return Err(Error::InvalidArgument(format!(
                "cannot add tensor {name:?}: the file has one of that name"
            )));
        }
        let want = ty.bytes_for(dims.iter().product::<u64>());
        if want != Some(bytes.len() as u64) {
            return Err(Error::InvalidArgument(format!(
                "tensor {name:?}: {} bytes for {ty} of dims {dims:?}",
                bytes.len()
            )));
        }
        self.tensor_index
            .insert(name.to_owned(), self.tensors.len());
        self.tensors.push(super::TensorInfo {
            name: name.to_owned(),
            ty,
            dims: dims.to_vec(),
            offset: 0,
        });
        self.substitutes.insert(name.to_owned(), bytes);
        Ok(())
    }

    /// Reads tensor `name`'s bytes as type `ty` of ggml-order `dims` (as many bytes; a
    /// header edit: vla.cpp's FoldQuant codes as the integer form's I8 matrix).
    pub fn retype_tensor(&mut self, name: &str, ty: GgmlType, dims: &[u64]) -> Result<()> {
        let i = self.slot(name)?;
        let info = &mut self.tensors[i];
        let n = dims.iter().product::<u64>();
        if ty.bytes_for(n) != Some(info.n_bytes()) {
            return Err(Error::InvalidArgument(format!(
                "tensor {name:?}: its {} bytes are no {ty} tensor of dims {dims:?}",
                info.n_bytes()
            )));
        }
        info.ty = ty;
        info.dims = dims.to_vec();
        Ok(())
    }

    /// Replaces tensor `name` by f32 `values` of ggml-order `dims`, held in memory.
    pub fn replace_f32(&mut self, name: &str, dims: &[u64], values: &[f32]) -> Result<()> {
        let i = self.slot(name)?;
        if dims.iter().product::<u64>() != values.len() as u64 {
            return Err(Error::InvalidArgument(format!(
                "tensor {name:?}: {} values for dims {dims:?}",
                values.len()
            )));
        }
        let info = &mut self.tensors[i];
        info.ty = GgmlType::F32;
        info.dims = dims.to_vec();
        let bytes = le_bytes(values);
        self.substitutes.insert(name.to_owned(), bytes);
        Ok(())
    }

    /// Replaces tensor `name` by the f32 values `f(v)` of its values `v`.
    pub fn map_f32(&mut self, name: &str, f: impl Fn(f32) -> f32) -> Result<()> {
        let values: Vec<f32> = self.dequantize(name)?.into_iter().map(f).collect();
        let bytes = le_bytes(&values);
        self.substitute(name, GgmlType::F32, bytes)
    }
}

/// `values` as little-endian bytes, allocated at their size (a collected iterator's buffer
/// grows by doubling and may keep twice that).
fn le_bytes(values: &[f32]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(4 * values.len());
    for v in values {
        bytes.extend_from_slice(&v.to_le_bytes());
    }
    bytes
}

#[cfg(test)]
mod tests {
    use crate::gguf::{GgmlType, GgufFile, GgufWriter, Value};

    fn file() -> GgufFile {
        let mut w = GgufWriter::new();
        w.add_metadata("general.architecture", "t").unwrap();
        w.add_f32("a".to_owned(), GgmlType::F32, &[2], &[1.0, 2.0])
            .unwrap();
        w.add_f32("b".to_owned(), GgmlType::F32, &[3], &[3.0, 4.0, 5.0])
            .unwrap();
        GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap()
    }

    #[test]
    fn renames_drops_substitutes_and_sets_in_place() {
        let mut f = file();
        f.rename_tensor("a", "a2").unwrap();
        assert!(f.tensor_info("a").is_err());
        assert_eq!(f.dequantize("a2").unwrap(), [1.0, 2.0]);
        assert!(
            f.rename_tensor("a2", "b").is_err(),
            "taken names are refused"
        );
        assert!(f.rename_tensor("zz", "y").is_err());
        f.map_f32("b", |v| v + 1.0).unwrap();
        assert_eq!(f.dequantize("b").unwrap(), [4.0, 5.0, 6.0]);
        f.rename_tensor("b", "b2").unwrap();
        assert_eq!(f.dequantize("b2").unwrap(), [4.0, 5.0, 6.0]);
        assert!(f.substitute("b2", GgmlType::F32, vec![0; 8]).is_err());
        f.retain_tensors(|n| n != "a2");
        assert_eq!(f.tensors().len(), 1);
        assert!(f.tensor_info("a2").is_err());
        assert_eq!(f.dequantize("b2").unwrap(), [4.0, 5.0, 6.0]);
        f.set_metadata("t.k", Value::U32(3));
        f.set_metadata("general.architecture", Value::String("u".into()));
        assert_eq!(f.get_u64("t.k").unwrap(), 3);
        assert_eq!(f.architecture().unwrap(), "u");
        f.add_tensor_f32("c", &[2, 1], &[7.0, 8.0]).unwrap();
        assert_eq!(f.tensor_info("c").unwrap().shape(), [1, 2]);
        assert_eq!(f.dequantize("c").unwrap(), [7.0, 8.0]);
        assert!(f.add_tensor_f32("c", &[1], &[0.0]).is_err(), "taken");
        assert!(f.add_tensor_f32("d", &[3], &[0.0]).is_err(), "dims");
    }

    #[test]
    fn splits_reshapes_and_narrows_in_the_header() {
        let mut w = GgufWriter::new();
        w.add_metadata("general.architecture", "t").unwrap();
        let v: Vec<f32> = (0..12).map(|i| i as f32).collect();
        w.add_f32("qkv".to_owned(), GgmlType::F32, &[2, 6], &v)
            .unwrap();
        w.add_f32("pe".to_owned(), GgmlType::F32, &[2, 4, 1], &v[..8])
            .unwrap();
        let mut f = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
        let parts = ["q", "k", "v"].map(String::from);
        f.split_outer("qkv", &parts).unwrap();
        assert!(f.tensor_info("qkv").is_err());
        assert_eq!(f.tensor_info("k").unwrap().shape(), [2, 2]);
        assert_eq!(f.dequantize("q").unwrap(), [0.0, 1.0, 2.0, 3.0]);
        assert_eq!(f.dequantize("v").unwrap(), [8.0, 9.0, 10.0, 11.0]);
        assert!(f
            .split_outer("k", &["a".into(), "b".into(), "c".into()])
            .is_err());
        assert!(
            f.split_outer("k", &["q".into(), "z".into()]).is_err(),
            "taken"
        );
        f.reshape_tensor("pe", &[2, 4]).unwrap();
        assert!(f.reshape_tensor("pe", &[3, 4]).is_err());
        f.narrow_outer("pe", 3).unwrap();
        assert_eq!(f.dequantize("pe").unwrap(), [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
        assert!(f.narrow_outer("pe", 4).is_err());
        f.map_f32("q", |x| x).unwrap();
        assert!(f.narrow_outer("q", 1).is_err(), "substituted");
        f.retype_tensor("k", GgmlType::I8, &[16]).unwrap();
        assert_eq!(f.tensor_info("k").unwrap().ty, GgmlType::I8);
        assert!(f.retype_tensor("k", GgmlType::I8, &[15]).is_err());
        f.replace_f32("k", &[1, 2], &[5.0, 6.0]).unwrap();
        assert_eq!(f.tensor_info("k").unwrap().shape(), [2, 1]);
        assert_eq!(f.dequantize("k").unwrap(), [5.0, 6.0]);
    }
}
