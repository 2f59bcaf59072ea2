//! Collectives over the devices of a group, admitted as one op per member.
//!
//! A collective has one part per member, each on a stream of that member.
//! Under every member's ordering boundary, taken in one global order (by
//! address, as a peer copy takes its two):
//! - each member's stream waits for the dependencies of what its part reads
//!   and writes, exactly as any op's;
//! - a failed version among the inputs of any part fails the whole
//!   collective: every member publishes failed versions of what it writes;
//! - otherwise every part is enqueued (one backend call for all of them),
//!   and each member advances its stream and publishes its part there.
//!
//! Since the parts of every collective of a group are admitted together,
//! under all the locks, every device sees the collectives it takes part in
//! in one order: what NCCL needs, and what keeps the CPU's rendezvous from
//! deadlocking.

use std::any::Any;
use std::sync::{Arc, Mutex, MutexGuard};

use super::state::State;
use super::{BufferKey, Scheduler};
use crate::backend::{Backend, Collective, CollectivePart, EnqueueError, OpIo, Span};
use crate::error::{Error, Result};
use crate::kernel::Access;
use crate::lock::lock;

/// One member's part of a collective, as the scheduler names it: a stream
/// and buffers of that member.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PartKeys {
    /// The member's rank among every rank of the group (in every process).
    pub rank: usize,
    pub stream: usize,
    pub send: BufferKey,
    /// `None` for the in-place collectives.
    pub receive: Option<BufferKey>,
}

/// A group's communicator, once its first collective made it: of whatever
/// type the backend makes ([`Backend::Communicator`]).
#[derive(Default)]
pub(crate) struct CommunicatorSlot {
    made: Mutex<Option<Arc<dyn Any + Send + Sync>>>,
    /// Made by a join: the group's other ranks live in other processes.
    joined: std::sync::atomic::AtomicBool,
}

impl CommunicatorSlot {
    /// Stores a communicator made before the group had any collective (a
    /// joined group's).
    pub(super) fn fill<T: Send + Sync + 'static>(&self, communicator: T) {
        lock(&self.made).get_or_insert(Arc::new(communicator));
        self.joined.store(true, std::sync::atomic::Ordering::Release);
    }

    /// True if the group's other ranks live in other processes.
    fn joined(&self) -> bool {
        self.joined.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The communicator, made by `make` if there is none yet. `make` runs
    /// without the slot's lock (it may be slow); of two made at once, the
    /// first stored stays.
    fn get_or_make<T: Send + Sync + 'static>(&self, make: impl FnOnce() -> Result<T>) -> Result<Arc<T>> {
        let known = lock(&self.made).clone();
        let stored = match known {
            Some(known) => known,
            None => {
                let made: Arc<dyn Any + Send + Sync> = Arc::new(make()?);
                let mut slot = lock(&self.made);
                slot.get_or_insert(made).clone()
            }
        };
        stored.downcast::<T>().map_err(|_| Error::internal("a group's communicator is of another backend"))
    }
}

impl std::fmt::Debug for CommunicatorSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let made = lock(&self.made).is_some();
        f.debug_struct("CommunicatorSlot").field("made", &made).finish()
    }
}

impl Drop for CommunicatorSlot {
    fn drop(&mut self) {
        // Tearing a communicator down may wait for its work (NCCL finalises):
        // never on the thread that dropped the group.
        if let Some(communicator) = self.made.get_mut().unwrap_or_else(|poisoned| poisoned.into_inner()).take() {
            crate::completion::release(move || drop(communicator));
        }
    }
}

type Guard<'a, B> = MutexGuard<'a, State<B>>;

/// What a member's part reads and writes.
fn accesses(collective: &Collective, part: &PartKeys) -> Vec<(BufferKey, Access)> {
    let (send, receive) = collective.accesses(part.rank);
    let mut accesses = vec![(part.send, send)];
    if let (Some(key), Some(access)) = (part.receive, receive) {
        accesses.push((key, access));
    }
    accesses
}

impl<B: Backend> Scheduler<B> {
    /// Admits `collective` with one part per member of `members` (rank
    /// order, distinct runtimes); see the module doc.
    pub(super) fn collective(
        members: &[&Scheduler<B>],
        slot: &CommunicatorSlot,
        collective: &Collective,
        parts: &[PartKeys],
    ) -> Result<()> {
        if members.len() != parts.len() || members.is_empty() {
            return Err(Error::internal("a collective with parts for another group"));
        }
        for (rank, member) in members.iter().enumerate() {
            if members[..rank].iter().any(|earlier| std::ptr::eq(*earlier, *member)) {
                return Err(Error::internal("a group names one runtime twice"));
            }
        }
        let backends: Vec<&B> = members.iter().map(|member| &*member.backend).collect();
        let communicator = slot.get_or_make(|| B::communicator(&backends))?;
        // From inside an external write's closure on a member, waiting for
        // that write to end below would wait for itself.
        if let Some((_, stream)) =
            super::external::running_write(|engine| members.iter().any(|member| member.address() == engine))
        {
            return Err(Error::invalid(format!(
                "a {} from inside the closure of an external write on stream {stream} would wait for it",
                collective.name()
            )));
        }
        let accesses: Vec<Vec<(BufferKey, Access)>> = parts.iter().map(|part| accesses(collective, part)).collect();
        let mut waiting = super::state::WaitingForWrites::default();
        loop {
            let mut states = lock_all(members)?;
            let busy =
                states.iter().zip(parts).zip(&accesses).any(|((state, part), accesses)| {
                    state.is_busy(part.stream) || state.needs_busy(part.stream, accesses)
                });
            if busy {
                // An external write holds a stream this collective needs: let it finish.
                drop(states);
                waiting.waiting();
                std::thread::yield_now();
                continue;
            }
            drop(waiting);
            let joined = slot.joined();
            return Self::collective_locked(members, &mut states, &communicator, joined, collective, parts, &accesses);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn collective_locked(
        members: &[&Scheduler<B>],
        states: &mut [Guard<'_, B>],
        communicator: &B::Communicator,
        joined: bool,
        collective: &Collective,
        parts: &[PartKeys],
        accesses: &[Vec<(BufferKey, Access)>],
    ) -> Result<()> {
        // Every buffer still there, before anything is ordered.
        for (state, part) in states.iter().zip(parts) {
            state.slot(part.stream)?.raw(part.stream)?;
            state.entry(part.send)?;
            if let Some(receive) = part.receive {
                state.entry(receive)?;
            }
        }
        let mut ios = Vec::with_capacity(parts.len());
        let mut failed = None;
        for (rank, member) in members.iter().enumerate() {
            let (state, part) = (&mut *states[rank], &parts[rank]);
            // Even a collective that will not run is ordered, as `admit` orders an op.
            member.wait_for_dependencies(state, part.stream, &accesses[rank])?;
            let spans: Vec<(Span<BufferKey>, Access)> = accesses[rank]
                .iter()
                .map(|&(key, access)| state.entry(key).map(|entry| (whole(key, entry.len), access)))
                .collect::<Result<_>>()?;
            let (mut io, failed_input) = Self::op_io(state, &spans, part.stream)?;
            if failed.is_none() {
                failed = failed_input;
            }
            // Counted in its runtime's queue until the backend has it.
            io.credit = member.room.charge(0);
            ios.push(io);
        }
        // A joined group's other ranks wait for this part wherever it is
        // run: it runs all the same (the CPU's brings the failure to them),
        // and its outputs are failed versions below.
        if let (Some(cause), false) = (&failed, joined) {
            return Err(Self::fail_all(members, states, parts, accesses, ios, cause));
        }
        let memories = states
            .iter()
            .zip(parts)
            .map(|(state, part)| {
                let send = state.entry(part.send)?.memory.clone();
                let receive = part.receive.map(|key| state.entry(key).map(|entry| entry.memory.clone())).transpose()?;
                let stream = state.slot(part.stream)?.raw(part.stream)?.clone();
                Ok((stream, send, receive))
            })
            .collect::<Result<Vec<_>>>()?;
        let outcomes: Vec<_> = ios.iter().map(|io| io.outcome.clone()).collect();
        let enqueue_parts = members
            .iter()
            .zip(&memories)
            .zip(ios)
            .map(|((member, (stream, send, receive)), io)| CollectivePart {
                backend: &*member.backend,
                stream,
                send,
                receive: receive.as_deref(),
                io,
            })
            .collect();
        // SAFETY: every memory stays alive in its runtime's entries until
        // released, which frees it only after a signal on every stream in
        // its history, this part's stream among them (published below);
        // each part's stream was ordered after its buffers' users above.
        match unsafe { B::enqueue_collective(communicator, collective, enqueue_parts) } {
            Ok(()) => {}
            Err(EnqueueError::Rejected(error)) => return Err(error),
            Err(EnqueueError::Failed(error)) => {
                let ios = outcomes.into_iter().map(|outcome| OpIo { outcome, ..Default::default() }).collect();
                return Err(Self::fail_all(members, states, parts, accesses, ios, &error));
            }
        }
        if let Some(cause) = failed {
            let ios = outcomes.into_iter().map(|outcome| OpIo { outcome, ..Default::default() }).collect();
            return Err(Self::fail_all(members, states, parts, accesses, ios, &cause));
        }
        for (rank, member) in members.iter().enumerate() {
            let (state, part) = (&mut *states[rank], &parts[rank]);
            state.streams[part.stream].position += 1;
            member.publish(state, part.stream, &accesses[rank], outcomes[rank].as_ref());
        }
        Ok(())
    }

    /// Publishes every member's part as failed with `cause`; the error of
    /// member 0's part comes back.
    fn fail_all(
        members: &[&Scheduler<B>],
        states: &mut [Guard<'_, B>],
        parts: &[PartKeys],
        accesses: &[Vec<(BufferKey, Access)>],
        ios: Vec<OpIo>,
        cause: &Error,
    ) -> Error {
        let mut first = None;
        for (rank, (member, io)) in members.iter().zip(ios).enumerate() {
            let (state, part) = (&mut *states[rank], &parts[rank]);
            let error = match cause {
                // A failed input: named as any op that reads one names it.
                Error::OpFailed { message, .. } => {
                    Error::OpFailed { stream: part.stream as u32, message: message.clone() }
                }
                other => other.clone().into_op_failure(part.stream as u32, Some("collective")),
            };
            let error = member.publish_failed(state, part.stream, &accesses[rank], io.outcome, error);
            first.get_or_insert(error);
        }
        first.unwrap_or_else(|| cause.clone())
    }
}

fn whole(buffer: BufferKey, len: u64) -> Span<BufferKey> {
    Span { buffer, offset: 0, len }
}

/// Every member's state, open, in rank order; taken in one order (by
/// address), as `peer::lock_both` takes two, so that no two admissions
/// that span runtimes ever wait for each other.
fn lock_all<'a, B: Backend>(members: &[&'a Scheduler<B>]) -> Result<Vec<Guard<'a, B>>> {
    let mut order: Vec<usize> = (0..members.len()).collect();
    order.sort_by_key(|&rank| members[rank].address());
    let mut guards: Vec<Option<Guard<'a, B>>> = (0..members.len()).map(|_| None).collect();
    for rank in order {
        guards[rank] = Some(members[rank].open_state()?);
    }
    guards.into_iter().map(|guard| guard.ok_or_else(|| Error::internal("a member's state was not taken"))).collect()
}
