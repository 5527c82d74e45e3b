//! The served round trip of every arch of the conformance suite (tests/support/cases.rs),
//! one test each: `served::<case>`.

use super::{cases, Running};
use vla::gguf::GgufFile;
use vla::policy::{Observation, RuntimeOptions};
use vla_server::serve::{info_json, ServeOptions, ServeStats};

/// Every arch of tests/support/cases.rs, served on cpu from its GGUF without the tokenizer:
/// INFO describes it as the in-process policy's `info()`, a request gets the in-process cpu policy's chunk for the same
/// observation and noise, malformed requests (refused by the server, by the model, a prompt
/// with no tokenizer) get errors, and serving goes on, correctly.
fn served_round_trip(case: &cases::ArchCase) {
    let n = case.name;
    let policy = || {
        let file = GgufFile::from_bytes(case.bytes_without_tokenizer()).unwrap();
        vla::models::from_gguf(file, &RuntimeOptions::default()).unwrap()
    };
    let server = Running::serve(policy(), ServeOptions::default());
    let mut reference = policy();
    let info = reference.info().clone();
    let mut c = server.client();
    let mut served = c.info().unwrap();
    // the server's own part: its batching options and the batches run so far
    let serving = ["max_batch", "batch_wait_ms", "batches"].map(|k| {
        let v = served.as_object_mut().unwrap().remove(k);
        v.unwrap_or_else(|| panic!("{n}: INFO lacks {k}"))
    });
    assert_eq!(
        serving,
        [1.into(), 0.into(), serde_json::json!({})],
        "{n}: INFO's serving part"
    );
    let want = serde_json::from_str::<serde_json::Value>(&info_json(&info)).unwrap();
    assert_eq!(served, want, "{n}: INFO vs the in-process policy's");
    for seed in [2, 3] {
        let obs = case.observation(&info, seed);
        let resp = c.predict(&obs).unwrap_or_else(|e| panic!("{n}: {e}"));
        assert_eq!(
            (resp.chunk_size as usize, resp.action_dim as usize),
            (info.action_rows, info.action_dim),
            "{n}"
        );
        let want = reference.predict(&obs).unwrap().actions;
        assert_eq!(resp.action_chunk, want, "{n}: served vs in-process chunk");
        let mut fewer_views = obs.clone();
        fewer_views.images.pop();
        let mut bad_token = obs.clone();
        bad_token.tokens = Some(vec![i32::MAX]);
        let prompted = Observation {
            tokens: None,
            prompt: Some("pick".into()),
            ..obs
        };
        let mut bad = vec![("a view too few", fewer_views, "this model takes")];
        if case.shape.flow() {
            bad.push(("token id i32::MAX", bad_token, "token"));
            bad.push(("a prompt", prompted, "no tokenizer"));
        }
        for (what, bad, needle) in bad {
            let err = c.predict(&bad).expect_err(what).to_string();
            assert!(err.contains(needle), "{n}: {what}: {err}");
        }
    }
    let stats = server.stop();
    let errors = if case.shape.flow() { 6 } else { 2 };
    assert_eq!(
        stats,
        ServeStats {
            predicted: 2,
            errors
        },
        "{n}"
    );
}

macro_rules! served_tests {
    ($($name:ident $fields:tt),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                served_round_trip(&cases::case(stringify!($name)));
            }
        )*
    };
}

arch_cases!(served_tests);

/// A model over a window of steps (Octo's 2) served a request with only the last step's views
/// and state (an episode's first step, the earlier step padding, as the reference's history
/// wrapper pads it): the in-process policy's chunk for the same views; a partial step is
/// refused.
#[test]
fn a_window_model_takes_the_last_steps() {
    let case = cases::case("octo");
    let policy = || {
        let file = GgufFile::from_bytes(case.bytes()).unwrap();
        vla::models::from_gguf(file, &RuntimeOptions::default()).unwrap()
    };
    let server = Running::serve(policy(), ServeOptions::default());
    let mut reference = policy();
    let info = reference.info().clone();
    assert!(info.window > 1, "{info:?}");
    let obs = case.observation(&info, 2);
    let per = info.n_images / info.window;
    let last = Observation {
        images: obs.images[info.n_images - per..].to_vec(),
        state: obs.state[obs.state.len() - info.state_dim / info.window..].to_vec(),
        ..obs.clone()
    };
    let want = reference.predict(&last).unwrap().actions;
    assert_ne!(
        want,
        reference.predict(&obs).unwrap().actions,
        "padding changes the chunk"
    );
    let mut c = server.client();
    let got = c.predict(&last).unwrap().action_chunk;
    assert_eq!(got, want, "served vs in-process, the last step only");
    let mut short = last.clone();
    short.images.pop();
    let err = c.predict(&short).expect_err("a partial step").to_string();
    assert!(err.contains("this model takes"), "{err}");
}
