//! Regression corpus for the GGUF reader: inputs that once crashed or stressed it (from the
//! cargo-fuzz target in fuzz/, minimised) and seeds. Files named `ok-*` must parse, files
//! named `bad-*` must be rejected, and nothing may panic.

use std::path::Path;
use vla::gguf::GgufFile;

#[test]
fn corpus() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/gguf");
    let mut entries: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    let (mut ok, mut bad) = (0, 0);
    for path in &entries {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let bytes = std::fs::read(path).unwrap();
        let result = GgufFile::from_bytes(bytes);
        if let Ok(f) = &result {
            for t in f.tensors() {
                let _ = f.dequantize(&t.name);
            }
        }
        if name.starts_with("ok-") {
            result.unwrap_or_else(|e| panic!("{name} should parse: {e}"));
            ok += 1;
        } else if name.starts_with("bad-") {
            assert!(result.is_err(), "{name} should be rejected");
            bad += 1;
        } else {
            panic!("{name}: corpus files are named ok-* or bad-*");
        }
    }
    assert!(
        ok >= 1 && bad >= 1,
        "corpus in {} is missing cases",
        dir.display()
    );
    println!("{} corpus files ({ok} ok, {bad} bad)", entries.len());
}
