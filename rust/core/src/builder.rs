//! Opening a runtime with options: the one door for configuration.
//!
//! Every knob a runtime has is a method of [`RuntimeBuilder`]; the library
//! reads no environment variable of its own for what a builder can say.

use crate::device::BackendKind;
use crate::error::Result;
use crate::runtime::Runtime;
#[cfg(feature = "test-support")]
use crate::scheduler::Fault;

/// What a runtime is opened with. Backends read what concerns them.
#[derive(Debug, Clone, Default)]
pub(crate) struct RuntimeOptions {
    /// The device's place in [`devices`](crate::devices) for its backend.
    pub(crate) device: usize,
    /// A deliberate scheduler bug (tests that prove the suite catches it).
    #[cfg(feature = "test-support")]
    pub(crate) fault: Option<Fault>,
}

/// How to open a [`Runtime`]: `Runtime::builder(kind).device(1).open()`.
/// [`Runtime::open`] is `Runtime::builder(kind).open()`.
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `open` is called"]
pub struct RuntimeBuilder {
    kind: BackendKind,
    options: RuntimeOptions,
}

impl RuntimeBuilder {
    pub(crate) fn new(kind: BackendKind) -> Self {
        RuntimeBuilder { kind, options: RuntimeOptions::default() }
    }

    /// Device `index` of the backend, as [`devices`](crate::devices) lists it:
    /// a CUDA or HIP ordinal, a wgpu adapter's place in the listing (0, the
    /// default, is the one [`BackendKind::Auto`] would take); on the CPU every
    /// opening is a device of its own, whatever the index. No such device is
    /// [`Error::Unavailable`](crate::Error::Unavailable) when opened; an index
    /// other than 0 with [`BackendKind::Auto`] is
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument).
    pub fn device(mut self, index: usize) -> Self {
        self.options.device = index;
        self
    }

    /// A scheduler with a deliberate bug. Only for tests that prove the test
    /// suite detects that bug.
    #[cfg(feature = "test-support")]
    pub fn fault(mut self, fault: Fault) -> Self {
        self.options.fault = Some(fault);
        self
    }

    /// Opens the runtime. A backend that cannot run here is
    /// [`Error::Unavailable`](crate::Error::Unavailable), naming what is missing.
    pub fn open(self) -> Result<Runtime> {
        Runtime::open_with(self.kind, &self.options)
    }
}
