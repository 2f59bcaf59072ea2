//! The one error enum of the FFI: a typed variant per core error.

/// Everything that can go wrong in Weir. Kotlin: `WeirException.*`; Swift: `WeirError`.
///
/// Each variant's message is the full description of what went wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, uniffi::Error)]
#[uniffi(flat_error)]
pub enum WeirError {
    /// The backend cannot be used here: no driver, library or device.
    #[error("{0}")]
    Unavailable(String),
    /// The backend does not support what was asked (for example a kernel without a source for it).
    #[error("{0}")]
    Unsupported(String),
    /// An argument is malformed: wrong size, wrong type, aliasing, …
    #[error("{0}")]
    InvalidArgument(String),
    /// A byte range does not fit in its buffer.
    #[error("{0}")]
    OutOfRange(String),
    /// A buffer or stream of one runtime was handed to another runtime.
    #[error("{0}")]
    ForeignHandle(String),
    /// The runtime was shut down.
    #[error("{0}")]
    Closed(String),
    /// The device could not provide the memory.
    #[error("{0}")]
    OutOfMemory(String),
    /// An op failed, or read a version a failed op wrote. What it writes fails
    /// its readers too; its stream goes on with the work that does not depend on it.
    #[error("{0}")]
    OpFailed(String),
    /// A backend call failed.
    #[error("{0}")]
    Backend(String),
    /// The device is lost for this runtime (a fault that poisons its context,
    /// such as an illegal address or a trap in a kernel): every later call
    /// fails with this; shut the runtime down and open a new one.
    #[error("{0}")]
    DeviceLost(String),
    /// The wait was cancelled (through a `CancelToken`) before the work completed.
    #[error("{0}")]
    Cancelled(String),
}

impl From<weir_core::Error> for WeirError {
    fn from(error: weir_core::Error) -> Self {
        use weir_core::Error as E;
        let message = error.to_string();
        match error {
            E::Unavailable { .. } => WeirError::Unavailable(message),
            E::Unsupported { .. } => WeirError::Unsupported(message),
            E::InvalidArgument(_) => WeirError::InvalidArgument(message),
            E::OutOfRange { .. } => WeirError::OutOfRange(message),
            E::ForeignHandle(_) => WeirError::ForeignHandle(message),
            E::Closed => WeirError::Closed(message),
            E::OutOfMemory { .. } => WeirError::OutOfMemory(message),
            E::OpFailed { .. } => WeirError::OpFailed(message),
            E::Backend { .. } => WeirError::Backend(message),
            E::DeviceLost { .. } => WeirError::DeviceLost(message),
            E::Cancelled => WeirError::Cancelled(message),
            // A core error added without its FFI case still reaches the host, as a backend error.
            _ => WeirError::Backend(message),
        }
    }
}

impl WeirError {
    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        WeirError::InvalidArgument(format!("invalid argument: {}", message.into()))
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
        "OutOfRange" => E::OutOfRange { offset: 8, size: 8, len: 12 },
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
        "Cancelled" => E::Cancelled,
        other => return Err(WeirError::invalid(format!("no error variant named {other:?}"))),
    };
    Err(error.into())
}
