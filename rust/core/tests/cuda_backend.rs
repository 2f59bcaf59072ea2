//! The CUDA backend against the scheduling contract, on a real device.
//!
//! Every test opens CUDA; where it is unavailable the test reports itself
//! skipped by name, unless `WEIR_REQUIRE_BACKENDS` lists `cuda`. Every test
//! ends by checking that no CUDA event outlived its work.
#![cfg(feature = "cuda")]

use std::future::Future;
use std::sync::{mpsc, Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::thread;
use std::time::{Duration, Instant};

use weir_core::backend::cuda::cudarc::driver::sys as cu;
use weir_core::{Arg, BackendKind, ElementType, Error, Fault, Grid, Kernel, RawAccess, Runtime, Stream};

/// Long enough that a reader not ordered after the producer reads first.
const HOLD: Duration = Duration::from_millis(300);

fn required() -> bool {
    std::env::var("WEIR_REQUIRE_BACKENDS")
        .map(|list| list.split(',').any(|name| name.trim() == "cuda"))
        .unwrap_or(false)
}

/// Every runtime in this process shares device 0's primary context, so a call
/// that synchronises the context (opening a runtime and loading its kernels,
/// a module load, growing page-locked staging) waits for every other test's
/// work, and can hold up that test's own driver calls meanwhile. Tests that
/// time a held stream therefore run alone; the others share the device.
static DEVICE: RwLock<()> = RwLock::new(());

/// An open runtime, with this test's turn on the device.
struct Opened {
    runtime: Runtime,
    _turn: Turn,
}

enum Turn {
    Shared(#[allow(dead_code)] RwLockReadGuard<'static, ()>),
    Alone(#[allow(dead_code)] RwLockWriteGuard<'static, ()>),
}

impl std::ops::Deref for Opened {
    type Target = Runtime;
    fn deref(&self) -> &Runtime {
        &self.runtime
    }
}

/// Opens CUDA for `test`, beside other tests.
fn open(test: &str, fault: Option<Fault>) -> Option<Opened> {
    let turn = Turn::Shared(DEVICE.read().unwrap_or_else(|poisoned| poisoned.into_inner()));
    open_runtime(test, fault).map(|runtime| Opened { runtime, _turn: turn })
}

/// Opens CUDA for `test`, which times a held stream: no other test runs meanwhile.
fn open_alone(test: &str, fault: Option<Fault>) -> Option<Opened> {
    let turn = Turn::Alone(DEVICE.write().unwrap_or_else(|poisoned| poisoned.into_inner()));
    open_runtime(test, fault).map(|runtime| Opened { runtime, _turn: turn })
}

fn open_runtime(test: &str, fault: Option<Fault>) -> Option<Runtime> {
    let opened = match fault {
        Some(fault) => Runtime::builder(BackendKind::Cuda).fault(fault).open(),
        None => Runtime::open(BackendKind::Cuda),
    };
    match opened {
        Ok(runtime) => Some(runtime),
        Err(Error::Unavailable { reason, .. }) if !required() => {
            eprintln!("skipped: {test}: cuda unavailable: {reason}");
            None
        }
        Err(error) => panic!("{test}: cannot open cuda: {error}"),
    }
}

/// No CUDA event may outlive the work it tracked.
fn assert_no_live_events(runtime: &Runtime) {
    runtime.fence().unwrap().wait().unwrap();
    assert_eq!(runtime.diagnostics().backend.live_events, 0);
}

fn put_kernel() -> Kernel {
    Kernel::custom("put")
        .cuda(
            r#"extern "C" __global__ void put(unsigned int* out, unsigned int value, unsigned int n) {
                unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
                if (i < n) out[i] = value;
            }"#,
            "put",
        )
        .build()
}

#[test]
fn opening_without_a_driver_is_unavailable_not_a_panic() {
    // SAFETY: only tries to load the library.
    let driver_present = unsafe { cu::is_culib_present() };
    match Runtime::open(BackendKind::Cuda) {
        Ok(runtime) => {
            assert!(driver_present);
            assert_eq!(runtime.info().backend, BackendKind::Cuda);
        }
        Err(Error::Unavailable { backend, reason }) => {
            assert_eq!(backend, BackendKind::Cuda);
            if !driver_present {
                assert!(reason.contains("libcuda"), "reason: {reason}");
            }
            assert!(!required(), "cuda is required but unavailable: {reason}");
        }
        Err(other) => panic!("opening cuda must succeed or be Unavailable, got {other}"),
    }
}

#[test]
fn zeros_are_exact_zero_on_the_same_and_another_stream_without_host_data() {
    let Some(runtime) = open("zeros_exact", None) else {
        return;
    };
    let (s, t) = (runtime.default_stream(), runtime.new_stream().unwrap());
    // Warm the read path so its staging buffer exists before counting.
    let _ = s.read(&s.upload(&[1u8; 64]).unwrap()).unwrap();
    let before = runtime.diagnostics().backend;
    let len = 3 * 1024 * 1024 + 3; // not a multiple of 4: the byte memset path too
    let a = s.zeros(ElementType::Bytes, len).unwrap();
    let b = s.zeros(ElementType::Bytes, 1 << 20).unwrap();
    let after = runtime.diagnostics().backend;
    assert_eq!(after.host_to_device_copies, before.host_to_device_copies);
    assert_eq!(after.host_staging_buffers, before.host_staging_buffers);
    assert_eq!(after.device_to_host_copies, before.device_to_host_copies);
    assert!(s.read(&a).unwrap().iter().all(|&x| x == 0));
    assert!(t.read(&b).unwrap().iter().all(|&x| x == 0));
    assert!(t.read(&a).unwrap().iter().all(|&x| x == 0));
    assert_no_live_events(&runtime);
}

#[test]
fn builtins_compute_what_the_cpu_computes() {
    let Some(runtime) = open("builtins", None) else {
        return;
    };
    let s = runtime.default_stream();
    let n = 100_003usize;
    let x: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
    let y: Vec<f32> = (0..n).map(|i| 3.0 - i as f32).collect();
    let (bx, by) = (s.upload(&x).unwrap(), s.upload(&y).unwrap());
    let out = s.empty(ElementType::Bytes, 4 * n as u64).unwrap();
    s.add(&bx, &by, &out).unwrap();
    let sum: Vec<f32> = s.read_as(&out).unwrap();
    assert!(sum.iter().zip(x.iter().zip(&y)).all(|(o, (a, b))| *o == a + b));
    s.mul(&bx, &by, &out).unwrap();
    let product: Vec<f32> = s.read_as(&out).unwrap();
    assert!(product.iter().zip(x.iter().zip(&y)).all(|(o, (a, b))| *o == a * b));
    s.scale(&bx, 2.0, &out).unwrap();
    let scaled: Vec<f32> = s.read_as(&out).unwrap();
    assert!(scaled.iter().zip(&x).all(|(o, a)| *o == 2.0 * a));
    s.axpy(2.0, &bx, &by).unwrap();
    let axpy: Vec<f32> = s.read_as(&by).unwrap();
    assert!(axpy.iter().zip(x.iter().zip(&y)).all(|(o, (a, b))| *o == 2.0 * a + b));
    s.iota(&out, 7).unwrap();
    let iota: Vec<u32> = s.read_as(&out).unwrap();
    assert!(iota.iter().enumerate().all(|(i, v)| *v == 7 + i as u32));
    s.fill_f32(&out, -1.5).unwrap();
    let filled: Vec<f32> = s.read_as(&out).unwrap();
    assert!(filled.iter().all(|v| *v == -1.5));
    let copy = s.empty(ElementType::Bytes, 4 * n as u64).unwrap();
    s.copy(&bx, &copy).unwrap();
    assert_eq!(s.read_as::<f32>(&copy).unwrap(), x);
    assert_no_live_events(&runtime);
}

#[test]
fn delay_holds_the_device_stream_without_holding_the_caller() {
    let Some(runtime) = open_alone("delay", None) else {
        return;
    };
    let s = runtime.default_stream();
    s.delay(Duration::ZERO).unwrap(); // compile outside the timing
    s.fence().unwrap().wait().unwrap();
    let start = Instant::now();
    s.delay(HOLD).unwrap();
    let fence = s.fence().unwrap();
    let admitted = start.elapsed();
    assert!(!fence.is_complete());
    fence.wait().unwrap();
    let held = start.elapsed();
    assert!(admitted < Duration::from_millis(50), "admission took {admitted:?}");
    assert!(held >= HOLD, "the stream was held only {held:?}");
    assert!(held < HOLD * 4, "the stream was held {held:?}");
    assert_no_live_events(&runtime);
}

/// The producer that the race test holds behind a delay.
#[derive(Clone, Copy, Debug)]
enum Producer {
    Kernel,
    MemsetZero,
    ExternalWrite,
}

impl Producer {
    /// What the buffer holds after the producer ran, per u32 word.
    fn produced(self) -> u32 {
        match self {
            Producer::Kernel => 0x1234_5678,
            Producer::MemsetZero => 0,
            Producer::ExternalWrite => 0x5A5A_5A5A,
        }
    }

    fn produce(self, s: &Stream, out: &weir_core::Buffer) {
        match self {
            Producer::Kernel => {
                let n = (out.size_bytes() / 4) as u32;
                s.execute(
                    &put_kernel(),
                    Grid::linear(n, 256),
                    &[Arg::write(out), Arg::u32(self.produced()), Arg::u32(n)],
                )
                .unwrap();
            }
            Producer::MemsetZero => s.memset_zero(out).unwrap(),
            Producer::ExternalWrite => s
                .external_write(&[out], |raw| match raw {
                    RawAccess::Cuda { stream, buffers } => {
                        // SAFETY: the pointer and length are the buffer's, and the
                        // stream is the admitted one; the memset is ordered in it.
                        let result =
                            unsafe { cu::cuMemsetD8Async(buffers[0].ptr, 0x5A, buffers[0].len as usize, stream) };
                        assert_eq!(result, cu::CUresult::CUDA_SUCCESS);
                        Ok(())
                    }
                    _ => panic!("a CUDA runtime hands out CUDA raw access"),
                })
                .unwrap(),
        }
    }
}

/// The seed's race: thread A makes `out` on s; thread B synchronises t with
/// s through an unrelated buffer; A then produces `out` behind a delay that
/// really holds s; B reads `out` on t. Returns what B read.
fn race(runtime: &Runtime, producer: Producer) -> Vec<u32> {
    let s = runtime.default_stream();
    let t = runtime.new_stream().unwrap();
    let words = 1 << 16;
    // Compiling and loading a kernel, and growing the page-locked staging
    // pool, synchronise the whole device: do both before anything is held.
    let scratch = s.empty(ElementType::Bytes, 4 * words as u64).unwrap();
    Producer::Kernel.produce(&s, &scratch);
    let _ = t.read(&scratch).unwrap();
    let out = s.upload(&vec![0xFFFF_FFFFu32; words]).unwrap();
    let unrelated = s.upload(&vec![1u32; words]).unwrap();
    // Channels, not a barrier: a reader that fails fails the test, not hangs it.
    let (synced, on_synced) = mpsc::channel();
    let (produced, on_produced) = mpsc::channel::<()>();
    let reader = {
        let (t, out) = (t.clone(), out.clone());
        thread::spawn(move || {
            // B: t sees s past `out`'s allocation and first write.
            let copy = t.empty(unrelated.element_type(), unrelated.len()).unwrap();
            t.copy(&unrelated, &copy).unwrap();
            synced.send(()).unwrap();
            on_produced.recv().unwrap();
            t.read_as::<u32>(&out).unwrap()
        })
    };
    on_synced.recv_timeout(Duration::from_secs(30)).expect("the reader failed before its pre-sync");
    s.delay(HOLD).unwrap();
    producer.produce(&s, &out);
    produced.send(()).unwrap();
    let read = reader.join().unwrap();
    assert_no_live_events(runtime);
    read
}

#[test]
fn reader_on_another_stream_waits_for_a_delayed_producer() {
    let Some(runtime) = open_alone("race", None) else {
        return;
    };
    for producer in [Producer::Kernel, Producer::MemsetZero, Producer::ExternalWrite] {
        let read = race(&runtime, producer);
        assert!(read.iter().all(|&w| w == producer.produced()), "{producer:?}: the reader saw {:#x}", read[0]);
    }
}

#[test]
fn the_race_test_catches_the_write_cursor_bug_on_cuda() {
    let Some(runtime) = open_alone("race_fault", Some(Fault::KeyVersionsAtAllocation)) else {
        return;
    };
    // With versions keyed at allocation, the reader skips the wait and reads
    // before the held producer ran: proof that the delay holds the GPU stream.
    // A device-wide synchronisation (a module load, a page-locked allocation)
    // can release the hold early; this test runs alone, but the race still
    // gets three chances.
    let caught = (0..3).any(|_| race(&runtime, Producer::Kernel).iter().all(|&w| w == 0xFFFF_FFFF));
    assert!(caught, "the reader never overtook the held producer");
}

#[test]
fn one_fence_is_waited_by_many_threads_and_futures_and_dropped_mid_wait() {
    let Some(runtime) = open("fence_multi_wait", None) else {
        return;
    };
    let s = runtime.default_stream();
    s.delay(HOLD / 3).unwrap();
    let fence = Arc::new(s.fence().unwrap());
    let waiters: Vec<_> = (0..4)
        .map(|i| {
            let fence = fence.clone();
            thread::spawn(
                move || {
                    if i % 2 == 0 {
                        fence.wait()
                    } else {
                        futures::executor::block_on(fence.wait_async())
                    }
                },
            )
        })
        .collect();
    // A future polled once, then dropped while the work is still running
    // (unless another test's device-wide synchronisation finished it first).
    let mut abandoned = Box::pin(fence.wait_async());
    let waker = futures::task::noop_waker();
    let mut cx = std::task::Context::from_waker(&waker);
    if abandoned.as_mut().poll(&mut cx).is_pending() {
        assert!(runtime.diagnostics().live_waiters >= 1);
    }
    drop(abandoned);
    for waiter in waiters {
        waiter.join().unwrap().unwrap();
    }
    assert!(fence.is_complete());
    fence.wait().unwrap();
    futures::executor::block_on(fence.wait_async()).unwrap();
    drop(fence);
    let diagnostics = runtime.diagnostics();
    assert_eq!(diagnostics.live_waiters, 0);
    assert_eq!(diagnostics.live_fences, 0);
    assert_no_live_events(&runtime);
}

#[test]
fn dropping_a_fence_and_buffers_while_the_device_runs_leaks_nothing() {
    let Some(runtime) = open("drop_mid_flight", None) else {
        return;
    };
    let s = runtime.default_stream();
    let t = runtime.new_stream().unwrap();
    let a = s.zeros(ElementType::Bytes, 1 << 20).unwrap();
    s.delay(HOLD / 3).unwrap();
    let b = t.empty(ElementType::Bytes, 1 << 20).unwrap();
    t.copy(&a, &b).unwrap();
    drop(t.fence().unwrap());
    drop((a, b));
    assert_no_live_events(&runtime);
    let fresh = s.zeros(ElementType::Bytes, 16).unwrap(); // frees what finished
    drop(fresh);
    runtime.fence().unwrap().wait().unwrap();
    let _sweep = s.zeros(ElementType::Bytes, 16).unwrap();
    let diagnostics = runtime.diagnostics();
    assert_eq!(diagnostics.retiring_buffers, 0);
    assert_eq!(diagnostics.backend.live_allocations, 1);
}

#[test]
fn cross_stream_pipeline_inserts_exactly_the_needed_waits() {
    let Some(runtime) = open("pipeline_waits", None) else {
        return;
    };
    let (s, t) = (runtime.default_stream(), runtime.new_stream().unwrap());
    let x = s.upload(&vec![1.0f32; 4096]).unwrap();
    let y = t.empty(ElementType::Bytes, 4 * 4096).unwrap();
    let before = runtime.diagnostics().inserted_waits;
    for round in 0..10 {
        s.fill_f32(&x, round as f32).unwrap(); // s writes x (after t's read of the last round)
        t.scale(&x, 2.0, &y).unwrap(); // t reads x: waits for s
    }
    let waits = runtime.diagnostics().inserted_waits - before;
    // Round 0: t waits for s. Every later round: s waits for t's read, t for s's write.
    assert_eq!(waits, 1 + 2 * 9);
    assert_eq!(t.read_as::<f32>(&y).unwrap(), vec![18.0f32; 4096]);
    assert_no_live_events(&runtime);
}

#[test]
fn custom_kernel_uses_its_grid_and_dynamic_shared_memory() {
    let Some(runtime) = open("custom_kernel", None) else {
        return;
    };
    let s = runtime.default_stream();
    let kernel = Kernel::custom("block_sums")
        .cuda(
            r#"extern "C" __global__ void block_sums(const unsigned int* in, unsigned int* out) {
                extern __shared__ unsigned int partial[];
                unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
                partial[threadIdx.x] = in[i];
                __syncthreads();
                if (threadIdx.x == 0) {
                    unsigned int sum = 0;
                    for (unsigned int k = 0; k < blockDim.x; ++k) sum += partial[k];
                    out[blockIdx.x] = sum;
                }
            }"#,
            "block_sums",
        )
        .build();
    let groups = 64u32;
    let block = 128u32;
    let input: Vec<u32> = (0..groups * block).collect();
    let inb = s.upload(&input).unwrap();
    let out = s.empty(ElementType::Bytes, 4 * u64::from(groups)).unwrap();
    let grid = Grid::new([groups, 1, 1], [block, 1, 1]).with_shared_bytes(4 * block);
    s.execute(&kernel, grid, &[Arg::read(&inb), Arg::write(&out)]).unwrap();
    let sums: Vec<u32> = s.read_as(&out).unwrap();
    for (g, sum) in sums.iter().enumerate() {
        let expected: u32 = input[g * block as usize..(g + 1) * block as usize].iter().sum();
        assert_eq!(*sum, expected);
    }
    let broken = Kernel::custom("broken").cuda("this is not CUDA", "broken").build();
    let error = s.execute(&broken, Grid::linear(1, 1), &[Arg::write(&out)]).unwrap_err();
    assert!(matches!(error, Error::InvalidArgument(_)), "{error}");
    // A compile error is the caller's, not the stream's: the stream goes on.
    s.memset_zero(&out).unwrap();
    assert_eq!(s.read_as::<u32>(&out).unwrap(), vec![0; groups as usize]);
    assert_no_live_events(&runtime);
}

/// A kernel with static shared memory takes dynamic shared memory up to the
/// device's opt-in ceiling, under 48 KiB too: CUDA's default ceiling is 48 KiB
/// less the static part, and the opt-in was asked for only past 48 KiB, so
/// 16 KiB static and 40 KiB dynamic failed as a backend error.
#[test]
fn a_kernel_with_static_shared_memory_takes_dynamic_shared_memory_past_the_default() {
    let Some(runtime) = open("static_and_dynamic_shared", None) else {
        return;
    };
    let s = runtime.default_stream();
    let kernel = Kernel::custom("both_shared")
        .cuda(
            r#"extern "C" __global__ void both_shared(unsigned int* out) {
                __shared__ unsigned int fixed[4096];
                extern __shared__ unsigned int dynamic[];
                fixed[threadIdx.x] = threadIdx.x;
                dynamic[10239 - threadIdx.x] = 2 * threadIdx.x;
                __syncthreads();
                out[threadIdx.x] = fixed[threadIdx.x] + dynamic[10239 - threadIdx.x];
            }"#,
            "both_shared",
        )
        .build();
    let out = s.upload(&[0u32; 64]).unwrap();
    for dynamic in [40 << 10, 48 << 10] {
        let grid = Grid::new([1, 1, 1], [64, 1, 1]).with_shared_bytes(dynamic);
        s.execute(&kernel, grid, &[Arg::write(&out)]).unwrap();
        let want: Vec<u32> = (0..64).map(|i| 3 * i).collect();
        assert_eq!(s.read_as::<u32>(&out).unwrap(), want, "{dynamic} bytes of dynamic shared memory");
        s.memset_zero(&out).unwrap();
    }
}

#[test]
fn async_completions_resolve_without_an_async_runtime() {
    let Some(runtime) = open("async", None) else {
        return;
    };
    let s = runtime.default_stream();
    let buffer = s.zeros(ElementType::Bytes, 4096).unwrap();
    futures::executor::block_on(async {
        s.memset_zero(&buffer).unwrap();
        s.sync().await.unwrap();
        s.write_async(&buffer, 0, &[7u32; 1024]).await.unwrap();
        let bytes = s.read_async(&buffer).await.unwrap();
        assert!(bytes.chunks(4).all(|w| u32::from_ne_bytes([w[0], w[1], w[2], w[3]]) == 7));
        runtime.sync().await.unwrap();
    });
    assert_no_live_events(&runtime);
}

/// Waits until `done` holds, failing the test after `limit`.
fn eventually(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_broken_kernel_is_refused_before_admission_with_nvrtcs_log() {
    let Some(runtime) = open("broken_kernel", None) else {
        return;
    };
    let s = runtime.default_stream();
    let out = s.zeros(ElementType::Bytes, 4).unwrap();
    let other = s.zeros(ElementType::Bytes, 4).unwrap();
    let admitted = runtime.diagnostics().admitted_ops;
    let broken = Kernel::custom("broken")
        .cuda(r#"extern "C" __global__ void broken(unsigned int* out) { out[0] = weir_undeclared_name; }"#, "broken")
        .build();
    match s.execute(&broken, Grid::linear(1, 1), &[Arg::write(&out)]).unwrap_err() {
        Error::InvalidArgument(message) => assert!(message.contains("weir_undeclared_name"), "{message}"),
        other => panic!("expected an invalid argument with NVRTC's log, got {other}"),
    }
    let misnamed = Kernel::custom("misnamed")
        .cuda(r#"extern "C" __global__ void present(unsigned int* out) { out[0] = 1u; }"#, "absent")
        .build();
    match s.execute(&misnamed, Grid::linear(1, 1), &[Arg::write(&out)]).unwrap_err() {
        Error::InvalidArgument(message) => assert!(message.contains("absent"), "{message}"),
        other => panic!("expected an invalid argument naming the entry, got {other}"),
    }
    let put = put_kernel();
    // `put` takes (pointer, u32, u32): too few arguments, too many, and a
    // buffer where a scalar goes are refused with the parameters spelled out.
    let wrong: [&[Arg<'_>]; 3] = [
        &[Arg::write(&out), Arg::u32(1)],
        &[Arg::write(&out), Arg::u32(1), Arg::u32(1), Arg::u32(1)],
        &[Arg::write(&out), Arg::read(&other), Arg::u32(1)],
    ];
    for args in wrong {
        match s.execute(&put, Grid::linear(1, 1), args).unwrap_err() {
            Error::InvalidArgument(message) => {
                assert!(message.contains("takes 3 parameters of (8, 4, 4) bytes"), "{message}")
            }
            other => panic!("expected the parameters refused, got {other}"),
        }
    }
    assert_eq!(runtime.diagnostics().admitted_ops, admitted, "a refused kernel admits nothing");
    s.execute(&put, Grid::linear(1, 1), &[Arg::write(&out), Arg::u32(5), Arg::u32(1)]).unwrap();
    assert_eq!(s.read_as::<u32>(&out).unwrap(), vec![5]);
    s.memset_zero(&out).unwrap();
    assert_eq!(s.read_as::<u32>(&out).unwrap(), vec![0]);
    assert_no_live_events(&runtime);
}

/// A kernel NVRTC and ptxas take a while over: a long loop, fully unrolled.
/// Each `salt` is a source new to the compiled-kernel cache, and the process
/// id makes it new to any compile cache outside the process too (on a data-centre GPU
/// a second process compiled the same source in 14 ms instead of 842 ms).
fn heavy_kernel(salt: u32) -> Kernel {
    let source = format!(
        r#"extern "C" __global__ void heavy(float* data) {{
            float x = data[threadIdx.x];
            #pragma unroll
            for (int i = 0; i < 2048; ++i) {{ x = x * 1.0001f + __sinf(x + (float)(i % {modulus})); }}
            data[threadIdx.x] = x;
        }}"#,
        modulus = 7 + salt + 2 * (std::process::id() % 1000)
    );
    Kernel::custom("heavy").cuda(source, "heavy").build()
}

#[test]
fn a_slow_compile_on_one_thread_holds_up_no_admission_on_another() {
    let Some(runtime) = open_alone("slow_compile", None) else {
        return;
    };
    let s = runtime.default_stream();
    let data = s.zeros(ElementType::Bytes, 4 * 32).unwrap();
    let buffer = s.zeros(ElementType::Bytes, 4096).unwrap();
    let warp = Grid::new([1, 1, 1], [32, 1, 1]);
    // What one compile and module load of such a kernel takes here.
    let start = Instant::now();
    s.execute(&heavy_kernel(0), warp, &[Arg::read_write(&data)]).unwrap();
    let compile = start.elapsed();
    s.fence().unwrap().wait().unwrap();
    let compiling = {
        let (s, data) = (s.clone(), data.clone());
        thread::spawn(move || {
            let start = Instant::now();
            s.execute(&heavy_kernel(1), warp, &[Arg::read_write(&data)]).unwrap();
            start.elapsed()
        })
    };
    thread::sleep(compile / 10); // let the compile begin
    let start = Instant::now();
    let mut slowest = Duration::ZERO;
    for _ in 0..200 {
        let one = Instant::now();
        s.memset_zero(&buffer).unwrap();
        slowest = slowest.max(one.elapsed());
    }
    let admissions = start.elapsed();
    let compiled_first = compiling.is_finished();
    let concurrent = compiling.join().unwrap();
    s.fence().unwrap().wait().unwrap();
    eprintln!(
        "slow_compile: compile+load {compile:?} alone, {concurrent:?} beside 200 admissions on the same stream \
         taking {admissions:?} (slowest {slowest:?})"
    );
    if compile < Duration::from_millis(100) {
        eprintln!("slow_compile: inconclusive, the compile took only {compile:?}");
        return;
    }
    assert!(!compiled_first, "the admissions waited for the compile");
    assert!(slowest < compile / 4, "one admission took {slowest:?} beside a {compile:?} compile");
    assert_no_live_events(&runtime);
}

#[test]
fn retired_streams_and_released_memory_go_once_their_work_is_done() {
    let Some(runtime) = open_alone("retire", None) else {
        return;
    };
    let s = runtime.default_stream();
    s.fence().unwrap().wait().unwrap();
    let before = runtime.diagnostics();
    let held = runtime.new_stream().unwrap();
    let buffer = held.zeros(ElementType::Bytes, 1 << 20).unwrap();
    // Longer than `HOLD`: the admissions below usually take milliseconds, but
    // in whole runs of this binary on an H200 they sometimes outlasted 300 ms,
    // and the held work was done before it was looked at.
    held.delay(HOLD * 5).unwrap();
    held.memset_zero(&buffer).unwrap();
    for _ in 0..8 {
        let t = runtime.new_stream().unwrap();
        let scratch = t.zeros(ElementType::Bytes, 4096).unwrap();
        t.memset_zero(&scratch).unwrap();
        // `t` and `scratch` go here, their work perhaps still running.
    }
    drop((held, buffer));
    // The held stream's work still runs: the stream and its memory wait for it.
    let during = runtime.diagnostics();
    assert!(during.backend.live_streams > before.backend.live_streams, "{during:?}");
    assert!(during.backend.live_allocations > before.backend.live_allocations, "{during:?}");
    assert!(during.retiring_streams >= 1, "{during:?}");
    // Then they go, dropped on the delivery thread, which never used CUDA before.
    eventually("streams and memory retire", Duration::from_secs(10), || {
        let now = runtime.diagnostics();
        now.backend.live_streams == before.backend.live_streams
            && now.backend.live_allocations == before.backend.live_allocations
            && now.retiring_streams == 0
            && now.retiring_buffers == 0
    });
    // The runtime goes on: new streams and memory work as before.
    let t = runtime.new_stream().unwrap();
    let fresh = t.upload(&[3u32; 256]).unwrap();
    assert_eq!(t.read_as::<u32>(&fresh).unwrap(), vec![3; 256]);
    assert_no_live_events(&runtime);
}
