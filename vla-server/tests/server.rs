//! The server end to end over real ZeroMQ sockets on loopback: answers, every kind of bad
//! input, queueing, several clients at once, a soak. The model is the built-in demo on cpu;
//! every arch of the conformance suite is served as well (server/served.rs).

use prost::Message;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use vla::gguf::GgufFile;
use vla::policy::{Image, ImageData, Observation, Policy, RuntimeOptions};
use vla_server::client::{request_from, Client};
use vla_server::proto::{Control, Encoding, ErrorCode, PredictRequest, PredictResponse};
use vla_server::serve::{QueueMode, ServeOptions, ServeStats, Server};

/// The archs of the conformance suite (a new arch is one line there), each served: [`served`].
#[macro_use]
#[path = "../../tests/support/cases.rs"]
mod cases;
/// Requests of several clients run as one batch (`max_batch`).
#[path = "server/batch.rs"]
mod batch;
#[path = "server/served.rs"]
mod served;

const TIMEOUT_MS: u64 = 60_000;

fn demo_policy() -> Box<dyn Policy> {
    let file = GgufFile::from_bytes(vla::models::demo_gguf().unwrap()).unwrap();
    vla::models::from_gguf(file, &RuntimeOptions::default()).unwrap()
}

struct Running {
    addr: String,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<ServeStats>>,
}

impl Running {
    fn start(opts: ServeOptions) -> Running {
        Self::serve(demo_policy(), opts)
    }

    fn serve(policy: Box<dyn Policy>, opts: ServeOptions) -> Running {
        let server = Server::bind(policy, "tcp://127.0.0.1:*", opts).unwrap();
        let addr = server.endpoint().to_string();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let handle = std::thread::spawn(move || server.run(&flag).unwrap());
        Running {
            addr,
            stop,
            handle: Some(handle),
        }
    }

    fn client(&self) -> Client {
        Client::connect(&self.addr, TIMEOUT_MS).unwrap()
    }

    fn stop(mut self) -> ServeStats {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.take().unwrap().join().unwrap()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// A valid observation for the demo model; `seed` varies state, image and noise.
fn observation(seed: u32) -> Observation {
    let info_images = 2;
    let images = (0..info_images)
        .map(|v| {
            let (h, w) = (40 + v * 8, 56);
            let data = (0..h * w * 3)
                .map(|i| ((i as u32 * 7 + seed * 13 + v as u32 * 29) % 256) as u8)
                .collect();
            Image {
                height: h,
                width: w,
                data: ImageData::RgbU8(data),
            }
        })
        .collect();
    let state = (0..6)
        .map(|i| (i as f32 - 2.5) * 0.3 + seed as f32 * 0.01)
        .collect();
    let noise = (0..50 * 32)
        .map(|i| (((i as u32).wrapping_mul(2654435761) ^ seed) % 1000) as f32 / 500.0 - 1.0)
        .collect();
    Observation {
        images,
        state,
        prompt: None,
        tokens: Some(vec![5, 17, 42, (seed % 400) as i32 + 3]),
        noise: Some(noise),
        token_mask: None,
    }
}

fn expected(obs: &Observation) -> Vec<f32> {
    demo_policy().predict(obs).unwrap().actions
}

fn error_of(resp: &PredictResponse) -> (ErrorCode, &str) {
    (
        ErrorCode::try_from(resp.error_code).unwrap(),
        resp.error.as_str(),
    )
}

#[test]
fn ping_info_and_a_correct_chunk() {
    let server = Running::start(ServeOptions::default());
    let mut c = server.client();
    c.ping().unwrap();
    let info = c.info().unwrap();
    assert_eq!(info["arch"], "smolvla");
    assert_eq!(info["n_images"], 2);
    assert_eq!(info["chunk_size"], 50);
    let obs = observation(1);
    let resp = c.predict(&obs).unwrap();
    assert_eq!((resp.chunk_size, resp.action_dim), (50, 6));
    assert_eq!(
        resp.action_chunk,
        expected(&obs),
        "served chunk differs from a direct predict"
    );
    assert!(resp.latency_ms_total >= resp.latency_ms_inference && resp.latency_ms_inference > 0.0);
    // A text prompt, tokenized by the server with the GGUF's tokenizer.
    let prompted = Observation {
        tokens: None,
        prompt: Some("pick up the red cube".into()),
        ..obs
    };
    let resp = c.predict(&prompted).unwrap();
    assert_eq!(resp.action_chunk, expected(&prompted));
    let stats = server.stop();
    assert_eq!(
        stats,
        ServeStats {
            predicted: 2,
            errors: 0
        }
    );
}

/// Instruction lengths as lerobot reads them: none (the demo's SmolVLA: the empty task), and
/// a prompt past `tokenizer_max_length` cut where lerobot's tokenizer cuts it, with a warning
/// in the reply; both the chunk of a direct predict.
#[test]
fn instructions_are_read_as_the_reference_reads_them() {
    let server = Running::start(ServeOptions::default());
    let mut c = server.client();
    let none = Observation {
        tokens: None,
        ..observation(4)
    };
    let resp = c.predict(&none).unwrap();
    assert!(
        resp.error.is_empty() && resp.warnings.is_empty(),
        "{resp:?}"
    );
    assert_eq!(resp.action_chunk, expected(&none));
    let long = Observation {
        prompt: Some("pick up the red cube and then the blue one ".repeat(20)),
        ..none
    };
    let resp = c.predict(&long).unwrap();
    assert_eq!(resp.action_chunk, expected(&long));
    assert_eq!(resp.warnings.len(), 1, "{:?}", resp.warnings);
    assert!(
        resp.warnings[0].contains("cut to the first 16 (tokenizer_max_length)"),
        "{}",
        resp.warnings[0]
    );
}

#[test]
fn a_req_socket_client_works() {
    let server = Running::start(ServeOptions::default());
    let ctx = zmq::Context::new();
    let req = ctx.socket(zmq::REQ).unwrap();
    req.set_rcvtimeo(TIMEOUT_MS as i32).unwrap();
    req.connect(&server.addr).unwrap();
    let obs = observation(2);
    let mut msg = request_from(&obs);
    msg.request_id = 77;
    req.send(msg.encode_to_vec(), 0).unwrap();
    let resp = PredictResponse::decode(req.recv_bytes(0).unwrap().as_slice()).unwrap();
    assert_eq!(resp.error, "");
    assert_eq!(resp.request_id, 77);
    assert_eq!(resp.action_chunk, expected(&obs));
}

/// vla.cpp's newest fields: padded `lang_tokens` with `attention_mask` give the chunk of the
/// ids alone; `reset_memory` changes nothing (every arch here is stateless).
#[test]
fn vlacpp_attention_mask_and_reset_memory() {
    let server = Running::start(ServeOptions::default());
    let ctx = zmq::Context::new();
    let req = ctx.socket(zmq::REQ).unwrap();
    req.set_rcvtimeo(TIMEOUT_MS as i32).unwrap();
    req.connect(&server.addr).unwrap();
    let obs = observation(3);
    let mut msg = request_from(&obs);
    let n = msg.lang_tokens.len();
    msg.lang_tokens.extend([0; 5]);
    msg.attention_mask = [vec![1; n], vec![0; 5]].concat();
    msg.reset_memory = true;
    req.send(msg.encode_to_vec(), 0).unwrap();
    let resp = PredictResponse::decode(req.recv_bytes(0).unwrap().as_slice()).unwrap();
    assert_eq!(resp.error, "");
    assert_eq!(resp.action_chunk, expected(&obs));
}

/// Each bad request gets an error reply with its code and a message naming the problem,
/// and the server keeps serving.
#[test]
fn bad_requests_get_clear_errors() {
    let server = Running::start(ServeOptions::default());
    let mut c = server.client();
    let good = request_from(&observation(3));
    let with = |f: &dyn Fn(&mut PredictRequest)| {
        let mut r = good.clone();
        f(&mut r);
        r
    };
    let bad = ErrorCode::BadRequest;
    // A real JPEG whose frame header (SOF0: marker, length, precision, height, width) claims
    // 4000x3000: it is refused before any pixel is decoded.
    let mut huge_jpeg = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/rgb-28x20.jpg"
    ))
    .unwrap();
    let sof = huge_jpeg
        .windows(2)
        .position(|w| w == [0xff, 0xc0])
        .unwrap();
    huge_jpeg[sof + 5..sof + 9].copy_from_slice(&[0x0b, 0xb8, 0x0f, 0xa0]);
    let cases: Vec<(&str, PredictRequest, ErrorCode, &str)> = vec![
        ("no images", with(&|r| r.images.clear()), bad, "0 views"),
        (
            "100k empty images (refused before decoding)",
            with(&|r| r.images = vec![Default::default(); 100_000]),
            bad,
            "images: 100000 views in the encoded request",
        ),
        (
            "a 12-megapixel JPEG",
            with(&|r| {
                r.images[0] = vla_server::proto::Image {
                    encoding: Encoding::Jpeg as i32,
                    height: 0,
                    width: 0,
                    data: huge_jpeg.clone(),
                }
            }),
            bad,
            "4000x3000 is more than",
        ),
        (
            "a 40 kB prompt",
            with(&|r| {
                r.lang_tokens.clear();
                r.prompt = vec![b'a'; 40_000];
            }),
            bad,
            "prompt: 40000 bytes",
        ),
        (
            "70k token ids",
            with(&|r| r.lang_tokens = vec![1; 70_000]),
            bad,
            "lang_tokens: 70004 bytes encoded",
        ),
        (
            "one image",
            with(&|r| {
                r.images.pop();
            }),
            bad,
            "this model takes 2",
        ),
        (
            "17 images",
            with(&|r| r.images = vec![r.images[0].clone(); 17]),
            bad,
            "expected 1..=16",
        ),
        (
            "short data",
            with(&|r| {
                r.images[0].data.pop();
            }),
            bad,
            "needs",
        ),
        (
            "huge declared size",
            with(&|r| {
                r.images[1].height = 8192;
                r.images[1].width = 8192;
            }),
            bad,
            "needs 201326592",
        ),
        (
            "too tall",
            with(&|r| r.images[0].height = 8193),
            bad,
            "height 8193",
        ),
        (
            "zero width",
            with(&|r| r.images[0].width = 0),
            bad,
            "width 0",
        ),
        (
            "bad encoding",
            with(&|r| r.images[0].encoding = 9),
            bad,
            "encoding 9",
        ),
        (
            "bad jpeg",
            with(&|r| r.images[0].encoding = Encoding::Jpeg as i32),
            bad,
            "JPEG",
        ),
        (
            "f32 out of range",
            with(&|r| {
                let (h, w) = (r.images[0].height, r.images[0].width);
                r.images[0].encoding = Encoding::F32Rgb01 as i32;
                r.images[0].data = (0..h * w * 3).flat_map(|_| 2.0f32.to_le_bytes()).collect();
            }),
            bad,
            "outside [0, 1]",
        ),
        (
            "17 token ids",
            with(&|r| r.lang_tokens = vec![1; 17]),
            bad,
            "17 tokens, more than this model's bound of 16",
        ),
        (
            "prompt and tokens",
            with(&|r| r.prompt = b"pick".to_vec()),
            bad,
            "not both",
        ),
        (
            "non-UTF-8 prompt",
            with(&|r| {
                r.lang_tokens.clear();
                r.prompt = vec![0x66, 0xff, 0xfe];
            }),
            bad,
            "UTF-8",
        ),
        (
            "token out of range",
            with(&|r| r.lang_tokens[0] = 100_000),
            bad,
            "token",
        ),
        (
            "negative token",
            with(&|r| r.lang_tokens[0] = -1),
            bad,
            "token",
        ),
        (
            "too many tokens",
            with(&|r| r.lang_tokens = vec![4; 17]),
            bad,
            "tokens",
        ),
        (
            "attention_mask length",
            with(&|r| r.attention_mask = vec![1; r.lang_tokens.len() + 1]),
            bad,
            "attention_mask[4] is 1 past the 4 lang_tokens",
        ),
        (
            "attention_mask value",
            with(&|r| r.attention_mask = vec![1, 2, 0, 0]),
            bad,
            "attention_mask[1] is 2",
        ),
        (
            "attention_mask hole",
            with(&|r| r.attention_mask = vec![1, 0, 1, 0]),
            bad,
            "a token mask with hidden ids",
        ),
        (
            "attention_mask short",
            with(&|r| r.attention_mask = vec![1; r.lang_tokens.len() - 1]),
            bad,
            "attention_mask: 3 values for 4 lang_tokens",
        ),
        (
            "attention_mask all padding",
            with(&|r| r.attention_mask = vec![0; 4]),
            bad,
            "marks no id as real",
        ),
        (
            "state length",
            with(&|r| r.state.push(0.0)),
            bad,
            "state: 7 values",
        ),
        (
            "state NaN",
            with(&|r| r.state[2] = f32::NAN),
            bad,
            "state[2]",
        ),
        (
            "noise length",
            with(&|r| r.noise.truncate(10)),
            bad,
            "noise: 10 values",
        ),
        (
            "precomputed embeddings",
            with(&|r| r.precomputed_img_emb = vec![0.0; 4]),
            ErrorCode::Unsupported,
            "precomputed",
        ),
        (
            "unknown control",
            with(&|r| r.control = 9),
            bad,
            "control 9",
        ),
    ];
    for (name, req, code, needle) in cases {
        let resp = c.call(req).unwrap();
        let (got_code, msg) = error_of(&resp);
        assert_eq!(got_code, code, "{name}: {msg}");
        assert!(
            msg.contains(needle),
            "{name}: {msg:?} does not mention {needle:?}"
        );
        assert!(
            resp.action_chunk.is_empty(),
            "{name}: an error reply carries only the error"
        );
    }

    // Frames that are not one PredictRequest.
    let deadline = || Instant::now() + Duration::from_millis(TIMEOUT_MS);
    for (name, frames, needle) in [
        (
            "garbage",
            vec![&[0xffu8, 0xff, 0xff, 0x0f][..]],
            "malformed PredictRequest",
        ),
        (
            "truncated",
            vec![&good.encode_to_vec()[..40]],
            "malformed PredictRequest",
        ),
        (
            "multi-frame",
            vec![&b"a"[..], &b"b"[..], &b"c"[..]],
            "got 3",
        ),
        ("no body", vec![], "got 0"),
    ] {
        c.send_frames(&frames).unwrap();
        let body = c.recv_frames(deadline()).unwrap();
        let resp = PredictResponse::decode(body[0].as_slice()).unwrap();
        assert_eq!(error_of(&resp).0, ErrorCode::BadRequest, "{name}");
        assert!(resp.error.contains(needle), "{name}: {}", resp.error);
    }

    // Still serving, and correctly.
    let obs = observation(3);
    assert_eq!(c.predict(&obs).unwrap().action_chunk, expected(&obs));
}

#[test]
fn clients_get_their_own_answers_concurrently() {
    let server = Running::start(ServeOptions {
        queue: QueueMode::Fifo,
        max_queue: 64,
        ..ServeOptions::default()
    });
    let addr = server.addr.clone();
    let handles: Vec<_> = (0..8u32)
        .map(|k| {
            let addr = addr.clone();
            std::thread::spawn(move || {
                let mut c = Client::connect(&addr, TIMEOUT_MS).unwrap();
                (0..3)
                    .map(|j| {
                        c.predict(&observation(10 + k * 3 + j))
                            .unwrap()
                            .action_chunk
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let reference = demo_policy();
    let mut reference = reference;
    for (k, h) in handles.into_iter().enumerate() {
        for (j, chunk) in h.join().unwrap().into_iter().enumerate() {
            let want = reference
                .predict(&observation(10 + k as u32 * 3 + j as u32))
                .unwrap()
                .actions;
            assert_eq!(chunk, want, "client {k} request {j}");
        }
    }
    assert_eq!(server.stop().predicted, 24);
}

#[test]
fn latest_queue_supersedes_and_fifo_queue_fills() {
    // latest: a burst from one client; the newest is always served.
    let server = Running::start(ServeOptions {
        queue: QueueMode::Latest,
        max_queue: 16,
        ..ServeOptions::default()
    });
    let mut c = server.client();
    let ids: Vec<u64> = (1..=4).collect();
    for &id in &ids {
        let mut r = request_from(&observation(id as u32));
        r.request_id = id;
        c.send_frames(&[&r.encode_to_vec()]).unwrap();
    }
    let replies = collect(&mut c, ids.len());
    let last = &replies[&4];
    assert_eq!(last.error, "", "the newest request must be served");
    let superseded = replies
        .values()
        .filter(|r| error_of(r).0 == ErrorCode::Superseded)
        .count();
    assert!(
        superseded >= 1,
        "a burst of 4 while busy supersedes at least one"
    );
    drop(server);

    // fifo with room for one pending request: the rest of a burst is refused, not lost.
    let server = Running::start(ServeOptions {
        queue: QueueMode::Fifo,
        max_queue: 1,
        ..ServeOptions::default()
    });
    let mut c = server.client();
    for id in 1..=5u64 {
        let mut r = request_from(&observation(id as u32));
        r.request_id = id;
        c.send_frames(&[&r.encode_to_vec()]).unwrap();
    }
    let replies = collect(&mut c, 5);
    assert_eq!(replies[&1].error, "");
    let full = replies
        .values()
        .filter(|r| error_of(r).0 == ErrorCode::QueueFull)
        .count();
    assert!((3..=4).contains(&full), "{full} queue-full replies");
    // Whether request 5 or an earlier one is refused depends on when the worker dequeues;
    // every reply is either a chunk or a clear queue-full error.
    for r in replies.values() {
        assert!(
            r.error.is_empty() || r.error.contains("queue full"),
            "{}",
            r.error
        );
    }
}

fn collect(c: &mut Client, n: usize) -> std::collections::HashMap<u64, PredictResponse> {
    let deadline = Instant::now() + Duration::from_millis(TIMEOUT_MS);
    (0..n)
        .map(|_| {
            let body = c.recv_frames(deadline).unwrap();
            let r = PredictResponse::decode(body[0].as_slice()).unwrap();
            (r.request_id, r)
        })
        .collect()
}

#[test]
fn a_client_vanishing_mid_request_does_not_stop_the_server() {
    let server = Running::start(ServeOptions::default());
    for seed in 0..3 {
        let mut gone = server.client();
        gone.send_frames(&[&request_from(&observation(seed)).encode_to_vec()])
            .unwrap();
        drop(gone);
    }
    let mut c = server.client();
    let obs = observation(9);
    assert_eq!(c.predict(&obs).unwrap().action_chunk, expected(&obs));
    // PING and INFO need no model time and are answered in order with it.
    c.ping().unwrap();
    let stats = server.stop();
    assert!(stats.predicted >= 1);
}

#[test]
fn soak_keeps_memory_steady() {
    let server = Running::start(ServeOptions::default());
    let mut c = server.client();
    let mut bad = request_from(&observation(0));
    bad.images.pop();
    let mut round = |k: u32| {
        let resp = c.predict(&observation(k)).unwrap();
        assert_eq!(resp.action_chunk.len(), 300);
        assert_ne!(c.call(bad.clone()).unwrap().error, "");
    };
    for k in 0..30 {
        round(k);
    }
    let before = rss_kib();
    for k in 0..300 {
        round(k);
    }
    let after = rss_kib();
    // Leaking one request's buffers (~21 KB of images and noise) would add ~6 MiB over 300.
    assert!(
        after < before + 4 * 1024,
        "RSS grew from {before} KiB to {after} KiB over 300 requests"
    );
    let stats = server.stop();
    assert_eq!(stats.predicted, 330);
    assert_eq!(stats.errors, 330);
}

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn control_requests_never_touch_the_model() {
    // An INFO request carries no images: it must not be validated as a predict.
    let server = Running::start(ServeOptions::default());
    let mut c = server.client();
    let resp = c
        .call(PredictRequest {
            control: Control::Info as i32,
            request_id: 5,
            ..Default::default()
        })
        .unwrap();
    assert_eq!(resp.request_id, 5);
    let info: serde_json::Value = serde_json::from_str(&resp.info_json).unwrap();
    assert_eq!(info["state_dim"], 6);
    assert_eq!(server.stop(), ServeStats::default());
}

/// A converted model keeps lerobot's camera names: INFO lists them, a request may name its
/// images in any order (full names or the part after `observation.images.`) and gets the
/// chunk of the model's order; names that are not the model's are refused naming both lists,
/// and names are refused by a model whose file keeps none (the demo).
#[test]
fn named_images_are_put_in_the_model_order() {
    let ckpt =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/smolvla-tiny");
    let opts = vla::convert::smolvla::Options {
        positions: Some(vla::modules::vision::PatchPositions::Shifted),
        ..Default::default()
    };
    let converted = vla::convert::smolvla::convert(&ckpt, &opts, &mut |_, _, _| {}).unwrap();
    let file = GgufFile::from_bytes(converted.writer.to_bytes().unwrap()).unwrap();
    let policy = vla::models::from_gguf(file, &RuntimeOptions::default()).unwrap();
    let names = ["observation.images.cam0", "observation.images.cam1"];
    let info = policy.info().clone();
    assert_eq!(info.camera_names, names);
    let server = Running::serve(policy, ServeOptions::default());
    let mut c = server.client();
    assert_eq!(c.info().unwrap()["camera_names"], serde_json::json!(names));

    let mut obs = observation(9);
    obs.tokens = Some(vec![5, 17]);
    obs.state = vec![0.1; info.state_dim];
    obs.noise = Some(obs.noise.unwrap()[..info.chunk_size * info.max_action_dim].to_vec());
    let req = request_from(&obs);
    let ask = |c: &mut Client, r: &PredictRequest| c.call(r.clone()).unwrap();
    let ordered = ask(&mut c, &req);
    assert_eq!(ordered.error, "");
    let mut swapped = req.clone();
    swapped.images.swap(0, 1);
    swapped.image_names = vec!["cam1".into(), names[0].into()];
    let got = ask(&mut c, &swapped);
    assert_eq!(
        (got.error.as_str(), &got.action_chunk),
        ("", &ordered.action_chunk)
    );
    // The same swap unnamed is another observation, another chunk.
    swapped.image_names.clear();
    assert_ne!(ask(&mut c, &swapped).action_chunk, ordered.action_chunk);
    for bad in [vec!["cam0", "cam0"], vec!["cam0", "top"], vec!["cam0"]] {
        let mut r = req.clone();
        r.image_names = bad.iter().map(|s| s.to_string()).collect();
        let resp = ask(&mut c, &r);
        assert!(
            resp.error.contains("are not this model's cameras")
                && resp.error.contains("observation.images.cam1"),
            "{bad:?}: {}",
            resp.error
        );
    }
    drop(server);

    let demo = Running::start(ServeOptions::default());
    let mut r = request_from(&observation(1));
    r.image_names = vec!["a".into(), "b".into()];
    let resp = demo.client().call(r).unwrap();
    assert!(
        resp.error.contains("keeps no camera names"),
        "{}",
        resp.error
    );
}
