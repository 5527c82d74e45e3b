//! The serve loop: one ROUTER socket, one worker thread that owns the policy.
//!
//! The loop thread does all socket I/O (zmq sockets are single-threaded): it decodes and
//! checks each request, answers ping/info and bad requests at once, queues predict jobs and
//! hands them to the worker a batch at a time (one job unless [`ServeOptions::max_batch`] is
//! above 1). The worker runs a batch as one [`Policy::predict_batch`] and sends each finished
//! reply back over an inproc PAIR socket, so the loop wakes on it as on a client message.

use crate::proto::{Control, ErrorCode, PredictRequest, PredictResponse};
use crate::{request, Error, Result};
use prost::Message;
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use vla::policy::{ActionChunk, Observation, Policy, PolicyInfo};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueMode {
    /// One pending request per client: a newer one replaces it (answered "superseded").
    Latest,
    /// Every request, in arrival order.
    Fifo,
}

/// How the serve loop queues requests and hands them to the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServeOptions {
    pub queue: QueueMode,
    /// Pending (not yet started) requests beyond which new ones are answered "queue full".
    pub max_queue: usize,
    /// Queued requests the worker takes at once and runs as one [`Policy::predict_batch`]
    /// (several clients' requests in one batched graph): 1 runs each alone. At most
    /// `max_queue` and [`MAX_BATCH`].
    pub max_batch: usize,
    /// While the worker is idle and fewer than `max_batch` requests are queued, how long the
    /// oldest may wait for more to fill the batch; zero runs what is queued at once. At most
    /// [`MAX_BATCH_WAIT`]; unused with `max_batch` 1.
    pub batch_wait: Duration,
}

/// The largest [`ServeOptions::max_batch`].
pub const MAX_BATCH: usize = 256;
/// The longest [`ServeOptions::batch_wait`].
pub const MAX_BATCH_WAIT: Duration = Duration::from_secs(10);

impl ServeOptions {
    /// Checks the values against each other and their bounds; the messages name the config
    /// keys (`max_queue`, `max_batch`, `batch_wait_ms`).
    pub fn validate(&self) -> Result<()> {
        if self.max_queue == 0 {
            return Err(Error::Config("max_queue 0: expected at least 1".into()));
        }
        if !(1..=MAX_BATCH).contains(&self.max_batch) {
            return Err(Error::Config(format!(
                "max_batch {}: expected 1..={MAX_BATCH} (1: each request runs alone)",
                self.max_batch
            )));
        }
        if self.max_batch > self.max_queue {
            return Err(Error::Config(format!(
                "max_batch {} is more than max_queue {}: a batch is taken from the queued \
                 requests, so raise max_queue (--max-queue) to at least {}",
                self.max_batch, self.max_queue, self.max_batch
            )));
        }
        if self.batch_wait > MAX_BATCH_WAIT {
            return Err(Error::Config(format!(
                "batch_wait_ms {}: expected 0..={}",
                self.batch_wait.as_millis(),
                MAX_BATCH_WAIT.as_millis()
            )));
        }
        Ok(())
    }
}

impl std::fmt::Display for QueueMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            QueueMode::Latest => "latest",
            QueueMode::Fifo => "fifo",
        })
    }
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            queue: QueueMode::Latest,
            max_queue: 16,
            max_batch: 1,
            batch_wait: Duration::ZERO,
        }
    }
}

/// Requests larger than this are dropped by ZeroMQ before they reach us (16 views of
/// 8192x8192 f32 would be 13 GB): 512 MiB.
pub const MAX_MESSAGE_BYTES: i64 = 512 << 20;
/// Messages taken from the socket between two looks at finished work and the stop flag.
const MAX_MESSAGES_PER_TURN: usize = 64;
/// How often the loop looks at the stop flag while idle.
const POLL_MS: i64 = 100;

/// Counts reported when the loop ends.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServeStats {
    pub predicted: u64,
    pub errors: u64,
}

struct Job {
    reply_to: ReplyTo,
    obs: Observation,
    /// When its client's place in the queue was taken: a request that supersedes another
    /// keeps it, so a client sending faster than the batch wait is not held back for ever.
    queued: Instant,
}

/// Where a job's reply goes, and when its request arrived.
struct ReplyTo {
    /// The ROUTER envelope to answer to: identity, and the empty delimiter if the client sent one.
    envelope: Vec<Vec<u8>>,
    request_id: u64,
    received: Instant,
}

pub struct Server {
    router: zmq::Socket,
    /// Receives the worker's finished replies.
    done: zmq::Socket,
    jobs: Option<mpsc::Sender<Vec<Job>>>,
    worker: Option<JoinHandle<()>>,
    info: PolicyInfo,
    /// INFO's policy part ([`info_json`]), built once; each INFO adds the serving part.
    info_fields: serde_json::Map<String, serde_json::Value>,
    opts: ServeOptions,
    endpoint: String,
    /// Where in-process front ends connect a DEALER.
    inproc_endpoint: String,
    queue: VecDeque<Job>,
    /// Jobs handed to the worker whose replies have not come back: the loop hands it the
    /// next batch at 0.
    running: usize,
    /// Batches run so far, by size.
    batches: BTreeMap<usize, u64>,
    stats: ServeStats,
    // Dropped last: sockets above must close before the context terminates.
    ctx: zmq::Context,
}

impl Server {
    /// Binds `endpoint` (e.g. `tcp://*:5555`, or `tcp://127.0.0.1:*` for any free port) and
    /// starts the worker that owns `policy`.
    pub fn bind(policy: Box<dyn Policy>, endpoint: &str, opts: ServeOptions) -> Result<Server> {
        opts.validate()?;
        let ctx = zmq::Context::new();
        let router = ctx.socket(zmq::ROUTER)?;
        router.set_linger(1000)?;
        router.set_maxmsgsize(MAX_MESSAGE_BYTES)?;
        router.bind(endpoint).map_err(|e| {
            let hint = match endpoint.contains("://") {
                true => "",
                false => " (a ZeroMQ endpoint: tcp://HOST:PORT, e.g. tcp://127.0.0.1:5555)",
            };
            Error::Config(format!("cannot bind {endpoint}: {e}{hint}"))
        })?;
        let endpoint = match router.get_last_endpoint()? {
            Ok(s) => s,
            Err(_) => endpoint.to_owned(),
        };
        // Other front ends (openpi's websocket) send the same requests from inside the
        // process, to the same queue.
        let inproc_endpoint = format!("inproc://vla-requests-{:p}", &router);
        router.bind(&inproc_endpoint)?;
        // One inproc name per server, so several servers can live in one process (tests).
        let inproc = format!("inproc://vla-done-{:p}", &router);
        let done = ctx.socket(zmq::PAIR)?;
        done.bind(&inproc)?;
        let worker_done = ctx.socket(zmq::PAIR)?;
        worker_done.connect(&inproc)?;
        let info = policy.info().clone();
        let info_fields = info_fields(&info);
        let (tx, rx) = mpsc::channel::<Vec<Job>>();
        let worker = std::thread::Builder::new()
            .name("vla-worker".into())
            .spawn(move || work(policy, rx, worker_done))
            .map_err(|e| Error::Config(format!("cannot start the worker thread: {e}")))?;
        Ok(Server {
            router,
            done,
            jobs: Some(tx),
            worker: Some(worker),
            info,
            info_fields,
            opts,
            endpoint,
            inproc_endpoint,
            queue: VecDeque::new(),
            running: 0,
            batches: BTreeMap::new(),
            stats: ServeStats::default(),
            ctx,
        })
    }

    /// The bound endpoint, with the port resolved (`tcp://0.0.0.0:5555`).
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    pub fn info(&self) -> &PolicyInfo {
        &self.info
    }

    /// INFO's reply, as JSON: the policy's [`info_json`], the batching options
    /// (`max_batch`, `batch_wait_ms`) and the batch sizes run so far (`batches`:
    /// `{"SIZE": COUNT, ...}`).
    pub fn info_json(&self) -> String {
        let mut fields = self.info_fields.clone();
        fields.insert("max_batch".into(), self.opts.max_batch.into());
        fields.insert(
            "batch_wait_ms".into(),
            (self.opts.batch_wait.as_millis() as u64).into(),
        );
        fields.insert("batches".into(), serde_json::json!(self.batches));
        serde_json::Value::Object(fields).to_string()
    }

    /// The context and inproc endpoint an in-process front end connects a DEALER to: its
    /// requests join the same queue as the ZeroMQ clients'.
    pub fn inproc(&self) -> (zmq::Context, &str) {
        (self.ctx.clone(), &self.inproc_endpoint)
    }

    /// Serves until `stop` is set; then answers queued requests "shutting down", lets the
    /// running batch finish and returns.
    pub fn run(mut self, stop: &AtomicBool) -> Result<ServeStats> {
        // Shorter while the queue waits for a batch to fill, so it is dispatched on time.
        let mut timeout_ms = POLL_MS;
        while !stop.load(Ordering::Relaxed) {
            let (client, finished) = {
                let mut items = [
                    self.router.as_poll_item(zmq::POLLIN),
                    self.done.as_poll_item(zmq::POLLIN),
                ];
                match zmq::poll(&mut items, timeout_ms) {
                    Ok(_) => {}
                    Err(zmq::Error::EINTR) => continue,
                    Err(e) => return Err(e.into()),
                }
                (items[0].is_readable(), items[1].is_readable())
            };
            if finished {
                self.forward_finished()?;
            }
            if client {
                // A bounded batch, so a client that never stops sending cannot keep the loop
                // from forwarding replies, feeding the worker and seeing the stop flag.
                for _ in 0..MAX_MESSAGES_PER_TURN {
                    let Some(frames) = recv_nowait(&self.router)? else {
                        break;
                    };
                    self.on_message(frames)?;
                }
            }
            timeout_ms = match self.dispatch()? {
                // whole milliseconds, rounded up: the wait is over when the poll returns
                Some(wait) => (wait.as_micros().div_ceil(1000) as i64).clamp(1, POLL_MS),
                None => POLL_MS,
            };
        }
        self.shut_down()
    }

    fn on_message(&mut self, frames: Vec<Vec<u8>>) -> Result<()> {
        let (envelope, body) = split_envelope(frames);
        let [payload] = body.as_slice() else {
            let msg = format!(
                "expected one message frame after the envelope, got {}",
                body.len()
            );
            return self.reply(
                &envelope,
                &PredictResponse::error(0, ErrorCode::BadRequest, msg),
            );
        };
        if let Err(e) = request::check_encoded(payload) {
            return self.reply(&envelope, &error_response(0, &e));
        }
        let req = match PredictRequest::decode(payload.as_slice()) {
            Ok(r) => r,
            Err(e) => {
                let msg = format!("malformed PredictRequest ({} bytes): {e}", payload.len());
                return self.reply(
                    &envelope,
                    &PredictResponse::error(0, ErrorCode::BadRequest, msg),
                );
            }
        };
        let id = req.request_id;
        match Control::try_from(req.control) {
            Ok(Control::Ping) => self.reply(
                &envelope,
                &PredictResponse {
                    request_id: id,
                    ..Default::default()
                },
            ),
            Ok(Control::Info) => {
                let resp = PredictResponse {
                    request_id: id,
                    info_json: self.info_json(),
                    ..Default::default()
                };
                self.reply(&envelope, &resp)
            }
            Ok(Control::Predict) => match request::observation(&req, &self.info) {
                Ok(obs) => {
                    let now = Instant::now();
                    self.enqueue(Job {
                        reply_to: ReplyTo {
                            envelope,
                            request_id: id,
                            received: now,
                        },
                        obs,
                        queued: now,
                    })
                }
                Err(e) => self.reply(&envelope, &error_response(id, &e)),
            },
            Err(_) => {
                let msg = format!(
                    "control {}: expected PREDICT (0), PING (1) or INFO (2)",
                    req.control
                );
                self.reply(
                    &envelope,
                    &PredictResponse::error(id, ErrorCode::BadRequest, msg),
                )
            }
        }
    }

    fn enqueue(&mut self, mut job: Job) -> Result<()> {
        if self.opts.queue == QueueMode::Latest {
            if let Some(old) = self
                .queue
                .iter_mut()
                .find(|j| j.reply_to.envelope[0] == job.reply_to.envelope[0])
            {
                job.queued = old.queued;
                let old = std::mem::replace(old, job).reply_to;
                let msg = format!(
                    "superseded by a newer request from the same client (request {})",
                    old.request_id
                );
                return self.reply(
                    &old.envelope,
                    &PredictResponse::error(old.request_id, ErrorCode::Superseded, msg),
                );
            }
        }
        if self.queue.len() >= self.opts.max_queue {
            let msg = format!(
                "queue full ({} pending requests); retry later",
                self.queue.len()
            );
            let to = &job.reply_to;
            return self.reply(
                &to.envelope,
                &PredictResponse::error(to.request_id, ErrorCode::QueueFull, msg),
            );
        }
        self.queue.push_back(job);
        Ok(())
    }

    /// Hands the idle worker the next batch: up to `max_batch` jobs from the queue's front,
    /// in queue order. While fewer are queued and the oldest has waited less than
    /// `batch_wait`, it holds them back and returns how much longer to wait.
    fn dispatch(&mut self) -> Result<Option<Duration>> {
        let Some(tx) = &self.jobs else {
            return Ok(None);
        };
        let Some(oldest) = self.queue.front() else {
            return Ok(None);
        };
        if self.running > 0 {
            return Ok(None);
        }
        if self.queue.len() < self.opts.max_batch {
            let waited = oldest.queued.elapsed();
            if waited < self.opts.batch_wait {
                return Ok(Some(self.opts.batch_wait - waited));
            }
        }
        let n = self.queue.len().min(self.opts.max_batch);
        let batch: Vec<Job> = self.queue.drain(..n).collect();
        tx.send(batch)
            .map_err(|_| Error::Config("the worker thread has stopped".into()))?;
        self.running = n;
        *self.batches.entry(n).or_default() += 1;
        Ok(None)
    }

    /// Sends the worker's finished reply (envelope frames + payload) to its client.
    fn forward_finished(&mut self) -> Result<()> {
        while let Some(mut frames) = recv_nowait(&self.done)? {
            let ok = frames.pop().is_some_and(|flag| flag == [1]);
            match ok {
                true => self.stats.predicted += 1,
                false => self.stats.errors += 1,
            }
            // A client gone since it asked is dropped by ROUTER silently, as it should be.
            self.router.send_multipart(frames, 0)?;
            self.running = self.running.saturating_sub(1);
        }
        Ok(())
    }

    fn reply(&mut self, envelope: &[Vec<u8>], resp: &PredictResponse) -> Result<()> {
        if !resp.error.is_empty() {
            self.stats.errors += 1;
            // One line per refusal; a superseded request is the latest-queue's normal course.
            if resp.error_code == ErrorCode::Superseded as i32 {
                tracing::debug!("request {} superseded", resp.request_id);
            } else {
                tracing::warn!(
                    code = resp.error_code,
                    "refused request {}: {}",
                    resp.request_id,
                    resp.error
                );
            }
        }
        let mut frames = envelope.to_vec();
        frames.push(resp.encode_to_vec());
        self.router.send_multipart(frames, 0)?;
        Ok(())
    }

    fn shut_down(mut self) -> Result<ServeStats> {
        for job in std::mem::take(&mut self.queue) {
            let to = job.reply_to;
            let resp = PredictResponse::error(
                to.request_id,
                ErrorCode::ShuttingDown,
                "the server is shutting down",
            );
            self.reply(&to.envelope, &resp)?;
        }
        self.jobs = None; // the worker's loop ends once its channel closes
        while self.running > 0 {
            let mut items = [self.done.as_poll_item(zmq::POLLIN)];
            match zmq::poll(&mut items, POLL_MS) {
                Ok(_) | Err(zmq::Error::EINTR) => {}
                Err(e) => return Err(e.into()),
            }
            if self.worker.as_ref().is_some_and(|w| w.is_finished()) && !items[0].is_readable() {
                break; // the worker died mid-job; nothing will arrive
            }
            self.forward_finished()?;
        }
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
        Ok(self.stats)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.jobs = None;
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}

fn recv_nowait(socket: &zmq::Socket) -> Result<Option<Vec<Vec<u8>>>> {
    match socket.recv_multipart(zmq::DONTWAIT) {
        Ok(frames) => Ok(Some(frames)),
        Err(zmq::Error::EAGAIN) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// ROUTER frames are `[identity, (empty delimiter, from REQ or a DEALER that mimics it),
/// body...]`; the reply goes back with the same envelope.
fn split_envelope(mut frames: Vec<Vec<u8>>) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let n = if frames.len() >= 2 && frames[1].is_empty() {
        2
    } else {
        1
    };
    let body = frames.split_off(n.min(frames.len()));
    (frames, body)
}

fn error_response(request_id: u64, e: &Error) -> PredictResponse {
    let code = match e {
        Error::Request { code, .. } => *code,
        Error::Vla(vla::Error::InvalidArgument(_) | vla::Error::Shape { .. }) => {
            ErrorCode::BadRequest
        }
        Error::Vla(vla::Error::NotImplemented { .. }) => ErrorCode::Unsupported,
        _ => ErrorCode::Internal,
    };
    PredictResponse::error(request_id, code, e.to_string())
}

/// The worker: runs each batch as one predict and sends each job's
/// `[envelope..., reply, ok flag]` back, in batch order.
fn work(mut policy: Box<dyn Policy>, batches: mpsc::Receiver<Vec<Job>>, done: zmq::Socket) {
    while let Ok(batch) = batches.recv() {
        let (reply_to, obs): (Vec<ReplyTo>, Vec<Observation>) =
            batch.into_iter().map(|j| (j.reply_to, j.obs)).unzip();
        let t0 = Instant::now();
        let outcome =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match obs.as_slice() {
                [one] => vec![policy.predict(one)],
                all => policy.predict_batch(all),
            }));
        let inference_ms = ms(t0.elapsed());
        drop(obs);
        if reply_to.len() > 1 {
            tracing::debug!("batch of {}: {inference_ms:.1} ms", reply_to.len());
        }
        let panicked = outcome.is_err();
        let mut results = outcome.unwrap_or_default().into_iter();
        for to in reply_to {
            let resp = match results.next() {
                Some(Ok(chunk)) => chunk_response(&to, chunk, inference_ms),
                Some(Err(e)) => error_response(to.request_id, &Error::Vla(e)),
                None if panicked => {
                    tracing::error!("the model panicked on request {}", to.request_id);
                    PredictResponse::error(
                        to.request_id,
                        ErrorCode::Internal,
                        "internal error: the model panicked",
                    )
                }
                None => PredictResponse::error(
                    to.request_id,
                    ErrorCode::Internal,
                    "internal error: the model returned no result for this request",
                ),
            };
            if resp.error.is_empty() {
                tracing::debug!("request {}: {:.1} ms", to.request_id, resp.latency_ms_total);
            } else {
                tracing::warn!("request {} failed: {}", to.request_id, resp.error);
            }
            let ok = resp.error.is_empty() as u8;
            let mut frames = to.envelope;
            frames.push(resp.encode_to_vec());
            frames.push(vec![ok]);
            if done.send_multipart(frames, 0).is_err() {
                return; // the loop is gone
            }
        }
    }
}

/// The reply carrying `chunk`: the model call's time is its batch's, the total its own
/// request's, from receipt to now.
fn chunk_response(to: &ReplyTo, chunk: ActionChunk, inference_ms: f32) -> PredictResponse {
    PredictResponse {
        request_id: to.request_id,
        chunk_size: chunk.chunk_size as u32,
        action_dim: chunk.action_dim as u32,
        action_chunk: chunk.actions,
        latency_ms_inference: inference_ms,
        // 0 where the backend ran the predict as one submission (not separable)
        latency_ms_vision: chunk.times.vision_ms.unwrap_or(0.0),
        latency_ms_prefill: chunk.times.prefill_ms.unwrap_or(0.0),
        latency_ms_denoise: chunk.times.denoise_ms.unwrap_or(0.0),
        latency_ms_total: ms(to.received.elapsed()),
        warnings: chunk.warnings,
        ..Default::default()
    }
}

fn ms(d: Duration) -> f32 {
    d.as_secs_f32() * 1e3
}

/// The policy's part of the reply to an INFO request ([`Server::info_json`] adds the
/// serving options and counts).
pub fn info_json(info: &PolicyInfo) -> String {
    serde_json::Value::Object(info_fields(info)).to_string()
}

/// [`info_json`]'s fields.
fn info_fields(info: &PolicyInfo) -> serde_json::Map<String, serde_json::Value> {
    let serde_json::Value::Object(fields) = serde_json::json!({
        "arch": info.arch,
        "n_images": info.n_images,
        "camera_names": info.camera_names,
        "image_height": info.image_height,
        "image_width": info.image_width,
        "state_dim": info.state_dim,
        "max_state_dim": info.max_state_dim,
        "chunk_size": info.chunk_size,
        "action_rows": info.action_rows,
        "action_dim": info.action_dim,
        "max_action_dim": info.max_action_dim,
        "num_steps": info.num_steps,
        "param_count": info.param_count,
        "weight_dtypes": info.weight_dtypes,
        "backend": info.backend,
        "memory_bytes": info.memory_bytes,
        "activation_bytes": info.activation_bytes,
        "kv_bytes": info.kv_bytes,
        "scratch_bytes": info.scratch_bytes,
        "embodiment": info.embodiment,
        "n_action_steps": info.n_action_steps,
        "reads_instruction": info.reads_instruction,
        "placeholders": info.placeholders,
        "wrap_ids": info.wrap_ids,
        "noise_shape": info.noise_dims(),
        "image_sizes": info.frame_sizes(),
        "window": info.window,
        "server": concat!("vla-server ", env!("CARGO_PKG_VERSION")),
    }) else {
        unreachable!("a json! object")
    };
    fields
}
