//! What `prepare` makes for one command, before the runtime's ordering
//! boundary: everything that does not need the command's buffers. Pipelines
//! are compiled (first use only), uniform blocks and upload staging buffers
//! are created and filled, read-back buffers are created, and every check
//! that needs only the command's byte ranges is made. `enqueue` is then left
//! with bind groups and one encoder's recording (`super::record`).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use smallvec::SmallVec;

use super::builtin::{plan_elementwise, plan_patches, DispatchPlan, MaskedWord};
use super::memory::{align4, buffer, staging_with};
use super::pipelines::{Params, Pipeline, Signature};
use super::scope::{scoped, BACKEND};
use super::slabs::SHARED_MAX;
use super::uniform_fill::ScalarType;
use super::WgpuDevice;
use crate::command::{Command, KernelArg, Span};
use crate::error::Error;
use crate::kernel::{CustomKernel, ScalarArg};
use crate::{Access, Grid};

/// What preparing one command made (the engine's `prepare`).
pub enum Plan {
    /// Nothing to make: a delay, or a copy (whose checks need the buffers).
    Nothing,
    Write(WritePlan),
    Elementwise(DispatchPlan),
    Download {
        staging: wgpu::Buffer,
        first: u64,
        size: u64,
    },
    Custom {
        pipeline: Arc<Pipeline>,
        params: Option<Params>,
    },
}

impl Plan {
    /// Bytes of our own the plan holds beyond its inline size (what a queued
    /// op counts; wgpu's objects are handles).
    pub fn heap_bytes(&self) -> usize {
        match self {
            Plan::Nothing | Plan::Download { .. } => 0,
            Plan::Write(plan) => {
                let layouts = [Some(&plan.exact), plan.to_buffer_end.as_ref()];
                let patches: usize = layouts.iter().flatten().map(|layout| layout.patches.capacity()).sum();
                patches * std::mem::size_of::<usize>() + plan.patches.as_ref().map_or(0, DispatchPlan::heap_bytes)
            }
            Plan::Elementwise(plan) => plan.heap_bytes(),
            Plan::Custom { params, .. } => params.as_ref().map_or(0, Params::heap_bytes),
        }
    }
}

/// Which bytes of a write go in bulk and which by masked word writes.
pub struct Layout {
    /// A word-aligned range written from the staging buffer (or cleared).
    pub bulk: Option<(u64, u64)>,
    /// Indices into the plan's patches.
    pub patches: Vec<usize>,
}

/// A zero or an upload of one byte range, planned.
pub struct WritePlan {
    /// An upload's bytes for the widest bulk range, from its start.
    pub staging: Option<wgpu::Buffer>,
    pub patches: Option<DispatchPlan>,
    /// The layout when the range ends where it says.
    pub exact: Layout,
    /// For a range that ends inside a word: the layout when that end is the
    /// buffer's end, whose padding is private and may be written in bulk
    /// (known only once the buffer is, in `enqueue`).
    pub to_buffer_end: Option<Layout>,
}

fn unsupported(what: String) -> Error {
    Error::unsupported(BACKEND, what)
}

/// Makes what `command` needs before its buffers are known, once it checked
/// what wgpu would otherwise reject by panicking or by failing the stream, as
/// far as the byte ranges tell (a copy's check needs its buffers).
pub fn prepare<R: PartialEq, S>(gpu: &WgpuDevice, command: &Command<R, S>) -> Result<Plan, Error> {
    if let Some((kernel, scalar, operands)) = command.elementwise() {
        let shape = gpu.shape;
        for span in &operands {
            if !span.offset.is_multiple_of(shape.align) || !span.len.is_multiple_of(4) {
                return Err(unsupported(format!(
                    "element-wise ops on bytes {}..{} (they need a start aligned to {} and whole words)",
                    span.offset,
                    span.offset + span.len,
                    shape.align
                )));
            }
        }
        // wgpu refuses a buffer bound both read-only and writable in one
        // dispatch: where that may happen, every binding is writable.
        let shared = operands.split_last().is_some_and(|(out, inputs)| one_buffer_both_ways(inputs, &[out]));
        let plan = plan_elementwise(gpu, kernel, operands[0].len, scalar.unwrap_or(0), shared)?;
        return Ok(Plan::Elementwise(plan));
    }
    Ok(match command {
        Command::Zero { dst } => Plan::Write(plan_write(gpu, dst, None)?),
        Command::Upload { dst, data } => return prepare_upload(gpu, dst, data),
        Command::Download { src, .. } => {
            let first = src.offset / 4 * 4;
            let size = align4(src.offset + src.len) - first;
            let usage = wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST;
            let staging = scoped(&gpu.device, || buffer(&gpu.device, "weir read-back", size, usage))
                .map_err(|failure| failure.refusing(size))?;
            gpu.counters.host_staging_buffers.fetch_add(1, Ordering::Relaxed);
            Plan::Download { staging, first, size }
        }
        Command::Custom { kernel, grid, args } => prepare_custom(gpu, kernel, grid, args)?,
        // Nothing to make for a copy (whose checks need its buffers) or a
        // delay; the element-wise ops were planned above.
        _ => Plan::Nothing,
    })
}

/// An upload of `bytes` into `dst`, staged straight from them.
pub fn prepare_upload<R>(gpu: &WgpuDevice, dst: &Span<R>, bytes: &[u8]) -> Result<Plan, Error> {
    if bytes.len() as u64 != dst.len {
        return Err(Error::invalid(format!("{} bytes to upload into {} bytes", bytes.len(), dst.len)));
    }
    Ok(Plan::Write(plan_write(gpu, dst, Some(bytes))?))
}

/// True when a read of `reads` and a write of `writes` may be one wgpu
/// buffer: views of one allocation, or two small allocations, which may be
/// slots of one slab (`super::slabs`). Which slab an allocation is in is
/// not known before the boundary, but a view longer than [`SHARED_MAX`] is
/// of an allocation with a wgpu buffer of its own.
fn one_buffer_both_ways<R: PartialEq>(reads: &[&Span<R>], writes: &[&Span<R>]) -> bool {
    let small = |span: &Span<R>| span.len <= SHARED_MAX;
    reads.iter().any(|read| writes.iter().any(|write| read.buffer == write.buffer || (small(read) && small(write))))
}

/// Checks the launch against the device's limits, then compiles (first use)
/// and stages the scalars of a custom kernel. A source
/// that does not compile, whose bindings are not what its arguments bind
/// (`super::interface`), or that disagrees with the declared accesses, is
/// the caller's error: it refuses the command with the
/// compiler's message, before anything is admitted.
fn prepare_custom<R: PartialEq>(
    gpu: &WgpuDevice,
    kernel: &Arc<CustomKernel>,
    grid: &Grid,
    args: &[KernelArg<R>],
) -> Result<Plan, Error> {
    let source =
        kernel.wgsl.as_ref().ok_or_else(|| unsupported(format!("kernel {} has no WGSL source", kernel.name)))?;
    // WGSL declares its workgroup memory in the shader: a launch's dynamic
    // shared memory would be dropped silently.
    if grid.shared_bytes != 0 {
        return Err(unsupported(format!(
            "kernel {}: {} bytes of dynamic shared memory; a WGSL kernel declares `var<workgroup>` memory itself",
            kernel.name, grid.shared_bytes
        )));
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
    // Inline: a launch allocates nothing to describe its arguments.
    // Each buffer with whether it is read only.
    let mut spans: SmallVec<[(&Span<R>, bool); 8]> = SmallVec::new();
    let mut scalars: SmallVec<[&ScalarArg; 8]> = SmallVec::new();
    for arg in args {
        match arg {
            KernelArg::Buffer(span, access) => {
                if span.offset % gpu.shape.align != 0 || align4(span.len) > gpu.shape.window {
                    return Err(unsupported(format!(
                        "kernel {}: a {}-byte buffer argument at offset {} (the device binds at most {} bytes, at offsets aligned to {})",
                        kernel.name, span.len, span.offset, gpu.shape.window, gpu.shape.align
                    )));
                }
                spans.push((span, *access == Access::Read));
            }
            KernelArg::Scalar(scalar) => scalars.push(scalar),
        }
    }
    let reading = |read: bool| -> SmallVec<[&Span<R>; 8]> {
        spans.iter().filter(|(_, read_only)| *read_only == read).map(|(span, _)| *span).collect()
    };
    // 4-byte scalars go as immediate data where the device takes that many
    // bytes and the kernel binds them as Weir's own kernels do.
    let words: Option<SmallVec<[u32; 8]>> = scalars.iter().map(|scalar| scalar.bits()).collect();
    let bytes = 4 * scalars.len() as u32;
    let immediate_bytes = match &words {
        Some(_) if !scalars.is_empty() && bytes <= gpu.immediate_bytes => bytes,
        _ => 0,
    };
    let signature = Signature {
        read_only: spans.iter().map(|(_, read_only)| *read_only).collect(),
        scalars: !scalars.is_empty(),
        checked: Some(scalars.iter().map(|scalar| ScalarType::of(scalar)).collect()),
        immediate_bytes,
        block: Some(grid.block),
        widened: one_buffer_both_ways(&reading(true), &reading(false)),
    };
    let pipeline = gpu.pipelines.get_custom(&gpu.device, kernel, &source.code, &source.entry, signature)?;
    let pipeline = pipeline.map_err(|message| Error::invalid(format!("kernel {}: {message}", kernel.name)))?;
    // A layout of its own may declare fixed-size storage (a struct, an
    // array of known length): a shorter buffer would fail the dispatch.
    let least = pipeline.own_layout().map(|own| own.buffers.as_slice()).unwrap_or_default();
    for (index, ((span, _), (least, at))) in spans.iter().zip(least).enumerate() {
        if span.len < *least {
            return Err(Error::invalid(format!(
                "kernel {}: buffer argument {index} is {} bytes, but {at} takes at least {least}",
                kernel.name, span.len
            )));
        }
    }
    let params = match (pipeline.own_layout(), &words) {
        _ if scalars.is_empty() => None,
        (Some(own), _) => Some(Params::own(gpu, own, &scalars)?),
        (None, Some(words)) => Some(Params::new(gpu, &pipeline, &[words])?),
        // A kernel in Weir's layout takes 4-byte scalars only (its check says so).
        (None, None) => None,
    };
    Ok(Plan::Custom { pipeline, params })
}

/// The bulk range and the partial words of a write of bytes `start..end`.
fn layout(start: u64, end: u64, data: Option<&[u8]>) -> (Option<(u64, u64)>, Vec<MaskedWord>) {
    if start >= end {
        return (None, Vec::new());
    }
    let (lo, hi) = (align4(start), end / 4 * 4);
    let bulk = (lo < hi).then_some((lo, hi));
    // The first and the last word the range touches, where it covers part of them only.
    let mut partial: Vec<u64> =
        [start / 4, (end - 1) / 4].into_iter().filter(|&word| start > word * 4 || end < word * 4 + 4).collect();
    partial.dedup();
    let byte_at = |index: u64| data.and_then(|data| data.get(index as usize).copied()).unwrap_or(0);
    let words = partial
        .into_iter()
        .map(|word| {
            let (mut keep, mut bits) = (u32::MAX, 0u32);
            for byte in (word * 4).max(start)..(word * 4 + 4).min(end) {
                let shift = 8 * (byte % 4);
                keep &= !(0xFF << shift);
                bits |= u32::from(byte_at(byte - start)) << shift;
            }
            (word, keep, bits)
        })
        .collect();
    (bulk, words)
}

/// Plans a write of `dst` from `data` (zeros without): whole words in bulk,
/// partial words at either end by a masked write on the device (their other
/// bytes are not ours), for either way the range may end (see [`WritePlan`]).
fn plan_write<R>(gpu: &WgpuDevice, dst: &Span<R>, data: Option<&[u8]>) -> Result<WritePlan, Error> {
    let (start, end) = (dst.offset, dst.offset + dst.len);
    let mut words = Vec::new();
    let mut lay = |end: u64| {
        let (bulk, partial) = layout(start, end, data);
        let patches = (words.len()..words.len() + partial.len()).collect();
        words.extend(partial);
        Layout { bulk, patches }
    };
    let exact = lay(end);
    let to_buffer_end = (dst.len > 0 && !end.is_multiple_of(4)).then(|| lay(align4(end)));
    // Both bulks start at the first whole word; the one to the buffer's end,
    // where there is one, ends at least as far.
    let widest = to_buffer_end.as_ref().and_then(|layout| layout.bulk).or(exact.bulk);
    let staging = match (data, widest) {
        (Some(data), Some((lo, hi))) => {
            let from = (lo - start) as usize;
            let to = ((hi - start) as usize).min(data.len());
            let bytes = data.get(from..to).unwrap_or_default();
            let staging = scoped(&gpu.device, || staging_with(&gpu.device, bytes))
                .map_err(|failure| failure.refusing(hi - lo))?
                .map_err(|message| Error::backend(BACKEND, message))?;
            gpu.counters.host_staging_buffers.fetch_add(1, Ordering::Relaxed);
            Some(staging)
        }
        _ => None,
    };
    let patches = if words.is_empty() { None } else { Some(plan_patches(gpu, &words)?) };
    Ok(WritePlan { staging, patches, exact, to_buffer_end })
}
