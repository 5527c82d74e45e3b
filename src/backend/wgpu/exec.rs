//! Compiling a graph for wgpu: weight upload, activation buffer plan, recorded dispatches,
//! and running it.

use super::act::{decode_values, encode_values, store_dtypes};
use super::fuse::{self, Plan, Role};
use super::kernels::{self, Bind, Chunk, Dispatch, NodeBuffers, ScratchPool, TensorBuf};
use super::slots;
use super::timer::StageTimer;
use super::upload::{storage, upload, upload_rows, write_words};
use super::GpuContext;
use crate::backend::{
    match_inputs, ActDtype, ExecStats, Executable, KernelTime, RunCounters, WeightStore,
};
use crate::graph::{Graph, NodeId, Op};
use crate::{Error, Result, Tensor};
use std::sync::Arc;

/// Where a node's value lives.
pub(super) enum Place {
    /// An activation slot of the buffer plan.
    Slot(usize),
    /// A weight, uploaded in its stored dtype (chunked by rows) and/or as f32.
    Weight {
        raw: Arc<Vec<Chunk>>,
        f32: Option<Arc<wgpu::Buffer>>,
    },
}

/// Out-of-bounds guard: in debug builds (or with `VLA_WGPU_GUARD=1`) every activation slot
/// gets a tail of `GUARD_WORDS` sentinel words after its planned size; each run checks that
/// the tails are unchanged and fails otherwise. It catches writes past the end of a slot (on
/// lavapipe an index past the whole buffer is clamped into the tail too), not writes past a
/// smaller node's end inside a larger reused slot.
const GUARD_WORDS: usize = 16;
const GUARD_WORD: u32 = 0xA5C3_5A3C;

fn guard_enabled() -> bool {
    cfg!(debug_assertions) || super::env_flag("VLA_WGPU_GUARD")
}

pub(crate) struct WgpuExecutable {
    ctx: Arc<GpuContext>,
    graph: Graph,
    places: Vec<Place>,
    /// Sibling products' fused weights (`fuse::Plan`): the dispatches read them; kept here
    /// so that executables compiled later over the same store share them.
    _fused_uploads: Vec<Arc<fuse::Fused>>,
    /// Per node, the dtype its value is stored in ([`store_dtypes`]).
    stores: Vec<ActDtype>,
    slots: Vec<wgpu::Buffer>,
    dispatches: Vec<Dispatch>,
    /// Per graph stage, the index of its first dispatch (empty for an unstaged graph).
    stage_starts: Vec<usize>,
    /// Timestamps around each stage (or, when profiling, each dispatch), where the adapter
    /// has them.
    timer: Option<StageTimer>,
    /// When profiling: per dispatch, the graph node it computes.
    profile_nodes: Option<Vec<usize>>,
    /// Fused nodes (`fuse::Plan`): each a node, then the nodes its dispatches also compute.
    fused_nodes: Vec<Vec<usize>>,
    kernel_ms: Option<Vec<f32>>,
    stage_ms: Option<Vec<f32>>,
    /// (output node, staging buffer)
    readback: Vec<(NodeId, wgpu::Buffer)>,
    /// (InputU8 node, the buffer its bytes are written to; a dispatch makes them f32)
    byte_inputs: Vec<(NodeId, wgpu::Buffer)>,
    /// (planned slot sizes, staging for their tails) when the out-of-bounds guard is on.
    guard: Option<(Vec<u64>, wgpu::Buffer)>,
    stats: ExecStats,
}

/// Does this consumer read input `k` in its stored dtype? Every weight input
/// ([`Op::weight_inputs`]) but the patch kernel's, which `shaders/patch_embed.wgsl` reads
/// as f32.
fn reads_raw(op: &Op, k: usize) -> bool {
    !matches!(op, Op::PatchEmbed) && op.weight_inputs().contains(&k)
}

impl WgpuExecutable {
    pub fn new(ctx: Arc<GpuContext>, graph: &Graph, weights: &dyn WeightStore) -> Result<Self> {
        let nodes = graph.nodes();
        let max_binding = ctx.limits.max_storage_buffer_binding_size;
        let act = ctx.options.act_dtype;
        if act == ActDtype::F16 && !ctx.caps.f16 {
            return Err(Error::InvalidArgument(format!(
                "activation dtype f16 needs the shader-f16 feature, which {} lacks (or VLA_WGPU_NO_F16 turned off); use bf16, which runs on every adapter",
                ctx.info.name
            )));
        }
        let stores = store_dtypes(graph, act);
        let mut raw_use = vec![false; nodes.len()];
        let mut f32_use = vec![false; nodes.len()];
        for n in nodes {
            for (k, inp) in n.inputs.iter().enumerate() {
                if reads_raw(&n.op, k) {
                    raw_use[inp.0] = true;
                } else {
                    f32_use[inp.0] = true;
                }
            }
        }
        for o in graph.outputs() {
            f32_use[o.0] = true; // read back as f32
        }

        // What the executable fuses across nodes (fuse/): sibling products' weights and
        // biases go up concatenated, not each on its own.
        let plan = match ctx.options.fuse_nodes {
            Some(false) => Plan::default(),
            _ => Plan::new(&ctx, graph, weights)?,
        };
        let mut weight_bytes = plan.uploaded_bytes;
        let mut places: Vec<Option<Place>> = (0..nodes.len()).map(|_| None).collect();
        for p in plan.fused_params() {
            places[p.0] = Some(Place::Weight {
                raw: Arc::default(),
                f32: None,
            });
        }

        // Weights: upload once.
        for (i, n) in nodes.iter().enumerate() {
            let Op::Weight(name) = &n.op else { continue };
            if places[i].is_some() {
                continue; // a fused sibling's
            }
            // shared with a live executable over the same store; a constant is the graph's
            let shared = |kind: &str| {
                let carried = graph.constants.contains_key(name);
                (!carried).then(|| super::shared::key(weights, &format!("{name} {kind}")))
            };
            let t = graph.weight_data(weights, name)?;
            let mut raw = Arc::default();
            if raw_use[i] {
                let make = || upload_rows(&ctx, name, &t, max_binding);
                let (chunks, now) = ctx.shared.raw.get_or(shared("raw"), make)?;
                // as uploaded: quantized blocks repacked (a scale word a block)
                if now {
                    weight_bytes += chunks.iter().map(|c| c.buffer.size()).sum::<u64>();
                }
                raw = chunks;
            }
            // (a reshape of a weight or a weight output reads it as f32 too; a weight nothing
            // reads gets no buffer)
            let f32 = if f32_use[i] {
                let make = || {
                    let v = t.to_vec_f32()?;
                    if 4 * v.len() as u64 > max_binding {
                        return Err(Error::Gpu(format!(
                            "weight {name:?} as f32 ({} bytes) exceeds the adapter's storage binding limit ({max_binding})",
                            4 * v.len()
                        )));
                    }
                    Ok(upload(&ctx, name, bytemuck::cast_slice(&v)))
                };
                let (buffer, now) = ctx.shared.f32.get_or(shared("f32"), make)?;
                if now {
                    weight_bytes += buffer.size();
                }
                Some(buffer)
            } else {
                None
            };
            places[i] = Some(Place::Weight { raw, f32 });
            drop(t);
            // uploaded (wgpu copies at the call): the file's pages may go
            weights.read_for_now(name);
        }

        // Activations: a slot each, reused after the last reader (slots.rs), in the execution
        // order (the graph's, fused nodes beside the node computing them).
        let order = fuse::order(graph, &plan.fused_nodes);
        let slot_sizes = slots::plan(
            graph,
            &order,
            (&plan.fused_nodes, &plan.writes_instead()),
            (&stores, &raw_use, max_binding),
            &mut places,
        )?;
        // Freed slots are reused, never released: the peak is the total size of all slots.
        let peak: u64 = slot_sizes.iter().sum();
        let guard_bytes = if guard_enabled() {
            4 * GUARD_WORDS as u64
        } else {
            0
        };
        let slots: Vec<wgpu::Buffer> = slot_sizes
            .iter()
            .enumerate()
            .map(|(k, &s)| {
                let usage = wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC;
                storage(&ctx, &format!("slot{k}"), s + guard_bytes, usage)
            })
            .collect();
        let guard = (guard_bytes > 0 && !slots.is_empty()).then(|| {
            for (slot, &size) in slots.iter().zip(&slot_sizes) {
                ctx.queue.write_buffer(
                    slot,
                    size,
                    bytemuck::cast_slice(&[GUARD_WORD; GUARD_WORDS]),
                );
            }
            let staging = ctx.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("guard readback"),
                size: guard_bytes * slots.len() as u64,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            (slot_sizes.clone(), staging)
        });
        let places: Vec<Place> = places
            .into_iter()
            .map(|p| p.expect("every node placed"))
            .collect();

        // Record dispatches.
        let mut dispatches = Vec::new();
        let mut dispatch_nodes = Vec::new();
        let mut byte_inputs = Vec::new();
        let scratch = ScratchPool::default();
        let stage_nodes: Vec<usize> = graph.stages().iter().map(|s| s.1).collect();
        let mut stage_starts = Vec::with_capacity(stage_nodes.len());
        for &i in &order {
            let n = &nodes[i];
            while stage_starts.len() < stage_nodes.len() && stage_nodes[stage_starts.len()] <= i {
                stage_starts.push(dispatches.len());
            }
            if matches!(n.op, Op::Input(_) | Op::Weight(_) | Op::Reshape(_))
                || plan.role(i) == Some(Role::Follows)
            {
                continue; // (written by another node's dispatches)
            }
            if let (Op::InputU8(_), Place::Slot(out)) = (&n.op, &places[i]) {
                let usage = wgpu::BufferUsages::COPY_DST;
                let bytes = storage(&ctx, "bytes", n.numel() as u64, usage);
                let output = Bind::of(&slots[*out], stores[i]);
                dispatches.push(kernels::widen_bytes(&ctx, n, &bytes, output)?);
                dispatch_nodes.push(i);
                byte_inputs.push((NodeId(i), bytes));
                continue;
            }
            let inputs = n
                .inputs
                .iter()
                .enumerate()
                .map(|(k, id)| match plan.fused_input(n, i, k) {
                    Some(t) => Ok(t),
                    None => {
                        let raw = reads_raw(&n.op, k);
                        tensor_buf(&places, &slots, graph, (*id, stores[id.0]), raw)
                    }
                })
                .collect::<Result<Vec<_>>>()?;
            let out = |i: usize| match places[i] {
                Place::Slot(s) => Bind::of(&slots[s], stores[i]),
                Place::Weight { .. } => unreachable!("activations have slots"),
            };
            let act = |id: NodeId| {
                tensor_buf(&places, &slots, graph, (id, stores[id.0]), false).map(|t| t.act())
            };
            let bufs = NodeBuffers {
                inputs,
                output: out(plan.writes(i)),
                scratch: &scratch,
            };
            dispatches.extend(plan.encode(&ctx, graph, i, &bufs, &out, &act)?);
            dispatch_nodes.resize(dispatches.len(), i);
        }
        stage_starts.resize(stage_nodes.len(), dispatches.len());
        let profile_nodes = (ctx.caps.timestamps && ctx.options.profile && !dispatches.is_empty())
            .then_some(dispatch_nodes);
        let timer = match &profile_nodes {
            Some(d) => Some(StageTimer::new(&ctx, d.len())),
            None => (ctx.caps.timestamps && !stage_starts.is_empty())
                .then(|| StageTimer::new(&ctx, stage_starts.len())),
        };

        let readback = graph
            .outputs()
            .iter()
            .map(|&o| {
                let size = stores[o.0].size() as u64 * graph.node(o).numel() as u64;
                let size = size.max(4).next_multiple_of(4);
                let buf = ctx.device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("readback"),
                    size,
                    usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                });
                (o, buf)
            })
            .collect();
        let stats = ExecStats {
            weight_bytes,
            peak_activation_bytes: peak + scratch.bytes(),
            scratch_bytes: scratch.bytes(),
            dispatches: dispatches.len(),
            runs: Default::default(),
        };
        Ok(WgpuExecutable {
            ctx,
            graph: graph.clone(),
            places,
            _fused_uploads: plan.uploads().to_vec(),
            stores,
            slots,
            dispatches,
            stage_starts,
            timer,
            profile_nodes,
            fused_nodes: plan.fused_nodes,
            kernel_ms: None,
            stage_ms: None,
            readback,
            byte_inputs,
            guard,
            stats,
        })
    }

    /// The buffer holding a node (in its dtype, `self.stores`): its slot, or a weight's f32
    /// copy (a reshaped weight can be an output).
    fn slot(&self, id: NodeId) -> &wgpu::Buffer {
        match &self.places[id.0] {
            Place::Slot(s) => &self.slots[*s],
            Place::Weight { f32: Some(b), .. } => b,
            Place::Weight { f32: None, .. } => unreachable!("outputs get an f32 copy"),
        }
    }
}

fn tensor_buf<'a>(
    places: &'a [Place],
    slots: &'a [wgpu::Buffer],
    graph: &'a Graph,
    (id, dtype): (NodeId, ActDtype),
    raw: bool,
) -> Result<TensorBuf<'a>> {
    let node = graph.node(id);
    Ok(match &places[id.0] {
        Place::Slot(_) if raw => {
            return Err(Error::NotImplemented {
                op: format!(
                    "a computed node ({}) as a matmul weight or embedding table",
                    node.op.kind()
                ),
                backend: "wgpu",
            })
        }
        Place::Slot(s) => TensorBuf::Act {
            buffer: &slots[*s],
            shape: &node.shape,
            dtype,
        },
        Place::Weight { raw: chunks, f32 } => match (raw, f32) {
            (true, _) => TensorBuf::Raw {
                chunks,
                shape: &node.shape,
                dtype: node.dtype,
            },
            (false, Some(buffer)) => TensorBuf::Act {
                buffer,
                shape: &node.shape,
                dtype: ActDtype::F32,
            },
            (false, None) => unreachable!("f32 copies are made for every f32 reader"),
        },
    })
}

impl Executable for WgpuExecutable {
    fn run(&mut self, inputs: &[(&str, &Tensor)]) -> Result<Vec<Tensor<'static>>> {
        let by_name = match_inputs(&self.graph, inputs)?;
        let mut runs = RunCounters {
            submits: 1,
            host_waits: 1,
            dispatches: self.dispatches.len() as u64,
            ..Default::default()
        };
        for (i, n) in self.graph.nodes().iter().enumerate() {
            if let Op::Input(name) = &n.op {
                let data = by_name[name].f32_cow()?;
                if !data.is_empty() {
                    let bytes = encode_values(&data, self.stores[i]);
                    runs.h2d_bytes += write_words(&self.ctx, self.slot(NodeId(i)), &bytes);
                }
            }
        }
        for (id, buf) in &self.byte_inputs {
            let Op::InputU8(name) = &self.graph.node(*id).op else {
                unreachable!("byte inputs are InputU8 nodes")
            };
            runs.h2d_bytes += write_words(&self.ctx, buf, by_name[name].raw_bytes());
        }
        let mut enc = self.ctx.device.create_command_encoder(&Default::default());
        match &self.timer {
            // Profiling: one pass per dispatch, timestamped at its start and end.
            Some(timer) if self.profile_nodes.is_some() => {
                for (k, d) in self.dispatches.iter().enumerate() {
                    let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                        label: None,
                        timestamp_writes: Some(timer.writes(k)),
                    });
                    record(&mut pass, std::slice::from_ref(d));
                }
                timer.resolve(&mut enc);
            }
            // One pass per stage, timestamped at its start and end.
            Some(timer) => {
                for (k, (a, b)) in self.stage_ranges().enumerate() {
                    let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                        label: None,
                        timestamp_writes: Some(timer.writes(k)),
                    });
                    record(&mut pass, &self.dispatches[a..b]);
                }
                timer.resolve(&mut enc);
            }
            None => record(
                &mut enc.begin_compute_pass(&Default::default()),
                &self.dispatches,
            ),
        }
        for (o, staging) in &self.readback {
            enc.copy_buffer_to_buffer(self.slot(*o), 0, staging, 0, staging.size());
        }
        let guard_bytes = 4 * GUARD_WORDS as u64;
        if let Some((sizes, staging)) = &self.guard {
            for (k, (slot, &size)) in self.slots.iter().zip(sizes).enumerate() {
                enc.copy_buffer_to_buffer(slot, size, staging, k as u64 * guard_bytes, guard_bytes);
            }
        }
        let scope = self
            .ctx
            .device
            .push_error_scope(wgpu::ErrorFilter::Validation);
        self.ctx.queue.submit([enc.finish()]);
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(Error::Gpu(format!("submit: {e}")));
        }
        for staging in self
            .readback
            .iter()
            .map(|(_, b)| b)
            .chain(self.guard.as_ref().map(|(_, b)| b))
            .chain(self.timer.as_ref().map(|t| &t.staging))
        {
            staging.slice(..).map_async(wgpu::MapMode::Read, |_| {});
        }
        self.ctx
            .device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| Error::Gpu(format!("poll: {e}")))?;
        let mut outs = Vec::with_capacity(self.readback.len());
        for (o, staging) in &self.readback {
            let shape = self.graph.node(*o).shape.clone();
            let n: usize = shape.iter().product();
            let data = {
                let view = staging
                    .slice(..)
                    .get_mapped_range()
                    .map_err(|e| Error::Gpu(format!("reading back node {}: {e}", o.0)))?;
                decode_values(&view, self.stores[o.0], n)
            };
            staging.unmap();
            // The debug guard's sentinel readback is not counted: it exists only in debug
            // builds and with VLA_WGPU_GUARD=1.
            runs.d2h_bytes += staging.size();
            outs.push(Tensor::from_f32(shape, data)?);
        }
        if let Some(timer) = &self.timer {
            runs.d2h_bytes += timer.staging.size();
            let ms = timer.read(&self.ctx)?;
            if self.profile_nodes.is_some() {
                // Stage times as the sums of their kernels' times (gaps not counted).
                let sums = self
                    .stage_ranges()
                    .map(|(a, b)| ms[a..b].iter().sum())
                    .collect();
                self.stage_ms = (!self.stage_starts.is_empty()).then_some(sums);
                self.kernel_ms = Some(ms);
            } else {
                self.stage_ms = Some(ms);
            }
        }
        self.stats.runs.add(&runs);
        self.check_guard()?; // after the readbacks are unmapped, so an error leaves none mapped
        Ok(outs)
    }

    fn stats(&self) -> ExecStats {
        self.stats.clone()
    }

    fn stage_ms(&self) -> Option<Vec<f32>> {
        self.stage_ms.clone()
    }

    fn profile(&self) -> Option<Vec<KernelTime>> {
        let (nodes, ms) = (self.profile_nodes.as_ref()?, self.kernel_ms.as_ref()?);
        let mut per_node = vec![0usize; self.graph.nodes().len()];
        for &n in nodes {
            per_node[n] += 1;
        }
        let stages = self.graph.stages();
        let stage_of = |n: usize| {
            let k = stages.partition_point(|s| s.1 <= n);
            k.checked_sub(1).map_or("", |k| stages[k].0.as_str())
        };
        // what a node's dispatches compute: it, and the nodes fused into it
        let computed = |n: usize| match self.fused_nodes.iter().find(|g| g[0] == n) {
            Some(g) => g.clone(),
            None => vec![n],
        };
        let times = nodes.iter().zip(ms).zip(&self.dispatches);
        let times = times.map(|((&n, &ms), d)| {
            let share = per_node[n] as f64;
            let (mut flops, mut bytes) = (0, 0);
            for m in computed(n) {
                flops += self.graph.node_flops(m);
                bytes += self
                    .graph
                    .node_bytes_by(m, |k| self.stores[k].size() as u64);
            }
            KernelTime {
                node: n,
                stage: stage_of(n).to_owned(),
                op: self.graph.nodes()[n].op.kind(),
                kernel: d.kernel,
                ms: f64::from(ms),
                flops: flops as f64 / share,
                bytes: bytes as f64 / share,
            }
        });
        Some(times.collect())
    }
}

/// Records `dispatches` into `pass`.
fn record(pass: &mut wgpu::ComputePass, dispatches: &[Dispatch]) {
    for d in dispatches {
        pass.set_pipeline(&d.pipeline);
        pass.set_bind_group(0, &d.bind_group, &[]);
        let [x, y, z] = d.workgroups;
        pass.dispatch_workgroups(x, y, z);
    }
}

impl WgpuExecutable {
    /// Each graph stage's dispatches, as `[start, end)` indices (none for an unstaged graph).
    fn stage_ranges(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        let ends = self.stage_starts.iter().skip(1).copied();
        let ends = ends.chain([self.dispatches.len()]);
        self.stage_starts.iter().copied().zip(ends)
    }

    /// Compares the (mapped) slot tails with the sentinel; restores any that changed and
    /// names the nodes planned into that slot.
    fn check_guard(&self) -> Result<()> {
        let Some((sizes, staging)) = &self.guard else {
            return Ok(());
        };
        let bad: Vec<usize> = {
            let view = staging
                .slice(..)
                .get_mapped_range()
                .map_err(|e| Error::Gpu(format!("reading the guard words: {e}")))?;
            let words: &[u32] = bytemuck::cast_slice(&view);
            let changed = |t: &[u32]| t.iter().any(|&w| w != GUARD_WORD);
            words
                .chunks(GUARD_WORDS)
                .enumerate()
                .filter(|(_, t)| changed(t))
                .map(|(k, _)| k)
                .collect()
        };
        staging.unmap();
        if bad.is_empty() {
            return Ok(());
        }
        for &k in &bad {
            self.ctx.queue.write_buffer(
                &self.slots[k],
                sizes[k],
                bytemuck::cast_slice(&[GUARD_WORD; GUARD_WORDS]),
            );
        }
        let nodes: Vec<String> = self
            .graph
            .nodes()
            .iter()
            .enumerate()
            .filter(|(i, _)| matches!(self.places[*i], Place::Slot(s) if bad.contains(&s)))
            .map(|(i, n)| format!("{i} ({} {:?})", n.op.kind(), n.shape))
            .collect();
        Err(Error::Gpu(format!(
            "out-of-bounds write past activation slot(s) {bad:?}, which hold nodes {}",
            nodes.join(", ")
        )))
    }
}

#[cfg(test)]
mod tests {
    use crate::backend::wgpu::{Api, WgpuBackend};
    use crate::backend::Executable;
    use crate::graph::GraphBuilder;
    use crate::Tensor;
    use std::collections::HashMap;

    /// A write past a slot's planned end (simulated from the host here) fails the next run
    /// and names the node; the run after that is clean again.
    #[test]
    fn guard_catches_a_write_past_a_slot() {
        if !super::guard_enabled() {
            return;
        }
        let Ok(b) = WgpuBackend::new(Api::Any) else {
            eprintln!("WARNING: no wgpu adapter, guard test skipped");
            return;
        };
        let weights: HashMap<String, Tensor<'static>> = HashMap::new();
        let mut g = GraphBuilder::new(&weights);
        let x = g.input("x", &[5]);
        let y = g.scale(x, 2.0);
        let graph = g.build(&[y]).unwrap();
        let mut exe = super::WgpuExecutable::new(b.ctx.clone(), &graph, &weights).unwrap();
        let xt = Tensor::from_f32(vec![5], vec![1.0; 5]).unwrap();
        assert_eq!(
            exe.run(&[("x", &xt)]).unwrap()[0].to_vec_f32().unwrap(),
            [2.0; 5]
        );
        let super::Place::Slot(s) = exe.places[1] else {
            panic!("y has a slot")
        };
        exe.ctx.queue.write_buffer(&exe.slots[s], 20 + 8, &[0u8; 4]);
        let e = exe.run(&[("x", &xt)]).unwrap_err().to_string();
        assert!(
            e.contains("out-of-bounds") && e.contains("1 (scale [5])"),
            "{e}"
        );
        exe.run(&[("x", &xt)]).unwrap();
    }
}
