//! Bulk data without a `RustBuffer` in between.
//!
//! A `Vec<u8>` argument or result crosses the FFI as a `RustBuffer`: the
//! foreign side copies its array into one (and, for a result, out of one),
//! on top of the copy the core makes. Here uploads borrow the caller's
//! memory for the call (UniFFI's `&[u8]`: a direct `ByteBuffer` in Kotlin,
//! `Data` in Swift), and reads hand back the memory the device copied into
//! (page-locked on CUDA and HIP) in a [`HostBytes`] the caller copies out of
//! once, into an array of its own.

use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::{Arc, OnceLock};

use weir_core::HostBuffer;

use crate::buffer::Buffer;
use crate::cancel::{cancellable, CancelToken};
use crate::error::Result;
use crate::records::ElementType;
use crate::stream::WeirStream;

/// Bytes read from a device, held in Rust until this handle goes: the
/// bindings copy them straight into the caller's array (Kotlin through JNA,
/// Swift from the pointer) and close it.
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
        self.bytes().as_ptr() as usize as u64
    }

    /// How many bytes there are.
    pub fn len(&self) -> u64 {
        self.bytes().len() as u64
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.bytes().is_empty()
    }
}

impl HostBytes {
    fn bytes(&self) -> &[u8] {
        self.bytes.as_deref().unwrap_or_default()
    }
}

#[uniffi::export]
impl WeirStream {
    /// A buffer of `element`s holding `data`, borrowed for the call (Kotlin:
    /// the remaining bytes of a direct `ByteBuffer`; Swift: `Data`): the core
    /// copies it once, as `upload` from Rust does, before this returns.
    pub fn upload_borrowed(&self, data: &[u8], element: ElementType) -> Result<Arc<Buffer>> {
        Ok(Arc::new(Buffer::new(self.core().upload_as(element.into(), data)?)))
    }

    /// Enqueues a copy of `data`, borrowed for the call (a whole number of
    /// the buffer's elements), into `buffer` at element `offset`; returns once
    /// admitted (the bytes are copied by then), not once done.
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
        buffer.expect_data(element, "a read")?;
        let pending = self.core().enqueue_read_at(buffer.core(), offset, len)?;
        Ok(Arc::new(HostBytes { bytes: Some(cancellable(pending.into_host(), cancel).await?) }))
    }
}
