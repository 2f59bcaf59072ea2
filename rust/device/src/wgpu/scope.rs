//! wgpu reports failures through error scopes, not return values: every call
//! that can fail runs inside [`scoped`], which turns a captured error into
//! Weir's [`Error`]. Futures wgpu resolves at once on native are taken with
//! [`ready`], which never blocks.

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use crate::error::Error;
use crate::info::BackendKind;

pub const BACKEND: BackendKind = BackendKind::Wgpu;

/// The output of a future that is ready on first poll, or `None`.
pub fn ready<F: Future>(future: F) -> Option<F::Output> {
    match pin!(future).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(output) => Some(output),
        Poll::Pending => None,
    }
}

/// What a scoped call failed with.
#[derive(Debug)]
pub enum Failure {
    OutOfMemory,
    Message(String),
}

impl Failure {
    /// As an op failure on `stream`, running out of memory included (a
    /// refusal keeps its own variant: [`Failure::refusing`]).
    pub fn on_stream(self, stream: u32) -> Error {
        Error::OpFailed { stream, message: self.message() }
    }

    /// As the error that refuses a command, where making `bytes` of device
    /// memory (a buffer, a slot) failed: running out keeps its own variant.
    pub fn refusing(self, bytes: u64) -> Error {
        match self {
            Failure::OutOfMemory => Error::OutOfMemory { bytes, host: false },
            Failure::Message(message) => Error::backend(BACKEND, message),
        }
    }

    pub fn message(self) -> String {
        match self {
            Failure::OutOfMemory => "out of device memory".to_owned(),
            Failure::Message(message) => message,
        }
    }
}

/// Runs `call` with validation, out-of-memory and internal errors captured on
/// this thread; the first one captured is the failure.
pub fn scoped<T>(device: &wgpu::Device, call: impl FnOnce() -> T) -> Result<T, Failure> {
    let internal = device.push_error_scope(wgpu::ErrorFilter::Internal);
    let memory = device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
    let validation = device.push_error_scope(wgpu::ErrorFilter::Validation);
    let value = call();
    // Scopes pop innermost first.
    let errors = [validation.pop(), memory.pop(), internal.pop()].map(|pop| ready(pop).flatten());
    match errors.into_iter().flatten().next() {
        None => Ok(value),
        Some(wgpu::Error::OutOfMemory { .. }) => Err(Failure::OutOfMemory),
        Some(error) => Err(Failure::Message(error.to_string())),
    }
}
