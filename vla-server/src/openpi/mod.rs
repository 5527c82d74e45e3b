//! openpi's websocket protocol (`openpi_client.WebsocketClientPolicy`), beside the ZeroMQ
//! endpoint: on connect the server sends a msgpack metadata map (INFO's fields); each binary
//! message is an observation map ([`keys::KeyMap`] says where the cameras, state and prompt
//! are), answered by a msgpack map with `actions` (a float32 `[chunk, action_dim]` array) and
//! `server_timing` / `policy_timing` in ms; a refused observation is answered by a text
//! message, as openpi's server does, and the connection stays open.
//!
//! Each connection is a thread with a ZeroMQ DEALER on the server's inproc endpoint: its
//! observations become the `PredictRequest`s a ZeroMQ client sends, so they share the queue,
//! the worker and the one validation path.

pub mod keys;
pub mod msg;

use crate::client::Client;
use crate::proto::PredictResponse;
use crate::{Error, Result};
use keys::KeyMap;
use rmpv::Value;
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tungstenite::protocol::WebSocketConfig;
use tungstenite::Message;

/// Messages larger than this are refused by the websocket layer (a DROID observation of
/// three 1280x720 uint8 views is 8 MiB).
pub const MAX_MESSAGE_BYTES: usize = 64 << 20;
/// Open connections beyond this are closed at once (each holds a thread).
pub const MAX_CONNECTIONS: usize = 64;
/// A client must finish its handshake within this.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// A predict answered later than this is reported as an error (the worker is stuck).
const REPLY_TIMEOUT_MS: u64 = 600_000;

/// What every connection needs.
#[derive(Clone)]
pub struct Frontend {
    pub keys: KeyMap,
    /// `Authorization: Api-Key <key>` required when set.
    pub api_key: Option<String>,
    /// The metadata map sent on connect: INFO's fields ([`metadata`]).
    pub metadata: Vec<u8>,
    pub ctx: zmq::Context,
    /// The server's inproc endpoint.
    pub endpoint: String,
}

/// The metadata map of INFO's JSON `info_json`, as msgpack.
pub fn metadata(info_json: &str) -> Vec<u8> {
    let info: serde_json::Value = serde_json::from_str(info_json).unwrap_or_default();
    msg::encode(&msg::from_json(&info))
}

/// Listens on `addr` (HOST:PORT; port 0 picks one) until `stop`; returns the bound address.
pub fn spawn(addr: &str, front: Frontend, stop: Arc<AtomicBool>) -> Result<std::net::SocketAddr> {
    let listener = TcpListener::bind(addr).map_err(|e| {
        let hint = match addr.contains("://") {
            true => " (HOST:PORT, without a scheme, e.g. 0.0.0.0:8000)",
            false => "",
        };
        Error::Config(format!(
            "cannot listen on {addr} for openpi clients: {e}{hint}"
        ))
    })?;
    let local = listener
        .local_addr()
        .map_err(|e| Error::Config(format!("openpi listener: {e}")))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| Error::Config(format!("openpi listener: {e}")))?;
    let open = Arc::new(AtomicUsize::new(0));
    std::thread::Builder::new()
        .name("vla-openpi".into())
        .spawn(move || accept_loop(listener, front, stop, open))
        .map_err(|e| Error::Config(format!("cannot start the openpi listener: {e}")))?;
    Ok(local)
}

fn accept_loop(
    listener: TcpListener,
    front: Frontend,
    stop: Arc<AtomicBool>,
    open: Arc<AtomicUsize>,
) {
    while !stop.load(Ordering::Relaxed) {
        let stream = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
            Err(e) => {
                tracing::warn!("openpi: accept failed: {e}");
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        let peer = stream.peer_addr().map_or("?".into(), |a| a.to_string());
        if open.load(Ordering::Relaxed) >= MAX_CONNECTIONS {
            tracing::warn!("openpi: {peer} refused: {MAX_CONNECTIONS} connections are open");
            continue; // dropped: closed
        }
        open.fetch_add(1, Ordering::Relaxed);
        let (front, open) = (front.clone(), Arc::clone(&open));
        let spawned = std::thread::Builder::new()
            .name("vla-openpi-conn".into())
            .spawn(move || {
                if let Err(e) = serve_connection(stream, &front) {
                    tracing::debug!("openpi: {peer}: {e}");
                }
                open.fetch_sub(1, Ordering::Relaxed);
            });
        if let Err(e) = spawned {
            tracing::warn!("openpi: cannot start a connection thread: {e}");
        }
    }
}

fn serve_connection(stream: TcpStream, front: &Frontend) -> Result<()> {
    let io = |e: std::io::Error| Error::Config(format!("socket: {e}"));
    stream.set_nonblocking(false).map_err(io)?;
    stream
        .set_read_timeout(Some(HANDSHAKE_TIMEOUT))
        .map_err(io)?;
    let config = WebSocketConfig::default()
        .max_message_size(Some(MAX_MESSAGE_BYTES))
        .max_frame_size(Some(MAX_MESSAGE_BYTES));
    let check_key = |req: &Request,
                     resp: Response|
     -> std::result::Result<Response, ErrorResponse> {
        let Some(key) = &front.api_key else {
            return Ok(resp);
        };
        let given = req
            .headers()
            .get("authorization")
            .and_then(|v| v.to_str().ok());
        if given == Some(format!("Api-Key {key}").as_str()) {
            return Ok(resp);
        }
        let mut refusal = ErrorResponse::new(Some("Authorization: Api-Key <key> required".into()));
        *refusal.status_mut() = tungstenite::http::StatusCode::UNAUTHORIZED;
        Err(refusal)
    };
    let mut ws = tungstenite::accept_hdr_with_config(stream, check_key, Some(config))
        .map_err(|e| Error::Config(format!("websocket handshake: {e}")))?;
    ws.get_ref().set_read_timeout(None).map_err(io)?;
    let ws_err = |e: tungstenite::Error| Error::Config(format!("websocket: {e}"));

    ws.send(Message::binary(front.metadata.clone()))
        .map_err(ws_err)?;
    let mut client = Client::connect_in(&front.ctx, &front.endpoint, REPLY_TIMEOUT_MS)?;
    let mut prev_total_ms: Option<f64> = None;
    loop {
        let bytes = match ws.read().map_err(ws_err)? {
            Message::Binary(b) => b,
            Message::Text(_) => {
                send_error(&mut ws, "expected a binary msgpack observation, got text")?;
                continue;
            }
            Message::Close(_) => return Ok(()),
            _ => continue, // ping / pong: tungstenite answers pings
        };
        let t0 = Instant::now();
        let reply = predict(&mut client, front, &bytes);
        match reply {
            Ok(resp) => {
                let total = t0.elapsed().as_secs_f64() * 1e3;
                let out = response(&resp, total, prev_total_ms);
                ws.send(Message::binary(msg::encode(&out)))
                    .map_err(ws_err)?;
                prev_total_ms = Some(total);
            }
            // logged where it was refused: below for the observation's form, by the serve
            // loop for its contents
            Err(e) => send_error(&mut ws, &e.to_string())?,
        }
    }
}

fn send_error(ws: &mut tungstenite::WebSocket<TcpStream>, message: &str) -> Result<()> {
    ws.send(Message::text(message))
        .map_err(|e| Error::Config(format!("websocket: {e}")))
}

/// One observation through the server's queue: its reply, or why it was refused.
fn predict(client: &mut Client, front: &Frontend, bytes: &[u8]) -> Result<PredictResponse> {
    let req = msg::decode(bytes)
        .and_then(|obs| front.keys.request(&obs))
        .inspect_err(|e| tracing::warn!("openpi: refused observation: {e}"))?;
    let resp = client.call(req)?;
    if !resp.error.is_empty() {
        let code = crate::proto::ErrorCode::try_from(resp.error_code)
            .unwrap_or(crate::proto::ErrorCode::Internal);
        return Err(Error::Request {
            code,
            message: resp.error,
        });
    }
    Ok(resp)
}

/// openpi's reply: `actions`, and its timing maps in ms.
fn response(resp: &PredictResponse, total_ms: f64, prev_total_ms: Option<f64>) -> Value {
    let shape = [resp.chunk_size as usize, resp.action_dim as usize];
    let ms = |v: f32| Value::from(f64::from(v));
    let mut server = vec![(Value::from("infer_ms"), Value::from(total_ms))];
    if let Some(prev) = prev_total_ms {
        server.push((Value::from("prev_total_ms"), Value::from(prev)));
    }
    let mut out = vec![
        (
            Value::from("actions"),
            msg::f32_array(&resp.action_chunk, &shape),
        ),
        (Value::from("server_timing"), Value::Map(server)),
        (
            Value::from("policy_timing"),
            Value::Map(vec![
                (Value::from("infer_ms"), ms(resp.latency_ms_inference)),
                (Value::from("vision_ms"), ms(resp.latency_ms_vision)),
                (Value::from("prefill_ms"), ms(resp.latency_ms_prefill)),
                (Value::from("denoise_ms"), ms(resp.latency_ms_denoise)),
            ]),
        ),
    ];
    if !resp.warnings.is_empty() {
        let w = resp.warnings.iter().map(|s| Value::from(s.as_str()));
        out.push((Value::from("warnings"), Value::Array(w.collect())));
    }
    Value::Map(out)
}
