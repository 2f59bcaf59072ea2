//! Fences and pending reads: awaitable, waitable, droppable at any time.

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use crate::backend::HostSink;
use crate::completion::paths::{self, WaitPath};
use crate::completion::spin::SpinPolicy;
use crate::completion::Completion;
use crate::error::{Error, Result};
use crate::host::HostBuffer;
use crate::scheduler::Engine;

/// "All work admitted on a stream (or on every stream) up to now."
///
/// Wait for it as often as you like, from any number of threads and tasks:
/// [`Fence::wait`] blocks, `.await` suspends, [`Fence::is_complete`] never
/// blocks. Dropping it, or a future waiting on it, at any moment leaks nothing.
///
/// A wait for a stream's fence first watches it on its own thread for about
/// as long as that stream's recent waits took, while they were short (at
/// most 100 µs, and never beyond the builder's
/// [`spin`](crate::RuntimeBuilder::spin); behind long work it parks at
/// once): an app that waits for one small op after another then sees each
/// end at once instead of being woken by another thread, which costs a
/// parked thread 5–50 µs. A future watches in its first poll. It yields its
/// core between checks (on a GPU backend after its first 2 µs), to the
/// thread that may be about to end the work: a CPU worker, the wake
/// thread's probe of a GPU event. On the CPU backend, once a stream's
/// recent waits took longer than a worker's wake-up, a wait blocks for that
/// span instead of spinning: the worker it waits for wakes it directly.
pub struct Fence {
    completion: Arc<Completion>,
    /// Keeps the runtime alive, and tells a wait that would wait for itself.
    engine: Arc<dyn Engine>,
    stream: Option<usize>,
    /// A stream fence's: how long its stream's waits took lately.
    waits: Option<SpinPolicy>,
}

impl std::fmt::Debug for Fence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fence").field("complete", &self.is_complete()).finish()
    }
}

impl Fence {
    pub(crate) fn new(completion: Arc<Completion>, engine: Arc<dyn Engine>, stream: Option<usize>) -> Self {
        engine.live().fences.fetch_add(1, Ordering::SeqCst);
        Fence { completion, engine, stream, waits: None }
    }

    /// The fence, its waits watching it first as `waits` says, and teaching it how long they took.
    pub(crate) fn watched(mut self, waits: &SpinPolicy) -> Self {
        self.waits = Some(waits.clone());
        self
    }

    /// Blocks the calling thread until the work is done; reports the first
    /// failure. From inside a CPU kernel of a stream this fence covers, it
    /// fails with [`Error::InvalidArgument`] (it would wait for itself).
    pub fn wait(&self) -> Result<()> {
        let start = Instant::now();
        if !self.completion.is_complete() {
            self.engine.check_can_wait(self.stream)?;
            if let Some(waits) = &self.waits {
                // Where it would block, the wait below does.
                watch_counted(waits, start, || self.completion.is_complete(), |_| false);
            }
        }
        let outcome = self.completion.wait();
        if let Some(waits) = &self.waits {
            learn(waits, &self.completion, start);
        }
        outcome
    }

    /// True once the work is done. Never blocks.
    pub fn is_complete(&self) -> bool {
        self.completion.is_complete()
    }

    /// The outcome, if the work is done. Never blocks.
    pub fn outcome(&self) -> Option<Result<()>> {
        self.completion.outcome()
    }

    /// A future that resolves when the work is done. It owns what it needs, so
    /// it may outlive this handle.
    pub fn wait_async(&self) -> CompletionWait {
        self.watched_wait(None)
    }

    /// A future for a wait of this fence that began at `started` and has
    /// watched it already (a binding's quick check that ran out before the
    /// work ended): it does not watch again, and once the work is done it
    /// teaches the stream how long after `started` the work ended, as the
    /// first wait would have. (A new wait of work done by its first poll
    /// teaches a wait of nothing: right for an idle stream, wrong for one
    /// that was waited for all along.)
    pub fn wait_async_since(&self, started: Instant) -> CompletionWait {
        self.watched_wait(Some(started))
    }

    /// A wait of the completion, watched as the stream's waits are (from
    /// its first poll, or from `started` where a watch already began).
    fn watched_wait(&self, started: Option<Instant>) -> CompletionWait {
        let mut wait = self.completion.wait_async();
        wait.watch = self.waits.clone().map(|waits| Watch { waits, started });
        wait
    }
}

impl Drop for Fence {
    fn drop(&mut self) {
        self.engine.live().fences.fetch_sub(1, Ordering::SeqCst);
    }
}

impl IntoFuture for &Fence {
    type Output = Result<()>;
    type IntoFuture = CompletionWait;
    fn into_future(self) -> CompletionWait {
        self.wait_async()
    }
}

impl IntoFuture for Fence {
    type Output = Result<()>;
    type IntoFuture = CompletionWait;
    fn into_future(self) -> CompletionWait {
        self.wait_async()
    }
}

/// A future that resolves with a [`Completion`] (what [`Fence::wait_async`]
/// returns). Woken by whoever completes it; dropping it unregisters its waker.
pub struct CompletionWait {
    completion: Arc<Completion>,
    slot: Option<usize>,
    /// A stream fence's wait: watched in the first poll (see [`Fence`]).
    watch: Option<Watch>,
}

/// A stream fence's wait: how long its stream's waits took lately, and when this one started.
struct Watch {
    waits: SpinPolicy,
    started: Option<Instant>,
}

impl Completion {
    /// A future that resolves when this completion does.
    pub fn wait_async(self: &Arc<Self>) -> CompletionWait {
        CompletionWait { completion: self.clone(), slot: None, watch: None }
    }
}

impl Future for CompletionWait {
    type Output = Result<()>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let this = self.get_mut();
        if let Some(watch) = &mut this.watch {
            if watch.started.is_none() && this.completion.is_complete() {
                // Done before it was awaited (an idle stream): nothing to
                // watch, and no clock to read; it teaches a wait of nothing.
                watch.waits.learn_took(Duration::ZERO);
                this.watch = None;
            } else if watch.started.is_none() {
                let start = Instant::now();
                watch.started = Some(start);
                let completion = &this.completion;
                watch_counted(&watch.waits, start, || completion.is_complete(), |most| completion.wait_at_most(most));
            }
        }
        let polled = this.completion.poll_wait(cx, &mut this.slot);
        if polled.is_ready() {
            if let Some(Watch { waits, started: Some(start) }) = this.watch.take() {
                learn(&waits, &this.completion, start);
            }
        }
        polled
    }
}

/// Watches a stream fence's completion as `waits` says (see
/// [`SpinPolicy::watch`]), counting which way the watch ended.
fn watch_counted(waits: &SpinPolicy, start: Instant, done: impl FnMut() -> bool, block: impl FnOnce(Duration) -> bool) {
    let seen = waits.watch(start, done, block);
    paths::count(if seen { WaitPath::FenceSeen } else { WaitPath::FenceBlocked });
}

/// Teaches `waits` how long after `start`, a wait's start, its work ended:
/// when the completion finished, not when the waiting thread was woken
/// (which would keep a stream that once parked from ever watching again).
fn learn(waits: &SpinPolicy, completion: &Completion, start: Instant) {
    waits.learn_took(completion.finished_since(start).unwrap_or_else(|| start.elapsed()));
}

impl Drop for CompletionWait {
    fn drop(&mut self) {
        self.completion.forget_waker(&mut self.slot);
    }
}

/// A read admitted on a stream; the bytes arrive when it completes. It keeps
/// its runtime alive.
pub struct PendingRead {
    sink: Arc<HostSink>,
    slot: Option<usize>,
    engine: Arc<dyn Engine>,
    stream: usize,
}

impl PendingRead {
    pub(crate) fn new(sink: Arc<HostSink>, engine: Arc<dyn Engine>, stream: usize) -> Self {
        PendingRead { sink, slot: None, engine, stream }
    }

    /// Blocks until the bytes are there (see [`Fence::wait`] for the one case
    /// it refuses).
    pub fn wait(self) -> Result<Vec<u8>> {
        self.wait_host().map(HostBuffer::into_vec)
    }

    /// Blocks until the bytes are there, as the host memory the device
    /// copied them into: page-locked on CUDA and HIP, with no host copy.
    pub fn wait_host(self) -> Result<HostBuffer> {
        self.check_can_wait()?;
        self.sink.completion.wait()?;
        self.bytes()
    }

    /// Refuses, as [`PendingRead::wait_host`] would, a blocking wait where
    /// it would wait for itself (see [`Fence::wait`]); the read is untouched,
    /// so a caller that keeps it may check before it gives it up.
    pub fn check_can_wait(&self) -> Result<()> {
        match self.sink.completion.is_complete() {
            true => Ok(()),
            false => self.engine.check_can_wait(Some(self.stream)),
        }
    }

    /// The read as a future of the host memory the device copied into, as
    /// [`PendingRead::wait_host`] returns it, awaited without blocking a thread.
    pub fn into_host(self) -> PendingHostRead {
        PendingHostRead(self)
    }

    /// True once the read finished. Never blocks.
    pub fn is_complete(&self) -> bool {
        self.sink.completion.is_complete()
    }

    fn bytes(&self) -> Result<HostBuffer> {
        self.sink.take().ok_or_else(|| Error::internal("a read completed without its bytes"))
    }

    /// Polls for the host memory the device copied into, without giving up
    /// the read: a wait that may be dropped and made again (a binding's
    /// cancellable one). Its bytes are handed out once.
    pub fn poll_host(&mut self, cx: &mut Context<'_>) -> Poll<Result<HostBuffer>> {
        match self.sink.completion.poll_wait(cx, &mut self.slot) {
            Poll::Ready(Ok(())) => Poll::Ready(self.bytes()),
            Poll::Ready(Err(error)) => Poll::Ready(Err(error)),
            Poll::Pending => Poll::Pending,
        }
    }

    /// Ends a wait [`PendingRead::poll_host`] began and that will not be
    /// polled again (its future was dropped): the waker it left goes, and
    /// the read stays, for a later wait.
    pub fn forget_wait(&mut self) {
        self.sink.completion.forget_waker(&mut self.slot);
    }
}

impl Future for PendingRead {
    type Output = Result<Vec<u8>>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<Vec<u8>>> {
        self.get_mut().poll_host(cx).map(|bytes| bytes.map(HostBuffer::into_vec))
    }
}

/// A [`PendingRead`] awaited for its host memory; see [`PendingRead::into_host`].
pub struct PendingHostRead(PendingRead);

impl Future for PendingHostRead {
    type Output = Result<HostBuffer>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<HostBuffer>> {
        self.get_mut().0.poll_host(cx)
    }
}

impl Drop for PendingRead {
    fn drop(&mut self) {
        self.sink.completion.forget_waker(&mut self.slot);
    }
}
