//! The reference's tables in the forms our graphs read, for `vla-convert gr00t_n1_6` and
//! vla.cpp's `gr00t_n1_6` files alike (both hold them as Isaac-GR00T trained them).

/// SigLIP2's Linear patch embedding `[d, p * p * 3]` (each patch flattened row, column,
/// channel) as our convolution kernel `[d, 3, p, p]`. `None` unless `linear` holds
/// `d * 3 * p * p` values.
pub fn patch_kernel(linear: &[f32], d: usize, p: usize) -> Option<Vec<f32>> {
    if linear.len() != d * 3 * p * p {
        return None;
    }
    let mut kernel = vec![0f32; linear.len()];
    for o in 0..d {
        for c in 0..3 {
            for y in 0..p {
                for x in 0..p {
                    kernel[((o * 3 + c) * p + y) * p + x] =
                        linear[o * p * p * 3 + (y * p + x) * 3 + c];
                }
            }
        }
    }
    Some(kernel)
}

/// `mlp1`'s input channels (its LayerNorm's gain and bias: one row; its first Linear: one row
/// per output), `c` tower channels unshuffled by `s`, reordered from `pixel_unshuffle`'s
/// `c * s^2 + dy * s + dx` to our connector's `(s dy + dx) * C + c`. `None` unless `v` holds
/// whole rows of `c * s * s`.
pub fn connector_channels(v: &[f32], c: usize, s: usize) -> Option<Vec<f32>> {
    let wide = c * s * s;
    if wide == 0 || !v.len().is_multiple_of(wide) {
        return None;
    }
    let mut out = vec![0f32; v.len()];
    for (row, theirs) in out.chunks_exact_mut(wide).zip(v.chunks_exact(wide)) {
        for (j, &x) in theirs.iter().enumerate() {
            let (ch, blk) = (j / (s * s), j % (s * s));
            row[blk * c + ch] = x;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patch_values_land_at_their_channel_row_and_column() {
        let (d, p) = (2, 2);
        let linear: Vec<f32> = (0..d * 3 * p * p).map(|i| i as f32).collect();
        let k = patch_kernel(&linear, d, p).unwrap();
        // output 1, channel 2, row 1, column 0: the Linear's input (1 * 2 + 0) * 3 + 2 = 8
        assert_eq!(k[((3 + 2) * p + 1) * p], linear[12 + 8]);
        assert!(patch_kernel(&linear[1..], d, p).is_none());
    }

    #[test]
    fn unshuffled_channels_go_block_first() {
        let (c, s) = (3, 2);
        let v: Vec<f32> = (0..2 * c * s * s).map(|i| i as f32).collect();
        let out = connector_channels(&v, c, s).unwrap();
        // theirs: channel 1, dy 1, dx 0 = 1 * 4 + 2 = 6; ours: block 2, channel 1 = 7
        assert_eq!(out[7], v[6]);
        assert_eq!(out[12 + 7], v[12 + 6]);
        assert!(connector_channels(&v[1..], c, s).is_none());
    }
}
