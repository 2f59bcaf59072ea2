//! The conformance harness: every test runs on every backend compiled in.
//!
//! An unavailable backend is reported as skipped, by name, unless it is listed
//! in `WEIR_REQUIRE_BACKENDS` (a comma list), which turns it into a failure.
//! After each test body the harness checks that nothing leaked: no live
//! backend events, fences or waiters.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::Wake;
use std::time::{Duration, Instant};

use weir_core::{BackendKind, Error, Hold, RawAccess, Runtime, Stream};

/// Backends listed in `WEIR_REQUIRE_BACKENDS`.
pub fn required_backends() -> Vec<BackendKind> {
    std::env::var("WEIR_REQUIRE_BACKENDS")
        .unwrap_or_default()
        .split(',')
        .filter(|name| !name.trim().is_empty())
        .map(|name| {
            BackendKind::from_name(name)
                .unwrap_or_else(|| panic!("WEIR_REQUIRE_BACKENDS names unknown backend {name:?}"))
        })
        .collect()
}

/// Opens `kind`, or says why it was skipped. Panics if it is required and unavailable.
pub fn open(kind: BackendKind) -> Option<Runtime> {
    match Runtime::open(kind) {
        Ok(runtime) => Some(runtime),
        Err(error @ Error::Unavailable { .. }) => {
            assert!(!required_backends().contains(&kind), "required backend {} is unavailable: {error}", kind.name());
            None
        }
        Err(other) => panic!("opening {} failed with an unexpected error: {other}", kind.name()),
    }
}

/// Cases that time a held stream against what happens beside it. On CUDA every
/// runtime of the process shares the device's primary context, and another
/// test's module load or free synchronises that context: it would stall these
/// cases' driver calls for as long as their hold lasts. They run alone there.
const TIMED_ON_A_SHARED_CONTEXT: &[&str] = &[
    "a_panicking_waker_leaves_the_runtime_working",
    "is_synced_says_yes_only_when_sync_would_succeed_at_once_and_takes_no_failure",
    "ten_thousand_fences_of_a_held_stream_register_their_waiters_and_all_wake",
    "a_stream_fence_covers_every_read_admitted_before_it",
    "concurrent_close_callers_all_wait_for_the_work",
    "dropping_a_buffer_in_use_by_held_work_is_safe",
    "dropping_the_last_handle_never_waits_for_device_work",
    "fence_future_dropped_mid_wait_leaks_nothing",
    "fence_is_waited_many_times_from_threads_and_tasks",
];

/// Other CUDA cases share the context; a timed one has it to itself.
static CUDA_CONTEXT: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// Runs `body` on `kind` if it is available, then checks that nothing leaked.
/// The [`conformance!`] macro makes one test of this per backend.
pub fn on_backend(kind: BackendKind, test: &str, body: fn(&Runtime)) {
    let (cuda, timed) = (kind == BackendKind::Cuda, TIMED_ON_A_SHARED_CONTEXT.contains(&test));
    let _alone = (cuda && timed).then(|| CUDA_CONTEXT.write().unwrap_or_else(|poisoned| poisoned.into_inner()));
    let _shared = (cuda && !timed).then(|| CUDA_CONTEXT.read().unwrap_or_else(|poisoned| poisoned.into_inner()));
    let Some(runtime) = open(kind) else {
        eprintln!("[{test}] {}: skipped (unavailable)", kind.name());
        return;
    };
    eprintln!("[{test}] {}: running on {}", kind.name(), runtime.info().name);
    body(&runtime);
    assert_no_leaks(&runtime);
    runtime.close().expect("close");
}

/// Diagnostics once retirements and frees already due have run. One signalled
/// before a fence may complete just after it (wgpu completes signals from
/// callbacks), and a retired wgpu lane goes once it has issued everything:
/// each gets a moment, not forever.
pub fn settled_diagnostics(runtime: &Runtime) -> weir_core::Diagnostics {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let mut d = runtime.diagnostics();
    let unsettled = |d: &weir_core::Diagnostics| {
        d.retiring_streams > 0
            || d.retiring_buffers > 0
            || d.backend.live_streams > d.live_streams
            || d.ops_in_queue > 0
            || d.host_bytes_in_queue > 0
    };
    while unsettled(&d) && std::time::Instant::now() < deadline {
        std::thread::yield_now();
        d = runtime.diagnostics();
    }
    d
}

/// Waits for all work, then asserts no live events, fences or waiters remain.
pub fn assert_no_leaks(runtime: &Runtime) {
    // Failed ops report their error here; leaks are what this checks.
    let _ = runtime.fence().and_then(|fence| fence.wait());
    let d = settled_diagnostics(runtime);
    assert_eq!(d.backend.live_events, 0, "live backend events leaked: {d:?}");
    assert_eq!(d.live_fences, 0, "fences leaked: {d:?}");
    assert_eq!(d.live_waiters, 0, "waiters leaked: {d:?}");
    assert_eq!(d.backend.race_violations, 0, "the race detector fired: {d:?}");
    // Every queued op's share of the queue came back once it left the queue.
    assert_eq!((d.ops_in_queue, d.host_bytes_in_queue), (0, 0), "queue shares never given back: {d:?}");
    // Every stream the test made and dropped has retired: only the default stream is left.
    assert_eq!(d.live_streams, 1, "streams left alive: {d:?}");
    assert_eq!(d.backend.live_streams, 1, "backend streams left behind: {d:?}");
    assert_eq!(d.retiring_streams, 0, "streams still retiring after the fence: {d:?}");
}

/// Returns once `count` waits (blocked threads, registered wakers) are pending.
pub fn wait_for_waiters(runtime: &Runtime, count: u64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while runtime.diagnostics().live_waiters < count {
        assert!(std::time::Instant::now() < deadline, "the waits never started: {:?}", runtime.diagnostics());
        std::thread::yield_now();
    }
}

/// A waker that counts its wake-ups.
#[derive(Default)]
pub struct CountingWaker(pub AtomicUsize);

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Holds a stream back: a gate where the backend has them (deterministic),
/// otherwise a long device-side delay.
pub struct Held(Option<Hold>);

/// Long enough that a test thread is not stalled past it by a busy machine
/// alone (loading modules can pause the device). One stall can last as long
/// as the delay itself: see [`Held::ran_out`].
pub const HOLD_DELAY: Duration = Duration::from_millis(1500);

pub fn hold(stream: &Stream) -> Held {
    match stream.hold() {
        Ok(gate) => Held(Some(gate)),
        Err(Error::Unsupported { .. }) => {
            stream.delay(HOLD_DELAY).expect("delay");
            Held(None)
        }
        Err(other) => panic!("hold failed: {other}"),
    }
}

impl Held {
    /// True when the hold is a gate that only `release` opens.
    pub fn is_gate(&self) -> bool {
        self.0.is_some()
    }

    pub fn release(self) {}

    /// True when the hold, made at `held_at`, is a delay that has run out:
    /// then a check that the stream is still held cannot be made. It happens
    /// on CUDA: a driver call of this thread can wait behind another test's
    /// call that synchronises the shared context, which waits for this very
    /// delay, so the thread stalls as long as the delay. A gate never runs out.
    pub fn ran_out(&self, held_at: Instant) -> bool {
        !self.is_gate() && held_at.elapsed() >= HOLD_DELAY
    }
}

/// Runs `attempt` until it answers, three times at most: `None` says a
/// hold ran out before the attempt could see its stream held (see
/// [`Held::ran_out`]).
pub fn retried<T>(mut attempt: impl FnMut() -> Option<T>) -> T {
    for round in 1..=3 {
        if let Some(answer) = attempt() {
            return answer;
        }
        eprintln!("attempt {round}: the thread stalled until the hold's delay ran out");
    }
    panic!("the thread stalled until the hold's delay ran out, three times")
}

/// Fills every byte of the given buffers with `value` through the backend's
/// raw handles, as foreign code would.
pub fn raw_fill(raw: RawAccess<'_>, value: u8) -> weir_core::Result<()> {
    match raw {
        RawAccess::Cpu(cpu) => {
            cpu.enqueue(move |buffers| {
                for index in 0..buffers.buffer_count() {
                    buffers.bytes_mut(index)?.fill(value);
                }
                Ok(())
            });
            Ok(())
        }
        #[cfg(feature = "wgpu")]
        RawAccess::Wgpu(gpu) => {
            use weir_core::backend::wgpu::wgpu;
            for range in gpu.buffers().to_vec() {
                // Its own bytes only: small buffers share a wgpu buffer.
                let size = range.len.div_ceil(4) * 4;
                let source = gpu.device().create_buffer(&wgpu::BufferDescriptor {
                    label: Some("raw fill"),
                    size,
                    usage: wgpu::BufferUsages::COPY_SRC,
                    mapped_at_creation: true,
                });
                source
                    .get_mapped_range_mut(..)
                    .map_err(|e| Error::InvalidArgument(format!("raw fill: {e}")))?
                    .slice(..)
                    .fill(value);
                source.unmap();
                gpu.encoder().copy_buffer_to_buffer(&source, 0, &range.buffer, range.offset, size);
            }
            Ok(())
        }
        #[cfg(feature = "cuda")]
        RawAccess::Cuda { stream, buffers } => {
            use weir_core::backend::cuda::cudarc::driver::sys as cu;
            for buffer in buffers {
                // SAFETY: the pointer and length are the admitted buffer's, the stream the admitted one.
                let result = unsafe { cu::cuMemsetD8Async(buffer.ptr, value, buffer.len as usize, stream) };
                if result != cu::CUresult::CUDA_SUCCESS {
                    return Err(Error::InvalidArgument(format!("cuMemsetD8Async: {result:?}")));
                }
            }
            Ok(())
        }
        #[cfg(feature = "hip")]
        RawAccess::Hip { stream, buffers } => {
            use weir_core::backend::hip::hip_sys::hiprt as hip;
            for buffer in buffers {
                // SAFETY: the pointer and length are the admitted buffer's, the stream the admitted one.
                let result =
                    unsafe { hip::hipMemsetAsync(buffer.ptr as *mut _, i32::from(value), buffer.len as usize, stream) };
                if result != hip::hipError_t::hipSuccess {
                    return Err(Error::InvalidArgument(format!("hipMemsetAsync: {result:?}")));
                }
            }
            Ok(())
        }
        #[allow(unreachable_patterns)]
        _ => Err(Error::InvalidArgument("no raw fill for this backend in the tests".into())),
    }
}

/// A small deterministic generator (xorshift64*), so runs are reproducible by seed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Bytes as little-endian u32 words.
pub fn words(bytes: &[u8]) -> Vec<u32> {
    bytes.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}
