//! The runtime as the public handles see it, whatever the backend: the
//! [`Engine`] trait, which the scheduler implements (in `engine_impl`).

use std::sync::Arc;

use super::{BufferKey, CommunicatorSlot, PartKeys, Recording};
#[cfg(feature = "test-support")]
use crate::backend::Gate;
use crate::backend::{AnyTimestamp, Command, RawAccess, Span, UploadFrom};
use crate::completion::spin::SpinPolicy;
use crate::completion::Completion;
use crate::device::{BackendKind, DeviceInfo};
use crate::diagnostics::{Diagnostics, LiveCounters};
use crate::error::Result;
use crate::host::HostBuffer;
use crate::kernel::Access;
use crate::options::QueueLimit;
use crate::room::{RoomWait, WhenFull};

/// How a new buffer starts.
pub(crate) enum Init<'a> {
    /// No definition: contents unspecified until written.
    Empty,
    /// Zero-filled on the device, no host data involved.
    Zero,
    /// Host bytes uploaded, staged from the caller's bytes where the backend
    /// can (see [`Backend::prepare_upload`](crate::backend::Backend::prepare_upload)).
    Data(&'a [u8]),
}

/// The runtime as the public handles see it, whatever the backend.
pub(crate) trait Engine: Send + Sync {
    fn kind(&self) -> BackendKind;
    fn info(&self) -> DeviceInfo;
    fn live(&self) -> &Arc<LiveCounters>;
    /// How a new stream's fence waits watch the fence before they park (see [`crate::Fence`]).
    fn fence_waits(&self) -> SpinPolicy;
    fn new_stream(&self) -> Result<usize>;
    /// The last handle of `stream` went: retire it once its work is done.
    fn retire_stream(&self, stream: usize);
    fn create(&self, stream: usize, len: u64, init: Init<'_>) -> Result<BufferKey>;
    fn release(&self, buffer: BufferKey);
    fn submit(&self, stream: usize, command: Command<BufferKey>) -> Result<()>;
    /// Admits an upload into `dst` from `from`, staged by the backend from the
    /// caller's bytes, or copied from host memory it locked, where it can (see
    /// [`Backend::prepare_upload`](crate::backend::Backend::prepare_upload)).
    fn submit_upload(&self, stream: usize, dst: Span<BufferKey>, from: UploadFrom<'_>) -> Result<()>;
    /// A host buffer holding a copy of `bytes`; see [`crate::Runtime::host_buffer`].
    fn host_buffer(&self, bytes: &[u8]) -> Result<HostBuffer>;
    /// A host buffer of `len` bytes to fill; see [`crate::Stream::staging_buffer`].
    fn staging_buffer(&self, len: usize) -> Result<HostBuffer>;
    /// Admits `commands` on `stream` in order, each its own op, in one
    /// critical section; see [`crate::Stream::batch`].
    fn submit_batch(&self, stream: usize, commands: Vec<Command<BufferKey>>) -> Result<()>;
    /// Admits `recording`'s ops on `stream` as one op whose reads and
    /// writes are the union of theirs; see [`crate::Stream::replay`].
    fn replay(&self, stream: usize, recording: &Recording) -> Result<()>;
    /// The recording `id` will not be replayed again.
    fn forget_graph(&self, id: u64);
    /// Keeps the buffers of `keys` past their last handle until unpinned.
    fn pin(&self, keys: &[BufferKey]) -> Result<()>;
    fn unpin(&self, keys: &[BufferKey]);
    /// The scheduler itself, for the ops that span two runtimes of one backend.
    fn as_any(&self) -> &dyn std::any::Any;
    /// Copies all of `src`, a buffer of `from`, into `dst` on `stream`,
    /// ordered by the versions of both; see [`crate::Stream::copy_from_peer`].
    fn copy_from_peer(&self, stream: usize, from: &dyn Engine, src: BufferKey, dst: BufferKey) -> Result<()>;
    /// Admits `collective` over `members` (this runtime first, then the
    /// rest of its group in rank order), one part per member; see
    /// [`crate::DeviceGroup::all_reduce`].
    fn collective(
        &self,
        members: &[&dyn Engine],
        slot: &CommunicatorSlot,
        collective: &crate::backend::Collective,
        parts: &[PartKeys],
    ) -> Result<()>;
    /// Makes this runtime rank `rank` of `ranks` of the group `id` names
    /// (its ranks in several processes), storing the communicator in `slot`;
    /// see [`crate::DeviceGroup::join`].
    fn join_group(
        &self,
        slot: &CommunicatorSlot,
        id: &[u8; crate::backend::GROUP_ID_BYTES],
        ranks: usize,
        rank: usize,
    ) -> Result<()>;
    fn fence(&self, stream: Option<usize>) -> Result<Arc<Completion>>;
    /// Enqueues a timestamp on `stream`: its completion, the backend's
    /// timestamp, and its position (a place of its own in the stream).
    fn timestamp(&self, stream: usize) -> Result<(Arc<Completion>, Box<dyn AnyTimestamp>, u64)>;
    /// True if a fence on `stream` now would complete at once with `Ok`;
    /// takes no failure (see [`Backend::is_settled`](crate::backend::Backend::is_settled)).
    fn is_synced(&self, stream: usize) -> bool;
    /// An error if waiting on the calling thread for `stream` (or all streams)
    /// would wait for itself: a CPU kernel waiting for its own stream.
    fn check_can_wait(&self, stream: Option<usize>) -> Result<()>;
    fn external(
        &self,
        stream: usize,
        accesses: &[(BufferKey, Access)],
        run: &mut dyn FnMut(RawAccess<'_>) -> Result<()>,
    ) -> Result<()>;
    #[cfg(feature = "test-support")]
    fn hold(&self, stream: usize) -> Result<Arc<Gate>>;
    /// Admits an op on `stream` that writes `buffer` and fails with `message`.
    #[cfg(feature = "test-support")]
    fn fail_write(&self, stream: usize, buffer: BufferKey, message: &str) -> Result<()>;
    fn diagnostics(&self) -> Diagnostics;
    /// Returns once the runtime's queue has room for another admission, or
    /// (`WhenFull::Refuse`) fails with [`Error::QueueFull`](crate::error::Error::QueueFull) when it has none.
    fn make_room(&self, when_full: WhenFull) -> Result<()>;
    /// Resolves once the runtime's queue has room.
    fn room(&self) -> RoomWait;
    fn queue_limit(&self) -> QueueLimit;
    fn close(&self) -> Result<()>;
}
