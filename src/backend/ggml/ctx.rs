//! Safe graph construction over ggml: [`Ctx`] makes tensors in one ggml context and
//! records ops on them, [`T`] is one tensor and [`CGraph`] a compute graph.
//!
//! Invariants. Every handle carries the lifetime `'c` of the [`Build`](super::ffi::Build)
//! whose context holds it, and only a build makes a `Ctx`. A build frees its contexts (and
//! the buffers holding their tensors' data) only as the
//! [`Compiled`](super::ffi::Compiled) it becomes is dropped, after `'c` has ended, so a
//! handle never outlives its tensor. `'c` is invariant, so handles of two builds cannot
//! meet in one op. An op may read tensors of any context of its build (weights, constants,
//! the graph's own): all of them live as long as the build.
//!
//! Handles are neither `Send` nor `Sync`: one thread builds a graph. With live handles the
//! methods need nothing more from their caller: in a `no_alloc` context ggml only writes
//! metadata while a graph is built, and it checks each op's operands itself
//! (`GGML_ASSERT`, which aborts: types, shapes, contiguity, a view's size). What it leaves
//! unchecked: the strides of [`Ctx::view_4d`] (checked here), and what a kernel reads at run
//! time that ggml-cpu asserts but other devices' kernels trust ([`Ctx::get_rows`]'s ids,
//! [`Ctx::rope_ext`]'s `n_dims`): those methods say what their caller guarantees.

use llama_cpp_sys_2 as sys;
use std::marker::PhantomData;
use std::ptr::{self, NonNull};

/// Ties a handle to its build; invariant, so `'c` can be neither widened nor narrowed.
pub(crate) type Brand<'c> = PhantomData<fn(&'c ()) -> &'c ()>;

/// A tensor of a context of the build `'c`.
#[derive(Clone, Copy)]
pub(crate) struct T<'c> {
    ptr: NonNull<sys::ggml_tensor>,
    _brand: Brand<'c>,
}

impl<'c> T<'c> {
    /// What ggml returned for a new tensor (ggml aborts rather than return null).
    fn new(ptr: *mut sys::ggml_tensor) -> Self {
        T {
            ptr: NonNull::new(ptr).expect("ggml returned a null tensor"),
            _brand: PhantomData,
        }
    }

    /// # Safety
    /// `ptr` is a live tensor that outlives `'c`, and no `Ctx` of another build has the
    /// brand `'c`.
    pub(super) unsafe fn from_raw(ptr: *mut sys::ggml_tensor) -> Self {
        Self::new(ptr)
    }

    pub(super) fn as_ptr(self) -> *mut sys::ggml_tensor {
        self.ptr.as_ptr()
    }

    /// Byte strides.
    pub fn nb(self) -> [usize; 4] {
        // SAFETY: a live tensor (the module invariant), on this thread only.
        unsafe { (*self.as_ptr()).nb }
    }

    /// The op that computes it; `GGML_OP_NONE` for a leaf (input, weight, constant).
    pub fn op(self) -> sys::ggml_op {
        // SAFETY: as in `nb`.
        unsafe { (*self.as_ptr()).op }
    }

    /// Whether it views another tensor's data.
    pub fn is_view(self) -> bool {
        // SAFETY: as in `nb`.
        unsafe { !(*self.as_ptr()).view_src.is_null() }
    }

    /// Whether it has memory (a graph tensor that nothing reads is left unallocated).
    pub fn is_allocated(self) -> bool {
        // SAFETY: as in `nb`.
        unsafe { !(*self.as_ptr()).buffer.is_null() || !(*self.as_ptr()).data.is_null() }
    }

    pub fn set_input(self) {
        // SAFETY: a live tensor; sets a flag.
        unsafe { sys::ggml_set_input(self.as_ptr()) }
    }

    pub fn set_output(self) {
        // SAFETY: a live tensor; sets a flag.
        unsafe { sys::ggml_set_output(self.as_ptr()) }
    }

    /// Copies host bytes into the tensor, which must be allocated and hold exactly
    /// `bytes.len()` bytes (ggml aborts when it has no buffer or fewer bytes).
    pub fn set(self, bytes: &[u8]) {
        // SAFETY: a live tensor; a pure size query.
        debug_assert_eq!(unsafe { sys::ggml_nbytes(self.as_ptr()) }, bytes.len());
        // SAFETY: a live tensor whose buffer lives as long as it (the build owns both);
        // ggml checks that the tensor is allocated and holds `bytes.len()` bytes, and reads
        // exactly that many from `bytes`.
        unsafe {
            sys::ggml_backend_tensor_set(self.as_ptr(), bytes.as_ptr().cast(), 0, bytes.len())
        }
    }

    /// Reads an allocated F32 tensor (ggml aborts when it has no buffer or is smaller).
    pub fn get_f32(self) -> Vec<f32> {
        // SAFETY: a live tensor; a pure size query.
        let n = unsafe { sys::ggml_nelements(self.as_ptr()) } as usize;
        let mut v = vec![0.0f32; n];
        // SAFETY: as in `set`; ggml writes exactly `4 * n` bytes, the size of `v`.
        unsafe { sys::ggml_backend_tensor_get(self.as_ptr(), v.as_mut_ptr().cast(), 0, 4 * n) };
        v
    }
}

/// A compute graph in a context of the build `'c`.
#[derive(Clone, Copy)]
pub(crate) struct CGraph<'c> {
    ptr: NonNull<sys::ggml_cgraph>,
    _brand: Brand<'c>,
}

impl<'c> CGraph<'c> {
    pub(super) fn as_non_null(self) -> NonNull<sys::ggml_cgraph> {
        self.ptr
    }

    /// Adds `t` and everything it depends on (ggml aborts when the graph is full).
    pub fn build_forward_expand(self, t: T<'c>) {
        // SAFETY: a live graph and tensor of one build.
        unsafe { sys::ggml_build_forward_expand(self.ptr.as_ptr(), t.as_ptr()) }
    }
}

/// One context of the build `'c`: each method adds one tensor or op to it.
#[derive(Clone, Copy)]
pub(crate) struct Ctx<'c> {
    ptr: NonNull<sys::ggml_context>,
    _brand: Brand<'c>,
}

/// `Ctx` methods over one ggml function `f(ctx, a)`.
macro_rules! unary {
    ($($name:ident => $f:ident),* $(,)?) => {$(
        pub fn $name(self, a: T<'c>) -> T<'c> {
            // SAFETY: live handles of one build (the module invariant); ggml checks the rest.
            T::new(unsafe { sys::$f(self.as_ptr(), a.as_ptr()) })
        }
    )*};
}

/// `Ctx` methods over one ggml function `f(ctx, a, b)`.
macro_rules! binary {
    ($($name:ident => $f:ident),* $(,)?) => {$(
        pub fn $name(self, a: T<'c>, b: T<'c>) -> T<'c> {
            // SAFETY: as in `unary!`.
            T::new(unsafe { sys::$f(self.as_ptr(), a.as_ptr(), b.as_ptr()) })
        }
    )*};
}

impl<'c> Ctx<'c> {
    /// # Safety
    /// `ptr` is a live context that outlives `'c`, and `'c` is the brand of the build that
    /// owns it.
    pub(super) unsafe fn from_raw(ptr: NonNull<sys::ggml_context>) -> Self {
        Ctx {
            ptr,
            _brand: PhantomData,
        }
    }

    pub(super) fn as_ptr(self) -> *mut sys::ggml_context {
        self.ptr.as_ptr()
    }

    pub fn new_tensor_1d(self, ty: sys::ggml_type, ne0: i64) -> T<'c> {
        // SAFETY: a live context; ggml checks the type and aborts when the context is full.
        T::new(unsafe { sys::ggml_new_tensor_1d(self.as_ptr(), ty, ne0) })
    }

    pub fn new_tensor_4d(self, ty: sys::ggml_type, ne: [i64; 4]) -> T<'c> {
        // SAFETY: as in `new_tensor_1d`.
        T::new(unsafe { sys::ggml_new_tensor_4d(self.as_ptr(), ty, ne[0], ne[1], ne[2], ne[3]) })
    }

    /// A graph of room for `size` nodes (no gradients).
    pub fn new_graph_custom(self, size: usize) -> CGraph<'c> {
        // SAFETY: a live context; ggml aborts when it has no room for the graph.
        let g = unsafe { sys::ggml_new_graph_custom(self.as_ptr(), size, false) };
        CGraph {
            ptr: NonNull::new(g).expect("ggml returned a null graph"),
            _brand: PhantomData,
        }
    }

    unary! {
        abs => ggml_abs,
        cont => ggml_cont,
        gelu_erf => ggml_gelu_erf,
        relu => ggml_relu,
        silu => ggml_silu,
        soft_max => ggml_soft_max,
        sqr => ggml_sqr,
        step => ggml_step,
        sum_rows => ggml_sum_rows,
        tanh => ggml_tanh,
        transpose => ggml_transpose,
    }

    binary! {
        add => ggml_add,
        div => ggml_div,
        mul => ggml_mul,
        mul_mat => ggml_mul_mat,
    }

    /// Rows `ids` (I32) of `a`. ggml-cpu aborts on an id outside `[0, rows)`, other devices'
    /// kernels do not check: the caller fills `ids` with in-range values only (the
    /// executable checks them on the host each run).
    pub fn get_rows(self, a: T<'c>, ids: T<'c>) -> T<'c> {
        // SAFETY: as in `unary!`; the ids are data, read only when the graph runs.
        T::new(unsafe { sys::ggml_get_rows(self.as_ptr(), a.as_ptr(), ids.as_ptr()) })
    }

    pub fn cast(self, a: T<'c>, ty: sys::ggml_type) -> T<'c> {
        // SAFETY: as in `unary!`.
        T::new(unsafe { sys::ggml_cast(self.as_ptr(), a.as_ptr(), ty) })
    }

    pub fn scale(self, a: T<'c>, s: f32) -> T<'c> {
        // SAFETY: as in `unary!`.
        T::new(unsafe { sys::ggml_scale(self.as_ptr(), a.as_ptr(), s) })
    }

    /// `a` clamped to `[lo, hi]`.
    pub fn clamp(self, a: T<'c>, lo: f32, hi: f32) -> T<'c> {
        // SAFETY: as in `unary!`.
        T::new(unsafe { sys::ggml_clamp(self.as_ptr(), a.as_ptr(), lo, hi) })
    }

    /// `a * s + b`.
    pub fn scale_bias(self, a: T<'c>, s: f32, b: f32) -> T<'c> {
        // SAFETY: as in `unary!`.
        T::new(unsafe { sys::ggml_scale_bias(self.as_ptr(), a.as_ptr(), s, b) })
    }

    pub fn norm(self, a: T<'c>, eps: f32) -> T<'c> {
        // SAFETY: as in `unary!`.
        T::new(unsafe { sys::ggml_norm(self.as_ptr(), a.as_ptr(), eps) })
    }

    pub fn rms_norm(self, a: T<'c>, eps: f32) -> T<'c> {
        // SAFETY: as in `unary!`.
        T::new(unsafe { sys::ggml_rms_norm(self.as_ptr(), a.as_ptr(), eps) })
    }

    pub fn soft_max_ext(self, a: T<'c>, mask: Option<T<'c>>, scale: f32, max_bias: f32) -> T<'c> {
        let mask = mask.map_or(ptr::null_mut(), T::as_ptr);
        // SAFETY: as in `unary!`; a null mask is ggml's "no mask".
        T::new(unsafe { sys::ggml_soft_max_ext(self.as_ptr(), a.as_ptr(), mask, scale, max_bias) })
    }

    pub fn concat(self, a: T<'c>, b: T<'c>, dim: i32) -> T<'c> {
        // SAFETY: as in `unary!`.
        T::new(unsafe { sys::ggml_concat(self.as_ptr(), a.as_ptr(), b.as_ptr(), dim) })
    }

    pub fn permute(self, a: T<'c>, axes: [i32; 4]) -> T<'c> {
        let [a0, a1, a2, a3] = axes;
        // SAFETY: as in `unary!`.
        T::new(unsafe { sys::ggml_permute(self.as_ptr(), a.as_ptr(), a0, a1, a2, a3) })
    }

    pub fn repeat_4d(self, a: T<'c>, ne: [i64; 4]) -> T<'c> {
        // SAFETY: as in `unary!`.
        T::new(unsafe {
            sys::ggml_repeat_4d(self.as_ptr(), a.as_ptr(), ne[0], ne[1], ne[2], ne[3])
        })
    }

    pub fn reshape_2d(self, a: T<'c>, ne0: i64, ne1: i64) -> T<'c> {
        // SAFETY: as in `unary!`.
        T::new(unsafe { sys::ggml_reshape_2d(self.as_ptr(), a.as_ptr(), ne0, ne1) })
    }

    pub fn reshape_4d(self, a: T<'c>, ne: [i64; 4]) -> T<'c> {
        // SAFETY: as in `unary!`.
        T::new(unsafe {
            sys::ggml_reshape_4d(self.as_ptr(), a.as_ptr(), ne[0], ne[1], ne[2], ne[3])
        })
    }

    /// `ne0` elements of `a` from byte `offset` (ggml checks they lie inside `a`).
    pub fn view_1d(self, a: T<'c>, ne0: i64, offset: usize) -> T<'c> {
        // SAFETY: as in `unary!`.
        T::new(unsafe { sys::ggml_view_1d(self.as_ptr(), a.as_ptr(), ne0, offset) })
    }

    /// A strided view of `a`: `ne` elements, byte strides `nb` (dims 1 to 3), from byte
    /// `offset`. Panics unless every byte it spans lies inside `a`.
    pub fn view_4d(self, a: T<'c>, ne: [i64; 4], nb: [usize; 3], offset: usize) -> T<'c> {
        // SAFETY: as in `unary!`. ggml checks the view's contiguous size against `a`, not
        // its strides: those are checked below, before anything reads through the view.
        let v = T::new(unsafe {
            sys::ggml_view_4d(
                self.as_ptr(),
                a.as_ptr(),
                ne[0],
                ne[1],
                ne[2],
                ne[3],
                nb[0],
                nb[1],
                nb[2],
                offset,
            )
        });
        // SAFETY: pure size queries of live tensors (ggml_nbytes follows the strides).
        let (span, size) = unsafe { (sys::ggml_nbytes(v.as_ptr()), sys::ggml_nbytes(a.as_ptr())) };
        assert!(
            offset.checked_add(span).is_some_and(|end| end <= size),
            "ggml view of {ne:?} strided {nb:?} at {offset} spans past its {size}-byte source"
        );
        v
    }

    /// ggml's signature: rope over `a` at positions `b` (I32), frequency factors `c`.
    /// `n_dims` is even and at most `a`'s `ne[0]` (ggml-cpu asserts it at run time, other
    /// devices do not; the graph builder checks it).
    #[allow(clippy::too_many_arguments)]
    pub fn rope_ext(
        self,
        a: T<'c>,
        b: T<'c>,
        c: Option<T<'c>>,
        n_dims: i32,
        mode: i32,
        n_ctx_orig: i32,
        freq_base: f32,
        freq_scale: f32,
        ext_factor: f32,
        attn_factor: f32,
        beta_fast: f32,
        beta_slow: f32,
    ) -> T<'c> {
        let c = c.map_or(ptr::null_mut(), T::as_ptr);
        // SAFETY: as in `unary!`; a null `c` is ggml's "no frequency factors".
        T::new(unsafe {
            sys::ggml_rope_ext(
                self.as_ptr(),
                a.as_ptr(),
                b.as_ptr(),
                c,
                n_dims,
                mode,
                n_ctx_orig,
                freq_base,
                freq_scale,
                ext_factor,
                attn_factor,
                beta_fast,
                beta_slow,
            )
        })
    }

    /// Max pooling over `a`'s first two dims (`k` kernel, `s` stride, `p` padding, which
    /// never wins).
    #[allow(clippy::too_many_arguments)]
    pub fn pool_2d_max(
        self,
        a: T<'c>,
        k0: i32,
        k1: i32,
        s0: i32,
        s1: i32,
        p0: i32,
        p1: i32,
    ) -> T<'c> {
        // SAFETY: as in `unary!`.
        T::new(unsafe {
            sys::ggml_pool_2d(
                self.as_ptr(),
                a.as_ptr(),
                sys::GGML_OP_POOL_MAX,
                k0,
                k1,
                s0,
                s1,
                p0 as f32,
                p1 as f32,
            )
        })
    }

    /// ggml's signature: the columns of `b` that kernel `a` reads (stride `s`, padding
    /// `p`, dilation `d`).
    #[allow(clippy::too_many_arguments)]
    pub fn im2col(
        self,
        a: T<'c>,
        b: T<'c>,
        s0: i32,
        s1: i32,
        p0: i32,
        p1: i32,
        d0: i32,
        d1: i32,
        is_2d: bool,
        dst_type: sys::ggml_type,
    ) -> T<'c> {
        // SAFETY: as in `unary!`.
        T::new(unsafe {
            sys::ggml_im2col(
                self.as_ptr(),
                a.as_ptr(),
                b.as_ptr(),
                s0,
                s1,
                p0,
                p1,
                d0,
                d1,
                is_2d,
                dst_type,
            )
        })
    }
}
