//! The scheduler over a CPU backend whose device can be lost on demand.

use std::sync::{Arc, Barrier, OnceLock};
use std::time::Duration;

use super::{Engine, Init, Scheduler};
use crate::backend::cpu::{CpuBackend, CpuEvent, CpuMemory, CpuStream, CpuTimestamp};
use crate::backend::{Backend, BackendCounters, Command, EnqueueError, OpIo, RawAccess, SignalKind};
use crate::completion::spin::SpinPolicy;
use crate::completion::Completion;
use crate::device::{BackendKind, DeviceInfo};
use crate::error::{Error, Result};
use crate::kernel::Access;
use crate::options::QueueLimit;

/// The CPU backend, lost once `lost` is set.
struct Lossy {
    inner: CpuBackend,
    lost: Arc<OnceLock<Error>>,
}

impl Backend for Lossy {
    type Stream = CpuStream;
    type Event = CpuEvent;
    type Memory = CpuMemory;
    type Prepared = ();
    type Timestamp = CpuTimestamp;
    type Communicator = ();
    const KIND: BackendKind = BackendKind::Cpu;
    fn info(&self) -> DeviceInfo {
        self.inner.info()
    }
    fn allocate(&self, bytes: u64) -> Result<CpuMemory> {
        self.inner.allocate(bytes)
    }
    fn create_stream(&self, index: u32) -> Result<CpuStream> {
        self.inner.create_stream(index)
    }
    fn prepare<R: PartialEq>(&self, command: &Command<R>) -> Result<()> {
        self.inner.prepare(command)
    }
    unsafe fn enqueue(&self, s: &CpuStream, c: Command<&CpuMemory>, p: (), io: OpIo) -> Result<(), EnqueueError> {
        // SAFETY: the caller's contract, passed on unchanged.
        unsafe { self.inner.enqueue(s, c, p, io) }
    }
    fn record_event(&self, s: &CpuStream) -> Result<CpuEvent> {
        self.inner.record_event(s)
    }
    fn wait_event(&self, s: &CpuStream, e: &CpuEvent) -> Result<()> {
        self.inner.wait_event(s, e)
    }
    fn timestamp(&self, s: &CpuStream, c: Arc<Completion>) -> Result<CpuTimestamp> {
        self.inner.timestamp(s, c)
    }
    fn signal(&self, s: &CpuStream, c: Arc<Completion>, k: SignalKind) -> Result<()> {
        self.inner.signal(s, c, k)
    }
    unsafe fn external(
        &self,
        s: &CpuStream,
        b: &[(&CpuMemory, Access)],
        io: OpIo,
        run: &mut dyn FnMut(RawAccess<'_>) -> Result<()>,
    ) -> Result<()> {
        // SAFETY: the caller's contract, passed on unchanged.
        unsafe { self.inner.external(s, b, io, run) }
    }
    fn lost(&self) -> Option<Error> {
        self.lost.get().cloned()
    }
    fn counters(&self) -> BackendCounters {
        self.inner.counters()
    }
}

#[test]
fn closing_a_lost_runtime_while_an_external_write_runs_leaves_the_write_to_return() {
    // Closing a lost runtime waits for no closure (nothing runs on the
    // device any more): the closure's own end must not find its stream.
    let lost = Arc::new(OnceLock::new());
    let backend = Lossy { inner: CpuBackend::new(), lost: lost.clone() };
    let scheduler =
        Arc::new(Scheduler::new(backend, QueueLimit::DEFAULT, SpinPolicy::new(Duration::ZERO), None).unwrap());
    let key = scheduler.create(0, 16, Init::Zero).unwrap();
    let (inside, closed) = (Arc::new(Barrier::new(2)), Arc::new(Barrier::new(2)));
    let closer = {
        let (scheduler, inside, closed) = (scheduler.clone(), inside.clone(), closed.clone());
        std::thread::spawn(move || {
            inside.wait();
            let outcome = scheduler.close();
            closed.wait();
            outcome
        })
    };
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        scheduler.external(0, &[(key, Access::Write)], &mut |_raw| {
            // The foreign call loses the device; another thread closes the runtime.
            let _ = lost.set(Error::DeviceLost { backend: BackendKind::Cpu, message: "xid".into(), status: None });
            inside.wait();
            closed.wait();
            Ok(())
        })
    }));
    assert!(closer.join().unwrap().is_ok(), "a lost runtime closes");
    match result {
        Err(panic) => {
            panic!("the external write panicked once its runtime closed: {}", crate::error::panic_text(&*panic))
        }
        Ok(outcome) => assert!(outcome.is_ok(), "the closure's own outcome: {outcome:?}"),
    }
}
