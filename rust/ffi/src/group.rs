//! The device-group handle: several devices of one backend, each a runtime.

use std::sync::Arc;

use crate::cancel::{cancellable, CancelToken};
use crate::error::{Result, WeirError};
use crate::records::Backend;
use crate::runtime::WeirRuntime;

/// Several devices of one backend opened together; each member is a
/// [`WeirRuntime`] with its own streams, and `WeirStream.copy_from_peer`
/// copies a buffer of one member into a buffer of another, ordered by the
/// buffers' versions on both. On the CPU every member is a device of its own.
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

    /// Shuts every member down (see `WeirRuntime.shutdown`); the first error comes back.
    pub fn shutdown(&self) -> Result<()> {
        self.inner.close().map_err(WeirError::from)
    }
}
