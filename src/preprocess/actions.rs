//! A policy's normalised action chunk back to what the robot takes: clipped, unnormalised,
//! a gripper dimension snapped (the references' post-processors).

use super::Normalizer;

/// Which normalised values are clipped to [-1, 1]: states (GR00T N1.7's `clip_outliers`)
/// and the model's actions before they are unnormalised (GR00T N1.7, VLA-JEPA).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Clipping {
    pub state: bool,
    pub actions: bool,
}

/// VLA-JEPA's gripper post-processing of action dimension `dim`: with `pre_snap`, the
/// normalised value becomes 1 if `>= threshold` else 0 before unnormalising; with
/// `binarize`, the unnormalised value becomes -1 if `> threshold` else 1.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GripperSnap {
    pub dim: usize,
    pub threshold: f32,
    pub pre_snap: bool,
    pub binarize: bool,
}

/// The normalised chunk `x` (rows of `max_action_dim`) as actions of `action_dim`: clipped
/// to [-1, 1] when `clip` (the features `norm` clips), the gripper pre-snapped, unnormalised, the gripper binarised.
/// `dims`: (`max_action_dim`, `action_dim`).
pub fn unnormalize_actions(
    norm: &Normalizer,
    mut x: Vec<f32>,
    clip: bool,
    gripper: Option<GripperSnap>,
    dims: (usize, usize),
) -> Vec<f32> {
    let (ad, d) = dims;
    if clip {
        for row in x.chunks_mut(ad) {
            for (j, v) in row.iter_mut().enumerate() {
                if norm.clips(j) {
                    *v = v.clamp(-1.0, 1.0);
                }
            }
        }
    }
    let snap = gripper.filter(|s| s.dim < d);
    if let Some(s) = snap.filter(|s| s.pre_snap) {
        for row in x.chunks_mut(ad) {
            row[s.dim] = f32::from(u8::from(row[s.dim] >= s.threshold));
        }
    }
    let mut actions = norm.unnormalize_rows(&x, ad, d);
    if let Some(s) = snap.filter(|s| s.binarize) {
        for row in actions.chunks_mut(d) {
            row[s.dim] = if row[s.dim] > s.threshold { -1.0 } else { 1.0 };
        }
    }
    actions
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gripper_is_snapped_before_and_binarised_after_unnormalising() {
        let dims = (3, 2);
        let norm = Normalizer::MinMax {
            min: vec![0.0, 0.0],
            max: vec![2.0, 4.0],
        };
        let x = vec![0.5, 0.6, 9.0, -3.0, 0.4, 9.0];
        let snap = GripperSnap {
            dim: 1,
            threshold: 0.5,
            pre_snap: true,
            binarize: true,
        };
        // Clipped: [0.5, 0.6], [-1, 0.4]; snapped: 1, 0; unnormalised: 4, 2; binarised: -1, -1.
        let got = unnormalize_actions(&norm, x.clone(), true, Some(snap), dims);
        assert_eq!(got, vec![1.5, -1.0, 0.0, -1.0]);
        let plain = unnormalize_actions(&norm, x, false, None, dims);
        assert_eq!(plain, vec![1.5, 3.2, -2.0, 2.8]);
    }
}
