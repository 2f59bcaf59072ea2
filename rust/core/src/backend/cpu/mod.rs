//! The CPU backend: the embedded default and the scheduler's test bench.
//!
//! Streams run on a bounded pool of worker threads; memory is host memory
//! watched by a race detector, and the ops run over it, on the device
//! layer's host device (`weir_device::host`); events are "stream S finished
//! n jobs"; gates let tests hold a stream at a chosen point to force any
//! interleaving.

mod worker;

use std::sync::Arc;

use crate::backend::lane::LaneEvent;
pub use weir_device::host::CpuMemory;
use weir_device::host::{self, collective, wire};
pub(crate) use wire::new_id as new_group_id;
pub use worker::CpuStream;
use worker::{HostJobs, Job};

use crate::backend::pool::Pool;
#[cfg(feature = "test-support")]
use crate::backend::{lane::Step, timer::Hold, Gate};
use crate::backend::{
    Backend, BackendCounters, Collective, CollectivePart, Command, Counters, DeviceTimestamp, EnqueueError, HostSink,
    OpIo, RawAccess, SignalKind, Span, GROUP_ID_BYTES,
};
use crate::completion::Completion;
use crate::device::{BackendKind, DeviceInfo, LaunchLimits};
use crate::error::{Error, Result};
use crate::kernel::{Access, CpuKernelArgs, Grid};

/// The CPU backend.
#[derive(Debug, Default)]
pub struct CpuBackend {
    counters: Arc<Counters>,
    /// The index it was opened as (every opening is a device of its own).
    index: usize,
}

/// A CPU group's communicator: nothing for a group in one process (its
/// parts meet in memory), the wire to the other ranks for a joined one.
pub struct CpuCommunicator(Option<Arc<wire::Wire>>);

/// "Stream S has finished n jobs".
pub struct CpuEvent(LaneEvent<HostJobs>);

/// The worker's monotonic clock when the stream got to the timestamp.
pub struct CpuTimestamp {
    taken: Arc<std::sync::OnceLock<std::time::Instant>>,
    /// Counted among the live events as this lane event: it is the CPU's
    /// timing event.
    _live: LaneEvent<HostJobs>,
}

impl DeviceTimestamp for CpuTimestamp {
    fn elapsed_since(&self, earlier: &Self) -> Result<std::time::Duration> {
        match (earlier.taken.get(), self.taken.get()) {
            (Some(earlier), Some(later)) => Ok(later.saturating_duration_since(*earlier)),
            _ => Err(Error::internal("a timestamp was read before its stream got to it")),
        }
    }
}

/// Host work an external op enqueues on a CPU stream.
pub type CpuHostWork = Box<dyn FnOnce(&mut CpuKernelArgs<'_>) -> std::result::Result<(), String> + Send>;

/// Raw access on the CPU backend: host closures that run on the stream's
/// worker, in admission order, over the op's buffers as a CPU kernel gets
/// them (in the order given, each as declared: `bytes_mut` and `f32s_mut`
/// for those it writes). An `Err` fails the op, as a kernel's does.
#[derive(Default)]
pub struct CpuRawAccess {
    work: Vec<CpuHostWork>,
}

impl CpuRawAccess {
    /// Enqueues `work` to run on the stream over the op's buffers.
    pub fn enqueue(
        &mut self,
        work: impl FnOnce(&mut CpuKernelArgs<'_>) -> std::result::Result<(), String> + Send + 'static,
    ) {
        self.work.push(Box::new(work));
    }
}

impl CpuBackend {
    /// A CPU backend; it never fails to open.
    pub fn new() -> Self {
        CpuBackend::default()
    }

    /// A CPU backend opened as device `index` (see `Runtime::open_device`).
    pub fn with_index(index: usize) -> Self {
        CpuBackend { index, ..CpuBackend::default() }
    }

    /// The host as device `index`: what the listing shows and `info` reports.
    pub fn describe(index: usize) -> DeviceInfo {
        let (name, memory_bytes) = host::about();
        DeviceInfo {
            backend: BackendKind::Cpu,
            index,
            name,
            memory_bytes,
            max_buffer_bytes: u64::from(u32::MAX) * 4,
            software: true,
            limits: LaunchLimits::HOST,
        }
    }
}

/// Where the host device hands a download's bytes: to the reader's sink.
fn deliver(sink: Arc<HostSink>, bytes: Vec<u8>) {
    sink.deliver(bytes);
}

impl Backend for CpuBackend {
    type Stream = CpuStream;
    type Event = CpuEvent;
    type Memory = CpuMemory;
    type Prepared = ();
    type Timestamp = CpuTimestamp;
    // The parts of a collective meet at a rendezvous made per collective.
    type Communicator = CpuCommunicator;

    const KIND: BackendKind = BackendKind::Cpu;

    fn info(&self) -> DeviceInfo {
        Self::describe(self.index)
    }

    // Memory is host memory, and an event is a count on a stream's progress:
    // any CPU runtime's stream can copy from and wait on any other's.
    const PEER_COPIES: bool = true;

    fn allocate(&self, bytes: u64) -> Result<CpuMemory> {
        CpuMemory::allocate(bytes, &self.counters).ok_or(Error::OutOfMemory { bytes, host: true })
    }

    fn create_stream(&self, index: u32) -> Result<CpuStream> {
        Ok(CpuStream::new(index, &self.counters))
    }

    fn prepare<R: PartialEq>(&self, _command: &Command<R>) -> Result<()> {
        // Host work needs no preparation: the worker runs the command as given.
        Ok(())
    }

    unsafe fn enqueue(
        &self,
        stream: &CpuStream,
        command: Command<&CpuMemory>,
        (): (),
        io: OpIo,
    ) -> Result<(), EnqueueError> {
        let counters = self.counters.clone();
        let command = match command.map(CpuMemory::clone) {
            Command::Download { src, sink } => {
                // A read of a failed version fails with that failure, never
                // with stale bytes; like any failed op, the stream's next
                // fence counts it.
                let (index, tally) = (stream.lane.runner.index, stream.lane.runner.tally.clone());
                stream.lane.push([Job::Complete(Box::new(move || {
                    let outcome = match io.failed_input(index) {
                        Some(error) => Err(error),
                        None => host::run(Command::Download { src, sink: sink.clone() }, &counters, deliver)
                            .map_err(|message| Error::OpFailed { stream: index, message }),
                    };
                    if let Err(error) = outcome {
                        tally.record(&error);
                        sink.fail(error);
                    }
                }))]);
                return Ok(());
            }
            // A gate the timer opens once the stream gets there: the stream
            // parks meanwhile, and no pool worker sleeps. (A zero delay is
            // the op that does nothing, run as work: what the benchmarks time.)
            #[cfg(feature = "test-support")]
            Command::Delay { duration } if !duration.is_zero() => {
                stream.lane.push_steps([Step::Hold(Hold::Delay(duration), io)]);
                return Ok(());
            }
            other => other,
        };
        stream.lane.push([Job::Work(Box::new(move || host::run(command, &counters, deliver)), io)]);
        Ok(())
    }

    fn record_event(&self, stream: &CpuStream) -> Result<CpuEvent> {
        Ok(CpuEvent(LaneEvent::now(&stream.lane, &self.counters)))
    }

    fn wait_event(&self, stream: &CpuStream, event: &CpuEvent) -> Result<()> {
        // Parks the stream until the other gets there, never blocking a worker.
        if let Some(wait) = event.0.wait_step(&stream.lane) {
            stream.lane.push_steps([wait]);
        }
        Ok(())
    }

    fn timestamp(&self, stream: &CpuStream, completion: Arc<Completion>) -> Result<CpuTimestamp> {
        let taken = Arc::new(std::sync::OnceLock::new());
        let taking = taken.clone();
        // A completion job: it runs once every job before it has, and takes no failure.
        stream.lane.push([Job::Complete(Box::new(move || {
            let _ = taking.set(std::time::Instant::now());
            completion.complete(Ok(()));
        }))]);
        Ok(CpuTimestamp { taken, _live: LaneEvent::now(&stream.lane, &self.counters) })
    }

    fn signal(&self, stream: &CpuStream, completion: Arc<Completion>, kind: SignalKind) -> Result<()> {
        // An idle stream completes on the spot: no job, no wake-up.
        if stream.is_idle() {
            completion.report(stream.lane.runner.tally.report(kind));
            return Ok(());
        }
        let tally = stream.lane.runner.tally.clone();
        stream.lane.push([Job::Complete(Box::new(move || completion.report(tally.report(kind))))]);
        Ok(())
    }

    fn begin_admissions(&self, stream: &CpuStream) {
        // Its jobs queue, counted, without waking a worker per op.
        stream.lane.defer();
    }

    fn end_admissions(&self, stream: &CpuStream) {
        stream.lane.resume();
    }

    fn is_settled(&self, stream: &CpuStream) -> bool {
        // A job records its failure before it counts as finished.
        stream.is_idle() && stream.lane.runner.tally.is_clear()
    }

    unsafe fn external(
        &self,
        stream: &CpuStream,
        buffers: &[(&CpuMemory, Access)],
        io: OpIo,
        run: &mut dyn FnMut(RawAccess<'_>) -> Result<()>,
    ) -> Result<()> {
        let mut raw = CpuRawAccess::default();
        run(RawAccess::Cpu(&mut raw))?;
        let spans: Vec<(Span<CpuMemory>, Access)> = buffers
            .iter()
            .map(|&(memory, access)| (Span { buffer: memory.clone(), offset: 0, len: memory.size() }, access))
            .collect();
        stream.lane.push([Job::Work(
            Box::new(move || {
                let whole = Grid::new([1, 1, 1], [1, 1, 1]);
                raw.work.into_iter().try_for_each(|work| host::with_kernel_args(&spans, whole, [], work))
            }),
            // The worker skips (and fails) the host work if a version it reads failed.
            io,
        )]);
        Ok(())
    }

    fn is_current_thread(&self, stream: &CpuStream) -> bool {
        Pool::runs_here(&stream.lane)
    }

    #[cfg(feature = "test-support")]
    fn hold(&self, stream: &CpuStream, gate: Arc<Gate>) -> Result<()> {
        stream.lane.push_steps([Step::Hold(Hold::Gate(gate), OpIo::default())]);
        Ok(())
    }

    fn counters(&self) -> BackendCounters {
        self.counters.snapshot()
    }

    fn communicator(_members: &[&Self]) -> Result<CpuCommunicator> {
        Ok(CpuCommunicator(None))
    }

    fn joined_communicator(
        _member: &Self,
        id: &[u8; GROUP_ID_BYTES],
        ranks: usize,
        rank: usize,
    ) -> Result<CpuCommunicator> {
        Ok(CpuCommunicator(Some(Arc::new(wire::join(id, ranks, rank)?))))
    }

    unsafe fn enqueue_collective(
        communicator: &CpuCommunicator,
        collective: &Collective,
        parts: Vec<CollectivePart<'_, Self>>,
    ) -> Result<(), EnqueueError> {
        if let Some(wire) = &communicator.0 {
            return enqueue_on_wire(wire, collective, parts);
        }
        let rendezvous = collective::Rendezvous::new(*collective, parts.len());
        for (rank, part) in parts.into_iter().enumerate() {
            let (lane, index) = (&part.stream.lane, part.stream.lane.runner.index);
            let (read, write, inputs, io) = part_job(collective, rank, part);
            let meeting = rendezvous.clone();
            let mut memory = Some((read, write));
            lane.push([Job::Meet(
                Box::new(move |waker| {
                    // The first poll arrives; later ones look for the outcome.
                    if let Some((read, write)) = memory.take() {
                        let failure = inputs.failed_input(index).map(|error| error.to_string());
                        meeting.arrive(rank, failure, read, write);
                    }
                    meeting.poll_outcome(waker)
                }),
                io,
            )]);
        }
        Ok(())
    }
}

/// Member `rank`'s part as its job takes it: what it only reads, what it
/// writes, the io whose inputs it checks itself, and the io it runs with.
/// The part checks its inputs itself so that it always meets the other
/// parts, bringing its failure if it has one: skipped by the worker, it
/// would never arrive, and the others would wait for it forever.
fn part_job(
    collective: &Collective,
    rank: usize,
    part: CollectivePart<'_, CpuBackend>,
) -> (Option<CpuMemory>, Option<CpuMemory>, OpIo, OpIo) {
    let (read, write) = match (collective.accesses(rank), part.receive) {
        ((_, Some(_)), Some(receive)) => (Some(part.send.clone()), Some(receive.clone())),
        ((access, _), _) if access.writes() => (None, Some(part.send.clone())),
        _ => (Some(part.send.clone()), None),
    };
    let inputs = OpIo { inputs: part.io.inputs, ..Default::default() };
    (read, write, inputs, OpIo { outcome: part.io.outcome, credit: part.io.credit, ..Default::default() })
}

/// A joined group's one part: a job on its stream that meets the other
/// ranks on the wire, in the order collectives were admitted here.
fn enqueue_on_wire(
    wire: &Arc<wire::Wire>,
    collective: &Collective,
    parts: Vec<CollectivePart<'_, CpuBackend>>,
) -> Result<(), EnqueueError> {
    let [part] = <[_; 1]>::try_from(parts)
        .map_err(|_| EnqueueError::Rejected(Error::internal("a joined CPU group's collective with several parts")))?;
    let (lane, index) = (&part.stream.lane, part.stream.lane.runner.index);
    let (read, write, inputs, io) = part_job(collective, wire.rank, part);
    let (turn, on_wire, collective) = (wire.admit(), wire.clone(), *collective);
    lane.push([Job::Work(
        Box::new(move || {
            let failure = inputs.failed_input(index).map(|error| error.to_string());
            // The other ranks are other processes: it may block, so the
            // pool may start a worker in its place meanwhile.
            worker::blocking(|| on_wire.run(turn, &collective, failure, read, write))
        }),
        io,
    )]);
    Ok(())
}
