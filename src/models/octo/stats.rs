//! Octo's dataset statistics (`octo.dataset_statistics`, the checkpoint's
//! `dataset_statistics.json` as JSON text): per dataset, the action's and proprio's mean,
//! std and mask. Actions are unnormalized `where(mask, a * std + mean, a)` over the
//! dataset's own dimensions (`OctoModel.sample_actions`, NORMAL); proprio is normalized
//! `where(mask, (x - mean) / (std + 1e-8), x)` (Octo's `NormalizeProprio`).

use super::{OctoConfig, ARCH};
use crate::gguf::{GgufFile, GgufWriter};
use crate::{Error, Result};
use serde_json::Value;

pub const KEY: &str = "octo.dataset_statistics";

/// One quantity's statistics.
#[derive(Clone, Debug, PartialEq)]
pub struct Moments {
    pub mean: Vec<f32>,
    pub std: Vec<f32>,
    pub mask: Vec<bool>,
}

/// One dataset's statistics.
#[derive(Clone, Debug, PartialEq)]
pub struct Stats {
    pub action: Moments,
    pub proprio: Option<Moments>,
}

/// Every dataset's statistics, by name (one unnamed set where the file holds a single
/// dataset's, as a finetuned checkpoint does).
#[derive(Clone, Debug, PartialEq)]
pub struct DatasetStats(pub Vec<(String, Stats)>);

fn bad(why: String) -> Error {
    Error::InvalidArgument(format!("{KEY}: {why}"))
}

fn numbers(v: &Value, what: &str) -> Result<Vec<f64>> {
    v.as_array()
        .and_then(|a| a.iter().map(Value::as_f64).collect::<Option<Vec<_>>>())
        .filter(|a| {
            a.iter().all(|x| x.is_finite()) && a.len() <= crate::config::limits::MAX_ROBOT_DIM
        })
        .ok_or_else(|| bad(format!("{what}: expected a list of finite numbers")))
}

fn moments(v: &Value, what: &str) -> Result<Moments> {
    let get = |k: &str| numbers(&v[k], &format!("{what}.{k}"));
    let (mean, std) = (get("mean")?, get("std")?);
    let mask = match &v["mask"] {
        Value::Null => vec![true; mean.len()],
        m => m
            .as_array()
            .and_then(|a| a.iter().map(Value::as_bool).collect::<Option<Vec<_>>>())
            .ok_or_else(|| bad(format!("{what}.mask: expected a list of booleans")))?,
    };
    if std.len() != mean.len() || mask.len() != mean.len() || mean.is_empty() {
        return Err(bad(format!(
            "{what}: mean, std and mask of {}, {} and {} values",
            mean.len(),
            std.len(),
            mask.len()
        )));
    }
    let f = |v: Vec<f64>| v.into_iter().map(|x| x as f32).collect();
    Ok(Moments {
        mean: f(mean),
        std: f(std),
        mask,
    })
}

fn dataset(v: &Value, name: &str) -> Result<Stats> {
    Ok(Stats {
        action: moments(&v["action"], &format!("{name}.action"))?,
        proprio: match &v["proprio"] {
            Value::Null => None,
            p => Some(moments(p, &format!("{name}.proprio"))?),
        },
    })
}

impl DatasetStats {
    pub fn parse(text: &str) -> Result<Self> {
        let v: Value = serde_json::from_str(text).map_err(|e| bad(format!("not JSON ({e})")))?;
        let obj = v
            .as_object()
            .ok_or_else(|| bad("expected an object".into()))?;
        if obj.contains_key("action") {
            return Ok(DatasetStats(vec![(String::new(), dataset(&v, "")?)]));
        }
        let sets = obj
            .iter()
            .filter(|(_, d)| d.get("action").is_some())
            .map(|(k, d)| Ok((k.clone(), dataset(d, k)?)))
            .collect::<Result<Vec<_>>>()?;
        if sets.is_empty() {
            return Err(bad("no dataset with action statistics".into()));
        }
        Ok(DatasetStats(sets))
    }

    pub fn read(file: &GgufFile) -> Result<Self> {
        Self::parse(file.get_str(KEY)?)
    }

    /// The dataset `name`, or the only one; an error naming them otherwise.
    pub fn select(self, name: Option<&str>) -> Result<(String, Stats)> {
        let names = || {
            self.0
                .iter()
                .map(|(n, _)| n.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let found = match name {
            Some(n) => self.0.iter().position(|(k, _)| k == n).ok_or_else(|| {
                Error::InvalidArgument(format!("embodiment {n:?}: this {ARCH} model has {}", names()))
            })?,
            None if self.0.len() == 1 => 0,
            None => {
                return Err(Error::InvalidArgument(format!(
                    "this {ARCH} model has statistics for several datasets: choose one with --embodiment ({})",
                    names()
                )))
            }
        };
        Ok(self.0.into_iter().nth(found).expect("found"))
    }
}

impl Stats {
    /// The flattened action's 0/1 mask of the dataset's dimensions where it has fewer than
    /// the model (the sampler keeps the others at noise), else None.
    pub fn keep_mask(&self, cfg: &OctoConfig) -> Result<Option<Vec<f32>>> {
        let dim = self.action.mean.len();
        if dim > cfg.action_dim {
            return Err(bad(format!(
                "{dim} action dimensions, more than the model's {}",
                cfg.action_dim
            )));
        }
        Ok((dim < cfg.action_dim).then(|| {
            (0..cfg.horizon * cfg.action_dim)
                .map(|i| f32::from(u8::from(i % cfg.action_dim < dim)))
                .collect()
        }))
    }

    /// Rows of `width` values to the dataset's dimensions, unnormalized.
    pub fn unnormalize_rows(&self, x: &[f32], width: usize) -> Vec<f32> {
        let a = &self.action;
        x.chunks(width)
            .flat_map(|row| {
                (0..a.mean.len()).map(move |i| match a.mask[i] {
                    true => row[i] * a.std[i] + a.mean[i],
                    false => row[i],
                })
            })
            .collect()
    }

    /// One step's proprio `x`, normalized.
    pub fn normalize_proprio(&self, x: &[f32]) -> Result<Vec<f32>> {
        let dim = x.len();
        let p = self
            .proprio
            .as_ref()
            .filter(|p| p.mean.len() == dim)
            .ok_or_else(|| {
                bad(format!(
                    "the dataset's proprio statistics do not have {dim} values"
                ))
            })?;
        Ok((0..dim)
            .map(|i| match p.mask[i] {
                true => (x[i] - p.mean[i]) / (p.std[i] + 1e-8),
                false => x[i],
            })
            .collect())
    }
}

/// Statistics for a random model: one dataset of the model's action (and proprio) size.
pub fn write_random(w: &mut GgufWriter, cfg: &OctoConfig) -> Result<()> {
    let m = |d: usize| {
        serde_json::json!({
            "mean": (0..d).map(|i| 0.01 * i as f64).collect::<Vec<_>>(),
            "std": vec![0.5; d],
            "mask": (0..d).map(|i| i + 1 < d || d == 1).collect::<Vec<_>>(),
        })
    };
    let mut set = serde_json::json!({ "action": m(cfg.action_dim) });
    if cfg.proprio_dim > 0 {
        set["proprio"] = m(cfg.proprio_dim);
    }
    w.add_metadata(KEY, serde_json::json!({ "random": set }).to_string())
}
