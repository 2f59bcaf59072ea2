//! Turns one prepared [`Command`] into a queued op ([`super::queued`]): the
//! checks that need its buffers are made at once (a refusal admits nothing),
//! and the op keeps its buffers and plan until its lane submits, when
//! [`record`] records it, with the ops queued beside it, into one encoder.
//! Everything slow was made in [`super::prepare`]: what is left under the
//! runtime's ordering boundary is those checks, and the recording.

use std::sync::atomic::Ordering;
#[cfg(feature = "test-support")]
use std::time::Duration;

use smallvec::SmallVec;

use super::device::Gpu;
use super::memory::{align4, Held, WgpuMemory};
use super::prepare::{Plan, WgpuPrepared, WritePlan};
use super::queued::QueuedOp;
use super::readback::Readback;
use crate::backend::{Command, KernelArg, OpIo, Span};
use crate::error::Error;
use weir_device::wgpu::builtin::{record_elementwise, record_patches, Operand};
use weir_device::wgpu::pipelines::{dispatch, Binding};
use weir_device::wgpu::scope::BACKEND;
use weir_device::wgpu::Recorder;

/// What an op became.
pub(crate) enum Encoded {
    /// Device work, recorded when its lane submits; a download's read-back
    /// is issued after that submission.
    Op { op: Box<QueuedOp>, readback: Option<Readback> },
    /// Holds the stream; not device work (test support).
    #[cfg(feature = "test-support")]
    Delay(Duration),
}

type Op = Command<Held>;

/// Checks `command` against its buffers and queues it with what was
/// prepared for it; an error refuses it (nothing is queued). Nothing is
/// recorded yet: a queued op holds its buffers and plan, not a command buffer.
pub(crate) fn encode(
    gpu: &Gpu,
    command: Command<&WgpuMemory>,
    prepared: WgpuPrepared,
    io: OpIo,
) -> Result<Encoded, Error> {
    let plan = prepared.0;
    let mut command = command.map(Held::of);
    if !fits(&command, &plan) {
        return Err(Error::invalid("the command was prepared as a different command"));
    }
    #[cfg(feature = "test-support")]
    if let Command::Delay { duration } = command {
        return Ok(Encoded::Delay(duration));
    }
    check(&command)?;
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

/// True when `plan` is what `prepare` makes for a command of this kind.
fn fits(command: &Op, plan: &Plan) -> bool {
    match command {
        #[cfg(feature = "test-support")]
        Command::Delay { .. } => matches!(plan, Plan::Nothing),
        Command::Copy { .. } => matches!(plan, Plan::Nothing),
        Command::Zero { .. } | Command::Upload { .. } => matches!(plan, Plan::Write(_)),
        Command::Fill { .. }
        | Command::Iota { .. }
        | Command::Binary { .. }
        | Command::Scale { .. }
        | Command::Axpy { .. } => matches!(plan, Plan::Elementwise(_)),
        Command::Download { .. } => matches!(plan, Plan::Download { .. }),
        Command::Custom { .. } => matches!(plan, Plan::Custom { .. }),
    }
}

/// The checks that need the buffers: a copy moves whole words, except at a
/// buffer's end, whose padding is private.
fn check(command: &Op) -> Result<(), Error> {
    if let Command::Copy { src, dst } = command {
        let ends_buffer = dst.offset + dst.len == dst.buffer.len;
        if src.offset % 4 != 0 || dst.offset % 4 != 0 || (dst.len % 4 != 0 && !ends_buffer) {
            return Err(Error::unsupported(
                BACKEND,
                format!(
                    "a copy of {} bytes from offset {} to offset {} (copies move whole words)",
                    src.len, src.offset, dst.offset
                ),
            ));
        }
    }
    Ok(())
}

fn operand(span: &Span<Held>) -> Operand<'_> {
    Operand { buffer: &span.buffer.buffer, offset: span.buffer.at(span.offset) }
}

/// Records a planned write of `dst`: in bulk where the bytes allow, masked
/// word writes for the rest.
fn write(gpu: &Gpu, recorder: &mut Recorder, dst: &Span<Held>, plan: &WritePlan) {
    let (held, buffer) = (&dst.buffer, &dst.buffer.buffer);
    let ends_buffer = dst.offset + dst.len == dst.buffer.len;
    let layout = match (&plan.to_buffer_end, ends_buffer) {
        (Some(layout), true) => layout,
        _ => &plan.exact,
    };
    if let Some((lo, hi)) = layout.bulk {
        match &plan.staging {
            Some(staging) => recorder.encoder().copy_buffer_to_buffer(staging, 0, buffer, held.at(lo), hi - lo),
            None => recorder.encoder().clear_buffer(buffer, held.at(lo), Some(hi - lo)),
        }
    }
    if let Some(patches) = &plan.patches {
        record_patches(gpu, recorder, patches, &layout.patches, buffer, held.at(0));
    }
}

/// Records a copy. wgpu copies between two buffers only, and two small
/// allocations may be slots of one ([`super::slabs`]): such a copy goes
/// through a scratch buffer, which wgpu keeps until the copy ran.
fn copy(gpu: &Gpu, recorder: &mut Recorder, src: &Span<Held>, dst: &Span<Held>) {
    let (from, to, len) = (src.buffer.at(src.offset), dst.buffer.at(dst.offset), align4(dst.len));
    let encoder = recorder.encoder();
    if src.buffer.buffer != dst.buffer.buffer {
        encoder.copy_buffer_to_buffer(&src.buffer.buffer, from, &dst.buffer.buffer, to, len);
        return;
    }
    let scratch = gpu.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("weir copy within a buffer"),
        size: len.max(4),
        usage: wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    encoder.copy_buffer_to_buffer(&src.buffer.buffer, from, &scratch, 0, len);
    encoder.copy_buffer_to_buffer(&scratch, 0, &dst.buffer.buffer, to, len);
}

/// Records `command` with what was prepared for it (`fits` was checked).
/// Failures show in the error scope around it; it can be recorded again
/// (alone, when a run recorded together failed).
pub(crate) fn record(gpu: &Gpu, recorder: &mut Recorder, command: &Op, plan: &Plan) {
    match (command, plan) {
        (Command::Zero { dst } | Command::Upload { dst, .. }, Plan::Write(plan)) => write(gpu, recorder, dst, plan),
        (Command::Copy { src, dst }, _) => copy(gpu, recorder, src, dst),
        (Command::Download { src, .. }, Plan::Download { staging, first, size }) => {
            recorder.encoder().copy_buffer_to_buffer(&src.buffer.buffer, src.buffer.at(*first), staging, 0, *size)
        }
        (Command::Fill { dst, .. } | Command::Iota { out: dst, .. }, Plan::Elementwise(plan)) => {
            record_elementwise(gpu, recorder, plan, &[operand(dst)])
        }
        (Command::Binary { a, b, out, .. }, Plan::Elementwise(plan)) => {
            record_elementwise(gpu, recorder, plan, &[operand(a), operand(b), operand(out)])
        }
        (Command::Scale { x, out: y, .. } | Command::Axpy { x, y, .. }, Plan::Elementwise(plan)) => {
            record_elementwise(gpu, recorder, plan, &[operand(x), operand(y)])
        }
        (Command::Custom { grid, args, .. }, Plan::Custom { pipeline, params }) => {
            // On the stack: a kernel binds a few buffers, and this runs per op.
            let bindings: SmallVec<[Binding<'_>; 8]> = args
                .iter()
                .filter_map(|arg| match arg {
                    KernelArg::Buffer(span, _) => Some(Binding {
                        buffer: &span.buffer.buffer,
                        offset: span.buffer.at(span.offset),
                        size: align4(span.len),
                    }),
                    KernelArg::Scalar(_) => None,
                })
                .collect();
            dispatch(gpu, recorder, pipeline, &bindings, params.as_ref().map(|p| (p, 0)), grid.groups);
        }
        // `fits` rules these out; a delay is not device work.
        _ => {}
    }
}
