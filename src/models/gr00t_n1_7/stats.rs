//! GR00T N1.7's normalisation bounds from Isaac-GR00T's statistics of one embodiment
//! (`statistics.json`: per modality group `min`, `max`, `q01`, `q99`, ...), concatenated in
//! the group order of that embodiment's modality config (`processor_config.json`'s
//! `modality_configs`): what lerobot's pack step (`raw_stats`, `modality_config`) and
//! vla.cpp's files (`statistics_json`, `processor_config_json`) both carry.

use serde_json::Value;

/// `state_min`, `state_max`, `action_min`, `action_max`: `q01` / `q99` per group with
/// `percentiles`, else `min` / `max`; `raw` `{state: {group: {...}}, action: {...}}`,
/// `modality` `{state: {modality_keys}, action: {modality_keys, action_configs}}`. `dims`
/// (state, action), where known, must be the groups' total widths. Relative action groups
/// are refused (the runtime returns absolute actions only).
pub fn group_bounds(
    raw: &Value,
    modality: &Value,
    percentiles: bool,
    dims: Option<(usize, usize)>,
) -> Result<Vec<(String, Vec<f32>)>, String> {
    let (lo, hi) = match percentiles {
        true => ("q01", "q99"),
        false => ("min", "max"),
    };
    let mut out = Vec::new();
    for (what, dim) in [("state", dims.map(|d| d.0)), ("action", dims.map(|d| d.1))] {
        let m = modality
            .get(what)
            .ok_or_else(|| format!("the modality config has no {what}"))?;
        let relative = m
            .get("action_configs")
            .and_then(Value::as_array)
            .is_some_and(|c| {
                c.iter().any(|a| {
                    let rep = a.get("rep").and_then(Value::as_str);
                    !rep.is_some_and(|r| r.eq_ignore_ascii_case("absolute"))
                })
            });
        if relative {
            return Err("relative action groups: not supported".into());
        }
        let groups: Vec<&str> = m
            .get("modality_keys")
            .and_then(Value::as_array)
            .map(|k| k.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if groups.is_empty() {
            return Err(format!("the modality config names no {what} groups"));
        }
        for (key, ours) in [(lo, "min"), (hi, "max")] {
            let mut vals = Vec::new();
            for g in &groups {
                let v = raw
                    .get(what)
                    .and_then(|s| s.get(g))
                    .and_then(|s| s.get(key))
                    .and_then(Value::as_array)
                    .ok_or_else(|| format!("statistics {what}.{g} have no {key}"))?;
                vals.extend(v.iter().map(|x| x.as_f64().unwrap_or(f64::NAN) as f32));
            }
            let bad = dim.is_some_and(|d| d != vals.len());
            if bad || vals.is_empty() || vals.iter().any(|x| !x.is_finite()) {
                let want = dim
                    .map(|d| format!(" for a {d}-wide feature"))
                    .unwrap_or_default();
                return Err(format!(
                    "statistics {what}: {} finite {key} values{want}",
                    vals.len()
                ));
            }
            out.push((format!("{what}_{ours}"), vals));
        }
    }
    Ok(out)
}

/// Isaac-GR00T's processor's z-scored groups (GR00T N1.6): per feature, in
/// [`group_bounds`]' order, `<what>_mean`, `<what>_std` and `<what>_zscore` (1 where the
/// group is in the modality's `mean_std_embedding_keys`: normalised `(x - mean) / std` and
/// never clipped; 0 where the bounds apply, the mean and std then unused). Sin/cos-encoded
/// state groups (`sin_cos_embedding_keys`, which the processor applies with
/// `apply_sincos_state_encoding`) are refused by the caller's flag check.
pub fn zscore_stats(raw: &Value, modality: &Value) -> Result<Vec<(String, Vec<f32>)>, String> {
    let mut out = Vec::new();
    for what in ["state", "action"] {
        let m = modality
            .get(what)
            .ok_or_else(|| format!("the modality config has no {what}"))?;
        let names = |k: &str| -> Vec<&str> {
            m.get(k)
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default()
        };
        let (groups, zscored) = (names("modality_keys"), names("mean_std_embedding_keys"));
        if let Some(g) = zscored.iter().find(|g| !groups.contains(g)) {
            return Err(format!(
                "{what}: mean_std_embedding_keys names {g}, not a group"
            ));
        }
        let (mut mean, mut std, mut mask) = (Vec::new(), Vec::new(), Vec::new());
        for g in &groups {
            let stat = |key: &str| -> Result<Vec<f32>, String> {
                let v = raw
                    .get(what)
                    .and_then(|s| s.get(g))
                    .and_then(|s| s.get(key))
                    .and_then(Value::as_array)
                    .ok_or_else(|| format!("statistics {what}.{g} have no {key}"))?;
                let v: Vec<f32> = v
                    .iter()
                    .map(|x| x.as_f64().unwrap_or(f64::NAN) as f32)
                    .collect();
                match v.iter().all(|x| x.is_finite()) {
                    true => Ok(v),
                    false => Err(format!("statistics {what}.{g}.{key}: not all finite")),
                }
            };
            let width = stat("min")?.len();
            if zscored.contains(g) {
                let (m, s) = (stat("mean")?, stat("std")?);
                if m.len() != width || s.len() != width {
                    return Err(format!(
                        "statistics {what}.{g}: mean / std not {width} wide"
                    ));
                }
                mean.extend(m);
                std.extend(s);
            } else {
                mean.extend(vec![0.0; width]);
                std.extend(vec![1.0; width]);
            }
            mask.extend(vec![f32::from(u8::from(zscored.contains(g))); width]);
        }
        out.push((format!("{what}_mean"), mean));
        out.push((format!("{what}_std"), std));
        out.push((format!("{what}_zscore"), mask));
    }
    Ok(out)
}
