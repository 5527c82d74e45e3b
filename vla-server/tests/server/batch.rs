//! `max_batch`: the requests of several clients, queued together, run as one
//! `Policy::predict_batch`; each client gets its own chunk (the chunk its request gets alone)
//! or its own error, and INFO counts the batches by size.

use super::{demo_policy, error_of, observation, Running, TIMEOUT_MS};
use prost::Message;
use std::time::{Duration, Instant};
use vla::policy::{ActionChunk, Observation, Policy, PolicyInfo};
use vla_server::client::{request_from, Client};
use vla_server::proto::{ErrorCode, PredictRequest, PredictResponse};
use vla_server::serve::{ServeOptions, ServeStats};

fn batching(max_batch: usize, wait_ms: u64) -> ServeOptions {
    ServeOptions {
        max_batch,
        batch_wait: Duration::from_millis(wait_ms),
        ..ServeOptions::default()
    }
}

/// Sends each request from a client of its own, all at once (every client connected
/// first), and returns the replies in request order.
fn send_together(server: &Running, requests: &[PredictRequest]) -> Vec<PredictResponse> {
    let mut clients: Vec<Client> = requests.iter().map(|_| server.client()).collect();
    for c in &mut clients {
        c.ping().unwrap();
    }
    for (c, r) in clients.iter_mut().zip(requests) {
        c.send_frames(&[&r.encode_to_vec()]).unwrap();
    }
    let deadline = Instant::now() + Duration::from_millis(TIMEOUT_MS);
    clients
        .iter_mut()
        .map(|c| {
            let body = c.recv_frames(deadline).unwrap();
            PredictResponse::decode(body[0].as_slice()).unwrap()
        })
        .collect()
}

/// INFO's `batches`: `{"SIZE": COUNT}`.
fn batches(server: &Running) -> serde_json::Value {
    server.client().info().unwrap()["batches"].clone()
}

fn chunks_of(observations: &[Observation]) -> Vec<Vec<f32>> {
    let mut reference = demo_policy();
    observations
        .iter()
        .map(|o| reference.predict(o).unwrap().actions)
        .collect()
}

/// Three clients at once, room for four: the server waits `batch_wait` for a fourth, then
/// runs the three as one batch; each chunk is bit for bit the one its request gets alone.
#[test]
fn clients_requests_run_as_one_batch_with_their_own_chunks() {
    let server = Running::start(batching(4, 200));
    let info = server.client().info().unwrap();
    assert_eq!(
        (&info["max_batch"], &info["batch_wait_ms"], &info["batches"]),
        (&4.into(), &200.into(), &serde_json::json!({}))
    );
    let observations: Vec<Observation> = (0..3).map(|k| observation(40 + k)).collect();
    let requests: Vec<PredictRequest> = observations.iter().map(request_from).collect();
    let replies = send_together(&server, &requests);
    for (k, (resp, want)) in replies.iter().zip(chunks_of(&observations)).enumerate() {
        assert_eq!(resp.error, "", "client {k}");
        assert_eq!(
            resp.action_chunk, want,
            "client {k}: the batched chunk differs from its request's alone"
        );
        assert!(
            resp.latency_ms_total >= resp.latency_ms_inference && resp.latency_ms_inference > 0.0,
            "client {k}: {resp:?}"
        );
    }
    let batches = batches(&server);
    let sizes: Vec<usize> = batches
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.parse().unwrap())
        .collect();
    assert!(
        sizes.iter().any(|&n| n > 1),
        "no batch of more than one request ran: {batches}"
    );
    let ran: u64 = batches
        .as_object()
        .unwrap()
        .iter()
        .map(|(n, c)| n.parse::<u64>().unwrap() * c.as_u64().unwrap())
        .sum();
    assert_eq!(ran, 3, "every request runs once: {batches}");
    assert_eq!(
        server.stop(),
        ServeStats {
            predicted: 3,
            errors: 0
        }
    );
}

/// A request the model refuses (past its instruction bound: the loop's checks pass it) gets
/// its error in the batch; the others their chunks. A full batch runs without waiting.
#[test]
fn a_refused_request_in_a_batch_gets_its_error_and_the_others_their_chunks() {
    let wait = Duration::from_secs(5);
    let server = Running::start(ServeOptions {
        max_batch: 3,
        batch_wait: wait,
        ..ServeOptions::default()
    });
    let observations: Vec<Observation> = (0..3).map(|k| observation(50 + k)).collect();
    let mut requests: Vec<PredictRequest> = observations.iter().map(request_from).collect();
    requests[1].lang_tokens = vec![4; 17];
    let t0 = Instant::now();
    let replies = send_together(&server, &requests);
    let took = t0.elapsed();
    let want = chunks_of(&observations);
    for k in [0, 2] {
        assert_eq!(replies[k].error, "", "client {k}");
        assert_eq!(replies[k].action_chunk, want[k], "client {k}");
    }
    let (code, msg) = error_of(&replies[1]);
    assert_eq!(code, ErrorCode::BadRequest, "{msg}");
    assert!(
        msg.contains("17 tokens, more than this model's bound of 16"),
        "{msg}"
    );
    assert!(replies[1].action_chunk.is_empty());
    assert_eq!(batches(&server), serde_json::json!({"3": 1}));
    assert!(took < wait, "a full batch waited: {took:?} for 3 requests");
    assert_eq!(
        server.stop(),
        ServeStats {
            predicted: 2,
            errors: 1
        }
    );
}

/// The default (`max_batch` 1) runs each request alone, as before batching existed.
#[test]
fn by_default_each_request_runs_alone() {
    let server = Running::start(ServeOptions::default());
    let observations: Vec<Observation> = (0..3).map(|k| observation(60 + k)).collect();
    let requests: Vec<PredictRequest> = observations.iter().map(request_from).collect();
    let replies = send_together(&server, &requests);
    for (resp, want) in replies.iter().zip(chunks_of(&observations)) {
        assert_eq!(resp.action_chunk, want, "{}", resp.error);
    }
    let info = server.client().info().unwrap();
    assert_eq!(
        (&info["max_batch"], &info["batch_wait_ms"], &info["batches"]),
        (&1.into(), &0.into(), &serde_json::json!({"1": 3}))
    );
}

/// Delegates to the demo policy, but its batched predict panics.
struct PanicsInBatches(Box<dyn Policy>);

impl Policy for PanicsInBatches {
    fn info(&self) -> &PolicyInfo {
        self.0.info()
    }

    fn predict(&mut self, obs: &Observation) -> vla::Result<ActionChunk> {
        self.0.predict(obs)
    }

    fn predict_batch(&mut self, _: &[Observation]) -> Vec<vla::Result<ActionChunk>> {
        panic!("a batch")
    }
}

/// A model that panics on a batch: every request of the batch gets the internal error, and
/// the server goes on serving.
#[test]
fn a_panic_in_a_batch_answers_each_of_its_requests() {
    let server = Running::serve(
        Box::new(PanicsInBatches(demo_policy())),
        ServeOptions {
            max_batch: 2,
            batch_wait: Duration::from_secs(5),
            ..ServeOptions::default()
        },
    );
    let observations: Vec<Observation> = (0..2).map(|k| observation(70 + k)).collect();
    let requests: Vec<PredictRequest> = observations.iter().map(request_from).collect();
    for resp in send_together(&server, &requests) {
        let (code, msg) = error_of(&resp);
        assert_eq!(code, ErrorCode::Internal, "{msg}");
        assert!(msg.contains("the model panicked"), "{msg}");
    }
    // A batch of one is the policy's predict: served. (The lone request waits out the
    // batch wait for a second one; a short wait here.)
    drop(server);
    let server = Running::serve(Box::new(PanicsInBatches(demo_policy())), batching(2, 10));
    let obs = observation(72);
    let resp = server.client().predict(&obs).unwrap();
    assert_eq!(resp.action_chunk, chunks_of(&[obs])[0]);
}
