//! Flow-matching helpers: the sinusoidal time embedding and Euler integration from noise
//! (t = 1) to the action chunk (t = 0).

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

/// Integrates `dx/dt = v(x, t)` from t = 1 to 0 in `steps` equal Euler steps. As lerobot's
/// `sample_actions`: `t = 1 + step * dt` in f64, handed to the model as f32, and
/// `x += f32(dt) * v`.
pub fn euler_integrate<E>(
    mut x: Vec<f32>,
    steps: usize,
    mut velocity: impl FnMut(&[f32], f32) -> Result<Vec<f32>, E>,
) -> Result<Vec<f32>, E> {
    let dt = -1.0 / steps as f64;
    for step in 0..steps {
        let t = 1.0 + step as f64 * dt;
        let v = velocity(&x, t as f32)?;
        for (xi, vi) in x.iter_mut().zip(&v) {
            *xi += dt as f32 * vi;
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
        let out = euler_integrate::<()>(vec![1.0, 2.0], 4, |_, _| Ok(vec![2.0, -4.0])).unwrap();
        assert_eq!(out, vec![1.0 - 2.0, 2.0 + 4.0]);
    }
}
