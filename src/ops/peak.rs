//! The CPU's own peak rate per instruction path, measured by register-only loops: what the
//! kernels' GFLOP/s and GOPS are held against on the machine they run on (`vla-bench
//! --peak`, the ops bench). Each loop keeps 12 independent accumulator chains of one
//! instruction in registers (no loads), on every thread of the pool at once; the rate
//! counts 2 operations per multiply-add, as the profiles do.

use std::time::Instant;

/// One instruction path's peak on this CPU.
#[derive(Clone, Debug)]
pub struct Peak {
    /// What runs, e.g. `f32 FMA (AVX-512)`.
    pub path: &'static str,
    /// `GFLOP/s` or `GOPS`.
    pub unit: &'static str,
    /// Per core (one thread), and on all of the pool's threads at once.
    pub one_thread: f64,
    pub all_threads: f64,
}

/// Iterations of a path's loop per timing (~10 ms).
const ITERS: u64 = 4_000_000;

/// The peaks of every path this CPU runs (none off x86_64; the best of two timings each).
pub fn measure() -> Vec<Peak> {
    simd::paths()
        .into_iter()
        .map(|(path, unit, macs, run)| {
            let rate = |threads: usize| {
                let t = Instant::now();
                let calls = if threads == 1 {
                    run(ITERS);
                    1
                } else {
                    rayon::broadcast(|_| run(ITERS)).len()
                };
                2.0 * (macs * ITERS * calls as u64) as f64 / t.elapsed().as_secs_f64() / 1e9
            };
            run(ITERS / 8); // clocks up
            let one_thread = rate(1).max(rate(1));
            let all = rayon::current_num_threads();
            let all_threads = rate(all).max(rate(all));
            Peak {
                path,
                unit,
                one_thread,
                all_threads,
            }
        })
        .collect()
}

/// A path: its name, unit, multiply-adds per iteration and the loop.
type Path = (&'static str, &'static str, u64, fn(u64));

#[cfg(target_arch = "x86_64")]
mod simd {
    use super::Path;
    use std::arch::x86_64::*;
    use std::hint::black_box;

    pub(super) fn paths() -> Vec<Path> {
        let has = |f: &[bool]| f.iter().all(|&b| b);
        let mut out: Vec<Path> = Vec::new();
        if has(&[
            is_x86_feature_detected!("avx2"),
            is_x86_feature_detected!("fma"),
        ]) {
            out.push(("f32 FMA (AVX2)", "GFLOP/s", 12 * 8, |n| unsafe {
                fma256(n)
            }));
        }
        if is_x86_feature_detected!("avx512f") {
            out.push(("f32 FMA (AVX-512)", "GFLOP/s", 12 * 16, |n| unsafe {
                fma512(n)
            }));
        }
        if has(&[
            is_x86_feature_detected!("avx512f"),
            is_x86_feature_detected!("avx512bf16"),
        ]) {
            out.push((
                "bf16 dot, f32 sums (vdpbf16ps)",
                "GFLOP/s",
                12 * 32,
                |n| unsafe { dpbf16(n) },
            ));
        }
        if has(&[
            is_x86_feature_detected!("avx512f"),
            is_x86_feature_detected!("avx512vnni"),
        ]) {
            out.push((
                "int8 dot, i32 sums (vpdpbusd)",
                "GOPS",
                12 * 64,
                |n| unsafe { dpbusd(n) },
            ));
        }
        out
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn fma256(n: u64) {
        let (b, c) = (
            black_box(_mm256_set1_ps(0.5)),
            black_box(_mm256_set1_ps(1e-3)),
        );
        let mut a = [_mm256_setzero_ps(); 12];
        for _ in 0..n {
            for v in a.iter_mut() {
                *v = _mm256_fmadd_ps(*v, b, c);
            }
        }
        black_box(a);
    }

    #[target_feature(enable = "avx512f")]
    unsafe fn fma512(n: u64) {
        let (b, c) = (
            black_box(_mm512_set1_ps(0.5)),
            black_box(_mm512_set1_ps(1e-3)),
        );
        let mut a = [_mm512_setzero_ps(); 12];
        for _ in 0..n {
            for v in a.iter_mut() {
                *v = _mm512_fmadd_ps(*v, b, c);
            }
        }
        black_box(a);
    }

    #[target_feature(enable = "avx512f,avx512bf16")]
    unsafe fn dpbf16(n: u64) {
        // bf16 1.0 and 2^-31 in every lane
        let b: __m512bh = std::mem::transmute(black_box(_mm512_set1_epi16(0x3f80)));
        let c: __m512bh = std::mem::transmute(black_box(_mm512_set1_epi16(0x3000)));
        let mut a = [_mm512_setzero_ps(); 12];
        for _ in 0..n {
            for v in a.iter_mut() {
                *v = _mm512_dpbf16_ps(*v, b, c);
            }
        }
        black_box(a);
    }

    #[target_feature(enable = "avx512f,avx512vnni")]
    unsafe fn dpbusd(n: u64) {
        let (b, c) = (
            black_box(_mm512_set1_epi8(1)),
            black_box(_mm512_set1_epi8(2)),
        );
        let mut a = [_mm512_setzero_si512(); 12];
        for _ in 0..n {
            for v in a.iter_mut() {
                *v = _mm512_dpbusd_epi32(*v, b, c);
            }
        }
        black_box(a);
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod simd {
    pub(super) fn paths() -> Vec<super::Path> {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    /// Structural: every path this CPU has runs and gives a positive rate (no speed is
    /// asserted).
    #[test]
    fn every_path_gives_a_rate() {
        for p in super::measure() {
            assert!(p.one_thread > 0.0 && p.all_threads > 0.0, "{p:?}");
        }
    }
}
