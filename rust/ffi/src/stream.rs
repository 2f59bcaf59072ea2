//! The stream handle: where ops are admitted, and the async waits on them.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use crate::buffer::Buffer;
use crate::cancel::{cancellable, CancelToken};
use crate::error::{Result, WeirError};
use crate::fence::Fence;
use crate::kernel::Kernel;
use crate::lock::lock;
use crate::records::{Arg, ElementType, Grid};
use crate::timestamp::Timestamp;

/// An ordered queue of device work. Any thread may submit to any stream; ops
/// on different streams are ordered exactly as their buffers need.
///
/// Named `WeirStream` so that it hides no platform type (Swift's
/// `Foundation.Stream`); the core calls it `Stream`.
///
/// One naming rule for every call: a plain verb (`execute`, `memset_zero`,
/// `write`) enqueues and returns once the op is admitted, not once it is
/// done; the same verb with `_and_wait` (Kotlin `…AndWait`, a suspend
/// function; Swift, an async one) enqueues, then waits without blocking a
/// thread until this stream has run it. A read returns data, so it always
/// waits: `read` without blocking a thread, `read_blocking` blocking it.
/// The optional `cancel` token of a waiting call ends the wait (never the
/// work) with `Cancelled`.
#[derive(Debug, uniffi::Object)]
pub struct WeirStream {
    inner: weir_core::Stream,
    /// The fence a `sync_quickly` made and left unfinished, and when its
    /// watch began: the next wait waits for it too, so that what it reports
    /// reaches someone, and learns how long the work took from then.
    unfinished: Mutex<Option<(weir_core::Fence, Instant)>>,
    /// Waits made through a Rust future on this handle (test support: the
    /// bindings' suites check that their fast paths make none).
    #[cfg(feature = "test-support")]
    future_waits: std::sync::atomic::AtomicU64,
}

impl WeirStream {
    pub(crate) fn new(inner: weir_core::Stream) -> Self {
        WeirStream {
            inner,
            unfinished: Mutex::new(None),
            #[cfg(feature = "test-support")]
            future_waits: std::sync::atomic::AtomicU64::new(0),
        }
    }

    pub(crate) fn core(&self) -> &weir_core::Stream {
        &self.inner
    }

    fn admit(&self, kernel: &Kernel, grid: Grid, args: &[Arg]) -> Result<()> {
        let grid = grid.to_core()?;
        let args: Vec<weir_core::Arg<'_>> = args.iter().map(Arg::to_core).collect();
        Ok(self.inner.execute(kernel.core(), grid, &args)?)
    }

    /// A wait on everything admitted on this stream so far, holding no fence
    /// handle. Where this stream's recent waits were short, its first poll
    /// watches the fence for a moment on the polling thread (see
    /// [`weir_core::Fence`]): a Kotlin or Swift wait that ends then
    /// resumes without a suspension and a wake-up from another thread.
    ///
    /// A `sync()` of the bindings asks [`WeirStream::sync_quickly`] first,
    /// whose unfinished fence covers all the wait is for. Should the runtime
    /// close between the two (`shutdown()` on another thread), that fence,
    /// which closing drained, is the wait: a sync begun before the shutdown
    /// completes as the work it waits for did, not with `Closed`.
    fn completion(&self) -> Result<Waits> {
        #[cfg(feature = "test-support")]
        self.future_waits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // The unfinished fence's wait goes on from where `sync_quickly`
        // began it: begun anew, work done by now would teach the stream's
        // waits a wait of nothing, and keep its quick checks too short.
        let resumed = |(fence, since): (weir_core::Fence, Instant)| fence.wait_async_since(since);
        let (earlier, last) = match self.inner.fence() {
            // After the new fence: one made at the same place is the same fence.
            Ok(fence) => (lock(&self.unfinished).take().map(resumed), fence.wait_async()),
            Err(weir_core::Error::Closed) => match lock(&self.unfinished).take() {
                Some(begun) => (None, resumed(begun)),
                None => return Err(weir_core::Error::Closed.into()),
            },
            Err(error) => return Err(error.into()),
        };
        Ok(Waits { earlier, earlier_failure: None, last })
    }

    /// Admits a read of `length` elements of `buffer` from element `offset`
    /// (no length: to the end of the buffer).
    /// A read whose bytes come back as a byte array (`read`, `read_blocking`):
    /// at most what one holds, 2^31 − 1 bytes (larger, UniFFI's conversion
    /// would fail after the read); `enqueue_read_host` hands back any size.
    fn admit_read(&self, buffer: &Buffer, offset: u64, length: Option<u64>) -> Result<weir_core::PendingRead> {
        let buffer = buffer.core();
        let length = length.unwrap_or_else(|| buffer.len().saturating_sub(offset));
        let bytes = length.saturating_mul(buffer.element_type().size_bytes());
        if bytes > i32::MAX as u64 {
            return Err(weir_core::Error::InvalidArgument(format!(
                "a read of {bytes} bytes is more than a byte array holds (2^31 - 1): read it in parts, or through \
                 enqueue_read_host"
            ))
            .into());
        }
        Ok(self.inner.enqueue_read_at(buffer, offset, length)?)
    }
}

#[uniffi::export]
impl WeirStream {
    /// This stream, through a handle whose admissions never wait for room:
    /// while the runtime's queue is full (`RuntimeOptions.queue_limit_ops`
    /// and `queue_limit_host_bytes`) they fail with `QueueFull` and admit
    /// nothing. A plain handle's admissions block their thread until there
    /// is room; a coroutine or task awaits `room()` and tries again instead.
    pub fn without_waiting(&self) -> Arc<WeirStream> {
        Arc::new(WeirStream::new(self.inner.without_waiting()))
    }

    /// Suspends until the runtime's queue has room for more work (returns
    /// at once while it has). Another producer may take the room first: a
    /// `without_waiting()` admission then says `QueueFull` again. Fails with
    /// `Closed` once the runtime is shut down.
    #[uniffi::method(default(cancel = None))]
    pub async fn room(&self, cancel: Option<Arc<CancelToken>>) -> Result<()> {
        cancellable(self.inner.room(), cancel).await
    }

    /// The stream's index in its runtime (0 is the default stream).
    pub fn index(&self) -> u32 {
        u32::try_from(self.inner.index()).unwrap_or(u32::MAX)
    }

    /// A buffer of `count` zeroed `element`s: allocated, zeroed on the device
    /// and published in one admission, with no host data.
    pub fn zeros(&self, count: u64, element: ElementType) -> Result<Arc<Buffer>> {
        Ok(Arc::new(Buffer::new(self.inner.zeros(element, count)?)))
    }

    /// A buffer of `count` `element`s with unspecified contents.
    pub fn empty(&self, count: u64, element: ElementType) -> Result<Arc<Buffer>> {
        Ok(Arc::new(Buffer::new(self.inner.empty(element, count)?)))
    }

    /// A buffer of `element`s holding `data` (little-endian, a whole number of
    /// elements), uploaded on this stream.
    pub fn upload(&self, data: Vec<u8>, element: ElementType) -> Result<Arc<Buffer>> {
        Ok(Arc::new(Buffer::new(self.inner.upload_as(element, &data)?)))
    }

    /// Enqueues `kernel` over `args`. Returns once admitted, not once done.
    pub fn execute(&self, kernel: Arc<Kernel>, grid: Grid, args: Vec<Arg>) -> Result<()> {
        self.admit(&kernel, grid, &args)
    }

    /// Enqueues `kernel` over `args`, then suspends until this stream has run it.
    #[uniffi::method(default(cancel = None))]
    pub async fn execute_and_wait(
        &self,
        kernel: Arc<Kernel>,
        grid: Grid,
        args: Vec<Arg>,
        cancel: Option<Arc<CancelToken>>,
    ) -> Result<()> {
        self.admit(&kernel, grid, &args)?;
        cancellable(self.completion()?, cancel).await
    }

    /// Enqueues zeroing every byte of `buffer` on the device (ordered after its
    /// readers and writers on every stream). Returns once admitted, not once done.
    pub fn memset_zero(&self, buffer: Arc<Buffer>) -> Result<()> {
        Ok(self.inner.memset_zero(buffer.core())?)
    }

    /// Enqueues zeroing every byte of `buffer`, then suspends until this stream has done it.
    #[uniffi::method(default(cancel = None))]
    pub async fn memset_zero_and_wait(&self, buffer: Arc<Buffer>, cancel: Option<Arc<CancelToken>>) -> Result<()> {
        self.inner.memset_zero(buffer.core())?;
        cancellable(self.completion()?, cancel).await
    }

    /// Enqueues a copy of `data` (`element`s, little-endian: a whole number
    /// of the buffer's elements) into `buffer` at element `offset`. Data of
    /// another type than the buffer's is refused; raw `Bytes` go anywhere.
    /// Returns once admitted (the data is copied by then), not once done.
    pub fn write(&self, buffer: Arc<Buffer>, data: Vec<u8>, element: ElementType, offset: u64) -> Result<()> {
        buffer.expect_data(element, "a write")?;
        Ok(self.inner.write_bytes(buffer.core(), offset, &data)?)
    }

    /// Enqueues a copy of `data` into `buffer` at element `offset`, as
    /// [`WeirStream::write`] does, then suspends until this stream has done it.
    #[uniffi::method(default(cancel = None))]
    pub async fn write_and_wait(
        &self,
        buffer: Arc<Buffer>,
        data: Vec<u8>,
        element: ElementType,
        offset: u64,
        cancel: Option<Arc<CancelToken>>,
    ) -> Result<()> {
        buffer.expect_data(element, "a write")?;
        self.inner.write_bytes(buffer.core(), offset, &data)?;
        cancellable(self.completion()?, cancel).await
    }

    /// Reads the bytes of `length` elements of `buffer` from element `offset`
    /// (by default the whole buffer) once its latest write (on any stream) is
    /// done, without blocking a thread.
    #[uniffi::method(default(offset = 0, length = None, cancel = None))]
    pub async fn read(
        &self,
        buffer: Arc<Buffer>,
        offset: u64,
        length: Option<u64>,
        cancel: Option<Arc<CancelToken>>,
    ) -> Result<Vec<u8>> {
        let pending = self.admit_read(&buffer, offset, length)?;
        cancellable(pending, cancel).await
    }

    /// What [`WeirStream::read`] reads, blocking the calling thread until then.
    #[uniffi::method(default(offset = 0, length = None))]
    pub fn read_blocking(&self, buffer: Arc<Buffer>, offset: u64, length: Option<u64>) -> Result<Vec<u8>> {
        Ok(self.admit_read(&buffer, offset, length)?.wait()?)
    }

    /// Enqueues a copy of all of `src`, a buffer of another member of this
    /// stream's device group, into `dst`, a buffer of this stream's runtime
    /// of the same size: it waits for `src`'s latest write on its device and
    /// for every user of `dst` here, and a later write of `src` on its device
    /// waits for it. Returns once admitted, not once done.
    pub fn copy_from_peer(&self, src: Arc<Buffer>, dst: Arc<Buffer>) -> Result<()> {
        Ok(self.inner.copy_from_peer(src.core(), dst.core())?)
    }

    /// Enqueues [`WeirStream::copy_from_peer`], then suspends until this stream has done it.
    #[uniffi::method(default(cancel = None))]
    pub async fn copy_from_peer_and_wait(
        &self,
        src: Arc<Buffer>,
        dst: Arc<Buffer>,
        cancel: Option<Arc<CancelToken>>,
    ) -> Result<()> {
        self.inner.copy_from_peer(src.core(), dst.core())?;
        cancellable(self.completion()?, cancel).await
    }

    /// A fence on all work admitted on this stream so far.
    pub fn fence(&self) -> Result<Arc<Fence>> {
        Ok(Arc::new(Fence::new(self.inner.fence()?)))
    }

    /// Suspends until all work admitted on this stream so far is done. A
    /// stream whose last fence succeeded, with nothing admitted since, answers
    /// at once, without a device call or a wake-up, on every backend; on the
    /// CPU and wgpu backends so does any idle stream. (The Kotlin
    /// and Swift bindings' own `sync()` asks [`WeirStream::sync_quickly`]
    /// first and, when it says yes, returns without creating a Rust future.)
    #[uniffi::method(default(cancel = None))]
    pub async fn sync(&self, cancel: Option<Arc<CancelToken>>) -> Result<()> {
        cancellable(self.completion()?, cancel).await
    }

    /// True when all work admitted on this stream so far is done and no
    /// failure waits to be reported, so `sync()` would return at once. Never
    /// blocks and reports nothing (a failure stays for the next fence or
    /// sync); false whenever in doubt, and always on HIP (CUDA asks the stream).
    pub fn is_synced(&self) -> bool {
        // A fence `sync_quickly` left holds the failures it took from the
        // stream: until it has succeeded, `sync()` has them to report. (Held
        // by a `sync_quickly` now: in doubt.)
        let unfinished = match self.unfinished.try_lock() {
            Ok(unfinished) => unfinished,
            Err(std::sync::TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return false,
        };
        let clear = unfinished.as_ref().is_none_or(|(fence, _)| matches!(fence.outcome(), Some(Ok(()))));
        clear && self.inner.is_synced()
    }

    /// What the bindings' `sync()` asks before it suspends: true when all
    /// work admitted on this stream so far is done, so that `sync()` would
    /// return at once. When it is not yet but the stream's recent waits were
    /// quick, it makes the fence `sync()` would make (on wgpu this submits
    /// the queued ops) and watches it for a short, bounded time on the
    /// calling thread (as every stream fence's wait does: about as long as
    /// the recent waits took, 100 µs at most; see `weir_core::Fence`).
    /// A failure the fence completed with is thrown as `sync()` would throw
    /// it. False if the work is not done by then (or the stream is behind
    /// long work): the next wait on this handle then waits for that fence
    /// too, so nothing it reports is lost.
    pub fn sync_quickly(&self) -> Result<bool> {
        // Held throughout: two calls at once would each leave a fence, and
        // the second's would take the first's place, and with it the
        // failures that one took from the stream (each is reported once).
        // Only our own calls run under it: the fence's first poll watches
        // for 100 µs at most, and making it waits for nothing here (only an
        // external write, which the FFI does not make, holds a stream).
        let mut unfinished = lock(&self.unfinished);
        // An earlier call's fence first: what it carries is reported here.
        if let Some((fence, _)) = unfinished.as_ref() {
            let Some(outcome) = fence.outcome() else { return Ok(false) };
            *unfinished = None;
            outcome?;
        }
        if self.inner.is_synced() {
            return Ok(true);
        }
        if !self.inner.waits_are_short() {
            return Ok(false);
        }
        let fence = self.inner.fence()?;
        // The first poll watches the fence (the stream's waits are short).
        let (mut wait, started) = (fence.wait_async(), Instant::now());
        if let Poll::Ready(outcome) = Pin::new(&mut wait).poll(&mut Context::from_waker(Waker::noop())) {
            return outcome.map(|()| true).map_err(WeirError::from);
        }
        *unfinished = Some((fence, started));
        Ok(false)
    }
}

/// A stream's wait: for the fence a `sync_quickly` left unfinished, if any,
/// then for the latest; the first failure of either is the outcome.
pub(crate) struct Waits {
    earlier: Option<weir_core::CompletionWait>,
    earlier_failure: Option<weir_core::Error>,
    last: weir_core::CompletionWait,
}

impl Future for Waits {
    type Output = weir_core::Result<()>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if let Some(earlier) = &mut self.earlier {
            let Poll::Ready(outcome) = Pin::new(earlier).poll(cx) else { return Poll::Pending };
            self.earlier = None;
            self.earlier_failure = outcome.err();
        }
        let Poll::Ready(last) = Pin::new(&mut self.last).poll(cx) else { return Poll::Pending };
        Poll::Ready(match self.earlier_failure.take() {
            Some(failure) => Err(failure),
            None => last,
        })
    }
}

#[uniffi::export]
impl WeirStream {
    /// Enqueues a timestamp: the device's clock once everything admitted on
    /// this stream so far is done. Time an op or a range of ops with one
    /// before and one after (`after.elapsed_since(before)`). On wgpu every
    /// stream shares the device's queue, so a range also covers other
    /// streams' work submitted within it, and the adapter needs the
    /// `TIMESTAMP_QUERY` feature (else `Unsupported`, naming it).
    pub fn timestamp(&self) -> Result<Arc<Timestamp>> {
        Ok(Arc::new(Timestamp::new(self.inner.timestamp()?)))
    }
}

#[cfg(feature = "test-support")]
#[uniffi::export]
impl WeirStream {
    /// Admits an op that writes `buffer` and fails with `message`, as a failed
    /// kernel would: its readers on every stream fail with it. Test support.
    pub fn fail_write(&self, buffer: Arc<Buffer>, message: String) -> Result<()> {
        Ok(self.inner.fail_write(buffer.core(), &message)?)
    }

    /// Holds the stream at this point: work admitted after it waits until the
    /// returned [`Hold`] is released. Test support (the CPU and wgpu backends
    /// have it; others answer `Unsupported`).
    pub fn hold(&self) -> Result<Arc<Hold>> {
        Ok(Arc::new(Hold { gate: std::sync::Mutex::new(Some(self.inner.hold()?)) }))
    }

    /// How many waits this handle made through a Rust future (a suspending
    /// `sync`, `executeAndWait`, `memsetZeroAndWait`, …): what the bindings'
    /// fast paths avoid, so their suites can see them taken. Test support.
    pub fn debug_future_waits(&self) -> u64 {
        self.future_waits.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// A gate in a stream (test support): the stream waits here until released.
/// Dropping the handle releases it too.
#[cfg(feature = "test-support")]
#[derive(Debug, uniffi::Object)]
pub struct Hold {
    gate: std::sync::Mutex<Option<weir_core::Hold>>,
}

#[cfg(feature = "test-support")]
#[uniffi::export]
impl Hold {
    /// Lets the stream go on. Releasing again does nothing.
    pub fn release(&self) {
        let gate = lock(&self.gate).take();
        drop(gate);
    }
}

impl From<std::num::TryFromIntError> for WeirError {
    fn from(error: std::num::TryFromIntError) -> Self {
        WeirError::invalid(error.to_string())
    }
}
