//! Collectives on the CPU: each member's part is a job on its stream, and
//! the parts meet at a rendezvous made when they were admitted.
//!
//! A part arrives once its stream got to it, with its memory registered
//! with the race detector (reads of what it only reads, writes of what it
//! writes) or with its failure. The last to arrive computes every member's
//! result over all of their memory, then releases the others (whose
//! streams parked, holding no worker) with the outcome: a failed part fails
//! them all.
//!
//! The scheduler admits the parts of every collective of a group together,
//! under all members' locks, so every stream meets the collectives it takes
//! part in in one order, and the rendezvous cannot deadlock.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};
use std::task::{Poll, Waker};

use bytemuck::Pod;

use super::memory::{AccessGuard, CpuMemory};
use crate::collective::{Collective, CollectiveKind, ReduceOp};
use crate::command::Span;
use crate::element::ElementType;
use crate::lock::lock;

/// What one part brought: its guarded memory, or why it cannot run.
pub(crate) struct Arrival {
    /// What the part only reads: a send, a broadcast root's buffer.
    pub read: Option<AccessGuard>,
    /// What it writes: a receive, an in-place buffer.
    pub write: Option<AccessGuard>,
}

impl Arrival {
    /// A part's memory registered with the race detector (`read` only read,
    /// `write` written), or the `failure` it brings instead.
    pub(crate) fn register(
        failure: Option<String>,
        read: Option<&CpuMemory>,
        write: Option<&CpuMemory>,
    ) -> Result<Arrival, String> {
        if let Some(failure) = failure {
            return Err(failure);
        }
        let whole = |memory: &CpuMemory| Span { buffer: memory.clone(), offset: 0, len: memory.size() };
        let read = read.map(|memory| CpuMemory::begin(&whole(memory), false)).transpose()?;
        let write = write.map(|memory| CpuMemory::begin(&whole(memory), true)).transpose()?;
        Ok(Arrival { read, write })
    }
}

#[derive(Default)]
struct Meeting {
    arrivals: Vec<Option<Result<Arrival, String>>>,
    arrived: usize,
    /// The outcome every part returns, once the last arrived.
    outcome: Option<Result<(), String>>,
    /// The streams of parts that arrived, parked until the outcome.
    parked: Vec<Waker>,
}

/// Where the parts of one collective meet.
pub struct Rendezvous {
    collective: Collective,
    meeting: Mutex<Meeting>,
}

impl Rendezvous {
    pub fn new(collective: Collective, members: usize) -> Arc<Self> {
        let meeting = Meeting { arrivals: (0..members).map(|_| None).collect(), ..Meeting::default() };
        Arc::new(Rendezvous { collective, meeting: Mutex::new(meeting) })
    }

    /// Member `rank`'s part, on its stream: registers its memory (`read`
    /// only read, `write` written), or brings `failure`; the last to arrive
    /// computes. Never waits: see [`Rendezvous::poll_outcome`].
    pub fn arrive(&self, rank: usize, failure: Option<String>, read: Option<CpuMemory>, write: Option<CpuMemory>) {
        let arrival = Arrival::register(failure, read.as_ref(), write.as_ref());
        let mut meeting = lock(&self.meeting);
        meeting.arrivals[rank] = Some(arrival);
        meeting.arrived += 1;
        if meeting.arrived == meeting.arrivals.len() {
            let outcome = self.compute(&mut meeting.arrivals);
            // Unregisters every part's memory before any part is released.
            meeting.arrivals.iter_mut().for_each(|arrival| *arrival = None);
            meeting.outcome = Some(outcome);
            let parked = std::mem::take(&mut meeting.parked);
            drop(meeting);
            parked.into_iter().for_each(Waker::wake);
        }
    }

    /// The collective's outcome once every part arrived; until then the
    /// part's stream parks, and `waker` is woken when the outcome is known.
    pub fn poll_outcome(&self, waker: &Waker) -> Poll<Result<(), String>> {
        let mut meeting = lock(&self.meeting);
        match &meeting.outcome {
            Some(outcome) => Poll::Ready(outcome.clone()),
            None => {
                meeting.parked.push(waker.clone());
                Poll::Pending
            }
        }
    }

    /// Every part's result over the members' memory as bytes (what each
    /// reads, and what each writes), once all arrived: the first failed
    /// part's failure fails every part.
    fn compute(&self, arrivals: &mut [Option<Result<Arrival, String>>]) -> Result<(), String> {
        let name = self.collective.name();
        let mut reads = Vec::with_capacity(arrivals.len());
        let mut writes = Vec::with_capacity(arrivals.len());
        for (rank, arrival) in arrivals.iter_mut().enumerate() {
            match arrival {
                Some(Ok(Arrival { read, write })) => {
                    reads.push(read.as_ref().map(AccessGuard::bytes));
                    writes.push(write.as_mut().map(AccessGuard::bytes_mut).transpose()?);
                }
                Some(Err(failure)) => return Err(format!("{name} failed on member {rank}: {failure}")),
                None => return Err(format!("member {rank} of a {name} never arrived")),
            }
        }
        run_collective(self.collective, &reads, &mut writes)
    }
}

/// `collective` over every rank's bytes, in rank order: what each only
/// reads, and what each writes (for an all-reduce, its buffer in place).
/// Sizes must fit (checked when admitted, or by the wire's rank 0); a panic
/// is the collective's failure.
pub(crate) fn run_collective(
    collective: Collective,
    reads: &[Option<&[u8]>],
    writes: &mut [Option<&mut [u8]>],
) -> Result<(), String> {
    catch_unwind(AssertUnwindSafe(|| apply(collective, reads, writes)))
        .unwrap_or_else(|_| Err(format!("{} panicked", collective.name())))
}

fn apply(collective: Collective, reads: &[Option<&[u8]>], writes: &mut [Option<&mut [u8]>]) -> Result<(), String> {
    let missing = || format!("a part of {} has no memory", collective.name());
    match collective.kind {
        CollectiveKind::AllReduce(op) => {
            // In place: each member's one buffer is its write.
            let sources: Vec<&[u8]> = writes.iter().map(|w| w.as_deref()).collect::<Option<_>>().ok_or_else(missing)?;
            let reduced = reduce(collective.element, op, &sources)?;
            for write in writes.iter_mut().flatten() {
                write.copy_from_slice(&reduced);
            }
        }
        CollectiveKind::Broadcast { root } => {
            let source = reads.get(root).copied().flatten().ok_or_else(missing)?;
            for write in writes.iter_mut().flatten() {
                write.copy_from_slice(source);
            }
        }
        CollectiveKind::AllGather => {
            let sources: Vec<&[u8]> = reads.iter().copied().collect::<Option<_>>().ok_or_else(missing)?;
            for write in writes.iter_mut() {
                let write = write.as_deref_mut().ok_or_else(missing)?;
                for (chunk, source) in write.chunks_exact_mut(sources[0].len()).zip(&sources) {
                    chunk.copy_from_slice(source);
                }
            }
        }
        CollectiveKind::ReduceScatter(op) => {
            let sources: Vec<&[u8]> = reads.iter().copied().collect::<Option<_>>().ok_or_else(missing)?;
            let reduced = reduce(collective.element, op, &sources)?;
            let chunk = reduced.len() / writes.len().max(1);
            for (rank, write) in writes.iter_mut().enumerate() {
                let write = write.as_deref_mut().ok_or_else(missing)?;
                write.copy_from_slice(&reduced[rank * chunk..(rank + 1) * chunk]);
            }
        }
    }
    Ok(())
}

/// `op` over `sources`, element by element, in rank order.
fn reduce(element: ElementType, op: ReduceOp, sources: &[&[u8]]) -> Result<Vec<u8>, String> {
    match element {
        ElementType::F32 => reduce_as::<f32>(sources, |a, b| match op {
            ReduceOp::Sum => a + b,
            ReduceOp::Max => a.max(b),
            ReduceOp::Min => a.min(b),
        }),
        ElementType::I32 => reduce_as::<i32>(sources, |a, b| match op {
            ReduceOp::Sum => a.wrapping_add(b),
            ReduceOp::Max => a.max(b),
            ReduceOp::Min => a.min(b),
        }),
        ElementType::U32 => reduce_as::<u32>(sources, |a, b| match op {
            ReduceOp::Sum => a.wrapping_add(b),
            ReduceOp::Max => a.max(b),
            ReduceOp::Min => a.min(b),
        }),
        ElementType::Bytes => Err("a reduction of raw bytes".to_owned()),
    }
}

fn reduce_as<T: Pod>(sources: &[&[u8]], combine: impl Fn(T, T) -> T) -> Result<Vec<u8>, String> {
    let cast = |bytes| {
        bytemuck::try_cast_slice::<u8, T>(bytes).map_err(|e| format!("{} view: {e}", std::any::type_name::<T>()))
    };
    let (first, rest) = sources.split_first().ok_or_else(|| "a reduction over no member".to_owned())?;
    let mut reduced = cast(first)?.to_vec();
    for source in rest {
        let source = cast(source)?;
        if source.len() != reduced.len() {
            return Err("a reduction over buffers of different sizes".to_owned());
        }
        for (acc, &x) in reduced.iter_mut().zip(source) {
            *acc = combine(*acc, x);
        }
    }
    Ok(bytemuck::cast_slice(&reduced).to_vec())
}
