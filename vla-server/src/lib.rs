//! vla-server: serves one loaded [`vla::policy::Policy`] over ZeroMQ with vla.cpp's
//! protobuf wire protocol (`proto/vla.proto`, `docs/PROTOCOL.md`), plus a Rust client.

pub mod client;
pub mod config;
pub mod error;
pub mod proto;
pub mod request;
pub mod serve;

pub use error::{Error, Result};

/// The allocator of the binaries that link this library (vla-server, vla-bench): mimalloc
/// keeps freed pages for reuse, where glibc's malloc hands large blocks back to the kernel
/// and faults them in again on the next op (the cpu backend allocates each op's output;
/// SmolVLA base's f32 vision tower: 3077 -> 2793 ms on 2 cores).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
