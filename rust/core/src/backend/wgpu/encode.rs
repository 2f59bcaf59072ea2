//! Turns one prepared [`Command`] into a queued op ([`super::queued`]): the
//! checks that need its buffers are made at once (a refusal admits nothing),
//! and the op keeps its buffers and plan until its lane submits, when the
//! device layer records it (`weir_device::wgpu::record`), with the ops
//! queued beside it, into one encoder. Everything slow was made in
//! `prepare` (`weir_device::wgpu::plan`): what is left under the runtime's
//! ordering boundary is those checks, and the recording.

use std::sync::atomic::Ordering;
#[cfg(feature = "test-support")]
use std::time::Duration;

use super::queued::QueuedOp;
use super::readback::Readback;
use crate::backend::{Command, OpIo};
use crate::error::Error;
use weir_device::wgpu::memory::WgpuMemory;
use weir_device::wgpu::plan::{Plan, WgpuPrepared};
use weir_device::wgpu::record::check;
use weir_device::wgpu::WgpuDevice;

/// What an op became.
pub(crate) enum Encoded {
    /// Device work, recorded when its lane submits; a download's read-back
    /// is issued after that submission.
    Op { op: Box<QueuedOp>, readback: Option<Readback> },
    /// Holds the stream; not device work (test support).
    #[cfg(feature = "test-support")]
    Delay(Duration, OpIo),
}

/// Checks `command` against its buffers and queues it with what was
/// prepared for it; an error refuses it (nothing is queued). Nothing is
/// recorded yet: a queued op holds its buffers and plan, not a command buffer.
pub(crate) fn encode(
    gpu: &WgpuDevice,
    command: Command<&WgpuMemory>,
    prepared: WgpuPrepared,
    io: OpIo,
) -> Result<Encoded, Error> {
    let plan = prepared.0;
    let mut command = command.map(WgpuMemory::clone);
    check(&command, &plan)?;
    #[cfg(feature = "test-support")]
    if let Command::Delay { duration } = command {
        return Ok(Encoded::Delay(duration, io));
    }
    match &mut command {
        Command::Upload { data, .. } => {
            // Its bytes are in its staging buffer since `prepare`.
            *data = Vec::new();
            gpu.counters.host_to_device_copies.fetch_add(1, Ordering::Relaxed);
        }
        Command::Download { .. } => {
            gpu.counters.device_to_host_copies.fetch_add(1, Ordering::Relaxed);
        }
        _ => {}
    }
    let readback = match (&command, &plan) {
        (Command::Download { src, sink }, Plan::Download { staging, first, .. }) => {
            Some(Readback::new(staging.clone(), (src.offset - first) as usize, src.len as usize, sink.clone()))
        }
        _ => None,
    };
    let copy_failed = readback.as_ref().map(Readback::copy_failed);
    Ok(Encoded::Op { op: Box::new(QueuedOp::new(gpu, command, plan, io, copy_failed)), readback })
}
