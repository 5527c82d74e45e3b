//! From graph nodes to recorded dispatches. Each op family has a module here and a WGSL
//! file in `shaders/`; `encode` routes a node to its family.

mod attention;
mod bmm;
mod copy;
mod elementwise;
mod embedding;
mod foldquant;
mod gemm;
mod matmul;
mod norm;
mod patch_embed;
mod rope;
mod window;

use super::shader::Variant;
use super::GpuContext;
use crate::backend::ActDtype;
use crate::gguf::GgmlType;
use crate::graph::{Node, Op};
use crate::{Error, Result};
use std::sync::Arc;

/// One recorded compute dispatch.
pub(crate) struct Dispatch {
    /// The kernel's entry point, for profiles.
    pub kernel: &'static str,
    pub pipeline: Arc<wgpu::ComputePipeline>,
    pub bind_group: wgpu::BindGroup,
    pub workgroups: [u32; 3],
}

/// One GPU buffer holding rows `[row_start, row_start + rows)` of a tensor.
pub(crate) struct Chunk {
    pub buffer: wgpu::Buffer,
    pub row_start: usize,
    pub rows: usize,
}

/// A buffer bound to a kernel, with the dtype its `ACT` binding reads or writes it in
/// (see `shader.rs`; ignored by bindings of fixed type).
#[derive(Clone, Copy)]
pub(crate) struct Bind<'a> {
    pub buffer: &'a wgpu::Buffer,
    pub dtype: ActDtype,
}

impl<'a> Bind<'a> {
    /// `buffer` holding f32 values (or raw words, for bindings of fixed type).
    pub fn f32(buffer: &'a wgpu::Buffer) -> Self {
        Bind {
            buffer,
            dtype: ActDtype::F32,
        }
    }

    /// `buffer` holding values of `dtype`.
    pub fn of(buffer: &'a wgpu::Buffer, dtype: ActDtype) -> Self {
        Bind { buffer, dtype }
    }
}

/// The outputs after the first of sibling weight products fused into one (`fuse/`,
/// `shaders/product_out.wgsl`): where each one's columns start in the fused product and its
/// buffer. Empty for every other product.
#[derive(Clone, Copy, Default)]
pub(crate) struct OutParts<'a>(pub [Option<(usize, Bind<'a>)>; 2]);

impl<'a> OutParts<'a> {
    /// The kernels' `n0, n01` for a product of `n` columns.
    pub fn words(&self, n: usize) -> Result<[u32; 2]> {
        let start = |k: usize| self.0[k].map_or(n, |p| p.0);
        Ok([u32_of(start(0), "n0")?, u32_of(start(1), "n01")?])
    }

    pub fn define(&self, v: Variant) -> Variant {
        v.define("OUT_PARTS", self.0[0].is_some())
            .define("OUT_PARTS3", self.0[1].is_some())
    }

    /// The bindings `y1`, `y2` of the parts there are.
    pub fn bindings(&self) -> impl Iterator<Item = (u32, Bind<'a>)> {
        let [a, b] = self.0;
        [(10, a), (11, b)]
            .into_iter()
            .filter_map(|(k, p)| p.map(|p| (k, p.1)))
    }
}

/// A matmul's fused addend (`weight_decode.wgsl`'s `add_c`): `c`, `[n]` (a bias) or with
/// `full` the output's shape (a residual), added to the product; with `gate` (the buffer
/// and its first element read) the product is scaled by `gate[off + column]` first: a gated
/// residual `c + y * gate` (`Op::AddGated` fused into the product of `y`, `fuse/`).
#[derive(Clone, Copy)]
pub(crate) struct Addend<'a> {
    pub c: Bind<'a>,
    pub full: bool,
    pub gate: Option<(Bind<'a>, usize)>,
}

impl<'a> Addend<'a> {
    /// The template defines of `addend` (none: `ADD_C` off).
    pub fn define(addend: Option<Self>, v: Variant) -> Variant {
        v.define("ADD_C", addend.is_some())
            .define("C_FULL", addend.is_some_and(|a| a.full))
            .define("C_GATE", addend.is_some_and(|a| a.gate.is_some()))
    }

    /// The kernels' `gate_off`.
    pub fn gate_off(addend: Option<Self>) -> Result<u32> {
        u32_of(
            addend.and_then(|a| a.gate).map_or(0, |g| g.1),
            "gate offset",
        )
    }

    /// The bindings `c` and `gate`.
    pub fn bindings(addend: Option<Self>) -> impl Iterator<Item = (u32, Bind<'a>)> {
        let gate = addend.and_then(|a| a.gate).map(|g| (12, g.0));
        addend.map(|a| (6, a.c)).into_iter().chain(gate)
    }
}

/// What the executable fuses into a matmul node's dispatches (`fuse/`): sibling
/// products' outputs after the node's own, or a gated residual taking the product (`x`,
/// the gate vector and its first element read; the node's output is then the residual's).
#[derive(Clone, Copy, Default)]
pub(crate) struct MatmulFusion<'a> {
    pub parts: OutParts<'a>,
    pub gated_residual: Option<(Bind<'a>, Bind<'a>, usize)>,
}

/// A node input as the kernels see it.
pub(crate) enum TensorBuf<'a> {
    /// An activation (or a weight as f32, converted at upload), contiguous row-major, in
    /// `dtype`.
    Act {
        buffer: &'a wgpu::Buffer,
        shape: &'a [usize],
        dtype: ActDtype,
    },
    /// A weight in its stored dtype, split by rows (dim 0) into buffers that each fit one
    /// binding; rows are stored as in GGUF (ggml blocks along the last dim).
    Raw {
        chunks: &'a [Chunk],
        shape: &'a [usize],
        dtype: GgmlType,
    },
}

impl<'a> TensorBuf<'a> {
    pub fn shape(&self) -> &'a [usize] {
        match self {
            TensorBuf::Act { shape, .. } | TensorBuf::Raw { shape, .. } => shape,
        }
    }

    /// The activation buffer; raw weights only reach kernels that ask for them.
    pub fn act(&self) -> Bind<'a> {
        match self {
            TensorBuf::Act { buffer, dtype, .. } => Bind::of(buffer, *dtype),
            TensorBuf::Raw { .. } => {
                unreachable!("callers give activation buffers to all but raw readers")
            }
        }
    }
}

pub(crate) struct NodeBuffers<'a> {
    pub inputs: Vec<TensorBuf<'a>>,
    pub output: Bind<'a>,
    pub scratch: &'a ScratchPool,
}

/// One scratch buffer shared by the nodes of an executable (attention scores of the GPU
/// kernel set): dispatches run in order and wgpu orders their accesses, so each node may
/// reuse what an earlier one used. It grows by replacement; bind groups made before keep
/// the smaller one alive.
#[derive(Default)]
pub(crate) struct ScratchPool {
    buffers: std::cell::RefCell<Vec<Option<wgpu::Buffer>>>,
    /// The (input, gain) nodes whose RMS-normalised rows slot [`NORMED_SLOT`] holds.
    normed: std::cell::Cell<Option<(usize, usize)>>,
}

/// The scratch slot of normalised matmul input rows ([`ScratchPool::normed_rows`]).
pub(crate) const NORMED_SLOT: usize = 2;

impl ScratchPool {
    /// A storage buffer of at least `bytes` (slot 0).
    pub fn get(&self, ctx: &GpuContext, bytes: u64) -> wgpu::Buffer {
        self.get_slot(ctx, 0, bytes)
    }

    /// A storage buffer of at least `bytes` in slot `k`: a kernel needing several scratch
    /// buffers at once takes one slot each.
    pub fn get_slot(&self, ctx: &GpuContext, k: usize, bytes: u64) -> wgpu::Buffer {
        if k == NORMED_SLOT {
            self.normed.set(None);
        }
        let mut slots = self.buffers.borrow_mut();
        if slots.len() <= k {
            slots.resize(k + 1, None);
        }
        let slot = &mut slots[k];
        match slot.as_ref() {
            Some(b) if b.size() >= bytes => b.clone(),
            _ => {
                let b = ctx.device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("scratch"),
                    size: bytes.max(4).next_multiple_of(4),
                    usage: wgpu::BufferUsages::STORAGE,
                    mapped_at_creation: false,
                });
                *slot = Some(b.clone());
                b
            }
        }
    }

    /// Slot [`NORMED_SLOT`] for the RMS-normalised rows of the (input, gain) node pair
    /// `key`, and whether they must be written: not when the last node to take the slot
    /// wrote these same rows (a layer's q, k and v projections read one norm), since
    /// dispatches run in the order they are made.
    pub fn normed_rows(
        &self,
        ctx: &GpuContext,
        key: (usize, usize),
        bytes: u64,
    ) -> (wgpu::Buffer, bool) {
        let write = self.normed.get() != Some(key);
        let b = self.get_slot(ctx, NORMED_SLOT, bytes);
        self.normed.set(Some(key));
        (b, write)
    }

    /// Bytes of the largest buffer of each slot, summed.
    pub fn bytes(&self) -> u64 {
        let slots = self.buffers.borrow();
        slots.iter().flatten().map(|b| b.size()).sum()
    }
}

/// Builds one dispatch: `params` go to a uniform at binding 0, `buffers` are
/// `(binding, buffer)` storage bindings; the variant compiled is `variant` with the
/// buffers' dtypes for its `ACT` bindings.
pub(crate) fn dispatch(
    ctx: &GpuContext,
    variant: &Variant,
    params: &[u32],
    buffers: &[(u32, Bind)],
    workgroups: [u32; 3],
) -> Result<Dispatch> {
    let mut variant = variant.clone();
    variant.stores = buffers
        .iter()
        .filter(|(_, b)| b.dtype != ActDtype::F32)
        .map(|(k, b)| (*k, b.dtype))
        .collect();
    let variant = &variant;
    let pipeline = ctx
        .pipelines
        .get(&ctx.device, variant, ctx.options.loop_bounding)?;
    let max = ctx.limits.max_compute_workgroups_per_dimension;
    if workgroups.iter().any(|&w| w > max) {
        return Err(Error::Gpu(format!(
            "{}: grid {workgroups:?} exceeds {max} per dimension",
            variant.entry
        )));
    }
    let mut words = params.to_vec();
    words.resize(params.len().next_multiple_of(4).max(4), 0);
    let uniform = ctx.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some(variant.entry),
        size: 4 * words.len() as u64,
        usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    ctx.queue
        .write_buffer(&uniform, 0, bytemuck::cast_slice(&words));
    let mut entries = vec![wgpu::BindGroupEntry {
        binding: 0,
        resource: uniform.as_entire_binding(),
    }];
    entries.extend(buffers.iter().map(|(binding, b)| wgpu::BindGroupEntry {
        binding: *binding,
        resource: b.buffer.as_entire_binding(),
    }));
    let scope = ctx.device.push_error_scope(wgpu::ErrorFilter::Validation);
    let bind_group = ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: Some(variant.entry),
        layout: &pipeline.get_bind_group_layout(0),
        entries: &entries,
    });
    if let Some(e) = pollster::block_on(scope.pop()) {
        return Err(Error::Gpu(format!("bind group for {}: {e}", variant.entry)));
    }
    Ok(Dispatch {
        kernel: variant.entry,
        pipeline,
        bind_group,
        workgroups,
    })
}

/// Workgroups for `n` independent items, `per_group` per workgroup, folded into 2-D when
/// one dimension is not enough. Kernels recover the index as
/// `(wg.y * num_wg.x + wg.x) * per_group + local`.
pub(crate) fn grid_1d(ctx: &GpuContext, n: usize, per_group: usize) -> [u32; 3] {
    let groups = n.div_ceil(per_group).max(1) as u64;
    let max = u64::from(ctx.limits.max_compute_workgroups_per_dimension);
    if groups <= max {
        [groups as u32, 1, 1]
    } else {
        [max as u32, groups.div_ceil(max) as u32, 1]
    }
}

/// Checked conversion of a size to a kernel parameter.
pub(crate) fn u32_of(v: usize, what: &str) -> Result<u32> {
    u32::try_from(v)
        .map_err(|_| Error::Gpu(format!("{what} = {v} does not fit a u32 kernel parameter")))
}

pub(crate) use elementwise::widen_bytes;
pub(crate) use rope::SecondRope;

/// The dispatches of a matmul `node` with what the executable fuses into it (`fuse/`):
/// sibling products (the node their first, with their weights and biases concatenated as
/// its inputs) or a gated residual.
pub(crate) fn encode_fused(
    ctx: &GpuContext,
    node: &Node,
    bufs: &NodeBuffers,
    fusion: MatmulFusion,
) -> Result<Vec<Dispatch>> {
    matmul::matmul(ctx, node, bufs, fusion)
}

/// [`Op::Rope`] `node` and, in the same dispatch, `second` (`fuse/`).
pub(crate) fn encode_rope_pair(
    ctx: &GpuContext,
    node: &Node,
    bufs: &NodeBuffers,
    second: SecondRope,
) -> Result<Vec<Dispatch>> {
    rope::rope(ctx, node, bufs, Some(second))
}

pub(crate) fn encode(ctx: &GpuContext, node: &Node, bufs: &NodeBuffers) -> Result<Vec<Dispatch>> {
    match &node.op {
        Op::Add | Op::Mul => elementwise::binary(ctx, node, bufs),
        Op::AddGated { .. } => elementwise::add_gated(ctx, node, bufs),
        Op::Scale(_) | Op::GeluTanh | Op::GeluErf | Op::Silu | Op::Relu | Op::Gated(_) => {
            elementwise::unary(ctx, node, bufs)
        }
        Op::MatMul { .. } => matmul::matmul(ctx, node, bufs, MatmulFusion::default()),
        Op::GatedMatMul { .. } => matmul::gated_matmul(ctx, node, bufs),
        Op::Bmm { .. } => bmm::bmm(ctx, node, bufs),
        Op::Softmax | Op::RmsNorm { .. } | Op::AdaRmsNorm { .. } | Op::LayerNorm { .. } => {
            norm::row_op(ctx, node, bufs)
        }
        Op::Rope(_) => rope::rope(ctx, node, bufs, None),
        Op::Attention { .. } => attention::attention(ctx, node, bufs),
        Op::Embedding => embedding::embedding(ctx, node, bufs),
        Op::FqLinear(_) => foldquant::fq_linear(ctx, node, bufs),
        Op::PatchEmbed => patch_embed::patch_embed(ctx, node, bufs),
        Op::Im2Col(_) | Op::MaxPool(_) => window::window(ctx, node, bufs),
        Op::Concat { .. } | Op::Slice { .. } | Op::Permute(_) => copy::copy(ctx, node, bufs),
        // the executable writes inputs and weights into their slots, and a reshape is a
        // view of its input's slot: none records a dispatch
        Op::Input(_) | Op::InputU8(_) | Op::Weight(_) | Op::Reshape(_) => Err(Error::Gpu(format!(
            "{} is not a dispatch: the executable handles it",
            node.op.kind()
        ))),
    }
}
