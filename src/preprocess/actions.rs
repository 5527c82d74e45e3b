//! A policy's normalised action chunk back to what the robot takes: clipped, unnormalised,
//! a gripper dimension snapped (the references' post-processors).

use super::Normalizer;
use crate::gguf::GgufFile;
use crate::{Error, Result};

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

/// Isaac-GR00T's relative action groups (`use_relative_action`, joint groups): per action
/// feature, the state feature its unnormalised value is an offset from, or none (absolute).
/// Stored as `action_relative` (`.<embodiment>` where the file has several sets): 0, or 1 +
/// the state feature's index.
#[derive(Clone, Debug, PartialEq)]
pub struct RelativeActions(Vec<Option<usize>>);

impl RelativeActions {
    /// The file's `action_relative<suffix>` for `action_dim` actions over `state_dim` state
    /// features, or `None` where it has none.
    pub fn from_gguf(
        file: &GgufFile,
        suffix: &str,
        (action_dim, state_dim): (usize, usize),
    ) -> Result<Option<Self>> {
        let name = format!("action_relative{suffix}");
        let Ok(info) = file.tensor_info(&name) else {
            return Ok(None);
        };
        let bad = || {
            Error::InvalidArgument(format!(
                "{name}: expected {action_dim} values, each 0 or 1 + a state feature's index below {state_dim}"
            ))
        };
        if info.n_elements() != action_dim as u64 {
            return Err(bad());
        }
        let refs = file
            .dequantize(&name)?
            .into_iter()
            .map(|v| match v {
                0.0 => Ok(None),
                v if v.fract() == 0.0 && v >= 1.0 && (v as usize) <= state_dim => {
                    Ok(Some(v as usize - 1))
                }
                _ => Err(bad()),
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Some(RelativeActions(refs)))
    }

    /// `actions` (rows of `refs`' width, unnormalised) made absolute: each relative feature
    /// plus its state feature's value in `state` (the request's, as sent).
    pub fn apply(&self, actions: &mut [f32], state: &[f32]) {
        for row in actions.chunks_mut(self.0.len().max(1)) {
            for (a, r) in row.iter_mut().zip(&self.0) {
                if let Some(&s) = r.and_then(|i| state.get(i)).as_ref() {
                    *a += s;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::{GgmlType, GgufWriter};

    fn file_with(refs: &[f32]) -> GgufFile {
        let mut w = GgufWriter::new();
        let dims = [refs.len() as u64];
        w.add_f32("action_relative", GgmlType::F32, &dims, refs)
            .unwrap();
        GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap()
    }

    /// Relative features get their state feature's value added, per row; an index past the
    /// state or a fraction is refused at load; no tensor, no relative groups.
    #[test]
    fn relative_features_are_offsets_from_their_state_feature() {
        let r = RelativeActions::from_gguf(&file_with(&[0.0, 2.0, 1.0]), "", (3, 2))
            .unwrap()
            .unwrap();
        let mut actions = vec![1.0, 1.0, 1.0, 2.0, 2.0, 2.0];
        r.apply(&mut actions, &[10.0, 20.0]);
        assert_eq!(actions, [1.0, 21.0, 11.0, 2.0, 22.0, 12.0]);
        for bad in [[0.0, 3.0, 1.0], [0.0, 1.5, 1.0]] {
            assert!(RelativeActions::from_gguf(&file_with(&bad), "", (3, 2)).is_err());
        }
        assert!(RelativeActions::from_gguf(&file_with(&[0.0]), "", (3, 2)).is_err());
        let none = RelativeActions::from_gguf(&file_with(&[1.0]), ".other", (1, 1));
        assert_eq!(none.unwrap(), None);
    }

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
