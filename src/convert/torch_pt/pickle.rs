//! The pickle subset `torch.save(module.state_dict())` writes (protocol 2-5): containers,
//! strings, numbers, globals, the memo, persistent ids for storages, and the two callables a
//! state dict needs (`collections.OrderedDict`, `torch._utils._rebuild_tensor_v2`); any other
//! callable makes an opaque value. Nothing is executed.

use super::TensorRef;
use std::collections::BTreeMap;

#[derive(Clone, Debug)]
pub(super) enum Value {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Tuple(Vec<Value>),
    List(Vec<Value>),
    Dict(Vec<(Value, Value)>),
    Global(String, String),
    Storage {
        dtype: &'static str,
        key: String,
    },
    Tensor(TensorRef),
    /// The result of a callable this reader does not run.
    Opaque(String),
    Mark,
}

/// How deeply [`Value::to_json`] follows nested containers.
const MAX_DEPTH: usize = 64;

impl Value {
    pub(super) fn kind(&self) -> String {
        match self {
            Value::Opaque(what) => format!("an object made by {what}"),
            Value::Tensor(_) => "a tensor".into(),
            Value::Storage { .. } => "a storage".into(),
            Value::Global(m, n) => format!("the callable {m}.{n}"),
            Value::List(v) => format!("a list of {} items", v.len()),
            Value::Tuple(v) => format!("a tuple of {} items", v.len()),
            Value::Dict(v) => format!("a dict of {} entries", v.len()),
            Value::Str(t) => format!("the string {:?}", t.chars().take(40).collect::<String>()),
            other => format!("{other:?}"),
        }
    }

    /// Plain data as JSON: None, bools, integers, finite floats, strings, lists and tuples
    /// (arrays), dicts whose keys are strings or integers (objects; integer keys written
    /// as `json.dumps` writes them). Anything else (a tensor, an object some callable would
    /// make) is an error naming it.
    pub(super) fn to_json(&self) -> R<serde_json::Value> {
        self.json_at(0)
    }

    fn json_at(&self, depth: usize) -> R<serde_json::Value> {
        use serde_json::Value as J;
        if depth > MAX_DEPTH {
            return Err(format!("containers nested over {MAX_DEPTH} deep"));
        }
        Ok(match self {
            Value::None => J::Null,
            Value::Bool(b) => J::Bool(*b),
            Value::Int(i) => J::from(*i),
            Value::Float(x) => serde_json::Number::from_f64(*x)
                .map(J::Number)
                .ok_or_else(|| format!("the float {x} (JSON has no such number)"))?,
            Value::Str(s) => J::String(s.clone()),
            Value::List(items) | Value::Tuple(items) => J::Array(
                items
                    .iter()
                    .map(|v| v.json_at(depth + 1))
                    .collect::<R<_>>()?,
            ),
            Value::Dict(entries) => {
                let mut map = serde_json::Map::new();
                for (k, v) in entries {
                    let key = match k {
                        Value::Str(s) => s.clone(),
                        Value::Int(i) => i.to_string(),
                        other => return Err(format!("a dict key that is {}", other.kind())),
                    };
                    let v = v.json_at(depth + 1).map_err(|e| format!("{key:?}: {e}"))?;
                    map.insert(key, v);
                }
                J::Object(map)
            }
            other => return Err(format!("not plain data but {}", other.kind())),
        })
    }
}

pub(super) struct Unpickler<'a> {
    b: &'a [u8],
    at: usize,
    stack: Vec<Value>,
    memo: BTreeMap<usize, Value>,
}

type R<T> = std::result::Result<T, String>;

impl<'a> Unpickler<'a> {
    pub(super) fn new(b: &'a [u8]) -> Self {
        Unpickler {
            b,
            at: 0,
            stack: Vec::new(),
            memo: BTreeMap::new(),
        }
    }

    fn take(&mut self, n: usize) -> R<&'a [u8]> {
        let s = self.b.get(self.at..self.at + n).ok_or("truncated pickle")?;
        self.at += n;
        Ok(s)
    }

    fn uint(&mut self, n: usize) -> R<usize> {
        let s = self.take(n)?;
        Ok(s.iter()
            .rev()
            .fold(0usize, |acc, &x| (acc << 8) | usize::from(x)))
    }

    fn line(&mut self) -> R<String> {
        let end = self
            .b
            .get(self.at..)
            .ok_or("truncated pickle")?
            .iter()
            .position(|&c| c == b'\n')
            .ok_or("truncated pickle")?;
        let s = String::from_utf8_lossy(self.take(end)?).into_owned();
        self.at += 1;
        Ok(s)
    }

    fn pop(&mut self) -> R<Value> {
        self.stack
            .pop()
            .ok_or_else(|| "pickle stack underflow".into())
    }

    /// The items above the topmost mark, which is removed.
    fn pop_mark(&mut self) -> R<Vec<Value>> {
        let m = self
            .stack
            .iter()
            .rposition(|v| matches!(v, Value::Mark))
            .ok_or("pickle: no mark")?;
        let items = self.stack.split_off(m + 1);
        self.stack.pop();
        Ok(items)
    }

    fn str(&mut self, n: usize) -> R<()> {
        let s = String::from_utf8_lossy(self.take(n)?).into_owned();
        self.stack.push(Value::Str(s));
        Ok(())
    }

    pub(super) fn run(mut self) -> R<Value> {
        loop {
            let op = self.take(1)?[0];
            match op {
                0x80 => drop(self.take(1)?), // PROTO
                0x95 => drop(self.take(8)?), // FRAME
                b'.' => return self.pop(),
                b'(' => self.stack.push(Value::Mark),
                b'}' => self.stack.push(Value::Dict(vec![])),
                b']' => self.stack.push(Value::List(vec![])),
                b')' => self.stack.push(Value::Tuple(vec![])),
                b'N' => self.stack.push(Value::None),
                0x88 | 0x89 => self.stack.push(Value::Bool(op == 0x88)),
                b't' => {
                    let items = self.pop_mark()?;
                    self.stack.push(Value::Tuple(items));
                }
                0x85..=0x87 => {
                    let n = usize::from(op - 0x84);
                    if self.stack.len() < n {
                        return Err("pickle stack underflow".into());
                    }
                    let items = self.stack.split_off(self.stack.len() - n);
                    self.stack.push(Value::Tuple(items));
                }
                b'X' => {
                    let n = self.uint(4)?;
                    self.str(n)?;
                }
                0x8c => {
                    let n = self.uint(1)?;
                    self.str(n)?;
                }
                0x8d => {
                    let n = self.uint(8)?;
                    self.str(n)?;
                }
                b'J' => {
                    let v = self.uint(4)? as u32 as i32;
                    self.stack.push(Value::Int(i64::from(v)));
                }
                b'K' => {
                    let v = self.uint(1)?;
                    self.stack.push(Value::Int(v as i64));
                }
                b'M' => {
                    let v = self.uint(2)?;
                    self.stack.push(Value::Int(v as i64));
                }
                0x8a => {
                    let n = self.uint(1)?;
                    let s = self.take(n)?;
                    if n > 8 {
                        return Err("pickle: integer over 64 bits".into());
                    }
                    let mut buf = [if s.last().is_some_and(|&x| x & 0x80 != 0) {
                        0xff
                    } else {
                        0
                    }; 8];
                    buf[..n].copy_from_slice(s);
                    self.stack.push(Value::Int(i64::from_le_bytes(buf)));
                }
                b'G' => {
                    let b = self.take(8)?;
                    let bits = b.try_into().map_err(|_| "truncated pickle")?;
                    self.stack.push(Value::Float(f64::from_be_bytes(bits)));
                }
                b'C' | b'B' => {
                    let n = self.uint(if op == b'C' { 1 } else { 4 })?;
                    self.take(n)?;
                    self.stack.push(Value::Opaque("bytes".into()));
                }
                b'c' => {
                    let (m, n) = (self.line()?, self.line()?);
                    self.stack.push(Value::Global(m, n));
                }
                0x93 => {
                    let (n, m) = (self.pop()?, self.pop()?);
                    match (m, n) {
                        (Value::Str(m), Value::Str(n)) => self.stack.push(Value::Global(m, n)),
                        _ => return Err("pickle: STACK_GLOBAL of non-strings".into()),
                    }
                }
                b'q' | b'r' | 0x94 => {
                    let idx = match op {
                        b'q' => self.uint(1)?,
                        b'r' => self.uint(4)?,
                        _ => self.memo.len(),
                    };
                    let top = self.stack.last().ok_or("pickle stack underflow")?.clone();
                    self.memo.insert(idx, top);
                }
                b'h' | b'j' => {
                    let idx = self.uint(if op == b'h' { 1 } else { 4 })?;
                    let v = self.memo.get(&idx).ok_or("pickle: memo miss")?.clone();
                    self.stack.push(v);
                }
                b'Q' => {
                    let pid = self.pop()?;
                    self.stack.push(storage(pid)?);
                }
                b'R' | 0x81 => {
                    let args = self.pop()?;
                    let f = self.pop()?;
                    self.stack.push(reduce(f, args)?);
                }
                b'b' => {
                    self.pop()?; // BUILD's state (an OrderedDict's `_metadata`): not needed
                }
                b's' => {
                    let (v, k) = (self.pop()?, self.pop()?);
                    self.dict_insert(vec![k, v])?;
                }
                b'u' => {
                    let items = self.pop_mark()?;
                    self.dict_insert(items)?;
                }
                b'a' => {
                    let v = self.pop()?;
                    self.list_extend(vec![v])?;
                }
                b'e' => {
                    let items = self.pop_mark()?;
                    self.list_extend(items)?;
                }
                other => return Err(format!("pickle opcode 0x{other:02x} is not supported")),
            }
        }
    }

    fn dict_insert(&mut self, items: Vec<Value>) -> R<()> {
        let Some(Value::Dict(d)) = self.stack.last_mut() else {
            return Err("pickle: SETITEM(S) on a non-dict".into());
        };
        let mut it = items.into_iter();
        while let (Some(k), Some(v)) = (it.next(), it.next()) {
            d.push((k, v));
        }
        Ok(())
    }

    fn list_extend(&mut self, items: Vec<Value>) -> R<()> {
        let Some(Value::List(l)) = self.stack.last_mut() else {
            return Err("pickle: APPEND(S) on a non-list".into());
        };
        l.extend(items);
        Ok(())
    }
}

/// A persistent id `('storage', torch.<X>Storage, key, location, numel)`.
fn storage(pid: Value) -> R<Value> {
    let Value::Tuple(t) = pid else {
        return Err("pickle: a persistent id that is not a tuple".into());
    };
    match t.as_slice() {
        [Value::Str(s), Value::Global(_, ty), Value::Str(key), ..] if s == "storage" => {
            let dtype = match ty.as_str() {
                "FloatStorage" => "FloatStorage",
                "DoubleStorage" => "DoubleStorage",
                "BFloat16Storage" => "BFloat16Storage",
                "HalfStorage" => "HalfStorage",
                other => return Err(format!("storage type {other} is not supported")),
            };
            Ok(Value::Storage {
                dtype,
                key: key.clone(),
            })
        }
        _ => Err("pickle: an unknown persistent id".into()),
    }
}

fn ints(v: &Value) -> R<Vec<usize>> {
    match v {
        Value::Tuple(t) => t
            .iter()
            .map(|x| match x {
                Value::Int(i) => usize::try_from(*i).map_err(|_| "a negative size".to_owned()),
                _ => Err("a size that is not an integer".into()),
            })
            .collect(),
        _ => Err("a size that is not a tuple".into()),
    }
}

/// A callable applied: tensors and ordered dicts are built, anything else stays opaque.
fn reduce(f: Value, args: Value) -> R<Value> {
    let Value::Global(m, n) = &f else {
        return Ok(Value::Opaque("a non-global callable".into()));
    };
    let Value::Tuple(a) = args else {
        return Ok(Value::Opaque(format!("{m}.{n}")));
    };
    match (m.as_str(), n.as_str()) {
        ("collections", "OrderedDict") => Ok(Value::Dict(vec![])),
        // an `nn.Parameter` saved as such: its tensor (requires_grad and hooks dropped)
        ("torch._utils", "_rebuild_parameter") => match a.into_iter().next() {
            Some(t @ Value::Tensor(_)) => Ok(t),
            _ => Err("_rebuild_parameter of something other than a tensor".into()),
        },
        ("torch._utils", "_rebuild_tensor_v2") => match a.as_slice() {
            [Value::Storage { dtype, key }, Value::Int(offset), size, stride, ..] => {
                let shape = ints(size)?;
                let stride = ints(stride)?;
                if shape.len() != stride.len() {
                    return Err("a tensor with unequal size and stride ranks".into());
                }
                Ok(Value::Tensor(TensorRef {
                    key: key.clone(),
                    dtype,
                    offset: usize::try_from(*offset).map_err(|_| "a negative offset")?,
                    shape,
                    stride,
                }))
            }
            _ => Err("_rebuild_tensor_v2 with unexpected arguments".into()),
        },
        _ => Ok(Value::Opaque(format!("{m}.{n}"))),
    }
}
