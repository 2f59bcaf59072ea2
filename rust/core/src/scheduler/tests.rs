//! The scheduler over a CPU backend whose device can be lost (and then
//! signals nothing, as the GPU engine's), or whose event records fail, on
//! demand.

use std::sync::atomic::{AtomicBool, Ordering};
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

/// The CPU backend, lost once `lost` is set; its event records fail while
/// `failing_records` is set.
struct Lossy {
    inner: CpuBackend,
    lost: Arc<OnceLock<Error>>,
    failing_records: AtomicBool,
}

impl Lossy {
    fn new() -> (Lossy, Arc<OnceLock<Error>>) {
        let lost = Arc::new(OnceLock::new());
        (Lossy { inner: CpuBackend::new(), lost: lost.clone(), failing_records: AtomicBool::new(false) }, lost)
    }
}

fn scheduler(backend: Lossy) -> Arc<Scheduler<Lossy>> {
    Arc::new(Scheduler::new(backend, QueueLimit::DEFAULT, SpinPolicy::new(Duration::ZERO), None).unwrap())
}

impl Backend for Lossy {
    type Stream = CpuStream;
    type Event = CpuEvent;
    type Memory = CpuMemory;
    type Prepared = ();
    type Timestamp = CpuTimestamp;
    type Communicator = ();
    const KIND: BackendKind = BackendKind::Cpu;
    const PEER_COPIES: bool = true;
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
        match self.failing_records.load(Ordering::SeqCst) {
            true => Err(Error::backend(BackendKind::Cpu, "event record failed")),
            false => self.inner.record_event(s),
        }
    }
    fn hold(&self, s: &CpuStream, gate: Arc<crate::backend::Gate>) -> Result<()> {
        self.inner.hold(s, gate)
    }
    fn wait_event(&self, s: &CpuStream, e: &CpuEvent) -> Result<()> {
        self.inner.wait_event(s, e)
    }
    fn timestamp(&self, s: &CpuStream, c: Arc<Completion>) -> Result<CpuTimestamp> {
        self.inner.timestamp(s, c)
    }
    fn signal(&self, s: &CpuStream, c: Arc<Completion>, k: SignalKind) -> Result<()> {
        // As the GPU engine: a lost device signals nothing.
        match self.lost() {
            Some(lost) => Err(lost),
            None => self.inner.signal(s, c, k),
        }
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
    let (backend, lost) = Lossy::new();
    let scheduler = scheduler(backend);
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

#[test]
fn a_buffer_released_on_a_lost_device_is_freed_and_counted_out() {
    // Its stream's use of it is queued behind a gate when the device is
    // lost: no stream will signal for it, and nothing runs on the device
    // any more, so its memory goes (on the release thread) and it is no
    // longer counted as retiring. It stayed counted for good.
    let (backend, lost) = Lossy::new();
    let scheduler = scheduler(backend);
    let gate = scheduler.hold(0).unwrap();
    let key = scheduler.create(0, 16, Init::Zero).unwrap();
    let _ = lost.set(Error::DeviceLost { backend: BackendKind::Cpu, message: "xid".into(), status: None });
    scheduler.release(key);
    gate.open();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while scheduler.diagnostics().retiring_buffers != 0 {
        assert!(std::time::Instant::now() < deadline, "the released buffer is still counted as retiring");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn a_peer_copy_whose_source_side_cannot_wait_for_it_returns_once_it_is_done_holding_neither_runtime() {
    // The copy is enqueued on the target's stream, behind a gate; then the
    // event that would make the source's link stream wait for it cannot be
    // recorded. The source could then be freed under the copy, unless the
    // copy is waited for before the failure is returned. What opens the gate
    // (as a CPU kernel queued before the copy could) first calls the target
    // runtime: the copy was waited for with both runtimes' locks held, so
    // that call, and with it the copy, waited for good.
    let (source, target) = (scheduler(Lossy::new().0), scheduler(Lossy::new().0));
    let (src, dst) = (source.create(0, 16, Init::Zero).unwrap(), target.create(0, 16, Init::Zero).unwrap());
    source.fence(None).unwrap().wait().unwrap();
    target.fence(None).unwrap().wait().unwrap();
    let gate = target.hold(0).unwrap();
    target.backend.failing_records.store(true, Ordering::SeqCst);
    let opened = Arc::new(AtomicBool::new(false));
    let opener = {
        let (gate, target, opened) = (gate.clone(), target.clone(), opened.clone());
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            let _ = target.diagnostics();
            opened.store(true, Ordering::SeqCst);
            gate.open();
        })
    };
    let (copied, done) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let failed = target.copy_from_peer(0, &*source, src, dst).is_err();
        let _ = copied.send((failed, opened.load(Ordering::SeqCst)));
    });
    let (failed, after_the_copy_could_run) =
        done.recv_timeout(Duration::from_secs(10)).expect("the copy never returned");
    assert!(failed, "the failed record is the copy's error");
    assert!(after_the_copy_could_run, "the copy failed back while it could still read its source");
    opener.join().unwrap();
}
