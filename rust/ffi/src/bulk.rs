//! Bulk data without a `RustBuffer` in between.
//!
//! A `Vec<u8>` argument or result crosses the FFI as a `RustBuffer`: the
//! foreign side copies its array into one (and, for a result, out of one),
//! on top of the copy the core makes. Here uploads borrow the caller's
//! memory for the call (UniFFI's `&[u8]`: a direct `ByteBuffer` in Kotlin,
//! `Data` in Swift), and reads hand back the memory the device copied into
//! (page-locked on CUDA and HIP) in a [`HostBytes`] the caller copies out of
//! once, into an array of its own.

use std::future::Future;
use std::pin::Pin;
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};

use weir_core::HostBuffer;

use crate::buffer::Buffer;
use crate::cancel::{cancellable, CancelToken};
use crate::error::Result;
use crate::lock::lock;
use crate::records::ElementType;
use crate::runtime::WeirRuntime;
use crate::stream::WeirStream;

/// Host bytes held in Rust until this handle goes: a read's (the bindings
/// copy them straight into the caller's array, Kotlin through JNA, Swift
/// from the pointer, and close it), or bytes to upload with
/// [`WeirStream::write_host`] ([`WeirRuntime::host_bytes`],
/// [`WeirStream::staging`]). Page-locked on CUDA and HIP.
///
/// Large plain ones are freed on a thread of their own (`weir-ffi-free`),
/// not on the thread that closes the handle: unmapping hundreds of MiB takes
/// milliseconds the caller, whose data is already in its array, need not
/// wait for. At most one waits for that thread; beyond it they are freed at
/// once. Page-locked ones go back to their runtime's pool, which is quick.
#[derive(Debug, uniffi::Object)]
pub struct HostBytes {
    bytes: Option<HostBuffer>,
}

/// From this size on, [`HostBytes`] are freed on the release thread.
const RELEASE_OFF_THREAD_BYTES: usize = 8 << 20;

impl Drop for HostBytes {
    fn drop(&mut self) {
        let Some(bytes) = self.bytes.take() else { return };
        if bytes.len() < RELEASE_OFF_THREAD_BYTES || bytes.is_page_locked() {
            return;
        }
        let Some(release) = release_thread() else { return };
        // Full (one already waits) or gone: freed here after all.
        if let Err(TrySendError::Full(bytes) | TrySendError::Disconnected(bytes)) = release.try_send(bytes) {
            drop(bytes);
        }
    }
}

/// The release thread's queue, started on first use; `None` if it cannot start.
fn release_thread() -> Option<&'static SyncSender<HostBuffer>> {
    static RELEASE: OnceLock<Option<SyncSender<HostBuffer>>> = OnceLock::new();
    RELEASE
        .get_or_init(|| {
            let (sender, receiver) = sync_channel::<HostBuffer>(1);
            let spawned = std::thread::Builder::new()
                .name("weir-ffi-free".to_owned())
                .spawn(move || receiver.into_iter().for_each(drop));
            spawned.ok().map(|_| sender)
        })
        .as_ref()
}

#[uniffi::export]
impl HostBytes {
    /// The address of the first byte; valid while this handle is alive
    /// (every byte up to [`HostBytes::len`] is initialised and never moves).
    pub fn address(&self) -> u64 {
        self.as_bytes().as_ptr() as usize as u64
    }

    /// How many bytes there are.
    pub fn len(&self) -> u64 {
        self.as_bytes().len() as u64
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.as_bytes().is_empty()
    }
}

impl HostBytes {
    /// Hands `bytes` to a new handle.
    pub(crate) fn new(bytes: HostBuffer) -> Self {
        HostBytes { bytes: Some(bytes) }
    }

    /// The bytes, for Rust callers (the bench's baselines).
    pub fn as_bytes(&self) -> &[u8] {
        self.bytes.as_deref().unwrap_or_default()
    }
}

#[uniffi::export]
impl WeirRuntime {
    /// Host memory holding a copy of `data` (borrowed for the call), for
    /// [`WeirStream::write_host`]: page-locked on CUDA and HIP, so uploads
    /// from it need no host copy; plain memory elsewhere. Keep it and upload
    /// it as often as needed; close it when done. (Kotlin: generated as
    /// `hostBytesFromRawMemory`, which lends the first `remaining()` bytes at
    /// a direct `ByteBuffer`'s address, whatever its position, and does not
    /// keep the buffer reachable; call the binding's `hostBytes(ByteBuffer)`.)
    pub fn host_bytes(&self, data: &[u8]) -> Result<Arc<HostBytes>> {
        Ok(Arc::new(HostBytes { bytes: Some(self.core().host_buffer(data)?) }))
    }
}

#[uniffi::export]
impl WeirStream {
    /// Enqueues a copy of all of `host` (a whole number of the buffer's
    /// elements) into `buffer` at element `offset`, straight from it where
    /// it is page-locked; the upload keeps the bytes alive until its copy is
    /// done, so `host` may be closed at once. Returns once admitted.
    pub fn write_host(
        &self,
        buffer: Arc<Buffer>,
        offset: u64,
        host: Arc<HostBytes>,
        element: ElementType,
    ) -> Result<()> {
        buffer.expect_data(element, "a write")?;
        let bytes = host
            .bytes
            .as_ref()
            .ok_or_else(|| weir_core::Error::InvalidArgument("host bytes already released".into()))?;
        Ok(self.core().write_host(buffer.core(), offset, bytes)?)
    }

    /// Host memory of `len` bytes for this stream's runtime, to fill through
    /// [`HostBytes::address`] and then upload with [`WeirStream::write_host`]:
    /// page-locked on CUDA and HIP, where it comes from the runtime's pool
    /// and holds an earlier copy's bytes until written, so fill all of it
    /// (zeros elsewhere). Write it only before its first upload: an upload
    /// copies from the memory until its copy is done. The bindings stage
    /// their arrays in these, so an array upload costs one host copy.
    pub fn staging(&self, len: u64) -> Result<Arc<HostBytes>> {
        let len = usize::try_from(len)
            .map_err(|_| weir_core::Error::InvalidArgument(format!("{len} bytes do not fit in this host's memory")))?;
        Ok(Arc::new(HostBytes { bytes: Some(self.core().staging_buffer(len)?) }))
    }

    /// A buffer of `element`s holding `data`, borrowed for the call (Swift:
    /// `Data`; Kotlin: generated as `uploadFromRawMemory`, which lends the
    /// first `remaining()` bytes at a direct `ByteBuffer`'s address, whatever
    /// its position; call the binding's `upload(ByteBuffer)`): the core
    /// copies it once, as `upload` from Rust does, before this returns.
    pub fn upload_borrowed(&self, data: &[u8], element: ElementType) -> Result<Arc<Buffer>> {
        Ok(Arc::new(Buffer::new(self.core().upload_as(element, data)?)))
    }

    /// Enqueues a copy of `data`, borrowed for the call (a whole number of
    /// the buffer's elements), into `buffer` at element `offset`; returns once
    /// admitted (the bytes are copied by then), not once done. (Kotlin:
    /// generated as `writeFromRawMemory`, as `upload_borrowed` is; call the
    /// binding's `write(Buffer, ByteBuffer)`.)
    pub fn write_borrowed(&self, buffer: Arc<Buffer>, offset: u64, data: &[u8], element: ElementType) -> Result<()> {
        buffer.expect_data(element, "a write")?;
        Ok(self.core().write_bytes(buffer.core(), offset, data)?)
    }

    /// Reads `len` elements of `buffer` from element `offset`, for an array
    /// of `element`s (refused if the buffer holds another type), once its
    /// latest write (on any stream) is done, without blocking a thread, into
    /// bytes held in Rust.
    #[uniffi::method(default(cancel = None))]
    pub async fn read_host(
        &self,
        buffer: Arc<Buffer>,
        offset: u64,
        len: u64,
        element: ElementType,
        cancel: Option<Arc<CancelToken>>,
    ) -> Result<Arc<HostBytes>> {
        self.enqueue_read_host(buffer, offset, len, element)?.bytes(cancel).await
    }

    /// Admits a read of `len` elements of `buffer` from element `offset`,
    /// for an array of `element`s, now, in order on this stream (an async
    /// call admits only once it first runs), to await later: what a pipeline
    /// that reuses the buffer needs, so the next write waits for this read.
    pub fn enqueue_read_host(
        &self,
        buffer: Arc<Buffer>,
        offset: u64,
        len: u64,
        element: ElementType,
    ) -> Result<Arc<PendingRead>> {
        buffer.expect_data(element, "a read")?;
        let read = self.core().enqueue_read_at(buffer.core(), offset, len)?;
        Ok(Arc::new(PendingRead { read: Mutex::new(ReadSlot { read: Some(read), awaited: false }) }))
    }
}

/// A read admitted on a stream ([`WeirStream::enqueue_read_host`]); its
/// bytes arrive when it completes. Dropping it leaks nothing.
#[derive(uniffi::Object)]
pub struct PendingRead {
    read: Mutex<ReadSlot>,
}

/// The read until its bytes are taken, and whether a `bytes()` waits for it.
struct ReadSlot {
    read: Option<weir_core::PendingRead>,
    awaited: bool,
}

fn taken() -> weir_core::Error {
    weir_core::Error::InvalidArgument("this read's bytes were taken already".into())
}

impl PendingRead {
    fn take(&self) -> Result<weir_core::PendingRead> {
        let mut slot = lock(&self.read);
        if slot.awaited {
            return Err(weir_core::Error::InvalidArgument("a bytes() call waits for this read's bytes".into()).into());
        }
        Ok(slot.read.take().ok_or_else(taken)?)
    }
}

/// `bytes()`'s wait. The read stays in its [`PendingRead`] until its bytes
/// are there: a cancelled wait leaves them for the next call, and
/// `is_complete` tells the truth meanwhile. One wait at a time (a second
/// would take the first's place to be woken): another is refused.
struct BytesWhenDone<'a> {
    pending: &'a PendingRead,
    waiting: bool,
}

impl Future for BytesWhenDone<'_> {
    type Output = weir_core::Result<HostBuffer>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let mut slot = lock(&this.pending.read);
        if !this.waiting {
            if slot.awaited {
                return Poll::Ready(Err(weir_core::Error::InvalidArgument(
                    "another call waits for this read's bytes".into(),
                )));
            }
            (slot.awaited, this.waiting) = (true, true);
        }
        let Some(read) = slot.read.as_mut() else { return Poll::Ready(Err(taken())) };
        let polled = read.poll_host(cx);
        if polled.is_ready() {
            slot.read = None;
        }
        polled
    }
}

impl Drop for BytesWhenDone<'_> {
    fn drop(&mut self) {
        if self.waiting {
            let mut slot = lock(&self.pending.read);
            slot.awaited = false;
            // A wait dropped before the bytes came (cancelled) leaves no
            // waker behind: the read stays for the next call.
            if let Some(read) = slot.read.as_mut() {
                read.forget_wait();
            }
        }
    }
}

impl std::fmt::Debug for PendingRead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingRead").finish_non_exhaustive()
    }
}

#[uniffi::export]
impl PendingRead {
    /// The bytes, once the read completes, without blocking a thread. Only
    /// one call gets them: a later one, or one made while another waits, is
    /// `InvalidArgument`. A cancelled wait leaves them for the next call.
    #[uniffi::method(default(cancel = None))]
    pub async fn bytes(&self, cancel: Option<Arc<CancelToken>>) -> Result<Arc<HostBytes>> {
        let waited = BytesWhenDone { pending: self, waiting: false };
        Ok(Arc::new(HostBytes { bytes: Some(cancellable(waited, cancel).await?) }))
    }

    /// The bytes, blocking the calling thread until the read completes (a
    /// wait that would wait for itself is `InvalidArgument`, never a hang).
    pub fn bytes_blocking(&self) -> Result<Arc<HostBytes>> {
        // Refused before the read is taken: a wait that would wait for
        // itself leaves the bytes for the next call.
        if let Some(read) = lock(&self.read).read.as_ref() {
            read.check_can_wait()?;
        }
        Ok(Arc::new(HostBytes { bytes: Some(self.take()?.wait_host()?) }))
    }

    /// True once the read finished. Never blocks.
    pub fn is_complete(&self) -> bool {
        lock(&self.read).read.as_ref().is_none_or(weir_core::PendingRead::is_complete)
    }
}
