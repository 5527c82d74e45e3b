//! TurboVLA's normalisation: the reference's LIBERO policy normalises the state with a
//! mean and std (`(x - mean) / (std + 1e-6)`), maps the actions back from [-1, 1] with
//! hard bounds (`0.5 (a + 1) (max - min) + min`) and turns the gripper's dimension into
//! +-1 by its sign. The checkpoint carries none of these (the reference's evaluation code
//! does), so the converter and, for vla.cpp's files, the loader take them as a JSON file or
//! the released LIBERO model's own numbers (`libero`). Stored as the tensors `state_mean`,
//! `state_std`, `action_min`, `action_max` and the key `turbovla.gripper_sign_dim`.

use super::ARCH;
use crate::gguf::{GgmlType, GgufFile, GgufWriter};
use crate::preprocess::Normalizer;
use crate::{Error, Result};
use std::path::Path;

/// The epsilon the reference adds to the state's std.
pub const STATE_EPS: f32 = 1e-6;
/// The GGUF key of the dimension whose sign becomes the gripper command (absent: none).
pub const GRIPPER_KEY: &str = "turbovla.gripper_sign_dim";
/// What `--statistics` takes for the released LIBERO model's numbers.
pub const LIBERO: &str = "libero";

/// The reference's LIBERO constants (`PROPRIO_MEAN`, `PROPRIO_STD`, `ACTION_MIN`,
/// `ACTION_MAX`), as written there.
const LIBERO_STATE_MEAN: [f64; 8] = [
    -0.04190646484494209,
    0.03539437800645828,
    0.8257066607475281,
    2.908315658569336,
    -0.5562158823013306,
    -0.16649103164672852,
    0.02831534668803215,
    -0.028561558574438095,
];
const LIBERO_STATE_STD: [f64; 8] = [
    0.10743443667888641,
    0.14424759149551392,
    0.25723373889923096,
    0.34413808584213257,
    1.234430193901062,
    0.35798805952072144,
    0.013308786787092686,
    0.013174591585993767,
];
const LIBERO_ACTION_MIN: [f64; 7] = [
    -0.9375,
    -0.9375,
    -0.9375,
    -0.23642857372760773,
    -0.3053571283817291,
    -0.3675000071525574,
    -1.0,
];
const LIBERO_ACTION_MAX: [f64; 7] = [
    0.9375,
    0.9375,
    0.9375,
    0.30000001192092896,
    0.29357144236564636,
    0.375,
    1.0,
];

/// The state's statistics, the actions' bounds, and the gripper's dimension.
#[derive(Clone, Debug, PartialEq)]
pub struct TurboStats {
    pub state_mean: Vec<f32>,
    pub state_std: Vec<f32>,
    pub action_min: Vec<f32>,
    pub action_max: Vec<f32>,
    pub gripper_sign_dim: Option<usize>,
}

impl TurboStats {
    /// The numbers of the reference's LIBERO policy (`turbovla/evaluation/policy.py`), as its
    /// float32 arrays hold them.
    pub fn libero() -> Self {
        let f32s = |v: &[f64]| v.iter().map(|&x| x as f32).collect();
        TurboStats {
            state_mean: f32s(&LIBERO_STATE_MEAN),
            state_std: f32s(&LIBERO_STATE_STD),
            action_min: f32s(&LIBERO_ACTION_MIN),
            action_max: f32s(&LIBERO_ACTION_MAX),
            gripper_sign_dim: Some(6),
        }
    }

    /// `libero`, or a JSON file of the fields above.
    pub fn load(source: &Path) -> Result<Self> {
        if source.as_os_str() == LIBERO {
            return Ok(Self::libero());
        }
        let text = std::fs::read_to_string(source)
            .map_err(|e| Error::InvalidArgument(format!("statistics {}: {e}", source.display())))?;
        let bad = |why: String| {
            Error::InvalidArgument(format!(
                "statistics {}: {why} (expected state_mean, state_std, action_min, action_max: arrays of numbers; gripper_sign_dim: an optional index)",
                source.display()
            ))
        };
        let json: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
        let numbers = |key: &str| -> Result<Vec<f32>> {
            json.get(key)
                .and_then(|v| v.as_array())
                .and_then(|a| a.iter().map(|x| x.as_f64().map(|x| x as f32)).collect())
                .ok_or_else(|| bad(format!("{key} missing or not an array of numbers")))
        };
        let gripper_sign_dim = match json.get("gripper_sign_dim") {
            None | Some(serde_json::Value::Null) => None,
            Some(v) => Some(
                v.as_u64()
                    .ok_or_else(|| bad("gripper_sign_dim: not an index".into()))?
                    as usize,
            ),
        };
        Ok(TurboStats {
            state_mean: numbers("state_mean")?,
            state_std: numbers("state_std")?,
            action_min: numbers("action_min")?,
            action_max: numbers("action_max")?,
            gripper_sign_dim,
        })
    }

    /// Whether the file carries statistics.
    pub fn in_gguf(file: &GgufFile) -> bool {
        file.tensor_info("state_mean").is_ok()
    }

    pub fn read(file: &GgufFile) -> Result<Self> {
        let read = |n: &str| file.dequantize(n);
        let gripper = match file.get(GRIPPER_KEY) {
            None => None,
            Some(v) => Some(v.as_u64().ok_or_else(|| {
                Error::InvalidArgument(format!("{GRIPPER_KEY}: expected an unsigned integer"))
            })? as usize),
        };
        Ok(TurboStats {
            state_mean: read("state_mean")?,
            state_std: read("state_std")?,
            action_min: read("action_min")?,
            action_max: read("action_max")?,
            gripper_sign_dim: gripper,
        })
    }

    /// Checks the sizes against the model's and every value is finite.
    pub fn check(&self, state_dim: usize, action_dim: usize) -> Result<()> {
        let sizes = [
            ("state_mean", &self.state_mean, state_dim),
            ("state_std", &self.state_std, state_dim),
            ("action_min", &self.action_min, action_dim),
            ("action_max", &self.action_max, action_dim),
        ];
        for (name, v, n) in sizes {
            if v.len() != n {
                return Err(Error::InvalidArgument(format!(
                    "{ARCH} statistics: {name} has {} values, the model takes {n}",
                    v.len()
                )));
            }
            if let Some(x) = v.iter().find(|x| !x.is_finite()) {
                return Err(Error::InvalidArgument(format!(
                    "{ARCH} statistics: {name} holds {x}: every value must be finite"
                )));
            }
        }
        if let Some(d) = self.gripper_sign_dim.filter(|&d| d >= action_dim) {
            return Err(Error::InvalidArgument(format!(
                "{ARCH} statistics: gripper_sign_dim {d} outside the action's {action_dim} dims"
            )));
        }
        Ok(())
    }

    pub fn write(&self, w: &mut GgufWriter) -> Result<()> {
        for (name, v) in [
            ("state_mean", &self.state_mean),
            ("state_std", &self.state_std),
            ("action_min", &self.action_min),
            ("action_max", &self.action_max),
        ] {
            w.add_f32(name, GgmlType::F32, &[v.len() as u64], v)?;
        }
        if let Some(d) = self.gripper_sign_dim {
            w.add_metadata(GRIPPER_KEY, d as u32)?;
        }
        Ok(())
    }

    /// The state's normaliser (the reference's epsilon).
    pub fn state(&self) -> Normalizer {
        Normalizer::MeanStd {
            mean: self.state_mean.clone(),
            std: self.state_std.clone(),
            eps: STATE_EPS,
        }
    }

    /// The normalised chunk `x` (`tanh`'s output, rows of `dim`) in the robot's units: NaN
    /// as 0 (the reference's `sanitize_pred_chunk`), the bounds mapped back, the gripper's
    /// dimension `+1` where its value is >= 0, else `-1` (the reference's rule, dead band 0).
    pub fn actions(&self, x: &[f32], dim: usize) -> Vec<f32> {
        let bounds = Normalizer::MinMax {
            min: self.action_min.clone(),
            max: self.action_max.clone(),
        };
        let x: Vec<f32> = x
            .iter()
            .map(|&v| if v.is_nan() { 0.0 } else { v })
            .collect();
        let mut out = bounds.unnormalize_rows(&x, dim, dim);
        if let Some(d) = self.gripper_sign_dim {
            for (row, a) in x.chunks(dim).zip(out.chunks_mut(dim)) {
                a[d] = if row[d] < 0.0 { -1.0 } else { 1.0 };
            }
        }
        out
    }
}
