//! A compiled ggml graph: weights in a backend buffer, activations planned by ggml's
//! scheduler, inputs copied in and outputs read back each run.

use super::ffi::{BackendHandle, Compiled};
use super::lower::{self, Lowered, Shadow};
use crate::backend::{match_inputs, ExecStats, Executable, RunCounters, WeightStore};
use crate::graph::Graph;
use crate::{Error, Result, Tensor};
use llama_cpp_sys_2 as sys;

pub struct GgmlExecutable {
    /// The backends, contexts, buffers, scheduler and graph.
    compiled: Compiled,
    graph: Graph,
    lowered: Lowered,
    weight_bytes: u64,
    peak: u64,
    runs: RunCounters,
}

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
        let size = lower::graph_size(graph);
        let mut backends = vec![primary];
        backends.extend(cpu);
        let (compiled, lowered) = Compiled::build(backends, size, |b| {
            // Weights: stored type for mul_mat/get_rows/im2col, F32 for everything else.
            let weight_ctx = b.context(2 * n, 0)?;
            let weights = lower::create_weights(graph, store, weight_ctx)?;
            b.alloc_tensors(weight_ctx)?;
            for u in &weights.uploads {
                // allocated above; the byte count is the tensor's (same shape and type)
                u.tensor.set(u.data.raw_bytes());
                // copied into ggml's buffer: the file's pages may go
                if let Some(name) = &u.name {
                    store.read_for_now(name);
                }
            }

            let graph_ctx = b.context(size, size)?;
            let const_ctx = b.context(2 * n, 0)?;
            let (lowered, gf, const_uploads) =
                lower::lower(graph, &weights, b, graph_ctx, const_ctx)?;
            b.alloc_tensors(const_ctx)?;
            for u in &const_uploads {
                u.tensor.set(u.data.raw_bytes());
            }
            Ok((gf, lowered))
        })?;
        let mut exe = GgmlExecutable {
            weight_bytes: compiled.buffer_bytes(),
            compiled,
            graph: graph.clone(),
            lowered,
            peak: 0,
            runs: RunCounters::default(),
        };
        exe.alloc()?;
        exe.peak = exe.compiled.activation_bytes();
        Ok(exe)
    }

    fn alloc(&mut self) -> Result<()> {
        if !self.compiled.alloc_graph() {
            return Err(Error::Gpu(
                "ggml: could not allocate the compute graph".into(),
            ));
        }
        Ok(())
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
        let c = &mut self.compiled;
        for (name, t) in &self.lowered.inputs {
            if c.is_allocated(*t) {
                let v = by_name[name].f32_cow()?;
                // an F32 tensor of the input's shape (checked by match_inputs)
                c.set(*t, bytemuck::cast_slice(&v));
                runs.h2d_bytes += 4 * v.len() as u64;
            }
        }
        for (name, t) in &self.lowered.byte_inputs {
            if c.is_allocated(*t) {
                let q = super::lower::q8_bytes(by_name[name].raw_bytes());
                // a Q8_0 tensor of the input's values rounded up to blocks
                c.set(*t, &q);
                runs.h2d_bytes += q.len() as u64;
            }
        }
        for (s, d) in self.lowered.shadows.iter().zip(&shadow_data) {
            if c.is_allocated(s.tensor) {
                // an I32 tensor with one element per input value (ids checked by to_i32)
                c.set(s.tensor, bytemuck::cast_slice(d));
                runs.h2d_bytes += 4 * d.len() as u64;
            }
        }
        let status = c.compute();
        if status != sys::GGML_STATUS_SUCCESS {
            return Err(Error::Gpu(format!(
                "ggml graph compute failed (status {status})"
            )));
        }
        self.peak = self.peak.max(self.compiled.activation_bytes());
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
                // an allocated contiguous F32 output tensor
                let v = self.compiled.get_f32(t);
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
            scratch_bytes: 0,
            runs: self.runs,
            dispatches: self.compiled.n_nodes(),
        }
    }
}
