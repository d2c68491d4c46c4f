//! The host's error type for guest-facing operations. It maps one-to-one onto the WIT
//! `error` record (kind + message), so a guest can branch on the kind.

use crate::plugin::call::PluginCallError;
use crate::validate::ValidationError;
use mxhost_plugin_abi::Status;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    InvalidArgument,
    Unsupported,
    LimitExceeded,
    RejectedByGuard,
    BackendFailure,
    BadHandle,
}

#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct OpError {
    pub kind: ErrorKind,
    pub message: String,
}

impl OpError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        OpError {
            kind,
            message: message.into(),
        }
    }
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidArgument, message)
    }
    pub fn unsupported(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unsupported, message)
    }
}

impl From<ValidationError> for OpError {
    fn from(e: ValidationError) -> Self {
        OpError::invalid(e.0)
    }
}

impl From<PluginCallError> for OpError {
    fn from(e: PluginCallError) -> Self {
        let kind = match e.status {
            Status::InvalidArgument => ErrorKind::InvalidArgument,
            Status::Unsupported => ErrorKind::Unsupported,
            Status::Ok | Status::BackendError | Status::Panic => ErrorKind::BackendFailure,
        };
        OpError::new(kind, e.to_string())
    }
}

pub type OpResult<T> = Result<T, OpError>;
