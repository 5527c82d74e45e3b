//! A compiled ggml graph: weights in a backend buffer, activations planned by ggml's
//! scheduler, inputs copied in and outputs read back each run.

use super::ffi::{self, BackendHandle, Buffer, Context, Sched};
use super::lower::{self, Lowered, Shadow};
use crate::backend::{match_inputs, ExecStats, Executable, RunCounters, WeightStore};
use crate::graph::Graph;
use crate::{Error, Result, Tensor};
use llama_cpp_sys_2 as sys;

pub struct GgmlExecutable {
    // Field order is drop order: the scheduler and buffers before the contexts whose
    // tensors they hold, the backends last.
    sched: Sched,
    _weight_buf: Option<Buffer>,
    _const_buf: Option<Buffer>,
    _graph_ctx: Context,
    _const_ctx: Context,
    _weight_ctx: Context,
    primary: BackendHandle,
    cpu: Option<BackendHandle>,
    graph: Graph,
    lowered: Lowered,
    weight_bytes: u64,
    peak: u64,
    runs: RunCounters,
}

// SAFETY: the executable exclusively owns every ggml object it points to (its own backend
// instances, contexts, buffers and scheduler); nothing is shared with another thread, and
// ggml objects are not tied to the thread that created them.
unsafe impl Send for GgmlExecutable {}

impl GgmlExecutable {
    pub(crate) fn new(
        device: &str,
        threads: usize,
        graph: &Graph,
        store: &dyn WeightStore,
    ) -> Result<Self> {
        let primary = BackendHandle::init(device)?;
        primary.set_threads(threads);
        let cpu = if primary.is_cpu() {
            None
        } else {
            let c = BackendHandle::init("CPU")?;
            c.set_threads(threads);
            Some(c)
        };
        let n = graph.nodes().len();

        // Weights: stored type for mul_mat/get_rows/im2col, F32 for everything else.
        let weight_ctx = Context::new(2 * n, 0)?;
        let weights = lower::create_weights(graph, store, &weight_ctx)?;
        let weight_buf = Buffer::alloc_ctx_tensors(&weight_ctx, &primary)?;
        for u in &weights.uploads {
            // SAFETY: allocated above; the byte count is the tensor's (same shape and type).
            unsafe { ffi::tensor_set(u.tensor, u.data.raw_bytes()) };
        }

        let size = lower::graph_size(graph);
        let graph_ctx = Context::new(size, size)?;
        let const_ctx = Context::new(2 * n, 0)?;
        let (lowered, const_uploads) = lower::lower(graph, &weights, &graph_ctx, &const_ctx)?;
        let const_buf = Buffer::alloc_ctx_tensors(&const_ctx, &primary)?;
        for u in &const_uploads {
            // SAFETY: as for the weights.
            unsafe { ffi::tensor_set(u.tensor, u.data.raw_bytes()) };
        }

        let mut backends = vec![&primary];
        backends.extend(cpu.as_ref());
        let sched = Sched::new(&backends, size)?;
        let mut exe = GgmlExecutable {
            sched,
            weight_bytes: weight_buf.as_ref().map_or(0, |b| b.size() as u64)
                + const_buf.as_ref().map_or(0, |b| b.size() as u64),
            _weight_buf: weight_buf,
            _const_buf: const_buf,
            _graph_ctx: graph_ctx,
            _const_ctx: const_ctx,
            _weight_ctx: weight_ctx,
            primary,
            cpu,
            graph: graph.clone(),
            lowered,
            peak: 0,
            runs: RunCounters::default(),
        };
        exe.alloc()?;
        exe.peak = exe.activation_bytes();
        Ok(exe)
    }

    fn alloc(&mut self) -> Result<()> {
        // SAFETY: live scheduler and graph.
        unsafe {
            sys::ggml_backend_sched_reset(self.sched.raw());
            if !sys::ggml_backend_sched_alloc_graph(self.sched.raw(), self.lowered.graph) {
                return Err(Error::Gpu(
                    "ggml: could not allocate the compute graph".into(),
                ));
            }
        }
        Ok(())
    }

    fn activation_bytes(&self) -> u64 {
        let mut b = vec![self.primary.raw()];
        b.extend(self.cpu.as_ref().map(|c| c.raw()));
        // SAFETY: live scheduler and backends.
        b.iter()
            .map(
                |&be| unsafe { sys::ggml_backend_sched_get_buffer_size(self.sched.raw(), be) }
                    as u64,
            )
            .sum()
    }
}

/// Exact integers as I32 (rope positions; embedding ids, checked against the vocab).
fn to_i32(s: &Shadow, v: &[f32]) -> Result<Vec<i32>> {
    v.iter()
        .map(|&x| {
            let int = x.fract() == 0.0 && x.abs() < 2_147_483_648.0;
            match s.vocab {
                Some(vocab) if !(int && x >= 0.0 && (x as usize) < vocab) => {
                    Err(Error::InvalidArgument(format!(
                        "input {:?}: token id {x} is not an integer in [0, {vocab})",
                        s.input
                    )))
                }
                None if !int => Err(lower::not_impl(format!(
                    "rope at non-integer position {x} (input {:?})",
                    s.input
                ))),
                _ => Ok(x as i32),
            }
        })
        .collect()
}

/// Whether a graph tensor got memory (an input nothing reads is left out of the graph).
fn allocated(t: ffi::T) -> bool {
    // SAFETY: a live tensor of our graph context.
    unsafe { !(*t).buffer.is_null() || !(*t).data.is_null() }
}

impl Executable for GgmlExecutable {
    fn run(&mut self, inputs: &[(&str, &Tensor)]) -> Result<Vec<Tensor<'static>>> {
        let by_name = match_inputs(&self.graph, inputs)?;
        // Check and convert everything before touching the graph.
        let mut shadow_data = Vec::with_capacity(self.lowered.shadows.len());
        for s in &self.lowered.shadows {
            shadow_data.push(to_i32(s, &by_name[&s.input].f32_cow()?)?);
        }
        // The graph stays allocated from `new`. Allocating it again would drop the
        // scheduler's copies of the inputs for a GPU device (its split inputs), so the
        // device would read copies nobody fills (zeros on ggml-vulkan).
        let mut runs = RunCounters::default();
        for (name, t) in &self.lowered.inputs {
            if allocated(*t) {
                let v = by_name[name].f32_cow()?;
                // SAFETY: an allocated F32 tensor of the input's shape (checked by match_inputs).
                unsafe { ffi::tensor_set(*t, bytemuck::cast_slice(&v)) };
                runs.h2d_bytes += 4 * v.len() as u64;
            }
        }
        for (name, t) in &self.lowered.byte_inputs {
            if allocated(*t) {
                let q = super::lower::q8_bytes(by_name[name].raw_bytes());
                // SAFETY: an allocated Q8_0 tensor of the input's values rounded up to blocks.
                unsafe { ffi::tensor_set(*t, &q) };
                runs.h2d_bytes += q.len() as u64;
            }
        }
        for (s, d) in self.lowered.shadows.iter().zip(&shadow_data) {
            if allocated(s.tensor) {
                // SAFETY: an allocated I32 tensor with one element per input value.
                unsafe { ffi::tensor_set(s.tensor, bytemuck::cast_slice(d)) };
                runs.h2d_bytes += 4 * d.len() as u64;
            }
        }
        // SAFETY: allocated graph on a live scheduler.
        let status =
            unsafe { sys::ggml_backend_sched_graph_compute(self.sched.raw(), self.lowered.graph) };
        if status != sys::GGML_STATUS_SUCCESS {
            return Err(Error::Gpu(format!(
                "ggml graph compute failed (status {status})"
            )));
        }
        self.peak = self.peak.max(self.activation_bytes());
        // A graph compute is one submission the host waits for.
        runs.submits += 1;
        runs.host_waits += 1;
        runs.dispatches += self.stats().dispatches as u64;
        let outs = self
            .graph
            .outputs()
            .iter()
            .zip(&self.lowered.outputs)
            .map(|(o, &t)| {
                // SAFETY: an allocated contiguous F32 output tensor.
                let v = unsafe { ffi::tensor_get_f32(t) };
                runs.d2h_bytes += 4 * v.len() as u64;
                Tensor::from_f32(self.graph.node(*o).shape.clone(), v)
            })
            .collect();
        self.runs.add(&runs);
        outs
    }

    fn stats(&self) -> ExecStats {
        ExecStats {
            weight_bytes: self.weight_bytes,
            peak_activation_bytes: self.peak,
            runs: self.runs,
            // SAFETY: a live graph.
            dispatches: unsafe { sys::ggml_graph_n_nodes(self.lowered.graph) } as usize,
        }
    }
}
