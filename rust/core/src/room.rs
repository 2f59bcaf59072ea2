//! Backpressure: a bound on the work a runtime holds queued on the host
//! (used by the scheduler, which charges, and by every backend, which gives
//! back: so it sits below both).
//!
//! Every admitted op carries a [`Credit`] in its [`OpIo`](crate::backend::OpIo):
//! one op, and the host bytes it holds (an upload's data). The backend drops
//! the `OpIo` once the op has left its host-side queue (run on a CPU worker,
//! handed to the driver, encoded for the wgpu queue), and the credit goes
//! back. Before admitting, a stream asks for room: while the queued ops or
//! bytes are at the limit, a blocking caller waits, a task awaits
//! [`RoomWait`], and a non-waiting handle gets [`Error::QueueFull`].
//!
//! The check and the charge are apart (the check comes before the state
//! lock, so that no one waits holding it): concurrent producers can pass the
//! check together, so the queue may exceed the limit by at most one
//! admission (a batch, an upload) per producing thread. A caller that runs
//! on one of the runtime's own threads (a CPU kernel admitting more work)
//! never waits: the queue it waits on could be its own stream's, behind it.
//! One that runs on a thread of another runtime's CPU pool waits as it would
//! for a fence, its pool told (so the pool the two runtimes share can start
//! a worker for the ops that would make room).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Waker};

use crate::error::{Error, Result};
use crate::lock::lock;
use crate::options::QueueLimit;

/// What an admission does when the runtime's queue is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WhenFull {
    /// Blocks the calling thread until there is room.
    Wait,
    /// Fails at once with [`Error::QueueFull`].
    Refuse,
}

/// The queue's fill level and those waiting for it to go down.
pub(crate) struct Room {
    limit: QueueLimit,
    /// Hands the ops a backend holds back (wgpu's unrecorded batches) on to
    /// the device: called before waiting, or the queue might never drain.
    flush: Box<dyn Fn() + Send + Sync>,
    queued_ops: AtomicU64,
    queued_bytes: AtomicU64,
    /// The most ops ever queued at once, for diagnostics.
    peak_ops: AtomicU64,
    /// Threads and tasks waiting for room: a release that sees none skips the lock.
    waiting: AtomicUsize,
    /// The runtime closed. Set under the waiters' lock, so a waiter that
    /// looks under it before waiting is told; read without it by a task's
    /// first look, which must not take room on a closed runtime for `Ok`.
    closed: AtomicBool,
    waiters: Mutex<Waiters>,
    freed: Condvar,
}

#[derive(Default)]
struct Waiters {
    /// Tasks by the id of their [`RoomWait`], which takes its own out when dropped.
    tasks: Vec<(u64, Waker)>,
    next_id: u64,
}

impl Room {
    pub(crate) fn new(limit: QueueLimit, flush: Box<dyn Fn() + Send + Sync>) -> Arc<Self> {
        Arc::new(Room {
            limit,
            flush,
            queued_ops: AtomicU64::new(0),
            queued_bytes: AtomicU64::new(0),
            peak_ops: AtomicU64::new(0),
            waiting: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            waiters: Mutex::new(Waiters::default()),
            freed: Condvar::new(),
        })
    }

    pub(crate) fn limit(&self) -> QueueLimit {
        self.limit
    }

    /// Ops and host bytes queued now.
    pub(crate) fn queued(&self) -> (u64, u64) {
        (self.queued_ops.load(Ordering::SeqCst), self.queued_bytes.load(Ordering::SeqCst))
    }

    pub(crate) fn peak_ops(&self) -> u64 {
        self.peak_ops.load(Ordering::Relaxed)
    }

    fn has_room(&self) -> bool {
        let (ops, bytes) = self.queued();
        ops < self.limit.ops && bytes < self.limit.host_bytes
    }

    fn full(&self) -> Error {
        let (ops, bytes) = self.queued();
        Error::QueueFull { ops, bytes, limit: self.limit }
    }

    /// Returns once there is room, or at once with `when_full` `Refuse`.
    /// `own_thread` says whether the caller runs on one of the runtime's
    /// threads; it is asked only when the queue is full.
    pub(crate) fn make(&self, when_full: WhenFull, own_thread: impl FnOnce() -> bool) -> Result<()> {
        if self.has_room() {
            return Ok(());
        }
        match when_full {
            WhenFull::Refuse => Err(self.full()),
            WhenFull::Wait if own_thread() => Ok(()),
            WhenFull::Wait => {
                (self.flush)();
                // A job of another runtime's (a CPU kernel) waiting here holds
                // a worker of the pool that may be the one this queue's ops
                // need to drain: the pool may start another meanwhile.
                crate::completion::told_blocking(true);
                // Counted before the check under the lock: a release after
                // the check sees the waiter and notifies under the same lock.
                self.waiting.fetch_add(1, Ordering::SeqCst);
                let mut waiters = lock(&self.waiters);
                let outcome = loop {
                    if self.closed.load(Ordering::SeqCst) {
                        break Err(Error::Closed);
                    }
                    if self.has_room() {
                        break Ok(());
                    }
                    waiters = self.freed.wait(waiters).unwrap_or_else(|poisoned| poisoned.into_inner());
                };
                drop(waiters);
                self.waiting.fetch_sub(1, Ordering::SeqCst);
                crate::completion::told_blocking(false);
                outcome
            }
        }
    }

    /// A credit for one admitted op holding `bytes` of host memory.
    pub(crate) fn charge(self: &Arc<Self>, bytes: u64) -> Credit {
        let ops = self.queued_ops.fetch_add(1, Ordering::SeqCst) + 1;
        if bytes > 0 {
            self.queued_bytes.fetch_add(bytes, Ordering::SeqCst);
        }
        // Read first: the peak rarely moves, and a plain load costs no
        // exclusive cache line on every admission.
        if ops > self.peak_ops.load(Ordering::Relaxed) {
            self.peak_ops.fetch_max(ops, Ordering::Relaxed);
        }
        Credit { room: Some(self.clone()), bytes }
    }

    fn give_back(&self, bytes: u64) {
        self.queued_ops.fetch_sub(1, Ordering::SeqCst);
        if bytes > 0 {
            self.queued_bytes.fetch_sub(bytes, Ordering::SeqCst);
        }
        if self.waiting.load(Ordering::SeqCst) > 0 {
            self.wake_all();
        }
    }

    /// Wakes every waiter to look again; tasks are woken on the wake thread,
    /// as completions' are, so that no foreign waker runs on a worker or
    /// under our lock.
    fn wake_all(&self) {
        let tasks = {
            let mut waiters = lock(&self.waiters);
            self.waiting.fetch_sub(waiters.tasks.len(), Ordering::SeqCst);
            std::mem::take(&mut waiters.tasks)
        };
        self.freed.notify_all();
        if !tasks.is_empty() {
            crate::completion::deliver(move || tasks.into_iter().for_each(|(_, task)| task.wake()));
        }
    }

    /// The runtime closed: every waiter ends with [`Error::Closed`].
    pub(crate) fn close(&self) {
        {
            let _waiters = lock(&self.waiters);
            self.closed.store(true, Ordering::SeqCst);
        }
        self.wake_all();
    }

    /// A future that resolves once there is room.
    pub(crate) fn wait(self: &Arc<Self>) -> RoomWait {
        RoomWait { room: self.clone(), id: None }
    }
}

/// One queued op's share of the queue, given back when dropped.
#[derive(Default)]
pub(crate) struct Credit {
    room: Option<Arc<Room>>,
    bytes: u64,
}

impl std::fmt::Debug for Credit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credit").field("charged", &self.room.is_some()).field("bytes", &self.bytes).finish()
    }
}

impl Drop for Credit {
    fn drop(&mut self) {
        if let Some(room) = self.room.take() {
            room.give_back(self.bytes);
        }
    }
}

/// Resolves once the runtime's queue has room (`Ok`), or with
/// [`Error::Closed`] once the runtime closed. Dropping it takes its waker
/// back: a cancelled wait leaves nothing behind.
#[must_use = "a future does nothing unless awaited"]
pub struct RoomWait {
    room: Arc<Room>,
    /// Its place among the waiters while it is registered.
    id: Option<u64>,
}

impl Drop for RoomWait {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            let mut waiters = lock(&self.room.waiters);
            if let Some(at) = waiters.tasks.iter().position(|(task, _)| *task == id) {
                waiters.tasks.swap_remove(at);
                self.room.waiting.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }
}

impl std::fmt::Debug for RoomWait {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (ops, bytes) = self.room.queued();
        f.debug_struct("RoomWait").field("queued_ops", &ops).field("queued_bytes", &bytes).finish()
    }
}

impl Future for RoomWait {
    type Output = Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let this = self.get_mut();
        let room = this.room.clone();
        // Closed first: a closed runtime's queue is empty, and its room was `Ok`.
        if room.closed.load(Ordering::SeqCst) {
            return Poll::Ready(Err(Error::Closed));
        }
        if room.has_room() {
            return Poll::Ready(Ok(()));
        }
        if this.id.is_none() {
            (room.flush)();
        }
        let mut waiters = lock(&room.waiters);
        if room.closed.load(Ordering::SeqCst) {
            return Poll::Ready(Err(Error::Closed));
        }
        // Registered before the second look: a release in between sees it.
        let registered = this.id.and_then(|id| waiters.tasks.iter_mut().find(|(task, _)| *task == id));
        match registered {
            Some((_, task)) => task.clone_from(cx.waker()),
            None => {
                let id = waiters.next_id;
                waiters.next_id += 1;
                waiters.tasks.push((id, cx.waker().clone()));
                room.waiting.fetch_add(1, Ordering::SeqCst);
                this.id = Some(id);
            }
        }
        if room.has_room() {
            return Poll::Ready(Ok(()));
        }
        Poll::Pending
    }
}
