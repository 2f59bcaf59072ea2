//! Downloads: the device copies into a staging buffer, `map_async` maps it
//! once that copy is done, and the bytes go to the reader's [`HostSink`].
//! The staging buffer is owned by exactly one of the pending read or the map
//! callback, and freed with it on every path: data delivered, mapping failed,
//! stream failed before the read, or backend dropped before the read was
//! issued. A reader that stopped waiting changes nothing: the sink is filled
//! and dropped.
//!
//! A lane's signals wait for its reads ([`Reads`]): map callbacks and
//! submission callbacks fire from different device polls (the poll thread's,
//! and the one inside every `Queue::submit`, on any thread), in no order
//! between them, so "the submission is done" does not mean "the bytes are
//! delivered".

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, OnceLock};

use super::lanes::Submissions;
use super::poll::{once, PollState};
use crate::backend::HostSink;
use crate::error::Error;
use crate::lock::lock;
use weir_device::wgpu::scope::BACKEND;

/// A download whose device copy is recorded, waiting for its submission.
pub(crate) struct Readback {
    pub staging: wgpu::Buffer,
    /// Bytes to skip at the start of the staging buffer (the copy starts on a word).
    pub skip: usize,
    pub len: usize,
    pub sink: Arc<HostSink>,
    /// Set when the op that copies into `staging` failed as it was recorded
    /// (or did not run): the read then fails with it instead of mapping.
    pub copy_failed: Arc<OnceLock<Error>>,
}

type Then = Box<dyn FnOnce() + Send>;

#[derive(Default)]
struct ReadState {
    /// Reads started so far; each one's number is its order.
    started: u64,
    /// Every read numbered below this has delivered.
    delivered_below: u64,
    /// Whether each read from `delivered_below` on has delivered.
    delivered: VecDeque<bool>,
    /// Work waiting for every read below a number to deliver, in order of
    /// that number (a lane issues in order).
    waiting: VecDeque<(u64, Then)>,
}

/// One lane's reads in flight.
#[derive(Default)]
pub(crate) struct Reads {
    state: Mutex<ReadState>,
}

impl Reads {
    /// True when every read started so far has delivered, and what waited
    /// for them ran.
    pub fn idle(&self) -> bool {
        let state = lock(&self.state);
        state.delivered_below == state.started
    }

    /// Runs `then` once every read started so far has delivered, on the
    /// thread that delivers the last of them; hands it back unrun if they all
    /// have already.
    pub fn after_started<F: FnOnce() + Send + 'static>(&self, then: F) -> Option<F> {
        let mut state = lock(&self.state);
        if state.delivered_below == state.started {
            return Some(then);
        }
        let upto = state.started;
        state.waiting.push_back((upto, Box::new(then)));
        None
    }

    fn start(&self) -> u64 {
        let mut state = lock(&self.state);
        let number = state.started;
        state.started += 1;
        state.delivered.push_back(false);
        number
    }

    /// Read `number` delivered (or failed): runs what no longer waits.
    fn delivered(&self, number: u64) {
        let mut state = lock(&self.state);
        let base = state.delivered_below;
        if let Some(flag) = number.checked_sub(base).and_then(|at| state.delivered.get_mut(at as usize)) {
            *flag = true;
        }
        while state.delivered.front() == Some(&true) {
            state.delivered.pop_front();
            state.delivered_below += 1;
        }
        // Under the lock, so that a signal that finds the reads idle (and
        // completes at once) never completes before an earlier one waiting
        // for them. What waits only completes a cell, whose wakers run on
        // the delivery thread, not here.
        while state.waiting.front().is_some_and(|(upto, _)| *upto <= state.delivered_below) {
            if let Some((_, then)) = state.waiting.pop_front() {
                then();
            }
        }
    }
}

impl Readback {
    pub fn new(staging: wgpu::Buffer, skip: usize, len: usize, sink: Arc<HostSink>) -> Readback {
        Readback { staging, skip, len, sink, copy_failed: Arc::default() }
    }

    /// Maps the staging buffer; call after the copy's submission, number
    /// `submission`. A read whose copy failed fails with it. The read counts
    /// among the lane's `reads`, and once it delivered, `progress` is told
    /// that `submission`, and every one before it, is done.
    pub fn start(self, poll: &Arc<PollState>, reads: &Arc<Reads>, progress: &Arc<Submissions>, submission: u64) {
        if let Some(error) = self.copy_failed.get() {
            return self.sink.fail(error.clone());
        }
        poll.register();
        let number = reads.start();
        let (poll, reads, progress) = (poll.clone(), reads.clone(), progress.clone());
        let Readback { staging, skip, len, sink, .. } = self;
        let mapped = staging.clone();
        // Runs once: when wgpu calls it, or when wgpu drops it uncalled (a
        // callback fired before it in the same batch panicked); then the
        // buffer is mapped if its mapping succeeded, and reading says so.
        let body = once(move |outcome: Option<Result<(), wgpu::BufferAsyncError>>| {
            let failed = |message: String| Error::backend(BACKEND, message);
            let bytes = match outcome {
                Some(Err(e)) => Err(failed(format!("mapping the read-back buffer failed: {e}"))),
                Some(Ok(())) | None => {
                    let copied = match mapped.slice(..).get_mapped_range() {
                        Ok(view) => match view.get(skip..skip + len) {
                            // A read of the caller's size that the host cannot
                            // hold fails, rather than ending the process.
                            Some(range) => weir_device::host::heap_copy(range),
                            None => Err(failed("the read-back range is outside the staging buffer".to_owned())),
                        },
                        Err(e) => Err(failed(format!("reading the mapped buffer failed: {e}"))),
                    };
                    mapped.unmap();
                    copied
                }
            };
            drop(mapped);
            match bytes {
                Ok(bytes) => {
                    sink.deliver(bytes);
                    progress.done(submission);
                }
                Err(error) => sink.fail(error),
            }
            reads.delivered(number);
            poll.done();
        });
        staging.map_async(wgpu::MapMode::Read, .., body);
    }
}
