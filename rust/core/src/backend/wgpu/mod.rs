//! The wgpu backend: WGSL kernels on one device queue, fences from
//! `Queue::on_submitted_work_done`. The device itself (adapters, pipelines,
//! shared buffers, bind groups, error scopes, the recorder) is the device
//! layer's (`weir_device::wgpu`); this engine orders, submits and completes.
//!
//! - **Adapter**: a discrete GPU first; the builder's `wgpu_backends` and
//!   `adapter_named` narrow the choice (`weir_device::wgpu::adapter`). No adapter is
//!   [`Error::Unavailable`] naming the backends tried.
//! - **Streams** are logical lanes on the one queue (`lanes`): cross-stream
//!   order is submission order; an event wait that is already satisfied costs
//!   nothing, one that is not holds the waiting lane back.
//! - **Fences**: pending work is submitted, then `on_submitted_work_done`
//!   registers the completion; the poll thread (`poll`) is the only caller
//!   of `device.poll` and runs the callbacks. A fence on a lane whose work is
//!   known finished completes at once.
//!   A fence also waits for the reads admitted before it on its lane.
//! - **Ops** are planned outside the runtime's ordering boundary (the
//!   device layer's `plan`: compiles, uniforms, staging), checked and queued
//!   on their lane (`enqueue`, `queued`: no wgpu object per queued op), then
//!   recorded a batch to one encoder as the lane submits (the layer's
//!   `record`, with its bind groups, built-ins and pipeline cache); reads
//!   map a staging buffer (`readback`); timestamps are timestamp queries
//!   read back the same way ([`WgpuTimestamp`]).
//! - **Errors**: every wgpu call that can fail runs in an error scope. Bad
//!   input, a WGSL source that does not compile or whose bindings are not
//!   what its arguments bind (the layer's `interface`) among it, refuses the op before
//!   admission; an op that fails to record (found as its batch is
//!   recorded) fails alone like a failed job on the CPU backend: its
//!   versions, its readers and its stream's next fence report it. A
//!   submission wgpu refuses whole (an external write's buffer left
//!   mapped) fails everything in it the same way, and its streams.
//! - **Retirement**: a dropped stream's lane goes once its work is issued.

mod lanes;
mod poll;
mod queued;
mod raw;
mod readback;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The wgpu crate this backend is built on, for code that uses [`WgpuRawAccess`].
pub use ::wgpu;
use lanes::{Item, OnQueue, Shared, WgpuLane};
use poll::Poller;
use queued::{Queued, QueuedOp, Recorded};
pub use raw::{WgpuBufferRange, WgpuRawAccess};
use readback::Readback;
pub(crate) use weir_device::wgpu::adapter::list;
use weir_device::wgpu::memory::buffer;
pub use weir_device::wgpu::memory::WgpuMemory;
use weir_device::wgpu::plan::{self, Plan};
use weir_device::wgpu::record::check;
use weir_device::wgpu::scope::{scoped, BACKEND};
use weir_device::wgpu::WgpuDevice;

use crate::backend::lane::{LaneEvent, Step};
#[cfg(feature = "test-support")]
use crate::backend::{timer::Hold, Gate};
use crate::backend::{
    Backend, BackendCounters, Command, DeviceTimestamp, EnqueueError, HostSink, OpIo, RawAccess, SignalKind, Span,
    UploadFrom,
};
use crate::completion::Completion;
use crate::device::{BackendKind, DeviceInfo};
use crate::diagnostics::Counters;
use crate::error::{Error, Result};
use crate::kernel::Access;
use crate::lock::lock;
use crate::options::RuntimeOptions;

/// The wgpu backend.
pub struct WgpuBackend {
    shared: Arc<Shared>,
    // Dropped after `shared`: the poll thread finishes the callbacks still registered.
    _poller: Poller,
}

/// A logical stream: a lane on the device's queue. Dropping it retires the
/// lane once the work on it is issued.
pub struct WgpuStream {
    lane: Arc<WgpuLane>,
}

impl Drop for WgpuStream {
    fn drop(&mut self) {
        Shared::retire(&self.lane);
    }
}

/// "Lane S has issued its first n items". Cheap: no device object.
pub struct WgpuEvent(LaneEvent<OnQueue>);

/// A timestamp query in flight or read: its ticks arrive through a read-back.
/// Counted among the live events: it is wgpu's timing event.
pub struct WgpuTimestamp {
    sink: Arc<HostSink>,
    /// The ticks, once taken out of the sink (the first time they are asked for).
    ticks: Mutex<Option<u64>>,
    /// Nanoseconds per tick (`Queue::get_timestamp_period`).
    period: f32,
    counters: Arc<Counters>,
}

impl Drop for WgpuTimestamp {
    fn drop(&mut self) {
        self.counters.live_events.fetch_sub(1, Ordering::SeqCst);
    }
}

impl WgpuTimestamp {
    fn ticks(&self) -> Result<u64> {
        let mut ticks = lock(&self.ticks);
        if let Some(ticks) = *ticks {
            return Ok(ticks);
        }
        let bytes = self.sink.take().ok_or_else(|| Error::internal("a timestamp was read before it was taken"))?;
        let raw: [u8; 8] =
            bytes.get(..8).and_then(|b| b.try_into().ok()).ok_or_else(|| Error::internal("a short timestamp query"))?;
        let value = u64::from_le_bytes(raw);
        *ticks = Some(value);
        Ok(value)
    }
}

impl DeviceTimestamp for WgpuTimestamp {
    fn elapsed_since(&self, earlier: &Self) -> Result<Duration> {
        let ticks = self.ticks()?.saturating_sub(earlier.ticks()?);
        Ok(Duration::from_nanos((ticks as f64 * f64::from(self.period)).round() as u64))
    }
}

impl WgpuBackend {
    /// Opens adapter `index` (0: the preferred one; see the module doc)
    /// with every other option at its default (backend-level tests).
    #[cfg(feature = "test-support")]
    pub fn open(index: usize) -> Result<WgpuBackend> {
        WgpuBackend::open_with(&RuntimeOptions { device: index, ..RuntimeOptions::default() })
    }

    /// Opens adapter `options.device` as `options` say.
    pub(crate) fn open_with(options: &RuntimeOptions) -> Result<WgpuBackend> {
        let gpu = WgpuDevice::open(&options.adapters, options.device, options.own_device)?;
        let poller = Poller::spawn(gpu.device.clone(), options.spin)?;
        let shared = Shared::new(gpu, poller.state.clone());
        Ok(WgpuBackend { shared, _poller: poller })
    }

    fn gpu(&self) -> &WgpuDevice {
        &self.shared.gpu
    }

    /// Test support: the wgpu buffers that small allocations share, alive now.
    #[cfg(feature = "test-support")]
    pub fn shared_buffers(&self) -> usize {
        self.gpu().slabs.count()
    }

    /// Test support: the bind groups kept for reuse now; `None` where the
    /// device takes no immediate data (every group then holds a per-op
    /// uniform buffer, and none is kept).
    #[cfg(feature = "test-support")]
    pub fn kept_bind_groups(&self) -> Option<usize> {
        (self.gpu().immediate_bytes > 0).then(|| self.gpu().bind_groups.kept())
    }
}

impl Backend for WgpuBackend {
    type Stream = WgpuStream;
    type Event = WgpuEvent;
    type Memory = WgpuMemory;
    type Prepared = Plan;
    type Timestamp = WgpuTimestamp;
    type Communicator = ();

    fn communicator(_members: &[&Self]) -> Result<()> {
        Err(Error::unsupported(
            BackendKind::Wgpu,
            "collectives over a device group: wgpu adapters share no memory and no events to meet in \
             (read each member's buffer and write the result on every device)",
        ))
    }

    fn lost(&self) -> Option<Error> {
        crate::lock::lock(&self.gpu().device_error).clone().filter(Error::is_device_lost)
    }

    const KIND: BackendKind = BackendKind::Wgpu;

    fn info(&self) -> DeviceInfo {
        self.gpu().info.clone()
    }

    fn allocate(&self, bytes: u64) -> Result<WgpuMemory> {
        WgpuMemory::allocate(self.gpu(), bytes)
    }

    fn create_stream(&self, number: u32) -> Result<WgpuStream> {
        Ok(WgpuStream { lane: self.shared.add_lane(number) })
    }

    fn prepare<R: PartialEq>(&self, command: &Command<R>) -> Result<Plan> {
        plan::prepare(self.gpu(), command)
    }

    fn prepare_upload<R: PartialEq>(&self, dst: Span<R>, from: UploadFrom<'_>) -> Result<(Command<R>, Plan)> {
        // Straight from the caller's bytes into the staging buffer.
        let prepared = plan::prepare_upload(self.gpu(), &dst, from.bytes())?;
        Ok((Command::Upload { dst, data: Vec::new() }, prepared))
    }

    /// Checks `command` against its buffers and queues it with its plan.
    /// Nothing is recorded yet: the queued op holds its buffers and plan, not
    /// a command buffer, until its lane submits (see `queued`). Rejected: the
    /// command does not fit its buffers, or its stream is gone; nothing was
    /// queued. Failed: the lane failed when it submitted earlier work. An op
    /// that fails as its batch is recorded fails later, alone, through `io`.
    unsafe fn enqueue(
        &self,
        stream: &WgpuStream,
        command: Command<&WgpuMemory>,
        plan: Plan,
        io: OpIo,
    ) -> Result<(), EnqueueError> {
        let gpu = self.gpu();
        let mut command = command.map(WgpuMemory::clone);
        check(&command, &plan).map_err(EnqueueError::Rejected)?;
        #[cfg(feature = "test-support")]
        if let Command::Delay { duration } = command {
            self.shared.push(&stream.lane, Step::Hold(Hold::Delay(duration), io));
            return Ok(());
        }
        // `check` saw that the plan is the command's kind.
        let readback = match (&mut command, &plan) {
            (Command::Upload { data, .. }, _) => {
                // Its bytes are in its staging buffer since `prepare`.
                *data = Vec::new();
                gpu.counters.host_to_device_copies.fetch_add(1, Ordering::Relaxed);
                None
            }
            // Issued after the submission that copies into its staging buffer.
            (Command::Download { src, sink }, Plan::Download { staging, first, .. }) => {
                gpu.counters.device_to_host_copies.fetch_add(1, Ordering::Relaxed);
                Some(Readback::new(staging.clone(), (src.offset - first) as usize, src.len as usize, sink.clone()))
            }
            _ => None,
        };
        let copy_failed = readback.as_ref().map(|readback| readback.copy_failed.clone());
        let op = Box::new(QueuedOp::new(gpu, command, plan, io, copy_failed));
        self.shared.record(&stream.lane, Queued::Op(op), readback).map_err(EnqueueError::Failed)
    }

    fn record_event(&self, stream: &WgpuStream) -> Result<WgpuEvent> {
        Ok(WgpuEvent(self.shared.mark(&stream.lane)))
    }

    fn wait_event(&self, stream: &WgpuStream, event: &WgpuEvent) -> Result<()> {
        self.shared.wait(&stream.lane, &event.0);
        Ok(())
    }

    /// One command buffer per timestamp: an empty compute pass whose
    /// end-of-pass write takes the queue's clock once every command before
    /// it is done (Vulkan writes it at the bottom of the pipe), resolved into
    /// a buffer and read back like a download. Needs the adapter's
    /// `TIMESTAMP_QUERY` feature (pass timestamp writes only, not
    /// `TIMESTAMP_QUERY_INSIDE_ENCODERS`: each op already has its own encoder).
    fn timestamp(&self, stream: &WgpuStream, completion: Arc<Completion>) -> Result<WgpuTimestamp> {
        let gpu = self.gpu();
        if !gpu.timestamps {
            return Err(Error::unsupported(
                BACKEND,
                format!("timestamps need the adapter feature TIMESTAMP_QUERY, which {} lacks", gpu.info.name),
            ));
        }
        let size = wgpu::QUERY_SIZE as u64;
        let recorded = scoped(&gpu.device, || {
            let queries = gpu.device.create_query_set(&wgpu::QuerySetDescriptor {
                label: Some("weir timestamp"),
                ty: wgpu::QueryType::Timestamp,
                count: 1,
            });
            let resolve = wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC;
            let resolved = buffer(&gpu.device, "weir timestamp resolve", size, resolve);
            let read_back = wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST;
            let staging = buffer(&gpu.device, "weir timestamp read-back", size, read_back);
            let mut encoder = gpu.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
            drop(encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("weir timestamp"),
                timestamp_writes: Some(wgpu::ComputePassTimestampWrites {
                    query_set: &queries,
                    beginning_of_pass_write_index: None,
                    end_of_pass_write_index: Some(0),
                }),
            }));
            encoder.resolve_query_set(&queries, 0..1, &resolved, 0);
            encoder.copy_buffer_to_buffer(&resolved, 0, &staging, 0, size);
            (encoder.finish(), staging)
        });
        let (commands, staging) = recorded.map_err(|failure| failure.on_stream(stream.lane.runner.stream))?;
        let sink = HostSink::new(completion);
        let readback = Readback::new(staging, 0, size as usize, sink.clone());
        let queued = Queued::Commands(Box::new(Recorded { commands, buffers: Vec::new(), io: OpIo::default() }));
        self.shared.record(&stream.lane, queued, Some(readback))?;
        gpu.counters.live_events.fetch_add(1, Ordering::SeqCst);
        let (period, counters) = (gpu.timestamp_period, gpu.counters.clone());
        Ok(WgpuTimestamp { sink, ticks: Mutex::new(None), period, counters })
    }

    fn signal(&self, stream: &WgpuStream, completion: Arc<Completion>, kind: SignalKind) -> Result<()> {
        self.shared.push(&stream.lane, Step::Job(Item::Signal(completion, kind)));
        Ok(())
    }

    fn flush_queued(&self) {
        self.shared.flush_all();
    }

    fn is_settled(&self, stream: &WgpuStream) -> bool {
        self.shared.is_settled(&stream.lane)
    }

    unsafe fn external(
        &self,
        stream: &WgpuStream,
        buffers: &[(&WgpuMemory, Access)],
        io: OpIo,
        run: &mut dyn FnMut(RawAccess<'_>) -> Result<()>,
    ) -> Result<()> {
        // wgpu ops fail as they are recorded: what this op reads may fail
        // before (seen here) or after it (seen when its batch is recorded).
        if let Some(error) = io.failed_input(stream.lane.runner.stream) {
            return Err(error);
        }
        let gpu = self.gpu();
        let memories: Vec<&WgpuMemory> = buffers.iter().map(|&(memory, _)| memory).collect();
        let mut raw = WgpuRawAccess::new(&gpu.device, &gpu.queue, &memories);
        let recorded = scoped(&gpu.device, || {
            run(RawAccess::Wgpu(&mut raw))?;
            Ok::<_, Error>(raw.finish())
        });
        match recorded {
            Ok(Ok((commands, buffers))) => {
                // Its share of the queue goes back here, as before (the clone
                // holds none): only its outcome waits for the submission.
                let io = io.clone();
                self.shared.record(&stream.lane, Queued::Commands(Box::new(Recorded { commands, buffers, io })), None)
            }
            // The closure's own error: nothing was enqueued, the stream goes on.
            Ok(Err(error)) => Err(error),
            Err(failure) => {
                let error = failure.on_stream(stream.lane.runner.stream);
                self.shared.fail(&stream.lane, error.clone());
                Err(error)
            }
        }
    }

    #[cfg(feature = "test-support")]
    fn hold(&self, stream: &WgpuStream, gate: Arc<Gate>) -> Result<()> {
        self.shared.push(&stream.lane, Step::Hold(Hold::Gate(gate), OpIo::default()));
        Ok(())
    }

    fn counters(&self) -> BackendCounters {
        self.gpu().counters.snapshot()
    }
}
