//! The few driver calls a GPU backend provides; everything else is shared.

use std::ffi::{c_void, CStr};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::error::{DriverStatus, Error, Result};
use crate::info::{BackendKind, DeviceInfo};
use crate::launch::Grid;
use crate::raw::RawStream;
use crate::rtc::Compiled;

/// A driver's elapsed milliseconds (a float, about half a microsecond fine) as a duration.
pub fn milliseconds(ms: f32) -> Duration {
    Duration::from_secs_f64(f64::from(ms.max(0.0)) / 1e3)
}

/// A failed driver status as an error carrying it: the device is lost when
/// `fatal` says the fault poisons the context (the driver then fails every
/// later call of it with the same status), a backend error otherwise.
pub fn status_error(backend: BackendKind, call: &str, name: String, code: i32, fatal: bool) -> Error {
    let message = format!("{call} failed: {name} ({code})");
    let status = Some(DriverStatus { call: call.to_owned(), name, code });
    if fatal {
        Error::DeviceLost { backend, message, status }
    } else {
        Error::Backend { backend, message, status }
    }
}

/// Whether a driver's context is lost. Once it is, [`Driver::bind`] fails
/// with the loss, so the owners' drops (which bind first) make no driver
/// call on handles that may have gone with the context, and no new work is
/// enqueued on it.
#[derive(Debug, Default)]
pub struct Loss(OnceLock<Error>);

impl Loss {
    /// Remembers `error` if it is a lost device; the first loss stays.
    pub fn record(&self, error: &Error) {
        if error.is_device_lost() {
            let _ = self.0.set(error.clone());
        }
    }

    /// The loss, once there is one.
    pub fn get(&self) -> Option<&Error> {
        self.0.get()
    }

    /// `Err` with the loss, once there is one.
    pub fn check(&self) -> Result<()> {
        self.0.get().map_or(Ok(()), |error| Err(error.clone()))
    }
}

/// A raw driver handle (stream, event, module, function, host pointer).
///
/// Driver handles are plain identifiers the driver accepts from any thread
/// once the device is bound there; the owners in this module decide when
/// they are destroyed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Handle<T: Copy>(pub T);

// SAFETY: only raw pointers are wrapped this way: driver handles (opaque
// pointers the driver itself synchronises) or pinned host pointers whose owner
// is the staging pool; none is dereferenced through `Handle` without that owner.
unsafe impl<T> Send for Handle<*mut T> {}
// SAFETY: as for `Send`; a shared `Handle` only hands out a copy of the pointer.
unsafe impl<T> Sync for Handle<*mut T> {}

/// A device pointer and the bytes behind it, as handed to external writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceBuffer {
    /// The device address (`CUdeviceptr`, or a HIP device pointer as an integer).
    pub ptr: u64,
    /// Bytes at `ptr` that belong to the buffer.
    pub len: u64,
}

/// An instantiated graph (`CUgraphExec`), opaque to the shared layer.
pub type GraphExec = Handle<*mut c_void>;

/// What the device reports back to a completion callback.
pub type Status = Result<()>;

/// Work to run once everything enqueued before it on a stream is done.
pub type Callback = Box<dyn FnOnce(Status) + Send>;

/// How an event is used: as a cross-stream dependency or a point a host
/// thread only queries ([`EventUse::StreamOrder`], the cheapest to record);
/// as a point a host thread blocks on ([`EventUse::HostWait`]: the thread
/// sleeps instead of spinning, and each record costs more, 1.4 µs against
/// 0.2 on an H100); or as a timestamp ([`EventUse::Timing`], the only use
/// that records a time, which costs the others' records).
// The engine's event pool is an array indexed by `usage as usize`: a new use grows it too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventUse {
    StreamOrder,
    HostWait,
    Timing,
}

/// The driver calls of one GPU API (CUDA or HIP), bound to one device.
///
/// Valid usage, for every `unsafe` method: handles passed in were made by
/// this driver and not yet destroyed; device pointers and lengths lie inside
/// live allocations of this driver; host pointers stay valid until the
/// stream has passed the call (the shared layer keeps them in its staging
/// pool until a completion says so). Every call assumes [`Driver::bind`] ran
/// on the calling thread.
pub trait Driver: Send + Sync + Sized + 'static {
    type Stream: Copy + Send + Sync;
    type Event: Copy + Send + Sync;
    type Module: Copy + Send + Sync;
    type Function: Copy + Send + Sync;

    /// Which backend it is (and so its kernels' language, [`BackendKind::kernel_language`]).
    const KIND: BackendKind;

    /// The device this driver is bound to.
    fn info(&self) -> DeviceInfo;
    /// Identifies the device's instruction set (cache key for compiled kernels).
    fn arch(&self) -> String;
    /// Names the driver context, where several drivers of the process can
    /// share it (CUDA's primary context of a device): they share its loaded
    /// modules. `None`: share nothing.
    fn context_key(&self) -> Option<u64> {
        None
    }
    /// Makes the device current on the calling thread; fails with the loss
    /// once the context is lost (see [`Loss`]).
    fn bind(&self) -> Result<()>;
    /// Whether this driver's context is lost.
    fn loss(&self) -> &Arc<Loss>;

    fn stream_create(&self) -> Result<Self::Stream>;
    /// # Safety
    /// The trait's valid usage (above).
    unsafe fn stream_synchronize(&self, stream: Self::Stream) -> Status;
    /// # Safety
    /// The trait's valid usage (above).
    unsafe fn stream_destroy(&self, stream: Self::Stream);

    fn event_create(&self, usage: EventUse) -> Result<Self::Event>;
    /// # Safety
    /// The trait's valid usage (above).
    unsafe fn event_record(&self, event: Self::Event, stream: Self::Stream) -> Result<()>;
    /// # Safety
    /// The trait's valid usage (above).
    unsafe fn stream_wait_event(&self, stream: Self::Stream, event: Self::Event) -> Result<()>;
    /// Blocks until the event's work is done; reports the device's error if any.
    ///
    /// # Safety
    /// The trait's valid usage (above).
    unsafe fn event_synchronize(&self, event: Self::Event) -> Status;
    /// True once all work enqueued on `stream` is done, without waiting;
    /// `None` where the driver cannot tell cheaply.
    ///
    /// # Safety
    /// The trait's valid usage (above).
    unsafe fn stream_query(&self, _stream: Self::Stream) -> Option<Result<bool>> {
        None
    }
    /// True once the event's work is done, without waiting; the device's
    /// error if any. `None` where the driver has no such query (the waiter
    /// then only blocks).
    ///
    /// # Safety
    /// The trait's valid usage (above).
    unsafe fn event_query(&self, _event: Self::Event) -> Option<Result<bool>> {
        None
    }
    /// # Safety
    /// The trait's valid usage (above).
    unsafe fn event_destroy(&self, event: Self::Event);
    /// Whether [`Driver::event_elapsed`] works here; the error says what is missing.
    fn can_time(&self) -> Result<()> {
        Err(Error::unsupported(Self::KIND, "timestamps"))
    }
    /// The device time from `start` to `end`, two [`EventUse::Timing`]
    /// events recorded in that order, both complete.
    ///
    /// # Safety
    /// The trait's valid usage (above).
    unsafe fn event_elapsed(&self, _start: Self::Event, _end: Self::Event) -> Result<Duration> {
        Err(Error::unsupported(Self::KIND, "timestamps"))
    }

    /// Device memory usable on every stream as soon as this returns.
    fn alloc(&self, bytes: u64) -> Result<u64>;
    /// # Safety
    /// The trait's valid usage (above).
    unsafe fn free(&self, ptr: u64);
    /// True when [`Driver::free`] waits for the whole device (`hipFree`):
    /// frees then run on a thread of their own, never the delivery thread.
    fn free_waits_for_device(&self) -> bool {
        false
    }
    /// Page-locked host memory, for asynchronous copies.
    fn host_alloc(&self, bytes: usize) -> Result<*mut u8>;
    /// # Safety
    /// The trait's valid usage (above).
    unsafe fn host_free(&self, ptr: *mut u8);

    /// # Safety
    /// The trait's valid usage (above).
    unsafe fn memset_d8(&self, ptr: u64, byte: u8, count: u64, stream: Self::Stream) -> Result<()>;
    /// # Safety
    /// The trait's valid usage (above).
    unsafe fn memset_d32(&self, ptr: u64, word: u32, count: u64, stream: Self::Stream) -> Result<()>;
    /// # Safety
    /// The trait's valid usage (above).
    unsafe fn copy_h2d(&self, dst: u64, src: *const u8, len: u64, stream: Self::Stream) -> Result<()>;
    /// # Safety
    /// The trait's valid usage (above).
    unsafe fn copy_d2h(&self, dst: *mut u8, src: u64, len: u64, stream: Self::Stream) -> Result<()>;
    /// # Safety
    /// The trait's valid usage (above).
    unsafe fn copy_d2d(&self, dst: u64, src: u64, len: u64, stream: Self::Stream) -> Result<()>;

    /// Compiles C++ source (CUDA, or HIP) for this device with `options`
    /// after the driver's own: NVRTC or hiprtc. With a `name_expression`
    /// (a kernel's C++ name), also the symbol it resolved to.
    fn compile(&self, source: &str, options: &[String], name_expression: Option<&str>) -> Result<Compiled>;
    fn module_load(&self, image: &[u8]) -> Result<Self::Module>;
    /// # Safety
    /// The trait's valid usage (above).
    unsafe fn module_unload(&self, module: Self::Module);
    /// The symbols of `module`'s kernels, where the driver can list them
    /// (`None` where it cannot).
    ///
    /// # Safety
    /// The trait's valid usage (above).
    unsafe fn kernel_symbols(&self, _module: Self::Module) -> Result<Option<Vec<String>>> {
        Ok(None)
    }
    /// Kernel `entry` of `module`; `None` if the module has none of that name.
    ///
    /// # Safety
    /// The trait's valid usage (above).
    unsafe fn function(&self, module: Self::Module, entry: &CStr) -> Result<Option<Self::Function>>;
    /// The byte size of each parameter of `function`, kernel `entry` of the
    /// compiled `image`, in order, where the driver can tell (`None` where it
    /// cannot): CUDA asks the loaded function, HIP reads the image.
    ///
    /// # Safety
    /// The trait's valid usage (above).
    unsafe fn param_sizes(&self, _function: Self::Function, _image: &[u8], _entry: &str) -> Result<Option<Vec<usize>>> {
        Ok(None)
    }
    /// Whether a stream of one device's driver may copy from another's
    /// memory and wait for its events (see `Backend::PEER_COPIES`).
    const PEER_COPIES: bool = false;
    /// Whether [`Driver::capture`] makes graphs.
    const GRAPHS: bool = false;
    /// Captures the work `enqueue` puts on `stream` (a stream used for
    /// nothing else) as an instantiated graph, launchable as one unit with
    /// [`Driver::graph_launch`]; `None` where the driver has no graphs.
    ///
    /// # Safety
    /// The trait's valid usage (above).
    unsafe fn capture(
        &self,
        _stream: Self::Stream,
        _enqueue: &mut dyn FnMut() -> Result<(), crate::enqueue::EnqueueError>,
    ) -> Option<Result<GraphExec, crate::enqueue::EnqueueError>> {
        None
    }
    /// Launches a graph [`Driver::capture`] made, on `stream`.
    ///
    /// # Safety
    /// The trait's valid usage (above).
    unsafe fn graph_launch(&self, _exec: GraphExec, _stream: Self::Stream) -> Result<()> {
        Err(Error::unsupported(Self::KIND, "graphs"))
    }
    /// Destroys a graph [`Driver::capture`] made; launches in flight finish first.
    ///
    /// # Safety
    /// The trait's valid usage (above).
    unsafe fn graph_destroy(&self, _exec: GraphExec) {}
    /// Enqueues a kernel launch on its stream.
    ///
    /// # Safety
    /// The trait's valid usage (above).
    unsafe fn launch(&self, launch: Launch<'_, Self>) -> Result<()>;

    /// Runs `callback` on the driver's callback thread once the stream gets
    /// there. The callback must not call the driver.
    ///
    /// # Safety
    /// The trait's valid usage (above).
    unsafe fn add_callback(&self, stream: Self::Stream, callback: Callback) -> Result<()>;

    /// The delay builtin's argument: `duration` in the device clock's ticks.
    #[cfg(feature = "test-support")]
    fn delay_ticks(&self, duration: Duration) -> u64;

    /// The stream as foreign code (an external op's closure, a library call) takes it.
    fn raw_stream(stream: Self::Stream) -> RawStream;

    /// A group's collective library state (NCCL communicators), made once
    /// per group by [`Driver::communicator`].
    type Communicator: Send + Sync + 'static;
    /// The communicator of a group of `drivers`, one rank each, in order.
    fn communicator(_drivers: &[&Self]) -> Result<Self::Communicator> {
        Err(Error::unsupported(Self::KIND, "collectives over a device group"))
    }
    /// The communicator of `driver` as rank `rank` of `ranks` ranks in
    /// several processes, met through `id`; see the engine's `Backend::joined_communicator`.
    fn joined_communicator(
        _driver: &Self,
        _id: &[u8; crate::collective::GROUP_ID_BYTES],
        _ranks: usize,
        _rank: usize,
    ) -> Result<Self::Communicator> {
        Err(Error::unsupported(Self::KIND, "groups whose ranks live in several processes"))
    }
    /// Enqueues every rank's part of `collective` on its stream, as one
    /// group of calls: each rank's part may wait on the device for the others'.
    ///
    /// # Safety
    /// Every part's pointers lie in live allocations of its driver, with the
    /// byte counts given; `parts` has one part per rank of `communicator`.
    unsafe fn enqueue_collective(
        _communicator: &Self::Communicator,
        collective: &crate::collective::Collective,
        _parts: &[RawPart<'_, Self>],
    ) -> Result<()> {
        Err(Error::unsupported(Self::KIND, format!("{} over a device group", collective.name())))
    }
}

/// One rank's part of a collective, as a driver enqueues it: device
/// addresses and byte counts.
pub struct RawPart<'a, D: Driver> {
    pub driver: &'a D,
    pub stream: D::Stream,
    /// The buffer the rank contributes; for in-place collectives its one buffer.
    pub send: DeviceBuffer,
    /// Where its result lands: `send` again for in-place collectives.
    pub receive: DeviceBuffer,
}

/// One kernel launch, as the shared layer hands it to [`Driver::launch`].
///
/// One value instead of four arguments, so that the parts of a launch are
/// spelled out once, here, rather than in the trait and again in each
/// backend's signature.
pub struct Launch<'a, D: Driver> {
    pub function: D::Function,
    pub grid: &'a Grid,
    pub stream: D::Stream,
    /// One pointer per kernel parameter, to that parameter's value.
    pub params: &'a mut [*mut c_void],
}

/// Writes, inside an `impl Driver` block, the methods that pass live handles
/// to one driver function and nothing more: each calls `$api::<function>`
/// and turns its status into a `Result` with `$check`, naming the function.
///
/// `add_callback` also names the backend's trampoline, which must hand its
/// user data to [`callback_run`].
///
/// CUDA and HIP take the same arguments in these calls and differ only in the
/// functions' names, so the wrappers, and the reasons they are sound, are
/// written once, here. A backend names its functions and writes out only the
/// calls whose arguments, flags or errors differ.
#[cfg(any(feature = "cuda", feature = "hip"))]
macro_rules! handle_calls {
    (
        calls: $api:ident, check: $check:ident;
        event_record: $event_record:ident,
        stream_wait_event: $stream_wait_event:ident,
        event_synchronize: $event_synchronize:ident,
        stream_synchronize: $stream_synchronize:ident,
        add_callback: $add_callback:ident($trampoline:expr),
        stream_destroy: $stream_destroy:ident,
        event_destroy: $event_destroy:ident,
        module_unload: $module_unload:ident $(,)?
    ) => {
        /// # Safety
        /// The trait's valid usage (above).
        unsafe fn event_record(&self, event: Self::Event, stream: Self::Stream) -> $crate::error::Result<()> {
            // SAFETY: live handles (trait contract).
            $check(stringify!($event_record), unsafe { $api::$event_record(event.0, stream.0) })
        }

        /// # Safety
        /// The trait's valid usage (above).
        unsafe fn stream_wait_event(&self, stream: Self::Stream, event: Self::Event) -> $crate::error::Result<()> {
            // SAFETY: live handles (trait contract).
            $check(stringify!($stream_wait_event), unsafe { $api::$stream_wait_event(stream.0, event.0, 0) })
        }

        /// # Safety
        /// The trait's valid usage (above).
        unsafe fn event_synchronize(&self, event: Self::Event) -> $crate::driver::Status {
            // SAFETY: a live event (trait contract).
            $check(stringify!($event_synchronize), unsafe { $api::$event_synchronize(event.0) })
        }

        /// # Safety
        /// The trait's valid usage (above).
        unsafe fn stream_synchronize(&self, stream: Self::Stream) -> $crate::driver::Status {
            // SAFETY: a live stream (trait contract).
            $check(stringify!($stream_synchronize), unsafe { $api::$stream_synchronize(stream.0) })
        }

        /// # Safety
        /// The trait's valid usage (above).
        unsafe fn add_callback(
            &self,
            stream: Self::Stream,
            callback: $crate::driver::Callback,
        ) -> $crate::error::Result<()> {
            // SAFETY: a live stream (trait contract); the driver hands `data` to
            // the trampoline, which runs it through `callback_run`, once if it
            // accepts the call and never if it fails, as `pass_callback` requires.
            unsafe {
                $crate::driver::pass_callback(callback, |data| {
                    $check(stringify!($add_callback), $api::$add_callback(stream.0, Some($trampoline), data, 0))
                })
            }
        }

        /// # Safety
        /// The trait's valid usage (above).
        unsafe fn stream_destroy(&self, stream: Self::Stream) {
            // SAFETY: a live stream, destroyed once by its owner (trait contract).
            let _ = unsafe { $api::$stream_destroy(stream.0) };
        }

        /// # Safety
        /// The trait's valid usage (above).
        unsafe fn event_destroy(&self, event: Self::Event) {
            // SAFETY: a live event, destroyed once by its owner (trait contract).
            let _ = unsafe { $api::$event_destroy(event.0) };
        }

        /// # Safety
        /// The trait's valid usage (above).
        unsafe fn module_unload(&self, module: Self::Module) {
            // SAFETY: a loaded module, unloaded once (trait contract).
            let _ = unsafe { $api::$module_unload(module.0) };
        }
    };
}
#[cfg(any(feature = "cuda", feature = "hip"))]
pub(crate) use handle_calls;

/// Hands `callback` to a driver's add-callback call, which `add` makes, as
/// the `void*` user data the driver carries to its trampoline.
///
/// Who frees the callback depends on the driver's answer, so that is decided
/// once, here: accepted, the trampoline runs and frees it through
/// [`callback_run`]; refused, it is freed here without running.
///
/// # Safety
/// `add` passes `data` to a driver call that, when it succeeds, hands `data`
/// to a trampoline calling [`callback_run`] exactly once, and when it fails
/// never uses `data`.
pub unsafe fn pass_callback(callback: Callback, add: impl FnOnce(*mut c_void) -> Result<()>) -> Result<()> {
    let data = Box::into_raw(Box::new(callback)).cast::<c_void>();
    let added = add(data);
    if added.is_err() {
        // SAFETY: the driver refused `data` (this function's contract), so no
        // trampoline will reclaim the leaked box: this is its only reclaim.
        drop(unsafe { Box::from_raw(data.cast::<Callback>()) });
    }
    added
}

/// Runs (and frees) a callback from its user data.
///
/// # Safety
/// `data` came from [`pass_callback`], whose driver call succeeded, and is
/// used exactly once.
pub unsafe fn callback_run(data: *mut c_void, status: Status) {
    // SAFETY: per this function's contract, `data` is a leaked `Box<Callback>`
    // not yet reclaimed.
    let callback = unsafe { Box::from_raw(data.cast::<Callback>()) };
    // A panic must not unwind into the driver's thread.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || callback(status)));
}
