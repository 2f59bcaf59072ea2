//! The device-group handle: several devices of one backend, each a runtime.

use std::sync::Arc;

use crate::buffer::Buffer;
use crate::cancel::{cancellable, CancelToken};
use crate::error::{Result, WeirError};
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
        Ok(Arc::new(DeviceGroup { inner: weir_core::DeviceGroup::open(backend.into(), &devices)? }))
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
        Ok(self.inner.all_reduce(&core_streams(&streams), &core_buffers(&buffers), op.into())?)
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
        Ok(self.inner.reduce_scatter(&streams, &sends, &receives, op.into())?)
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
