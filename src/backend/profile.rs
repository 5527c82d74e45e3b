//! Kernel profiles grouped for people: what `vla-bench --profile` prints.

use super::KernelTime;

/// The dispatches of one (stage, op, kernel) in a profiled run, summed.
#[derive(Clone, Debug, PartialEq)]
pub struct ProfileRow {
    pub stage: String,
    pub op: &'static str,
    pub kernel: &'static str,
    pub calls: usize,
    pub ms: f64,
    pub flops: f64,
    pub bytes: f64,
}

impl ProfileRow {
    /// Achieved GFLOP/s (0 for ops whose work is not counted).
    pub fn gflops(&self) -> f64 {
        rate(self.flops, self.ms)
    }

    /// Achieved GB/s over the bytes the op must move at least once.
    pub fn gbps(&self) -> f64 {
        rate(self.bytes, self.ms)
    }
}

fn rate(amount: f64, ms: f64) -> f64 {
    match ms > 0.0 {
        true => amount / (ms * 1e6),
        false => 0.0,
    }
}

/// `times` grouped by (stage, op, kernel), the most time first.
pub fn summarize(times: &[KernelTime]) -> Vec<ProfileRow> {
    let mut rows: Vec<ProfileRow> = Vec::new();
    for t in times {
        let row = match rows
            .iter_mut()
            .find(|r| r.stage == t.stage && r.op == t.op && r.kernel == t.kernel)
        {
            Some(r) => r,
            None => {
                rows.push(ProfileRow {
                    stage: t.stage.clone(),
                    op: t.op,
                    kernel: t.kernel,
                    calls: 0,
                    ms: 0.0,
                    flops: 0.0,
                    bytes: 0.0,
                });
                rows.last_mut().expect("just pushed")
            }
        };
        row.calls += 1;
        row.ms += t.ms;
        row.flops += t.flops;
        row.bytes += t.bytes;
    }
    rows.sort_by(|a, b| b.ms.total_cmp(&a.ms));
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(op: &'static str, kernel: &'static str, ms: f64, flops: f64) -> KernelTime {
        KernelTime {
            node: 0,
            stage: "vision".into(),
            op,
            kernel,
            ms,
            flops,
            bytes: 2.0 * flops,
        }
    }

    #[test]
    fn groups_by_op_and_kernel_most_time_first() {
        let rows = summarize(&[
            t("add", "binary", 0.5, 0.0),
            t("matmul", "matmul", 2.0, 4e6),
            t("matmul", "matmul_q8", 1.0, 1e6),
            t("matmul", "matmul", 2.0, 4e6),
        ]);
        let keys: Vec<_> = rows.iter().map(|r| (r.kernel, r.calls)).collect();
        assert_eq!(keys, [("matmul", 2), ("matmul_q8", 1), ("binary", 1)]);
        // 8e6 FLOP in 4 ms = 2 GFLOP/s; 16e6 bytes = 4 GB/s
        assert!((rows[0].gflops() - 2.0).abs() < 1e-12);
        assert!((rows[0].gbps() - 4.0).abs() < 1e-12);
        assert_eq!(rows[2].gflops(), 0.0);
    }
}
