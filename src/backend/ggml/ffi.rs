//! Owned handles around the raw ggml API (`llama-cpp-sys-2` bindings): each frees its
//! object on drop. [`Compiled::build`] gathers the ones a compiled graph needs and hands
//! the code that fills them [`super::ctx`]'s branded handles. Everything here is
//! single-threaded; an executable owns its handles.

use super::ctx::{Brand, CGraph, Ctx, T};
use crate::{Error, Result};
use llama_cpp_sys_2 as sys;
use std::ffi::{c_char, c_void, CStr, CString};
use std::marker::PhantomData;
use std::ptr::{self, NonNull};
use std::sync::Once;

/// Routes ggml's log (stderr by default) to `tracing` at debug level.
pub(crate) fn init_logging() {
    static ONCE: Once = Once::new();
    unsafe extern "C" fn log(level: sys::ggml_log_level, text: *const c_char, _: *mut c_void) {
        if text.is_null() {
            return;
        }
        // SAFETY: ggml passes a NUL-terminated string valid for this call.
        let s = unsafe { CStr::from_ptr(text) }.to_string_lossy();
        let s = s.trim_end();
        if !s.is_empty() {
            if level == sys::GGML_LOG_LEVEL_ERROR {
                tracing::warn!(target: "ggml", "{s}");
            } else {
                tracing::debug!(target: "ggml", "{s}");
            }
        }
    }
    // SAFETY: installs a plain function pointer; ggml keeps no other state.
    ONCE.call_once(|| unsafe { sys::ggml_log_set(Some(log), ptr::null_mut()) });
}

/// The names of ggml's registered devices, e.g. `["CPU"]` or `["CUDA0", "CPU"]`.
pub(crate) fn device_names() -> Vec<String> {
    // SAFETY: read-only queries of ggml's static device registry.
    unsafe {
        (0..sys::ggml_backend_dev_count())
            .map(|i| {
                let dev = sys::ggml_backend_dev_get(i);
                CStr::from_ptr(sys::ggml_backend_dev_name(dev))
                    .to_string_lossy()
                    .into_owned()
            })
            .collect()
    }
}

/// Whether ggml-cpu was built with SIMD kernels (AVX/AVX2/F16C/FMA/SSE3/SSSE3/AVX-512/NEON).
pub(crate) fn cpu_has_simd() -> bool {
    // SAFETY: pure queries of compile-time flags.
    unsafe {
        sys::ggml_cpu_has_avx() != 0
            || sys::ggml_cpu_has_avx2() != 0
            || sys::ggml_cpu_has_f16c() != 0
            || sys::ggml_cpu_has_fma() != 0
            || sys::ggml_cpu_has_sse3() != 0
            || sys::ggml_cpu_has_ssse3() != 0
            || sys::ggml_cpu_has_avx512() != 0
            || sys::ggml_cpu_has_neon() != 0
    }
}

pub(crate) struct BackendHandle(NonNull<sys::ggml_backend>);

impl BackendHandle {
    /// `ggml_backend_init_by_name` (device names: `CPU`, `CUDA0`, `SYCL0`, ...).
    pub fn init(device: &str) -> Result<Self> {
        init_logging();
        let c = CString::new(device)
            .map_err(|_| Error::InvalidArgument(format!("bad device name {device:?}")))?;
        // SAFETY: `c` is a valid C string; a null return means "no such device".
        let b = unsafe { sys::ggml_backend_init_by_name(c.as_ptr(), ptr::null()) };
        NonNull::new(b)
            .map(BackendHandle)
            .ok_or_else(|| Error::NoAdapter {
                backend: format!("ggml {device}"),
                found: device_names().join(", "),
            })
    }

    fn raw(&self) -> sys::ggml_backend_t {
        self.0.as_ptr()
    }

    pub fn is_cpu(&self) -> bool {
        // SAFETY: a live backend.
        unsafe { sys::ggml_backend_is_cpu(self.raw()) }
    }

    pub fn set_threads(&self, n: usize) {
        if self.is_cpu() {
            // SAFETY: a live CPU backend.
            unsafe { sys::ggml_backend_cpu_set_n_threads(self.raw(), n.clamp(1, 512) as i32) }
        }
    }

    /// `name: device description`, e.g. `CPU: AMD EPYC 7B13`.
    pub fn describe(&self) -> String {
        // SAFETY: a live backend; the strings are static in ggml.
        unsafe {
            let dev = sys::ggml_backend_get_device(self.raw());
            let name = CStr::from_ptr(sys::ggml_backend_name(self.raw())).to_string_lossy();
            if dev.is_null() {
                return name.into_owned();
            }
            let desc = CStr::from_ptr(sys::ggml_backend_dev_description(dev)).to_string_lossy();
            format!("{name}: {}", desc.trim())
        }
    }
}

impl Drop for BackendHandle {
    fn drop(&mut self) {
        // SAFETY: owned, freed once.
        unsafe { sys::ggml_backend_free(self.raw()) }
    }
}

/// A ggml context holding tensor metadata only (`no_alloc`): data lives in backend buffers.
struct Context(NonNull<sys::ggml_context>);

impl Context {
    /// Room for `n_tensors` tensor headers and one graph of `graph_size` nodes.
    fn new(n_tensors: usize, graph_size: usize) -> Result<Self> {
        // SAFETY: size queries.
        let mem = unsafe {
            sys::ggml_tensor_overhead() * (n_tensors + 8)
                + sys::ggml_graph_overhead_custom(graph_size, false)
        } + 4096;
        let params = sys::ggml_init_params {
            mem_size: mem,
            mem_buffer: ptr::null_mut(),
            no_alloc: true,
        };
        // SAFETY: ggml allocates `mem` bytes for metadata.
        let ctx = unsafe { sys::ggml_init(params) };
        NonNull::new(ctx)
            .map(Context)
            .ok_or_else(|| Error::InvalidArgument("ggml_init failed (out of memory?)".into()))
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: owned, freed once; no tensor of it is used afterwards (its owner, a
        // `Build` or `Compiled`, drops the scheduler first and outlives every handle).
        unsafe { sys::ggml_free(self.0.as_ptr()) }
    }
}

/// A backend buffer (weights, constants).
struct Buffer(NonNull<sys::ggml_backend_buffer>);

impl Buffer {
    /// Allocates every tensor of `ctx` in one buffer of `backend`; `None` when it has none.
    fn alloc_ctx_tensors(ctx: Ctx<'_>, backend: &BackendHandle) -> Result<Option<Self>> {
        // SAFETY: a live context (a build's) and backend.
        unsafe {
            if sys::ggml_get_first_tensor(ctx.as_ptr()).is_null() {
                return Ok(None);
            }
            let buf = sys::ggml_backend_alloc_ctx_tensors(ctx.as_ptr(), backend.raw());
            let buf = NonNull::new(buf)
                .ok_or_else(|| Error::Gpu("ggml: could not allocate the weight buffer".into()))?;
            sys::ggml_backend_buffer_set_usage(
                buf.as_ptr(),
                sys::GGML_BACKEND_BUFFER_USAGE_WEIGHTS,
            );
            Ok(Some(Buffer(buf)))
        }
    }

    fn size(&self) -> usize {
        // SAFETY: a live buffer.
        unsafe { sys::ggml_backend_buffer_get_size(self.0.as_ptr()) }
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // SAFETY: owned, freed once.
        unsafe { sys::ggml_backend_buffer_free(self.0.as_ptr()) }
    }
}

/// ggml's scheduler over `[primary, cpu]` (or `[cpu]`): it places each op on the first
/// backend that supports it and copies tensors between them. It keeps pointers to the
/// backends: its owner, a [`Compiled`], drops it before them.
struct Sched(NonNull<sys::ggml_backend_sched>);

impl Sched {
    fn new(backends: &[&BackendHandle], graph_size: usize) -> Result<Self> {
        let mut raw: Vec<sys::ggml_backend_t> = backends.iter().map(|b| b.raw()).collect();
        // SAFETY: live backends, which outlive the scheduler (`Compiled` drops it first).
        let s = unsafe {
            sys::ggml_backend_sched_new(
                raw.as_mut_ptr(),
                ptr::null_mut(),
                raw.len() as i32,
                graph_size,
                false,
                true,
            )
        };
        NonNull::new(s)
            .map(Sched)
            .ok_or_else(|| Error::InvalidArgument("ggml_backend_sched_new failed".into()))
    }

    fn raw(&self) -> sys::ggml_backend_sched_t {
        self.0.as_ptr()
    }
}

impl Drop for Sched {
    fn drop(&mut self) {
        // SAFETY: owned, freed once.
        unsafe { sys::ggml_backend_sched_free(self.raw()) }
    }
}

/// A tensor kept by [`Build::keep`], read and written through its [`Compiled`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Slot(usize);

/// What [`Compiled::build`] hands its closure: it makes the build's contexts, allocates
/// their tensors and keeps the ones used after the build. `'c` brands the handles of its
/// contexts (see [`super::ctx`]); it frees nothing before the `Compiled` it becomes.
pub(crate) struct Build<'c> {
    // Field order is drop order (on an error): the buffers before the contexts.
    buffers: Vec<Buffer>,
    contexts: Vec<Context>,
    kept: Vec<*mut sys::ggml_tensor>,
    /// The primary device first.
    backends: Vec<BackendHandle>,
    _brand: Brand<'c>,
}

impl<'c> Build<'c> {
    /// A metadata-only context with room for `n_tensors` tensor headers and one graph of
    /// `graph_size` nodes.
    pub fn context(&mut self, n_tensors: usize, graph_size: usize) -> Result<Ctx<'c>> {
        let c = Context::new(n_tensors, graph_size)?;
        let ptr = c.0;
        self.contexts.push(c);
        // SAFETY: a live context that is freed only with this build or the `Compiled` it
        // becomes, after `'c`: the brand of this build alone, which `Compiled::build`'s
        // closure cannot let out.
        Ok(unsafe { Ctx::from_raw(ptr) })
    }

    /// Allocates every tensor of `ctx` in one buffer of the primary backend.
    pub fn alloc_tensors(&mut self, ctx: Ctx<'c>) -> Result<()> {
        let buf = Buffer::alloc_ctx_tensors(ctx, &self.backends[0])?;
        self.buffers.extend(buf);
        Ok(())
    }

    /// Keeps `t` for use after the build (the graph's inputs and outputs).
    pub fn keep(&mut self, t: T<'c>) -> Slot {
        self.kept.push(t.as_ptr());
        Slot(self.kept.len() - 1)
    }
}

/// What ggml holds for one compiled graph, freed together: the backends (primary first),
/// the contexts of its [`Build`] and the buffers holding their tensors, the scheduler
/// that runs the compute graph, and the tensors the build kept ([`Slot`]s).
pub(crate) struct Compiled {
    // Field order is drop order: the scheduler and buffers before the contexts whose
    // tensors they hold, the backends last.
    sched: Sched,
    graph: NonNull<sys::ggml_cgraph>,
    kept: Vec<*mut sys::ggml_tensor>,
    buffers: Vec<Buffer>,
    _contexts: Vec<Context>,
    backends: Vec<BackendHandle>,
}

// SAFETY: a `Compiled` exclusively owns every ggml object it points to (its own backend
// instances, contexts, buffers and scheduler); nothing is shared with another thread, and
// ggml objects are not tied to the thread that created them.
unsafe impl Send for Compiled {}

impl Compiled {
    /// Runs `f` on a new [`Build`] over `backends` (primary first), then gives the graph
    /// it returns a scheduler over them (room for `graph_size` nodes). `f` must work for
    /// any brand `'c`, so no handle of the build gets out of it but by [`Build::keep`].
    pub fn build<X>(
        backends: Vec<BackendHandle>,
        graph_size: usize,
        f: impl for<'c> FnOnce(&mut Build<'c>) -> Result<(CGraph<'c>, X)>,
    ) -> Result<(Self, X)> {
        let mut b = Build {
            buffers: Vec::new(),
            contexts: Vec::new(),
            kept: Vec::new(),
            backends,
            _brand: PhantomData,
        };
        let (graph, x) = f(&mut b)?;
        let sched = Sched::new(&b.backends.iter().collect::<Vec<_>>(), graph_size)?;
        let Build {
            buffers,
            contexts,
            kept,
            backends,
            _brand,
        } = b;
        let compiled = Compiled {
            sched,
            graph: graph.as_non_null(),
            kept,
            buffers,
            _contexts: contexts,
            backends,
        };
        Ok((compiled, x))
    }

    /// A kept tensor, branded with this borrow: it lives as long as `self`.
    fn tensor(&self, s: Slot) -> T<'_> {
        // SAFETY: a tensor of our contexts, which live as long as `self`; no `Ctx` has the
        // brand (a borrow of `self`).
        unsafe { T::from_raw(self.kept[s.0]) }
    }

    /// Whether a kept tensor got memory (an input nothing reads is left out of the graph).
    pub fn is_allocated(&self, s: Slot) -> bool {
        self.tensor(s).is_allocated()
    }

    /// [`T::set`] of a kept tensor.
    pub fn set(&mut self, s: Slot, bytes: &[u8]) {
        self.tensor(s).set(bytes)
    }

    /// [`T::get_f32`] of a kept tensor.
    pub fn get_f32(&self, s: Slot) -> Vec<f32> {
        self.tensor(s).get_f32()
    }

    /// Plans the graph's activations afresh; false when ggml cannot allocate them.
    pub fn alloc_graph(&mut self) -> bool {
        // SAFETY: a live scheduler and a graph of our contexts.
        unsafe {
            sys::ggml_backend_sched_reset(self.sched.raw());
            sys::ggml_backend_sched_alloc_graph(self.sched.raw(), self.graph.as_ptr())
        }
    }

    /// Runs the graph (allocating it first when it is not).
    pub fn compute(&mut self) -> sys::ggml_status {
        // SAFETY: a live scheduler and a graph of our contexts, whose ops ggml checked as
        // they were built; what kernels read at run time (`get_rows` ids) holds what the
        // `Ctx` methods ask of their callers (see `super::ctx`).
        unsafe { sys::ggml_backend_sched_graph_compute(self.sched.raw(), self.graph.as_ptr()) }
    }

    /// The scheduler's activation buffers, summed over the backends.
    pub fn activation_bytes(&self) -> u64 {
        self.backends
            .iter()
            .map(|be| {
                // SAFETY: a live scheduler and one of its backends.
                let n =
                    unsafe { sys::ggml_backend_sched_get_buffer_size(self.sched.raw(), be.raw()) };
                n as u64
            })
            .sum()
    }

    /// The build's buffers (weights, constants).
    pub fn buffer_bytes(&self) -> u64 {
        self.buffers.iter().map(|b| b.size() as u64).sum()
    }

    /// The graph's nodes (ops).
    pub fn n_nodes(&self) -> usize {
        // SAFETY: a live graph.
        unsafe { sys::ggml_graph_n_nodes(self.graph.as_ptr()) as usize }
    }
}
