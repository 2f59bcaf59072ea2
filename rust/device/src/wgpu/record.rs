//! Recording prepared commands into one command encoder: consecutive
//! dispatches share a compute pass, and what the pass has bound is not
//! bound again.

use smallvec::SmallVec;

use super::bind_groups::Windows;
use super::builtin::record_dispatches;
use super::memory::{align4, buffer, WgpuMemory};
use super::pipelines::{dispatch, Binding};
use super::plan::{Plan, WritePlan};
use super::scope::BACKEND;
use super::WgpuDevice;
use crate::command::{Command, KernelArg, Span};
use crate::error::Error;

/// An encoder being recorded, with the compute pass its dispatches share:
/// consecutive dispatches go in one pass (wgpu orders dispatches in a pass
/// as it orders passes), because wgpu sizes each pass's resource tracking to
/// the most buffers the device ever had alive, so a pass per dispatch makes
/// every op cost more with every live buffer. Copies and clears end the pass.
pub struct Recorder {
    // Dropped before the encoder it locks.
    pass: Option<wgpu::ComputePass<'static>>,
    /// What the open pass has bound: a dispatch of the same pipeline over the
    /// same group (a kernel launched again and again) sets neither again.
    bound: Option<(wgpu::ComputePipeline, wgpu::BindGroup)>,
    /// The kept group the last dispatch bound, with its layout and windows:
    /// a dispatch over the same windows takes it without asking the cache.
    last_group: Option<(wgpu::BindGroupLayout, Windows, wgpu::BindGroup)>,
    encoder: wgpu::CommandEncoder,
}

impl Recorder {
    pub fn new(device: &wgpu::Device) -> Recorder {
        Recorder {
            pass: None,
            bound: None,
            last_group: None,
            encoder: device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None }),
        }
    }

    /// The encoder, for commands outside a compute pass (ends the open one).
    pub fn encoder(&mut self) -> &mut wgpu::CommandEncoder {
        self.pass = None;
        self.bound = None;
        &mut self.encoder
    }

    /// The open compute pass (begun if none is) with `pipeline` and `group`
    /// (at group 0) bound.
    pub(crate) fn pass_with(
        &mut self,
        pipeline: &wgpu::ComputePipeline,
        group: &wgpu::BindGroup,
    ) -> &mut wgpu::ComputePass<'static> {
        let pass = Self::open_pass(&mut self.pass, &mut self.encoder);
        match &self.bound {
            Some((bound_pipeline, bound_group)) if bound_pipeline == pipeline && bound_group == group => {}
            Some((bound_pipeline, _)) if bound_pipeline == pipeline => pass.set_bind_group(0, group, &[]),
            _ => {
                pass.set_pipeline(pipeline);
                pass.set_bind_group(0, group, &[]);
            }
        }
        self.bound = Some((pipeline.clone(), group.clone()));
        pass
    }

    /// The open compute pass with `pipeline` and each of `groups` (by
    /// group index) bound: a kernel with its own layout.
    pub(crate) fn pass_with_groups(
        &mut self,
        pipeline: &wgpu::ComputePipeline,
        groups: &[(u32, wgpu::BindGroup)],
    ) -> &mut wgpu::ComputePass<'static> {
        let pass = Self::open_pass(&mut self.pass, &mut self.encoder);
        pass.set_pipeline(pipeline);
        for (index, group) in groups {
            pass.set_bind_group(*index, group, &[]);
        }
        self.bound = None;
        pass
    }

    fn open_pass<'a>(
        pass: &'a mut Option<wgpu::ComputePass<'static>>,
        encoder: &mut wgpu::CommandEncoder,
    ) -> &'a mut wgpu::ComputePass<'static> {
        pass.get_or_insert_with(|| {
            encoder
                .begin_compute_pass(&wgpu::ComputePassDescriptor { label: None, timestamp_writes: None })
                .forget_lifetime()
        })
    }

    /// The kept group of `layout` over `windows`: the one the last dispatch
    /// bound if it is that, else `get`'s (remembered for the next).
    pub(crate) fn kept_group(
        &mut self,
        layout: &wgpu::BindGroupLayout,
        windows: Windows,
        get: impl FnOnce(Windows) -> wgpu::BindGroup,
    ) -> wgpu::BindGroup {
        match &self.last_group {
            Some((last_layout, last_windows, group)) if last_layout == layout && *last_windows == windows => {
                group.clone()
            }
            _ => {
                let group = get(windows.clone());
                self.last_group = Some((layout.clone(), windows, group.clone()));
                group
            }
        }
    }

    pub fn finish(mut self) -> wgpu::CommandBuffer {
        self.pass = None;
        self.encoder.finish()
    }
}

/// The checks of a prepared command that need its buffers: `plan` is what
/// preparing a command of this kind makes, and a copy moves whole words,
/// except at a buffer's end, whose padding is private.
pub fn check<S>(command: &Command<WgpuMemory, S>, plan: &Plan) -> Result<(), Error> {
    if !fits(command, plan) {
        return Err(Error::invalid("the command was prepared as a different command"));
    }
    if let Command::Copy { src, dst } = command {
        let ends_buffer = dst.offset + dst.len == dst.buffer.len();
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

/// True when `plan` is what `prepare` makes for a command of this kind.
fn fits<S>(command: &Command<WgpuMemory, S>, plan: &Plan) -> bool {
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

/// The window of its wgpu buffer that `span` binds (its padding to a word included).
fn binding(span: &Span<WgpuMemory>) -> Binding<'_> {
    Binding { buffer: span.buffer.buffer(), offset: span.buffer.at(span.offset), size: align4(span.len) }
}

/// Records a planned write of `dst`: in bulk where the bytes allow, masked
/// word writes for the rest.
fn write(gpu: &WgpuDevice, recorder: &mut Recorder, dst: &Span<WgpuMemory>, plan: &WritePlan) {
    let (held, buffer) = (&dst.buffer, dst.buffer.buffer());
    let ends_buffer = dst.offset + dst.len == dst.buffer.len();
    let layout = plan.to_buffer_end.as_ref().filter(|_| ends_buffer).unwrap_or(&plan.exact);
    if let Some((lo, hi)) = layout.bulk {
        match &plan.staging {
            Some(staging) => recorder.encoder().copy_buffer_to_buffer(staging, 0, buffer, held.at(lo), hi - lo),
            None => recorder.encoder().clear_buffer(buffer, held.at(lo), Some(hi - lo)),
        }
    }
    if let Some(patches) = &plan.patches {
        let operand = Binding { buffer, offset: held.at(0), size: align4(held.len()) };
        record_dispatches(gpu, recorder, patches, layout.patches.iter().copied(), &[operand]);
    }
}

/// Records a copy. wgpu copies between two buffers only, and two small
/// allocations may be slots of one (`super::slabs`): such a copy goes
/// through a scratch buffer, which wgpu keeps until the copy ran.
fn copy(gpu: &WgpuDevice, recorder: &mut Recorder, src: &Span<WgpuMemory>, dst: &Span<WgpuMemory>) {
    let (from, to, len) = (src.buffer.at(src.offset), dst.buffer.at(dst.offset), align4(dst.len));
    let encoder = recorder.encoder();
    if src.buffer.buffer() != dst.buffer.buffer() {
        encoder.copy_buffer_to_buffer(src.buffer.buffer(), from, dst.buffer.buffer(), to, len);
        return;
    }
    let usage = wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST;
    let scratch = buffer(&gpu.device, "weir copy within a buffer", len.max(4), usage);
    encoder.copy_buffer_to_buffer(src.buffer.buffer(), from, &scratch, 0, len);
    encoder.copy_buffer_to_buffer(&scratch, 0, dst.buffer.buffer(), to, len);
}

/// Records `command` with what was prepared for it (`fits` was checked).
/// Failures show in the error scope around it; it can be recorded again
/// (alone, when a run recorded together failed).
pub fn record<S>(gpu: &WgpuDevice, recorder: &mut Recorder, command: &Command<WgpuMemory, S>, plan: &Plan) {
    match (command, plan) {
        (Command::Zero { dst } | Command::Upload { dst, .. }, Plan::Write(plan)) => write(gpu, recorder, dst, plan),
        (Command::Copy { src, dst }, _) => copy(gpu, recorder, src, dst),
        (Command::Download { src, .. }, Plan::Download { staging, first, size }) => {
            recorder.encoder().copy_buffer_to_buffer(src.buffer.buffer(), src.buffer.at(*first), staging, 0, *size)
        }
        (_, Plan::Elementwise(plan)) => {
            let operands: SmallVec<[Binding<'_>; 3]> =
                command.elementwise().into_iter().flat_map(|(_, _, spans)| spans.into_iter().map(binding)).collect();
            record_dispatches(gpu, recorder, plan, plan.all(), &operands)
        }
        (Command::Custom { grid, args, .. }, Plan::Custom { pipeline, params }) => {
            // On the stack: a kernel binds a few buffers, and this runs per op.
            let bindings: SmallVec<[Binding<'_>; 8]> = args
                .iter()
                .filter_map(|arg| match arg {
                    KernelArg::Buffer(span, _) => Some(binding(span)),
                    KernelArg::Scalar(_) => None,
                })
                .collect();
            dispatch(gpu, recorder, pipeline, &bindings, params.as_ref().map(|p| (p, 0)), grid.groups);
        }
        // `fits` rules these out; a delay is not device work.
        _ => {}
    }
}
