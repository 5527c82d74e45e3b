//! Backends run a [`Graph`]: `cpu` (the reference, [`crate::ops`]), `wgpu`
//! (WGSL kernels on Vulkan, Metal, DX12 or GL) and `ggml` (ggml's CPU backend, or CUDA,
//! Vulkan or SYCL with the `ggml-cuda` / `ggml-vulkan` / `ggml-sycl` features).

mod cpu;
#[cfg(feature = "ggml")]
pub mod ggml;
pub mod profile;
mod shared;
#[cfg(feature = "wgpu")]
pub mod wgpu;

pub use cpu::CpuBackend;

use crate::graph::Graph;
use crate::{Error, Result, Tensor};
use std::collections::HashMap;

/// Where weight nodes get their data.
pub use crate::graph::WeightStore;

/// Figures an executable reports after compilation and runs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ExecStats {
    /// Bytes of weights held by the backend (uploaded or borrowed).
    pub weight_bytes: u64,
    /// Peak bytes of activations alive at once under the backend's buffer plan.
    pub peak_activation_bytes: u64,
    /// Of those, the backend's scratch buffers (wgpu: split-K partial sums and the like;
    /// 0 where there are none).
    pub scratch_bytes: u64,
    /// Kernel dispatches (or op calls) per run.
    pub dispatches: usize,
    /// What the runs so far moved and waited for.
    pub runs: RunCounters,
}

/// Traffic and synchronisation between host and backend, counted over runs. Structural
/// facts, not times: tests may bound them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunCounters {
    /// Command submissions (wgpu) or graph computes (ggml); 0 on cpu.
    pub submits: u64,
    /// Times the host blocked until the backend finished; 0 on cpu.
    pub host_waits: u64,
    /// Bytes written from host memory into backend buffers; 0 on cpu.
    pub h2d_bytes: u64,
    /// Bytes read from backend buffers into host memory; 0 on cpu.
    pub d2h_bytes: u64,
    /// Kernel dispatches (wgpu), graph nodes computed (ggml) or ops run (cpu).
    pub dispatches: u64,
}

impl RunCounters {
    pub fn add(&mut self, o: &RunCounters) {
        self.submits += o.submits;
        self.host_waits += o.host_waits;
        self.h2d_bytes += o.h2d_bytes;
        self.d2h_bytes += o.d2h_bytes;
        self.dispatches += o.dispatches;
    }

    /// The counts since `before` (an earlier reading of the same counters).
    pub fn since(&self, before: &RunCounters) -> RunCounters {
        RunCounters {
            submits: self.submits - before.submits,
            host_waits: self.host_waits - before.host_waits,
            h2d_bytes: self.h2d_bytes - before.h2d_bytes,
            d2h_bytes: self.d2h_bytes - before.d2h_bytes,
            dispatches: self.dispatches - before.dispatches,
        }
    }
}

/// A graph compiled for one backend, with its weights in place.
pub trait Executable: Send {
    /// Runs the graph on named f32 inputs; returns the graph's outputs in order.
    fn run(&mut self, inputs: &[(&str, &Tensor)]) -> Result<Vec<Tensor<'static>>>;
    fn stats(&self) -> ExecStats;
    /// Milliseconds each of the graph's stages ([`Graph::stages`]) took in the last run,
    /// where the backend can tell them apart (`None` where it cannot, e.g. one ggml graph
    /// compute, or a wgpu adapter without timestamp queries).
    fn stage_ms(&self) -> Option<Vec<f32>> {
        None
    }
    /// Each kernel dispatch of the last run with its device time, where the backend was
    /// opened to profile (wgpu with `VLA_WGPU_PROFILE=1` and timestamp queries); `None`
    /// otherwise.
    fn profile(&self) -> Option<Vec<KernelTime>> {
        None
    }
}

/// One kernel dispatch's device time in a profiled run, with its share of its graph node's
/// work ([`Graph::node_flops`], [`Graph::node_bytes`], split evenly over the node's
/// dispatches).
#[derive(Clone, Debug, PartialEq)]
pub struct KernelTime {
    /// The graph node (index) the dispatch computes.
    pub node: usize,
    /// The graph stage the node belongs to ([`Graph::stages`]; empty before the first).
    pub stage: String,
    /// The graph op (`matmul`, `attention`, ...).
    pub op: &'static str,
    /// The kernel that ran it (its entry point).
    pub kernel: &'static str,
    pub ms: f64,
    pub flops: f64,
    pub bytes: f64,
}

/// A weight store an executable keeps alive (a loaded model's file).
pub type SharedStore = std::sync::Arc<dyn WeightStore + Send>;

pub trait Backend: Send {
    /// What runs the kernels, e.g. `cpu` or `vulkan: llvmpipe (LLVM 15.0.6, 256 bits)`.
    fn description(&self) -> String;
    /// Whether executables borrow the weights from the store rather than hold a copy each
    /// (then compiling the same weights into several graphs costs no second copy).
    fn borrows_weights(&self) -> bool {
        false
    }
    /// Compiles `graph` over weights borrowed for `'w`.
    fn compile<'w>(
        &self,
        graph: &Graph,
        weights: &'w dyn WeightStore,
    ) -> Result<Box<dyn Executable + 'w>>;
    /// Compiles `graph` over a store the executable shares (and keeps alive): what a loaded
    /// policy uses, its executables living as long as it does.
    fn compile_shared(&self, graph: &Graph, weights: SharedStore) -> Result<Box<dyn Executable>>;
}

/// Checks run-time inputs against the graph: every input present once, with its shape.
pub(crate) fn match_inputs<'i>(
    graph: &Graph,
    inputs: &[(&str, &'i Tensor<'i>)],
) -> Result<HashMap<String, &'i Tensor<'i>>> {
    let mut by_name = HashMap::new();
    for (name, t) in inputs {
        if by_name.insert(name.to_string(), *t).is_some() {
            return Err(Error::InvalidArgument(format!(
                "input {name:?} given twice"
            )));
        }
    }
    for node in graph.nodes() {
        let (name, bytes) = match &node.op {
            crate::graph::Op::Input(name) => (name, false),
            crate::graph::Op::InputU8(name) => (name, true),
            _ => continue,
        };
        let t = by_name
            .get(name)
            .ok_or_else(|| Error::InvalidArgument(format!("missing input {name:?}")))?;
        if bytes != (t.dtype() == crate::gguf::GgmlType::I8) {
            let want = if bytes {
                "bytes (Tensor::from_u8)"
            } else {
                "f32"
            };
            return Err(Error::InvalidArgument(format!(
                "input {name:?} must be {want}, got {}",
                t.dtype()
            )));
        }
        if t.shape() != node.shape.as_slice() {
            return Err(Error::InvalidArgument(format!(
                "input {name:?}: shape {:?}, the graph expects {:?}",
                t.shape(),
                node.shape
            )));
        }
    }
    let known: Vec<&str> = graph.input_names().collect();
    if let Some(extra) = by_name.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(Error::InvalidArgument(format!(
            "unknown input {extra:?} (graph inputs: {known:?})"
        )));
    }
    Ok(by_name)
}

/// Backend names accepted by [`open`] (plus `ggml:<DEVICE>` for any ggml device).
pub const BACKEND_NAMES: &[&str] = &[
    "cpu",
    "vulkan",
    "metal",
    "dx12",
    "gl",
    "wgpu",
    "ggml",
    "ggml-cpu",
    "ggml-cuda",
    "ggml-vulkan",
    "ggml-sycl",
];

/// Which cargo feature a backend name needs.
fn feature_of(name: &str) -> &'static str {
    match name {
        "ggml" | "ggml-cpu" => "ggml",
        "ggml-cuda" => "ggml-cuda",
        "ggml-vulkan" => "ggml-vulkan",
        "ggml-sycl" => "ggml-sycl",
        _ => "wgpu",
    }
}

/// How activations (every computed tensor, the KV cache included) are stored between
/// kernels. Kernels accumulate in f32 either way; weights keep their own dtype.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ActDtype {
    #[default]
    F32,
    /// IEEE half: on wgpu adapters with `shader-f16` only. Finite values beyond +-65504
    /// saturate; infinities and NaN stay.
    F16,
    /// bfloat16 (f32's range, 8 mantissa bits), stored as packed u16 on every adapter.
    Bf16,
}

impl ActDtype {
    pub fn name(self) -> &'static str {
        match self {
            ActDtype::F32 => "f32",
            ActDtype::F16 => "f16",
            ActDtype::Bf16 => "bf16",
        }
    }

    /// Parses `f32`, `f16` or `bf16`.
    pub fn from_name(name: &str) -> Result<Self> {
        match name {
            "f32" => Ok(ActDtype::F32),
            "f16" => Ok(ActDtype::F16),
            "bf16" => Ok(ActDtype::Bf16),
            _ => Err(Error::InvalidArgument(format!(
                "activation dtype {name:?}: expected f32, f16 or bf16"
            ))),
        }
    }

    /// Bytes a stored element takes.
    pub fn size(self) -> usize {
        match self {
            ActDtype::F32 => 4,
            ActDtype::F16 | ActDtype::Bf16 => 2,
        }
    }
}

/// Settings a backend takes when opened; `None` keeps the backend's own default (which a
/// testing knob such as `VLA_WGPU_FLASH_ATTN` or `VLA_GGML_THREADS` may set).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BackendOptions {
    /// wgpu: always (`Some(true)`) or never (`Some(false)`) the flash-style attention kernel.
    pub flash_attn: Option<bool>,
    /// ggml-cpu: worker threads.
    pub threads: Option<usize>,
    /// How activations are stored; 16-bit dtypes only on the wgpu backends (the others
    /// refuse them).
    pub act_dtype: ActDtype,
}

/// Opens a backend by name with default options; see [`open_with`].
pub fn open(name: &str) -> Result<Box<dyn Backend>> {
    open_with(name, &BackendOptions::default())
}

/// Opens a backend by name: `cpu`, a wgpu API (`vulkan`, `metal`, `dx12`, `gl`, or
/// `wgpu` for whichever wgpu finds first), `ggml` / `ggml-cpu` (ggml's CPU backend),
/// `ggml-cuda` / `ggml-vulkan` / `ggml-sycl` (the first device of that ggml backend), or
/// `ggml:<DEVICE>` for a ggml device by its registry name (`ggml:CUDA1`, ...).
pub fn open_with(name: &str, opts: &BackendOptions) -> Result<Box<dyn Backend>> {
    let _ = opts; // unused when neither the wgpu nor the ggml feature is on
    let wgpu_names = ["vulkan", "metal", "dx12", "gl", "wgpu"];
    if opts.act_dtype != ActDtype::F32 && !wgpu_names.contains(&name) {
        return Err(Error::InvalidArgument(format!(
            "activation dtype {}: the {name} backend stores activations in f32 only; 16-bit activations run on the wgpu backends ({})",
            opts.act_dtype.name(),
            wgpu_names.join(", ")
        )));
    }
    #[cfg(feature = "ggml")]
    {
        let device = match name {
            "ggml" | "ggml-cpu" => Some("CPU"),
            #[cfg(feature = "ggml-cuda")]
            "ggml-cuda" => Some("CUDA0"),
            #[cfg(feature = "ggml-vulkan")]
            "ggml-vulkan" => Some("Vulkan0"),
            #[cfg(feature = "ggml-sycl")]
            "ggml-sycl" => Some("SYCL0"),
            _ => name.strip_prefix("ggml:"),
        };
        if let Some(device) = device {
            let mut b = ggml::GgmlBackend::new(device)?;
            if let Some(n) = opts.threads {
                b.set_threads(n);
            }
            return Ok(Box::new(b));
        }
    }
    #[cfg(feature = "wgpu")]
    let api = match name {
        "vulkan" => Some(wgpu::Api::Vulkan),
        "metal" => Some(wgpu::Api::Metal),
        "dx12" => Some(wgpu::Api::Dx12),
        "gl" => Some(wgpu::Api::Gl),
        "wgpu" => Some(wgpu::Api::Any),
        _ => None,
    };
    #[cfg(feature = "wgpu")]
    if let Some(api) = api {
        let mut options = wgpu::WgpuOptions::from_env()?;
        if opts.flash_attn.is_some() {
            options.flash_attn = opts.flash_attn;
        }
        if opts.act_dtype != ActDtype::F32 {
            options.act_dtype = opts.act_dtype;
        }
        return Ok(Box::new(wgpu::WgpuBackend::with_options(api, options)?));
    }
    match name {
        "cpu" => Ok(Box::new(CpuBackend)),
        _ if BACKEND_NAMES.contains(&name) => Err(Error::InvalidArgument(format!(
            "backend {name:?} needs the `{}` cargo feature, which this build lacks",
            feature_of(name)
        ))),
        _ => Err(Error::InvalidArgument(format!(
            "unknown backend {name:?} (expected one of: {})",
            BACKEND_NAMES.join(", ")
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A GPU backend of ggml this build lacks names the feature that adds it; an unknown
    /// name lists the known ones.
    #[test]
    fn a_missing_backend_names_its_feature() {
        let lacking = [
            ("ggml-cuda", cfg!(feature = "ggml-cuda")),
            ("ggml-vulkan", cfg!(feature = "ggml-vulkan")),
            ("ggml-sycl", cfg!(feature = "ggml-sycl")),
        ];
        for (name, built) in lacking {
            if built {
                continue;
            }
            let e = open(name)
                .err()
                .unwrap_or_else(|| panic!("{name} opened without its feature"))
                .to_string();
            assert!(
                e.contains(&format!("needs the `{name}` cargo feature")),
                "{name}: {e}"
            );
        }
        let e = open("ggml-metal").err().unwrap().to_string();
        assert!(
            e.contains("unknown backend") && e.contains("ggml-sycl"),
            "{e}"
        );
    }
}
