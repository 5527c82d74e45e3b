//! Flow-matching helpers: the sinusoidal time embedding and Euler integration from noise to
//! the action chunk, over a step schedule.

use crate::config::{first_failing, Keys, Section};

/// The input and output names that connect a flow policy's three graphs (vision, prefill,
/// denoise: `models::flow::FlowArch`), and that the driver binds.
pub mod names {
    /// Camera `i`'s `[3, H, W]` pixels, the vision graph's input.
    pub fn image(i: usize) -> String {
        format!("image.{i}")
    }
    /// `image.{i}` -> `i`.
    pub fn image_index(name: &str) -> Option<usize> {
        name.strip_prefix("image.")?.parse().ok()
    }
    /// The vision graph's output, the prefill's input: every camera's image tokens.
    pub const IMG_TOKENS: &str = "img_tokens";
    /// The instruction's token ids (a prefill input).
    pub const TOKENS: &str = "tokens";
    /// Where a client's sequence takes the image tokens, `[1, L, n]` one-hot, and which
    /// rows keep their token's embedding, `[L, 1]` (prefill inputs of a file without a
    /// prompt template: [`crate::layers::place_rows`]).
    pub const IMAGE_PLACES: &str = "image_places";
    pub const TEXT_KEEP: &str = "text_keep";
    /// The normalised, padded state.
    pub const STATE: &str = "state";
    /// The denoise graph's current actions, `[chunk, max_action_dim]`.
    pub const X_T: &str = "x_t";
    /// The denoise graph's time input ([`crate::models::flow::FlowArch::time_input`]).
    pub const TIME_EMB: &str = "time_emb";
    /// The prefill's output `2 i`, which the denoise graph reads as layer (or block) `i`'s
    /// keys.
    pub fn key(i: usize) -> String {
        format!("kv.{i}.k")
    }
    /// The prefill's output `2 i + 1`: layer (or block) `i`'s values.
    pub fn value(i: usize) -> String {
        format!("kv.{i}.v")
    }
    /// [`key`]`(i)` -> `2 i`, [`value`]`(i)` -> `2 i + 1`: the prefill output a denoise input
    /// names.
    pub fn kv_index(name: &str) -> Option<usize> {
        let rest = name.strip_prefix("kv.")?;
        let (layer, which) = rest.split_once('.')?;
        let layer: usize = layer.parse().ok()?;
        match which {
            "k" => Some(2 * layer),
            "v" => Some(2 * layer + 1),
            _ => None,
        }
    }
}

/// The sinusoidal time embedding's period range. Keys: `min_period`, `max_period`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TimeEmbedding {
    pub min_period: f64,
    pub max_period: f64,
}

impl Section for TimeEmbedding {
    fn keys(&mut self, k: &mut dyn Keys) -> crate::Result<()> {
        k.decimal("min_period", &mut self.min_period)?;
        k.decimal("max_period", &mut self.max_period)
    }

    fn check(&self) -> Result<(), String> {
        first_failing(&[(
            self.min_period > 0.0 && self.min_period <= self.max_period,
            "periods must satisfy 0 < min_period <= max_period",
        )])
    }
}

impl TimeEmbedding {
    /// [`sinusoidal_time_embedding`] of `t`, `dim` wide.
    pub fn at(&self, t: f32, dim: usize) -> Vec<f32> {
        sinusoidal_time_embedding(f64::from(t), dim, self.min_period, self.max_period)
    }
}

/// `[sin(2 pi t / p_i)..., cos(2 pi t / p_i)...]` with periods `p_i` spaced geometrically
/// from `min_period` to `max_period` over `dim / 2` entries, computed in f64 as the reference.
pub fn sinusoidal_time_embedding(t: f64, dim: usize, min_period: f64, max_period: f64) -> Vec<f32> {
    let half = dim / 2;
    let mut out = vec![0f32; dim];
    for i in 0..half {
        let fraction = if half > 1 {
            i as f64 / (half - 1) as f64
        } else {
            0.0
        };
        let period = min_period * (max_period / min_period).powf(fraction);
        let x = 2.0 * std::f64::consts::PI / period * t;
        out[i] = x.sin() as f32;
        out[half + i] = x.cos() as f32;
    }
    out
}

/// The times at which the velocity is evaluated and the step sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Schedule {
    /// From t = 1 (noise) to t = 0 in equal steps, as lerobot's `sample_actions` (SmolVLA,
    /// pi0, pi0.5): `t = 1 + step * dt` in f64 with `dt = -1 / steps`, handed to the model
    /// as f32.
    OneToZero,
    /// From t = 0 (noise) to t = 1 in equal steps, the model seeing the discretised time
    /// `floor(step / steps * buckets)` (GR00T's `num_timestep_buckets`).
    ZeroToOneBucketed { buckets: usize },
}

impl Schedule {
    /// `(t as the model sees it, dt)` for each of `steps` steps.
    pub fn steps(self, steps: usize) -> Vec<(f32, f32)> {
        match self {
            Schedule::OneToZero => {
                let dt = -1.0 / steps as f64;
                (0..steps)
                    .map(|step| ((1.0 + step as f64 * dt) as f32, dt as f32))
                    .collect()
            }
            Schedule::ZeroToOneBucketed { buckets } => {
                let dt = 1.0 / steps as f64;
                (0..steps)
                    .map(|step| {
                        let t = (step as f64 / steps as f64 * buckets as f64).floor();
                        (t as f32, dt as f32)
                    })
                    .collect()
            }
        }
    }
}

/// Integrates `dx/dt = v(x, t)` over `schedule` in `steps` Euler steps: `x += dt * v`.
pub fn euler_integrate<E>(
    mut x: Vec<f32>,
    schedule: Schedule,
    steps: usize,
    mut velocity: impl FnMut(&[f32], f32) -> Result<Vec<f32>, E>,
) -> Result<Vec<f32>, E> {
    for (t, dt) in schedule.steps(steps) {
        let v = velocity(&x, t)?;
        for (xi, vi) in x.iter_mut().zip(&v) {
            *xi += dt * vi;
        }
    }
    Ok(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_embedding_endpoints() {
        let e = sinusoidal_time_embedding(0.5, 8, 4e-3, 4.0);
        // First entry: period min_period; last of the sin half: period max_period.
        let x0 = 2.0 * std::f64::consts::PI / 4e-3 * 0.5;
        let x3 = 2.0 * std::f64::consts::PI / 4.0 * 0.5;
        assert_eq!(e[0], x0.sin() as f32);
        assert_eq!(e[3], x3.sin() as f32);
        assert_eq!(e[7], x3.cos() as f32);
    }

    #[test]
    fn euler_reaches_the_target_of_a_constant_field() {
        // A constant field v moves x by exactly -v between t = 1 and t = 0, whatever the step count.
        let out = euler_integrate::<()>(vec![1.0, 2.0], Schedule::OneToZero, 4, |_, _| {
            Ok(vec![2.0, -4.0])
        })
        .unwrap();
        assert_eq!(out, vec![1.0 - 2.0, 2.0 + 4.0]);
        // From 0 to 1 it moves by +v.
        let up = Schedule::ZeroToOneBucketed { buckets: 1000 };
        let out = euler_integrate::<()>(vec![1.0], up, 4, |_, _| Ok(vec![2.0])).unwrap();
        assert_eq!(out, vec![3.0]);
    }

    #[test]
    fn schedules_give_the_references_times() {
        // lerobot: t = 1, 0.9, ..., 0.1 for 10 steps (f64 arithmetic, then f32).
        let s = Schedule::OneToZero.steps(10);
        assert_eq!(s[0], (1.0, -0.1));
        assert_eq!(s[9].0, (1.0 - 9.0 * 0.1f64) as f32);
        // GR00T: int(step / N * buckets): 0, 250, 500, 750 for 4 steps of 1000 buckets.
        let s = Schedule::ZeroToOneBucketed { buckets: 1000 }.steps(4);
        let ts: Vec<f32> = s.iter().map(|p| p.0).collect();
        assert_eq!(ts, vec![0.0, 250.0, 500.0, 750.0]);
        assert!(s.iter().all(|p| p.1 == 0.25));
    }
}
