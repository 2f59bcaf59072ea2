//! What becomes of an op, as a backend reports it: whether it failed (its
//! versions carry that), what it reads, its stream's tally of failures for
//! the next fence, what a signal reports, and where a download's bytes land.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::completion::Completion;
use crate::error::{Error, Failures};
use crate::host::HostBuffer;
use crate::lock::lock;
use crate::room::Credit;

/// Whether one admitted op failed. The scheduler gives each op that writes
/// a cell, and every version it publishes carries it, so that the failure
/// travels with the data: set at admission when the op cannot run, or by
/// the backend as the op runs.
#[derive(Debug, Default)]
pub struct OpOutcome {
    failure: OnceLock<Error>,
}

/// Set before the first failure of any op in this process. Until then no
/// op's input can have failed, so an op about to run need not read its
/// inputs' cells: on a GPU's issuing thread those are cache lines the
/// admitting thread keeps writing, and reading each costs a transfer.
static ANY_OP_FAILED: AtomicBool = AtomicBool::new(false);

impl OpOutcome {
    /// Records that the op failed; the first failure stays.
    pub fn fail(&self, error: Error) {
        // Before the failure itself: whoever sees the failure sees the flag.
        ANY_OP_FAILED.store(true, Ordering::SeqCst);
        let _ = self.failure.set(error);
    }

    /// The op's failure, once known.
    pub fn failure(&self) -> Option<&Error> {
        self.failure.get()
    }
}

/// What an op reads and what it publishes, for failures found as it runs.
#[derive(Debug, Default)]
pub struct OpIo {
    /// The outcomes of the versions the op reads (a partial write reads what
    /// it leaves in place). If one of them failed, the op must not run: it
    /// fails with an error naming that failure.
    pub inputs: smallvec::SmallVec<[Arc<OpOutcome>; 2]>,
    /// The op's own outcome, which the versions it writes carry.
    pub outcome: Option<Arc<OpOutcome>>,
    /// The op's share of the runtime's queue: the backend drops the `OpIo`
    /// once the op has left its host-side queue, and the share goes back.
    pub(crate) credit: Credit,
}

impl Clone for OpIo {
    /// The same inputs and outcome, without the queue share: the original
    /// gives that back when it drops.
    fn clone(&self) -> Self {
        OpIo { inputs: self.inputs.clone(), outcome: self.outcome.clone(), credit: Credit::default() }
    }
}

impl OpIo {
    /// The first failure among the inputs, as the error of an op that depends on it.
    pub fn failed_input(&self, stream: u32) -> Option<Error> {
        if !ANY_OP_FAILED.load(Ordering::SeqCst) {
            return None;
        }
        self.inputs.iter().find_map(|input| input.failure()).map(|cause| Error::dependency_failed(stream, cause))
    }

    /// The op failed with `error`: its versions carry it, and `tally` (its
    /// stream's) hands it to the stream's next fence.
    pub(crate) fn fail(&self, error: Error, tally: &FailureTally) {
        tally.record(&error);
        if let Some(outcome) = &self.outcome {
            outcome.fail(error);
        }
    }
}

/// The failures of a stream not yet reported by a fence: the first, and how many.
#[derive(Debug, Default)]
pub(crate) struct FailureTally(Mutex<Option<Failures>>);

impl FailureTally {
    /// Counts one more failure.
    pub(crate) fn record(&self, error: &Error) {
        let mut tally = lock(&self.0);
        match &mut *tally {
            Some(failures) => failures.count_one_more(),
            None => *tally = Some(Failures::from(error.clone())),
        }
    }

    /// Counts `failures` (another tally's, taken) after those here.
    pub(crate) fn add(&self, failures: Failures) {
        let mut tally = lock(&self.0);
        match &mut *tally {
            Some(earlier) => earlier.add(failures),
            None => *tally = Some(failures),
        }
    }

    /// True if no failure waits to be reported. Takes nothing.
    pub(crate) fn is_clear(&self) -> bool {
        lock(&self.0).is_none()
    }

    /// What a fence reports: the first failure since the last take, with the count.
    pub(crate) fn take(&self) -> Result<(), Failures> {
        lock(&self.0).take().map_or(Ok(()), Err)
    }

    /// What a signal of `kind` reports of them: a fence, or a retiring
    /// stream's last signal, takes them (each failure is reported once), a
    /// drain none.
    pub(crate) fn report(&self, kind: SignalKind) -> Result<(), Failures> {
        match kind {
            SignalKind::Fence | SignalKind::Retire => self.take(),
            SignalKind::Drain => Ok(()),
        }
    }
}

/// What a [`Backend::signal`](super::Backend::signal) reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignalKind {
    /// A fence: the first failure, with a count, among the ops that failed on
    /// the stream since its previous fence signal (each failure is reported
    /// by one fence); `Ok` if none did.
    Fence,
    /// A stream's last signal as it retires: reports as a fence does, so
    /// that failures no fence of the stream took reach the runtime's next
    /// fence; nobody awaits it.
    Retire,
    /// Internal bookkeeping (freeing memory, draining): completes `Ok` once
    /// the work is done, and reports nothing.
    Drain,
}

/// Where a download lands: the bytes, plus the completion a reader awaits.
#[derive(Debug)]
pub struct HostSink {
    bytes: Mutex<Option<HostBuffer>>,
    pub(crate) completion: Arc<Completion>,
}

impl HostSink {
    pub(crate) fn new(completion: Arc<Completion>) -> Arc<Self> {
        Arc::new(HostSink { bytes: Mutex::new(None), completion })
    }

    /// Delivers the downloaded bytes and completes the read.
    pub fn deliver(&self, bytes: Vec<u8>) {
        self.deliver_host(HostBuffer::heap(bytes));
    }

    /// Delivers the host memory the bytes were downloaded into, as it is,
    /// and completes the read.
    pub(crate) fn deliver_host(&self, bytes: HostBuffer) {
        *lock(&self.bytes) = Some(bytes);
        self.completion.complete(Ok(()));
    }

    /// Fails the read.
    pub fn fail(&self, error: crate::Error) {
        self.completion.complete(Err(error));
    }

    pub(crate) fn take(&self) -> Option<HostBuffer> {
        lock(&self.bytes).take()
    }
}
