//! Flax's msgpack encoding of a parameter tree (`flax.serialization.msgpack_serialize`, and
//! orbax's aggregate `checkpoint` file, which is the same): nested maps whose leaves are
//! arrays as extension values (type 1: a msgpack `[shape, dtype name, bytes]`), large ones
//! split as `{"__msgpack_chunked_array__": true, "shape": ..., "chunks": {"0": ..}}`.

use super::ckpt_err;
use crate::Result;
use rmpv::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// Flax's extension type of an ndarray.
const NDARRAY: i8 = 1;
/// Flax's extension type of a NumPy scalar (`[dtype name, bytes]`).
const NPSCALAR: i8 = 3;
/// Deeper trees are refused (a parameter tree is a few levels deep).
const MAX_DEPTH: usize = 64;

/// An array leaf: its shape and values (read as f32).
#[derive(Clone, Debug, PartialEq)]
pub struct Array {
    pub shape: Vec<usize>,
    pub values: Vec<f32>,
}

/// The leaves of the tree by their `/`-joined path.
pub type Leaves = BTreeMap<String, Array>;

/// Reads the tree in `path`.
pub fn read(path: &Path) -> Result<Leaves> {
    let bytes = std::fs::read(path).map_err(|e| ckpt_err(path, format!("cannot read: {e}")))?;
    let value = rmpv::decode::read_value(&mut bytes.as_slice())
        .map_err(|e| ckpt_err(path, format!("not a msgpack tree: {e}")))?;
    let mut leaves = Leaves::new();
    walk(&value, String::new(), 0, &mut leaves).map_err(|e| ckpt_err(path, e))?;
    Ok(leaves)
}

fn key_text(k: &Value) -> std::result::Result<String, String> {
    match k {
        Value::String(s) => s
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| "a key that is not UTF-8".to_owned()),
        Value::Integer(i) => Ok(i.to_string()),
        other => Err(format!("a key of type {other:?}")),
    }
}

fn walk(
    v: &Value,
    path: String,
    depth: usize,
    out: &mut Leaves,
) -> std::result::Result<(), String> {
    if depth > MAX_DEPTH {
        return Err(format!("{path}: nested deeper than {MAX_DEPTH}"));
    }
    match v {
        Value::Map(entries) => {
            if entries
                .iter()
                .any(|(k, _)| k.as_str() == Some("__msgpack_chunked_array__"))
            {
                let a = chunked(entries).map_err(|e| format!("{path}: {e}"))?;
                out.insert(path, a);
                return Ok(());
            }
            for (k, child) in entries {
                let k = key_text(k).map_err(|e| format!("{path}: {e}"))?;
                let p = if path.is_empty() {
                    k
                } else {
                    format!("{path}/{k}")
                };
                walk(child, p, depth + 1, out)?;
            }
            Ok(())
        }
        Value::Ext(NDARRAY, data) => {
            let a = ndarray(data).map_err(|e| format!("{path}: {e}"))?;
            out.insert(path, a);
            Ok(())
        }
        Value::Ext(NPSCALAR, data) => {
            let a = scalar(data).map_err(|e| format!("{path}: {e}"))?;
            out.insert(path, a);
            Ok(())
        }
        // strings, numbers, None: metadata, not parameters
        _ => Ok(()),
    }
}

fn decode_ext(data: &[u8]) -> std::result::Result<Vec<Value>, String> {
    match rmpv::decode::read_value(&mut &data[..]) {
        Ok(Value::Array(items)) => Ok(items),
        Ok(other) => Err(format!("an array extension holding {other:?}")),
        Err(e) => Err(format!("a broken array extension ({e})")),
    }
}

fn values(dtype: &str, raw: &[u8], n: usize) -> std::result::Result<Vec<f32>, String> {
    let size = match dtype {
        "float32" | "int32" | "uint32" => 4,
        "float16" | "bfloat16" => 2,
        "float64" | "int64" => 8,
        "bool" | "int8" | "uint8" => 1,
        other => return Err(format!("dtype {other:?} is not read")),
    };
    if n.checked_mul(size) != Some(raw.len()) {
        return Err(format!("{} bytes for {n} values of {dtype}", raw.len()));
    }
    let word = |c: &[u8]| -> [u8; 8] {
        let mut w = [0; 8];
        w[..c.len()].copy_from_slice(c);
        w
    };
    Ok(raw
        .chunks_exact(size)
        .map(|c| {
            let w = word(c);
            match dtype {
                "float32" => f32::from_le_bytes([w[0], w[1], w[2], w[3]]),
                "int32" => i32::from_le_bytes([w[0], w[1], w[2], w[3]]) as f32,
                "uint32" => u32::from_le_bytes([w[0], w[1], w[2], w[3]]) as f32,
                "float16" => half::f16::from_le_bytes([w[0], w[1]]).to_f32(),
                "bfloat16" => half::bf16::from_le_bytes([w[0], w[1]]).to_f32(),
                "float64" => f64::from_le_bytes(w) as f32,
                "int64" => i64::from_le_bytes(w) as f32,
                "int8" => c[0] as i8 as f32,
                _ => f32::from(c[0]),
            }
        })
        .collect())
}

fn shape_of(v: &Value) -> std::result::Result<Vec<usize>, String> {
    let dims = v
        .as_array()
        .ok_or_else(|| format!("a shape {v:?}"))?
        .iter()
        .map(|d| d.as_u64().and_then(|d| usize::try_from(d).ok()))
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| format!("a shape {v:?}"))?;
    dims.iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .filter(|&n| n <= 1 << 32)
        .ok_or_else(|| format!("shape {dims:?} is too large"))?;
    Ok(dims)
}

fn ndarray(data: &[u8]) -> std::result::Result<Array, String> {
    let items = decode_ext(data)?;
    let [shape, dtype, raw] = items.as_slice() else {
        return Err(format!("an array extension of {} items", items.len()));
    };
    let shape = shape_of(shape)?;
    let dtype = dtype.as_str().ok_or("a dtype that is not text")?;
    let raw = raw.as_slice().ok_or("array data that is not bytes")?;
    let n = shape.iter().product();
    Ok(Array {
        values: values(dtype, raw, n)?,
        shape,
    })
}

fn scalar(data: &[u8]) -> std::result::Result<Array, String> {
    let items = decode_ext(data)?;
    let [dtype, raw] = items.as_slice() else {
        return Err(format!("a scalar extension of {} items", items.len()));
    };
    let dtype = dtype.as_str().ok_or("a dtype that is not text")?;
    let raw = raw.as_slice().ok_or("scalar data that is not bytes")?;
    Ok(Array {
        shape: vec![],
        values: values(dtype, raw, 1)?,
    })
}

fn chunked(entries: &[(Value, Value)]) -> std::result::Result<Array, String> {
    let get = |k: &str| {
        entries
            .iter()
            .find(|(key, _)| key.as_str() == Some(k))
            .map(|(_, v)| v)
            .ok_or_else(|| format!("a chunked array without {k:?}"))
    };
    let shape = shape_of(get("shape")?)?;
    let Value::Map(chunks) = get("chunks")? else {
        return Err("chunks that are not a map".into());
    };
    let mut parts: Vec<(usize, &Value)> = chunks
        .iter()
        .map(|(k, v)| {
            let i = key_text(k)?
                .parse()
                .map_err(|_| format!("chunk key {k:?}"))?;
            Ok((i, v))
        })
        .collect::<std::result::Result<_, String>>()?;
    parts.sort_by_key(|p| p.0);
    let mut values = Vec::new();
    for (i, (k, v)) in parts.into_iter().enumerate() {
        if k != i {
            return Err(format!("chunk {i} missing"));
        }
        let Value::Ext(NDARRAY, data) = v else {
            return Err(format!("chunk {i} is not an array"));
        };
        values.extend(ndarray(data)?.values);
    }
    if values.len() != shape.iter().product::<usize>() {
        return Err(format!("{} values for shape {shape:?}", values.len()));
    }
    Ok(Array { shape, values })
}
