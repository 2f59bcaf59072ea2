//! The runtime handle.

use std::sync::Arc;

use crate::cancel::{cancellable, CancelToken};
use crate::error::Result;
use crate::fence::Fence;
use crate::jvm_threads::attach_as_they_start;
use crate::records::{Backend, DeviceInfo, Diagnostics, RuntimeOptions};
use crate::stream::WeirStream;

/// One device on one backend.
///
/// Lifetime: every handle made from a runtime (stream, buffer, fence) keeps it
/// alive, so a garbage-collected or released `WeirRuntime` object ends nothing
/// while its streams are in use. `shutdown()` is the explicit end: it waits
/// for all work in flight, then releases the device; later calls fail with
/// `Closed`, and every caller returns once that is done. When the last handle
/// goes without a shutdown, the work admitted so far completes and the device
/// is released in the background: no cleaner or `deinit` thread waits for it.
///
/// Named `WeirRuntime` so that it hides no platform type (Java's
/// `java.lang.Runtime`, imported everywhere); the core calls it `Runtime`.
#[derive(Debug, uniffi::Object)]
pub struct WeirRuntime {
    inner: weir_core::Runtime,
}

impl WeirRuntime {
    /// The handle of a runtime the core opened (a group's member).
    pub(crate) fn wrap(inner: weir_core::Runtime) -> Arc<Self> {
        Arc::new(WeirRuntime { inner })
    }

    pub(crate) fn core(&self) -> &weir_core::Runtime {
        &self.inner
    }
}

/// Every device of every backend compiled in, best backend first (CUDA,
/// HIP, wgpu, then the CPU), each as `WeirRuntime.open_device(backend,
/// index)` opens it and `info()` then reports it. Never fails and opens
/// nothing; a backend that cannot run here lists no device (opening it says why).
#[uniffi::export]
pub fn devices() -> Vec<DeviceInfo> {
    weir_core::devices().into_iter().map(DeviceInfo::from).collect()
}

#[uniffi::export]
impl WeirRuntime {
    /// Opens the device of `backend`. A backend that cannot run here fails with
    /// `Unavailable`, naming what is missing.
    #[uniffi::constructor]
    pub fn open(backend: Backend) -> Result<Arc<Self>> {
        attach_as_they_start();
        Ok(Arc::new(WeirRuntime { inner: weir_core::Runtime::open(backend.into())? }))
    }

    /// Opens device `index` of `backend`, as `devices()` lists it: a CUDA or
    /// HIP ordinal, a wgpu adapter's place in the listing (0 is the one
    /// `open` takes); every CPU opening is a device of its own. No such
    /// device fails with `Unavailable`; `Auto` with an index above 0 is
    /// `InvalidArgument`.
    #[uniffi::constructor]
    pub fn open_device(backend: Backend, index: u32) -> Result<Arc<Self>> {
        let index = usize::try_from(index)?;
        attach_as_they_start();
        Ok(Arc::new(WeirRuntime { inner: weir_core::Runtime::open_device(backend.into(), index)? }))
    }

    /// Opens device `options.device` of `backend` with `options` (every
    /// field has a default: name the ones to change). Bad options fail with
    /// `InvalidArgument`; the rest as `open_device`.
    #[uniffi::constructor]
    pub fn open_with(backend: Backend, options: RuntimeOptions) -> Result<Arc<Self>> {
        attach_as_they_start();
        Ok(Arc::new(WeirRuntime { inner: options.builder(backend)?.open()? }))
    }

    /// The device this runtime drives.
    pub fn info(&self) -> DeviceInfo {
        self.inner.info().into()
    }

    /// The stream every runtime starts with.
    pub fn default_stream(&self) -> Arc<WeirStream> {
        Arc::new(WeirStream::new(self.inner.default_stream()))
    }

    /// A new stream.
    pub fn new_stream(&self) -> Result<Arc<WeirStream>> {
        Ok(Arc::new(WeirStream::new(self.inner.new_stream()?)))
    }

    /// A fence on all work admitted on every stream so far.
    pub fn fence(&self) -> Result<Arc<Fence>> {
        Ok(Arc::new(Fence::new(self.inner.fence()?)))
    }

    /// Suspends until all work admitted on every stream so far is done.
    #[uniffi::method(default(cancel = None))]
    pub async fn sync(&self, cancel: Option<Arc<CancelToken>>) -> Result<()> {
        let wait = self.inner.fence()?.wait_async();
        cancellable(wait, cancel).await
    }

    /// Live objects and scheduler counts, for leak tests and benchmarks.
    pub fn diagnostics(&self) -> Diagnostics {
        self.inner.diagnostics().into()
    }

    /// Waits for all work in flight, then releases the device. Later calls on
    /// this runtime and everything it made fail with `Closed`; again: nothing.
    pub fn shutdown(&self) -> Result<()> {
        Ok(self.inner.close()?)
    }
}
