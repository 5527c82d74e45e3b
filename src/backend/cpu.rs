//! The reference backend: each node is one call into [`crate::ops`].

use super::shared::{self, Cache};
use super::{match_inputs, Backend, ExecStats, Executable, RunCounters, SharedStore, WeightStore};
use crate::graph::{AttentionMask, GateAct, Graph, Op};
use crate::ops::{self, Mask};
use crate::{Error, Result, Tensor};
use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock};
use std::time::Instant;

pub struct CpuBackend;

impl Backend for CpuBackend {
    fn description(&self) -> String {
        format!("cpu ({} threads)", rayon::current_num_threads())
    }

    /// Weights are borrowed, or packed for their kernels once per model: an executable over
    /// the same store as a live one shares that one's packed weights (`prepare`).
    fn borrows_weights(&self) -> bool {
        true
    }

    fn compile<'w>(
        &self,
        graph: &Graph,
        weights: &'w dyn WeightStore,
    ) -> Result<Box<dyn Executable + 'w>> {
        let resolved = resolve(graph, |name| graph.weight_data(weights, name))?;
        let (prepared, bytes) = prepare(graph, &resolved, weights)?;
        Ok(Box::new(CpuExecutable::new(
            graph,
            Weights::Resolved(resolved),
            prepared,
            bytes,
        )))
    }

    /// Weights are viewed in the shared store at each run (a lookup per weight, no copy).
    fn compile_shared(&self, graph: &Graph, weights: SharedStore) -> Result<Box<dyn Executable>> {
        let resolved = resolve(graph, |name| graph.weight_view(&*weights, name))?;
        let (prepared, bytes) = prepare(graph, &resolved, &*weights)?;
        drop(resolved);
        Ok(Box::new(CpuExecutable::new(
            graph,
            Weights::Shared(weights),
            prepared,
            bytes,
        )))
    }
}

/// Each node's weight, where it is a weight node.
fn resolve<'s>(
    graph: &Graph,
    data: impl Fn(&str) -> Result<Tensor<'s>>,
) -> Result<Vec<Option<Tensor<'s>>>> {
    graph
        .nodes()
        .iter()
        .map(|node| match &node.op {
            Op::Weight(name) => data(name).map(Some),
            _ => Ok(None),
        })
        .collect()
}

/// The kernels' layouts of every matmul weight (float panels, quantized weights' integer
/// tiles) and FoldQuant site's codes, made once at compile (otherwise each run repacks
/// them: most of a 50-row matmul's time) or taken from a live executable over the same
/// store, and the bytes the weights take: a packed weight's layout in place of its file
/// bytes (none for a layout another executable made); not for float weights the store keeps
/// re-encoded (those would be held twice). The store is told at once that a
/// packed weight will not be read again soon (the runs read the layout): a mapped file lets
/// its pages go, so a model does not hold its file's pages beside its layouts, nor peak at
/// both while they are made.
fn prepare(
    graph: &Graph,
    resolved: &[Option<Tensor>],
    store: &dyn WeightStore,
) -> Result<(Vec<Option<Arc<Prepared>>>, u64)> {
    static SHARED: LazyLock<Cache<Prepared>> = LazyLock::new(Cache::default);
    let mut bytes: u64 = resolved
        .iter()
        .flatten()
        .map(|t| t.raw_bytes().len() as u64)
        .sum();
    let mut prepared: Vec<Option<Arc<Prepared>>> = (0..resolved.len()).map(|_| None).collect();
    for node in graph.nodes() {
        if !(node.op.is_float_product() || matches!(node.op, Op::FqLinear(_))) {
            continue;
        }
        for w in node.op.weight_inputs().iter().map(|&k| node.inputs[k].0) {
            let (Some(t), None) = (&resolved[w], &prepared[w]) else {
                continue;
            };
            let Op::Weight(name) = &graph.nodes()[w].op else {
                continue;
            };
            // a float weight the store re-encoded and keeps (`--weight-dtype`) is multiplied
            // where it lies: panels of it would hold it twice
            if !t.dtype().is_quantized() && store.keeps_a_copy(name) {
                continue;
            }
            // a constant is the graph's own; a site's tiles depend on its codes' width too
            let kind = match &node.op {
                Op::FqLinear(p) => format!("{name} fq{}", p.weight_bits),
                _ => format!("{name} matmul"),
            };
            let key = (!graph.constants.contains_key(name)).then(|| shared::key(store, &kind));
            let made = SHARED.get_or_maybe(key, || {
                Ok(match &node.op {
                    Op::FqLinear(p) => ops::foldquant::int_tiles(t, p).map(Prepared::FqCodes),
                    _ => ops::PackedWeight::new(t)?.map(Prepared::Matmul),
                })
            })?;
            let Some((p, now)) = made else { continue };
            bytes -= t.raw_bytes().len() as u64;
            if now {
                bytes += p.bytes();
            }
            store.read_for_now(name);
            prepared[w] = Some(p);
        }
    }
    Ok((prepared, bytes))
}

/// A weight in its kernel's layout, made at compile.
enum Prepared {
    /// A matmul weight: float panels or a block-quantized weight's integer tiles.
    Matmul(ops::PackedWeight),
    /// A FoldQuant site's codes.
    FqCodes(ops::IntTiles),
}

impl Prepared {
    fn bytes(&self) -> u64 {
        match self {
            Prepared::Matmul(p) => p.bytes(),
            Prepared::FqCodes(t) => t.bytes(),
        }
    }
}

/// Where an executable's weights are.
enum Weights<'w> {
    /// Each weight node's tensor, resolved at compile (borrowed for `'w`).
    Resolved(Vec<Option<Tensor<'w>>>),
    /// A store the executable keeps alive, its tensors viewed at each run.
    Shared(SharedStore),
}

struct CpuExecutable<'w> {
    graph: Graph,
    weights: Weights<'w>,
    /// Per weight node: its kernel's layout, where a matmul or FoldQuant site reads it.
    prepared: Vec<Option<Arc<Prepared>>>,
    last_use: Vec<usize>,
    /// Im2Col nodes that are not run: their one reader, a matmul, makes the receptive
    /// fields a block at a time ([`ops::conv_matmul`]).
    folded: Vec<bool>,
    weight_bytes: u64,
    peak: u64,
    runs: RunCounters,
    stage_ms: Option<Vec<f32>>,
}

impl<'w> CpuExecutable<'w> {
    fn new(
        graph: &Graph,
        weights: Weights<'w>,
        prepared: Vec<Option<Arc<Prepared>>>,
        bytes: u64,
    ) -> Self {
        let (folded, last_use) = folded_im2col(graph);
        CpuExecutable {
            graph: graph.clone(),
            weights,
            prepared,
            last_use,
            folded,
            weight_bytes: bytes,
            peak: 0,
            runs: RunCounters::default(),
            stage_ms: None,
        }
    }
}

/// The Im2Col nodes a matmul reads as its only reader (and no output), and the last uses
/// with each one's map living until that matmul.
fn folded_im2col(graph: &Graph) -> (Vec<bool>, Vec<usize>) {
    let nodes = graph.nodes();
    let mut readers = vec![0usize; nodes.len()];
    for n in nodes {
        for inp in &n.inputs {
            readers[inp.0] += 1;
        }
    }
    let mut last_use = graph.last_uses();
    let mut folded = vec![false; nodes.len()];
    // VLA_CPU_CONV=im2col: every im2col made whole, then its matmul (the reference path)
    if std::env::var("VLA_CPU_CONV").as_deref() == Ok("im2col") {
        return (folded, last_use);
    }
    for (i, n) in nodes.iter().enumerate() {
        let x = n.inputs.first().map(|x| x.0);
        match (&n.op, x) {
            (Op::MatMul { norm: None }, Some(x))
                if matches!(nodes[x].op, Op::Im2Col(_))
                    && readers[x] == 1
                    && !graph.outputs().iter().any(|o| o.0 == x) =>
            {
                folded[x] = true;
                let map = nodes[x].inputs[0].0;
                last_use[map] = last_use[map].max(i);
            }
            _ => {}
        }
    }
    (folded, last_use)
}

impl Executable for CpuExecutable<'_> {
    fn run(&mut self, inputs: &[(&str, &Tensor)]) -> Result<Vec<Tensor<'static>>> {
        let by_name = match_inputs(&self.graph, inputs)?;
        let viewed;
        let weights: &[Option<Tensor>] = match &self.weights {
            Weights::Resolved(w) => w,
            Weights::Shared(store) => {
                viewed = resolve(&self.graph, |name| self.graph.weight_view(&**store, name))?;
                &viewed
            }
        };
        let n = self.graph.nodes().len();
        let mut values: Vec<Option<Tensor<'static>>> = (0..n).map(|_| None).collect();
        let (mut live, mut peak) = (0u64, 0u64);
        let starts: Vec<usize> = self.graph.stages().iter().map(|s| s.1).collect();
        let mut marks = Vec::with_capacity(starts.len() + 1);
        // VLA_CPU_PROFILE=1: time per op kind, printed after each run; =shapes: per op kind
        // and output shape.
        let setting = std::env::var("VLA_CPU_PROFILE");
        let by_shape = setting.as_deref() == Ok("shapes");
        let profile = by_shape || setting.as_deref() == Ok("1");
        let mut by_kind: BTreeMap<String, (usize, f64, u64)> = BTreeMap::new();
        // the last matmul-read RMSNorm, (input, gain) -> rows: q, k and v read the same one
        let mut last_norm: Option<((usize, usize), Tensor<'static>)> = None;
        for (i, node) in self.graph.nodes().iter().enumerate() {
            if self.folded[i] {
                continue; // its matmul makes the fields
            }
            let t_op = profile.then(Instant::now);
            while marks.len() < starts.len() && starts[marks.len()] <= i {
                marks.push(Instant::now());
            }
            // A reshape of a value nothing reads later takes its buffer (no copy).
            let reused = match node.op {
                Op::Reshape(_)
                    if weights[node.inputs[0].0].is_none()
                        && self.last_use[node.inputs[0].0] == i =>
                {
                    values[node.inputs[0].0].take()
                }
                _ => None,
            };
            if let Some(t) = &reused {
                live -= 4 * t.numel() as u64;
            }
            let get = |id: crate::graph::NodeId| -> &Tensor {
                match &weights[id.0] {
                    Some(w) => w,
                    None => values[id.0]
                        .as_ref()
                        .expect("inputs are computed before use"),
                }
            };
            let arg = |k: usize| get(node.inputs[k]);
            // a matmul's input rows, normalised first when it reads an RMSNorm
            if let (
                Some(gain),
                Op::MatMul { norm: Some(n) } | Op::GatedMatMul { norm: Some(n), .. },
            ) = (node.norm_gain(), &node.op)
            {
                let key = (node.inputs[0].0, gain.0);
                if last_norm.as_ref().is_none_or(|(k, _)| *k != key) {
                    let rows = ops::rms_norm_offset(arg(0), get(gain), n.eps, n.offset)?;
                    last_norm = Some((key, rows));
                }
            }
            let rows = || match node.norm_gain() {
                Some(_) => &last_norm.as_ref().expect("normalised above").1,
                None => arg(0),
            };
            // input k's integer-kernel tiles, made at compile
            let packed = |k: usize| match self.prepared[node.inputs[k].0].as_deref() {
                Some(Prepared::Matmul(p)) => Some(p),
                _ => None,
            };
            let out = match &node.op {
                Op::Weight(_) => continue,
                Op::Input(name) => by_name[name].to_f32()?,
                Op::InputU8(name) => {
                    let t = by_name[name];
                    let v = t
                        .raw_bytes()
                        .iter()
                        .map(|&b| f32::from(b))
                        .collect::<Vec<_>>();
                    Tensor::from_f32(t.shape().to_vec(), v)?
                }
                Op::MatMul { .. } => {
                    let c = node.addend().map(get);
                    let x = self.graph.node(node.inputs[0]);
                    match (&x.op, self.folded[node.inputs[0].0]) {
                        (Op::Im2Col(win), true) => {
                            ops::conv_matmul(get(x.inputs[0]), win, arg(1), packed(1), c)?
                        }
                        _ => ops::matmul_add_packed(rows(), arg(1), packed(1), c)?,
                    }
                }
                Op::GatedMatMul { act, .. } => {
                    let gate = ops::matmul_add_packed(rows(), arg(1), packed(1), None)?;
                    let up = ops::matmul_add_packed(rows(), arg(2), packed(2), None)?;
                    match act {
                        GateAct::Silu => ops::swiglu(&gate, &up)?,
                        GateAct::GeluTanh => ops::geglu(&gate, &up)?,
                    }
                }
                Op::Bmm { trans_b } => ops::bmm(arg(0), arg(1), *trans_b)?,
                Op::Add => ops::add(arg(0), arg(1))?,
                Op::Mul => ops::mul(arg(0), arg(1))?,
                Op::Scale(s) => ops::scale(arg(0), *s)?,
                Op::GeluTanh => ops::gelu_tanh(arg(0))?,
                Op::GeluErf => ops::gelu_erf(arg(0))?,
                Op::Silu => ops::silu(arg(0))?,
                Op::Gated(GateAct::Silu) => ops::swiglu(arg(0), arg(1))?,
                Op::Gated(GateAct::GeluTanh) => ops::geglu(arg(0), arg(1))?,
                Op::Relu => ops::relu(arg(0))?,
                Op::Softmax => ops::softmax(arg(0))?,
                Op::RmsNorm { eps, offset } => ops::rms_norm_offset(arg(0), arg(1), *eps, *offset)?,
                Op::AdaRmsNorm { eps } => {
                    let w = node.shape.last().copied().unwrap_or(0);
                    let m = arg(1).as_f32()?;
                    let part = |k: usize| Tensor::from_f32(vec![w], m[k * w..(k + 1) * w].to_vec());
                    let y = ops::rms_norm_offset(arg(0), &part(0)?, *eps, 1.0)?;
                    ops::add(&y, &part(1)?)?
                }
                Op::AddGated { part } => {
                    let w = node.shape.last().copied().unwrap_or(0);
                    let m = arg(2).as_f32()?;
                    let gate = Tensor::from_f32(vec![w], m[part * w..(part + 1) * w].to_vec())?;
                    ops::add(arg(0), &ops::mul(arg(1), &gate)?)?
                }
                Op::LayerNorm { eps } => ops::layer_norm(arg(0), arg(1), Some(arg(2)), *eps)?,
                Op::Rope(cfg) => ops::rope(arg(0), arg(1).as_f32()?, cfg)?,
                Op::Attention { mask, scale } => {
                    let allowed: Vec<bool>;
                    let m = match mask {
                        AttentionMask::None => Mask::None,
                        AttentionMask::Causal => Mask::Causal,
                        AttentionMask::Allowed => {
                            let last = node.inputs.len() - 1;
                            allowed = arg(last).as_f32()?.iter().map(|v| *v != 0.0).collect();
                            Mask::Allowed(&allowed)
                        }
                    };
                    // keys and values in two parts are joined here (the kernels read one)
                    let parts = node.kv_parts();
                    let joined = |first: usize| -> Result<Tensor<'static>> {
                        let xs: Vec<&Tensor> = (0..parts).map(|p| arg(first + 2 * p)).collect();
                        ops::concat(&xs, 0)
                    };
                    match parts {
                        1 => ops::attention(arg(0), arg(1), arg(2), m, Some(*scale))?,
                        _ => ops::attention(arg(0), &joined(1)?, &joined(2)?, m, Some(*scale))?,
                    }
                }
                Op::PatchEmbed => ops::patch_embed(arg(0), arg(1), Some(arg(2)))?,
                Op::Im2Col(win) => ops::im2col(arg(0), win)?,
                Op::MaxPool(win) => ops::max_pool(arg(0), win)?,
                Op::Concat { axis } => {
                    let xs: Vec<&Tensor> = node.inputs.iter().map(|&id| get(id)).collect();
                    ops::concat(&xs, *axis)?
                }
                Op::Slice { axis, start, len } => ops::slice(arg(0), *axis, *start, *len)?,
                Op::Permute(perm) => ops::permute(arg(0), perm)?,
                Op::Reshape(shape) => match reused {
                    Some(t) => t.reshape(shape.clone())?,
                    None => arg(0).to_f32()?.reshape(shape.clone())?,
                },
                Op::FqLinear(p) => {
                    let ascale = p.fold.map(|_| arg(3));
                    let gain = p.norm.map(|_| arg(3 + usize::from(p.fold.is_some())));
                    let addend = p.addend.then(|| arg(node.inputs.len() - 1));
                    let tiles = match self.prepared[node.inputs[1].0].as_deref() {
                        Some(Prepared::FqCodes(t)) => Some(t),
                        _ => None,
                    };
                    ops::foldquant::linear(arg(0), arg(1), arg(2), ascale, gain, addend, p, tiles)?
                }
                Op::Embedding => {
                    let ids = ids_from_f32(arg(1).as_f32()?)?;
                    ops::embedding(arg(0), &ids)?
                }
            };
            if out.shape() != node.shape.as_slice() {
                return Err(Error::shape(
                    "cpu backend",
                    format!(
                        "node {i} ({}) made {:?}, planned {:?}",
                        node.op.kind(),
                        out.shape(),
                        node.shape
                    ),
                ));
            }
            if let Some(t) = t_op {
                let key = match by_shape {
                    true => format!("{} {:?}", node.op.kind(), node.shape),
                    false => node.op.kind().to_owned(),
                };
                let e = by_kind.entry(key).or_default();
                let flops = self.graph.node_flops(i);
                *e = (e.0 + 1, e.1 + t.elapsed().as_secs_f64(), e.2 + flops);
            }
            live += 4 * out.numel() as u64;
            peak = peak.max(live);
            values[i] = Some(out);
            // what it read, and what a folded im2col it read would have
            let folded = node.inputs.iter().filter(|x| self.folded[x.0]);
            let read = folded.flat_map(|x| &self.graph.node(*x).inputs);
            for &inp in node.inputs.iter().chain(read) {
                if self.last_use[inp.0] == i && values[inp.0].take().is_some() {
                    live -= 4 * self.graph.node(inp).numel() as u64;
                }
            }
        }
        if profile {
            let mut rows: Vec<_> = by_kind.into_iter().collect();
            rows.sort_by(|a, b| b.1 .1.total_cmp(&a.1 .1));
            let total: f64 = rows.iter().map(|r| r.1 .1).sum();
            eprintln!("cpu profile (VLA_CPU_PROFILE): op, calls, ms, share, GFLOP/s");
            for (kind, (n, secs, flops)) in rows {
                let rate = match flops {
                    0 => String::new(),
                    f => format!("{:>8.1}", f as f64 / secs / 1e9),
                };
                eprintln!(
                    "  {kind:<12} {n:>6} {:>10.1} {:>5.1}% {rate}",
                    secs * 1e3,
                    100.0 * secs / total
                );
            }
        }
        self.peak = self.peak.max(peak);
        self.runs.dispatches += self.ops_per_run() as u64;
        marks.resize(starts.len(), Instant::now());
        marks.push(Instant::now());
        self.stage_ms = (!starts.is_empty()).then(|| {
            let ms = |w: &[Instant]| (w[1] - w[0]).as_secs_f32() * 1e3;
            marks.windows(2).map(ms).collect()
        });
        self.graph
            .outputs()
            .iter()
            .map(|o| match (&values[o.0], &weights[o.0]) {
                (Some(v), _) => Ok(v.clone()),
                _ => Err(Error::InvalidArgument(format!(
                    "output {} was not computed",
                    o.0
                ))),
            })
            .collect()
    }

    fn stage_ms(&self) -> Option<Vec<f32>> {
        self.stage_ms.clone()
    }

    fn stats(&self) -> ExecStats {
        ExecStats {
            weight_bytes: self.weight_bytes,
            peak_activation_bytes: self.peak,
            scratch_bytes: 0,
            runs: self.runs,
            dispatches: self.ops_per_run(),
        }
    }
}

impl CpuExecutable<'_> {
    /// Op calls per run: every node but the weights.
    fn ops_per_run(&self) -> usize {
        self.graph
            .nodes()
            .iter()
            .enumerate()
            .filter(|(i, n)| !matches!(n.op, Op::Weight(_)) && !self.folded[*i])
            .count()
    }
}

/// Token ids travel as f32 holding exact non-negative integers.
pub(crate) fn ids_from_f32(v: &[f32]) -> Result<Vec<u32>> {
    v.iter()
        .map(|&x| {
            if x >= 0.0 && x.fract() == 0.0 && x < 16_777_216.0 {
                Ok(x as u32)
            } else {
                Err(Error::InvalidArgument(format!(
                    "token id {x} is not a non-negative integer below 2^24"
                )))
            }
        })
        .collect()
}
