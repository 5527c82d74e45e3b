//! vla-server: serves one loaded [`vla::policy::Policy`] over ZeroMQ with vla.cpp's
//! protobuf wire protocol (`proto/vla.proto`, `docs/PROTOCOL.md`) and openpi's websocket
//! protocol (`openpi`), plus a Rust client.

pub mod client;
pub mod config;
pub mod error;
pub mod openpi;
pub mod proto;
pub mod request;
pub mod serve;

pub use error::{Error, Result};
