//! Parse arbitrary bytes as GGUF and touch everything a loader would: metadata getters and
//! every tensor's data. Any panic, hang or huge allocation is a bug.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vla::gguf::GgufFile;

fuzz_target!(|data: &[u8]| {
    let Ok(file) = GgufFile::from_bytes(data.to_vec()) else {
        return;
    };
    for (key, value) in file.metadata() {
        let _ = (file.get_u64(key), file.get_f64(key), file.get_str(key), value.to_string());
    }
    for t in file.tensors() {
        let _ = file.dequantize(&t.name);
    }
});
