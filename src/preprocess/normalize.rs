//! State and action normalisation as lerobot does it, from statistics stored in the GGUF.

use crate::gguf::GgufFile;
use crate::policy::Observation;
use crate::{Error, Result};

/// The request's state, `real` values or zero-padded to `max`, checked.
pub fn state_values(obs: &Observation, real: usize, max: usize) -> Result<&[f32]> {
    let s = &obs.state;
    if s.len() != real && s.len() != max {
        return Err(Error::InvalidArgument(format!(
            "state has {} values, expected {real} (or {max} zero-padded)",
            s.len()
        )));
    }
    if let Some(bad) = s.iter().find(|v| !v.is_finite()) {
        return Err(Error::InvalidArgument(format!(
            "state value {bad} is not finite"
        )));
    }
    Ok(&s[..real])
}

/// lerobot's normalisation of states and actions, per dimension.
#[derive(Clone, Debug, PartialEq)]
pub enum Normalizer {
    /// `(x - mean) / (std + eps)` (lerobot's eps 1e-8 from a file;
    /// TurboVLA's 1e-6); inverse `x * std + mean`.
    MeanStd {
        mean: Vec<f32>,
        std: Vec<f32>,
        eps: f32,
    },
    /// `2 (x - q01) / (q99 - q01) - 1` (a zero range counts as 1e-8); inverse accordingly.
    /// Also lerobot's generic MIN_MAX, with min and max in place of the quantiles
    /// ([`Normalizer::lerobot_min_max`]).
    Quantiles { q01: Vec<f32>, q99: Vec<f32> },
    /// GR00T's `2 (x - min) / (max - min) - 1`, 0 where `max == min`; inverse
    /// `(y + 1) / 2 (max - min) + min`, `min` where `max == min`.
    MinMax { min: Vec<f32>, max: Vec<f32> },
    /// Isaac-GR00T's processor (GR00T N1.6): per feature, where `zscore`, `(x - mean) / std`
    /// (`x` itself where `std == 0`; inverse `x * std + mean`, never clipped), else
    /// [`Normalizer::MinMax`] with NumPy's `isclose(max, min)` for an empty range.
    Isaac {
        min: Vec<f32>,
        max: Vec<f32>,
        mean: Vec<f32>,
        std: Vec<f32>,
        zscore: Vec<bool>,
    },
    /// OpenVLA's BOUNDS_Q99 (OpenVLA-OFT, VLA-Adapter), in f64 as NumPy: where `mask`,
    /// `clip(2 (x - q01) / (q99 - q01 + 1e-8) - 1, -1, 1)`, else `x` clipped alike; inverse
    /// `0.5 (y + 1) (q99 - q01 + 1e-8) + q01` where `mask`, else `y`, never clipped.
    Bounds {
        q01: Vec<f32>,
        q99: Vec<f32>,
        mask: Vec<bool>,
    },
}

/// lerobot's normaliser epsilon.
const NORM_EPS: f32 = 1e-8;

/// The statistics' kinds, as tensor-name suffixes.
const STATS: [&str; 6] = ["mean", "std", "q01", "q99", "min", "max"];

/// The embodiments whose statistics the file carries: the `<e>` of `<what>_<stat>.<e>`.
pub fn embodiments(file: &GgufFile) -> Vec<String> {
    let mut names: Vec<String> = file
        .tensors()
        .iter()
        .filter_map(|t| {
            let (base, e) = t.name.split_once('.')?;
            let (what, stat) = base.rsplit_once('_')?;
            let known = ["state", "action"].contains(&what) && STATS.contains(&stat);
            known.then(|| e.to_owned())
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

impl Normalizer {
    /// `<what>_mean` / `<what>_std`, `<what>_q01` / `<what>_q99` or `<what>_min` /
    /// `<what>_max` from the file, whichever it has, each of `dim` values; with `embodiment` `e`, that embodiment's set
    /// (`<what>_mean.<e>`, ...), an error naming the sets there are when it is absent.
    pub fn from_gguf(
        file: &GgufFile,
        what: &str,
        dim: usize,
        embodiment: Option<&str>,
    ) -> Result<Self> {
        let suffix = embodiment.map_or(String::new(), |e| format!(".{e}"));
        if let Some(e) = embodiment {
            let known = embodiments(file);
            if !known.iter().any(|k| k == e) {
                return Err(Error::InvalidArgument(match known.is_empty() {
                    true => format!(
                        "embodiment {e:?}: this model carries a single set of normalisation statistics"
                    ),
                    false => format!("embodiment {e:?}: this model has {}", known.join(", ")),
                }));
            }
        }
        let has = |n: &str| file.tensor_info(&format!("{what}_{n}{suffix}")).is_ok();
        let read = |n: &str| -> Result<Vec<f32>> {
            let name = format!("{what}_{n}{suffix}");
            // The size first: dequantizing a large tensor just to refuse it would cost memory.
            let found = file.tensor_info(&name)?.n_elements();
            if found != dim as u64 {
                return Err(Error::InvalidArgument(format!(
                    "{name}: expected {dim} values, found {found}"
                )));
            }
            let v = file.dequantize(&name)?;
            if v.iter().any(|x| !x.is_finite()) {
                return Err(Error::InvalidArgument(format!(
                    "{name}: expected {dim} finite values"
                )));
            }
            Ok(v)
        };
        if has("mask") {
            Ok(Normalizer::Bounds {
                q01: read("q01")?,
                q99: read("q99")?,
                mask: read("mask")?.iter().map(|&m| m != 0.0).collect(),
            })
        } else if has("zscore") {
            Ok(Normalizer::Isaac {
                min: read("min")?,
                max: read("max")?,
                mean: read("mean")?,
                std: read("std")?,
                zscore: read("zscore")?.iter().map(|&z| z != 0.0).collect(),
            })
        } else if has("mean") {
            Ok(Normalizer::MeanStd {
                mean: read("mean")?,
                std: read("std")?,
                eps: NORM_EPS,
            })
        } else if has("q01") {
            Ok(Normalizer::Quantiles {
                q01: read("q01")?,
                q99: read("q99")?,
            })
        } else if has("min") {
            Ok(Normalizer::MinMax {
                min: read("min")?,
                max: read("max")?,
            })
        } else {
            Err(Error::InvalidArgument(format!(
                "no normalisation statistics: expected {what}_mean{suffix} and {what}_std{suffix}, {what}_q01{suffix} and {what}_q99{suffix}, or {what}_min{suffix} and {what}_max{suffix}"
            )))
        }
    }

    /// [`Normalizer::MinMax`] as lerobot's own MIN_MAX processor computes it (Evo-1): the
    /// quantile formula over min and max, so a zero range counts as 1e-8 instead of giving
    /// 0; other kinds unchanged.
    pub fn lerobot_min_max(self) -> Self {
        match self {
            Normalizer::MinMax { min, max } => Normalizer::Quantiles { q01: min, q99: max },
            other => other,
        }
    }

    pub fn normalize(&self, i: usize, x: f32) -> f32 {
        match self {
            Normalizer::MeanStd { mean, std, eps } => (x - mean[i]) / (std[i] + eps),
            Normalizer::Quantiles { q01, q99 } => {
                2.0 * (x - q01[i]) / quantile_range(q01[i], q99[i]) - 1.0
            }
            Normalizer::MinMax { min, max } => match max[i] - min[i] {
                0.0 => 0.0,
                d => 2.0 * (x - min[i]) / d - 1.0,
            },
            Normalizer::Isaac {
                min,
                max,
                mean,
                std,
                zscore,
            } => match (zscore[i], std[i]) {
                (true, 0.0) => x,
                (true, s) => (x - mean[i]) / s,
                (false, _) if isclose(max[i], min[i]) => 0.0,
                (false, _) => 2.0 * (x - min[i]) / (max[i] - min[i]) - 1.0,
            },
            Normalizer::Bounds { q01, q99, mask } => {
                let x = f64::from(x);
                let y = match mask[i] {
                    true => 2.0 * (x - f64::from(q01[i])) / bounds_range(q01[i], q99[i]) - 1.0,
                    false => x,
                };
                y.clamp(-1.0, 1.0) as f32
            }
        }
    }

    /// Whether feature `i`'s normalised value is clipped where the arch clips
    /// ([`crate::preprocess::actions::Clipping`]): all but Isaac-GR00T's z-scored features.
    pub fn clips(&self, i: usize) -> bool {
        match self {
            Normalizer::Isaac { zscore, .. } => !zscore.get(i).copied().unwrap_or(false),
            _ => true,
        }
    }

    /// The request's state (see [`state_values`]) normalised and zero-padded to `max`.
    pub fn normalize_state(&self, obs: &Observation, real: usize, max: usize) -> Result<Vec<f32>> {
        let mut out = vec![0f32; max];
        for (i, &x) in state_values(obs, real, max)?.iter().enumerate() {
            out[i] = self.normalize(i, x);
        }
        Ok(out)
    }

    /// The first `dim` columns of each `width`-wide row of `x`, unnormalised.
    pub fn unnormalize_rows(&self, x: &[f32], width: usize, dim: usize) -> Vec<f32> {
        x.chunks(width)
            .flat_map(|row| (0..dim).map(move |j| self.unnormalize(j, row[j])))
            .collect()
    }

    pub fn unnormalize(&self, i: usize, x: f32) -> f32 {
        match self {
            Normalizer::MeanStd { mean, std, .. } => x * std[i] + mean[i],
            Normalizer::Quantiles { q01, q99 } => {
                (x + 1.0) * quantile_range(q01[i], q99[i]) / 2.0 + q01[i]
            }
            Normalizer::MinMax { min, max } => match max[i] - min[i] {
                0.0 => min[i],
                d => (x + 1.0) * 0.5 * d + min[i],
            },
            Normalizer::Isaac {
                min,
                max,
                mean,
                std,
                zscore,
            } => match (zscore[i], std[i]) {
                (true, 0.0) => x,
                (true, s) => x * s + mean[i],
                (false, _) => (x + 1.0) / 2.0 * (max[i] - min[i]) + min[i],
            },
            Normalizer::Bounds { q01, q99, mask } => match mask[i] {
                true => {
                    let y = 0.5 * (f64::from(x) + 1.0) * bounds_range(q01[i], q99[i]);
                    (y + f64::from(q01[i])) as f32
                }
                false => x,
            },
        }
    }
}

/// OpenVLA's `q99 - q01 + 1e-8`, in f64.
fn bounds_range(q01: f32, q99: f32) -> f64 {
    f64::from(q99) - f64::from(q01) + 1e-8
}

/// NumPy's `isclose(a, b)` (rtol 1e-5, atol 1e-8), in f64 as NumPy computes float32 pairs.
fn isclose(a: f32, b: f32) -> bool {
    let (a, b) = (f64::from(a), f64::from(b));
    (a - b).abs() <= 1e-8 + 1e-5 * b.abs()
}

fn quantile_range(q01: f32, q99: f32) -> f32 {
    let d = q99 - q01;
    if d == 0.0 {
        NORM_EPS
    } else {
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Isaac-GR00T's processor per feature: z-scored (`x` as it is at `std` 0, never
    /// clipped) or min/max with NumPy's `isclose` for an empty range.
    #[test]
    fn isaac_z_scores_some_features_and_bounds_the_rest() {
        let n = Normalizer::Isaac {
            min: vec![0.0, 1.0, 0.0, 0.0],
            max: vec![2.0, 1.000_005, 0.0, 0.0],
            mean: vec![0.0, 0.0, 1.0, 1.0],
            std: vec![1.0, 1.0, 2.0, 0.0],
            zscore: vec![false, false, true, true],
        };
        let norm: Vec<f32> = [1.5, 1.0, 5.0, 7.0]
            .iter()
            .enumerate()
            .map(|(i, &x)| n.normalize(i, x))
            .collect();
        assert_eq!(norm, [0.5, 0.0, 2.0, 7.0]);
        assert_eq!(n.unnormalize(2, 2.0), 5.0);
        assert_eq!(n.unnormalize(3, 7.0), 7.0);
        assert_eq!(n.unnormalize(0, 0.5), 1.5);
        let clips: Vec<bool> = (0..5).map(|i| n.clips(i)).collect();
        assert_eq!(clips, [true, true, false, false, true]);
    }
}
