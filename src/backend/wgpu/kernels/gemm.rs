//! The GPU-grade tiled GEMM (`shaders/gemm_tiled.wgsl`) shared by the float matmul and
//! attention's two products under [`KernelSet::Gpu`](crate::backend::wgpu::KernelSet).

use super::{dispatch, grid_1d, u32_of, Addend, Bind, Chunk, Dispatch, OutParts, ScratchPool};
use crate::backend::wgpu::shader::Variant;
use crate::backend::wgpu::{GemmTile, GpuContext};
use crate::graph::{GateAct, RowNorm};
use crate::Result;

const SOURCE: &str = concat!(
    include_str!("../../../../shaders/weight_decode.wgsl"),
    include_str!("../../../../shaders/activation.wgsl"),
    include_str!("../../../../shaders/product_out.wgsl"),
    include_str!("../../../../shaders/gemm_tiled.wgsl")
);

/// Output tiles with at least this many workgroups take the 128 x 128 tile: two waves on
/// a GPU of ~128 compute units (not tuned per device yet).
const LARGE_TILE_MIN_GROUPS: usize = 256;
/// M up to which the 16-row tile is used.
const SMALL_M_MAX: usize = 64;
/// A weight product on the 16-row tile whose output tiles make fewer workgroups than this
/// splits K (the action expert's down projection: 4 x 16 tiles); not tuned on a GPU yet.
const SPLIT_K_MIN_GROUPS: usize = 256;
/// The least k a split sums (8 of the kernel's 16-wide k steps).
const SPLIT_K_MIN_K: usize = 128;
/// Products smaller than this (multiply-adds) are not split: the second dispatch would
/// cost more than the idle compute units (the demo model's products stay whole).
const SPLIT_K_MIN_MACS: usize = 1 << 22;
/// The k step of `gemm_tiled.wgsl` (`BK`).
const BK: usize = 16;
/// The scratch slot of the splits' partial sums.
const SPLIT_K_SLOT: usize = 4;

impl GemmTile {
    /// (rows, columns) of the output tile a workgroup computes.
    pub fn dims(self) -> (usize, usize) {
        match self {
            GemmTile::Small => (16, 64),
            GemmTile::Medium => (64, 64),
            GemmTile::Large => (128, 128),
        }
    }

    fn define(self) -> &'static str {
        match self {
            GemmTile::Small => "TILE_S",
            GemmTile::Medium => "TILE_M",
            GemmTile::Large => "TILE_L",
        }
    }

    /// The tile for an `m` x `n` output (`batches` of them), unless the options fix one.
    fn choose(ctx: &GpuContext, m: usize, n: usize, batches: usize) -> GemmTile {
        if let Some(t) = ctx.options.gemm_tile {
            return t;
        }
        if m <= SMALL_M_MAX {
            return GemmTile::Small;
        }
        let groups = m.div_ceil(128) * n.div_ceil(128) * batches;
        match groups >= LARGE_TILE_MIN_GROUPS {
            true => GemmTile::Large,
            false => GemmTile::Medium,
        }
    }
}

/// One GEMM dispatch: `batches` products of A `[m, k]` by B (`[rows, k]`, or `[k, rows]`
/// with `b_kn`), written at column `n_off` of C rows of `n` elements. Rows of A and B lie
/// `lda` and `ldb` elements apart (`k` and `k` or `rows` when contiguous).
pub(super) struct Gemm<'a> {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub n_off: usize,
    pub rows: usize,
    pub batches: usize,
    /// Elements between batches of A, B and C.
    pub strides: [usize; 3],
    pub lda: usize,
    pub ldb: usize,
    /// Batches of A per batch of B.
    pub group: usize,
    /// B's dtype define (`W_F32`, `W_F16`, `W_BF16`).
    pub b_define: &'static str,
    pub b_kn: bool,
    /// Attention scores: (scale, causal shift if causal, mask buffer if any).
    pub scores: Option<(f32, Option<i64>, Option<Bind<'a>>)>,
    /// The fused addend.
    pub addend: Option<Addend<'a>>,
    /// A gated FFN's up weight (B's dtype and chunking) and activation: C = act(A B^T) *
    /// (A B2^T). Not with `addend`, `scores` or `b_kn`.
    pub gated: Option<(&'a wgpu::Buffer, GateAct)>,
    /// A's rows RMS-normalised as they are read: the gain folded into the B tiles, the sum
    /// of squares of each row taken from the A tiles, `1 / rms` applied to the output. Not
    /// with `scores` or `b_kn`.
    pub norm: Option<(RowNorm, Bind<'a>)>,
    /// Where split-K partial sums go; without it (attention's products) K is not split.
    pub scratch: Option<&'a ScratchPool>,
    pub a: Bind<'a>,
    /// Raw words (a weight chunk, or attention's keys / values in the dtype `b_define`
    /// names).
    pub b: &'a wgpu::Buffer,
    pub c: Bind<'a>,
    /// Fused sibling products' further outputs (one batch only).
    pub parts: OutParts<'a>,
}

impl<'a> Gemm<'a> {
    /// A float matmul's product of `a` (`[m, k]`) by the rows of one weight chunk, written
    /// at the chunk's columns of `c` (rows of `n`); no addend, gate or norm.
    pub fn weight_chunk(
        [m, n, k]: [usize; 3],
        chunk: &'a Chunk,
        b_define: &'static str,
        a: Bind<'a>,
        c: Bind<'a>,
    ) -> Self {
        Gemm {
            m,
            n,
            k,
            n_off: chunk.row_start,
            rows: chunk.rows,
            batches: 1,
            strides: [0; 3],
            lda: k,
            ldb: k,
            group: 1,
            b_define,
            b_kn: false,
            scores: None,
            addend: None,
            gated: None,
            norm: None,
            scratch: None,
            a,
            b: &chunk.buffer,
            c,
            parts: OutParts::default(),
        }
    }

    /// How K is split for this product on `tile`: (splits, k a split), or `None`. Only
    /// weight products (one batch, no scores, B as rows) with scratch, on the 16-row tile,
    /// of at least [`SPLIT_K_MIN_MACS`], when their output tiles make too few workgroups and
    /// each split keeps [`SPLIT_K_MIN_K`]; [`WgpuOptions::split_k`](crate::backend::wgpu::WgpuOptions::split_k)
    /// turns it off.
    fn k_splits(&self, ctx: &GpuContext, tile: GemmTile) -> Option<(usize, usize)> {
        let eligible = ctx.options.split_k != Some(false)
            && self.scratch.is_some()
            && tile == GemmTile::Small
            && self.batches == 1
            && self.scores.is_none()
            && !self.b_kn
            && self.m * self.rows * self.k >= SPLIT_K_MIN_MACS;
        let (bm, bn) = tile.dims();
        let groups = self.m.div_ceil(bm) * self.rows.div_ceil(bn);
        if !eligible || groups >= SPLIT_K_MIN_GROUPS {
            return None;
        }
        split_k(groups, self.k)
    }

    /// The product's dispatch, or with K split the partial sums' and their combination's.
    pub fn dispatch(&self, ctx: &GpuContext) -> Result<Vec<Dispatch>> {
        let mut tile = GemmTile::choose(ctx, self.m, self.rows, self.batches);
        if self.gated.is_some() && tile == GemmTile::Large {
            // three 128-row tiles would pass 16 KiB of workgroup memory
            tile = GemmTile::Medium;
        }
        let split = self.k_splits(ctx, tile);
        let gated = self.gated.is_some();
        let (scale, shift, mask) = self.scores.unwrap_or((1.0, None, None));
        let v = Variant::new("gemm_tiled", SOURCE, "gemm_tiled");
        let v = Addend::define(self.addend, self.parts.define(v))
            .define(self.b_define, true)
            .define(tile.define(), true)
            .define("B_KN", self.b_kn)
            .define("SCORES", self.scores.is_some())
            .define("CAUSAL", shift.is_some())
            .define("ALLOWED", mask.is_some())
            .define(
                "VEC4",
                ctx.options.gemm_vec4 && tile != GemmTile::Large && !gated,
            )
            .define("GATED", gated)
            .define("SILU", matches!(self.gated, Some((_, GateAct::Silu))))
            .define("NORM", self.norm.is_some())
            .define("SPLIT_K", split.is_some())
            // xs and ws are filled for the whole tile, then a barrier, then read
            .written_before_read()
            // Every index is in range without runtime checks: workgroup tiles are indexed
            // by r < BM (or BN) and c < BK < PITCH by construction; global reads and writes
            // are guarded by m < M, n < rows and kk < K, and the buffers hold what the
            // params say (A: batches x M rows of K, `lda` apart, from the node's shape; B:
            // a weight chunk of rows x K or attention's keys / values, `ldb` apart; C and
            // the addend: the output (its gate: at gate_off + n < the modulation vector's
            // length, fuse/ checks), the mask: [M, N], the gain: [K], read at kk < K;
            // the row sums of squares by t < BM; SPLIT_K: k < min(K, (z + 1) k_chunk), and
            // the partial sums at z < splits, m < M, n < rows of a scratch buffer sized for
            // them). That saves a clamp per workgroup-memory read in the inner loop.
            .indices_proven();
        let shift = i32::try_from(shift.unwrap_or(0)).unwrap_or(i32::MAX);
        let [sa, sb, sc] = self.strides;
        let [n0, n01] = self.parts.words(self.n)?;
        let params = [
            u32_of(self.m, "M")?,
            u32_of(self.n, "N")?,
            u32_of(self.k, "K")?,
            u32_of(self.n_off, "column offset")?,
            u32_of(self.rows, "rows")?,
            n0,
            n01,
            Addend::gate_off(self.addend)?,
            u32_of(sa, "A batch stride")?,
            u32_of(sb, "B batch stride")?,
            u32_of(sc, "C batch stride")?,
            u32_of(self.group.max(1), "group")?,
            scale.to_bits(),
            shift as u32,
            u32_of(self.lda, "A row stride")?,
            u32_of(self.ldb, "B row stride")?,
            self.norm.map_or(0, |n| n.0.eps.to_bits()),
            self.norm.map_or(0, |n| n.0.offset.to_bits()),
            u32_of(split.map_or(0, |s| s.1), "k a split")?,
            u32_of(split.map_or(1, |s| s.0), "splits")?,
        ];
        let (bm, bn) = tile.dims();
        let mut grid = [
            u32_of(self.rows.div_ceil(bn), "column tiles")?,
            u32_of(self.m.div_ceil(bm), "row tiles")?,
            u32_of(self.batches, "batches")?,
        ];
        if let (Some((splits, _)), Some(pool)) = (split, self.scratch) {
            grid[2] = u32_of(splits, "splits")?;
            // the partial sums: splits x M x rows (twice when gated), the row sums of
            // squares splits x M
            let plane = self.m * self.rows;
            let words = splits * (plane * (1 + usize::from(gated)) + self.m);
            let part = pool.get_slot(ctx, SPLIT_K_SLOT, 4 * words as u64);
            let mut buffers = vec![(1, self.a), (2, Bind::f32(self.b)), (9, Bind::f32(&part))];
            if let Some((up, _)) = self.gated {
                buffers.push((7, Bind::f32(up)));
            }
            if let Some((_, gain)) = self.norm {
                buffers.push((8, gain));
            }
            let sums = dispatch(ctx, &v, &params, &buffers, grid)?;
            // the same defines (ADD_C, NORM, GATED, ...), bounds checks on
            let mut combine = Variant::new("gemm_tiled", SOURCE, "gemm_combine");
            combine.defines = v.defines.clone();
            let mut buffers = vec![(3, self.c), (9, Bind::f32(&part))];
            buffers.extend(self.parts.bindings());
            buffers.extend(Addend::bindings(self.addend));
            let grid = grid_1d(ctx, plane, 256);
            return Ok(vec![
                sums,
                dispatch(ctx, &combine, &params, &buffers, grid)?,
            ]);
        }
        let mut buffers = vec![(1, self.a), (2, Bind::f32(self.b)), (3, self.c)];
        buffers.extend(self.parts.bindings());
        if let Some(m) = mask {
            buffers.push((4, m));
        }
        buffers.extend(Addend::bindings(self.addend));
        if let Some((up, _)) = self.gated {
            buffers.push((7, Bind::f32(up)));
        }
        if let Some((_, gain)) = self.norm {
            buffers.push((8, gain));
        }
        Ok(vec![dispatch(ctx, &v, &params, &buffers, grid)?])
    }
}

/// (splits, k a split) for a product of `groups` output tiles over `k`: enough splits to
/// reach [`SPLIT_K_MIN_GROUPS`] workgroups, each at least [`SPLIT_K_MIN_K`] deep and a
/// whole number of k steps; `None` when fewer than two fit.
fn split_k(groups: usize, k: usize) -> Option<(usize, usize)> {
    let want = SPLIT_K_MIN_GROUPS.div_ceil(groups.max(1));
    let splits = want.min(k / SPLIT_K_MIN_K);
    if splits < 2 {
        return None;
    }
    let chunk = k.div_ceil(splits).next_multiple_of(BK);
    Some((k.div_ceil(chunk), chunk))
}

#[cfg(test)]
mod tests {
    use super::split_k;

    #[test]
    fn k_splits_cover_k_in_whole_steps() {
        // pi0's expert down projection at 50 rows: 4 x 16 tiles over k 4096 -> 4 splits
        assert_eq!(split_k(64, 4096), Some((4, 1024)));
        // enough workgroups already, or too little k: no split
        assert_eq!(split_k(256, 4096), None);
        assert_eq!(split_k(1, 255), None);
        for (groups, k) in [(48, 2048), (1, 5000), (7, 333), (100, 1000), (3, 257)] {
            let (splits, chunk) = split_k(groups, k).expect("split");
            assert!(chunk % 16 == 0 && chunk >= 128, "{groups} {k}: {chunk}");
            assert!(splits >= 2 && splits * chunk >= k && (splits - 1) * chunk < k);
            assert!(groups * splits <= 256 + groups, "{groups} {k}: {splits}");
        }
    }
}
