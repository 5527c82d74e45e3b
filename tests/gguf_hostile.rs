//! Malformed and hostile GGUF input: every case is a clear error, never a panic or a huge
//! allocation.

use vla::gguf::{GgmlType, GgufFile, GgufWriter, Value};

/// Builds a header by hand: magic, version, counts, then `rest`.
fn header(version: u32, n_tensors: u64, n_kv: u64, rest: &[u8]) -> Vec<u8> {
    let mut b = b"GGUF".to_vec();
    b.extend(version.to_le_bytes());
    b.extend(n_tensors.to_le_bytes());
    b.extend(n_kv.to_le_bytes());
    b.extend(rest);
    b
}

fn gguf_str(s: &str) -> Vec<u8> {
    let mut b = (s.len() as u64).to_le_bytes().to_vec();
    b.extend(s.as_bytes());
    b
}

fn kv(key: &str, ty: u32, value: &[u8]) -> Vec<u8> {
    let mut b = gguf_str(key);
    b.extend(ty.to_le_bytes());
    b.extend(value);
    b
}

fn tensor_info(name: &str, dims: &[u64], ty: u32, offset: u64) -> Vec<u8> {
    let mut b = gguf_str(name);
    b.extend((dims.len() as u32).to_le_bytes());
    for d in dims {
        b.extend(d.to_le_bytes());
    }
    b.extend(ty.to_le_bytes());
    b.extend(offset.to_le_bytes());
    b
}

fn err(bytes: Vec<u8>) -> String {
    GgufFile::from_bytes(bytes).unwrap_err().to_string()
}

fn assert_err_contains(bytes: Vec<u8>, needle: &str) {
    let e = err(bytes);
    assert!(
        e.contains(needle),
        "error {e:?} does not mention {needle:?}"
    );
}

#[test]
fn not_gguf() {
    assert_err_contains(vec![], "truncated reading the magic");
    assert_err_contains(b"GGU".to_vec(), "truncated reading the magic");
    assert_err_contains(b"GGML\x03\0\0\0".to_vec(), "not a GGUF file");
    assert_err_contains(b"GGUF".to_vec(), "truncated reading the version");
}

#[test]
fn versions() {
    assert_eq!(
        err(header(1, 0, 0, &[])),
        "unsupported GGUF version 1 (supported: 2, 3)"
    );
    assert_eq!(
        err(header(4, 0, 0, &[])),
        "unsupported GGUF version 4 (supported: 2, 3)"
    );
    assert_err_contains(header(3u32.swap_bytes(), 0, 0, &[]), "big-endian");
    assert!(GgufFile::from_bytes(header(2, 0, 0, &[])).is_ok());
    assert!(GgufFile::from_bytes(header(3, 0, 0, &[])).is_ok());
}

#[test]
fn absurd_counts_fail_before_allocating() {
    assert_err_contains(header(3, 1 << 60, 0, &[]), "tensors cannot fit");
    assert_err_contains(header(3, 0, 1 << 60, &[]), "metadata entries cannot fit");
    assert_err_contains(header(3, u64::MAX, u64::MAX, &[]), "cannot fit");
    // a key claiming 4 GiB
    let mut rest = (4u64 << 30).to_le_bytes().to_vec();
    rest.extend([b'a'; 64]);
    assert_err_contains(header(3, 0, 1, &rest), "truncated reading a metadata key");
    // a string value claiming u64::MAX bytes
    assert_err_contains(
        header(3, 0, 1, &kv("k", 8, &u64::MAX.to_le_bytes())),
        "truncated reading a string",
    );
    // an array of 2^60 u8
    let mut arr = 0u32.to_le_bytes().to_vec();
    arr.extend((1u64 << 60).to_le_bytes());
    assert_err_contains(
        header(3, 0, 1, &kv("k", 9, &arr)),
        "array elements cannot fit",
    );
    // an array of 2^40 strings, each of which would need 8 bytes
    let mut arr = 8u32.to_le_bytes().to_vec();
    arr.extend((1u64 << 40).to_le_bytes());
    arr.extend([0u8; 64]);
    assert_err_contains(
        header(3, 0, 1, &kv("k", 9, &arr)),
        "array elements cannot fit",
    );
}

#[test]
fn deep_nesting_is_bounded() {
    let mut v = Vec::new();
    for _ in 0..10_000 {
        v.extend(9u32.to_le_bytes());
        v.extend(1u64.to_le_bytes());
    }
    assert_err_contains(header(3, 0, 1, &kv("k", 9, &v)), "nested deeper");
}

#[test]
fn bad_values() {
    assert_err_contains(header(3, 0, 1, &kv("k", 13, &[])), "unknown value type 13");
    assert_err_contains(header(3, 0, 1, &kv("k", 7, &[2])), "bool byte 2");
    assert_err_contains(
        header(3, 0, 1, &kv("k", 8, &[2, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xfe])),
        "not valid UTF-8",
    );
    let mut two = kv("k", 4, &[1, 0, 0, 0]);
    two.extend(kv("k", 4, &[2, 0, 0, 0]));
    assert_err_contains(header(3, 0, 2, &two), "duplicate metadata key \"k\"");
    for bad in [0u32, 3, 48] {
        let e = err(header(
            3,
            0,
            1,
            &kv("general.alignment", 4, &bad.to_le_bytes()),
        ));
        assert!(e.contains("power-of-two u32"), "{e}");
    }
    let e = err(header(
        3,
        0,
        1,
        &kv("general.alignment", 10, &32u64.to_le_bytes()),
    ));
    assert!(e.contains("power-of-two u32"), "{e}");
}

fn with_data(infos: &[Vec<u8>], data_len: usize) -> Vec<u8> {
    let mut b = header(3, infos.len() as u64, 0, &infos.concat());
    b.resize(b.len().next_multiple_of(32) + data_len, 0);
    b
}

#[test]
fn bad_tensor_infos() {
    let ok = with_data(&[tensor_info("t", &[4, 2], 0, 0)], 32);
    let f = GgufFile::from_bytes(ok).unwrap();
    assert_eq!(f.dequantize("t").unwrap(), vec![0.0; 8]);
    assert!(matches!(
        f.dequantize("nope"),
        Err(vla::Error::TensorNotFound(_))
    ));

    assert_err_contains(
        with_data(&[tensor_info("t", &[4], 99, 0)], 32),
        "tensor \"t\": unsupported tensor type 99",
    );
    assert_err_contains(
        with_data(&[tensor_info("t", &[4], 4, 0)], 32),
        "unsupported tensor type 4",
    );
    assert_err_contains(
        with_data(&[tensor_info("t", &[1; 5], 0, 0)], 32),
        "5 dimensions",
    );
    assert_err_contains(
        with_data(&[tensor_info("t", &[1 << 32, 1 << 32, 1 << 32], 0, 0)], 32),
        "not a valid F32 shape",
    );
    assert_err_contains(
        with_data(&[tensor_info("t", &[31], GgmlType::Q8_0.id(), 0)], 64),
        "not a valid Q8_0 shape",
    );
    assert_err_contains(
        with_data(&[tensor_info("t", &[4, 2], 0, 0)], 31),
        "runs past the end",
    );
    assert_err_contains(
        with_data(&[tensor_info("t", &[1], 0, 1 << 62)], 32),
        "runs past the end",
    );
    assert_err_contains(
        with_data(&[tensor_info("t", &[1], 0, u64::MAX - 31)], 32),
        "runs past the end",
    );
    assert_err_contains(
        with_data(&[tensor_info("t", &[1], 0, 4)], 64),
        "not a multiple of the alignment",
    );
    assert_err_contains(
        with_data(
            &[tensor_info("t", &[1], 0, 0), tensor_info("t", &[1], 0, 32)],
            64,
        ),
        "duplicate tensor name \"t\"",
    );
    assert_err_contains(
        with_data(
            &[tensor_info("a", &[8], 0, 0), tensor_info("b", &[8], 0, 0)],
            32,
        ),
        "tensors \"a\" and \"b\" overlap",
    );
    // Empty tensors take no bytes, so they may sit anywhere.
    let empty_beside = with_data(
        &[
            tensor_info("a", &[8], 0, 0),
            tensor_info("e", &[0, 4], 0, 0),
        ],
        32,
    );
    assert!(GgufFile::from_bytes(empty_beside).is_ok());
    // A type the reader knows but cannot dequantize fails before its f32 copy is allocated.
    let q4_k = GgufFile::from_bytes(with_data(&[tensor_info("k", &[256], 12, 0)], 160)).unwrap();
    let e = q4_k.dequantize("k").unwrap_err().to_string();
    assert!(e.contains("Q4_K cannot be dequantized"), "{e}");
}

#[test]
fn alignment_is_bounded() {
    let e = err(header(
        3,
        0,
        1,
        &kv("general.alignment", 4, &(1u32 << 21).to_le_bytes()),
    ));
    assert!(e.contains("up to 1048576"), "{e}");
}

fn valid_file() -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", "x").unwrap();
    w.add_metadata("a", Value::from_strs(&["p", "q"])).unwrap();
    w.add_metadata("b", Value::F64(1.0)).unwrap();
    let v: Vec<f32> = (0..64).map(|i| i as f32).collect();
    w.add_f32("q", GgmlType::Q4_1, &[32, 2], &v).unwrap();
    w.add_f32("f", GgmlType::F16, &[64], &v).unwrap();
    w.to_bytes().unwrap()
}

#[test]
fn every_truncation_is_an_error() {
    let full = valid_file();
    let f = GgufFile::from_bytes(full.clone()).unwrap();
    let data_end = f
        .tensors()
        .iter()
        .map(|t| f.data_offset() + t.offset + t.n_bytes())
        .max()
        .unwrap() as usize;
    for len in 0..data_end {
        let r = GgufFile::from_bytes(full[..len].to_vec());
        assert!(r.is_err(), "a file cut at {len} of {data_end} bytes parsed");
    }
}

#[test]
fn random_corruption_never_panics() {
    let full = valid_file();
    let mut s = 0x9e3779b9u32;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 17;
        s ^= s << 5;
        s as usize
    };
    for _ in 0..5000 {
        let mut b = full.clone();
        for _ in 0..1 + next() % 4 {
            let i = next() % b.len();
            b[i] = next() as u8;
        }
        if let Ok(f) = GgufFile::from_bytes(b) {
            for t in f.tensors() {
                let _ = f.dequantize(&t.name);
            }
        }
    }
}
