//! The one error enum of the FFI: a typed variant per core error, with the
//! core error's fields (backend kind, stream index, sizes) as typed fields.

use crate::records::BackendKind;

/// Everything that can go wrong in Weir. Kotlin: `WeirException.*`; Swift: `WeirError`.
///
/// Every variant carries `description`, the full text of what went wrong (the
/// core error's message), after the typed fields that say where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, uniffi::Error)]
pub enum WeirError {
    /// The backend cannot be used here: no driver, library or device.
    #[error("{description}")]
    Unavailable { backend: BackendKind, description: String },
    /// The backend does not support what was asked (for example a kernel without a source for it).
    #[error("{description}")]
    Unsupported { backend: BackendKind, description: String },
    /// An argument is malformed: wrong size, wrong type, aliasing, …
    #[error("{description}")]
    InvalidArgument { description: String },
    /// A range does not fit in its buffer (counted in the buffer's elements).
    #[error("{description}")]
    OutOfRange { description: String },
    /// A buffer or stream of one runtime was handed to another runtime.
    #[error("{description}")]
    ForeignHandle { description: String },
    /// The runtime was shut down.
    #[error("{description}")]
    Closed { description: String },
    /// The device (`host` false) or, for the CPU backend, the host could not
    /// provide `bytes` bytes.
    #[error("{description}")]
    OutOfMemory { bytes: u64, host: bool, description: String },
    /// An op on stream `stream` (its index) failed, or read a version a failed
    /// op wrote. What it writes fails its readers too; its stream goes on
    /// with the work that does not depend on it.
    #[error("{description}")]
    OpFailed { stream: u32, description: String },
    /// A backend call failed (`Auto`: a core error this FFI does not know).
    #[error("{description}")]
    Backend { backend: BackendKind, description: String },
    /// The device is lost for this runtime (a fault that poisons its context,
    /// such as an illegal address or a trap in a kernel): every later call
    /// fails with this; shut the runtime down (on CUDA, restart the process).
    #[error("{description}")]
    DeviceLost { backend: BackendKind, description: String },
    /// Weir broke one of its own invariants: a bug to report, not bad input
    /// (the core's `Error::Internal`; `internal` is a Swift keyword).
    #[error("{description}")]
    Bug { description: String },
    /// The wait was cancelled (through a `CancelToken`) before the work completed.
    #[error("{description}")]
    Cancelled { description: String },
    /// The runtime's queue holds `ops` ops and `bytes` host bytes, at its
    /// limit, and the admission was made through the stream's non-waiting
    /// handle (`withoutWaiting()`): nothing was admitted. The stream's
    /// `room()` suspends until there is room.
    #[error("{description}")]
    QueueFull { ops: u64, bytes: u64, description: String },
}

impl From<weir_core::Error> for WeirError {
    fn from(error: weir_core::Error) -> Self {
        use weir_core::Error as E;
        let description = error.to_string();
        match error {
            E::Unavailable { backend, .. } => WeirError::Unavailable { backend, description },
            E::Unsupported { backend, .. } => WeirError::Unsupported { backend, description },
            E::InvalidArgument(_) => WeirError::InvalidArgument { description },
            E::OutOfRange { .. } => WeirError::OutOfRange { description },
            E::ForeignHandle(_) => WeirError::ForeignHandle { description },
            E::Closed => WeirError::Closed { description },
            E::OutOfMemory { bytes, host } => WeirError::OutOfMemory { bytes, host, description },
            E::OpFailed { stream, .. } => WeirError::OpFailed { stream, description },
            E::Backend { backend, .. } => WeirError::Backend { backend, description },
            E::DeviceLost { backend, .. } => WeirError::DeviceLost { backend, description },
            E::Internal(_) => WeirError::Bug { description },
            E::Cancelled => WeirError::Cancelled { description },
            E::QueueFull { ops, bytes, .. } => WeirError::QueueFull { ops, bytes, description },
            // A core error added without its FFI case still reaches the host,
            // as a backend error of no one backend.
            _ => WeirError::Backend { backend: BackendKind::Auto, description },
        }
    }
}

impl WeirError {
    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        WeirError::InvalidArgument { description: format!("invalid argument: {}", message.into()) }
    }
}

/// Result of every fallible export.
pub type Result<T, E = WeirError> = std::result::Result<T, E>;

/// Test support for the bindings' suites: fails with the error that the core
/// error named `variant` (`"OpFailed"`, `"Backend"`, …, as in `WeirError`)
/// converts to, so every variant's type and message can be checked on the
/// foreign side, including those no public call can provoke on the CPU.
/// An unknown name is `InvalidArgument`. Not for applications.
#[cfg(feature = "test-support")]
#[uniffi::export]
pub fn debug_error_probe(variant: String) -> Result<()> {
    use weir_core::Error as E;
    let error = match variant.as_str() {
        "Unavailable" => E::unavailable(weir_core::BackendKind::Cpu, "no probe device"),
        "Unsupported" => E::unsupported(weir_core::BackendKind::Cpu, "probing"),
        "InvalidArgument" => E::InvalidArgument("probe argument".to_owned()),
        "OutOfRange" => E::OutOfRange { offset: 8, size: 8, len: 12, element: weir_core::ElementType::Bytes },
        "ForeignHandle" => E::ForeignHandle("buffer"),
        "Closed" => E::Closed,
        "OutOfMemory" => E::OutOfMemory { bytes: 1 << 40, host: false },
        "OpFailed" => E::OpFailed { stream: 3, message: "probe op failed".to_owned() },
        "Backend" => {
            E::Backend { backend: weir_core::BackendKind::Cpu, message: "probe call failed".to_owned(), status: None }
        }
        "DeviceLost" => E::DeviceLost {
            backend: weir_core::BackendKind::Cuda,
            message: "cuEventSynchronize failed: CUDA_ERROR_ILLEGAL_ADDRESS (700)".to_owned(),
            status: Some(weir_core::DriverStatus {
                call: "cuEventSynchronize".to_owned(),
                name: "CUDA_ERROR_ILLEGAL_ADDRESS".to_owned(),
                code: 700,
            }),
        },
        "Bug" => E::Internal("probe invariant broken".to_owned()),
        "Cancelled" => E::Cancelled,
        "QueueFull" => E::QueueFull { ops: 8, bytes: 64, limit: weir_core::QueueLimit { ops: 8, host_bytes: 1 << 20 } },
        other => return Err(WeirError::invalid(format!("no error variant named {other:?}"))),
    };
    Err(error.into())
}
