//! OpenCV's `cv2.resize(..., interpolation=INTER_AREA)` on uint8 RGB, bit for bit (OpenCV 4.13's
//! arithmetic, as `tools/golden/resize_ref.py` documents and checks against cv2), and GR00T
//! N1.7's eval frame transform built on it: shortest edge to `S`, a centre crop of a fraction
//! of each side, shortest edge to `S` again.
//!
//! Two regimes, as in OpenCV's `resize.cpp`: when both axes shrink, area averaging (integer
//! factors: the block mean, `(sum + 2) >> 2` for 2 x 2; other factors: per-axis tables of
//! covered fractions in f32, a horizontal then a vertical f32 accumulation, round half to
//! even); otherwise bilinear with "area" coefficients in 11-bit fixed point.

/// Channels of the images here (HWC RGB).
const C: usize = 3;

/// OpenCV's `computeResizeAreaTab`: `(dst, src, weight)` per covered source pixel.
fn area_tab(ssize: usize, dsize: usize, scale: f64) -> Vec<(usize, usize, f32)> {
    let mut tab = Vec::new();
    for dx in 0..dsize {
        let fsx1 = dx as f64 * scale;
        let fsx2 = fsx1 + scale;
        let cell = scale.min(ssize as f64 - fsx1);
        let mut sx1 = fsx1.ceil() as usize;
        let sx2 = (fsx2.floor() as usize).min(ssize - 1);
        sx1 = sx1.min(sx2);
        if sx1 as f64 - fsx1 > 1e-3 {
            tab.push((dx, sx1 - 1, ((sx1 as f64 - fsx1) / cell) as f32));
        }
        for sx in sx1..sx2 {
            tab.push((dx, sx, (1.0 / cell) as f32));
        }
        if fsx2 - sx2 as f64 > 1e-3 {
            let part = (fsx2 - sx2 as f64).min(1.0).min(cell);
            tab.push((dx, sx2, (part / cell) as f32));
        }
    }
    tab
}

fn round_u8(x: f32) -> u8 {
    x.round_ties_even().clamp(0.0, 255.0) as u8
}

/// Both axes shrink: area averaging.
fn shrink(src: &[u8], (h, w): (usize, usize), (oh, ow): (usize, usize)) -> Vec<u8> {
    let (sx, sy) = (1.0 / (ow as f64 / w as f64), 1.0 / (oh as f64 / h as f64));
    let (ix, iy) = (sx.round() as usize, sy.round() as usize);
    let mut out = vec![0u8; oh * ow * C];
    if (sx - ix as f64).abs() < f64::EPSILON && (sy - iy as f64).abs() < f64::EPSILON {
        let inv = 1.0f32 / (ix * iy) as f32;
        for y in 0..oh {
            for x in 0..ow {
                for c in 0..C {
                    let mut sum = 0u32;
                    for dy in 0..iy {
                        for dx in 0..ix {
                            sum += u32::from(src[((y * iy + dy) * w + x * ix + dx) * C + c]);
                        }
                    }
                    out[(y * ow + x) * C + c] = match (ix, iy) {
                        (2, 2) => ((sum + 2) >> 2) as u8,
                        _ => round_u8(sum as f32 * inv),
                    };
                }
            }
        }
        return out;
    }
    let (xtab, ytab) = (area_tab(w, ow, sx), area_tab(h, oh, sy));
    let mut acc = vec![0f32; ow * C];
    let mut prev = ytab[0].0;
    for &(dy, row, beta) in &ytab {
        let mut buf = vec![0f32; ow * C];
        for &(dx, col, alpha) in &xtab {
            for c in 0..C {
                buf[dx * C + c] += f32::from(src[(row * w + col) * C + c]) * alpha;
            }
        }
        if dy != prev {
            for (o, a) in out[prev * ow * C..][..ow * C].iter_mut().zip(&acc) {
                *o = round_u8(*a);
            }
            for (a, b) in acc.iter_mut().zip(&buf) {
                *a = beta * b;
            }
            prev = dy;
        } else {
            for (a, b) in acc.iter_mut().zip(&buf) {
                *a += beta * b;
            }
        }
    }
    for (o, a) in out[prev * ow * C..][..ow * C].iter_mut().zip(&acc) {
        *o = round_u8(*a);
    }
    out
}

/// Bilinear "area" coefficients of one axis: source pair and 11-bit weights per output.
fn linear_coeffs(ssize: usize, dsize: usize) -> Vec<((usize, usize), (i64, i64))> {
    let inv = dsize as f64 / ssize as f64;
    let scale = 1.0 / inv;
    (0..dsize)
        .map(|dx| {
            let sx = (dx as f64 * scale).floor() as i64;
            let mut fx = (((dx + 1) as f64 - (sx + 1) as f64 * inv) as f32) as f64;
            fx = if fx <= 0.0 { 0.0 } else { fx - fx.floor() };
            fx = fx as f32 as f64;
            let mut sx = sx.max(0) as usize;
            if sx >= ssize - 1 {
                (fx, sx) = (0.0, ssize - 1);
            }
            let fixed = |w: f32| ((w * 2048.0).round_ties_even() as i64).clamp(-32768, 32767);
            let a0 = fixed((1.0 - fx) as f32);
            let a1 = fixed(fx as f32);
            ((sx, (sx + 1).min(ssize - 1)), (a0, a1))
        })
        .collect()
}

/// Some axis grows: bilinear with OpenCV's fixed-point passes.
fn enlarge(src: &[u8], (h, w): (usize, usize), (oh, ow): (usize, usize)) -> Vec<u8> {
    let (xc, yc) = (linear_coeffs(w, ow), linear_coeffs(h, oh));
    let mut rows = vec![0i64; h * ow * C];
    for y in 0..h {
        for (dx, &((s0, s1), (a0, a1))) in xc.iter().enumerate() {
            for c in 0..C {
                let px = |s: usize| i64::from(src[(y * w + s) * C + c]);
                rows[(y * ow + dx) * C + c] = px(s0) * a0 + px(s1) * a1;
            }
        }
    }
    let mut out = vec![0u8; oh * ow * C];
    for (dy, &((r0, r1), (b0, b1))) in yc.iter().enumerate() {
        for k in 0..ow * C {
            let (v0, v1) = (rows[r0 * ow * C + k], rows[r1 * ow * C + k]);
            let v = (((b0 * (v0 >> 4)) >> 16) + ((b1 * (v1 >> 4)) >> 16) + 2) >> 2;
            out[dy * ow * C + k] = v.clamp(0, 255) as u8;
        }
    }
    out
}

/// `cv2.resize(src, (ow, oh), interpolation=cv2.INTER_AREA)` for HWC RGB bytes `h x w`.
pub fn resize_area(src: &[u8], h: usize, w: usize, oh: usize, ow: usize) -> Vec<u8> {
    if (h, w) == (oh, ow) {
        return src.to_vec();
    }
    let shrinks = |s: usize, d: usize| 1.0 / (d as f64 / s as f64) >= 1.0;
    match shrinks(w, ow) && shrinks(h, oh) {
        true => shrink(src, (h, w), (oh, ow)),
        false => enlarge(src, (h, w), (oh, ow)),
    }
}

/// The inputs `[start, end)` that output `i` of an adaptive average from `n` to `o` samples
/// averages.
pub(crate) fn adaptive_range(i: usize, n: usize, o: usize) -> (usize, usize) {
    (i * n / o, ((i + 1) * n).div_ceil(o))
}

/// torch's `F.interpolate(mode="area")` (adaptive average pooling) of float planes `[c, h,
/// w]` to `oh x ow`: output cell `i` averages inputs `floor(i h / oh)` to `ceil((i + 1) h /
/// oh)` (exclusive), per axis.
pub fn adaptive_avg_f32(src: &[f32], (h, w): (usize, usize), (oh, ow): (usize, usize)) -> Vec<f32> {
    let c = src.len() / (h * w).max(1);
    let range = adaptive_range;
    let mut out = Vec::with_capacity(c * oh * ow);
    for plane in src.chunks(h * w) {
        for y in 0..oh {
            let (y0, y1) = range(y, h, oh);
            for x in 0..ow {
                let (x0, x1) = range(x, w, ow);
                let mut sum = 0f32;
                for r in y0..y1 {
                    sum += plane[r * w + x0..r * w + x1].iter().sum::<f32>();
                }
                out.push(sum / ((y1 - y0) * (x1 - x0)) as f32);
            }
        }
    }
    out
}

/// The size a shortest-edge resize to `edge` gives (Python's `round`, half to even).
pub fn shortest_edge_size(h: usize, w: usize, edge: usize) -> (usize, usize) {
    let short = h.min(w);
    if short == edge {
        return (h, w);
    }
    let scale = edge as f64 / short as f64;
    let r = |x: usize| ((x as f64 * scale).round_ties_even() as usize).max(1);
    (r(h), r(w))
}

/// GR00T N1.7's eval transform (`use_albumentations`): [`resize_area`] to the shortest edge
/// `edge`, a centre crop keeping `int(side * crop_fraction)` of each side, the shortest edge
/// to `edge` again. Returns the frame and its size.
pub fn gr00t_frame(
    src: &[u8],
    (h, w): (usize, usize),
    edge: usize,
    crop_fraction: f64,
) -> (Vec<u8>, (usize, usize)) {
    let (h1, w1) = shortest_edge_size(h, w, edge);
    let img = resize_area(src, h, w, h1, w1);
    let (ch, cw) = (
        ((h1 as f64 * crop_fraction) as usize).max(1),
        ((w1 as f64 * crop_fraction) as usize).max(1),
    );
    let (top, left) = ((h1 - ch) / 2, (w1 - cw) / 2);
    let mut crop = Vec::with_capacity(ch * cw * C);
    for y in top..top + ch {
        crop.extend_from_slice(&img[(y * w1 + left) * C..(y * w1 + left + cw) * C]);
    }
    let (h2, w2) = shortest_edge_size(ch, cw, edge);
    (resize_area(&crop, ch, cw, h2, w2), (h2, w2))
}

/// Isaac-GR00T N1.6's `LetterBoxPad` (before [`gr00t_frame`]): a non-square frame padded
/// with black to a square of its longer side, `(side - h) / 2` rows above and `(side - w) /
/// 2` columns to the left. Returns the frame and its side.
pub fn letterbox(src: &[u8], (h, w): (usize, usize)) -> (Vec<u8>, usize) {
    let side = h.max(w);
    if h == w {
        return (src.to_vec(), side);
    }
    let (top, left) = ((side - h) / 2, (side - w) / 2);
    let mut out = vec![0u8; side * side * C];
    for y in 0..h {
        let row = &src[y * w * C..(y + 1) * w * C];
        let at = ((top + y) * side + left) * C;
        out[at..at + w * C].copy_from_slice(row);
    }
    (out, side)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn letterbox_centres_the_frame_in_black() {
        // 1 x 3 -> 3 x 3: one row above, one below; 2 x 1 -> 2 x 2: the column at the left
        let (out, side) = letterbox(&[9; 3 * C], (1, 3));
        assert_eq!(side, 3);
        assert!(out[..3 * C].iter().all(|&v| v == 0));
        assert!(out[3 * C..6 * C].iter().all(|&v| v == 9));
        assert!(out[6 * C..].iter().all(|&v| v == 0));
        let (out, _) = letterbox(&[7; 2 * C], (2, 1));
        assert_eq!(
            out,
            [vec![7; C], vec![0; C], vec![7; C], vec![0; C]].concat()
        );
    }

    #[test]
    fn a_constant_image_stays_constant_both_ways() {
        let flat = vec![91u8; 17 * 23 * C];
        for (oh, ow) in [(8, 11), (17, 23), (40, 55), (5, 5)] {
            let out = resize_area(&flat, 17, 23, oh, ow);
            assert_eq!(out.len(), oh * ow * C);
            assert!(out.iter().all(|&v| v == 91), "{oh} x {ow}");
        }
    }

    #[test]
    fn halving_rounds_the_two_by_two_mean_half_up() {
        // One channel's 2 x 2 blocks summing to 2 (mean 0.5) and 6 (1.5): OpenCV's SIMD
        // kernel gives 1 and 2.
        let mut src = vec![0u8; 2 * 4 * C];
        for (i, v) in [1u8, 1, 3, 3, 0, 0, 0, 0].iter().enumerate() {
            let (y, x) = (i / 4, i % 4);
            src[(y * 4 + x) * C] = *v;
        }
        let out = resize_area(&src, 2, 4, 1, 2);
        assert_eq!([out[0], out[C]], [1, 2]);
    }

    #[test]
    fn the_frame_keeps_the_aspect_and_crops_the_centre() {
        // lerobot's LIBERO-shaped example: 100 x 150 -> 64 x 96 -> crop 60 x 91 -> 64 x 97.
        let src: Vec<u8> = (0..100 * 150 * C).map(|i| (i * 7 % 251) as u8).collect();
        let (frame, size) = gr00t_frame(&src, (100, 150), 64, 0.95);
        assert_eq!(size, (64, 97));
        assert_eq!(frame.len(), 64 * 97 * C);
        assert_eq!(shortest_edge_size(100, 150, 64), (64, 96));
    }
}
