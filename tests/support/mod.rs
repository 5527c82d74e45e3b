//! Shared by the golden tests: reading a fixture made by `tools/golden/*.py`, opening
//! backends (GPU backends fail loudly without an adapter; `VLA_ALLOW_NO_GPU=1` turns that
//! into a warning), and comparing against the reference. The arch cases and the checks every
//! arch passes (tests/conformance.rs runs them): [`cases`], [`conformance`], [`batching`]. The golden tests'
//! skeleton (fixture, backends, stage checks): [`golden`].
#![allow(dead_code)]

#[macro_use]
pub mod cases;
pub mod batching;
pub mod conformance;
#[macro_use]
pub mod golden;
pub mod long_prompt;

use std::path::{Path, PathBuf};
use vla::backend::{self, Backend};
use vla::convert::Safetensors;
use vla::policy::{Image, ImageData};

pub fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// `writer`'s GGUF as a file opens it (memory-mapped, as a user's model): written to a
/// temporary file, opened, and the file removed (the mapping stays valid).
pub fn reopened(writer: &vla::gguf::GgufWriter) -> vla::gguf::GgufFile {
    static COUNTER: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!("vla-golden-{}-{n}.gguf", std::process::id()));
    writer.write_to_file(&path).unwrap();
    let file = vla::gguf::GgufFile::open(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    file
}

/// `golden.safetensors` (the reference's inputs, intermediates and outputs) and `golden.json`.
pub struct Golden {
    pub st: Safetensors,
    pub meta: serde_json::Value,
}

impl Golden {
    pub fn load(dir: &Path) -> Self {
        let st = Safetensors::open(&dir.join("golden.safetensors")).unwrap();
        let meta = serde_json::from_str(&std::fs::read_to_string(dir.join("golden.json")).unwrap())
            .unwrap();
        Golden { st, meta }
    }

    pub fn f32(&self, name: &str) -> Vec<f32> {
        self.st.f32(name).unwrap()
    }

    /// An I64 tensor.
    pub fn i64(&self, name: &str) -> Vec<i64> {
        self.st.i64(name).unwrap()
    }

    pub fn has(&self, name: &str) -> bool {
        self.st.contains(name)
    }

    pub fn usize(&self, key: &str) -> usize {
        self.meta[key]
            .as_u64()
            .unwrap_or_else(|| panic!("golden.json: {key}")) as usize
    }

    pub fn ids(&self, key: &str) -> Vec<i32> {
        self.meta[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_i64().unwrap() as i32)
            .collect()
    }

    /// Camera frame `i` (u8 HWC).
    pub fn image(&self, i: usize) -> Image {
        self.u8_image(&format!("image.{i}"))
    }

    /// The u8 HWC tensor `name` as an image.
    pub fn u8_image(&self, name: &str) -> Image {
        let name = name.to_owned();
        let shape = self.st.shape(&name).unwrap().to_vec();
        Image {
            height: shape[0],
            width: shape[1],
            data: ImageData::RgbU8(self.st.u8(&name).unwrap()),
        }
    }
}

fn allow_no_gpu() -> bool {
    std::env::var("VLA_ALLOW_NO_GPU").is_ok_and(|v| v == "1")
}

/// The backend, or `None` after a loud warning when a GPU backend has no adapter and
/// `VLA_ALLOW_NO_GPU=1`.
pub fn open(name: &str) -> Option<Box<dyn Backend>> {
    match backend::open(name) {
        Ok(b) => Some(b),
        Err(e) if name != "cpu" && allow_no_gpu() => {
            eprintln!("WARNING: VLA_ALLOW_NO_GPU=1: {name}: {e}: NOT TESTED on {name}");
            None
        }
        Err(e) => panic!(
            "{name}: {e}\n(scripts/test.sh installs lavapipe; VLA_ALLOW_NO_GPU=1 skips loudly)"
        ),
    }
}

/// A still frame `[3, gh p, gw p]` back from Qwen-VL processor patch rows (`[gh gw, 3 * 2 *
/// p * p]`: each row `[channel][time][py][px]`, the two time slices equal; rows in
/// merge-window order, `m x m` windows row-major).
pub fn qwen_patch_rows_to_chw(
    rows: &[f32],
    (gh, gw): (usize, usize),
    p: usize,
    m: usize,
) -> Vec<f32> {
    let (ih, iw) = (gh * p, gw * p);
    let mut image = vec![0f32; 3 * ih * iw];
    for k in 0..gh * gw {
        let (block, ir, ic) = (k / (m * m), (k / m) % m, k % m);
        let (r, c) = ((block / (gw / m)) * m + ir, (block % (gw / m)) * m + ic);
        for ch in 0..3 {
            for py in 0..p {
                for px in 0..p {
                    let src = k * 3 * 2 * p * p + ch * 2 * p * p + py * p + px;
                    image[ch * ih * iw + (r * p + py) * iw + c * p + px] = rows[src];
                }
            }
        }
    }
    image
}

pub fn max_abs(v: &[f32]) -> f32 {
    v.iter().fold(0f32, |a, x| a.max(x.abs()))
}

/// Max abs difference; fails above `tol * max(1, max |want|)`.
pub fn check(what: &str, got: &[f32], want: &[f32], tol: f32) {
    assert_eq!(
        got.len(),
        want.len(),
        "{what}: {} values vs the reference's {}",
        got.len(),
        want.len()
    );
    let err = got
        .iter()
        .zip(want)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    let scale = max_abs(want);
    println!("{what}: max abs err {err:.3e} (max |reference| {scale:.3})");
    assert!(
        err.is_finite() && err <= tol * scale.max(1.0),
        "{what}: max abs err {err:e} vs the reference"
    );
}

pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| f64::from(*x) * f64::from(*y))
        .sum();
    let norm = |v: &[f32]| v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    dot / (norm(a) * norm(b))
}

/// The ggml backends under test, by [`backend::open`] name: `ggml` (ggml-cpu) and
/// `ggml:<DEVICE>` for each other device in `VLA_TEST_GGML_DEVICES` (comma-separated
/// registry names, default `CPU`; e.g. `CPU,Vulkan0` with the `ggml-vulkan` feature).
pub fn ggml_backend_names() -> Vec<String> {
    let devices = std::env::var("VLA_TEST_GGML_DEVICES").unwrap_or_else(|_| "CPU".into());
    devices
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map(|d| {
            if d.eq_ignore_ascii_case("cpu") {
                "ggml".to_string()
            } else {
                format!("ggml:{d}")
            }
        })
        .collect()
}

/// Runs `tests/interop/<script>` with `args` under python3 (with `gguf` and `numpy`, which
/// scripts/test.sh installs); a missing python or package, or a failing script, fails the test.
pub fn interop(script: &str, args: &[&std::ffi::OsStr]) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/interop")
        .join(script);
    let out = std::process::Command::new("python3")
        .arg(&script)
        .args(args)
        .output()
        .expect("python3 must be installed (scripts/test.sh installs the test dependencies)");
    assert!(
        out.status.success(),
        "{} failed (needs `pip install gguf numpy`; scripts/test.sh does this):\n{}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The cosine an action chunk keeps, against the f32 run on the same backend, with 16-bit
/// activations.
pub const ACT_16BIT_MIN_COSINE: f64 = 0.999;

/// 16-bit activations on `backend` (a wgpu one): `predict` gives the chunk for an activation
/// dtype; f16 (where the adapter has shader-f16; otherwise a loud warning) and bf16 must
/// keep a cosine of [`ACT_16BIT_MIN_COSINE`] to the f32 chunk. Prints one table row a dtype
/// (cosine and max abs error against f32 and against the reference's chunk `lerobot`).
pub fn act_dtypes_hold(
    arch: &str,
    backend: &str,
    lerobot: &[f32],
    predict: impl Fn(backend::ActDtype) -> vla::Result<Vec<f32>>,
) {
    use backend::ActDtype;
    if open(backend).is_none() {
        return;
    }
    let f32 = predict(ActDtype::F32).unwrap();
    let max_err = |a: &[f32], b: &[f32]| {
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0f32, f32::max)
    };
    for act in [ActDtype::F16, ActDtype::Bf16] {
        let chunk = match predict(act) {
            Err(e) if act == ActDtype::F16 && e.to_string().contains("shader-f16") => {
                eprintln!("WARNING: {arch} on {backend}: {e}: f16 activations NOT TESTED");
                continue;
            }
            r => r.unwrap_or_else(|e| panic!("{arch} {} on {backend}: {e}", act.name())),
        };
        assert_eq!(chunk.len(), f32.len());
        let cos = cosine(&chunk, &f32);
        println!(
            "| {arch} | {} | {cos:.6} | {:.2e} | {:.6} | {:.2e} |",
            act.name(),
            max_err(&chunk, &f32),
            cosine(&chunk, lerobot),
            max_err(&chunk, lerobot)
        );
        assert!(
            chunk.iter().all(|v| v.is_finite()) && cos >= ACT_16BIT_MIN_COSINE,
            "{arch} with {} activations on {backend}: cosine {cos} to the f32 chunk",
            act.name()
        );
    }
}

/// A request for the model `info` describes: patterned frames at its size, its state width,
/// five token ids, seeded noise (for runs compared with each other, not with a reference).
#[allow(dead_code)]
pub fn observation_for(info: &vla::policy::PolicyInfo) -> vla::policy::Observation {
    use vla::policy::{Image, ImageData};
    let (h, w) = (info.image_height, info.image_width);
    let image = |k: u32| Image {
        height: h,
        width: w,
        data: ImageData::RgbU8(
            (0..h * w * 3)
                .map(|i| ((i as u32 * 31 + k) % 253) as u8)
                .collect(),
        ),
    };
    vla::policy::Observation {
        images: (0..info.n_images as u32).map(image).collect(),
        state: (0..info.state_dim).map(|i| 0.3 - 0.2 * i as f32).collect(),
        prompt: None,
        tokens: Some(vec![5, 77, 301, 12, 9]),
        noise: Some(vla::models::common::gaussian_noise(
            info.chunk_size * info.max_action_dim,
            42,
        )),
        token_mask: None,
    }
}

/// The chunk of the model in `f` on `backend` for [`observation_for`], and its weight types.
#[allow(dead_code)]
pub fn chunk_on(f: vla::gguf::GgufFile, backend: &str) -> (Vec<f32>, String) {
    let opts = vla::policy::RuntimeOptions {
        backend: backend.into(),
        ..Default::default()
    };
    let mut p = vla::models::from_gguf(f, &opts).unwrap_or_else(|e| panic!("{backend}: {e}"));
    let obs = observation_for(p.info());
    let dtypes = p.info().weight_dtypes.clone();
    (p.predict(&obs).unwrap().actions, dtypes)
}

/// The FoldQuant sites of `theirs` (an independent writer's file), checked equal to those of
/// `ours`, codes and scales byte for byte (`what` names the case in a failure).
#[allow(dead_code)]
pub fn same_sites(
    theirs: &vla::gguf::GgufFile,
    ours: &vla::gguf::GgufFile,
    what: &str,
) -> Vec<vla::foldquant::Site> {
    use vla::foldquant::FoldQuant;
    let sites = |f: &vla::gguf::GgufFile| FoldQuant::read(f).unwrap().unwrap().sites(f).unwrap();
    let theirs_sites = sites(theirs);
    assert_eq!(theirs_sites, sites(ours), "{what}: sites");
    for s in &theirs_sites {
        for t in [".weight", ".wscale"] {
            let name = format!("{}{t}", s.name);
            let (a, b) = (
                theirs.tensor_info(&name).unwrap(),
                ours.tensor_info(&name).unwrap(),
            );
            assert_eq!((a.ty, &a.dims), (b.ty, &b.dims), "{what}: {name}");
            assert!(
                theirs.tensor_bytes(a) == ours.tensor_bytes(b),
                "{what}: {name} differs"
            );
        }
    }
    theirs_sites
}
