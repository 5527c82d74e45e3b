//! What every arch must do, each check a function of one [`ArchCase`]; tests/conformance.rs
//! runs each on each case of [`super::cases`]. Models, requests and expectations come only
//! from arch-independent APIs (`models::from_gguf`, [`Policy`], the GGUF's metadata), and
//! every assert message starts with the case's name.

use super::cases::{ArchCase, Shape, StateInput};
use std::panic::{catch_unwind, AssertUnwindSafe};
use vla::gguf::GgufFile;
use vla::policy::{
    ActionChunk, Image, ImageData, Observation, Policy, PolicyInfo, RunCounters, RuntimeOptions,
};

/// `p`'s chunk for `obs`, failing with the case's name and `what`.
fn predict(case: &ArchCase, p: &mut dyn Policy, obs: &Observation, what: &str) -> ActionChunk {
    p.predict(obs)
        .unwrap_or_else(|e| panic!("{}: {what}: {e}", case.name))
}

/// Same observation twice, and the same file loaded twice: the identical chunk on cpu.
pub fn deterministic_on_cpu(case: &ArchCase) {
    let mut p = case.cpu();
    let obs = case.observation(p.info(), 1);
    let a = predict(case, p.as_mut(), &obs, "first predict").actions;
    let b = predict(case, p.as_mut(), &obs, "second predict").actions;
    assert_eq!(a, b, "{}: the same observation twice", case.name);
    let c = predict(case, case.cpu().as_mut(), &obs, "second load").actions;
    assert_eq!(a, c, "{}: a second load of the same file", case.name);
}

/// `info()` reports the GGUF's config, and the chunk is `chunk_size x action_dim` finite
/// values, not all zero.
pub fn info_and_chunk_shape(case: &ArchCase) {
    let n = case.name;
    let mut p = case.cpu();
    let info = p.info().clone();
    let file = GgufFile::from_bytes(case.bytes()).unwrap();
    assert_eq!(info.arch, file.architecture().unwrap(), "{n}: info.arch");
    let keys = match case.shape.io() {
        None if matches!(case.shape, Shape::Sampled { .. }) => vec![
            ("action.horizon", info.chunk_size),
            ("diffusion.steps", info.num_steps),
            ("action.dim", info.max_action_dim),
        ],
        None => vec![
            ("n_images", info.n_images),
            ("chunk_size", info.chunk_size),
            ("num_steps", info.num_steps),
            ("max_state_dim", info.max_state_dim),
            ("max_action_dim", info.max_action_dim),
            ("real_state_dim", info.state_dim),
            ("real_action_dim", info.action_dim),
        ],
        Some(k) => {
            assert_eq!(info.num_steps, 0, "{n}: one pass, no steps");
            vec![
                (k.n_images, info.n_images),
                (k.chunk_size, info.chunk_size),
                (k.state_dim, info.max_state_dim),
                (k.state_dim, info.state_dim),
                (k.action_dim, info.max_action_dim),
                (k.action_dim, info.action_dim),
            ]
        }
    };
    for (key, got) in keys {
        assert_eq!(got, case.meta(key), "{n}: info vs the GGUF's {key}");
    }
    let sizes = [info.n_images, info.image_height, info.image_width];
    assert!(sizes.iter().all(|&s| s > 0), "{n}: {info:?}");
    assert!(info.state_dim <= info.max_state_dim, "{n}: {info:?}");
    assert!(info.action_dim <= info.max_action_dim, "{n}: {info:?}");
    assert!(
        (1..=info.chunk_size).contains(&info.action_rows),
        "{n}: {info:?}"
    );
    let chunk = predict(case, p.as_mut(), &case.observation(&info, 1), "predict");
    assert_eq!(
        (chunk.chunk_size, chunk.action_dim),
        (info.action_rows, info.action_dim),
        "{n}: chunk shape"
    );
    // after a run the memory holds the activations' peak beside the weights
    let m = p.info();
    assert!(
        0 < m.activation_bytes && m.activation_bytes < m.memory_bytes,
        "{n}: activations {} of memory {}",
        m.activation_bytes,
        m.memory_bytes
    );
    assert_eq!(
        chunk.actions.len(),
        info.action_rows * info.action_dim,
        "{n}"
    );
    assert!(
        chunk.actions.iter().all(|v| v.is_finite()),
        "{n}: non-finite"
    );
    assert!(chunk.actions.iter().any(|&v| v != 0.0), "{n}: all zero");
}

/// Flips bit 6 of every byte in the middle rows of view `v`.
fn edit_image(obs: &mut Observation, v: usize) {
    let img = &mut obs.images[v];
    let row = img.width * 3;
    let mid = img.height / 2 * row;
    if let ImageData::RgbU8(d) = &mut img.data {
        d[mid - row..mid + row].iter_mut().for_each(|b| *b ^= 0x40);
    }
}

/// The chunk changes with the instruction tokens, the state (unless the arch reads it only
/// through a prompt: then it must not change with token ids), each camera view and the noise
/// (a one-pass arch reads neither tokens nor noise: they must not change it).
pub fn chunk_depends_on_every_input(case: &ArchCase) {
    let n = case.name;
    let mut p = case.cpu();
    let obs = case.observation(p.info(), 1);
    let base = predict(case, p.as_mut(), &obs, "base").actions;
    let mut edits: Vec<(String, Observation, bool)> = Vec::new();
    let mut o = obs.clone();
    let ids = o.tokens.as_mut().unwrap();
    let last = ids.len() - 1 - case.shape.suffix_len();
    ids[last] = ids[last] % 199 + 1;
    edits.push(("last token".into(), o, case.shape.reads_text()));
    let mut o = obs.clone();
    let last = o.state.len() - 1;
    o.state[last] += 0.5;
    edits.push(("state".into(), o, case.state == StateInput::Direct));
    for v in 0..obs.images.len() {
        let mut o = obs.clone();
        edit_image(&mut o, v);
        edits.push((format!("camera view {v}"), o, true));
    }
    let mut o = obs.clone();
    o.noise.as_mut().unwrap()[3] += 0.5;
    edits.push(("noise".into(), o, case.shape.reads_noise()));
    for (what, o, changes) in edits {
        let got = predict(case, p.as_mut(), &o, &what).actions;
        match changes {
            true => assert_ne!(got, base, "{n}: the chunk ignores the {what}"),
            false => assert_eq!(got, base, "{n}: the {what} changed the chunk"),
        }
    }
}

/// The state zero-padded to `max_state_dim`, and the views as [0, 1] floats: the same chunk.
pub fn equivalent_inputs_give_the_same_chunk(case: &ArchCase) {
    let n = case.name;
    let mut p = case.cpu();
    let max_state = p.info().max_state_dim;
    let obs = case.observation(p.info(), 1);
    let base = predict(case, p.as_mut(), &obs, "base").actions;
    let mut padded = obs.clone();
    padded.state.resize(max_state, 0.0);
    let got = predict(case, p.as_mut(), &padded, "padded state").actions;
    assert_eq!(got, base, "{n}: the state zero-padded to {max_state}");
    let mut floats = obs.clone();
    for img in &mut floats.images {
        if let ImageData::RgbU8(d) = &img.data {
            img.data = ImageData::RgbF32(d.iter().map(|&b| b as f32 / 255.0).collect());
        }
    }
    // Bytes are scaled by slope/255 on the backend, floats by the slope: the same chunk up
    // to rounding where the backend resizes (the host-resized frames are bytes either way).
    let got = predict(case, p.as_mut(), &floats, "f32 views").actions;
    super::check(&format!("{n}: the views as RgbF32"), &got, &base, 1e-5);
}

type Edit = Box<dyn Fn(&mut Observation)>;

/// Every malformed request is an `Err` whose message names the problem, never a panic, and
/// the policy predicts the same chunk as before afterwards. Requests at the limits succeed.
pub fn bad_requests_are_errors(case: &ArchCase) {
    let n = case.name;
    let mut p = case.cpu();
    let info = p.info().clone();
    let good = case.observation(&info, 1);
    let want = predict(case, p.as_mut(), &good, "good request").actions;
    let mut cases: Vec<(String, &str, Edit)> = vec![
        ("no images".into(), "image", Box::new(|o| o.images.clear())),
        (
            "a view too few".into(),
            "image",
            Box::new(|o| drop(o.images.pop())),
        ),
        (
            "a view too many".into(),
            "image",
            Box::new(|o| o.images.push(o.images[0].clone())),
        ),
        (
            "image data shorter than its size".into(),
            "image",
            Box::new(|o| o.images[0].height += 1),
        ),
        (
            "image data one byte short".into(),
            "image",
            Box::new(|o| match &mut o.images[0].data {
                ImageData::RgbU8(d) => drop(d.pop()),
                ImageData::RgbF32(d) => drop(d.pop()),
            }),
        ),
        (
            "f32 image data one value long".into(),
            "image",
            Box::new(|o| {
                let len = o.images[0].height * o.images[0].width * 3;
                o.images[0].data = ImageData::RgbF32(vec![0.5; len + 1]);
            }),
        ),
        (
            "zero-width image".into(),
            "image",
            Box::new(|o| o.images[0].width = 0),
        ),
        (
            "zero-size image without data".into(),
            "image",
            Box::new(|o| {
                o.images[1].height = 0;
                o.images[1].data = ImageData::RgbU8(Vec::new());
            }),
        ),
        (
            "a state value too many".into(),
            "state",
            Box::new(|o| o.state.push(1.0)),
        ),
        ("no state".into(), "state", Box::new(|o| o.state.clear())),
        (
            "NaN state".into(),
            "state",
            Box::new(|o| o.state[0] = f32::NAN),
        ),
        (
            "infinite state".into(),
            "state",
            Box::new(|o| *o.state.last_mut().unwrap() = f32::INFINITY),
        ),
    ];
    let flow = case.shape.flow();
    let (vocab, max_tokens) = match case.shape {
        Shape::Flow => (case.meta("vocab_size"), case.meta("tokenizer_max_length")),
        Shape::OnePassText {
            vocab, max_tokens, ..
        } => (case.meta(vocab), max_tokens()),
        Shape::Sampled { vocab, max_tokens } => (vocab(), max_tokens()),
        Shape::OnePass(_) => (0, 0),
    };
    let (chunk, dim) = (info.chunk_size, info.max_action_dim);
    let shape = case.shape;
    let tokens = |v: Vec<i32>| -> Edit {
        let v = shape.ids(v);
        Box::new(move |o| o.tokens = Some(v.clone()))
    };
    let noise = |len: usize| -> Edit { Box::new(move |o| o.noise = Some(vec![0.0; len])) };
    let language: Vec<(String, &str, Edit)> = vec![
        (
            format!("token id {vocab} (vocab_size)"),
            "token",
            tokens(vec![3, vocab as i32]),
        ),
        ("token id i32::MAX".into(), "token", tokens(vec![i32::MAX])),
        ("negative token id".into(), "token", tokens(vec![4, -1])),
        (
            format!("{} tokens", max_tokens + 1),
            "token",
            tokens(vec![1; max_tokens + 1 - shape.affix_len()]),
        ),
        (
            "both prompt and tokens".into(),
            "prompt",
            Box::new(|o| o.prompt = Some("pick up the cube".into())),
        ),
    ];
    let noises: Vec<(String, &str, Edit)> = vec![
        ("7 noise values".into(), "noise", noise(7)),
        ("no noise values".into(), "noise", noise(0)),
        (
            "a noise value too many".into(),
            "noise",
            noise(chunk * dim + 1),
        ),
    ];
    if case.shape.reads_text() {
        cases.extend(language);
    }
    if case.shape.reads_noise() {
        cases.extend(noises);
    }
    if case.shape.reads_text() && vocab <= 100_000 {
        cases.push(("token id 100000".into(), "token", tokens(vec![100_000])));
    }
    if flow && info.action_dim != dim {
        let what = "noise of chunk_size x action_dim".into();
        cases.push((what, "noise", noise(chunk * info.action_dim)));
    }
    for (what, needle, edit) in cases {
        let mut obs = good.clone();
        edit(&mut obs);
        let err = match catch_unwind(AssertUnwindSafe(|| p.predict(&obs))) {
            Ok(Ok(_)) => panic!("{n}: {what}: accepted"),
            Ok(Err(e)) => e.to_string(),
            Err(_) => panic!("{n}: {what}: panicked"),
        };
        println!("{n}: {what}: {err}");
        assert!(
            err.to_lowercase().contains(needle),
            "{n}: {what}: {err:?} does not mention {needle:?}"
        );
    }
    // At the limits: as many tokens as the model holds, the last id of its vocabulary.
    if case.shape.reads_text() {
        let mut edge = good.clone();
        edge.tokens = Some(
            case.shape
                .ids(vec![vocab as i32 - 1; max_tokens - case.shape.affix_len()]),
        );
        predict(case, p.as_mut(), &edge, "max_tokens ids of vocab_size - 1");
    }
    let again = predict(case, p.as_mut(), &good, "the good request after bad ones").actions;
    assert_eq!(again, want, "{n}: the chunk after bad requests");
}

/// Instructions of any length the model holds give a chunk: none (the arch's missing task),
/// an empty prompt or token list, lengths on both sides of a bucket of compiled rows, and a
/// prompt longer than any fixture's; one past the bound is either cut with a warning in the
/// chunk (where the reference cuts) or refused naming the bound, never cut silently. Going
/// back to an earlier length gives the same chunk as before (on wgpu, which keeps one set of
/// compiled graphs, after compiling the others in between).
pub fn instructions_of_any_length(case: &ArchCase, backend: &str) {
    use vla::models::common::{text_rows, TEXT_BUCKET};
    let n = case.name;
    if super::open(backend).is_none() {
        return;
    }
    let mut p = load_on(case, backend, false);
    let mut good = case.observation(p.info(), 1);
    let (max, rows): (usize, fn(usize, usize) -> usize) = match case.shape {
        Shape::OnePass(_) => return unread_instruction_and_noise(case, p.as_mut(), &good),
        Shape::OnePassText {
            max_tokens, padded, ..
        } => match padded {
            true => (max_tokens(), |_, max| max),
            false => (max_tokens(), |l, _| l), // rows: see below
        },
        Shape::Flow => (case.meta("tokenizer_max_length"), text_rows),
        // the instruction always padded to the bound
        Shape::Sampled { max_tokens, .. } => (max_tokens(), |_, max| max),
    };
    if !case.shape.reads_noise() {
        good.noise = None; // not read: the reply would say so
    }
    let first = predict(case, p.as_mut(), &good, "good request").actions;
    let with = |prompt: Option<&str>, tokens: Option<Vec<i32>>| Observation {
        prompt: prompt.map(str::to_owned),
        tokens,
        ..good.clone()
    };
    // a one-pass arch takes no empty sequence: it starts with the prompt's first token; the
    // lengths are the task's ids, after the arch's prefix (BitVLA's placeholders)
    let padded = matches!(
        case.shape,
        Shape::Flow | Shape::Sampled { .. } | Shape::OnePassText { padded: true, .. }
    );
    let least = usize::from(!padded);
    let pre = case.shape.affix_len();
    let max = max - pre;
    let mut lengths = vec![0, 1, TEXT_BUCKET - 1, TEXT_BUCKET, TEXT_BUCKET + 1, max];
    lengths.retain(|&l| (least..=max).contains(&l));
    if least > 0 && backend != "cpu" {
        // the longest one-pass sequence (thousands of rows) runs on cpu: lavapipe takes minutes
        lengths.pop();
    }
    if least > 0 {
        let err = p
            .predict(&with(None, Some(vec![])))
            .err()
            .map(|e| e.to_string());
        assert!(
            err.as_deref().is_some_and(|e| e.contains("empty")),
            "{n}: no ids: {err:?}"
        );
    }
    for l in lengths {
        let chunk = predict(
            case,
            p.as_mut(),
            &with(None, Some(case.shape.ids(vec![5; l]))),
            &format!("{l} ids"),
        );
        assert!(
            chunk.warnings.is_empty(),
            "{n}: {l} ids: {:?}",
            chunk.warnings
        );
        let got = (chunk.instruction.tokens - pre, chunk.instruction.rows - pre);
        match padded {
            true => assert_eq!(got, (l, rows(l, max)), "{n}: {l} ids: (ids, rows)"),
            // the model's own ids may add a token (OpenVLA-OFT's empty token)
            false => assert!(
                got.0 == l && (l..=l + 1).contains(&got.1),
                "{n}: {l} ids: {got:?}"
            ),
        }
    }
    predict(case, p.as_mut(), &with(None, None), "no instruction");
    predict(case, p.as_mut(), &with(Some(""), None), "an empty prompt");
    let long = "then pick up the next block and stack it on the tower ".repeat(max);
    let past = match case.shape.flow() {
        true => p.predict(&with(Some(&long), None)),
        // graphs per length (no cut): ids past the bound, which no text of the tokenizer's
        // size limit reaches
        false => p.predict(&with(None, Some(case.shape.ids(vec![5; max + 1])))),
    };
    match (past, case.cuts_prompt) {
        (Ok(chunk), true) => {
            let cut = format!("cut to the first {max} (tokenizer_max_length)");
            assert!(
                chunk.warnings.iter().any(|w| w.contains(&cut)),
                "{n}: {chunk:?}"
            );
            assert_eq!(chunk.instruction.tokens, max, "{n}: cut prompt");
        }
        (Err(e), false) => assert!(
            e.to_string().contains(&format!("bound of {}", max + pre)),
            "{n}: {e}"
        ),
        (got, _) => panic!("{n}: a prompt past the bound: {got:?}"),
    }
    let again = predict(case, p.as_mut(), &good, "the first request again").actions;
    assert_eq!(
        again, first,
        "{n}: the chunk after other instruction lengths"
    );
}

/// Without a tokenizer in the GGUF a text prompt is an error saying so, and token ids still
/// give the chunk of the file with its tokenizer.
/// A one-pass arch reads no instruction and no noise: with either, or neither, the same
/// chunk, and the reply says which fields went unread; never an error.
fn unread_instruction_and_noise(case: &ArchCase, p: &mut dyn Policy, good: &Observation) {
    let n = case.name;
    let bare = Observation {
        tokens: None,
        noise: None,
        ..good.clone()
    };
    let base = predict(case, p, &bare, "no instruction, no noise");
    assert!(base.warnings.is_empty(), "{n}: {:?}", base.warnings);
    let long = "pick up the red cube ".repeat(100);
    let edits: [(&str, Observation, &str); 3] = [
        ("token ids and noise", good.clone(), "noise"),
        (
            "a long prompt",
            Observation {
                prompt: Some(long),
                ..bare.clone()
            },
            "prompt",
        ),
        (
            "noise of any length",
            Observation {
                noise: Some(vec![0.5; 3]),
                ..bare.clone()
            },
            "noise",
        ),
    ];
    for (what, obs, needle) in edits {
        let got = predict(case, p, &obs, what);
        assert_eq!(got.actions, base.actions, "{n}: {what} changed the chunk");
        assert!(
            got.warnings.iter().any(|w| w.contains(needle)),
            "{n}: {what}: warnings {:?}",
            got.warnings
        );
    }
}

pub fn prompt_without_a_tokenizer_is_an_error(case: &ArchCase) {
    let n = case.name;
    if !case.shape.reads_text() {
        return; // no instruction, no tokenizer (unread_instruction_and_noise)
    }
    let opts = RuntimeOptions::default();
    let file = GgufFile::from_bytes(case.bytes_without_tokenizer()).unwrap();
    let mut p = vla::models::from_gguf(file, &opts)
        .unwrap_or_else(|e| panic!("{n}: load without a tokenizer: {e}"));
    let obs = case.observation(p.info(), 1);
    let mut prompted = obs.clone();
    (prompted.tokens, prompted.prompt) = (None, Some("pick up the red cube".into()));
    let err = match p.predict(&prompted) {
        Ok(_) => panic!("{n}: a prompt without a tokenizer was accepted"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("no tokenizer"), "{n}: {err}");
    let got = predict(case, p.as_mut(), &obs, "token ids").actions;
    let want = predict(case, case.cpu().as_mut(), &obs, "with a tokenizer").actions;
    assert_eq!(got, want, "{n}: token ids without a tokenizer");
}

/// On `backend` the chunk is within the case's tolerance of the cpu chunk, and the predict
/// keeps to the device-resident predict's traffic bounds ([`check_counters`]). A GPU backend without an
/// adapter fails ([`super::open`]; `VLA_ALLOW_NO_GPU=1` skips with a warning).
pub fn agrees_with_cpu(case: &ArchCase, backend: &str) {
    let n = case.name;
    if super::open(backend).is_none() {
        return;
    }
    let mut p = load_on(case, backend, false);
    let obs = case.observation(p.info(), 1);
    let got = predict(case, p.as_mut(), &obs, backend);
    let want = predict(case, case.cpu().as_mut(), &obs, "cpu");
    assert_eq!(got.chunk_size, want.chunk_size, "{n}: {backend}");
    assert_eq!(got.action_dim, want.action_dim, "{n}: {backend}");
    let what = format!("{n} on {} vs cpu", p.info().backend);
    super::check(
        &what,
        &got.actions,
        &want.actions,
        case.tolerance.of(backend),
    );
    check_counters(n, p.info(), &obs, &got.counters, &want.counters);
    frames_go_up_as_they_arrive(case, p.as_mut(), &obs, &got.counters, backend);
}

/// Where the backend resizes the camera frames (the references resize floats), they go up
/// as they arrived, a byte a pixel channel: frames twice as tall add exactly their own
/// bytes (in 4-byte words on wgpu, in 34-byte Q8_0 blocks of 32 on ggml). Where the host
/// resizes (the references round to bytes), the upload is the model's size: nothing added.
fn frames_go_up_as_they_arrive(
    case: &ArchCase,
    p: &mut dyn Policy,
    obs: &Observation,
    before: &RunCounters,
    backend: &str,
) {
    let n = case.name;
    // ACT never resizes: its frames go up as they are; Octo's cameras take their own sizes
    // only (as its reference: the client resizes)
    let on_device = matches!(n, "smolvla" | "pi0" | "pi05" | "vla_jepa" | "act");
    let mut taller = obs.clone();
    for img in &mut taller.images {
        img.height *= 2;
        if let ImageData::RgbU8(d) = &mut img.data {
            d.extend_from_within(..);
        }
    }
    if !p.info().image_sizes.is_empty() {
        let e = p.predict(&taller).err().map(|e| e.to_string());
        assert!(
            e.as_deref().is_some_and(|e| e.contains("image")),
            "{n}: frames of another size: {e:?}"
        );
        return;
    }
    let on_wire = |bytes: usize| match backend.starts_with("ggml") {
        true => bytes.div_ceil(32) * 34,
        false => bytes.next_multiple_of(4),
    };
    let added: usize = (obs.images.iter().zip(&taller.images))
        .map(|(a, b)| on_wire(image_bytes(b)) - on_wire(image_bytes(a)))
        .sum();
    let want = if on_device { added as u64 } else { 0 };
    let got = predict(case, p, &taller, "taller frames").counters;
    assert_eq!(
        got.h2d_bytes,
        before.h2d_bytes + want,
        "{n} on {backend}: host-to-device bytes with frames twice as tall"
    );
}

fn load_on(case: &ArchCase, backend: &str, stepwise: bool) -> Box<dyn Policy> {
    let opts = RuntimeOptions {
        backend: backend.into(),
        stepwise,
        ..Default::default()
    };
    case.load(&opts).unwrap_or_else(|e| {
        panic!(
            "{}: load on {backend} (stepwise {stepwise}): {e}",
            case.name
        )
    })
}

/// Bytes of a camera view as it arrives (one a pixel channel, or four as floats).
fn image_bytes(img: &Image) -> usize {
    match &img.data {
        ImageData::RgbU8(d) => d.len(),
        ImageData::RgbF32(d) => 4 * d.len(),
    }
}

/// Bytes a request carries: its camera views as they arrive, token ids, state and noise.
/// (The archs whose reference rounds resized frames to bytes upload the model's size in
/// bytes instead: about the same at the test frames' sizes.)
fn request_bytes(obs: &Observation) -> u64 {
    let pixels: usize = obs.images.iter().map(image_bytes).sum();
    let ids = obs.tokens.as_ref().map_or(0, |t| 4 * t.len());
    let text = obs.prompt.as_ref().map_or(0, |p| p.len());
    let noise = obs.noise.as_ref().map_or(0, |x| 4 * x.len());
    (pixels + ids + text + 4 * obs.state.len() + noise) as u64
}

/// The run counters of one predict. The cpu backend moves nothing and waits for nothing.
/// Elsewhere the whole predict is one backend run (the device-resident predict's bounds): at most 2 submits
/// and 1 host wait; host-to-device at most 1.1x the request's bytes ([`request_bytes`])
/// plus 64 KiB; device-to-host at most the chunk's bytes (`chunk x max_action_dim` f32)
/// plus 64 KiB. Nothing the model computes crosses the bus.
fn check_counters(
    n: &str,
    info: &PolicyInfo,
    obs: &Observation,
    got: &RunCounters,
    cpu: &RunCounters,
) {
    let zero = RunCounters {
        dispatches: cpu.dispatches,
        ..Default::default()
    };
    assert_eq!(*cpu, zero, "{n}: cpu counters");
    assert!(cpu.dispatches > 0, "{n}: cpu ops");
    assert!(got.submits <= 2 && got.host_waits <= 1, "{n}: {got:?}");
    assert!(got.submits >= 1 && got.host_waits >= 1, "{n}: {got:?}");
    let slack = 64 * 1024;
    let request = request_bytes(obs);
    assert!(
        got.h2d_bytes <= request + request / 10 + slack,
        "{n}: host-to-device {} bytes for a request of {request}: {got:?}",
        got.h2d_bytes
    );
    let chunk = (info.chunk_size * info.max_action_dim * 4) as u64;
    assert!(
        got.d2h_bytes >= chunk && got.d2h_bytes <= chunk + slack,
        "{n}: device-to-host {} bytes for a chunk of {chunk}: {got:?}",
        got.d2h_bytes
    );
    assert!(got.dispatches > 0, "{n}: {got:?}");
}

/// The one-run predict gives the chunk of the stepwise one (vision, prefill and each
/// denoise step as separate runs, the host integrating), bit for bit, on `backend`; the
/// stepwise predict makes `2 + steps` runs and times its stages.
pub fn one_run_matches_stepwise(case: &ArchCase, backend: &str) {
    let n = case.name;
    if backend != "cpu" && super::open(backend).is_none() {
        return;
    }
    if !case.shape.flow() {
        let opts = RuntimeOptions {
            backend: backend.into(),
            stepwise: true,
            ..Default::default()
        };
        let e = case.load(&opts).err().map(|e| e.to_string());
        let said = e.as_deref().is_some_and(|e| e.contains("stepwise"));
        assert!(said, "{n}: one pass, stepwise: {e:?}");
        return;
    }
    let (mut one, mut steps) = (load_on(case, backend, false), load_on(case, backend, true));
    let obs = case.observation(one.info(), 2);
    let a = predict(case, one.as_mut(), &obs, "one run");
    let b = predict(case, steps.as_mut(), &obs, "stepwise");
    assert_eq!(
        a.actions, b.actions,
        "{n} on {backend}: one run vs stepwise"
    );
    let t = b.times;
    let timed = [t.vision_ms, t.prefill_ms, t.denoise_ms];
    assert!(timed.iter().all(Option::is_some), "{n}: stepwise {t:?}");
    // One run: timed by stage on cpu, by timestamp queries where wgpu has them; never
    // some stages but not others.
    let t = a.times;
    let timed = [t.vision_ms, t.prefill_ms, t.denoise_ms];
    let some = timed.iter().filter(|x| x.is_some()).count();
    assert!(some == 0 || some == 3, "{n} on {backend}: {t:?}");
    assert!(backend != "cpu" || some == 3, "{n}: cpu stage times {t:?}");
    if backend != "cpu" {
        let runs = (2 + steps.info().num_steps) as u64;
        let c = b.counters;
        assert_eq!(
            (c.submits, c.host_waits),
            (runs, runs),
            "{n}: stepwise {c:?}"
        );
    }
}

pub fn agrees_with_cpu_on_vulkan(case: &ArchCase) {
    agrees_with_cpu(case, "vulkan");
}

/// Every 2-D f32 tensor in bf16, tables included (vla.cpp's bf16 files store position tables
/// and class tokens so, where our converters keep them f32): the model loads and runs on
/// every backend, its chunk close to the f32 model's on cpu.
pub fn bf16_tables_run_everywhere(case: &ArchCase) {
    let n = case.name;
    let file = GgufFile::from_bytes(case.bytes()).unwrap();
    let bf16 = |t: &vla::gguf::TensorInfo| {
        (t.dims.len() >= 2 && t.ty == vla::gguf::GgmlType::F32).then_some(vla::gguf::GgmlType::BF16)
    };
    let (w, changed) = vla::gguf::retype(&file, bf16, |_, _| {}).unwrap();
    assert!(
        changed
            .iter()
            .any(|t| !t.ends_with(".weight") || t.contains("pos")),
        "{n}: no table in bf16: {changed:?}"
    );
    let bytes = w.to_bytes().unwrap();
    let mut p = case.cpu();
    let obs = case.observation(p.info(), 1);
    let want = predict(case, p.as_mut(), &obs, "f32 on cpu").actions;
    let mut backends = vec!["cpu", "vulkan"];
    if cfg!(feature = "ggml") {
        backends.push("ggml");
    }
    for backend in backends {
        if super::open(backend).is_none() {
            continue;
        }
        let opts = RuntimeOptions {
            backend: backend.into(),
            ..Default::default()
        };
        let file = GgufFile::from_bytes(bytes.clone()).unwrap();
        let mut p = vla::models::from_gguf(file, &opts)
            .unwrap_or_else(|e| panic!("{n}: bf16 tables on {backend}: {e}"));
        let got = predict(case, p.as_mut(), &obs, backend).actions;
        let cos = super::cosine(&got, &want);
        assert!(
            cos > 0.999,
            "{n}: bf16 tables on {backend}: cosine {cos} to f32"
        );
    }
}

/// On ggml-cpu, and on each other ggml device in `VLA_TEST_GGML_DEVICES`.
pub fn agrees_with_cpu_on_ggml(case: &ArchCase) {
    for name in super::ggml_backend_names() {
        agrees_with_cpu(case, &name);
    }
}

/// [`one_run_matches_stepwise`] on cpu, vulkan and ggml-cpu.
pub fn one_run_matches_stepwise_everywhere(case: &ArchCase) {
    let mut backends = vec!["cpu", "vulkan"];
    if cfg!(feature = "ggml") {
        backends.push("ggml");
    }
    for b in backends {
        one_run_matches_stepwise(case, b);
    }
}

/// `--steps k` (`RuntimeOptions::num_steps`) replaces the GGUF's step count in `info()` and
/// in the chunk; 0 or a huge count is a load error.
pub fn steps_option_sets_the_step_count(case: &ArchCase) {
    let n = case.name;
    let opts = |s| RuntimeOptions {
        num_steps: Some(s),
        ..Default::default()
    };
    if !case.shape.flow() {
        let e = case.load(&opts(2)).err().map(|e| e.to_string());
        let said = e.as_deref().is_some_and(|e| e.contains("steps"));
        assert!(said, "{n}: one pass, --steps 2: {e:?}");
        return;
    }
    let mut own = case.cpu();
    assert_eq!(
        own.info().num_steps,
        case.meta("num_steps"),
        "{n}: own steps"
    );
    let k = if own.info().num_steps == 2 { 3 } else { 2 };
    let mut p = case
        .load(&opts(k))
        .unwrap_or_else(|e| panic!("{n}: --steps {k}: {e}"));
    assert_eq!(
        p.info().num_steps,
        k,
        "{n}: info().num_steps with --steps {k}"
    );
    let obs = case.observation(p.info(), 1);
    let got = predict(case, p.as_mut(), &obs, "--steps").actions;
    assert!(got.iter().all(|v| v.is_finite()), "{n}: --steps {k}");
    let base = predict(case, own.as_mut(), &obs, "own steps").actions;
    assert_ne!(
        got, base,
        "{n}: --steps {k} gave the chunk of the GGUF's steps"
    );
    for bad in [0, 1 << 30] {
        match case.load(&opts(bad)) {
            Ok(_) => panic!("{n}: --steps {bad} loaded"),
            Err(e) => assert!(e.to_string().contains("steps"), "{n}: --steps {bad}: {e}"),
        }
    }
}
