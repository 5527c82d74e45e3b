//! The crate's one error type.

use crate::proto::ErrorCode;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Vla(#[from] vla::Error),

    #[error("zmq: {0}")]
    Zmq(#[from] zmq::Error),

    /// A request this server refuses, with the code its reply carries.
    #[error("{message}")]
    Request { code: ErrorCode, message: String },

    /// A bad setting (command line, config file or environment).
    #[error("{0}")]
    Config(String),

    /// An error reply from a server, seen by the client.
    #[error("server error ({code:?}): {message}")]
    Remote { code: ErrorCode, message: String },

    #[error("no reply from {addr} within {timeout_ms} ms")]
    Timeout { addr: String, timeout_ms: u64 },

    #[error("malformed reply: {0}")]
    Reply(String),
}

impl Error {
    pub fn bad_request(message: impl Into<String>) -> Self {
        Error::Request {
            code: ErrorCode::BadRequest,
            message: message.into(),
        }
    }

    pub fn unsupported(message: impl Into<String>) -> Self {
        Error::Request {
            code: ErrorCode::Unsupported,
            message: message.into(),
        }
    }
}
