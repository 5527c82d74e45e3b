//! What Octo computes on the host, exactly as the reference does: the token sequence's
//! layout and its block-causal attention mask (`BlockTransformer.generate_attention_mask`,
//! both the December rule and `use_correct_attention`), T5's relative-position buckets, the
//! DDPM schedule and its time features, the proprio bins.

use super::OctoConfig;

/// How a token group attends: Octo's `AttentionRule`s as `OctoTransformer` sets them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// `task_*`: attends to task groups.
    Task,
    /// `obs_*` (observations and, with `repeat_task_tokens`, the task repeated at each
    /// step): attends to task and observation groups, causally.
    Obs,
    /// `readout_*` (the index tells readouts apart): attends to task and observation groups
    /// and its own readout, causally.
    Readout(usize),
}

/// A group of tokens: its role, its size and whether its tokens may be attended to (a
/// padded step's observations, an absent instruction: Octo's pad masks).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Group {
    pub role: Role,
    pub len: usize,
}

/// Whether a token of `from` (at step `ts`) attends to a token of `to` (at step `tt`;
/// prefix tokens are at step -1), by Octo's rules: everything is causal in steps.
fn attends(from: Role, ts: i64, to: Role, tt: i64) -> bool {
    let rule = match (from, to) {
        (_, Role::Task) => true,
        (Role::Task, _) => false,
        (_, Role::Obs) => true,
        (Role::Obs, Role::Readout(_)) => false,
        (Role::Readout(a), Role::Readout(b)) => a == b,
    };
    rule && tt <= ts
}

/// Index of the group token `i` belongs to, as `BlockTransformer` finds it: `searchsorted`
/// over the groups' cumulative sizes, `side="right"` with `use_correct_attention`, else
/// `"left"`, which gives each group's first token to the group before it (the rule the
/// December 2023 models were trained with).
fn group_of(i: usize, sizes: &[usize], correct: bool) -> usize {
    let mut end = 0;
    for (k, &n) in sizes.iter().enumerate() {
        end += n;
        if (correct && end > i) || (!correct && end >= i) {
            return k;
        }
    }
    sizes.len().saturating_sub(1)
}

/// The sequence `[prefix groups, then for each of `steps` steps the step groups]` and its
/// `[N, N]` mask (1 = may attend), the rules' mask AND each key's pad flag (`valid` per
/// prefix group, then per step and step group).
pub fn attention_mask(
    prefix: &[Group],
    step: &[Group],
    steps: usize,
    valid: &dyn Fn(Option<usize>, usize) -> bool,
    correct: bool,
) -> Vec<f32> {
    let psizes: Vec<usize> = prefix.iter().map(|g| g.len).collect();
    let ssizes: Vec<usize> = step.iter().map(|g| g.len).collect();
    let (np, ns) = (psizes.iter().sum::<usize>(), ssizes.iter().sum::<usize>());
    let n = np + ns * steps;
    // per token: (role by the rule's group, step, pad flag by its true group)
    let meta: Vec<(Role, i64, bool)> = (0..n)
        .map(|i| {
            if i < np {
                let k = group_of(i, &psizes, correct);
                let own = group_of(i, &psizes, true);
                (prefix[k].role, -1, valid(None, own))
            } else {
                let (t, j) = ((i - np) / ns, (i - np) % ns);
                let k = group_of(j, &ssizes, correct);
                let own = group_of(j, &ssizes, true);
                (step[k].role, t as i64, valid(Some(t), own))
            }
        })
        .collect();
    let mut m = vec![0.0; n * n];
    for (i, &(ri, ti, _)) in meta.iter().enumerate() {
        for (j, &(rj, tj, ok)) in meta.iter().enumerate() {
            if ok && attends(ri, ti, rj, tj) {
                m[i * n + j] = 1.0;
            }
        }
    }
    m
}

/// T5's bidirectional relative-position bucket of `rel = key - query` (transformers'
/// `_relative_position_bucket`, its logarithm in f32 as the Flax model computes it).
pub fn t5_bucket(rel: i64, buckets: usize, max_distance: usize) -> usize {
    let half = buckets / 2;
    let mut b = if rel > 0 { half } else { 0 };
    let n = rel.unsigned_abs() as usize;
    let exact = half / 2;
    if n < exact {
        return b + n;
    }
    let ratio = (n as f32 / exact as f32).ln() / (max_distance as f32 / exact as f32).ln();
    let large = exact + (ratio * (half - exact) as f32) as usize;
    b += large.min(half - 1);
    b
}

/// The `[S * S]` bucket of each (query, key) pair of an `S`-token input, row by row.
pub fn t5_buckets(s: usize, buckets: usize, max_distance: usize) -> Vec<f32> {
    (0..s * s)
        .map(|i| {
            let (q, k) = ((i / s) as i64, (i % s) as i64);
            t5_bucket(k - q, buckets, max_distance) as f32
        })
        .collect()
}

/// One denoising step's constants: `x <- a1 * (x - a2 * eps) + noise * z`, then the clip;
/// `keep` scales the noise that stands in for the dimensions the embodiment masks.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Step {
    pub t: usize,
    pub a1: f32,
    pub a2: f32,
    pub noise: f32,
    pub masked: f32,
}

/// The reverse process's steps, `t = T-1` down to 0, from the cosine schedule (`s`, betas
/// clipped to 0.999) in f32 as `cosine_beta_schedule` computes it.
pub fn ddpm_steps(steps: usize, s: f32) -> Vec<Step> {
    let pi = std::f32::consts::PI;
    let ac: Vec<f32> = (0..=steps)
        .map(|i| {
            let t = i as f32 / steps as f32;
            let c = ((t + s) / (1.0 + s) * pi * 0.5).cos();
            c * c
        })
        .collect();
    let ac: Vec<f32> = ac.iter().map(|a| a / ac[0]).collect();
    let betas: Vec<f32> = (0..steps)
        .map(|i| (1.0 - ac[i + 1] / ac[i]).clamp(0.0, 0.999))
        .collect();
    let alphas: Vec<f32> = betas.iter().map(|b| 1.0 - b).collect();
    let mut hats = Vec::with_capacity(steps);
    let mut p = 1.0f32;
    for a in &alphas {
        p *= a;
        hats.push(p);
    }
    (0..steps)
        .rev()
        .map(|t| Step {
            t,
            a1: 1.0 / alphas[t].sqrt(),
            a2: (1.0 - alphas[t]) / (1.0 - hats[t]).sqrt(),
            noise: if t > 0 { betas[t].sqrt() } else { 0.0 },
            masked: (1.0 - hats[t]).sqrt(),
        })
        .collect()
}

/// SmallStem's weight standardisation (`StdConv`): each output's kernel `(w - mean) / (std
/// + 1e-5)` (population std), in f64; `w` is `[O, per]` row-major.
pub fn standardize(w: &[f32], per: usize) -> Vec<f32> {
    w.chunks(per.max(1))
        .flat_map(|k| {
            let n = k.len() as f64;
            let mean = k.iter().map(|&x| f64::from(x)).sum::<f64>() / n;
            let var = k
                .iter()
                .map(|&x| (f64::from(x) - mean).powi(2))
                .sum::<f64>()
                / n;
            let d = var.sqrt() + 1e-5;
            k.iter().map(move |&x| ((f64::from(x) - mean) / d) as f32)
        })
        .collect()
}

/// Whether `thresholds` are evenly spaced (uniform bins; normal bins are the standard
/// normal's quantiles).
pub fn uniform_bins(thresholds: &[f32]) -> bool {
    let n = thresholds.len();
    if n < 3 {
        return true;
    }
    let step = (thresholds[n - 1] - thresholds[0]) / (n - 1) as f32;
    thresholds
        .windows(2)
        .all(|w| ((w[1] - w[0]) - step).abs() <= 1e-3 * step.abs())
}

/// `BinTokenizer`'s bin of `x` over `thresholds` (`n + 1` edges): `i` with `thr[i] <= x <
/// thr[i + 1]`, after clipping into `(low + 1e-6, high - 1e-6)` when the bins are uniform;
/// 0 where none holds (the reference's argmax over all-false).
pub fn bin(x: f32, thresholds: &[f32], uniform: bool) -> usize {
    const EPS: f32 = 1e-6;
    let n = thresholds.len().saturating_sub(1);
    let x = match (uniform, thresholds.first(), thresholds.last()) {
        (true, Some(&lo), Some(&hi)) => x.clamp(lo + EPS, hi - EPS),
        _ => x,
    };
    (0..n)
        .find(|&i| x < thresholds[i + 1] && x >= thresholds[i])
        .unwrap_or(0)
}

/// The Fourier features of each step's time, in the reverse process's order: `[cos(f),
/// sin(f)]` with `f = (2 pi t) w` in f32 as the reference computes it (`2 * jnp.pi * t @
/// w.T`, `w` the head's `time_fourier` kernel, `[time_dim / 2]`).
pub fn time_features(w: &[f32], steps: &[Step]) -> Vec<f32> {
    let two_pi = 2.0 * std::f64::consts::PI;
    steps
        .iter()
        .flat_map(|s| {
            let a = (two_pi as f32) * s.t as f32;
            let f: Vec<f64> = w.iter().map(|&w| f64::from(a * w)).collect();
            let cos = f.iter().map(|v| v.cos() as f32);
            let sin = f.iter().map(|v| v.sin() as f32);
            cos.chain(sin).collect::<Vec<_>>()
        })
        .collect()
}

/// The groups of the sequence the transformer reads: the language prefix, then each step's
/// (cameras, proprio, the task again, the readouts).
pub fn token_groups(cfg: &OctoConfig) -> (Vec<Group>, Vec<Group>) {
    let prefix = vec![Group {
        role: Role::Task,
        len: cfg.lang_tokens,
    }];
    let mut step: Vec<Group> = cfg
        .cameras()
        .map(|(_, s)| Group {
            role: Role::Obs,
            len: s.grid() * s.grid(),
        })
        .collect();
    if cfg.proprio_dim > 0 {
        step.push(Group {
            role: Role::Obs,
            len: cfg.proprio_dim,
        });
    }
    if cfg.repeat_task_tokens {
        step.push(Group {
            role: Role::Obs,
            len: cfg.lang_tokens,
        });
    }
    step.push(Group {
        role: Role::Readout(0),
        len: cfg.readouts,
    });
    (prefix, step)
}

/// The transformer's mask when the first `padded` steps of the window are padding (their
/// cameras and proprio never attended to; the task repeated there still is, as in Octo).
pub fn sequence_mask(cfg: &OctoConfig, padded: usize) -> Vec<f32> {
    let (prefix, step) = token_groups(cfg);
    let ncams = cfg.cameras().count() + usize::from(cfg.proprio_dim > 0);
    let valid = |t: Option<usize>, group: usize| match t {
        Some(t) => t >= padded || group >= ncams,
        None => true,
    };
    attention_mask(&prefix, &step, cfg.window, &valid, cfg.correct_attention)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_match_t5s_table() {
        // transformers' T5Attention._relative_position_bucket(r, bidirectional=True,
        // num_buckets=32, max_distance=128) for r = -19..=21 (printed by transformers 4.51.3)
        let want = [
            10, 10, 10, 10, 9, 9, 9, 9, 8, 8, 8, 8, 7, 6, 5, 4, 3, 2, 1, 0, 17, 18, 19, 20, 21, 22,
            23, 24, 24, 24, 24, 25, 25, 25, 25, 26, 26, 26, 26, 26, 26,
        ];
        let got: Vec<usize> = (-19..=21).map(|r| t5_bucket(r, 32, 128)).collect();
        assert_eq!(got, want);
    }
}
