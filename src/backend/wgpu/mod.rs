//! The wgpu backend: hand-written WGSL kernels (`shaders/`) on Vulkan, Metal, DX12 or GL.

mod act;
mod exec;
mod repack;
pub use act::store_dtypes;
mod fuse;
mod kernels;
mod shader;
mod shared;
mod slots;
mod timer;
mod upload;

use super::{ActDtype, Backend, Executable, SharedStore, WeightStore};
use crate::graph::Graph;
use crate::{Error, Result};
use std::sync::Arc;

/// Which graphics API to ask wgpu for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    Vulkan,
    Metal,
    Dx12,
    Gl,
    /// Whatever wgpu finds first (a real GPU before a software one).
    Any,
}

impl Api {
    pub fn name(self) -> &'static str {
        match self {
            Api::Vulkan => "vulkan",
            Api::Metal => "metal",
            Api::Dx12 => "dx12",
            Api::Gl => "gl",
            Api::Any => "wgpu",
        }
    }

    fn backends(self) -> wgpu::Backends {
        match self {
            Api::Vulkan => wgpu::Backends::VULKAN,
            Api::Metal => wgpu::Backends::METAL,
            Api::Dx12 => wgpu::Backends::DX12,
            Api::Gl => wgpu::Backends::GL,
            Api::Any => wgpu::Backends::all(),
        }
    }
}

/// Optional capabilities the kernels use when present. Each has a kill switch so every
/// fallback path can be tested on any device: `VLA_WGPU_NO_F16=1`, `VLA_WGPU_NO_SUBGROUPS=1`,
/// `VLA_WGPU_NO_INT_DOT=1`, `VLA_WGPU_NO_TIMESTAMPS=1`. [`WgpuBackend::with_caps`] turns them
/// off per backend instead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caps {
    pub f16: bool,
    pub subgroups: bool,
    /// WGSL `dot4I8Packed` (the `packed_4x8_integer_dot_product` language extension) for
    /// quantized matmuls; without it they use plain integer multiplies.
    pub int_dot: bool,
    /// Timestamp queries around each stage of a staged graph (stage times in one
    /// submission); without them a staged graph runs as one pass and reports no stage times.
    pub timestamps: bool,
}

impl Caps {
    /// Every capability on: `with_caps(api, Caps::ALL)` is the same as `new(api)`.
    pub const ALL: Caps = Caps {
        f16: true,
        subgroups: true,
        int_dot: true,
        timestamps: true,
    };
}

/// With [`WgpuOptions::flash_attn`] unset, attention over more keys than this uses the
/// flash-style kernel (the score-row kernel keeps `4 * Sk` bytes of scores in workgroup
/// memory per query row, which lowers occupancy on GPUs as `Sk` grows: 4 KiB at 1024 keys).
/// Not tuned on a GPU yet; on lavapipe the score-row kernel is 1.5-1.9x faster at every Sk
/// it fits (350..4096, fewer barriers), so there the threshold only trades speed for memory.
pub const FLASH_ATTN_MIN_SK: usize = 1024;

/// Which kernels run the float matmuls (the bulk of every model's time).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelSet {
    /// Workgroup-memory tiles with coalesced loads (`shaders/matmul_tiled.wgsl`): for GPUs.
    Gpu,
    /// Register blocking without workgroup memory (`shaders/matmul.wgsl`): for CPU
    /// adapters such as lavapipe, where barriers cost more than they save.
    Portable,
}

impl KernelSet {
    pub fn name(self) -> &'static str {
        match self {
            KernelSet::Gpu => "gpu",
            KernelSet::Portable => "portable",
        }
    }

    /// Parses `gpu` or `portable` (`VLA_WGPU_KERNELS`).
    pub fn from_name(name: &str) -> Result<Self> {
        match name {
            "gpu" => Ok(KernelSet::Gpu),
            "portable" => Ok(KernelSet::Portable),
            _ => Err(Error::InvalidArgument(format!(
                "kernel set {name:?}: expected gpu or portable"
            ))),
        }
    }
}

/// The output tile of the GPU-grade GEMM (`shaders/gemm_tiled.wgsl`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GemmTile {
    /// 16 x 64, 64 invocations of 4 x 4 outputs: for small M (the action expert).
    Small,
    /// 64 x 64, 256 invocations of 4 x 4.
    Medium,
    /// 128 x 128, 256 invocations of 8 x 8: for large outputs.
    Large,
}

impl GemmTile {
    /// Parses `s`, `m` or `l` (`VLA_WGPU_GEMM_TILE`).
    pub fn from_name(name: &str) -> Result<Self> {
        match name {
            "s" => Ok(GemmTile::Small),
            "m" => Ok(GemmTile::Medium),
            "l" => Ok(GemmTile::Large),
            _ => Err(Error::InvalidArgument(format!(
                "GEMM tile {name:?}: expected s, m or l"
            ))),
        }
    }
}

/// Run-time choices between kernel variants (not device capabilities).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WgpuOptions {
    /// Attention kernel. Portable set: `Some(true)` always the flash-style one (online
    /// softmax over key tiles), `Some(false)` the score-row one where it fits workgroup
    /// memory, `None` (default) flash when `Sk` exceeds [`FLASH_ATTN_MIN_SK`]. GPU set: the
    /// fused tiled flash kernel unless `Some(false)`, which composes two GEMMs and a softmax
    /// (for comparison). Env: `VLA_WGPU_FLASH_ATTN=1` / `=0`.
    pub flash_attn: Option<bool>,
    /// Time every dispatch (one timestamped compute pass each) for
    /// [`Executable::profile`](crate::backend::Executable::profile); costs some speed, so
    /// off by default. Env: `VLA_WGPU_PROFILE=1`.
    pub profile: bool,
    /// The matmul kernels; `None` (default): [`KernelSet::Portable`] on a CPU adapter,
    /// [`KernelSet::Gpu`] on any other. Env: `VLA_WGPU_KERNELS=gpu|portable`.
    pub kernels: Option<KernelSet>,
    /// One GEMM tile for every product of the GPU kernel set, instead of the choice by
    /// shape: for tuning. Env: `VLA_WGPU_GEMM_TILE=s|m|l`.
    pub gemm_tile: Option<GemmTile>,
    /// The GEMM's 4 x 4 tiles with four named vec4 accumulators instead of a 4 x 4 array
    /// (a variant to measure on GPUs). Env: `VLA_WGPU_GEMM_VEC4=1`.
    pub gemm_vec4: bool,
    /// naga's forced loop bounding (wgpu's default: an extra counter in every loop, so a
    /// driver may not treat an infinite loop as unreachable). It hides trip counts from the
    /// driver's compiler (no unrolling: the fixed-size register arrays of the matmul
    /// kernels spill), and our loops are all counted (see `shader.rs`), so off by default.
    /// Env: `VLA_WGPU_LOOP_BOUNDING=1`.
    pub loop_bounding: bool,
    /// Split K across workgroups for weight products whose 16-row output tiles make too few
    /// of them (the action experts), adding the splits up in a second dispatch: `None`
    /// (default) or `Some(true)` where it applies, `Some(false)` never. Env:
    /// `VLA_WGPU_SPLIT_K=0` / `=1`.
    pub split_k: Option<bool>,
    /// Fusions across graph nodes (`fuse/`): sibling weight products (a layer's q, k and
    /// v projections: one input, one norm, weights of one dtype) as one product over their
    /// weights concatenated at upload, one dispatch writing each one's output; a gated
    /// residual (pi0.5) written by the product it gates; a layer's query and key ropes in
    /// one dispatch. `None` (default) or `Some(true)`;
    /// `Some(false)` each node its own dispatches. Env: `VLA_WGPU_FUSE_NODES=0` / `=1`.
    pub fuse_nodes: Option<bool>,
    /// How activations are stored between kernels (f16 needs the adapter's shader-f16;
    /// compiling refuses it otherwise). Env: `VLA_WGPU_ACT_DTYPE=f32|f16|bf16`.
    pub act_dtype: ActDtype,
}

impl WgpuOptions {
    /// Defaults overridden by the environment (`VLA_WGPU_FLASH_ATTN`, `VLA_WGPU_PROFILE`,
    /// `VLA_WGPU_KERNELS`, `VLA_WGPU_GEMM_TILE`, `VLA_WGPU_GEMM_VEC4`,
    /// `VLA_WGPU_LOOP_BOUNDING`, `VLA_WGPU_SPLIT_K`, `VLA_WGPU_FUSE_NODES`,
    /// `VLA_WGPU_ACT_DTYPE`); an unknown value
    /// is an error.
    pub fn from_env() -> Result<Self> {
        let flash_attn = env_switch("VLA_WGPU_FLASH_ATTN");
        Ok(WgpuOptions {
            flash_attn,
            profile: env_flag("VLA_WGPU_PROFILE"),
            kernels: env_choice("VLA_WGPU_KERNELS", KernelSet::from_name)?,
            gemm_tile: env_choice("VLA_WGPU_GEMM_TILE", GemmTile::from_name)?,
            gemm_vec4: env_flag("VLA_WGPU_GEMM_VEC4"),
            loop_bounding: env_flag("VLA_WGPU_LOOP_BOUNDING"),
            split_k: env_switch("VLA_WGPU_SPLIT_K"),
            fuse_nodes: env_switch("VLA_WGPU_FUSE_NODES"),
            act_dtype: env_choice("VLA_WGPU_ACT_DTYPE", ActDtype::from_name)?.unwrap_or_default(),
        })
    }
}

impl GpuContext {
    /// The matmul kernel set in effect (see [`WgpuOptions::kernels`]).
    pub fn kernels(&self) -> KernelSet {
        self.options.kernels.unwrap_or(match self.info.device_type {
            wgpu::DeviceType::Cpu => KernelSet::Portable,
            _ => KernelSet::Gpu,
        })
    }
}

pub(crate) struct GpuContext {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub info: wgpu::AdapterInfo,
    pub limits: wgpu::Limits,
    pub caps: Caps,
    pub options: WgpuOptions,
    pub pipelines: shader::PipelineCache,
    /// Weights the live executables uploaded, which later ones over the same store share.
    pub shared: shared::SharedWeights,
}

/// A wgpu device with its kernels; cheap to clone.
#[derive(Clone)]
pub struct WgpuBackend {
    ctx: Arc<GpuContext>,
}

/// The value of the variable `name` parsed by `parse` (`None` when unset or empty); a value
/// `parse` refuses is an error naming the variable.
fn env_choice<T>(name: &str, parse: fn(&str) -> Result<T>) -> Result<Option<T>> {
    match std::env::var(name) {
        Ok(v) if !v.is_empty() => parse(&v)
            .map(Some)
            .map_err(|e| Error::InvalidArgument(format!("{name}: {e}"))),
        _ => Ok(None),
    }
}

fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| !v.is_empty() && v != "0")
}

/// A switch whose default is decided elsewhere: unset or empty `None`, `0` off, else on.
fn env_switch(name: &str) -> Option<bool> {
    std::env::var(name)
        .ok()
        .filter(|v| !v.is_empty())
        .map(|v| v != "0")
}

impl WgpuBackend {
    /// Opens the first adapter of `api`. Set `VLA_WGPU_FALLBACK=1` to prefer a software
    /// adapter (lavapipe) even when a GPU is present. Options come from the environment
    /// ([`WgpuOptions::from_env`]).
    pub fn new(api: Api) -> Result<Self> {
        Self::with_config(api, Caps::ALL, WgpuOptions::from_env()?)
    }

    /// Like [`Self::new`] with explicit options (the environment is not read for them).
    pub fn with_options(api: Api, options: WgpuOptions) -> Result<Self> {
        Self::with_config(api, Caps::ALL, options)
    }

    /// Like [`Self::new`], using only the capabilities also set in `allowed` (a capability
    /// the adapter lacks, or that an env kill switch turns off, stays off). Lets tests run
    /// fallback paths next to the fast ones in one process.
    pub fn with_caps(api: Api, allowed: Caps) -> Result<Self> {
        Self::with_config(api, allowed, WgpuOptions::from_env()?)
    }

    fn with_config(api: Api, allowed: Caps, options: WgpuOptions) -> Result<Self> {
        let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
        desc.backends = api.backends();
        let instance = wgpu::Instance::new(desc);
        let adapter = pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions {
            power_preference: wgpu::PowerPreference::HighPerformance,
            force_fallback_adapter: env_flag("VLA_WGPU_FALLBACK"),
            compatible_surface: None,
            apply_limit_buckets: false,
        }))
        .map_err(|_| {
            let found: Vec<String> =
                pollster::block_on(instance.enumerate_adapters(wgpu::Backends::all()))
                    .iter()
                    .map(|a| {
                        let i = a.get_info();
                        format!("{:?} {:?} {:?}", i.backend, i.device_type, i.name)
                    })
                    .collect();
            Error::NoAdapter {
                backend: api.name().to_owned(),
                found: if found.is_empty() {
                    "none".into()
                } else {
                    found.join(", ")
                },
            }
        })?;
        let info = adapter.get_info();
        if info.device_type == wgpu::DeviceType::Cpu {
            tracing::warn!(
                "the {} adapter is a CPU ({}: software Vulkan such as lavapipe): it runs the kernels for checking them, typically 10-25x slower than --backend cpu",
                api.name(),
                info.name
            );
        }
        let available = adapter.features();
        let mut features = wgpu::Features::empty();
        let int_dot = instance
            .wgsl_language_features()
            .contains(wgpu::WgslLanguageFeatures::Packed4x8IntegerDotProduct);
        let caps = Caps {
            f16: allowed.f16
                && available.contains(wgpu::Features::SHADER_F16)
                && !env_flag("VLA_WGPU_NO_F16"),
            subgroups: allowed.subgroups
                && available.contains(wgpu::Features::SUBGROUP)
                && !env_flag("VLA_WGPU_NO_SUBGROUPS"),
            int_dot: allowed.int_dot && int_dot && !env_flag("VLA_WGPU_NO_INT_DOT"),
            timestamps: allowed.timestamps
                && available.contains(wgpu::Features::TIMESTAMP_QUERY)
                && !env_flag("VLA_WGPU_NO_TIMESTAMPS"),
        };
        if caps.f16 {
            features |= wgpu::Features::SHADER_F16;
        }
        if caps.subgroups {
            features |= wgpu::Features::SUBGROUP;
        }
        if caps.timestamps {
            features |= wgpu::Features::TIMESTAMP_QUERY;
        }
        let limits = adapter.limits();
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("vla"),
            required_features: features,
            required_limits: limits.clone(),
            ..Default::default()
        }))
        .map_err(|e| Error::Gpu(format!("request_device: {e}")))?;
        tracing::info!(adapter = %info.name, driver = %info.driver_info, ?caps, ?options, "wgpu device");
        Ok(WgpuBackend {
            ctx: Arc::new(GpuContext {
                device,
                queue,
                info,
                limits,
                caps,
                options,
                pipelines: shader::PipelineCache::default(),
                shared: Default::default(),
            }),
        })
    }

    /// The same device with other options (its own pipeline cache and shared weights).
    pub fn reconfigured(&self, options: WgpuOptions) -> Self {
        let c = &self.ctx;
        WgpuBackend {
            ctx: Arc::new(GpuContext {
                device: c.device.clone(),
                queue: c.queue.clone(),
                info: c.info.clone(),
                limits: c.limits.clone(),
                caps: c.caps,
                options,
                pipelines: shader::PipelineCache::default(),
                // uploads may depend on the options: none shared with the other
                shared: Default::default(),
            }),
        }
    }

    pub fn options(&self) -> WgpuOptions {
        self.ctx.options
    }

    pub fn adapter_info(&self) -> &wgpu::AdapterInfo {
        &self.ctx.info
    }

    /// The matmul kernels this backend runs ([`WgpuOptions::kernels`], or the adapter's
    /// default).
    pub fn kernel_set(&self) -> KernelSet {
        self.ctx.kernels()
    }

    pub fn caps(&self) -> Caps {
        self.ctx.caps
    }
}

impl Backend for WgpuBackend {
    fn description(&self) -> String {
        let i = &self.ctx.info;
        let act = match self.ctx.options.act_dtype {
            ActDtype::F32 => String::new(),
            a => format!(", {} activations", a.name()),
        };
        format!(
            "{:?}: {} ({:?}, driver {} {}){act}",
            i.backend, i.name, i.device_type, i.driver, i.driver_info
        )
        .to_lowercase()
    }

    fn compile<'w>(
        &self,
        graph: &Graph,
        weights: &'w dyn WeightStore,
    ) -> Result<Box<dyn Executable + 'w>> {
        Ok(Box::new(exec::WgpuExecutable::new(
            self.ctx.clone(),
            graph,
            weights,
        )?))
    }

    /// Weights are uploaded to the device: the store is not kept.
    fn compile_shared(&self, graph: &Graph, weights: SharedStore) -> Result<Box<dyn Executable>> {
        Ok(Box::new(exec::WgpuExecutable::new(
            self.ctx.clone(),
            graph,
            &*weights,
        )?))
    }
}
