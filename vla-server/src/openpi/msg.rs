//! openpi's messages: msgpack, with numpy arrays as msgpack_numpy packs them (a map of
//! `__ndarray__: true`, `data` (raw bytes), `dtype` (numpy's `dtype.str`, e.g. `"|u1"`,
//! `"<f4"`) and `shape`), keys as bytes. Reading is bounded before any value is built: a
//! message declares no more than [`MAX_VALUES`] values nor nests deeper than [`MAX_DEPTH`].

use crate::{Error, Result};
use rmpv::Value;

/// Values (map entries count two) a message may hold: an observation is a few dozen keys
/// and arrays of bytes; a state or noise sent as a plain list is a few thousand numbers.
pub const MAX_VALUES: usize = 1 << 16;
/// Nesting: openpi's layouts nest one or two maps deep.
pub const MAX_DEPTH: usize = 16;

/// Decodes one message, refusing it before building anything when it declares more than
/// [`MAX_VALUES`] values, nests deeper than [`MAX_DEPTH`], or is cut short.
pub fn decode(bytes: &[u8]) -> Result<Value> {
    scan(bytes)?;
    let mut rd = bytes;
    let v = rmpv::decode::read_value_with_max_depth(&mut rd, MAX_DEPTH)
        .map_err(|e| bad(format!("not msgpack: {e}")))?;
    if !rd.is_empty() {
        return Err(bad(format!("{} bytes after the message", rd.len())));
    }
    Ok(v)
}

fn bad(msg: impl Into<String>) -> Error {
    Error::bad_request(msg)
}

/// Walks the message's markers without allocating: each declared length is checked against
/// the bytes left and the value budget.
fn scan(bytes: &[u8]) -> Result<()> {
    let mut at = 0usize;
    // Values still to read at each open level.
    let mut pending: Vec<usize> = vec![1];
    let mut values = 0usize;
    let take = |at: &mut usize, n: usize| -> Result<u64> {
        let end = at
            .checked_add(n)
            .filter(|&e| e <= bytes.len())
            .ok_or_else(|| bad("msgpack message cut short"))?;
        let v = bytes[*at..end]
            .iter()
            .fold(0u64, |acc, &b| (acc << 8) | u64::from(b));
        *at = end;
        Ok(v)
    };
    while let Some(left) = pending.last_mut() {
        if *left == 0 {
            pending.pop();
            continue;
        }
        *left -= 1;
        values += 1;
        if values > MAX_VALUES {
            return Err(bad(format!("more than {MAX_VALUES} msgpack values")));
        }
        let m = take(&mut at, 1)? as u8;
        // (payload bytes to skip, child values to read)
        let (skip, children): (u64, u64) = match m {
            0x00..=0x7f | 0xe0..=0xff | 0xc0 | 0xc2 | 0xc3 => (0, 0),
            0x80..=0x8f => (0, 2 * u64::from(m & 0x0f)),
            0x90..=0x9f => (0, u64::from(m & 0x0f)),
            0xa0..=0xbf => (u64::from(m & 0x1f), 0),
            0xc4 | 0xd9 => (take(&mut at, 1)?, 0),
            0xc5 | 0xda => (take(&mut at, 2)?, 0),
            0xc6 | 0xdb => (take(&mut at, 4)?, 0),
            0xc7 => (take(&mut at, 1)? + 1, 0),
            0xc8 => (take(&mut at, 2)? + 1, 0),
            0xc9 => (take(&mut at, 4)? + 1, 0),
            0xca | 0xce | 0xd2 => (4, 0),
            0xcb | 0xcf | 0xd3 => (8, 0),
            0xcc | 0xd0 => (1, 0),
            0xcd | 0xd1 => (2, 0),
            0xd4 => (2, 0),
            0xd5 => (3, 0),
            0xd6 => (5, 0),
            0xd7 => (9, 0),
            0xd8 => (17, 0),
            0xdc => (0, take(&mut at, 2)?),
            0xdd => (0, take(&mut at, 4)?),
            0xde => (0, 2 * take(&mut at, 2)?),
            0xdf => (0, 2 * take(&mut at, 4)?),
            0xc1 => return Err(bad("msgpack marker 0xc1 (never used)")),
        };
        take(&mut at, usize::try_from(skip).unwrap_or(usize::MAX))?;
        if children > 0 {
            if values as u64 + children > MAX_VALUES as u64 {
                return Err(bad(format!("more than {MAX_VALUES} msgpack values")));
            }
            if pending.len() > MAX_DEPTH {
                return Err(bad(format!("msgpack nested deeper than {MAX_DEPTH}")));
            }
            pending.push(children as usize);
        }
    }
    Ok(())
}

/// A map's entry whose key is `key` as text or bytes.
pub fn get<'a>(map: &'a Value, key: &str) -> Option<&'a Value> {
    map.as_map()?.iter().find_map(|(k, v)| {
        let matches = match k {
            Value::String(s) => s.as_str() == Some(key),
            Value::Binary(b) => b.as_slice() == key.as_bytes(),
            _ => false,
        };
        matches.then_some(v)
    })
}

/// A numpy array as msgpack_numpy packs it.
#[derive(Debug)]
pub struct NdArray<'a> {
    pub data: &'a [u8],
    /// numpy's `dtype.str` without its byte-order mark: `u1`, `f4`, `f8`, `i8`, ...
    pub kind: String,
    pub shape: Vec<usize>,
}

impl<'a> NdArray<'a> {
    /// `value` as an array; `what` names it in errors.
    pub fn read(value: &'a Value, what: &str) -> Result<NdArray<'a>> {
        if get(value, "__ndarray__").is_none() {
            return Err(bad(format!(
                "{what}: not a numpy array (msgpack_numpy's {{__ndarray__, data, dtype, shape}})"
            )));
        }
        let field =
            |k: &str| get(value, k).ok_or_else(|| bad(format!("{what}: array without {k:?}")));
        let data = match field("data")? {
            Value::Binary(b) => b.as_slice(),
            _ => return Err(bad(format!("{what}: array data is not bytes"))),
        };
        let dtype = match field("dtype")? {
            Value::String(s) => s.as_str().unwrap_or_default().to_owned(),
            Value::Binary(b) => String::from_utf8_lossy(b).into_owned(),
            _ => return Err(bad(format!("{what}: array dtype is not text"))),
        };
        let kind = match dtype.as_bytes().first() {
            Some(b'<' | b'|' | b'=') => dtype[1..].to_owned(),
            Some(b'>') => return Err(bad(format!("{what}: big-endian dtype {dtype:?}"))),
            _ => dtype.clone(),
        };
        let shape = field("shape")?
            .as_array()
            .ok_or_else(|| bad(format!("{what}: array shape is not a list")))?
            .iter()
            .map(|d| d.as_u64().and_then(|d| usize::try_from(d).ok()))
            .collect::<Option<Vec<usize>>>()
            .ok_or_else(|| bad(format!("{what}: array shape is not a list of sizes")))?;
        let size = match kind.as_str() {
            "u1" | "i1" | "b1" => 1,
            "u2" | "i2" => 2,
            "f4" | "u4" | "i4" => 4,
            "f8" | "u8" | "i8" => 8,
            _ => return Err(bad(format!("{what}: dtype {dtype:?} is not a number type"))),
        };
        let n = shape
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .and_then(|n| n.checked_mul(size));
        if n != Some(data.len()) {
            return Err(bad(format!(
                "{what}: {} bytes for shape {shape:?} of {dtype}",
                data.len()
            )));
        }
        Ok(NdArray { data, kind, shape })
    }

    /// The values as f32 (from any float or integer type).
    pub fn to_f32(&self) -> Vec<f32> {
        let le = |c: &[u8]| {
            let mut b = [0u8; 8];
            b[..c.len()].copy_from_slice(c);
            u64::from_le_bytes(b)
        };
        let size = self.data.len() / self.shape.iter().product::<usize>().max(1);
        if size == 0 {
            return Vec::new();
        }
        self.data
            .chunks_exact(size)
            .map(|c| {
                let bits = le(c);
                match self.kind.as_str() {
                    "f4" => f32::from_bits(bits as u32),
                    "f8" => f64::from_bits(bits) as f32,
                    "i1" => bits as u8 as i8 as f32,
                    "i2" => bits as u16 as i16 as f32,
                    "i4" => bits as u32 as i32 as f32,
                    "i8" => bits as i64 as f32,
                    _ => bits as f32, // unsigned, bool
                }
            })
            .collect()
    }
}

/// `values` as a msgpack_numpy float32 array of `shape` (keys as bytes, as numpy's packer
/// writes them, so `msgpack_numpy.unpackb` turns it back into an array).
pub fn f32_array(values: &[f32], shape: &[usize]) -> Value {
    let data: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let key = |k: &str| Value::Binary(k.as_bytes().to_vec());
    Value::Map(vec![
        (key("__ndarray__"), Value::Boolean(true)),
        (key("data"), Value::Binary(data)),
        (key("dtype"), Value::from("<f4")),
        (
            key("shape"),
            Value::Array(shape.iter().map(|&d| Value::from(d as u64)).collect()),
        ),
    ])
}

/// A JSON value as msgpack (the metadata dict openpi's server sends on connect).
pub fn from_json(v: &serde_json::Value) -> Value {
    use serde_json::Value as J;
    match v {
        J::Null => Value::Nil,
        J::Bool(b) => Value::Boolean(*b),
        J::Number(n) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => Value::from(u),
            (_, Some(i)) => Value::from(i),
            _ => Value::from(n.as_f64().unwrap_or(f64::NAN)),
        },
        J::String(s) => Value::from(s.as_str()),
        J::Array(a) => Value::Array(a.iter().map(from_json).collect()),
        J::Object(o) => Value::Map(
            o.iter()
                .map(|(k, v)| (Value::from(k.as_str()), from_json(v)))
                .collect(),
        ),
    }
}

pub fn encode(v: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    rmpv::encode::write_value(&mut out, v).expect("writing to a Vec does not fail");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_sizes_are_refused_before_allocating() {
        // An array declaring 2^32 - 1 values in 5 bytes.
        let e = decode(&[0xdd, 0xff, 0xff, 0xff, 0xff]).unwrap_err();
        assert!(e.to_string().contains("msgpack values"), "{e}");
        // A bin of 4 GiB declared in 5 bytes.
        let e = decode(&[0xc6, 0xff, 0xff, 0xff, 0xff]).unwrap_err();
        assert!(e.to_string().contains("cut short"), "{e}");
        // Nesting.
        let e = decode(&[0x91; 64]).unwrap_err();
        assert!(e.to_string().contains("nested"), "{e}");
        assert!(decode(&[]).is_err());
        let e = decode(&[0xc0, 0xc0]).unwrap_err();
        assert!(e.to_string().contains("after the message"), "{e}");
    }

    #[test]
    fn arrays_round_trip_and_are_checked() {
        let v = f32_array(&[1.0, -2.5, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
        let back = decode(&encode(&v)).unwrap();
        let a = NdArray::read(&back, "x").unwrap();
        assert_eq!((a.kind.as_str(), a.shape.clone()), ("f4", vec![2, 3]));
        assert_eq!(a.to_f32(), vec![1.0, -2.5, 3.0, 4.0, 5.0, 6.0]);
        let mut short = back.clone();
        if let Value::Map(m) = &mut short {
            m[1].1 = Value::Binary(vec![0; 20]);
        }
        let e = NdArray::read(&short, "state").unwrap_err().to_string();
        assert!(e.contains("state: 20 bytes for shape [2, 3]"), "{e}");
        let e = NdArray::read(&Value::from(3), "prompt")
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a numpy array"), "{e}");
    }
}
