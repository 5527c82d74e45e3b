//! A Rust client for tests and `vla-bench --server`: a DEALER socket that frames requests
//! as REQ does (empty delimiter), so it works against any ROUTER server, and matches replies
//! by request id so a late reply to an abandoned request is skipped, not mistaken.

use crate::proto::{Control, Encoding, ErrorCode, Image, PredictRequest, PredictResponse};
use crate::{Error, Result};
use prost::Message;
use std::time::{Duration, Instant};
use vla::policy::{ImageData, Observation};

pub struct Client {
    socket: zmq::Socket,
    addr: String,
    timeout: Duration,
    next_id: u64,
    _ctx: zmq::Context,
}

impl Client {
    pub fn connect(addr: &str, timeout_ms: u64) -> Result<Client> {
        Self::connect_in(&zmq::Context::new(), addr, timeout_ms)
    }

    /// [`Client::connect`] in the context `ctx`: the one an `inproc://` endpoint lives in
    /// (a front end inside the server's process).
    pub fn connect_in(ctx: &zmq::Context, addr: &str, timeout_ms: u64) -> Result<Client> {
        let socket = ctx.socket(zmq::DEALER)?;
        socket.set_linger(0)?;
        socket.connect(addr)?;
        Ok(Client {
            socket,
            addr: addr.into(),
            timeout: Duration::from_millis(timeout_ms),
            next_id: 1,
            _ctx: ctx.clone(),
        })
    }

    /// Sends `req` (with a fresh request id when it has none) and waits for its reply.
    /// Error replies are returned as replies; see [`Client::predict`] for the checked form.
    pub fn call(&mut self, mut req: PredictRequest) -> Result<PredictResponse> {
        if req.request_id == 0 {
            req.request_id = self.next_id;
            self.next_id += 1;
        }
        self.send_frames(&[&req.encode_to_vec()])?;
        let deadline = Instant::now() + self.timeout;
        loop {
            let payload = self.recv_frames(deadline)?.pop().unwrap_or_default();
            let resp = PredictResponse::decode(payload.as_slice())
                .map_err(|e| Error::Reply(e.to_string()))?;
            // Request id 0: the server could not read our request, so it could not echo the id.
            if resp.request_id == req.request_id || (resp.request_id == 0 && !resp.error.is_empty())
            {
                return Ok(resp);
            }
        }
    }

    /// Predicts one chunk; an error reply becomes [`Error::Remote`].
    pub fn predict(&mut self, obs: &Observation) -> Result<PredictResponse> {
        checked(self.call(request_from(obs))?)
    }

    pub fn ping(&mut self) -> Result<()> {
        checked(self.call(PredictRequest {
            control: Control::Ping as i32,
            ..Default::default()
        })?)
        .map(|_| ())
    }

    /// The server's INFO reply (arch, image count and size, dims, backend...).
    pub fn info(&mut self) -> Result<serde_json::Value> {
        let resp = checked(self.call(PredictRequest {
            control: Control::Info as i32,
            ..Default::default()
        })?)?;
        serde_json::from_str(&resp.info_json).map_err(|e| Error::Reply(format!("info_json: {e}")))
    }

    /// Sends raw body frames after the empty delimiter (tests of malformed input).
    pub fn send_frames(&mut self, body: &[&[u8]]) -> Result<()> {
        let mut frames: Vec<&[u8]> = vec![b""];
        frames.extend_from_slice(body);
        self.socket.send_multipart(frames, 0)?;
        Ok(())
    }

    /// The body frames of the next message, waiting until `deadline`.
    pub fn recv_frames(&mut self, deadline: Instant) -> Result<Vec<Vec<u8>>> {
        let left = deadline.saturating_duration_since(Instant::now());
        if self.socket.poll(zmq::POLLIN, left.as_millis() as i64)? == 0 {
            return Err(Error::Timeout {
                addr: self.addr.clone(),
                timeout_ms: self.timeout.as_millis() as u64,
            });
        }
        let mut frames = self.socket.recv_multipart(0)?;
        if frames.first().is_some_and(|f| f.is_empty()) {
            frames.remove(0);
        }
        Ok(frames)
    }
}

fn checked(resp: PredictResponse) -> Result<PredictResponse> {
    match resp.error.is_empty() {
        true => Ok(resp),
        false => Err(Error::Remote {
            code: ErrorCode::try_from(resp.error_code).unwrap_or(ErrorCode::Internal),
            message: resp.error,
        }),
    }
}

/// The wire form of an observation.
pub fn request_from(obs: &Observation) -> PredictRequest {
    let images = obs
        .images
        .iter()
        .map(|img| {
            let (encoding, data) = match &img.data {
                ImageData::RgbU8(b) => (Encoding::RgbU8, b.clone()),
                ImageData::RgbF32(v) => (
                    Encoding::F32Rgb01,
                    v.iter().flat_map(|x| x.to_le_bytes()).collect(),
                ),
            };
            Image {
                encoding: encoding as i32,
                height: img.height as u32,
                width: img.width as u32,
                data,
            }
        })
        .collect();
    PredictRequest {
        images,
        lang_tokens: obs.tokens.clone().unwrap_or_default(),
        state: obs.state.clone(),
        noise: obs.noise.clone().unwrap_or_default(),
        prompt: obs.prompt.clone().unwrap_or_default().into_bytes(),
        ..Default::default()
    }
}
