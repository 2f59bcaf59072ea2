//! The scheduler as the public handles see it: `impl Engine for Scheduler`,
//! each call taking the ordering boundary as it needs (see `admission`,
//! `external`, `lifecycle`, `peer` and `collective` for the work behind it).

use std::sync::Arc;

use super::state::BufferEntry;
use super::streams::StreamSlot;
use super::versions::History;
use super::{BufferKey, CommunicatorSlot, Engine, Init, PartKeys, Recording, Scheduler};
use crate::backend::{AnyTimestamp, Backend, Command, RawAccess, SignalKind, Span, UploadFrom};
#[cfg(feature = "test-support")]
use crate::backend::{Gate, OpOutcome};
use crate::completion::spin::SpinPolicy;
use crate::completion::Completion;
use crate::device::{BackendKind, DeviceInfo};
use crate::diagnostics::{Diagnostics, LiveCounters};
use crate::error::{Error, Result};
use crate::host::HostBuffer;
use crate::kernel::Access;
use crate::lock::lock;
#[cfg(feature = "test-support")]
use crate::options::Fault;
use crate::options::QueueLimit;
use crate::room::{RoomWait, WhenFull};

impl<B: Backend> Engine for Scheduler<B> {
    fn kind(&self) -> BackendKind {
        B::KIND
    }

    fn info(&self) -> DeviceInfo {
        self.info.clone()
    }

    fn fence_waits(&self) -> SpinPolicy {
        self.fence_waits.renewed()
    }

    fn live(&self) -> &Arc<LiveCounters> {
        &self.live
    }

    fn new_stream(&self) -> Result<usize> {
        // The slot first: the backend stream is made knowing the index its
        // failures name. Making it can take a while (a thread, a driver
        // call), so it is made outside the boundary, the slot kept vacant
        // (no stream, nothing retiring) and out of every other's reach.
        let index = {
            let mut state = self.open_state()?;
            Self::sweep_retired(&mut state);
            state.free_slots.pop().unwrap_or_else(|| {
                state.streams.push(StreamSlot::vacant());
                state.streams.len() - 1
            })
        };
        let made = u32::try_from(index)
            .map_err(|_| Error::invalid(format!("a runtime numbers at most {} streams", u32::MAX)))
            .and_then(|number| self.backend.create_stream(number));
        let raw = match made {
            Ok(raw) => raw,
            Err(error) => {
                lock(&self.state).free_slots.push(index);
                return Err(error);
            }
        };
        // Closed or lost meanwhile: the stream goes (its slot with the runtime).
        let mut state = self.open_state()?;
        // A reused slot goes on counting from where its previous stream stopped.
        let mut slot = StreamSlot::new(raw);
        let previous = &state.streams[index];
        slot.position = previous.position;
        slot.done_up_to = previous.position;
        state.streams[index] = slot;
        Ok(index)
    }

    fn retire_stream(&self, stream: usize) {
        self.retire(stream);
    }

    fn create(&self, stream: usize, len: u64, init: Init<'_>) -> Result<BufferKey> {
        if len == 0 {
            return Err(Error::invalid("a buffer needs at least one byte"));
        }
        let max = self.info.max_buffer_bytes;
        if len > max {
            return Err(Error::invalid(format!("{len} bytes exceed the device's buffer limit of {max} bytes")));
        }
        drop(self.open_state()?);
        let span = Span { buffer: (), offset: 0, len };
        // Prepare and allocate outside the boundary: nobody can see the buffer yet.
        let initialise = match init {
            Init::Empty => None,
            Init::Zero => {
                let command = Command::Zero { dst: span };
                let prepared = self.backend.prepare(&command)?;
                Some((command, prepared))
            }
            Init::Data(bytes) => Some(self.backend.prepare_upload(span, UploadFrom::Bytes(bytes))?),
        };
        let memory = Arc::new(self.backend.allocate(len)?);
        let mut state = self.open_state_when(|state| state.is_busy(stream))?;
        let key = state.next_key;
        state.next_key += 1;
        // The stream is checked open whatever the history.
        let position = state.slot(stream)?.position;
        #[cfg(feature = "test-support")]
        let history = match self.fault {
            Some(Fault::KeyVersionsAtAllocation) => History::written_at((stream, position)),
            None => History::default(),
        };
        #[cfg(not(feature = "test-support"))]
        let history = {
            let _ = position;
            History::default()
        };
        state.buffers.insert(key, BufferEntry { memory, len, history, pins: 0, released: false });
        if let Some((command, prepared)) = initialise {
            if let Err(error) = self.admit(&mut state, stream, command.map(|()| key), prepared) {
                let entry = state.buffers.remove(&key);
                drop(state);
                drop(entry);
                return Err(error);
            }
        }
        Ok(key)
    }

    fn release(&self, key: BufferKey) {
        self.release_buffer(key);
    }

    fn submit(&self, stream: usize, command: Command<BufferKey>) -> Result<()> {
        let prepared = self.backend.prepare(&command)?;
        self.admit_prepared(stream, command, prepared)
    }

    fn submit_upload(&self, stream: usize, dst: Span<BufferKey>, from: UploadFrom<'_>) -> Result<()> {
        let (command, prepared) = self.backend.prepare_upload(dst, from)?;
        self.admit_prepared(stream, command, prepared)
    }

    fn host_buffer(&self, bytes: &[u8]) -> Result<HostBuffer> {
        HostBuffer::filled(self.backend.staging_buffer(bytes.len())?, bytes)
    }

    fn staging_buffer(&self, len: usize) -> Result<HostBuffer> {
        self.backend.staging_buffer(len)
    }

    fn submit_batch(&self, stream: usize, commands: Vec<Command<BufferKey>>) -> Result<()> {
        // All prepared first: a refusal there admits none of them.
        let prepared = self.prepare_all(&commands)?;
        let mut state = self.open_state_for_all(stream, &commands)?;
        // The batch holds its buffers' keys, not their handles: one the
        // recording closure made and dropped is gone. Refused whole, as bad input.
        if commands.iter().any(|command| command.accesses().iter().any(|(key, _)| !state.buffers.contains_key(key))) {
            return Err(Error::invalid(
                "a buffer used in this batch was dropped before the batch was admitted: keep each alive until \
                 batch() returns",
            ));
        }
        // One hand-over to the device for the whole batch, before the lock goes.
        let raw = state.slot(stream)?.raw(stream)?.clone();
        self.backend.begin_admissions(&raw);
        // Handed over however the loop ends (a panic in it would otherwise
        // leave the stream's later work held back), with the lock still held.
        let handed_over = scopeguard::guard(&raw, |raw| self.backend.end_admissions(raw));
        // Each op as if admitted alone: a failed or refused one does not stop
        // the others; the first error comes back once all are admitted.
        let mut first_error = None;
        for (command, prepared) in commands.into_iter().zip(prepared) {
            if let Err(error) = self.admit(&mut state, stream, command, prepared) {
                first_error.get_or_insert(error);
            }
        }
        drop(handed_over);
        drop(state);
        first_error.map_or(Ok(()), Err)
    }

    fn replay(&self, stream: usize, recording: &Recording) -> Result<()> {
        // A backend that keeps this recording captured needs neither its
        // commands nor their preparation: the replay costs the same for any
        // number of recorded ops.
        let commands = match self.backend.prepares_replay(recording.id()) {
            true => {
                let commands = recording.commands()?;
                let prepared = self.prepare_all(&commands)?;
                Some(commands.into_iter().zip(prepared).collect())
            }
            false => None,
        };
        let mut state = self.open_state_when(|state| state.needs_busy(stream, recording.accesses()))?;
        self.admit_as_one(&mut state, stream, recording, commands)
    }

    fn forget_graph(&self, id: u64) {
        self.backend.forget_replay(id);
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn copy_from_peer(&self, stream: usize, from: &dyn Engine, src: BufferKey, dst: BufferKey) -> Result<()> {
        match from.as_any().downcast_ref::<Scheduler<B>>() {
            Some(from) => Scheduler::copy_from_peer(self, stream, from, src, dst),
            None => Err(Error::unsupported(B::KIND, "a copy from a runtime of another backend")),
        }
    }

    fn collective(
        &self,
        members: &[&dyn Engine],
        slot: &CommunicatorSlot,
        collective: &crate::backend::Collective,
        parts: &[PartKeys],
    ) -> Result<()> {
        let members = members
            .iter()
            .map(|member| {
                member
                    .as_any()
                    .downcast_ref::<Scheduler<B>>()
                    .ok_or_else(|| Error::unsupported(B::KIND, "a collective over runtimes of several backends"))
            })
            .collect::<Result<Vec<_>>>()?;
        if !members.first().is_some_and(|first| std::ptr::eq(*first, self)) {
            return Err(Error::internal("a collective admitted through a runtime that is not its first member"));
        }
        Scheduler::collective(&members, slot, collective, parts)
    }

    fn join_group(
        &self,
        slot: &CommunicatorSlot,
        id: &[u8; crate::backend::GROUP_ID_BYTES],
        ranks: usize,
        rank: usize,
    ) -> Result<()> {
        // A closed runtime joins nothing; joining is slow (it waits for
        // every rank), so it runs under no lock of this runtime.
        drop(self.open_state()?);
        slot.fill(B::joined_communicator(&self.backend, id, ranks, rank)?);
        Ok(())
    }

    fn pin(&self, keys: &[BufferKey]) -> Result<()> {
        let mut state = self.open_state()?;
        if keys.iter().any(|key| !state.buffers.contains_key(key)) {
            return Err(Error::internal("a buffer with a live handle has no entry"));
        }
        for key in keys {
            if let Some(entry) = state.buffers.get_mut(key) {
                entry.pins += 1;
            }
        }
        Ok(())
    }

    fn unpin(&self, keys: &[BufferKey]) {
        let mut due = Vec::new();
        {
            let mut state = lock(&self.state);
            for key in keys {
                if let Some(entry) = state.buffers.get_mut(key) {
                    entry.pins = entry.pins.saturating_sub(1);
                    if entry.pins == 0 && entry.released {
                        due.push(*key);
                    }
                }
            }
        }
        for key in due {
            self.release_buffer(key);
        }
    }

    fn fence(&self, stream: Option<usize>) -> Result<Arc<Completion>> {
        let mut state = self.open_state_when(|state| match stream {
            Some(stream) => state.is_busy(stream),
            None => true,
        })?;
        let Some(stream) = stream else {
            let fence = self.fence_locked(&state, None, SignalKind::Fence)?;
            for slot in state.streams.iter_mut().filter(|slot| slot.raw.is_some()) {
                slot.learn_from(&fence);
            }
            return Ok(fence);
        };
        let slot = state.slot(stream)?;
        let last = slot.last_fence.as_ref().and_then(|(position, last)| (*position == slot.position).then_some(last));
        if let Some(last) = last.and_then(std::sync::Weak::upgrade).filter(|_| slot.unreported.is_clear()) {
            match last.outcome() {
                // Nothing admitted since the latest fence: while it is
                // pending it is this fence too (one device event however
                // many await the point) ...
                None => return Ok(last),
                // ... and once it succeeded, it answers for this one: it
                // reported every failure before it, and no op came after,
                // so a sync of an idle stream makes no device call (on an
                // H100, weir-ffi's idle sync fell from 6-8 us to 0.3-0.4).
                // It holds while the fence is held, by a caller or among
                // the stream's recent completions. A lost device, a running
                // external write or a failed fence asks the backend again.
                Some(Ok(())) if !slot.busy && self.backend.lost().is_none() => return Ok(last),
                Some(_) => {}
            }
        }
        let fence = self.fence_locked(&state, Some(stream), SignalKind::Fence)?;
        let slot = &mut state.streams[stream];
        slot.last_fence = Some((slot.position, Arc::downgrade(&fence)));
        slot.last_signal = Some(Arc::downgrade(&fence));
        slot.learn_from(&fence);
        Ok(fence)
    }

    fn timestamp(&self, stream: usize) -> Result<(Arc<Completion>, Box<dyn AnyTimestamp>, u64)> {
        let mut state = self.open_state_when(|state| state.is_busy(stream))?;
        let completion = Completion::new(1, self.live.clone());
        let taken = self.backend.timestamp(state.slot(stream)?.raw(stream)?, completion.clone())?;
        // A place of its own in the stream: a fence made after it is a new
        // fence (not a pending one it would share), so it covers the timestamp.
        let slot = &mut state.streams[stream];
        slot.position += 1;
        slot.last_signal = Some(Arc::downgrade(&completion));
        Ok((completion, Box::new(taken), slot.position))
    }

    fn is_synced(&self, stream: usize) -> bool {
        // Under the lock nothing is admitted meanwhile, so the answer holds
        // until it is released; a stream busy with an external write is not
        // done, and a failure found at admission waits for a real fence.
        let Ok(mut state) = self.open_state() else { return false };
        let Ok(slot) = state.slot(stream) else { return false };
        let ready = !slot.busy
            && slot.unreported.is_clear()
            && slot.last_signal.as_ref().and_then(std::sync::Weak::upgrade).is_none_or(|last| last.is_complete());
        if !ready {
            return false;
        }
        // A lost device fails the next sync even of a settled stream.
        if slot.settled_at == Some(slot.position) && self.backend.lost().is_none() {
            return true;
        }
        let settled = slot.raw.as_deref().is_some_and(|raw| self.backend.is_settled(raw));
        if settled {
            state.streams[stream].settled_at = Some(state.streams[stream].position);
        }
        settled
    }

    fn check_can_wait(&self, stream: Option<usize>) -> Result<()> {
        if self.runs_on_this_thread(&lock(&self.state), stream) {
            return Err(Error::invalid("a wait from inside a kernel of the stream it waits for would wait for itself"));
        }
        Ok(())
    }

    fn external(
        &self,
        stream: usize,
        accesses: &[(BufferKey, Access)],
        run: &mut dyn FnMut(RawAccess<'_>) -> Result<()>,
    ) -> Result<()> {
        self.run_external(stream, accesses, run)
    }

    #[cfg(feature = "test-support")]
    fn hold(&self, stream: usize) -> Result<Arc<Gate>> {
        let mut state = self.open_state_when(|state| state.is_busy(stream))?;
        let raw = state.slot(stream)?.raw(stream)?;
        let gate = Arc::new(Gate::default());
        self.backend.hold(raw, gate.clone())?;
        // A place of its own in the stream, as a timestamp's: a fence made
        // after it is a new fence, never an earlier one that completed.
        state.streams[stream].position += 1;
        Ok(gate)
    }

    #[cfg(feature = "test-support")]
    fn fail_write(&self, stream: usize, buffer: BufferKey, message: &str) -> Result<()> {
        let accesses = [(buffer, Access::Write)];
        let mut state = self.open_state_when(|state| state.needs_busy(stream, &accesses))?;
        self.wait_for_dependencies(&mut state, stream, &accesses)?;
        let error = Error::OpFailed { stream: stream as u32, message: message.to_owned() };
        Err(self.publish_failed(&mut state, stream, &accesses, Some(Arc::new(OpOutcome::default())), error))
    }

    fn diagnostics(&self) -> Diagnostics {
        self.diagnostics_now()
    }

    fn make_room(&self, when_full: WhenFull) -> Result<()> {
        // A thread that runs this runtime's work, delivers completions, or
        // is inside an external write's closure (whose op holds its share of
        // the queue until the closure returns) could be what the queue waits
        // on: it admits past the limit.
        self.room.make(when_full, || {
            crate::completion::on_delivery_thread()
                || super::external::running_write(|engine| engine == self.address()).is_some()
                || self.runs_on_this_thread(&lock(&self.state), None)
        })
    }

    fn room(&self) -> RoomWait {
        self.room.wait()
    }

    fn queue_limit(&self) -> QueueLimit {
        self.room.limit()
    }

    fn close(&self) -> Result<()> {
        let closed = self.close_and_wait();
        self.room.close();
        closed
    }
}
