//! A fake GPU driver, so that what needs no device is tested where none
//! exists (see `tests`): it runs nothing, records every call, reaches every
//! event at once and runs a callback on a thread of its own; a test makes
//! chosen calls fail, stall or take time.

use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::{c_void, CStr};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::time::Duration;

use crate::driver::*;
use crate::enqueue::EnqueueError;
use crate::error::{Error, Result};
use crate::info::{BackendKind, DeviceInfo};
use crate::lock::lock;
use crate::raw::RawStream;
use crate::rtc::Compiled;

thread_local! {
    /// The fake bound on this thread (0: none).
    pub static BOUND: Cell<u64> = const { Cell::new(0) };
}

pub static NEXT_FAKE: AtomicU64 = AtomicU64::new(1);

#[derive(Debug, Clone, PartialEq)]
pub enum Call {
    Compile,
    Memset {
        ptr: u64,
        count: u64,
    },
    CopyH2D {
        dst: u64,
        bytes: Vec<u8>,
    },
    CopyD2H {
        src: u64,
        len: u64,
    },
    CopyD2D {
        dst: u64,
        src: u64,
        len: u64,
    },
    Launch {
        function: u64,
        params: Vec<u64>,
    },
    Free {
        ptr: u64,
        thread: Option<String>,
    },
    /// A capture made a graph of the calls recorded since its start.
    Captured {
        exec: usize,
    },
    GraphLaunch {
        exec: usize,
    },
    GraphDestroy {
        exec: usize,
    },
    /// One rank's part of a collective, with the group it was enqueued in.
    Collective {
        group: u64,
        stream: u64,
        send: u64,
        receive: u64,
        bytes: u64,
    },
}

/// The name of the fake device's issuing thread.
pub const ISSUING_THREAD: &str = "weir-cuda-issue";

pub const NO_QUERY: u8 = 0;
pub const REACHED_ON_WAKE_THREAD: u8 = 1;
pub const REACHED: u8 = 2;
pub const NOT_REACHED: u8 = 3;

/// A latch a compile waits on, to hold it while the test looks around.
#[derive(Default)]
pub struct Latch {
    pub open: Mutex<bool>,
    pub opened: Condvar,
}

impl Latch {
    pub fn open(&self) {
        *lock(&self.open) = true;
        self.opened.notify_all();
    }

    pub fn pass(&self) {
        let mut open = lock(&self.open);
        while !*open {
            open = self.opened.wait(open).unwrap_or_else(|poisoned| poisoned.into_inner());
        }
    }
}

#[derive(Default)]
pub struct Shared {
    pub id: u64,
    pub calls: Mutex<Vec<Call>>,
    /// Driver calls made on a thread where this fake was not bound.
    pub unbound_calls: AtomicUsize,
    /// `bind` calls on the issuing thread: every one asks the driver which
    /// context is current.
    pub issuing_binds: AtomicUsize,
    pub events_destroyed: AtomicUsize,
    pub events_created: AtomicUsize,
    /// Every event record, as (event, stream), and every stream wait, as
    /// (stream, event), in the order they were made.
    pub event_records: Mutex<Vec<(u64, u64)>>,
    pub stream_waits: Mutex<Vec<(u64, u64)>>,
    /// Names of the calls that fail.
    pub failing: Mutex<Vec<&'static str>>,
    /// Names of the calls that fail with a fault that poisons the context.
    pub fatal: Mutex<Vec<&'static str>>,
    pub loss: Arc<Loss>,
    /// What `param_sizes` answers for every function, as a CUDA driver asks it.
    pub param_sizes: Mutex<Option<Vec<usize>>>,
    /// What `param_sizes` answers otherwise, for an entry its image (the
    /// source) names, as HIP reads a code object.
    pub image_param_sizes: Mutex<Option<Vec<usize>>>,
    /// Driver calls made after the context was lost (`bind` aside).
    pub calls_after_loss: AtomicUsize,
    /// How `event_query` answers: [`NO_QUERY`] (as a driver may have none),
    /// [`REACHED_ON_WAKE_THREAD`] (not reached elsewhere), [`REACHED`] or
    /// [`NOT_REACHED`].
    pub queries: std::sync::atomic::AtomicU8,
    /// When set, `event_synchronize` returns only once this opens.
    pub slow_sync: Mutex<Option<Arc<Latch>>>,
    /// `event_synchronize` calls made.
    pub event_syncs: AtomicUsize,
    /// When set, `stream_synchronize` returns only once this opens: the
    /// stream's work is done then.
    pub slow_stream_sync: Mutex<Option<Arc<Latch>>>,
    /// The events made light (`EventUse::StreamOrder`: no blocking sync),
    /// and the `event_synchronize` calls made on one, which would spin.
    pub light_events: Mutex<Vec<u64>>,
    pub light_syncs: AtomicUsize,
    /// When set, a launch on the issuing thread returns only once this opens.
    pub slow_issue: Mutex<Option<Arc<Latch>>>,
    /// How long every launch takes, wherever it is made: a driver whose
    /// queue to the device is full blocks its caller so.
    pub launch_takes: Mutex<Option<Duration>>,
    /// The thread each launch was made on, in order.
    pub launched_on: Mutex<Vec<Option<String>>>,
    /// Sources containing "slow" compile only once this opens; told when one starts.
    pub slow_compile: Mutex<Option<(Arc<Latch>, mpsc::Sender<()>)>>,
    /// Images containing "slow" load only once this opens; told when one starts.
    pub slow_load: Mutex<Option<(Arc<Latch>, mpsc::Sender<()>)>>,
    pub free_waits: bool,
    /// The context this fake says it is on, for sharing loaded modules.
    pub context: Option<u64>,
    pub host: Mutex<HashMap<usize, usize>>,
    pub modules: Mutex<HashMap<u64, String>>,
    pub next: AtomicU64,
}

impl Shared {
    pub fn check(&self, call: &'static str) -> Result<()> {
        if BOUND.with(Cell::get) != self.id {
            self.unbound_calls.fetch_add(1, Ordering::SeqCst);
        }
        if call != "bind" && self.loss.get().is_some() {
            self.calls_after_loss.fetch_add(1, Ordering::SeqCst);
        }
        if lock(&self.failing).contains(&call) {
            return Err(Error::backend(BackendKind::Cuda, format!("{call} failed")));
        }
        if lock(&self.fatal).contains(&call) {
            return Err(status_error(BackendKind::Cuda, call, "CUDA_ERROR_ILLEGAL_ADDRESS".into(), 700, true));
        }
        Ok(())
    }

    pub fn record(&self, call: Call) {
        lock(&self.calls).push(call);
    }

    pub fn next(&self) -> u64 {
        self.next.fetch_add(1, Ordering::SeqCst) + 1
    }

    pub fn fail(&self, call: &'static str) {
        lock(&self.failing).push(call);
    }

    pub fn calls(&self) -> Vec<Call> {
        lock(&self.calls).clone()
    }

    pub fn device_calls(&self) -> Vec<Call> {
        self.calls().into_iter().filter(|call| !matches!(call, Call::Compile | Call::Free { .. })).collect()
    }

    pub fn compiles(&self) -> usize {
        self.calls().iter().filter(|call| **call == Call::Compile).count()
    }
}

pub struct Fake(pub Arc<Shared>);

impl Fake {
    pub fn new(free_waits: bool) -> (Fake, Arc<Shared>) {
        let shared = Arc::new(Shared { id: NEXT_FAKE.fetch_add(1, Ordering::SeqCst), free_waits, ..Shared::default() });
        (Fake(shared.clone()), shared)
    }
}

impl Driver for Fake {
    type Stream = u64;
    type Event = u64;
    type Module = u64;
    type Function = u64;

    const KIND: BackendKind = BackendKind::Cuda;

    fn info(&self) -> DeviceInfo {
        DeviceInfo {
            backend: BackendKind::Cuda,
            index: 0,
            name: "fake".into(),
            memory_bytes: None,
            software: true,
            max_buffer_bytes: 1 << 40,
            limits: crate::info::LaunchLimits::HOST,
        }
    }

    fn arch(&self) -> String {
        // Compiled images are cached per process by architecture: one per fake.
        format!("fake{}", self.0.id)
    }

    fn context_key(&self) -> Option<u64> {
        self.0.context
    }

    fn bind(&self) -> Result<()> {
        if std::thread::current().name() == Some(ISSUING_THREAD) {
            self.0.issuing_binds.fetch_add(1, Ordering::SeqCst);
        }
        self.0.loss.check()?;
        BOUND.with(|bound| bound.set(self.0.id));
        self.0.check("bind")
    }

    fn loss(&self) -> &Arc<Loss> {
        &self.0.loss
    }

    fn stream_create(&self) -> Result<u64> {
        self.0.check("stream_create").map(|()| self.0.next())
    }

    unsafe fn stream_synchronize(&self, _stream: u64) -> Status {
        let slow = lock(&self.0.slow_stream_sync).clone();
        if let Some(latch) = slow {
            latch.pass();
        }
        self.0.check("stream_synchronize")
    }

    unsafe fn stream_destroy(&self, _stream: u64) {
        let _ = self.0.check("stream_destroy");
    }

    fn event_create(&self, usage: EventUse) -> Result<u64> {
        self.0.check("event_create")?;
        self.0.events_created.fetch_add(1, Ordering::SeqCst);
        let event = self.0.next();
        if usage == EventUse::StreamOrder {
            lock(&self.0.light_events).push(event);
        }
        Ok(event)
    }

    unsafe fn event_record(&self, event: u64, stream: u64) -> Result<()> {
        self.0.check("event_record")?;
        lock(&self.0.event_records).push((event, stream));
        Ok(())
    }

    unsafe fn stream_wait_event(&self, stream: u64, event: u64) -> Result<()> {
        self.0.check("stream_wait_event")?;
        lock(&self.0.stream_waits).push((stream, event));
        Ok(())
    }

    unsafe fn event_synchronize(&self, event: u64) -> Status {
        self.0.event_syncs.fetch_add(1, Ordering::SeqCst);
        if lock(&self.0.light_events).contains(&event) {
            self.0.light_syncs.fetch_add(1, Ordering::SeqCst);
        }
        let slow = lock(&self.0.slow_sync).clone();
        if let Some(latch) = slow {
            latch.pass();
        }
        self.0.check("event_synchronize")
    }

    unsafe fn event_query(&self, _event: u64) -> Option<Result<bool>> {
        let reached = match self.0.queries.load(Ordering::SeqCst) {
            NO_QUERY => return None,
            REACHED_ON_WAKE_THREAD => std::thread::current().name() == Some("weir-wake"),
            NOT_REACHED => false,
            _ => true,
        };
        Some(self.0.check("event_query").map(|()| reached))
    }

    unsafe fn event_destroy(&self, _event: u64) {
        self.0.events_destroyed.fetch_add(1, Ordering::SeqCst);
        let _ = self.0.check("event_destroy");
    }

    fn alloc(&self, _bytes: u64) -> Result<u64> {
        self.0.check("alloc").map(|()| self.0.next() << 32)
    }

    unsafe fn free(&self, ptr: u64) {
        let _ = self.0.check("free");
        self.0.record(Call::Free { ptr, thread: std::thread::current().name().map(str::to_owned) });
    }

    fn free_waits_for_device(&self) -> bool {
        self.0.free_waits
    }

    fn host_alloc(&self, bytes: usize) -> Result<*mut u8> {
        self.0.check("host_alloc")?;
        let ptr = Box::into_raw(vec![0u8; bytes].into_boxed_slice()).cast::<u8>();
        lock(&self.0.host).insert(ptr as usize, bytes);
        Ok(ptr)
    }

    unsafe fn host_free(&self, ptr: *mut u8) {
        if let Some(len) = lock(&self.0.host).remove(&(ptr as usize)) {
            // SAFETY: `host_alloc` leaked exactly this boxed slice, freed once (removed above).
            drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr, len)) });
        }
    }

    unsafe fn memset_d8(&self, ptr: u64, _byte: u8, count: u64, _stream: u64) -> Result<()> {
        self.0.check("memset_d8")?;
        self.0.record(Call::Memset { ptr, count });
        Ok(())
    }

    unsafe fn memset_d32(&self, ptr: u64, _word: u32, count: u64, _stream: u64) -> Result<()> {
        self.0.check("memset_d32")?;
        self.0.record(Call::Memset { ptr, count: count * 4 });
        Ok(())
    }

    unsafe fn copy_h2d(&self, dst: u64, src: *const u8, len: u64, _stream: u64) -> Result<()> {
        self.0.check("copy_h2d")?;
        // SAFETY: the shared layer hands a staging buffer of at least `len` bytes.
        let bytes = unsafe { std::slice::from_raw_parts(src, len as usize) }.to_vec();
        self.0.record(Call::CopyH2D { dst, bytes });
        Ok(())
    }

    unsafe fn copy_d2h(&self, dst: *mut u8, src: u64, len: u64, _stream: u64) -> Result<()> {
        self.0.check("copy_d2h")?;
        // The fake device holds 7s everywhere; the copy "runs" at once.
        // SAFETY: the shared layer hands a staging buffer of at least `len` bytes.
        unsafe { std::ptr::write_bytes(dst, 7, len as usize) };
        self.0.record(Call::CopyD2H { src, len });
        Ok(())
    }

    unsafe fn copy_d2d(&self, dst: u64, src: u64, len: u64, _stream: u64) -> Result<()> {
        self.0.check("copy_d2d")?;
        self.0.record(Call::CopyD2D { dst, src, len });
        Ok(())
    }

    fn compile(&self, source: &str, _options: &[String], name_expression: Option<&str>) -> Result<Compiled> {
        self.0.record(Call::Compile);
        if source.contains("slow") {
            let slow = lock(&self.0.slow_compile).clone();
            if let Some((latch, started)) = slow {
                let _ = started.send(());
                latch.pass();
            }
        }
        // As NVRTC refuses an architecture newer than it knows: every source.
        if lock(&self.0.failing).contains(&"compile") {
            return Err(Error::invalid("cuda kernel does not compile (FAKE_ERROR): invalid option --gpu-architecture"));
        }
        if source.contains("broken") {
            return Err(Error::invalid("cuda kernel does not compile (FAKE_ERROR): error: broken is not CUDA"));
        }
        if let Some(name) = name_expression.filter(|name| name.contains("absent")) {
            return Err(Error::invalid(format!("cuda kernel does not compile (FAKE_ERROR): {name} is undefined")));
        }
        // The fake "lowers" a C++ name to the name itself, marked.
        let lowered = name_expression.map(|name| format!("lowered:{name}"));
        let image = source.as_bytes().iter().chain(lowered.iter().flat_map(|name| name.as_bytes())).copied().collect();
        Ok(Compiled { image, lowered })
    }

    fn module_load(&self, image: &[u8]) -> Result<u64> {
        self.0.check("module_load")?;
        let slow = lock(&self.0.slow_load).clone().filter(|_| String::from_utf8_lossy(image).contains("slow"));
        if let Some((latch, started)) = slow {
            let _ = started.send(());
            latch.pass();
        }
        let module = self.0.next();
        lock(&self.0.modules).insert(module, String::from_utf8_lossy(image).into_owned());
        Ok(module)
    }

    unsafe fn module_unload(&self, _module: u64) {
        let _ = self.0.check("module_unload");
    }

    unsafe fn function(&self, module: u64, entry: &CStr) -> Result<Option<u64>> {
        self.0.check("function")?;
        let entry = entry.to_string_lossy();
        match lock(&self.0.modules).get(&module) {
            Some(source) if source.contains(&*entry) => Ok(Some(self.0.next())),
            _ => Ok(None),
        }
    }

    unsafe fn param_sizes(&self, _function: u64, image: &[u8], entry: &str) -> Result<Option<Vec<usize>>> {
        let named = String::from_utf8_lossy(image).contains(entry);
        let from_image = || lock(&self.0.image_param_sizes).clone().filter(|_| named);
        Ok(lock(&self.0.param_sizes).clone().or_else(from_image))
    }

    unsafe fn launch(&self, launch: Launch<'_, Self>) -> Result<()> {
        let thread = std::thread::current().name().map(str::to_owned);
        let on_issuing_thread = thread.as_deref() == Some(ISSUING_THREAD);
        lock(&self.0.launched_on).push(thread);
        let slow = lock(&self.0.slow_issue).clone();
        if let Some(latch) = slow.filter(|_| on_issuing_thread) {
            latch.pass();
        }
        let takes = *lock(&self.0.launch_takes);
        if let Some(takes) = takes {
            std::thread::sleep(takes);
        }
        self.0.check("launch")?;
        // SAFETY: each pointer is to one 8-byte parameter slot (`Params`).
        let params = launch.params.iter().map(|&p| unsafe { p.cast::<u64>().read() }).collect();
        self.0.record(Call::Launch { function: launch.function, params });
        Ok(())
    }

    const GRAPHS: bool = true;

    unsafe fn capture(
        &self,
        _stream: u64,
        enqueue: &mut dyn FnMut() -> Result<(), EnqueueError>,
    ) -> Option<Result<GraphExec, EnqueueError>> {
        Some(enqueue().map(|()| {
            let exec = self.0.next() as usize;
            self.0.record(Call::Captured { exec });
            Handle(exec as *mut c_void)
        }))
    }

    unsafe fn graph_launch(&self, exec: GraphExec, _stream: u64) -> Result<()> {
        self.0.check("graph_launch")?;
        self.0.record(Call::GraphLaunch { exec: exec.0 as usize });
        Ok(())
    }

    unsafe fn graph_destroy(&self, exec: GraphExec) {
        self.0.record(Call::GraphDestroy { exec: exec.0 as usize });
    }

    unsafe fn add_callback(&self, _stream: u64, callback: Callback) -> Result<()> {
        self.0.check("add_callback")?;
        let run = |data: *mut c_void| {
            let data = data as usize;
            std::thread::spawn(move || {
                // SAFETY: `data` came from `pass_callback`, which this call accepted; run once.
                unsafe { callback_run(data as *mut c_void, Ok(())) }
            });
            Ok(())
        };
        // SAFETY: `run` hands `data` to one thread that runs it through
        // `callback_run` once, and always accepts it (spawning panics, not fails).
        unsafe { pass_callback(callback, run) }
    }

    #[cfg(feature = "test-support")]
    fn delay_ticks(&self, duration: Duration) -> u64 {
        duration.as_nanos() as u64
    }

    fn raw_stream(stream: u64) -> RawStream {
        RawStream::Fake(stream)
    }

    /// The ranks' fakes, and a count of the groups of calls enqueued.
    type Communicator = (Vec<u64>, AtomicU64);

    fn communicator(drivers: &[&Self]) -> Result<Self::Communicator> {
        for driver in drivers {
            driver.bind()?;
            driver.0.check("communicator")?;
        }
        Ok((drivers.iter().map(|driver| driver.0.id).collect(), AtomicU64::new(0)))
    }

    unsafe fn enqueue_collective(
        (ranks, groups): &Self::Communicator,
        _collective: &crate::collective::Collective,
        parts: &[RawPart<'_, Self>],
    ) -> Result<()> {
        if parts.iter().map(|part| part.driver.0.id).collect::<Vec<_>>() != *ranks {
            return Err(Error::internal("parts for another communicator"));
        }
        let group = groups.fetch_add(1, Ordering::SeqCst) + 1;
        for part in parts {
            part.driver.bind()?;
            part.driver.0.check("collective")?;
            part.driver.0.record(Call::Collective {
                group,
                stream: part.stream,
                send: part.send.ptr,
                receive: part.receive.ptr,
                bytes: part.receive.len,
            });
        }
        Ok(())
    }
}
