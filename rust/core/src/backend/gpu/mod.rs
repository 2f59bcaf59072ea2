//! The event-stream layer CUDA and HIP share.
//!
//! A GPU backend is a [`Driver`]: the few calls that differ between CUDA and
//! HIP (streams, events, memory, copies, memsets, runtime compilation,
//! launches, host callbacks). Everything else lives here, once:
//! - the [`Backend`] implementation over any driver: `prepare` does the slow
//!   part of a command before the scheduler's ordering boundary (compiling and
//!   loading custom kernels, staging upload bytes in page-locked memory,
//!   building launch parameters), and `enqueue` only checks the buffers'
//!   ranges and writes their addresses; the driver calls are made in
//!   admission order, by the admitting thread or, once admissions come in a
//!   streak, by the device's issuing thread (see `issue`);
//! - owners for streams, events and allocations, each releasing its handle
//!   exactly once in `Drop`, with live counts;
//! - the completion path: a host callback, or a pool of waiter threads
//!   serving each stream with completions queued (see `stream`, `waiters`);
//! - the device's kernel cache (the device layer's `modules`: the built-ins
//!   as one C source, users' kernels compiled and loaded once);
//! - page-locked staging for uploads and downloads, so enqueueing a copy
//!   never waits for the device;
//! - frees from any thread: owners bind the device before their driver
//!   calls, since the scheduler drops them on its delivery thread.
//!
//! Cross-stream order comes only from the scheduler's `record_event` /
//! `wait_event`; this layer adds no ordering of its own.
//!
//! [`Backend`]: crate::backend::Backend

mod backend_impl;
mod device;
mod enqueue;
mod issue;
mod owners;
mod prepare;
mod staging;
mod stream;
mod waiters;
// Over the device layer's fake driver.
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::kernel::CustomKernel;
use crate::lock::lock;
use crate::options::RuntimeOptions;
use rustc_hash::FxHashMap;

use device::Device;
pub use weir_device::driver::DeviceBuffer;
pub(crate) use weir_device::driver::{Driver, EventUse, GraphExec, RawPart};
use weir_device::modules::{Builtins, Function};
// The built-ins' source and table are for test suites and benchmarks (the
// backend module is public only with `test-support`); the backend itself
// loads them through `Kernels::builtin` and indexes by kernel.
pub(crate) use owners::{GpuEvent, GpuMemory};
use prepare::Prepared;
pub(crate) use stream::{GpuStream, Wake};
#[cfg_attr(not(feature = "test-support"), allow(unused_imports))]
pub use weir_device::builtin::{cuda_source, BuiltinKernel};

impl<D: Driver> Drop for GpuBackend<D> {
    fn drop(&mut self) {
        // Every queued driver call is made, then the thread lets the device go.
        self.device.issuer.stop();
        let graphs: Vec<GraphExec> = lock(&self.graphs).drain().map(|(_, exec)| exec).collect();
        if !graphs.is_empty() && self.driver().bind().is_ok() {
            for exec in graphs {
                // SAFETY: captured by this driver, drained so destroyed once.
                unsafe { self.driver().graph_destroy(exec) };
            }
        }
    }
}

/// A custom kernel's function, beside a weak handle that tells whether the
/// kernel it was loaded for is still the one at its address.
type KnownKernel<D> = (Weak<CustomKernel>, Function<D>);

/// A [`Backend`](crate::backend::Backend) over one GPU driver.
pub(crate) struct GpuBackend<D: Driver> {
    device: Arc<Device<D>>,
    builtins: Builtins<D::Function>,
    /// Custom kernels' functions, by kernel (see `custom_function`).
    by_kernel: Mutex<FxHashMap<usize, KnownKernel<D>>>,
    /// Captured replays, by recording.
    graphs: Mutex<HashMap<u64, GraphExec>>,
    /// Where replays are captured; made at the first capture.
    capture_stream: Mutex<Option<GpuStream<D>>>,
    wake: Wake,
}

impl<D: Driver> GpuBackend<D> {
    /// A backend over `driver`, its built-in kernels compiled and loaded now:
    /// loading a module can synchronise the whole device, which must not
    /// happen later behind work in flight.
    #[cfg_attr(not(any(feature = "cuda", feature = "hip")), allow(dead_code))]
    pub(crate) fn new(driver: D, options: &RuntimeOptions) -> Result<Self> {
        // Where completions arrive unless the runtime's builder says otherwise.
        let wake = match D::KIND {
            // ROCm 5.2 delivers stream callbacks without a thread of ours per stream.
            crate::device::BackendKind::Hip => Wake::Callback,
            // CUDA, measured with `cargo xtask bench`: median fence wake-up 36 us
            // through the waiter thread, 59 us through stream callbacks.
            _ => Wake::Waiter,
        };
        Self::with(driver, options.wake.unwrap_or(wake), options.spin)
    }

    /// As [`GpuBackend::new`], completing through `wake`, its waiting
    /// threads spinning for up to `spin` per wait.
    pub(crate) fn with(driver: D, wake: Wake, spin: Duration) -> Result<Self> {
        let device = Device::new(driver, spin);
        device.driver.bind()?;
        // Weir's own kernels not building is the toolchain's failure (an
        // NVRTC older than the GPU), not an argument of the caller's.
        let builtins =
            Builtins::load(|entry| device.kernels.builtin(&device.driver, entry).map(|f| f.raw)).map_err(|error| {
                match error {
                    Error::InvalidArgument(message) => Error::unavailable(
                        D::KIND,
                        format!("Weir's built-in kernels do not build for {}: {message}", device.driver.info().name),
                    ),
                    other => other,
                }
            })?;
        Ok(GpuBackend {
            device,
            builtins,
            by_kernel: Mutex::default(),
            graphs: Mutex::default(),
            capture_stream: Mutex::default(),
            wake,
        })
    }

    fn driver(&self) -> &D {
        &self.device.driver
    }

    /// `result`, remembering a lost device it reports.
    fn noting_loss<T>(&self, result: Result<T>) -> Result<T> {
        result.inspect_err(|error| self.driver().loss().record(error))
    }
}
