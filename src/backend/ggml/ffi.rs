//! Owned handles around the raw ggml API (`llama-cpp-sys-2` bindings): each frees its
//! object on drop. Everything here is single-threaded; an executable owns its handles.

use crate::{Error, Result};
use llama_cpp_sys_2 as sys;
use std::ffi::{c_char, c_void, CStr, CString};
use std::ptr::{self, NonNull};
use std::sync::Once;

pub(crate) type T = *mut sys::ggml_tensor;

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

    pub fn raw(&self) -> sys::ggml_backend_t {
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
pub(crate) struct Context(NonNull<sys::ggml_context>);

impl Context {
    /// Room for `n_tensors` tensor headers and one graph of `graph_size` nodes.
    pub fn new(n_tensors: usize, graph_size: usize) -> Result<Self> {
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

    pub fn raw(&self) -> *mut sys::ggml_context {
        self.0.as_ptr()
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: owned, freed once; no tensor of it is used afterwards.
        unsafe { sys::ggml_free(self.raw()) }
    }
}

/// A backend buffer (weights).
pub(crate) struct Buffer(NonNull<sys::ggml_backend_buffer>);

impl Buffer {
    /// Allocates every tensor of `ctx` in one buffer of `backend`; `None` when it has none.
    pub fn alloc_ctx_tensors(ctx: &Context, backend: &BackendHandle) -> Result<Option<Self>> {
        // SAFETY: live context and backend.
        unsafe {
            if sys::ggml_get_first_tensor(ctx.raw()).is_null() {
                return Ok(None);
            }
            let buf = sys::ggml_backend_alloc_ctx_tensors(ctx.raw(), backend.raw());
            let buf = NonNull::new(buf)
                .ok_or_else(|| Error::Gpu("ggml: could not allocate the weight buffer".into()))?;
            sys::ggml_backend_buffer_set_usage(
                buf.as_ptr(),
                sys::GGML_BACKEND_BUFFER_USAGE_WEIGHTS,
            );
            Ok(Some(Buffer(buf)))
        }
    }

    pub fn size(&self) -> usize {
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
/// backend that supports it and copies tensors between them.
pub(crate) struct Sched(NonNull<sys::ggml_backend_sched>);

impl Sched {
    pub fn new(backends: &[&BackendHandle], graph_size: usize) -> Result<Self> {
        let mut raw: Vec<sys::ggml_backend_t> = backends.iter().map(|b| b.raw()).collect();
        // SAFETY: the backends outlive the scheduler (the executable drops it first).
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

    pub fn raw(&self) -> sys::ggml_backend_sched_t {
        self.0.as_ptr()
    }
}

impl Drop for Sched {
    fn drop(&mut self) {
        // SAFETY: owned, freed once.
        unsafe { sys::ggml_backend_sched_free(self.raw()) }
    }
}

/// Copies host bytes into an allocated tensor.
///
/// # Safety
/// `t` must be a live tensor with a buffer and exactly `bytes.len()` bytes of data.
pub(crate) unsafe fn tensor_set(t: T, bytes: &[u8]) {
    debug_assert_eq!(unsafe { sys::ggml_nbytes(t) }, bytes.len());
    unsafe { sys::ggml_backend_tensor_set(t, bytes.as_ptr().cast(), 0, bytes.len()) }
}

/// Reads an allocated f32 tensor.
///
/// # Safety
/// `t` must be a live, allocated, contiguous F32 tensor.
pub(crate) unsafe fn tensor_get_f32(t: T) -> Vec<f32> {
    let n = unsafe { sys::ggml_nelements(t) } as usize;
    let mut v = vec![0.0f32; n];
    unsafe { sys::ggml_backend_tensor_get(t, v.as_mut_ptr().cast(), 0, 4 * n) };
    v
}

// TEMP-DUMP-BEGIN
pub(crate) fn temp_dump_graph(g: *mut sys::ggml_cgraph) {
    use std::collections::HashMap;
    use std::fmt::Write as _;
    let Ok(path) = std::env::var("VLA_GGML_DUMP") else {
        return;
    };
    fn visit(t: *mut sys::ggml_tensor, ids: &mut HashMap<usize, usize>, out: &mut String) -> usize {
        if let Some(&i) = ids.get(&(t as usize)) {
            return i;
        }
        let tt = unsafe { &*t };
        let srcs: Vec<usize> = tt
            .src
            .iter()
            .filter(|s| !s.is_null())
            .map(|&s| visit(s, ids, out))
            .collect();
        let vs = if tt.view_src.is_null() {
            usize::MAX
        } else {
            visit(tt.view_src, ids, out)
        };
        let id = ids.len();
        ids.insert(t as usize, id);
        let mut hash = String::new();
        if !tt.buffer.is_null() && tt.op == sys::GGML_OP_NONE && tt.view_src.is_null() {
            let n = unsafe { sys::ggml_nbytes(t) };
            let mut v = vec![0u8; n];
            unsafe { sys::ggml_backend_tensor_get(t, v.as_mut_ptr().cast(), 0, n) };
            let mut h: u64 = 0xcbf29ce484222325;
            for b in v {
                h = (h ^ b as u64).wrapping_mul(0x100000001b3);
            }
            hash = format!(" data={h:016x}");
        }
        let _ = writeln!(
            out,
            "t{id} type={} op={} ne={:?} nb={:?} params={:?} flags={} voffs={} vsrc={} src={:?} alloc={}{hash}",
            tt.type_, tt.op, tt.ne, tt.nb, tt.op_params, tt.flags, tt.view_offs,
            if vs == usize::MAX { -1 } else { vs as i64 }, srcs, !tt.buffer.is_null()
        );
        id
    }
    let mut out = String::from("GRAPH\n");
    let mut ids = HashMap::new();
    let n = unsafe { sys::ggml_graph_n_nodes(g) };
    for i in 0..n {
        let t = unsafe { sys::ggml_graph_node(g, i) };
        let id = visit(t, &mut ids, &mut out);
        let _ = writeln!(out, "node {i} = t{id}");
    }
    use std::io::Write as _;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    f.write_all(out.as_bytes()).unwrap();
}
// TEMP-DUMP-END
