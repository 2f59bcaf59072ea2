//! The commands the scheduler hands to a backend (the device layer's, with
//! a download's bytes going to a [`HostSink`]), and where an upload's bytes
//! come from.

use std::sync::Arc;

use super::HostSink;
use crate::host::HostBuffer;
#[cfg(feature = "test-support")]
pub use weir_device::command::Spans;
pub use weir_device::command::{Accesses, BinaryOp, KernelArg, Span};

/// One op on a stream (see [`weir_device::command::Command`]); a download
/// delivers to the reader's sink.
pub type Command<R> = weir_device::command::Command<R, Arc<HostSink>>;

/// Where an upload's bytes come from.
#[derive(Clone, Copy)]
pub enum UploadFrom<'a> {
    /// The caller's bytes.
    Bytes(&'a [u8]),
    /// Host memory of the runtime's (see [`crate::Stream::write_host`]).
    Host(&'a HostBuffer),
}

impl UploadFrom<'_> {
    /// The bytes to upload, wherever they are.
    pub fn bytes(&self) -> &[u8] {
        match self {
            UploadFrom::Bytes(bytes) => bytes,
            UploadFrom::Host(host) => host,
        }
    }
}
