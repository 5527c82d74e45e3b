//! GR00T's normalisation statistics from Isaac-GR00T's statistics of one embodiment
//! (`statistics.json`: per modality group `min`, `max`, `q01`, `q99`, `mean`, `std`, and
//! `relative_action` for relative groups), concatenated in the group order of that
//! embodiment's modality config (`processor_config.json`'s `modality_configs`): what
//! lerobot's pack step (`raw_stats`, `modality_config`, N1.7), Isaac-GR00T's checkpoints (N1.6)
//! and vla.cpp's files (`statistics_json`, `processor_config_json`) carry.

use serde_json::Value;

/// How action groups whose `action_configs` say RELATIVE are read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Relative {
    /// Refused (lerobot's N1.7 port: absolute actions only).
    Refuse,
    /// Read as absolute: the processor's `use_relative_action` is off, and Isaac-GR00T then
    /// ignores the representations.
    Absolute,
    /// Applied (`use_relative_action`): such a group's statistics are `relative_action`'s and
    /// its actions are offsets from the state group its `state_key` (or its own name) names
    /// ([`relative_refs`]; joint groups only).
    Apply,
}

/// One action group's representation: (relative, end-effector, state key).
type Rep<'a> = (bool, bool, Option<&'a str>);

/// Per action group of `m` (the action modality), its representation; all absolute without
/// `action_configs`.
fn reps(m: &Value, n: usize) -> Vec<Rep<'_>> {
    let configs = m.get("action_configs").and_then(Value::as_array);
    (0..n)
        .map(|k| {
            let c = configs.and_then(|c| c.get(k));
            let field = |f: &str| c.and_then(|c| c.get(f)).and_then(Value::as_str);
            let relative = !field("rep").is_some_and(|r| r.eq_ignore_ascii_case("absolute"));
            let eef = field("type").is_some_and(|t| t.eq_ignore_ascii_case("eef"));
            (c.is_some() && relative, eef, field("state_key"))
        })
        .collect()
}

fn names<'a>(m: &'a Value, key: &str) -> Vec<&'a str> {
    m.get(key)
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// One statistic `key` of group `g` in `raw[section]`, finite.
fn stat(raw: &Value, section: &str, g: &str, key: &str) -> Result<Vec<f32>, String> {
    let v = raw
        .get(section)
        .and_then(|s| s.get(g))
        .and_then(|s| s.get(key))
        .and_then(Value::as_array)
        .ok_or_else(|| format!("statistics {section}.{g} have no {key}"))?;
    let v: Vec<f32> = v
        .iter()
        .map(|x| x.as_f64().unwrap_or(f64::NAN) as f32)
        .collect();
    match !v.is_empty() && v.iter().all(|x| x.is_finite()) {
        true => Ok(v),
        false => Err(format!("statistics {section}.{g}.{key}: not finite values")),
    }
}

/// `what`'s groups with the statistics section each reads (`relative_action` for the
/// relative groups `relative` applies).
fn sections<'a>(
    modality: &'a Value,
    what: &'a str,
    relative: Relative,
) -> Result<Vec<(&'a str, &'a str)>, String> {
    let m = modality
        .get(what)
        .ok_or_else(|| format!("the modality config has no {what}"))?;
    let groups = names(m, "modality_keys");
    if groups.is_empty() {
        return Err(format!("the modality config names no {what} groups"));
    }
    if what == "state" {
        return Ok(groups.into_iter().map(|g| (g, "state")).collect());
    }
    let reps = reps(m, groups.len());
    if relative == Relative::Refuse && reps.iter().any(|r| r.0) {
        return Err("relative action groups: not supported".into());
    }
    Ok(groups
        .into_iter()
        .zip(reps)
        .map(
            |(g, (rel, _, _))| match rel && relative == Relative::Apply {
                true => (g, "relative_action"),
                false => (g, "action"),
            },
        )
        .collect())
}

/// `state_min`, `state_max`, `action_min`, `action_max`: `q01` / `q99` per group with
/// `percentiles`, else `min` / `max`; `raw` `{state: {group: {...}}, action: {...},
/// relative_action: {...}}`, `modality` `{state: {modality_keys}, action: {modality_keys,
/// action_configs}}`. `dims` (state, action), where known, must be the groups' total widths.
pub fn group_bounds(
    raw: &Value,
    modality: &Value,
    percentiles: bool,
    dims: Option<(usize, usize)>,
    relative: Relative,
) -> Result<Vec<(String, Vec<f32>)>, String> {
    let (lo, hi) = match percentiles {
        true => ("q01", "q99"),
        false => ("min", "max"),
    };
    let mut out = Vec::new();
    for (what, dim) in [("state", dims.map(|d| d.0)), ("action", dims.map(|d| d.1))] {
        let groups = sections(modality, what, relative)?;
        for (key, ours) in [(lo, "min"), (hi, "max")] {
            let mut vals = Vec::new();
            for &(g, section) in &groups {
                vals.extend(stat(raw, section, g, key)?);
            }
            if let Some(d) = dim.filter(|&d| d != vals.len()) {
                return Err(format!(
                    "statistics {what}: {} {key} values for a {d}-wide feature",
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
pub fn zscore_stats(
    raw: &Value,
    modality: &Value,
    relative: Relative,
) -> Result<Vec<(String, Vec<f32>)>, String> {
    let mut out = Vec::new();
    for what in ["state", "action"] {
        let groups = sections(modality, what, relative)?;
        let zscored = names(&modality[what], "mean_std_embedding_keys");
        if let Some(g) = zscored
            .iter()
            .find(|g| !groups.iter().any(|(n, _)| n == *g))
        {
            return Err(format!(
                "{what}: mean_std_embedding_keys names {g}, not a group"
            ));
        }
        let (mut mean, mut std, mut mask) = (Vec::new(), Vec::new(), Vec::new());
        for &(g, section) in &groups {
            let width = stat(raw, section, g, "min")?.len();
            let z = zscored.contains(&g);
            if z {
                let (m, s) = (
                    stat(raw, section, g, "mean")?,
                    stat(raw, section, g, "std")?,
                );
                if m.len() != width || s.len() != width {
                    return Err(format!(
                        "statistics {section}.{g}: mean / std not {width} wide"
                    ));
                }
                mean.extend(m);
                std.extend(s);
            } else {
                mean.extend(vec![0.0; width]);
                std.extend(vec![1.0; width]);
            }
            mask.extend(vec![f32::from(u8::from(z)); width]);
        }
        out.push((format!("{what}_mean"), mean));
        out.push((format!("{what}_std"), std));
        out.push((format!("{what}_zscore"), mask));
    }
    Ok(out)
}

/// With [`Relative::Apply`] and a relative group, `action_relative`: per action feature, 0
/// (absolute) or 1 + the index of the state feature its offset is added to (the same place in
/// the state group its `state_key`, or its own name, names; that group as wide as it).
/// Relative end-effector groups (poses composed, not added) are refused.
pub fn relative_refs(
    raw: &Value,
    modality: &Value,
    relative: Relative,
) -> Result<Option<(String, Vec<f32>)>, String> {
    let action = modality
        .get("action")
        .ok_or("the modality config has no action")?;
    let groups = names(action, "modality_keys");
    let reps = reps(action, groups.len());
    if relative != Relative::Apply || !reps.iter().any(|r| r.0) {
        return Ok(None);
    }
    let mut state_at = Vec::new();
    let mut at = 0;
    for (g, _) in sections(modality, "state", relative)? {
        let w = stat(raw, "state", g, "min")?.len();
        state_at.push((g, at, w));
        at += w;
    }
    let mut out = Vec::new();
    for (&g, (rel, eef, key)) in groups.iter().zip(reps) {
        let section = if rel { "relative_action" } else { "action" };
        let width = stat(raw, section, g, "min")?.len();
        if !rel {
            out.extend(vec![0.0; width]);
            continue;
        }
        if eef {
            return Err(format!(
                "action group {g}: relative end-effector poses: not supported"
            ));
        }
        let key = key.unwrap_or(g);
        let &(_, start, w) = state_at.iter().find(|(s, _, _)| *s == key).ok_or_else(|| {
            format!("action group {g}: its reference state group {key} is not a state group")
        })?;
        if w != width {
            return Err(format!(
                "action group {g} ({width} wide) and its reference state group {key} ({w} wide) differ"
            ));
        }
        out.extend((start..start + w).map(|i| (i + 1) as f32));
    }
    Ok(Some(("action_relative".into(), out)))
}
