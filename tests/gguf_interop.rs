//! Interop with gguf-py (PyPI `gguf`), the reference GGUF implementation: files it writes
//! read identically here, and files we write read identically there. Needs python3 with
//! `gguf` and `numpy` (scripts/test.sh installs them); a missing package fails the test.

mod support;

use serde_json::Value as Json;
use std::path::{Path, PathBuf};
use vla::gguf::{quant, GgmlType, GgufFile, GgufWriter, Value, ValueType};

fn gguf_py(args: &[&std::ffi::OsStr]) {
    support::interop("gguf_py.py", args);
}

fn read_f32(path: &Path) -> Vec<f32> {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn json(path: &Path) -> Json {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn type_name(t: ValueType) -> &'static str {
    match t {
        ValueType::U8 => "UINT8",
        ValueType::I8 => "INT8",
        ValueType::U16 => "UINT16",
        ValueType::I16 => "INT16",
        ValueType::U32 => "UINT32",
        ValueType::I32 => "INT32",
        ValueType::U64 => "UINT64",
        ValueType::I64 => "INT64",
        ValueType::F32 => "FLOAT32",
        ValueType::F64 => "FLOAT64",
        ValueType::Bool => "BOOL",
        ValueType::String => "STRING",
        ValueType::Array => "ARRAY",
    }
}

/// Does our value equal the JSON one gguf-py wrote (or read), type included?
fn same(ours: &Value, theirs: &Json) -> bool {
    match ours {
        Value::U8(_) | Value::U16(_) | Value::U32(_) | Value::U64(_) => {
            theirs.as_u64() == ours.as_u64()
        }
        Value::I8(_) | Value::I16(_) | Value::I32(_) | Value::I64(_) => {
            theirs.as_i64() == ours.as_i64()
        }
        Value::F32(v) => theirs.as_f64().map(|t| t as f32).map(f32::to_bits) == Some(v.to_bits()),
        Value::F64(v) => theirs.as_f64().map(f64::to_bits) == Some(v.to_bits()),
        Value::Bool(v) => theirs.as_bool() == Some(*v),
        Value::String(s) => theirs.as_str() == Some(s),
        Value::Array(_, items) => theirs.as_array().is_some_and(|t| {
            t.len() == items.len() && items.iter().zip(t).all(|(a, b)| same(a, b))
        }),
    }
}

fn check_metadata(ours: &[(String, Value)], theirs: &[Json]) {
    assert_eq!(ours.len(), theirs.len(), "metadata count");
    for ((key, value), e) in ours.iter().zip(theirs) {
        assert_eq!(e["key"], key.as_str());
        assert_eq!(e["type"], type_name(value.value_type()), "{key}");
        if let Value::Array(elem, _) = value {
            assert_eq!(e["elem"], type_name(*elem), "{key}");
        }
        assert!(
            same(value, &e["value"]),
            "{key}: ours {value:?}, gguf-py {}",
            e["value"]
        );
    }
}

fn tempdir() -> PathBuf {
    tempfile::tempdir().unwrap().keep()
}

#[test]
fn files_written_by_gguf_py_read_identically() {
    let dir = tempdir();
    gguf_py(&["write".as_ref(), dir.as_os_str()]);
    let expected = json(&dir.join("expected.json"));
    let f = GgufFile::open(dir.join("gguf_py.gguf")).unwrap();
    check_metadata(f.metadata(), expected["metadata"].as_array().unwrap());

    let tensors = expected["tensors"].as_array().unwrap();
    assert_eq!(f.tensors().len(), tensors.len());
    for t in tensors {
        let name = t["name"].as_str().unwrap();
        let info = f.tensor_info(name).unwrap();
        assert_eq!(
            u64::from(info.ty.id()),
            t["type"].as_u64().unwrap(),
            "{name}"
        );
        let dims: Vec<u64> = t["dims"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap())
            .collect();
        assert_eq!(info.dims, dims, "{name}");

        let base = dir.join(name);
        let theirs = read_f32(&base.with_extension(format!("{}.dequant.f32", ext(name))));
        let ours = f.dequantize(name).unwrap();
        assert_eq!(
            bits(&ours),
            bits(&theirs),
            "{name}: dequantized values differ"
        );

        // Same source values, same quantizer: byte-identical blocks.
        let source = read_f32(&base.with_extension(format!("{}.source.f32", ext(name))));
        let their_bytes =
            std::fs::read(base.with_extension(format!("{}.bytes", ext(name)))).unwrap();
        assert_same_bytes(
            f.tensor_bytes(info),
            &their_bytes,
            &format!("{name}: stored bytes"),
        );
        let our_bytes = quant::quantize(info.ty, &source).unwrap();
        let what = format!("{name}: our {} quantizer vs gguf-py's", info.ty);
        assert_same_bytes(&our_bytes, &their_bytes, &what);
    }
}

/// `w.Q8_0` -> `Q8_0` (Path::with_extension would otherwise eat the name's own dot part).
fn ext(name: &str) -> &str {
    name.rsplit('.').next().unwrap()
}

fn assert_same_bytes(ours: &[u8], theirs: &[u8], what: &str) {
    assert_eq!(ours.len(), theirs.len(), "{what}: lengths");
    if let Some(i) = ours.iter().zip(theirs).position(|(a, b)| a != b) {
        panic!(
            "{what}: first difference at byte {i}: ours {}, theirs {}",
            ours[i], theirs[i]
        );
    }
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn files_we_write_read_identically_in_gguf_py() {
    let dir = tempdir();
    let mut w = GgufWriter::new();
    let metadata: Vec<(&str, Value)> = vec![
        ("general.architecture", "vla-rs".into()),
        ("a.u8", Value::U8(255)),
        ("a.i8", Value::I8(-128)),
        ("a.u16", Value::U16(65535)),
        ("a.i16", Value::I16(-32768)),
        ("a.u32", Value::U32(u32::MAX)),
        ("a.i32", Value::I32(i32::MIN)),
        ("a.u64", Value::U64(u64::MAX)),
        ("a.i64", Value::I64(i64::MIN)),
        ("a.f32", Value::F32(3.25e-20)),
        ("a.f64", Value::F64(-1e300)),
        ("a.bool", Value::Bool(true)),
        ("a.str", "ünïcode ✓".into()),
        ("a.arr_str", Value::from_strs(&["x", "", "yz"])),
        ("a.arr_f32", Value::from_f32s(&[1.5, -0.0, 7.0])),
        (
            "a.arr_i16",
            Value::Array(ValueType::I16, vec![Value::I16(-1), Value::I16(2)]),
        ),
        (
            "a.arr_u64",
            Value::Array(ValueType::U64, vec![Value::U64(1 << 40)]),
        ),
        (
            "a.arr_bool",
            Value::Array(ValueType::Bool, vec![Value::Bool(false)]),
        ),
    ];
    for (k, v) in &metadata {
        w.add_metadata(*k, v.clone()).unwrap();
    }
    let mut ours = Vec::new();
    for (i, ty) in GgmlType::SUPPORTED.into_iter().enumerate() {
        let dims = [64u64, 3, 2];
        let x: Vec<f32> = (0..384)
            .map(|j| ((j * 7919 + i * 13) % 211) as f32 / 17.0 - 6.0)
            .collect();
        let name = format!("t.{ty}");
        w.add_f32(&name, ty, &dims, &x).unwrap();
        ours.push((name, ty, dims));
    }
    let path = dir.join("ours.gguf");
    w.write_to_file(&path).unwrap();
    gguf_py(&["read".as_ref(), path.as_os_str(), dir.as_os_str()]);

    let read = json(&dir.join("read.json"));
    let ours_meta: Vec<(String, Value)> = metadata
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
    check_metadata(&ours_meta, read["metadata"].as_array().unwrap());

    let f = GgufFile::open(&path).unwrap();
    let tensors = read["tensors"].as_array().unwrap();
    assert_eq!(tensors.len(), ours.len());
    for (t, (name, ty, dims)) in tensors.iter().zip(&ours) {
        assert_eq!(t["name"], name.as_str());
        assert_eq!(t["type"].as_u64(), Some(u64::from(ty.id())));
        let their_dims: Vec<u64> = t["dims"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap())
            .collect();
        assert_eq!(&their_dims, dims, "{name}");
        let theirs = read_f32(&dir.join(format!("{name}.gguf_py.f32")));
        assert_eq!(bits(&f.dequantize(name).unwrap()), bits(&theirs), "{name}");
    }
}
