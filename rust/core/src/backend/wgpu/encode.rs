//! Turns one prepared [`Command`] into one command buffer, recorded in its
//! own encoder so that a failing op fails alone (wgpu invalidates a whole
//! encoder on the first bad command) while ops are still submitted in
//! batches. Everything slow was made in [`super::prepare`]: what is left here,
//! under the runtime's ordering boundary, is what needs the buffers — the
//! checks on their sizes, bind groups, and the recording.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::builtin::{record_elementwise, record_patches, Operand};
use super::device::Gpu;
use super::memory::{align4, WgpuMemory};
use super::pipelines::{dispatch, Binding};
use super::prepare::{Plan, WgpuPrepared, WritePlan};
use super::readback::Readback;
use super::scope::{scoped, BACKEND};
use crate::backend::{Command, HostSink, KernelArg, Span};
use crate::error::Error;

/// What an op became.
pub(crate) enum Encoded {
    Commands {
        commands: wgpu::CommandBuffer,
        readback: Option<Readback>,
    },
    /// Holds the stream; not device work.
    Delay(Duration),
}

/// Why an op was not encoded.
pub(crate) enum Refusal {
    /// Arguments this device cannot take: reported at once, the stream goes on.
    Rejected(Error),
    /// The op failed: its stream is poisoned; a read's sink is failed too.
    Failed { message: String, sink: Option<Arc<HostSink>> },
}

type Op<'a> = Command<&'a WgpuMemory>;

pub(crate) fn encode(gpu: &Gpu, command: Op<'_>, prepared: WgpuPrepared) -> Result<Encoded, Refusal> {
    let plan = prepared.0;
    if !fits(&command, &plan) {
        return Err(Refusal::Rejected(Error::invalid("the command was prepared as a different command")));
    }
    if let Command::Delay { duration } = command {
        return Ok(Encoded::Delay(duration));
    }
    check(&command).map_err(Refusal::Rejected)?;
    let sink = match &command {
        Command::Download { sink, .. } => Some(sink.clone()),
        _ => None,
    };
    let mut readback = None;
    let recorded = scoped(&gpu.device, || {
        let mut encoder = gpu.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
        record(gpu, &mut encoder, command, plan, &mut readback);
        encoder.finish()
    });
    match recorded {
        Ok(commands) => Ok(Encoded::Commands { commands, readback }),
        Err(failure) => Err(Refusal::Failed { message: failure.message(), sink }),
    }
}

/// True when `plan` is what `prepare` makes for a command of this kind.
fn fits(command: &Op<'_>, plan: &Plan) -> bool {
    match command {
        Command::Delay { .. } | Command::Copy { .. } => matches!(plan, Plan::Nothing),
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
fn check(command: &Op<'_>) -> Result<(), Error> {
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

fn operand<'a>(span: &Span<&'a WgpuMemory>) -> Operand<'a> {
    Operand { buffer: &span.buffer.buffer, offset: span.offset }
}

/// Records a planned write of `dst`: in bulk where the bytes allow, masked
/// word writes for the rest.
fn write(gpu: &Gpu, encoder: &mut wgpu::CommandEncoder, dst: &Span<&WgpuMemory>, plan: &WritePlan) {
    let buffer = &dst.buffer.buffer;
    let ends_buffer = dst.offset + dst.len == dst.buffer.len;
    let layout = match (&plan.to_buffer_end, ends_buffer) {
        (Some(layout), true) => layout,
        _ => &plan.exact,
    };
    if let Some((lo, hi)) = layout.bulk {
        match &plan.staging {
            Some(staging) => encoder.copy_buffer_to_buffer(staging, 0, buffer, lo, hi - lo),
            None => encoder.clear_buffer(buffer, lo, Some(hi - lo)),
        }
    }
    if let Some(patches) = &plan.patches {
        record_patches(&gpu.device, encoder, patches, &layout.patches, buffer);
    }
}

/// Records `command` with what was prepared for it (`fits` was checked).
/// Failures show in the error scope around it.
fn record(gpu: &Gpu, encoder: &mut wgpu::CommandEncoder, command: Op<'_>, plan: Plan, readback: &mut Option<Readback>) {
    let device = &gpu.device;
    match (command, plan) {
        (Command::Zero { dst }, Plan::Write(plan)) => write(gpu, encoder, &dst, &plan),
        (Command::Upload { dst, .. }, Plan::Write(plan)) => {
            write(gpu, encoder, &dst, &plan);
            gpu.counters.host_to_device_copies.fetch_add(1, Ordering::Relaxed);
        }
        (Command::Copy { src, dst }, _) => encoder.copy_buffer_to_buffer(
            &src.buffer.buffer,
            src.offset,
            &dst.buffer.buffer,
            dst.offset,
            align4(dst.len),
        ),
        (Command::Download { src, sink }, Plan::Download { staging, first, size }) => {
            encoder.copy_buffer_to_buffer(&src.buffer.buffer, first, &staging, 0, size);
            gpu.counters.device_to_host_copies.fetch_add(1, Ordering::Relaxed);
            *readback = Some(Readback { staging, skip: (src.offset - first) as usize, len: src.len as usize, sink });
        }
        (Command::Fill { dst, .. } | Command::Iota { out: dst, .. }, Plan::Elementwise(plan)) => {
            record_elementwise(device, encoder, &plan, &[operand(&dst)])
        }
        (Command::Binary { a, b, out, .. }, Plan::Elementwise(plan)) => {
            record_elementwise(device, encoder, &plan, &[operand(&a), operand(&b), operand(&out)])
        }
        (Command::Scale { x, out: y, .. } | Command::Axpy { x, y, .. }, Plan::Elementwise(plan)) => {
            record_elementwise(device, encoder, &plan, &[operand(&x), operand(&y)])
        }
        (Command::Custom { grid, args, .. }, Plan::Custom { pipeline, params }) => {
            let bindings: Vec<Binding<'_>> = args
                .iter()
                .filter_map(|arg| match arg {
                    KernelArg::Buffer(span, _) => {
                        Some(Binding { buffer: &span.buffer.buffer, offset: span.offset, size: align4(span.len) })
                    }
                    KernelArg::Scalar(_) => None,
                })
                .collect();
            dispatch(device, encoder, &pipeline, &bindings, params.as_ref().map(|p| (p, 0)), grid.groups);
        }
        // `fits` rules these out; a delay is not device work.
        _ => {}
    }
}
