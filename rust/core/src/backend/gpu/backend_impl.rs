//! The [`Backend`] implementation over any GPU driver.

use std::sync::Arc;

use super::device::{Device, LentToHost};
use super::issue::{Issue, Job, QueuedEvent};
use super::staging::Staged;
use super::stream::StreamRef;
use super::{DeviceBuffer, Driver, EventUse, GpuBackend, GpuEvent, GpuMemory, GpuStream, Prepared, RawPart};
use crate::backend::{
    Backend, BackendCounters, Collective, CollectivePart, Command, EnqueueError, OpIo, RawAccess, SignalKind, Span,
    UploadFrom,
};
use crate::completion::Completion;
use crate::device::{BackendKind, DeviceInfo};
use crate::error::{Error, Result};
use crate::host::HostBuffer;
use crate::kernel::Access;
use crate::lock::lock;
use weir_device::raw::RawStream;

impl<D: Driver> Backend for GpuBackend<D> {
    type Stream = GpuStream<D>;
    type Event = Arc<QueuedEvent<D>>;
    type Memory = GpuMemory<D>;
    type Prepared = Prepared<D>;
    type Timestamp = GpuEvent<D>;
    type Communicator = D::Communicator;

    const KIND: BackendKind = D::KIND;

    fn info(&self) -> DeviceInfo {
        self.device.info.clone()
    }

    const PEER_COPIES: bool = D::PEER_COPIES;

    fn allocate(&self, bytes: u64) -> Result<GpuMemory<D>> {
        self.noting_loss(self.driver().bind().and_then(|()| GpuMemory::new(&self.device, bytes)))
    }

    fn create_stream(&self, index: u32) -> Result<GpuStream<D>> {
        self.driver().bind()?;
        self.noting_loss(GpuStream::new(&self.device, index, self.wake))
    }

    fn prepare<R: PartialEq>(&self, command: &Command<R>) -> Result<Prepared<D>> {
        if let Some((kernel, scalar, operands)) = command.elementwise() {
            return Ok(self.builtin(kernel, &operands, scalar));
        }
        Ok(match command {
            Command::Zero { .. } | Command::Copy { .. } => Prepared::Direct,
            Command::Upload { dst, data } => self.stage_upload(dst, data)?,
            Command::Download { src, .. } => {
                let len = usize::try_from(src.len)
                    .map_err(|_| Error::invalid("a download larger than the host's address space"))?;
                self.driver().bind()?;
                Prepared::Download(self.device.stage(len)?)
            }
            #[cfg(feature = "test-support")]
            Command::Delay { duration } => self.delay(*duration),
            Command::Custom { kernel, grid, args } => self.prepare_custom(kernel, grid, args)?,
            // The element-wise ops, prepared above.
            _ => return Err(Error::internal("an element-wise op with no built-in kernel")),
        })
    }

    fn prepare_upload<R: PartialEq>(&self, dst: Span<R>, from: UploadFrom<'_>) -> Result<(Command<R>, Prepared<D>)> {
        // Memory this device locked is copied from directly; any other bytes
        // (memory another device locked too) straight into page-locked memory.
        // A size that differs is refused by `stage_upload` before it stages anything.
        let prepared = match from {
            UploadFrom::Host(host)
                if host.locked_by() == Some(Device::address(&self.device)) && host.len() as u64 == dst.len =>
            {
                Prepared::Upload(Staged::Host(host.clone()), dst.len)
            }
            _ => self.stage_upload(&dst, from.bytes())?,
        };
        Ok((Command::Upload { dst, data: Vec::new() }, prepared))
    }

    fn staging_buffer(&self, len: usize) -> Result<HostBuffer> {
        if len == 0 {
            return Ok(HostBuffer::heap(Vec::new()));
        }
        // Page-locked allocations need the device current on this thread, which may be any.
        self.driver().bind()?;
        let loan = self.device.stage(len)?;
        // SAFETY: a fresh loan of at least `len` bytes, and no copy uses it.
        Ok(unsafe { LentToHost::host_buffer(loan, len, self.device.clone()) })
    }

    unsafe fn enqueue(
        &self,
        stream: &GpuStream<D>,
        command: Command<&GpuMemory<D>>,
        prepared: Prepared<D>,
        io: OpIo,
    ) -> Result<(), EnqueueError> {
        // A lost device takes no more work, before any driver call.
        self.driver().loss().check().map_err(EnqueueError::Failed)?;
        let issue = Self::resolve(command, prepared)?;
        // The caller's contract keeps the memory alive and ordered until a
        // signal queued after this job completes.
        self.submit(Job::Op { stream: StreamRef::new(stream), issue, io })
    }

    fn record_event(&self, stream: &GpuStream<D>) -> Result<Arc<QueuedEvent<D>>> {
        self.driver().loss().check()?;
        let event = Arc::new(QueuedEvent::new(&self.device));
        self.device.issuer.submit(Job::Record { stream: StreamRef::new(stream), event: event.clone() })?;
        Ok(event)
    }

    fn wait_event(&self, stream: &GpuStream<D>, event: &Arc<QueuedEvent<D>>) -> Result<()> {
        self.driver().loss().check()?;
        // An event of another device (a peer's) is recorded by that device's
        // issuing thread: recorded before this wait is queued.
        if !Arc::ptr_eq(&event.device, &self.device) {
            event.device.issuer.flush();
        }
        self.device.issuer.submit(Job::Wait { stream: StreamRef::new(stream), event: event.clone() })
    }

    fn wait_for_stream(&self, stream: &GpuStream<D>, source: &GpuStream<D>) -> Result<()> {
        self.driver().loss().check()?;
        // One job, not a record and a wait: the source's own ordering event,
        // recorded and waited for in one go, with nothing for another thread to hold.
        self.device.issuer.submit(Job::Order { source: StreamRef::new(source), stream: StreamRef::new(stream) })
    }

    fn timestamp(&self, stream: &GpuStream<D>, completion: Arc<Completion>) -> Result<GpuEvent<D>> {
        self.driver().can_time()?;
        // Rare: made here, once every queued driver call has been made.
        self.device.issuer.flush();
        self.driver().bind()?;
        let event = GpuEvent::new(&self.device, EventUse::Timing)?;
        // SAFETY: both handles are alive and belong to this driver.
        self.noting_loss(unsafe { self.driver().event_record(event.raw, stream.raw) })?;
        // The stream's completion path, as a drain: a lost device, never an op's failure.
        self.noting_loss(stream.after(Box::new(move |status| completion.complete(status)), false))?;
        Ok(event)
    }

    fn signal(&self, stream: &GpuStream<D>, completion: Arc<Completion>, kind: SignalKind) -> Result<()> {
        self.driver().loss().check()?;
        self.device.issuer.submit(Job::Signal { stream: StreamRef::new(stream), completion, kind })
    }

    fn lost(&self) -> Option<Error> {
        self.driver().loss().get().cloned()
    }

    fn is_settled(&self, stream: &GpuStream<D>) -> bool {
        self.driver().bind().is_ok() && stream.is_settled()
    }

    unsafe fn enqueue_replay(
        &self,
        stream: &GpuStream<D>,
        id: u64,
        commands: Vec<(Command<&GpuMemory<D>>, Prepared<D>)>,
        io: OpIo,
    ) -> Result<(), EnqueueError> {
        let cached = lock(&self.graphs).get(&id).copied();
        // Without graphs, or with host copies (through staging buffers lent
        // per copy, which a graph cannot hold): command by command.
        let uploads = commands.iter().any(|(command, _)| matches!(command, Command::Upload { .. }));
        if cached.is_none() && (!D::GRAPHS || uploads) {
            // SAFETY: this function's contract.
            return unsafe { crate::backend::enqueue_in_order(self, stream, commands, io) };
        }
        let exec = match cached {
            Some(exec) => exec,
            // SAFETY: this function's contract, for the capture's commands.
            None => match unsafe { self.capture(commands) }? {
                Some(exec) => {
                    lock(&self.graphs).insert(id, exec);
                    exec
                }
                None => return Err(EnqueueError::Rejected(Error::internal("a replay was prepared for no commands"))),
            },
        };
        // The launch is a job like a launch of one kernel: in admission
        // order, and only once the replay's inputs ran without failing.
        self.submit(Job::Op { stream: StreamRef::new(stream), issue: Issue::Graph(exec), io })
    }

    fn prepares_replay(&self, id: u64) -> bool {
        !lock(&self.graphs).contains_key(&id)
    }

    fn forget_replay(&self, id: u64) {
        let forgotten = lock(&self.graphs).remove(&id);
        if let Some(exec) = forgotten {
            // A launch of it may still be queued: it is made before the graph goes.
            self.device.issuer.flush();
            if self.driver().bind().is_ok() {
                // SAFETY: captured by this driver, removed from the cache so
                // destroyed once; launches in flight finish first.
                unsafe { self.driver().graph_destroy(exec) };
            }
        }
    }

    unsafe fn external(
        &self,
        stream: &GpuStream<D>,
        buffers: &[(&GpuMemory<D>, Access)],
        io: OpIo,
        run: &mut dyn FnMut(RawAccess<'_>) -> Result<()>,
    ) -> Result<()> {
        // The closure's work follows every op queued before it, whose driver
        // calls have then been made: a failure among them is known.
        self.device.issuer.flush();
        if let Some(error) = io.failed_input(stream.index) {
            return Err(error);
        }
        self.driver().bind()?;
        let raw: Vec<DeviceBuffer> =
            buffers.iter().map(|(memory, _)| DeviceBuffer { ptr: memory.ptr, len: memory.len }).collect();
        let access = raw_access(D::raw_stream(stream.raw), &raw).ok_or_else(|| {
            Error::unsupported(D::KIND, "external ops on a driver with no raw stream for foreign code")
        })?;
        let outcome = run(access);
        // Foreign code may have switched the thread's current device.
        self.driver().bind()?;
        outcome
    }

    fn counters(&self) -> BackendCounters {
        self.device.counters.snapshot()
    }

    fn communicator(members: &[&Self]) -> Result<D::Communicator> {
        let drivers: Vec<&D> = members.iter().map(|member| member.driver()).collect();
        D::communicator(&drivers).inspect_err(|error| drivers.iter().for_each(|driver| driver.loss().record(error)))
    }

    fn joined_communicator(
        member: &Self,
        id: &[u8; crate::backend::GROUP_ID_BYTES],
        ranks: usize,
        rank: usize,
    ) -> Result<D::Communicator> {
        D::joined_communicator(member.driver(), id, ranks, rank)
            .inspect_err(|error| member.driver().loss().record(error))
    }

    unsafe fn enqueue_collective(
        communicator: &D::Communicator,
        collective: &Collective,
        parts: Vec<CollectivePart<'_, Self>>,
    ) -> Result<(), EnqueueError> {
        // Made here, after every member's queued driver calls.
        parts.iter().for_each(|part| part.backend.device.issuer.flush());
        // Those calls fail their ops as they run, after admission looked at
        // the inputs: looked at again, now that they ran. The collective
        // runs all the same (a joined group's other ranks meet it), but each
        // rank's result mixes every rank's input, so a failed one fails them all.
        let failed_input = parts.iter().flat_map(|part| &part.io.inputs).find_map(|input| input.failure().cloned());
        let whole = |memory: &GpuMemory<D>| DeviceBuffer { ptr: memory.ptr, len: memory.len };
        let raw: Vec<RawPart<'_, D>> = parts
            .iter()
            .map(|part| RawPart {
                driver: part.backend.driver(),
                stream: part.stream.raw,
                send: whole(part.send),
                receive: whole(part.receive.unwrap_or(part.send)),
            })
            .collect();
        // SAFETY: every memory is a live allocation of its member's driver,
        // kept alive and ordered by the caller (this function's contract).
        unsafe { D::enqueue_collective(communicator, collective, &raw) }
            .inspect_err(|error| raw.iter().for_each(|part| part.driver.loss().record(error)))
            .map_err(EnqueueError::Failed)?;
        if let Some(cause) = failed_input {
            for part in &parts {
                part.io.fail(Error::dependency_failed(part.stream.index, &cause), &part.stream.failed_ops);
            }
        }
        Ok(())
    }
}

/// What an external op's closure gets for a stream's raw handle and its
/// buffers; `None` for a driver whose streams foreign code cannot use (the
/// fake driver of the engine's tests).
// With neither CUDA nor HIP, only the fake's tests build this: it answers `None`.
#[cfg_attr(not(any(feature = "cuda", feature = "hip")), allow(unused_variables))]
fn raw_access(stream: RawStream, buffers: &[DeviceBuffer]) -> Option<RawAccess<'_>> {
    match stream {
        #[cfg(feature = "cuda")]
        RawStream::Cuda(stream) => Some(RawAccess::Cuda { stream, buffers }),
        #[cfg(feature = "hip")]
        RawStream::Hip(stream) => Some(RawAccess::Hip { stream, buffers }),
        _ => None,
    }
}
