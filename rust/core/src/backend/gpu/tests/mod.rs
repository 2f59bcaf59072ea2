//! The shared GPU layer over the device layer's fake driver
//! (`weir_device::fake`), so that
//! what needs no device is tested where none exists: what `prepare` does and
//! what it leaves to `enqueue`, rejections versus failures, the completion
//! path's panic containment, and owners dropped on threads that never bound
//! the device.

mod collectives;
mod completions;
mod failures;
mod issuing;
mod launches;
mod ordering;
mod owners;
mod replay;
mod staging;

// Every test module takes these, and the helpers below, by `use super::*`.
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::Duration;

use weir_device::fake::*;

use super::*;
use crate::backend::{Backend, Command, EnqueueError, HostSink, KernelArg, OpIo, OpOutcome, SignalKind, Span};
use crate::completion::Completion;
use crate::diagnostics::LiveCounters;
use crate::error::Error;
use crate::host::HostBuffer;
use crate::kernel::{Access, DeviceCode, DeviceKernel, Grid, KernelSource, ScalarArg};
use crate::lock::lock;
use crate::options::SPIN_BUDGET;

fn backend(wake: Wake) -> (GpuBackend<Fake>, Arc<Shared>) {
    backend_spinning(wake, SPIN_BUDGET)
}

/// A fake backend on `context`, which other fakes that name it share, and
/// no other test names (see `NEXT_FAKE`).
fn backend_on_context(context: u64) -> (GpuBackend<Fake>, Arc<Shared>) {
    let shared =
        Arc::new(Shared { id: NEXT_FAKE.fetch_add(1, Ordering::SeqCst), context: Some(context), ..Shared::default() });
    match GpuBackend::with(Fake(shared.clone()), Wake::Waiter, SPIN_BUDGET) {
        Ok(backend) => (backend, shared),
        Err(error) => panic!("the fake backend opens: {error}"),
    }
}

/// A context no other test names.
fn new_context() -> u64 {
    NEXT_FAKE.fetch_add(1, Ordering::SeqCst) << 32
}

/// A fake backend whose waiting threads spin for up to `spin` per wait.
fn backend_spinning(wake: Wake, spin: Duration) -> (GpuBackend<Fake>, Arc<Shared>) {
    let (fake, shared) = Fake::new(false);
    match GpuBackend::with(fake, wake, spin) {
        Ok(backend) => (backend, shared),
        Err(error) => panic!("the fake backend opens: {error}"),
    }
}

fn completion() -> Arc<Completion> {
    Completion::new(1, Arc::new(LiveCounters::default()))
}

fn span(memory: &GpuMemory<Fake>, offset: u64, len: u64) -> Span<&GpuMemory<Fake>> {
    Span { buffer: memory, offset, len }
}

fn custom(name: &str, code: &str) -> Arc<CustomKernel> {
    Arc::new(CustomKernel {
        name: name.into(),
        cpu: None,
        wgsl: None,
        cuda: Some(DeviceKernel { code: DeviceCode::Source(code.into()), entry: name.into(), options: Vec::new() }),
        hip: None,
    })
}

/// Prepares, then enqueues, `command` on `stream`.
fn submit(
    backend: &GpuBackend<Fake>,
    stream: &GpuStream<Fake>,
    command: Command<&GpuMemory<Fake>>,
) -> Result<(), EnqueueError> {
    let prepared = backend.prepare(&command).map_err(EnqueueError::Rejected)?;
    // SAFETY: the fake touches no memory; the memory outlives the call.
    let enqueued = unsafe { backend.enqueue(stream, command, prepared, OpIo::default()) };
    // The driver calls are made on the issuing thread: once they are, the test looks.
    backend.device.issuer.flush();
    enqueued
}

/// Submits `command` as an op that writes, and returns how it ended once
/// the issuing thread made its driver calls: its failure, if it failed.
fn failure_of(
    backend: &GpuBackend<Fake>,
    stream: &GpuStream<Fake>,
    command: Command<&GpuMemory<Fake>>,
) -> Option<Error> {
    let outcome = Arc::new(OpOutcome::default());
    let prepared = backend.prepare(&command).unwrap();
    let io = OpIo { outcome: Some(outcome.clone()), ..Default::default() };
    // SAFETY: the fake touches no memory; the memory outlives the call.
    unsafe { backend.enqueue(stream, command, prepared, io) }.unwrap();
    backend.device.issuer.flush();
    outcome.failure().cloned()
}

fn fence(backend: &GpuBackend<Fake>, stream: &GpuStream<Fake>) -> Result<()> {
    let done = completion();
    backend.signal(stream, done.clone(), SignalKind::Fence)?;
    done.wait()
}

struct OpenOnDrop(Arc<Latch>);

impl Drop for OpenOnDrop {
    fn drop(&mut self) {
        self.0.open();
    }
}

/// Polls `done` for up to five seconds.
fn soon(done: impl Fn() -> bool) -> bool {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while std::time::Instant::now() < deadline {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    done()
}
