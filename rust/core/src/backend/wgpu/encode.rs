//! Turns one [`Command`] into one command buffer, recorded in its own encoder
//! so that a failing op fails alone (wgpu invalidates a whole encoder on the
//! first bad command) while ops are still submitted in batches.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::builtin::{elementwise, patch, Elementwise, Operand};
use super::device::Gpu;
use super::memory::{align4, staging_with, WgpuMemory};
use super::pipelines::{dispatch, Binding};
use super::readback::Readback;
use super::scope::{scoped, BACKEND};
use crate::backend::{BinaryOp, Command, HostSink, KernelArg, Span};
use crate::error::Error;
use crate::kernel::{Access, CustomKernel, Grid};

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

pub(crate) fn encode(gpu: &Gpu, command: Op<'_>) -> Result<Encoded, Refusal> {
    if let Command::Delay { duration } = command {
        return Ok(Encoded::Delay(duration));
    }
    check(gpu, &command).map_err(Refusal::Rejected)?;
    let sink = match &command {
        Command::Download { sink, .. } => Some(sink.clone()),
        _ => None,
    };
    let mut readback = None;
    let recorded = scoped(&gpu.device, || {
        let mut encoder = gpu.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
        record(gpu, &mut encoder, command, &mut readback)?;
        Ok::<_, String>(encoder.finish())
    });
    match recorded {
        Ok(Ok(commands)) => Ok(Encoded::Commands { commands, readback }),
        Ok(Err(message)) => Err(Refusal::Failed { message, sink }),
        Err(failure) => Err(Refusal::Failed { message: failure.message(), sink }),
    }
}

fn unsupported(what: String) -> Error {
    Error::unsupported(BACKEND, what)
}

/// Checks what wgpu would otherwise reject by panicking or by failing the stream.
fn check(gpu: &Gpu, command: &Op<'_>) -> Result<(), Error> {
    let shape = gpu.shape;
    let windowed = |span: &Span<&WgpuMemory>| {
        if !span.offset.is_multiple_of(shape.align) || !span.len.is_multiple_of(4) {
            return Err(unsupported(format!(
                "element-wise ops on bytes {}..{} (they need a start aligned to {} and whole words)",
                span.offset,
                span.offset + span.len,
                shape.align
            )));
        }
        Ok(())
    };
    match command {
        Command::Fill { dst, .. } | Command::Iota { out: dst, .. } => windowed(dst),
        Command::Binary { a, b, out, .. } => [a, b, out].into_iter().try_for_each(windowed),
        Command::Scale { x, out: y, .. } | Command::Axpy { x, y, .. } => [x, y].into_iter().try_for_each(windowed),
        Command::Copy { src, dst } => {
            let ends_buffer = dst.offset + dst.len == dst.buffer.len;
            if src.offset % 4 != 0 || dst.offset % 4 != 0 || (dst.len % 4 != 0 && !ends_buffer) {
                return Err(unsupported(format!(
                    "a copy of {} bytes from offset {} to offset {} (copies move whole words)",
                    src.len, src.offset, dst.offset
                )));
            }
            Ok(())
        }
        Command::Custom { kernel, grid, args } => check_custom(gpu, kernel, grid, args),
        Command::Zero { .. } | Command::Upload { .. } | Command::Download { .. } => Ok(()),
        Command::Delay { .. } => Ok(()),
    }
}

fn check_custom(gpu: &Gpu, kernel: &CustomKernel, grid: &Grid, args: &[KernelArg<&WgpuMemory>]) -> Result<(), Error> {
    if kernel.wgsl.is_none() {
        return Err(unsupported(format!("kernel {} has no WGSL source", kernel.name)));
    }
    let max = gpu.shape.max_groups;
    if grid.groups.iter().any(|&g| g > max) {
        return Err(Error::invalid(format!(
            "kernel {}: {:?} work groups exceed the device's {max} per dimension",
            kernel.name, grid.groups
        )));
    }
    let buffers = args.iter().filter(|arg| matches!(arg, KernelArg::Buffer(..))).count();
    if buffers as u64 > u64::from(gpu.limits.max_storage_buffers_per_shader_stage) {
        return Err(unsupported(format!(
            "kernel {} binds {buffers} storage buffers; the device allows {}",
            kernel.name, gpu.limits.max_storage_buffers_per_shader_stage
        )));
    }
    for arg in args {
        if let KernelArg::Buffer(span, _) = arg {
            if span.offset % gpu.shape.align != 0 || align4(span.len) > gpu.shape.window {
                return Err(unsupported(format!(
                    "kernel {}: a {}-byte buffer argument at offset {} (the device binds at most {} bytes, at offsets aligned to {})",
                    kernel.name, span.len, span.offset, gpu.shape.window, gpu.shape.align
                )));
            }
        }
    }
    Ok(())
}

/// Where the bytes of a partial-word write come from.
enum Bytes<'a> {
    Zero,
    Data(&'a [u8]),
}

impl Bytes<'_> {
    fn at(&self, index: u64) -> u8 {
        match self {
            Bytes::Zero => 0,
            Bytes::Data(data) => data.get(index as usize).copied().unwrap_or(0),
        }
    }
}

/// Writes `span` from `bytes`: whole words in bulk, partial words at either
/// end by a masked write on the device (their other bytes are not ours).
fn write_bytes(
    gpu: &Gpu,
    encoder: &mut wgpu::CommandEncoder,
    span: &Span<&WgpuMemory>,
    bytes: Bytes<'_>,
) -> Result<(), String> {
    if span.len == 0 {
        return Ok(());
    }
    let buffer = &span.buffer.buffer;
    let start = span.offset;
    let end = span.offset + span.len;
    // The padding after the buffer's last byte is private: it may be written.
    let end = if end == span.buffer.len { align4(end) } else { end };
    let (lo, hi) = (align4(start), end / 4 * 4);
    let mut partial = Vec::new();
    if lo < hi {
        match bytes {
            Bytes::Zero => encoder.clear_buffer(buffer, lo, Some(hi - lo)),
            Bytes::Data(data) => {
                let from = (lo - start) as usize;
                let to = ((hi - start) as usize).min(data.len());
                let staging = staging_with(&gpu.device, &data[from..to])?;
                gpu.counters.staging_buffers.fetch_add(1, Ordering::Relaxed);
                encoder.copy_buffer_to_buffer(&staging, 0, buffer, lo, hi - lo);
            }
        }
        if start < lo {
            partial.push(start / 4);
        }
        if hi < end {
            partial.push(hi / 4);
        }
    } else {
        partial.push(start / 4);
        if (end - 1) / 4 != start / 4 {
            partial.push((end - 1) / 4);
        }
    }
    for word in partial {
        let (mut keep, mut bits) = (u32::MAX, 0u32);
        for byte in (word * 4)..(word * 4 + 4) {
            if byte >= start && byte < end {
                let shift = 8 * (byte % 4);
                keep &= !(0xFF << shift);
                bits |= u32::from(bytes.at(byte - start)) << shift;
            }
        }
        patch(gpu, encoder, buffer, word, keep, bits)?;
    }
    Ok(())
}

fn operand<'a>(span: &Span<&'a WgpuMemory>) -> Operand<'a> {
    Operand { buffer: &span.buffer.buffer, offset: span.offset }
}

fn record(
    gpu: &Gpu,
    encoder: &mut wgpu::CommandEncoder,
    command: Op<'_>,
    readback: &mut Option<Readback>,
) -> Result<(), String> {
    let run = |encoder: &mut wgpu::CommandEncoder, op, spans: &[&Span<&WgpuMemory>], scalar| {
        let operands: Vec<Operand<'_>> = spans.iter().map(|span| operand(span)).collect();
        let bytes = spans.first().map_or(0, |span| span.len);
        elementwise(gpu, encoder, op, &operands, bytes, scalar)
    };
    match command {
        Command::Zero { dst } => write_bytes(gpu, encoder, &dst, Bytes::Zero)?,
        Command::Upload { dst, data } => {
            write_bytes(gpu, encoder, &dst, Bytes::Data(&data))?;
            gpu.counters.host_to_device_copies.fetch_add(1, Ordering::Relaxed);
        }
        Command::Fill { dst, word } => run(encoder, Elementwise::Fill, &[&dst], word)?,
        Command::Copy { src, dst } => encoder.copy_buffer_to_buffer(
            &src.buffer.buffer,
            src.offset,
            &dst.buffer.buffer,
            dst.offset,
            align4(dst.len),
        ),
        Command::Download { src, sink } => {
            let first = src.offset / 4 * 4;
            let size = align4(src.offset + src.len) - first;
            let staging = gpu.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("weir read-back"),
                size,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            encoder.copy_buffer_to_buffer(&src.buffer.buffer, first, &staging, 0, size);
            gpu.counters.staging_buffers.fetch_add(1, Ordering::Relaxed);
            gpu.counters.device_to_host_copies.fetch_add(1, Ordering::Relaxed);
            *readback = Some(Readback { staging, skip: (src.offset - first) as usize, len: src.len as usize, sink });
        }
        Command::Binary { op, a, b, out } => {
            let kernel = match op {
                BinaryOp::Add => Elementwise::Add,
                BinaryOp::Mul => Elementwise::Mul,
            };
            run(encoder, kernel, &[&a, &b, &out], 0)?
        }
        Command::Scale { x, out, alpha } => run(encoder, Elementwise::Scale, &[&x, &out], alpha.to_bits())?,
        Command::Axpy { x, y, alpha } => run(encoder, Elementwise::Axpy, &[&x, &y], alpha.to_bits())?,
        Command::Iota { out, start } => run(encoder, Elementwise::Iota, &[&out], start)?,
        Command::Custom { kernel, grid, args } => custom(gpu, encoder, &kernel, grid, &args)?,
        Command::Delay { .. } => return Err("a delay is not device work".to_owned()),
    }
    Ok(())
}

fn custom(
    gpu: &Gpu,
    encoder: &mut wgpu::CommandEncoder,
    kernel: &CustomKernel,
    grid: Grid,
    args: &[KernelArg<&WgpuMemory>],
) -> Result<(), String> {
    let source = kernel.wgsl.as_ref().ok_or_else(|| format!("kernel {} has no WGSL source", kernel.name))?;
    let mut read_only = Vec::new();
    let mut bindings = Vec::new();
    let mut scalars = Vec::new();
    for arg in args {
        match arg {
            KernelArg::Buffer(span, access) => {
                read_only.push(*access == Access::Read);
                bindings.push(Binding { buffer: &span.buffer.buffer, offset: span.offset, size: align4(span.len) });
            }
            KernelArg::Scalar(scalar) => scalars.push(scalar.bits()),
        }
    }
    let pipeline = gpu
        .pipelines
        .get(&gpu.device, &source.code, &source.entry, &read_only, !scalars.is_empty())
        .map_err(|message| format!("kernel {}: {message}", kernel.name))?;
    let scalars = (!scalars.is_empty()).then_some(scalars.as_slice());
    dispatch(&gpu.device, encoder, &pipeline, &bindings, scalars, grid.groups);
    Ok(())
}
