//! The device-group handle: several devices of one backend, each a runtime.

use crate::jvm_threads::attach_as_they_start;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use crate::buffer::Buffer;
use crate::cancel::{cancellable, CancelToken};
use crate::error::{Result, WeirError};
use crate::lock::lock;
use crate::records::{Backend, ReduceOp};
use crate::runtime::WeirRuntime;
use crate::stream::WeirStream;

/// Several devices of one backend opened together; each member is a
/// [`WeirRuntime`] with its own streams, and `WeirStream.copy_from_peer`
/// copies a buffer of one member into a buffer of another, ordered by the
/// buffers' versions on both. On the CPU every member is a device of its own.
///
/// Collectives (`all_reduce`, `broadcast`, `all_gather`, `reduce_scatter`)
/// take one stream and one buffer (or a send and a receive) per member, in
/// member order: `streams[i]` a stream of member `i`, whole buffers of it,
/// of one element type. Each member's part is an op on its stream, ordered
/// like any (after its inputs' latest writes and its outputs' users; a later
/// write of what it read waits for it), and all parts are admitted at once,
/// so every device sees a group's collectives in one order. A failed input
/// on any member fails the collective on every member; bad input is
/// `InvalidArgument` and admits nothing. CPU and CUDA (NCCL) groups.
///
/// A group may also be one rank of a group whose ranks live in several
/// processes or hosts (`join`): it holds this process's one member, its
/// collectives take one stream and buffer of it, and sizes count every rank.
#[derive(Debug, uniffi::Object)]
pub struct DeviceGroup {
    inner: weir_core::DeviceGroup,
}

#[uniffi::export]
impl DeviceGroup {
    /// Opens `devices` (device indices, as `WeirRuntime` opens one) of `backend`.
    #[uniffi::constructor]
    pub fn open(backend: Backend, devices: Vec<u32>) -> Result<Arc<Self>> {
        let devices: Vec<usize> = devices.into_iter().map(|index| index as usize).collect();
        attach_as_they_start();
        Ok(Arc::new(DeviceGroup { inner: weir_core::DeviceGroup::open(backend.into(), &devices)? }))
    }

    /// Joins the group `id` names as rank `rank` of `ranks`, with device
    /// `device` of this process. Suspends until every rank has joined (up to
    /// two minutes on the CPU; as NCCL's bootstrap waits on CUDA); the wait
    /// runs on a thread of its own and cannot be cancelled. Every rank must
    /// then admit the group's collectives in one order. CPU (ranks in
    /// processes of one host, at most 65 536) and CUDA (NCCL, across hosts
    /// too); more ranks than the backend's limit is `InvalidArgument`.
    #[uniffi::constructor]
    pub async fn join(backend: Backend, device: u32, id: Arc<GroupId>, ranks: u32, rank: u32) -> Result<Arc<Self>> {
        let id = id.inner.clone();
        attach_as_they_start();
        let joined = off_thread(move || {
            weir_core::DeviceGroup::join(backend.into(), device as usize, &id, ranks as usize, rank as usize)
        })
        .await?;
        Ok(Arc::new(DeviceGroup { inner: joined? }))
    }

    /// [`DeviceGroup::join`], blocking the calling thread until every rank
    /// has joined.
    #[uniffi::constructor]
    pub fn join_blocking(backend: Backend, device: u32, id: Arc<GroupId>, ranks: u32, rank: u32) -> Result<Arc<Self>> {
        attach_as_they_start();
        let joined =
            weir_core::DeviceGroup::join(backend.into(), device as usize, &id.inner, ranks as usize, rank as usize)?;
        Ok(Arc::new(DeviceGroup { inner: joined }))
    }

    /// This process's first member's rank in the group: `0` unless joined.
    pub fn rank(&self) -> u32 {
        self.inner.rank() as u32
    }

    /// How many ranks the group has, in every process: the members' count unless joined.
    pub fn ranks(&self) -> u32 {
        self.inner.ranks() as u32
    }

    /// The members, in the order opened.
    pub fn devices(&self) -> Vec<Arc<WeirRuntime>> {
        self.inner.devices().iter().cloned().map(WeirRuntime::wrap).collect()
    }

    /// Member `index`.
    pub fn device(&self, index: u32) -> Result<Arc<WeirRuntime>> {
        Ok(WeirRuntime::wrap(self.inner.device(index as usize)?.clone()))
    }

    /// Suspends until all work admitted on every member so far is done.
    #[uniffi::method(default(cancel = None))]
    pub async fn sync(&self, cancel: Option<Arc<CancelToken>>) -> Result<()> {
        let group = self.inner.clone();
        cancellable(Box::pin(async move { group.sync().await }), cancel).await
    }

    /// Enqueues an all-reduce with `op` over `buffers` (one per member, in
    /// place, `f32`, `i32` or `u32`, one size): afterwards each holds the
    /// reduction of all of them. Returns once admitted, not once done.
    pub fn all_reduce(&self, streams: Vec<Arc<WeirStream>>, buffers: Vec<Arc<Buffer>>, op: ReduceOp) -> Result<()> {
        Ok(self.inner.all_reduce(&core_streams(&streams), &core_buffers(&buffers), op)?)
    }

    /// Enqueues [`DeviceGroup::all_reduce`], then suspends until every
    /// stream given has done it.
    #[uniffi::method(default(cancel = None))]
    pub async fn all_reduce_and_wait(
        &self,
        streams: Vec<Arc<WeirStream>>,
        buffers: Vec<Arc<Buffer>>,
        op: ReduceOp,
        cancel: Option<Arc<CancelToken>>,
    ) -> Result<()> {
        self.all_reduce(streams.clone(), buffers, op)?;
        wait_for_all(&streams, cancel).await
    }

    /// Enqueues a broadcast of member `root`'s buffer into every member's
    /// (one per member, in place, one size and type).
    pub fn broadcast(&self, streams: Vec<Arc<WeirStream>>, buffers: Vec<Arc<Buffer>>, root: u32) -> Result<()> {
        Ok(self.inner.broadcast(&core_streams(&streams), &core_buffers(&buffers), root as usize)?)
    }

    /// Enqueues [`DeviceGroup::broadcast`], then suspends until every stream given has done it.
    #[uniffi::method(default(cancel = None))]
    pub async fn broadcast_and_wait(
        &self,
        streams: Vec<Arc<WeirStream>>,
        buffers: Vec<Arc<Buffer>>,
        root: u32,
        cancel: Option<Arc<CancelToken>>,
    ) -> Result<()> {
        self.broadcast(streams.clone(), buffers, root)?;
        wait_for_all(&streams, cancel).await
    }

    /// Enqueues an all-gather: `receives[i]` gets every member's send, in
    /// member order (n times a send's elements).
    pub fn all_gather(
        &self,
        streams: Vec<Arc<WeirStream>>,
        sends: Vec<Arc<Buffer>>,
        receives: Vec<Arc<Buffer>>,
    ) -> Result<()> {
        Ok(self.inner.all_gather(&core_streams(&streams), &core_buffers(&sends), &core_buffers(&receives))?)
    }

    /// Enqueues [`DeviceGroup::all_gather`], then suspends until every stream given has done it.
    #[uniffi::method(default(cancel = None))]
    pub async fn all_gather_and_wait(
        &self,
        streams: Vec<Arc<WeirStream>>,
        sends: Vec<Arc<Buffer>>,
        receives: Vec<Arc<Buffer>>,
        cancel: Option<Arc<CancelToken>>,
    ) -> Result<()> {
        self.all_gather(streams.clone(), sends, receives)?;
        wait_for_all(&streams, cancel).await
    }

    /// Enqueues a reduce-scatter with `op`: `receives[i]` gets chunk `i` of
    /// the reduction of every member's send (a send holds n times a receive).
    pub fn reduce_scatter(
        &self,
        streams: Vec<Arc<WeirStream>>,
        sends: Vec<Arc<Buffer>>,
        receives: Vec<Arc<Buffer>>,
        op: ReduceOp,
    ) -> Result<()> {
        let (streams, sends, receives) = (core_streams(&streams), core_buffers(&sends), core_buffers(&receives));
        Ok(self.inner.reduce_scatter(&streams, &sends, &receives, op)?)
    }

    /// Enqueues [`DeviceGroup::reduce_scatter`], then suspends until every stream given has done it.
    #[uniffi::method(default(cancel = None))]
    pub async fn reduce_scatter_and_wait(
        &self,
        streams: Vec<Arc<WeirStream>>,
        sends: Vec<Arc<Buffer>>,
        receives: Vec<Arc<Buffer>>,
        op: ReduceOp,
        cancel: Option<Arc<CancelToken>>,
    ) -> Result<()> {
        self.reduce_scatter(streams.clone(), sends, receives, op)?;
        wait_for_all(&streams, cancel).await
    }

    /// Shuts every member down (see `WeirRuntime.shutdown`); the first error comes back.
    pub fn shutdown(&self) -> Result<()> {
        self.inner.close().map_err(WeirError::from)
    }
}

fn core_streams(streams: &[Arc<WeirStream>]) -> Vec<weir_core::Stream> {
    streams.iter().map(|stream| stream.core().clone()).collect()
}

fn core_buffers(buffers: &[Arc<Buffer>]) -> Vec<weir_core::Buffer> {
    buffers.iter().map(|buffer| buffer.core().clone()).collect()
}

/// Suspends until every one of `streams` has done what was admitted on it
/// so far (a collective's parts); `cancel` ends the wait, never the work.
async fn wait_for_all(streams: &[Arc<WeirStream>], cancel: Option<Arc<CancelToken>>) -> Result<()> {
    let fences = streams.iter().map(|stream| stream.core().fence()).collect::<weir_core::Result<Vec<_>>>()?;
    cancellable(
        Box::pin(async move {
            let mut first = Ok(());
            // Every part's fence, so that each member's failure is reported once, here.
            for fence in fences {
                let done = fence.await;
                if first.is_ok() {
                    first = done;
                }
            }
            first
        }),
        cancel,
    )
    .await
}

/// Names one group whose ranks live in several processes (or hosts), for
/// `DeviceGroup.join`: made once, by rank 0's process, and handed by the
/// caller to every other rank's process as `to_bytes` (a file, an
/// environment variable, a socket). On the CPU it holds a loopback listener
/// until rank 0 joins, so rank 0 joins in the process that made it.
#[derive(Debug, uniffi::Object)]
pub struct GroupId {
    inner: weir_core::GroupId,
}

#[uniffi::export]
impl GroupId {
    /// A new id for a group of `backend` (CPU or CUDA), in rank 0's process.
    #[uniffi::constructor]
    pub fn new(backend: Backend) -> Result<Arc<Self>> {
        Ok(Arc::new(GroupId { inner: weir_core::GroupId::new(backend.into())? }))
    }

    /// The id `bytes` hold, as another process's `to_bytes` made them.
    #[uniffi::constructor]
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Arc<Self>> {
        Ok(Arc::new(GroupId { inner: weir_core::GroupId::from_bytes(&bytes)? }))
    }

    /// The id as bytes, for another process's `from_bytes`.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.inner.to_bytes()
    }

    /// The backend the id is for.
    pub fn backend(&self) -> Backend {
        self.inner.backend().into()
    }
}

/// What a thread of its own returns, awaited without blocking the caller.
struct Handoff<T> {
    value: Option<T>,
    waker: Option<Waker>,
}

struct OffThread<T>(Arc<Mutex<Handoff<T>>>);

impl<T> Future for OffThread<T> {
    type Output = T;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let mut handoff = lock(&self.0);
        match handoff.value.take() {
            Some(value) => Poll::Ready(value),
            None => {
                handoff.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

/// Runs `work` on a thread of its own (`weir-join`); the future resolves
/// with its result, or a `Bug` where it panicked (else the future would
/// wait for a value that never comes, and the join could not be
/// cancelled). The waker is woken after the lock is let go.
fn off_thread<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> impl Future<Output = Result<T>> {
    let handoff = Arc::new(Mutex::new(Handoff { value: None, waker: None }));
    let theirs = handoff.clone();
    let spawned = std::thread::Builder::new().name("weir-join".into()).spawn(move || {
        let value = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work));
        let waker = {
            let mut handoff = lock(&theirs);
            handoff.value = Some(value);
            handoff.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    });
    async move {
        spawned.map_err(|error| WeirError::Backend {
            backend: crate::records::BackendKind::Cpu,
            description: format!("no thread to join the group on: {error}"),
        })?;
        OffThread(handoff)
            .await
            .map_err(|_| WeirError::Bug { description: "the group's join panicked on its thread".to_owned() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_that_panics_off_thread_resolves_as_a_bug_not_never() {
        let joined = futures::executor::block_on(off_thread(|| -> u32 { panic!("the join broke") }));
        assert!(matches!(joined, Err(WeirError::Bug { .. })), "{joined:?}");
        assert_eq!(futures::executor::block_on(off_thread(|| 7)).ok(), Some(7));
    }
}
