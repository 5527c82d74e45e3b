//! Writer -> reader round trips.

use vla::gguf::{quant, GgmlType, GgufFile, GgufWriter, Value, ValueType};

fn every_metadata_type() -> Vec<(&'static str, Value)> {
    vec![
        ("general.architecture", Value::from("test")),
        ("t.u8", Value::U8(200)),
        ("t.i8", Value::I8(-100)),
        ("t.u16", Value::U16(60000)),
        ("t.i16", Value::I16(-30000)),
        ("t.u32", Value::U32(4_000_000_000)),
        ("t.i32", Value::I32(-2_000_000_000)),
        ("t.u64", Value::U64(u64::MAX - 1)),
        ("t.i64", Value::I64(i64::MIN + 1)),
        ("t.f32", Value::F32(-1.5e-7)),
        ("t.f64", Value::F64(std::f64::consts::PI)),
        ("t.bool", Value::Bool(true)),
        ("t.str", Value::from("héllo wörld ✓")),
        ("t.empty_str", Value::from("")),
        ("t.arr_f32", Value::from_f32s(&[1.0, -2.5, f32::MAX])),
        ("t.arr_str", Value::from_strs(&["a", "", "ccc"])),
        ("t.arr_empty", Value::Array(ValueType::I64, vec![])),
        (
            "t.arr_nested",
            Value::Array(
                ValueType::Array,
                vec![
                    Value::Array(ValueType::U8, vec![Value::U8(1), Value::U8(2)]),
                    Value::Array(ValueType::U8, vec![]),
                ],
            ),
        ),
    ]
}

fn values(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(2654435761).wrapping_add(1);
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s as f32 / u32::MAX as f32 - 0.5) * 4.0
        })
        .collect()
}

#[test]
fn metadata_and_tensors_round_trip() {
    let mut w = GgufWriter::new();
    for (k, v) in every_metadata_type() {
        w.add_metadata(k, v).unwrap();
    }
    let mut expected = Vec::new();
    for (i, ty) in GgmlType::SUPPORTED.into_iter().enumerate() {
        let dims = [64u64, 3];
        let x = values(192, i as u32);
        let name = format!("w.{ty}");
        w.add_f32(&name, ty, &dims, &x).unwrap();
        let mut deq = vec![0.0; x.len()];
        quant::dequantize(ty, &quant::quantize(ty, &x).unwrap(), &mut deq).unwrap();
        expected.push((name, ty, deq));
    }
    let bytes = w.to_bytes().unwrap();
    let f = GgufFile::from_bytes(bytes).unwrap();
    assert_eq!(f.version(), 3);
    assert_eq!(f.alignment(), 32);
    assert_eq!(f.data_offset() % 32, 0);
    let got: Vec<_> = f
        .metadata()
        .iter()
        .map(|(k, v)| (k.as_str(), v.clone()))
        .collect();
    assert_eq!(got, every_metadata_type());
    assert_eq!(f.architecture().unwrap(), "test");
    assert_eq!(f.get_u64("t.u32").unwrap(), 4_000_000_000);
    assert!(f.get_u64("t.i8").is_err());
    assert_eq!(
        f.get_str("t.u8").unwrap_err().to_string(),
        "metadata key \"t.u8\": expected a string, found u8"
    );
    for (name, ty, deq) in expected {
        let info = f.tensor_info(&name).unwrap();
        assert_eq!(info.ty, ty);
        assert_eq!(info.dims, vec![64, 3]);
        assert_eq!(info.shape(), vec![3, 64]);
        assert_eq!(info.offset % 32, 0);
        assert_eq!(f.dequantize(&name).unwrap(), deq, "{name}");
    }
}

#[test]
fn custom_alignment_is_honoured() {
    let mut w = GgufWriter::new();
    w.add_metadata("general.alignment", Value::U32(256))
        .unwrap();
    w.add_f32("a", GgmlType::F32, &[3], &[1.0, 2.0, 3.0])
        .unwrap();
    w.add_f32("b", GgmlType::F32, &[1], &[4.0]).unwrap();
    let path = tempfile::tempdir().unwrap().keep().join("aligned.gguf");
    w.write_to_file(&path).unwrap();
    let f = GgufFile::open(&path).unwrap();
    assert_eq!(f.alignment(), 256);
    assert_eq!(f.data_offset() % 256, 0);
    assert_eq!(f.tensor_info("b").unwrap().offset, 256);
    assert_eq!(f.dequantize("b").unwrap(), vec![4.0]);
    assert!(w
        .add_metadata("general.alignment", Value::U32(256))
        .is_err());
}

#[test]
fn writer_rejects_bad_tensors() {
    let mut w = GgufWriter::new();
    assert!(w
        .add_tensor("x", GgmlType::Q8_0, &[31], vec![0u8; 34])
        .is_err());
    assert!(w
        .add_tensor("x", GgmlType::F32, &[2], vec![0u8; 4])
        .is_err());
    assert!(w
        .add_tensor("x", GgmlType::F32, &[1, 1, 1, 1, 1], vec![0u8; 4])
        .is_err());
    w.add_tensor("x", GgmlType::F32, &[1], vec![0u8; 4])
        .unwrap();
    assert!(w
        .add_tensor("x", GgmlType::F32, &[1], vec![0u8; 4])
        .is_err());
    assert!(w
        .add_metadata("k", Value::Array(ValueType::U8, vec![Value::I8(1)]))
        .is_err());
    assert!(w.add_metadata("general.alignment", Value::U32(48)).is_err());
}
