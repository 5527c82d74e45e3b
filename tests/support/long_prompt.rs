//! Instructions longer than any other fixture's (`<fixture>/long_prompt.json`, written by
//! `tools/golden/long_prompt.py` from the committed tiny fixtures): lerobot's chunk for each,
//! through a policy as a user runs it (text prompt, tokenizer in the GGUF).

use super::{check, open};
use std::path::Path;
use vla::models::common::{text_rows, TEXT_BUCKET};
use vla::models::flow::{FlowArch, FlowPolicy};
pub use vla::models::prompt::PromptIds;
use vla::policy::{Observation, Policy, RuntimeOptions};

/// One case: its task, lerobot's chunk and, where recorded, the ids its language model read.
pub struct LongPrompt {
    pub name: String,
    pub task: String,
    pub actions: Vec<f32>,
    pub token_ids: Option<Vec<u32>>,
}

pub fn long_prompts(dir: &Path) -> Vec<LongPrompt> {
    let path = dir.join("long_prompt.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let cases = json["cases"].as_object().expect("cases");
    cases
        .iter()
        .map(|(name, c)| LongPrompt {
            name: name.clone(),
            task: c["task"].as_str().unwrap().to_owned(),
            actions: super::golden::json_rows(&c["actions"]),
            token_ids: c["token_ids"]
                .as_array()
                .map(|ids| ids.iter().map(|t| t.as_u64().unwrap() as u32).collect()),
        })
        .collect()
}

/// Every case of `dir` on cpu and vulkan through the policy `make` builds: the prompt's ids
/// (the instruction's between the template's, `prompt`) are lerobot's, the chunk is within
/// `tol` of lerobot's, the instruction takes less than one bucket of padding, and a warning
/// comes back exactly where the instruction was cut (`cut`: cases the reference cuts).
pub fn long_prompts_match<A: FlowArch>(
    dir: &Path,
    make: impl Fn(&RuntimeOptions) -> FlowPolicy<A>,
    obs: &Observation,
    prompt: impl Fn(&A) -> &PromptIds,
    tol: f32,
) {
    for backend in ["cpu", "vulkan"] {
        cases_match(dir, backend, &make, obs, &prompt, tol);
    }
}

fn cases_match<A: FlowArch>(
    dir: &Path,
    backend: &str,
    make: &impl Fn(&RuntimeOptions) -> FlowPolicy<A>,
    obs: &Observation,
    prompt: &impl Fn(&A) -> &PromptIds,
    tol: f32,
) {
    if backend != "cpu" && open(backend).is_none() {
        return;
    }
    let opts = RuntimeOptions {
        backend: backend.into(),
        ..Default::default()
    };
    let mut m = make(&opts);
    let cases = long_prompts(dir);
    assert!(!cases.is_empty(), "{dir:?}: no long prompt cases");
    for case in cases {
        let obs = Observation {
            prompt: Some(case.task.clone()),
            tokens: None,
            ..obs.clone()
        };
        let state = m.normalised_state(&obs).unwrap();
        let (ids, warning) = m.instruction(&obs, &state).unwrap();
        let max = m.config().spec().io.tokenizer_max_length;
        assert!(
            ids.len() > 64,
            "{}: {} tokens: not long",
            case.name,
            ids.len()
        );
        assert!(text_rows(ids.len(), max) - ids.len() < TEXT_BUCKET);
        if let Some(want) = &case.token_ids {
            let p = prompt(m.config());
            let got = [&p.before[..], &ids, &p.after[..]].concat();
            assert_eq!(got.len(), want.len(), "{}: prompt length", case.name);
            assert!(
                &got == want,
                "{}: prompt ids differ from lerobot's",
                case.name
            );
        }
        let chunk = m.predict(&obs).unwrap();
        assert_eq!(
            chunk.warnings.len(),
            usize::from(warning.is_some()),
            "{}",
            case.name
        );
        assert_eq!(
            case.name == "cut",
            warning.is_some(),
            "{}: {warning:?}",
            case.name
        );
        let what = format!(
            "{backend}: {} instruction ({} tokens)",
            case.name,
            ids.len()
        );
        check(&what, &chunk.actions, &case.actions, tol);
    }
}

/// Token ids one past the bound `max` are refused with their count and the bound named,
/// not cut.
pub fn past_the_bound_is_refused(p: &mut dyn Policy, obs: &Observation, max: usize) {
    let obs = Observation {
        tokens: Some(vec![1; max + 1]),
        prompt: None,
        ..obs.clone()
    };
    let err = p.predict(&obs).unwrap_err().to_string();
    let named = err.contains(&format!(
        "{} tokens, more than this model's bound of {max}",
        max + 1
    ));
    assert!(named, "{err}");
}
