"""Reference (numpy, integer-exact where the library is) image resizes used by the golden tools.

- `torch_bicubic_u8(img, axis, n_out)`: torch's CPU uint8 anti-aliased bicubic kernel, which
  torchvision v2 `resize(..., BICUBIC, antialias=True)` runs on uint8 CPU tensors (groot.py's
  independent reference uses it too).
- `cv2_area_u8(img, out_h, out_w)`: OpenCV's `cv2.resize(img, (out_w, out_h), interpolation=
  cv2.INTER_AREA)` on uint8 HWC images, which GR00T N1.7's albumentations-style eval transform runs
  (lerobot processor_groot.py `_transform_n1_7_image_for_vlm_albumentations`). Two regimes, as in
  OpenCV's resize.cpp:
    * both axes shrink (scale = 1 / (dst/src) >= 1 on both, computed that way, as OpenCV does): true area averaging. Integer factors: the mean of the
      k x k block: (sum + 2) >> 2 for 2 x 2 (OpenCV's SIMD kernel), else
      `saturate_cast<uchar>(sum * (1.f / (kx*ky)))` in float32 (round half to even). Other factors: per axis a
      table of (dst, src, weight) with cell = src/dst, weights 1/cell for whole source pixels and the
      covered fraction / cell at the two ends (fractions below 1e-3 dropped), float32; the
      horizontal pass accumulates each source row into a float32 buffer, the vertical pass sums
      beta * row in float32, then round-half-even to u8 (cvRound) with saturation.
    * otherwise (enlarging): bilinear with "area" coefficients: for destination x,
      with inv = dst/src and scale = 1/inv (doubles), sx = floor(x * scale),
      f = (x + 1) - (sx + 1) * inv (rounded to float32), f = 0 if f <= 0 else
      f - floor(f); sx clamped to [0, n-1] (with f = 0 at the borders); weights (1 - f, f) as int16
      fixed point with 11 bits each (round(w * 2048)), horizontal pass in int32, vertical pass as
      OpenCV's SIMD kernel does it: ((b0 * (r0 >> 4)) >> 16) + ((b1 * (r1 >> 4)) >> 16) + 2) >> 2.
  `cv2_area_u8` reproduces cv2 4.13 bit for bit on the sizes the golden tools use (checked by
  `python tools/golden/resize_ref.py`, which compares against cv2 over many random sizes and
  reports any mismatch).
- `torch_bicubic_aa_f32(chw, out_h, out_w)`: torch's CPU *float32* anti-aliased bicubic
  (`F.interpolate(mode="bicubic", antialias=True, align_corners=False)`, the generic separable
  kernel of aten/src/ATen/native/cpu/UpSampleKernel.cpp) and `tv1_bicubic_u8(hwc, out_h, out_w)`,
  what torchvision's v1 `transforms.functional.resize(u8 tensor, BICUBIC, antialias=True)` does
  with it (u8 -> float32, that kernel, clamp [0, 255], round half to even, u8; identity when the
  size is unchanged): Evo-1's camera resize (lerobot policies/evo1/internvl3_embedder.py). Bit-exact
  to torch 2.10 with ATEN_CPU_CAPABILITY avx2 / avx512 (the compiled kernel contracts a*b+c into
  FMAs and GCC's in-order vectorised reduction changes the rounding: see the function); with the
  DEFAULT capability (no FMA) torch itself differs by one level on ~0.001% of pixels.
"""
import math

import numpy as np


# ----------------------------------------------------------------------------- torch bicubic u8

def _bicubic(x, a=-0.5):
    x = abs(x)
    if x < 1.0:
        return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
    return (((x - 5.0) * x + 8.0) * x - 4.0) * a if x < 2.0 else 0.0


def torch_bicubic_u8(img, axis, n_out):
    """torch's CPU uint8 antialiased bicubic kernel along one axis (PIL-SIMD's algorithm): double
    weights, normalised, quantised to int16 with precision p = the first p >= 0 with
    round(w_max * 2^(p+1)) >= 2^15 (at most 22; w_max over the whole axis), w_i16 = trunc(w * 2^p
    -+ 0.5) (away from zero); acc = 2^(p-1) + sum(w_i16 * x) in int32, clamp(acc >> p, 0, 255)."""
    img = np.moveaxis(np.asarray(img, np.int64), axis, -1)
    n_in = img.shape[-1]
    scale = n_in / n_out
    support, inv = (2.0 * scale, 1.0 / scale) if scale >= 1.0 else (2.0, 1.0)
    rows = []
    for i in range(n_out):
        c = scale * (i + 0.5)
        xmin = max(int(c - support + 0.5), 0)
        w = [_bicubic((j + xmin - c + 0.5) * inv) for j in range(min(int(c + support + 0.5), n_in) - xmin)]
        tot = sum(w)
        rows.append((xmin, [v / tot if tot != 0.0 else v for v in w]))
    w_max, p = max(max(w) for _, w in rows), 0
    while p < 22 and int(0.5 + w_max * (1 << (p + 1))) < (1 << 15):
        p += 1
    out = np.empty(img.shape[:-1] + (n_out,), np.int64)
    for i, (xmin, w) in enumerate(rows):
        acc = np.full(img.shape[:-1], 1 << (p - 1), np.int64)
        for k, v in enumerate(w):
            acc += (int(-0.5 + v * (1 << p)) if v < 0 else int(0.5 + v * (1 << p))) * img[..., xmin + k]
        out[..., i] = np.clip(acc >> p, 0, 255)
    return np.moveaxis(out, -1, axis)


def torch_bicubic_resize_u8(hwc, out_h, out_w):
    """torchvision v2 resize(u8 CHW, [out_h, out_w], BICUBIC, antialias=True) on CPU, HWC in and out:
    identity if the size is unchanged, else the width pass then the height pass (u8 between)."""
    x = np.asarray(hwc, np.int64)
    if x.shape[:2] == (out_h, out_w):
        return x.astype(np.uint8)
    if x.shape[1] != out_w:
        x = torch_bicubic_u8(x, 1, out_w)
    if x.shape[0] != out_h:
        x = torch_bicubic_u8(x, 0, out_h)
    return x.astype(np.uint8)


# ----------------------------------------------------------------------------- torch bicubic float32

def _fma32(a, b, c):
    """float32 fused multiply-add a * b + c, rounded once (exact rational arithmetic)."""
    from fractions import Fraction
    return np.float32(Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c)))


def _cubic_aa_f32(x):
    """HelperInterpCubic::aa_filter<float> (a = -0.5) as compiled: |x| < 1: ((a+2)x - (a+3)) x x + 1,
    |x| < 2: ((a x - 5a) x + 8a) x - 4a, with every a*b+c contracted into one float32 FMA."""
    f32, a = np.float32, np.float32(-0.5)
    x = f32(abs(x))
    if x < 1.0:
        return _fma32(f32(_fma32(f32(a + f32(2)), x, -f32(a + f32(3))) * x), x, f32(1))
    if x < 2.0:
        return _fma32(_fma32(_fma32(a, x, -f32(f32(5) * a)), x, f32(f32(8) * a)), x, -f32(f32(4) * a))
    return f32(0)


def torch_aa_weights_f32(n_in, n_out):
    """_compute_indices_min_size_weights_aa<float> for bicubic: [(xmin, [float32 weights])] per output.
    scale = float32(n_in) / n_out; support = 2 * scale (scale >= 1) else 2; invscale = 1/scale
    (scale >= 1) else 1, both rounded to float32; center = float32(scale * (i + 0.5)); xmin =
    max(trunc(float32(center - support) + 0.5), 0); xmax = min(trunc(float32(center + support) +
    0.5), n_in); w_j = filter(float32((float32(j + xmin - center) + 0.5) * invscale)) (the + 0.5 and
    the product in double); w_j /= sum_j w_j (float32, summed in order)."""
    f32 = np.float32
    scale = f32(f32(n_in) / f32(n_out))
    support = f32(2.0 * float(scale)) if scale >= 1.0 else f32(2.0)
    inv = f32(1.0 / float(scale)) if scale >= 1.0 else f32(1.0)
    rows = []
    for i in range(n_out):
        c = f32(float(scale) * (i + 0.5))
        lo = max(int(float(f32(c - support)) + 0.5), 0)
        hi = min(int(float(f32(c + support)) + 0.5), n_in)
        w = [_cubic_aa_f32(f32((float(f32(f32(j + lo) - c)) + 0.5) * float(inv))) for j in range(hi - lo)]
        tot = f32(0)
        for v in w:
            tot = f32(tot + v)
        rows.append((lo, [f32(v / tot) for v in w] if tot != 0 else w))
    return rows


def _aa_pass_f32(x, axis, n_out):
    """One separable pass, float32: out = x[xmin] * w0, then for taps j = 1.. : the first
    4 * floor((n - 1) / 4) taps are added as rounded products (GCC's vectorised in-order reduction,
    blocks of 4), the remaining ones as FMAs (out = fma(x[xmin + j], w_j, out))."""
    f32 = np.float32
    x = np.moveaxis(np.asarray(x, f32), axis, -1)
    out = np.empty(x.shape[:-1] + (n_out,), f32)
    for i, (lo, w) in enumerate(torch_aa_weights_f32(x.shape[-1], n_out)):
        acc = (x[..., lo] * w[0]).astype(f32)
        nvec = ((len(w) - 1) // 4) * 4
        for k in range(1, len(w)):
            p = x[..., lo + k]
            if k <= nvec:
                acc = (acc + (p * w[k]).astype(f32)).astype(f32)
            else:  # float32 product exact in double; one rounding of the sum (= FMA here)
                acc = (acc.astype(np.float64) + p.astype(np.float64) * float(w[k])).astype(f32)
        out[..., i] = acc
    return np.moveaxis(out, -1, axis)


def torch_bicubic_aa_f32(chw, out_h, out_w):
    """F.interpolate(x[None], (out_h, out_w), mode="bicubic", align_corners=False, antialias=True)[0]
    for float32 [C, H, W] on CPU: the width pass first, then the height pass (float32 in between);
    an axis whose size is unchanged is skipped; no clamping."""
    x = np.asarray(chw, np.float32)
    if x.shape[2] != out_w:
        x = _aa_pass_f32(x, 2, out_w)
    if x.shape[1] != out_h:
        x = _aa_pass_f32(x, 1, out_h)
    return x


def tv1_bicubic_u8(hwc, out_h, out_w):
    """torchvision.transforms.functional.resize(u8 CHW tensor, [out_h, out_w], BICUBIC,
    antialias=True) (v1 API): identity when the size is unchanged; else u8 -> float32,
    torch_bicubic_aa_f32, clamp to [0, 255], round half to even, u8. HWC in and out."""
    x = np.asarray(hwc, np.uint8)
    if x.shape[:2] == (out_h, out_w):
        return x.copy()
    y = torch_bicubic_aa_f32(x.transpose(2, 0, 1).astype(np.float32), out_h, out_w)
    return np.rint(np.clip(y, 0, 255)).astype(np.uint8).transpose(1, 2, 0)


# ----------------------------------------------------------------------------- cv2 INTER_AREA u8

def _area_tab(ssize, dsize, scale):
    """OpenCV computeResizeAreaTab: [(dst, src, float32 weight)]."""
    tab = []
    for dx in range(dsize):
        fsx1 = dx * scale
        fsx2 = fsx1 + scale
        cell = min(scale, ssize - fsx1)
        sx1, sx2 = math.ceil(fsx1), math.floor(fsx2)
        sx2 = min(sx2, ssize - 1)
        sx1 = min(sx1, sx2)
        if sx1 - fsx1 > 1e-3:
            tab.append((dx, sx1 - 1, np.float32((sx1 - fsx1) / cell)))
        for sx in range(sx1, sx2):
            tab.append((dx, sx, np.float32(1.0 / cell)))
        if fsx2 - sx2 > 1e-3:
            tab.append((dx, sx2, np.float32(min(min(fsx2 - sx2, 1.0), cell) / cell)))
    return tab


def _area_shrink(src, out_h, out_w):
    h, w, c = src.shape
    sx, sy = 1.0 / (out_w / w), 1.0 / (out_h / h)  # OpenCV's scale_x = 1 / inv_scale_x
    ix, iy = int(round(sx)), int(round(sy))
    f32 = np.float32
    if abs(sx - ix) < np.finfo(float).eps and abs(sy - iy) < np.finfo(float).eps:  # resizeAreaFast
        blk = src[: out_h * iy, : out_w * ix].astype(np.int64).reshape(out_h, iy, out_w, ix, c).sum((1, 3))
        if ix == iy == 2:  # the SIMD kernel OpenCV uses for 2x2 on u8: round half up
            return ((blk + 2) >> 2).astype(np.uint8)
        v = blk.astype(f32) * f32(1.0 / (ix * iy))
        return np.clip(np.rint(v), 0, 255).astype(np.uint8)
    xtab, ytab = _area_tab(w, out_w, sx), _area_tab(h, out_h, sy)
    out = np.zeros((out_h, out_w, c), np.uint8)
    srcf = src.astype(f32)
    acc, prev = np.zeros((out_w, c), f32), ytab[0][0]
    for dy, sy_, beta in ytab:
        buf = np.zeros((out_w, c), f32)
        for dx, sxx, alpha in xtab:
            buf[dx] = (buf[dx] + srcf[sy_, sxx] * alpha).astype(f32)
        if dy != prev:
            out[prev] = np.clip(np.rint(acc), 0, 255).astype(np.uint8)
            acc = (beta * buf).astype(f32)
            prev = dy
        else:
            acc = (acc + beta * buf).astype(f32)
    out[prev] = np.clip(np.rint(acc), 0, 255).astype(np.uint8)
    return out


def _area_linear_coeffs(ssize, dsize):
    inv = dsize / ssize            # OpenCV's inv_scale_x
    scale = 1.0 / inv              # OpenCV's scale_x (not ssize / dsize: the rounding differs)
    ofs, alpha = [], []
    for dx in range(dsize):
        sx = math.floor(dx * scale)
        fx = float(np.float32((dx + 1) - (sx + 1) * inv))
        fx = 0.0 if fx <= 0 else fx - math.floor(fx)
        fx = float(np.float32(fx))
        if sx < 0:
            fx, sx = 0.0, 0
        if sx >= ssize - 1:
            fx, sx = 0.0, ssize - 1
        a0 = int(np.clip(np.rint(np.float32(1.0 - fx) * 2048), -32768, 32767))
        a1 = int(np.clip(np.rint(np.float32(fx) * 2048), -32768, 32767))
        ofs.append((sx, min(sx + 1, ssize - 1)))
        alpha.append((a0, a1))
    return ofs, alpha


def _area_enlarge(src, out_h, out_w):
    h, w, c = src.shape
    xo, xa = _area_linear_coeffs(w, out_w)
    yo, ya = _area_linear_coeffs(h, out_h)
    s = src.astype(np.int64)
    rows = np.empty((h, out_w, c), np.int64)  # horizontal pass, int32 accumulators
    for dx, ((s0, s1), (a0, a1)) in enumerate(zip(xo, xa)):
        rows[:, dx] = s[:, s0] * a0 + s[:, s1] * a1
    out = np.empty((out_h, out_w, c), np.int64)
    for dy, ((r0, r1), (b0, b1)) in enumerate(zip(yo, ya)):
        out[dy] = (((b0 * (rows[r0] >> 4)) >> 16) + ((b1 * (rows[r1] >> 4)) >> 16) + 2) >> 2
    return np.clip(out, 0, 255).astype(np.uint8)


def cv2_area_u8(hwc, out_h, out_w):
    """cv2.resize(hwc, (out_w, out_h), interpolation=cv2.INTER_AREA) for uint8 HWC."""
    src = np.asarray(hwc, np.uint8)
    h, w = src.shape[:2]
    if (h, w) == (out_h, out_w):
        return src.copy()
    if 1.0 / (out_w / w) >= 1 and 1.0 / (out_h / h) >= 1:
        return _area_shrink(src, out_h, out_w)
    return _area_enlarge(src, out_h, out_w)


if __name__ == "__main__":  # compare against cv2 itself
    import cv2
    rng = np.random.default_rng(0)
    sizes = [((100, 150), (64, 96)), ((64, 96), (60, 91)), ((60, 91), (64, 97)), ((256, 256), (243, 243)),
             ((243, 243), (256, 256)), ((480, 640), (256, 341)), ((128, 128), (64, 64)), ((30, 40), (64, 85))]
    sizes += [((int(rng.integers(8, 120)), int(rng.integers(8, 120))),
               (int(rng.integers(8, 120)), int(rng.integers(8, 120)))) for _ in range(60)]
    bad = 0
    for (h, w), (oh, ow) in sizes:
        if (w / ow >= 1) != (h / oh >= 1):
            continue  # mixed up/down: not produced by the aspect-preserving GR00T transform
        img = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        ref = cv2.resize(img, (ow, oh), interpolation=cv2.INTER_AREA)
        mine = cv2_area_u8(img, oh, ow)
        d = np.abs(ref.astype(int) - mine.astype(int))
        if d.max():
            bad += 1
            print(f"{(h, w)} -> {(oh, ow)}: max diff {d.max()}, {int((d > 0).sum())} of {d.size} values differ")
    print("cv2 INTER_AREA reference:", "bit-exact on all sizes" if not bad else f"{bad} sizes differ")
