//! Batched predicts against the same requests predicted alone, on each case and backend
//! (tests/conformance.rs): a batch mixes requests that share a compiled graph (they run as
//! one), a request the model refuses (its error, the others their chunks) and, where the
//! model takes any frame size, frames of another size (another graph: their own run).

use super::cases::ArchCase;
use vla::policy::{ImageData, Observation, RuntimeOptions};

/// `stack` as [`RuntimeOptions::stack_batch`]: without stacking each chunk must be the
/// chunk alone bit for bit; stacked, within 5e-6 of its largest value (ulps: a taller
/// product may take another kernel, a tile where one request took the matrix-vector one,
/// which sums in another order; lavapipe's worst is 2.8e-6, GR00T N1.6).
pub fn batch_matches_alone(case: &ArchCase, backend: &str, stack: Option<bool>) {
    let n = case.name;
    if super::open(backend).is_none() {
        return;
    }
    let opts = RuntimeOptions {
        backend: backend.into(),
        stack_batch: stack,
        ..Default::default()
    };
    let load = || {
        case.load(&opts)
            .unwrap_or_else(|e| panic!("{n}: load on {backend}: {e}"))
    };
    let mut p = load();
    let info = p.info().clone();
    let mut batch: Vec<Observation> = (1..=4).map(|s| case.observation(&info, s)).collect();
    batch[2].images.pop(); // refused: a camera missing
    if info.image_sizes.is_empty() {
        let mut taller = case.observation(&info, 5);
        for img in &mut taller.images {
            img.height *= 2;
            if let ImageData::RgbU8(d) = &mut img.data {
                d.extend_from_within(..);
            }
        }
        batch.push(taller);
    }
    let got = p.predict_batch(&batch);
    assert_eq!(got.len(), batch.len(), "{n}: one answer per request");
    let mut alone = load();
    let exact = !stack.unwrap_or(backend != "cpu");
    for (i, (g, obs)) in got.iter().zip(&batch).enumerate() {
        let what = format!("{n} on {backend} (stack {stack:?}): request {i} of the batch");
        match (g, alone.predict(obs)) {
            (Ok(g), Ok(w)) if exact => assert_eq!(g.actions, w.actions, "{what}"),
            (Ok(g), Ok(w)) => {
                let scale = super::max_abs(&w.actions).max(1e-6);
                super::check(&what, &g.actions, &w.actions, 5e-6 * scale);
            }
            (Err(g), Err(w)) => assert_eq!(g.to_string(), w.to_string(), "{what}"),
            (g, w) => panic!(
                "{what}: {:?} in the batch, {:?} alone",
                g.as_ref().err().map(|e| e.to_string()),
                w.err().map(|e| e.to_string())
            ),
        }
    }
    // requests 0, 1 and 3 run as one; the taller frames with them where the host resizes
    // them to the model's size, else alone (frames go up as they arrive)
    let sizes: Vec<usize> = got
        .iter()
        .map(|r| r.as_ref().map_or(0, |c| c.batch))
        .collect();
    let want = match sizes.get(4) {
        None => vec![3, 3, 0, 3],
        Some(1) => vec![3, 3, 0, 3, 1],
        Some(_) => vec![4, 4, 0, 4, 4],
    };
    assert_eq!(sizes, want, "{n}: the requests each run served");
}
