//! The event-stream layer CUDA and HIP share.
//!
//! A GPU backend is a [`Driver`]: the few calls that differ between CUDA and
//! HIP (streams, events, memory, copies, memsets, runtime compilation,
//! launches, host callbacks). Everything else lives here, once:
//! - the [`Backend`] implementation over any driver;
//! - owners for streams, events and allocations, each releasing its handle
//!   exactly once in `Drop`, with live counts;
//! - the completion path: a host callback or a per-stream waiter thread
//!   (see [`stream`]);
//! - the built-in kernels as one C source and the compiled-kernel cache;
//! - page-locked staging for uploads and downloads, so enqueueing a copy
//!   never waits for the device.
//!
//! Cross-stream order comes only from the scheduler's `record_event` /
//! `wait_event`; this layer adds no ordering of its own.

mod device;
mod driver;
mod kernels;
mod owners;
mod rtc;
mod stream;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use crate::backend::{
    Backend, BackendCounters, BinaryOp, Command, EnqueueError, KernelArg, OpIo, RawAccess, SignalKind, Span,
};
use crate::completion::Completion;
use crate::device::{BackendKind, DeviceInfo, KernelLanguage};
use crate::error::{Error, Result};
use crate::kernel::Grid;

use device::Device;
pub use driver::DeviceBuffer;
pub(crate) use driver::{
    callback_run, handle_calls, pass_callback, Callback, Driver, EventUse, Handle, Launch, Status,
};
use kernels::{Param, Params};
pub use kernels::{BUILTIN_ENTRIES, BUILTIN_SOURCE};
pub(crate) use owners::{GpuEvent, GpuMemory};
pub(crate) use rtc::{compile, rtc_calls, Rtc};
pub(crate) use stream::{GpuStream, Wake};

/// Threads per block of the built-in kernels.
const BLOCK: u32 = 256;
/// The built-ins loop over their elements, so a bounded grid covers any size.
const MAX_GROUPS: u64 = 65_535;

/// A [`Backend`] over one GPU driver.
pub(crate) struct GpuBackend<D: Driver> {
    device: Arc<Device<D>>,
    wake: Wake,
    next_stream: AtomicU32,
}

impl<D: Driver> GpuBackend<D> {
    /// A backend over `driver`, its built-in kernels compiled and loaded now:
    /// loading a module can synchronise the whole device, which must not
    /// happen later behind work in flight.
    pub(crate) fn new(driver: D) -> Result<Self> {
        let backend =
            GpuBackend { device: Device::new(driver), wake: Wake::from_env(D::WAKE), next_stream: AtomicU32::new(0) };
        backend.driver().bind()?;
        for entry in BUILTIN_ENTRIES {
            backend.device.kernels.function(backend.driver(), BUILTIN_SOURCE, entry)?;
        }
        Ok(backend)
    }

    fn driver(&self) -> &D {
        &self.device.driver
    }

    fn address(span: &Span<&GpuMemory<D>>) -> Result<u64> {
        match span.offset.checked_add(span.len) {
            Some(end) if end <= span.buffer.len => Ok(span.buffer.ptr + span.offset),
            _ => Err(Error::OutOfRange { offset: span.offset, size: span.len, len: span.buffer.len }),
        }
    }

    fn f32_count(span: &Span<&GpuMemory<D>>) -> u64 {
        span.len / 4
    }

    fn launch_builtin(&self, stream: &GpuStream<D>, entry: &str, items: u64, params: &[Param]) -> Result<()> {
        let groups = items.div_ceil(u64::from(BLOCK)).clamp(1, MAX_GROUPS) as u32;
        let grid = Grid::new([groups, 1, 1], [BLOCK, 1, 1]);
        self.launch(stream, kernels::BUILTIN_SOURCE, entry, &grid, params)
    }

    fn launch(&self, stream: &GpuStream<D>, source: &str, entry: &str, grid: &Grid, params: &[Param]) -> Result<()> {
        let function = self.device.kernels.function(self.driver(), source, entry)?;
        let mut params = Params::new(params);
        let mut pointers = params.pointers();
        // SAFETY: `function` was loaded by this driver; the pointers point into
        // `params`, which outlives the call; buffer addresses were range-checked.
        unsafe { self.driver().launch(Launch { function, grid, stream: stream.raw, params: &mut pointers }) }
    }

    fn zero(&self, stream: &GpuStream<D>, dst: u64, len: u64) -> Result<()> {
        // The widest memset the alignment allows: 32-bit stores fill faster.
        // SAFETY: `dst..dst + len` lies in a live allocation (range-checked by the caller).
        unsafe {
            if dst.is_multiple_of(4) && len.is_multiple_of(4) {
                self.driver().memset_d32(dst, 0, len / 4, stream.raw)
            } else {
                self.driver().memset_d8(dst, 0, len, stream.raw)
            }
        }
    }

    fn upload(&self, stream: &GpuStream<D>, dst: u64, data: Vec<u8>) -> Result<()> {
        let mut loan = self.device.stage(data.len())?;
        // SAFETY: a fresh loan of at least `data.len()` bytes; no copy uses it yet.
        unsafe { loan.bytes_mut(data.len()) }.copy_from_slice(&data);
        // SAFETY: the loan stays alive until the callback below, which runs
        // after the copy; `dst` was range-checked.
        unsafe { self.driver().copy_h2d(dst, loan.ptr(), data.len() as u64, stream.raw)? };
        self.device.counters.host_to_device_copies.fetch_add(1, Ordering::SeqCst);
        stream.after(Box::new(move |_| drop(loan)))
    }

    fn download(&self, stream: &GpuStream<D>, src: u64, len: u64, sink: Arc<crate::backend::HostSink>) -> Result<()> {
        let mut loan = self.device.stage(len as usize)?;
        // SAFETY: the loan outlives the copy (it is only touched again in the
        // callback, after the copy); `src` was range-checked.
        unsafe { self.driver().copy_d2h(loan.ptr(), src, len, stream.raw)? };
        self.device.counters.device_to_host_copies.fetch_add(1, Ordering::SeqCst);
        stream.after(Box::new(move |status| match status {
            // SAFETY: the stream passed the copy, and `len` is the loan's length.
            Ok(()) => sink.deliver(unsafe { loan.bytes_mut(len as usize) }.to_vec()),
            Err(error) => sink.fail(error),
        }))
    }

    /// Makes the driver calls for `command` on `stream`.
    fn enqueue_command(&self, stream: &GpuStream<D>, command: Command<&GpuMemory<D>>) -> Result<()> {
        self.driver().bind()?;
        match command {
            Command::Zero { dst } => self.zero(stream, Self::address(&dst)?, dst.len),
            Command::Fill { dst, word } => {
                let words = dst.len / 4;
                let params = [Param::Pointer(Self::address(&dst)?), Param::U32(word), Param::U64(words)];
                self.launch_builtin(stream, "weir_fill_u32", words, &params)
            }
            Command::Copy { src, dst } => {
                let (from, to) = (Self::address(&src)?, Self::address(&dst)?);
                // SAFETY: both ranges checked; the scheduler ordered the copy.
                unsafe { self.driver().copy_d2d(to, from, dst.len.min(src.len), stream.raw) }
            }
            Command::Upload { dst, data } => {
                if data.len() as u64 != dst.len {
                    return Err(Error::invalid("upload size differs from its destination"));
                }
                self.upload(stream, Self::address(&dst)?, data)
            }
            Command::Download { src, sink } => self.download(stream, Self::address(&src)?, src.len, sink),
            Command::Binary { op, a, b, out } => {
                let entry = match op {
                    BinaryOp::Add => "weir_add_f32",
                    BinaryOp::Mul => "weir_mul_f32",
                };
                let params = [
                    Param::Pointer(Self::address(&a)?),
                    Param::Pointer(Self::address(&b)?),
                    Param::Pointer(Self::address(&out)?),
                    Param::U64(Self::f32_count(&out)),
                ];
                self.launch_builtin(stream, entry, Self::f32_count(&out), &params)
            }
            Command::Scale { x, out, alpha } => {
                let params = [
                    Param::Pointer(Self::address(&x)?),
                    Param::Pointer(Self::address(&out)?),
                    Param::F32(alpha),
                    Param::U64(Self::f32_count(&out)),
                ];
                self.launch_builtin(stream, "weir_scale_f32", Self::f32_count(&out), &params)
            }
            Command::Axpy { x, y, alpha } => {
                let params = [
                    Param::Pointer(Self::address(&x)?),
                    Param::Pointer(Self::address(&y)?),
                    Param::F32(alpha),
                    Param::U64(Self::f32_count(&y)),
                ];
                self.launch_builtin(stream, "weir_axpy_f32", Self::f32_count(&y), &params)
            }
            Command::Iota { out, start } => {
                let params =
                    [Param::Pointer(Self::address(&out)?), Param::U32(start), Param::U64(Self::f32_count(&out))];
                self.launch_builtin(stream, "weir_iota_u32", Self::f32_count(&out), &params)
            }
            Command::Delay { duration } => {
                let ticks = self.driver().delay_ticks(duration);
                let grid = Grid::new([1, 1, 1], [1, 1, 1]);
                self.launch(stream, kernels::BUILTIN_SOURCE, "weir_delay", &grid, &[Param::U64(ticks)])
            }
            Command::Custom { kernel, grid, args } => {
                let source = Self::custom_source(&kernel).ok_or_else(|| {
                    Error::unsupported(
                        D::KIND.name(),
                        format!("kernel {} has no {} source", kernel.name, D::KIND.name()),
                    )
                })?;
                let params = args
                    .iter()
                    .map(|arg| match arg {
                        KernelArg::Buffer(span, _) => Self::address(span).map(Param::Pointer),
                        KernelArg::Scalar(scalar) => Ok(Param::U32(scalar.bits())),
                    })
                    .collect::<Result<Vec<_>>>()?;
                self.launch(stream, &source.code, &source.entry, &grid, &params)
            }
        }
    }

    fn custom_source(kernel: &crate::kernel::CustomKernel) -> Option<&crate::KernelSource> {
        match D::KIND {
            BackendKind::Cuda => kernel.cuda.as_ref(),
            BackendKind::Hip => kernel.hip.as_ref(),
            _ => None,
        }
    }
}

impl<D: Driver> Backend for GpuBackend<D> {
    type Stream = GpuStream<D>;
    type Event = GpuEvent<D>;
    type Memory = GpuMemory<D>;
    type Prepared = ();

    fn kind(&self) -> BackendKind {
        D::KIND
    }

    fn info(&self) -> DeviceInfo {
        self.device.info.clone()
    }

    fn kernel_language(&self) -> KernelLanguage {
        D::LANGUAGE
    }

    fn allocate(&self, bytes: u64) -> Result<GpuMemory<D>> {
        self.driver().bind()?;
        GpuMemory::new(&self.device, bytes)
    }

    fn create_stream(&self) -> Result<GpuStream<D>> {
        self.driver().bind()?;
        let index = self.next_stream.fetch_add(1, Ordering::Relaxed);
        GpuStream::new(&self.device, index, self.wake)
    }

    fn prepare<R>(&self, _command: &Command<R>) -> Result<()> {
        Ok(())
    }

    unsafe fn enqueue(
        &self,
        stream: &GpuStream<D>,
        command: Command<&GpuMemory<D>>,
        (): (),
        // GPU ops fail at enqueue (a launch) or fail the device: none fails later alone.
        _io: OpIo,
    ) -> Result<(), EnqueueError> {
        self.enqueue_command(stream, command).map_err(|error| match error {
            // What the argument checks and the kernel compiler report: nothing was enqueued.
            Error::InvalidArgument(_) | Error::Unsupported { .. } | Error::OutOfRange { .. } => {
                EnqueueError::Rejected(error)
            }
            other => EnqueueError::Failed(other),
        })
    }

    fn record_event(&self, stream: &GpuStream<D>) -> Result<GpuEvent<D>> {
        self.driver().bind()?;
        let event = GpuEvent::new(&self.device, EventUse::StreamOrder)?;
        // SAFETY: both handles are alive and belong to this driver.
        unsafe { self.driver().event_record(event.raw, stream.raw)? };
        Ok(event)
    }

    fn wait_event(&self, stream: &GpuStream<D>, event: &GpuEvent<D>) -> Result<()> {
        self.driver().bind()?;
        // SAFETY: both handles are alive; the driver keeps the event's recorded
        // state for the wait even if the event is destroyed right after.
        unsafe { self.driver().stream_wait_event(stream.raw, event.raw) }
    }

    fn signal(&self, stream: &GpuStream<D>, completion: Arc<Completion>, _kind: SignalKind) -> Result<()> {
        self.driver().bind()?;
        stream.after(Box::new(move |status| completion.complete(status)))
    }

    unsafe fn external_write(
        &self,
        stream: &GpuStream<D>,
        buffers: &[&GpuMemory<D>],
        write: &mut dyn FnMut(RawAccess<'_>) -> Result<()>,
    ) -> Result<()> {
        self.driver().bind()?;
        let raw: Vec<DeviceBuffer> =
            buffers.iter().map(|memory| DeviceBuffer { ptr: memory.ptr, len: memory.len }).collect();
        let outcome = write(D::raw_access(stream.raw, &raw));
        // Foreign code may have switched the thread's current device.
        self.driver().bind()?;
        outcome
    }

    fn counters(&self) -> BackendCounters {
        self.device.counters.snapshot()
    }
}
