//! Copies between runtimes of one backend (the devices of a group), ordered
//! by the versions on both sides.
//!
//! A copy from buffer X of device A to buffer Y of device B runs on a stream T
//! of B. Under both runtimes' ordering boundaries:
//! - T waits for X's latest write (events recorded on A's streams, waited on
//!   T) and for every user of Y on B, as any write of Y would;
//! - the copy is enqueued on T and publishes a version of Y there;
//! - A's link stream (a stream of A kept for this) waits for an event after
//!   the copy on T, and publishes a read of X at its position: a later write
//!   of X on any stream of A waits for the link, so for the copy
//!   (write-after-read across devices), and X's memory outlives the copy.

use std::sync::{Arc, MutexGuard};

use super::state::State;
use super::{BufferKey, Scheduler};
use crate::backend::{Backend, Command, EnqueueError, OpIo, SignalKind, Span};
use crate::completion::Completion;
use crate::error::{Error, Result};
use crate::kernel::Access;

impl<B: Backend> Scheduler<B> {
    /// The stream that carries this runtime's side of its outgoing peer
    /// copies, made at the first one.
    fn link_stream(&self) -> Result<usize> {
        if let Some(link) = self.open_state()?.link {
            return Ok(link);
        }
        let made = super::Engine::new_stream(self)?;
        let mut state = self.open_state()?;
        match state.link {
            // Another thread made one meanwhile: this one retires unused.
            Some(link) => {
                drop(state);
                self.retire(made);
                Ok(link)
            }
            None => {
                state.link = Some(made);
                Ok(made)
            }
        }
    }

    /// Copies all of `src` (a buffer of `from`) into `dst` (one of this
    /// runtime) on `stream`; see the module doc.
    pub(super) fn copy_from_peer(
        &self,
        stream: usize,
        from: &Scheduler<B>,
        src: BufferKey,
        dst: BufferKey,
    ) -> Result<()> {
        if std::ptr::eq(self, from) {
            return Err(Error::internal("a peer copy within one runtime"));
        }
        if !B::PEER_COPIES {
            return Err(Error::unsupported(
                B::KIND,
                "copies between devices (read the buffer, then write it on the other device)",
            ));
        }
        let link = from.link_stream()?;
        // From inside an external write's closure on either runtime, waiting
        // for that write to end below would wait for itself.
        if let Some((_, stream)) =
            super::external::running_write(|engine| engine == self.address() || engine == from.address())
        {
            return Err(Error::invalid(format!(
                "a peer copy from inside the closure of an external write on stream {stream} would wait for it"
            )));
        }
        let mut waiting = super::state::WaitingForWrites::default();
        loop {
            let (mut mine, mut theirs) = lock_both(self, from)?;
            let busy =
                mine.is_busy(stream) || theirs.busy_streams > 0 || mine.needs_busy(stream, &[(dst, Access::Write)]);
            if busy {
                // An external write holds a stream this copy needs: let it finish.
                drop((mine, theirs));
                waiting.waiting();
                std::thread::yield_now();
                continue;
            }
            drop(waiting);
            let mut unlinked = None;
            let copied = self.copy_locked(&mut mine, stream, from, &mut theirs, link, src, dst, &mut unlinked);
            drop((mine, theirs));
            // Nothing on src's side could be made to wait for the copy (a
            // driver failure's path; a lost device runs nothing): it is
            // waited for here, before src's handle, borrowed for this call,
            // can go, and with neither runtime's lock held, as work queued
            // before the copy (a CPU kernel) may call either runtime.
            if let Some(copying) = unlinked {
                let _ = copying.wait();
            }
            return copied;
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn copy_locked(
        &self,
        mine: &mut State<B>,
        stream: usize,
        from: &Scheduler<B>,
        theirs: &mut State<B>,
        link: usize,
        src: BufferKey,
        dst: BufferKey,
        unlinked: &mut Option<Arc<Completion>>,
    ) -> Result<()> {
        let len = theirs.entry(src)?.len;
        let dst_len = mine.entry(dst)?.len;
        if len != dst_len {
            return Err(Error::invalid(format!("a copy of {len} bytes into a buffer of {dst_len} bytes")));
        }
        let command = Command::Copy { src: whole((), len), dst: whole((), len) };
        let prepared = self.backend.prepare(&command)?;
        // This side: after every user of dst, as any write of it.
        self.wait_for_dependencies(mine, stream, &[(dst, Access::Write)])?;
        // That side: after src's latest write.
        let mut deps = super::versions::Dependencies::default();
        theirs.entry(src)?.history.dependencies(Access::Read, &mut deps);
        let target = mine.slot(stream)?.raw(stream)?.clone();
        for (source, position) in deps.foreign(usize::MAX) {
            if theirs.streams[source].has_finished(position) {
                continue;
            }
            if let Some(event) = from.event_after(theirs.slot(source)?)? {
                self.backend.wait_event(&target, &event)?;
                self.inserted_waits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
        // The source version's op may still fail as it runs: the copy then fails with it.
        let source = theirs.entry(src)?.history.outcome().cloned();
        if let Some(cause) = source.as_ref().and_then(|outcome| outcome.failure().cloned()) {
            let error = Error::dependency_failed(stream as u32, &cause);
            return Err(self.publish_failed(mine, stream, &[(dst, Access::Write)], None, error));
        }
        let src_memory = theirs.entry(src)?.memory.clone();
        let dst_memory = mine.entry(dst)?.memory.clone();
        let command = Command::Copy { src: whole(&*src_memory, len), dst: whole(&*dst_memory, len) };
        let outcome = Some(Arc::new(crate::backend::OpOutcome::default()));
        let io = OpIo { inputs: source.into_iter().collect(), outcome: outcome.clone(), credit: self.room.charge(0) };
        // SAFETY: both memories stay alive in their runtimes' entries until
        // released, which frees them only after a signal on every stream in
        // their histories: T for dst, and for src the link stream, which
        // waits for the copy below. Both were ordered after their users above.
        match unsafe { self.backend.enqueue(&target, command, prepared, io) } {
            Ok(()) => {}
            Err(EnqueueError::Rejected(error)) => return Err(error),
            Err(EnqueueError::Failed(error)) => {
                return Err(self.publish_failed(mine, stream, &[(dst, Access::Write)], outcome, error));
            }
        }
        mine.streams[stream].position += 1;
        self.publish(mine, stream, &[(dst, Access::Write)], outcome.as_ref());
        // That side: the link reads src until the copy is done.
        let linked = self.backend.record_event(&target).and_then(|copied| {
            let link_raw = theirs.slot(link)?.raw(link)?.clone();
            from.backend.wait_event(&link_raw, &copied)
        });
        if let Err(error) = linked {
            // Nothing on src's side can wait for the copy now, and src may
            // be freed once its own streams are done: the caller waits for
            // the copy once it has let both runtimes go.
            *unlinked = self.fence_locked(mine, Some(stream), SignalKind::Drain).ok();
            return Err(error);
        }
        theirs.streams[link].position += 1;
        from.publish(theirs, link, &[(src, Access::Read)], None);
        Ok(())
    }
}

type Guard<'a, B> = MutexGuard<'a, State<B>>;

fn whole<R>(buffer: R, len: u64) -> Span<R> {
    Span { buffer, offset: 0, len }
}

/// Both runtimes' states, open, taken in one order (by address) so that two
/// copies in opposite directions never wait for each other.
fn lock_both<'a, B: Backend>(mine: &'a Scheduler<B>, theirs: &'a Scheduler<B>) -> Result<(Guard<'a, B>, Guard<'a, B>)> {
    if (mine as *const Scheduler<B> as usize) < (theirs as *const Scheduler<B> as usize) {
        let first = mine.open_state()?;
        Ok((first, theirs.open_state()?))
    } else {
        let first = theirs.open_state()?;
        Ok((mine.open_state()?, first))
    }
}
