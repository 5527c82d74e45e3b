//! The ggml backend: a [`Graph`] lowered to a ggml compute graph ([`lower`]) and run by
//! one of ggml's backends through its scheduler.
//!
//! `ggml-cpu` is always built (feature `ggml`); `ggml-cuda`, `ggml-vulkan` and `ggml-sycl`
//! need their features (and the vendor's toolchain). Devices are opened with
//! `ggml_backend_init_by_name`, so any backend compiled into the sys crate is reachable by
//! its device name (`CPU`, `CUDA0`, `Vulkan0`, `SYCL0`, ...). See docs/GGML.md for the
//! build flags and what is bit-exact.
//!
//! Threads: `VLA_GGML_THREADS` (default: all cores) for the CPU backend.

mod ctx;
mod exec;
mod ffi;
mod lower;

use super::{Backend, Executable, SharedStore, WeightStore};
use crate::graph::Graph;
use crate::Result;

pub use exec::GgmlExecutable;

// llama-cpp-sys-2 has no SYCL feature: ggml-sycl is compiled only when the oneAPI
// environment reaches its CMake build, and links only as shared libraries. Stop the build
// here rather than produce a binary whose `ggml-sycl` backend can never open.
#[cfg(feature = "ggml-sycl")]
const _: () = {
    const fn is_on(value: Option<&str>) -> bool {
        let Some(v) = value else { return false };
        let v = v.as_bytes();
        matches!(
            v,
            b"1" | b"ON" | b"on" | b"On" | b"TRUE" | b"true" | b"YES" | b"yes"
        )
    }
    // The sys crate's build script reads exactly "1" here.
    const fn is_one(value: Option<&str>) -> bool {
        matches!(value, Some(v) if matches!(v.as_bytes(), b"1"))
    }
    assert!(
        is_on(option_env!("GGML_SYCL")) && is_one(option_env!("LLAMA_BUILD_SHARED_LIBS")),
        "the `ggml-sycl` feature needs the oneAPI build environment: build with \
         `scripts/build-ggml-gpu.sh sycl` (it sets GGML_SYCL=ON, CMAKE_C_COMPILER=icx, \
         CMAKE_CXX_COMPILER=icpx, LLAMA_BUILD_SHARED_LIBS=1; see docs/GGML.md)"
    );
};

/// A ggml device by name. Cheap: each compiled graph opens its own backend instance.
#[derive(Clone, Debug)]
pub struct GgmlBackend {
    device: String,
    threads: usize,
    /// `ggml CPU: <cpu name>`; the thread count is appended for CPU devices.
    device_description: String,
    is_cpu: bool,
}

impl GgmlBackend {
    /// ggml's CPU backend (`ggml-cpu`).
    pub fn cpu() -> Result<Self> {
        Self::new("CPU")
    }

    /// A ggml device by its registry name (`CPU`, `CUDA0`, `SYCL0`, ...; case-insensitive).
    /// Fails with [`crate::Error::NoAdapter`] (listing the devices this build has) when
    /// there is no such device.
    pub fn new(device: &str) -> Result<Self> {
        let b = ffi::BackendHandle::init(device)?;
        let threads = std::env::var("VLA_GGML_THREADS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        Ok(GgmlBackend {
            device: device.to_owned(),
            threads,
            device_description: format!("ggml {}", b.describe()),
            is_cpu: b.is_cpu(),
        })
    }

    /// Worker threads for ggml-cpu (ignored by other devices).
    pub fn set_threads(&mut self, threads: usize) {
        self.threads = threads.max(1);
    }

    /// The devices compiled into this build, e.g. `["CPU"]`.
    pub fn devices() -> Vec<String> {
        ffi::init_logging();
        ffi::device_names()
    }

    /// Whether ggml-cpu was built with SIMD kernels (AVX/AVX2/F16C/FMA/...), i.e. the ISA
    /// pins of `.cargo/config.toml` were overridden (see docs/GGML.md).
    pub fn cpu_has_simd() -> bool {
        ffi::cpu_has_simd()
    }
}

impl Backend for GgmlBackend {
    fn description(&self) -> String {
        match self.is_cpu {
            true => format!("{} ({} threads)", self.device_description, self.threads),
            false => self.device_description.clone(),
        }
    }

    fn compile<'w>(
        &self,
        graph: &Graph,
        weights: &'w dyn WeightStore,
    ) -> Result<Box<dyn Executable + 'w>> {
        Ok(Box::new(GgmlExecutable::new(
            &self.device,
            self.threads,
            graph,
            weights,
        )?))
    }

    /// Weights are copied into ggml's buffers: the store is not kept.
    fn compile_shared(&self, graph: &Graph, weights: SharedStore) -> Result<Box<dyn Executable>> {
        Ok(Box::new(GgmlExecutable::new(
            &self.device,
            self.threads,
            graph,
            &*weights,
        )?))
    }
}
