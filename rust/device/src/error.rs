//! The one error type of Weir.
//!
//! Errors are `Clone` because a stream's first failure is sticky: every fence,
//! sync and read that covers it reports the same error.

use thiserror::Error;

use crate::element::ElementType;
use crate::info::BackendKind;

/// Everything that can go wrong in Weir.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum Error {
    /// The backend cannot be used on this machine (no driver, library or device).
    #[error("backend {backend} is unavailable: {reason}")]
    Unavailable { backend: BackendKind, reason: String },

    /// The backend does not support what was asked (for example a kernel without a source for it).
    #[error("unsupported on {backend}: {what}")]
    Unsupported { backend: BackendKind, what: String },

    /// An argument is malformed: wrong size, wrong type, aliasing, …
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// A range does not fit in its buffer: `size` elements at `offset`, as
    /// asked, in a buffer of `len` elements, all counted in `element`s.
    #[error("{size} {unit} at offset {offset} do not fit in a buffer of {len} {unit}", unit = element.unit())]
    OutOfRange { offset: u64, size: u64, len: u64, element: ElementType },

    /// A buffer or stream of one runtime was handed to another runtime.
    #[error("{0} belongs to another runtime")]
    ForeignHandle(&'static str),

    /// The runtime was closed.
    #[error("the runtime is closed")]
    Closed,

    /// The device (or, for the CPU backend, the host) could not provide the memory.
    #[error("out of {} memory allocating {bytes} bytes", if *host { "host" } else { "device" })]
    OutOfMemory { bytes: u64, host: bool },

    /// An op failed (on the device, or because a version it reads came from
    /// a failed op). What it writes carries the failure to its readers; its
    /// stream goes on with the work that does not depend on it.
    #[error("op failed on stream {stream}: {message}")]
    OpFailed { stream: u32, message: String },

    /// A backend call failed; `status` is the driver's, where it gave one.
    #[error("{backend} error: {message}")]
    Backend {
        backend: BackendKind,
        message: String,
        #[source]
        status: Option<DriverStatus>,
    },

    /// The device is lost for this runtime: a fault that poisons its context
    /// (on CUDA and HIP an illegal address, a trap, a launch failure), or
    /// the device itself went away. Every later call of the runtime fails
    /// with this error; `close()` still works. On CUDA the driver refuses
    /// the whole process from then on: restart it (see the README's table).
    #[error("the {backend} device is lost: {message}; close this runtime and open a new one")]
    DeviceLost {
        backend: BackendKind,
        message: String,
        #[source]
        status: Option<DriverStatus>,
    },

    /// The runtime's queue is full (see
    /// `RuntimeBuilder::queue_limit`),
    /// and the handle admitting does not wait
    /// (`Stream::without_waiting`): nothing
    /// was admitted. `Stream::room` resolves once there is room.
    #[error("the runtime's queue is full: {ops} ops and {bytes} host bytes queued (limit {} ops, {} bytes)", limit.ops, limit.host_bytes)]
    QueueFull { ops: u64, bytes: u64, limit: QueueLimit },

    /// Weir broke one of its own invariants: a bug to report, not bad input.
    #[error("internal error (a bug in Weir): {0}")]
    Internal(String),

    /// The wait was cancelled before the work completed.
    #[error("the wait was cancelled")]
    Cancelled,
}

/// How an op's failure begins when its cause is an input's failure.
const DEPENDENCY_FAILED: &str = "it reads a version written by a failed op";

impl Error {
    #[doc(hidden)]
    pub fn invalid(message: impl Into<String>) -> Self {
        Error::InvalidArgument(message.into())
    }

    /// The error of an op on `stream` that reads a version `cause` produced.
    /// Along a chain of such ops the message names the first failure once:
    /// wrapped again at every op, it grew with the chain (a megabyte after
    /// 16 000 ops, in quadratic time).
    #[doc(hidden)]
    pub fn dependency_failed(stream: u32, cause: &Error) -> Self {
        let message = match cause {
            Error::OpFailed { message, .. } if message.starts_with(DEPENDENCY_FAILED) => message.clone(),
            cause => format!("{DEPENDENCY_FAILED} ({cause})"),
        };
        Error::OpFailed { stream, message }
    }

    /// `self` as the failure of an op on `stream` (`what` names the op in the
    /// message, where given). An op's failure and a lost device stay as
    /// they are: they already say what failed.
    #[doc(hidden)]
    pub fn into_op_failure(self, stream: u32, what: Option<&str>) -> Self {
        match self {
            Error::OpFailed { .. } | Error::DeviceLost { .. } => self,
            other => {
                let message = what.map_or_else(|| other.to_string(), |what| format!("{what}: {other}"));
                Error::OpFailed { stream, message }
            }
        }
    }

    #[doc(hidden)]
    pub fn backend(backend: BackendKind, message: impl Into<String>) -> Self {
        Error::Backend { backend, message: message.into(), status: None }
    }

    /// True for [`Error::DeviceLost`]: the runtime that reported it is unusable.
    pub fn is_device_lost(&self) -> bool {
        matches!(self, Error::DeviceLost { .. })
    }

    #[doc(hidden)]
    pub fn internal(message: impl Into<String>) -> Self {
        Error::Internal(message.into())
    }

    /// Shorthand for [`Error::Unavailable`].
    pub fn unavailable(backend: BackendKind, reason: impl Into<String>) -> Self {
        Error::Unavailable { backend, reason: reason.into() }
    }

    /// Shorthand for [`Error::Unsupported`].
    pub fn unsupported(backend: BackendKind, what: impl Into<String>) -> Self {
        Error::Unsupported { backend, what: what.into() }
    }
}

/// The status code a driver call returned, as the driver names it: the
/// `source` of a backend error or a lost device.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{call} returned {name} ({code})")]
pub struct DriverStatus {
    /// The driver function that failed (`cuLaunchKernel`, `hipMemcpyAsync`, …).
    pub call: String,
    /// The driver's symbolic name of the status (`CUDA_ERROR_ILLEGAL_ADDRESS`).
    pub name: String,
    /// The numeric status (`CUresult`, `hipError_t`).
    pub code: i32,
}

/// Weir's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What a fence reports, as its parts (one per stream, and the failures
/// found at admission) bring it: the first failure, and how many ops failed
/// in all, so that a fence over several streams counts every one's.
#[derive(Debug, Clone)]
#[doc(hidden)]
pub struct Failures {
    first: Error,
    count: u64,
}

impl Failures {
    /// `count` failed ops, the first of which failed with `first`.
    #[doc(hidden)]
    pub fn new(first: Error, count: u64) -> Failures {
        Failures { first, count }
    }

    /// Adds `later`'s failures to these; the first stays the first.
    #[doc(hidden)]
    pub fn add(&mut self, later: Failures) {
        self.count += later.count;
    }

    /// Counts one more failed op; the first stays the first.
    #[doc(hidden)]
    pub fn count_one_more(&mut self) {
        self.count += 1;
    }

    /// The error a fence reports: the first failure, saying how many more
    /// ops failed.
    #[doc(hidden)]
    pub fn into_error(self) -> Error {
        match self.first {
            Error::OpFailed { stream, message } if self.count > 1 => {
                Error::OpFailed { stream, message: format!("{message} (and {} more failed ops)", self.count - 1) }
            }
            other => other,
        }
    }
}

/// One failure: an error that is no count of several.
impl From<Error> for Failures {
    fn from(error: Error) -> Failures {
        Failures::new(error, 1)
    }
}

/// How much work a runtime holds queued on the host before admission waits
/// (see `RuntimeBuilder::queue_limit`):
/// ops admitted and not yet run (CPU) or handed to the driver (CUDA, HIP,
/// wgpu), and the host bytes they hold (uploads' data).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueLimit {
    /// Ops queued at most; at least 1.
    pub ops: u64,
    /// Host bytes queued at most; at least 1. One upload larger than this
    /// is still admitted, once the queue is below the limit.
    pub host_bytes: u64,
}

impl QueueLimit {
    /// 65 536 ops and 256 MiB: far beyond what keeps any device busy (a
    /// CUDA issuing thread runs at most 1 024 ops ahead), and a few tens of
    /// MiB of queue bookkeeping at most.
    pub const DEFAULT: QueueLimit = QueueLimit { ops: 1 << 16, host_bytes: 256 << 20 };
}

impl Default for QueueLimit {
    fn default() -> Self {
        QueueLimit::DEFAULT
    }
}

/// What a caught panic said: its message, if it carried one.
pub fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    match (panic.downcast_ref::<&str>(), panic.downcast_ref::<String>()) {
        (Some(text), _) => (*text).to_owned(),
        (None, Some(text)) => text.clone(),
        (None, None) => "no message".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chain_of_dependent_failures_names_the_first_once() {
        let root = Error::OpFailed { stream: 0, message: "the kernel said no".into() };
        let mut error = Error::dependency_failed(1, &root);
        let first = error.to_string();
        for stream in 2..1000 {
            error = Error::dependency_failed(stream, &error);
        }
        assert_eq!(error.to_string().len(), first.len() + "999".len() - "1".len(), "{error}");
        assert!(error.to_string().contains("the kernel said no"));
        assert!(matches!(error, Error::OpFailed { stream: 999, .. }));
    }
}
