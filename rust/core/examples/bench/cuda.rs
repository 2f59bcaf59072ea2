//! CUDA figures, each beside the raw driver doing the same work in the same run.

use std::ffi::{c_void, CString};
use std::ptr::null_mut;
use std::sync::mpsc::channel;
use std::thread;
use std::time::{Duration, Instant};

use weir_core::backend::cuda::cudarc::driver::sys as cu;
use weir_core::backend::cuda::cudarc::nvrtc;
use weir_core::backend::gpu::cuda_source;
use weir_core::{Arg, BackendKind, Blas, ElementType, Gemm, GpuWake, Grid, Kernel, Runtime};

use crate::report::{self, cpu_time, median, micros, CpuSpent, Figure, InTurn, Report};

#[path = "transformer_raw.rs"]
mod transformer_raw;

const EMPTY: &str = r#"extern "C" __global__ void empty() {}"#;
const BUMP: &str = r#"extern "C" __global__ void bump(unsigned int* p) { p[threadIdx.x] += 1u; }"#;

fn ck(call: &str, result: cu::CUresult) {
    assert_eq!(result, cu::CUresult::CUDA_SUCCESS, "{call}");
}

/// The raw driver: device 0's primary context, made current per thread.
struct Raw {
    context: cu::CUcontext,
}

// SAFETY: a retained primary context may be made current on any thread.
unsafe impl Send for Raw {}
// SAFETY: as above; `Raw` only hands the handle to cuCtxSetCurrent.
unsafe impl Sync for Raw {}

impl Raw {
    fn open() -> Raw {
        let mut context = null_mut();
        // SAFETY: the Weir runtime opened CUDA first, so the driver is loaded.
        unsafe {
            ck("cuInit", cu::cuInit(0));
            let mut device = 0;
            ck("cuDeviceGet", cu::cuDeviceGet(&mut device, 0));
            ck("retain", cu::cuDevicePrimaryCtxRetain(&mut context, device));
        }
        let raw = Raw { context };
        raw.bind();
        raw
    }

    fn bind(&self) {
        // SAFETY: retained in `open`.
        ck("cuCtxSetCurrent", unsafe { cu::cuCtxSetCurrent(self.context) });
    }

    fn stream(&self) -> cu::CUstream {
        let mut stream = null_mut();
        // SAFETY: out-pointer to a local.
        ck("cuStreamCreate", unsafe {
            cu::cuStreamCreate(&mut stream, cu::CUstream_flags::CU_STREAM_NON_BLOCKING as u32)
        });
        stream
    }

    fn event(&self, blocking: bool) -> cu::CUevent {
        let mut flags = cu::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
        if blocking {
            flags |= cu::CUevent_flags::CU_EVENT_BLOCKING_SYNC as u32;
        }
        let mut event = null_mut();
        // SAFETY: out-pointer to a local.
        ck("cuEventCreate", unsafe { cu::cuEventCreate(&mut event, flags) });
        event
    }

    /// An event that takes the time (for `cuEventElapsedTime`).
    fn timing_event(&self) -> cu::CUevent {
        let mut event = null_mut();
        // SAFETY: out-pointer to a local.
        ck("cuEventCreate", unsafe { cu::cuEventCreate(&mut event, cu::CUevent_flags::CU_EVENT_DEFAULT as u32) });
        event
    }

    fn function(&self, source: &str, entry: &str) -> cu::CUfunction {
        let ptx = nvrtc::compile_ptx(source).expect("NVRTC");
        let image = CString::new(ptx.to_src()).expect("PTX text");
        let (mut module, mut function) = (null_mut(), null_mut());
        let name = CString::new(entry).expect("entry");
        // SAFETY: NUL-terminated PTX and name; out-pointers to locals.
        unsafe {
            ck("cuModuleLoadData", cu::cuModuleLoadData(&mut module, image.as_ptr().cast()));
            ck("cuModuleGetFunction", cu::cuModuleGetFunction(&mut function, module, name.as_ptr()));
        }
        function
    }

    fn alloc(&self, bytes: usize) -> u64 {
        let mut ptr = 0;
        // SAFETY: out-pointer to a local.
        ck("cuMemAlloc", unsafe { cu::cuMemAlloc_v2(&mut ptr, bytes) });
        ptr
    }

    fn sync(&self, stream: cu::CUstream) {
        // SAFETY: a live stream.
        ck("cuStreamSynchronize", unsafe { cu::cuStreamSynchronize(stream) });
    }
}

/// Launches `function` on `stream` with `params` (pointers to each value).
fn launch(function: cu::CUfunction, grid: u32, block: u32, stream: cu::CUstream, params: &mut [*mut c_void]) {
    // SAFETY: a loaded function; one valid pointer per parameter.
    ck("cuLaunchKernel", unsafe {
        cu::cuLaunchKernel(function, grid, 1, 1, block, 1, 1, 0, stream, params.as_mut_ptr(), null_mut())
    });
}

/// Captures `launches` launches of `function` over `ptr` into one
/// instantiated graph, on `stream`.
fn raw_graph(function: cu::CUfunction, stream: cu::CUstream, ptr: u64, launches: u32) -> cu::CUgraphExec {
    let (mut graph, mut exec) = (null_mut(), null_mut());
    // SAFETY: a live stream captured by this thread only; out-pointers to locals.
    unsafe {
        ck(
            "cuStreamBeginCapture",
            cu::cuStreamBeginCapture_v2(stream, cu::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
        );
        for _ in 0..launches {
            let mut arg = ptr;
            launch(function, 1, 32, stream, &mut [(&mut arg as *mut u64).cast()]);
        }
        ck("cuStreamEndCapture", cu::cuStreamEndCapture(stream, &mut graph));
        ck("cuGraphInstantiate", cu::cuGraphInstantiateWithFlags(&mut exec, graph, 0));
        ck("cuGraphDestroy", cu::cuGraphDestroy(graph));
    }
    exec
}

fn open(wake: GpuWake, spin_micros: Option<u32>) -> Option<Runtime> {
    let builder = Runtime::builder(BackendKind::Cuda).wake(wake);
    let builder = match spin_micros {
        Some(micros) => builder.spin(Duration::from_micros(micros.into())),
        None => builder,
    };
    let runtime = builder.open();
    match runtime {
        Ok(runtime) => Some(runtime),
        Err(error) => {
            eprintln!("cuda: skipped: {error}");
            None
        }
    }
}

/// `processes`: see [`report::across_processes`], which measures the
/// launches, the awaited fence and the pipeline when above 1.
pub fn run(report: &mut Report, part: &dyn Fn(&str) -> bool, processes: usize) {
    let Some(runtime) = open(GpuWake::Waiter, None) else {
        return;
    };
    let Some(blocking_runtime) = open(GpuWake::Waiter, Some(0)) else {
        return;
    };
    let Some(callback_runtime) = open(GpuWake::Callback, None) else {
        return;
    };
    let Some(long_spin_runtime) = open(GpuWake::Waiter, Some(200)) else {
        return;
    };
    let raw = Raw::open();
    eprintln!("cuda: {}", runtime.info().name);
    if part("transformer") {
        transformer_raw::run(report, &runtime, &raw);
    }
    if part("memset") {
        memset_bandwidth(report, &runtime, &raw);
    }
    if part("fence") {
        spin_floor(report, &raw);
        for (wake, runtime) in [
            ("waiter, spins first", &runtime),
            ("waiter, spins up to 200 us", &long_spin_runtime),
            ("waiter, blocks at once", &blocking_runtime),
            ("callback", &callback_runtime),
        ] {
            wake_latency(report, runtime, &raw, wake, IDLE_BETWEEN_FENCES);
        }
        wake_latency(report, &runtime, &raw, "waiter, spins first; one fence after another", Duration::ZERO);
    }
    // Measured here, or in fresh processes (see `report::across_processes`).
    let placed = |report: &mut Report, name: &str, here: fn(&mut Report, &Runtime, &Raw)| match processes {
        1 => here(report, &runtime, &raw),
        _ => report.add(report::across_processes("cuda", name, processes)),
    };
    if part("awaited") {
        placed(report, "awaited", awaited_in_place);
    }
    if part("launches") {
        placed(report, "launches", admission);
    }
    if part("replay") {
        graph_replay(report, &runtime, &raw);
    }
    if part("pipeline") {
        placed(report, "pipeline", pipeline);
    }
    if part("pipeline-device-paced") {
        pipeline_device_paced(report, &runtime, &raw);
    }
    if part("sgemm") {
        sgemm(report, &runtime, &raw);
    }
}

/// cuBLAS SGEMMs admitted through Weir (each an external op ordered by
/// versions) against the same calls on a raw stream with a raw handle:
/// GFLOP/s over a batch of GEMMs large enough that the device sets the pace.
fn sgemm(report: &mut Report, runtime: &Runtime, raw: &Raw) {
    use weir_core::backend::cuda::cudarc::cublas::{result as blas, sys as blas_sys};
    const SIZE: u32 = 4096;
    const CALLS: u32 = 20;
    let blas_weir = match Blas::new(runtime) {
        Ok(blas) => blas,
        Err(error) => return eprintln!("cuda: sgemm skipped: {error}"),
    };
    let elements = u64::from(SIZE) * u64::from(SIZE);
    let flops = 2.0 * f64::from(SIZE).powi(3) * f64::from(CALLS);
    let s = runtime.default_stream();
    let ones = vec![1.0f32; elements as usize];
    let (a, b) = (s.upload(&ones).unwrap(), s.upload(&ones).unwrap());
    let c = s.zeros(ElementType::F32, elements).unwrap();
    let gemm = Gemm::new(SIZE, SIZE, SIZE);
    let weir = || {
        blas_weir.sgemm(&s, &gemm, &a, &b, &c).unwrap();
        s.fence().unwrap().wait().unwrap();
        let start = Instant::now();
        for _ in 0..CALLS {
            blas_weir.sgemm(&s, &gemm, &a, &b, &c).unwrap();
        }
        s.fence().unwrap().wait().unwrap();
        flops / start.elapsed().as_secs_f64() / 1e9
    };
    let stream = raw.stream();
    let bytes = elements as usize * 4;
    let (ra, rb, rc) = (raw.alloc(bytes), raw.alloc(bytes), raw.alloc(bytes));
    // SAFETY: the raw allocations hold `bytes` each.
    unsafe {
        ck("fill a", cu::cuMemsetD32Async(ra, 1.0f32.to_bits(), elements as usize, stream));
        ck("fill b", cu::cuMemsetD32Async(rb, 1.0f32.to_bits(), elements as usize, stream));
    }
    let handle = blas::create_handle().expect("cuBLAS handle");
    // SAFETY: a live handle and stream.
    unsafe { blas::set_stream(handle, stream as blas_sys::cudaStream_t) }.expect("cublasSetStream");
    let n = SIZE as i32;
    let call = || {
        let (alpha, beta) = (1.0f32, 0.0f32);
        // SAFETY: three live n × n f32 allocations on the handle's stream.
        unsafe {
            blas::sgemm(
                handle,
                blas_sys::cublasOperation_t::CUBLAS_OP_N,
                blas_sys::cublasOperation_t::CUBLAS_OP_N,
                n,
                n,
                n,
                &alpha,
                ra as usize as *const f32,
                n,
                rb as usize as *const f32,
                n,
                &beta,
                rc as usize as *mut f32,
                n,
            )
        }
        .expect("cublasSgemm");
    };
    let raw_run = || {
        call();
        raw.sync(stream);
        let start = Instant::now();
        for _ in 0..CALLS {
            call();
        }
        raw.sync(stream);
        flops / start.elapsed().as_secs_f64() / 1e9
    };
    let (mut best_weir, mut best_raw) = (0f64, 0f64);
    for _ in 0..3 {
        best_weir = best_weir.max(weir());
        best_raw = best_raw.max(raw_run());
    }
    assert_eq!(s.read_as::<f32>(&c).unwrap()[..4], [SIZE as f32; 4], "Weir's GEMM computed another product");
    // SAFETY: made above, used by nothing after the last sync.
    unsafe { blas::destroy_handle(handle) }.expect("cublasDestroy");
    report.add(Figure::beside(
        "cuda",
        "cuBLAS sgemm 4096",
        "GFLOP/s",
        best_weir,
        best_raw,
        true,
        &format!("{CALLS} calls of {SIZE}x{SIZE}x{SIZE} in a row, best of 3; raw: the same calls with a raw handle on a raw stream"),
    ));
}

fn memset_bandwidth(report: &mut Report, runtime: &Runtime, raw: &Raw) {
    const BYTES: usize = 1 << 30;
    // Enough that the closing fence's wake-up (tens of us) is noise beside the fills.
    const REPS: u32 = 100;
    let s = runtime.default_stream();
    let buffer = s.empty(ElementType::Bytes, BYTES as u64).unwrap();
    let gbps = |elapsed: Duration| f64::from(REPS) * BYTES as f64 / elapsed.as_secs_f64() / 1e9;
    let weir = || {
        s.memset_zero(&buffer).unwrap();
        s.fence().unwrap().wait().unwrap();
        let start = Instant::now();
        for _ in 0..REPS {
            s.memset_zero(&buffer).unwrap();
        }
        s.fence().unwrap().wait().unwrap();
        gbps(start.elapsed())
    };
    let stream = raw.stream();
    let ptr = raw.alloc(BYTES);
    let raw_pass = |wide: bool| {
        for _ in 0..REPS {
            // SAFETY: `ptr` holds BYTES bytes on a live stream.
            ck("memset", unsafe {
                if wide {
                    cu::cuMemsetD32Async(ptr, 0, BYTES / 4, stream)
                } else {
                    cu::cuMemsetD8Async(ptr, 0, BYTES, stream)
                }
            });
        }
        raw.sync(stream);
    };
    let raw_memset = |wide: bool| {
        raw_pass(wide);
        let start = Instant::now();
        raw_pass(wide);
        gbps(start.elapsed())
    };
    let (mut best_weir, mut best_d8, mut best_d32) = (0f64, 0f64, 0f64);
    for _ in 0..3 {
        best_weir = best_weir.max(weir());
        best_d8 = best_d8.max(raw_memset(false));
        best_d32 = best_d32.max(raw_memset(true));
    }
    report.add(Figure {
        backend: "cuda".into(),
        name: "memset_zero 1 GiB".into(),
        unit: "GB/s".into(),
        weir: best_weir,
        baseline: Some(best_d8.max(best_d32)),
        higher_is_better: true,
        note: format!("raw cuMemsetD8Async {best_d8:.0} GB/s, cuMemsetD32Async {best_d32:.0} GB/s; best of 3x{REPS}"),
        baseline_is_raw: true,
    });
}

/// How long until an empty kernel launched on `stream` is seen done by
/// this thread, spinning on `event` recorded after it.
fn seen_done_spinning(function: cu::CUfunction, stream: cu::CUstream, event: cu::CUevent) -> Duration {
    let start = Instant::now();
    launch(function, 1, 1, stream, &mut []);
    // SAFETY: live handles.
    unsafe {
        ck("cuEventRecord", cu::cuEventRecord(event, stream));
        while cu::cuEventQuery(event) == cu::CUresult::CUDA_ERROR_NOT_READY {
            std::hint::spin_loop();
        }
    }
    start.elapsed()
}

/// The floor under any wake-up: an empty kernel seen done by a thread that
/// spins on its event right after launching it.
fn spin_floor(report: &mut Report, raw: &Raw) {
    const SAMPLES: usize = 300;
    let function = raw.function(EMPTY, "empty");
    let stream = raw.stream();
    let event = raw.event(false);
    let mut seen = Vec::with_capacity(SAMPLES);
    for _ in 0..SAMPLES {
        seen.push(seen_done_spinning(function, stream, event));
        thread::sleep(Duration::from_micros(200));
    }
    report.add(Figure {
        backend: "cuda".into(),
        name: "empty kernel seen done, same-thread spin".into(),
        unit: "us".into(),
        weir: micros(median(&mut seen)),
        baseline: None,
        higher_is_better: false,
        note: format!("raw only, median of {SAMPLES}: the floor under every wake-up figure"),
        baseline_is_raw: true,
    });
}

/// An app that awaits each kernel on the thread that launched it, one
/// after another, beside the floor taken in turn: Weir's own cost over the
/// driver's, without the hand-over to another thread that `wake_latency`
/// times (a thread's wake-up, which the host prices).
fn awaited_in_place(report: &mut Report, runtime: &Runtime, raw: &Raw) {
    const SAMPLES: usize = 300;
    let s = runtime.default_stream();
    let empty = Kernel::custom("empty").cuda(EMPTY, "empty").build();
    let one = Grid::new([1, 1, 1], [1, 1, 1]);
    let (function, stream, event) = (raw.function(EMPTY, "empty"), raw.stream(), raw.event(false));
    let weir_once = || {
        let start = Instant::now();
        s.execute(&empty, one, &[]).unwrap();
        futures::executor::block_on(s.fence().unwrap().wait_async()).unwrap();
        start.elapsed()
    };
    let raw_once = || seen_done_spinning(function, stream, event);
    // The stream learns that its waits are short.
    for _ in 0..50 {
        weir_once();
        raw_once();
    }
    let (mut weir, mut floor) = (Vec::with_capacity(SAMPLES), Vec::with_capacity(SAMPLES));
    for _ in 0..SAMPLES {
        weir.push(weir_once());
        floor.push(raw_once());
    }
    let phases = awaited_phases(&s, &empty, one, (function, stream, event));
    report.add(Figure {
        backend: "cuda".into(),
        name: "fence awaited on the launching thread, one after another".into(),
        unit: "us".into(),
        weir: micros(median(&mut weir)),
        baseline: Some(micros(median(&mut floor))),
        higher_is_better: false,
        note: format!(
            "median of {SAMPLES}, the sides taken in turn; weir: execute, then block_on(fence); baseline: the \
             same-thread spin floor (launch, record, spin on cuEventQuery); {phases}"
        ),
        baseline_is_raw: true,
    });
    assert_eq!(runtime.diagnostics().backend.live_events, 0);
}

/// Where an awaited op's time goes, Weir's phases beside raw's, in a pass
/// of their own after the figure's (the clock read between phases stays
/// out of the figure): `execute`, `fence()` and the wait, against the
/// launch, the record and the spin. Medians, as a sentence for the note.
fn awaited_phases(
    s: &weir_core::Stream,
    empty: &Kernel,
    one: Grid,
    (function, stream, event): (cu::CUfunction, cu::CUstream, cu::CUevent),
) -> String {
    const SAMPLES: usize = 300;
    let (mut weir, mut raw) = ([(); 3].map(|()| Vec::new()), [(); 3].map(|()| Vec::new()));
    for _ in 0..SAMPLES {
        let start = Instant::now();
        s.execute(empty, one, &[]).unwrap();
        let executed = Instant::now();
        let fence = s.fence().unwrap();
        let fenced = Instant::now();
        futures::executor::block_on(fence.wait_async()).unwrap();
        let done = Instant::now();
        for (phase, took) in weir.iter_mut().zip([executed - start, fenced - executed, done - fenced]) {
            phase.push(took);
        }
        let start = Instant::now();
        launch(function, 1, 1, stream, &mut []);
        let launched = Instant::now();
        // SAFETY: live handles.
        ck("cuEventRecord", unsafe { cu::cuEventRecord(event, stream) });
        let recorded = Instant::now();
        // SAFETY: a live event.
        while unsafe { cu::cuEventQuery(event) } == cu::CUresult::CUDA_ERROR_NOT_READY {
            std::hint::spin_loop();
        }
        let done = Instant::now();
        for (phase, took) in raw.iter_mut().zip([launched - start, recorded - launched, done - recorded]) {
            phase.push(took);
        }
    }
    let [execute, fence, wait] = weir.map(|mut phase| micros(median(&mut phase)));
    let [launched, recorded, spun] = raw.map(|mut phase| micros(median(&mut phase)));
    format!(
        "its phases (median of {SAMPLES}, us): weir execute {execute:.2}, fence() {fence:.2}, wait {wait:.2}; \
         raw launch {launched:.2}, record {recorded:.2}, spin {spun:.2}"
    )
}

/// The pause between two timed fences, so each wake-up finds every thread
/// asleep (the app that awaits now and then); `Duration::ZERO` times an app
/// that awaits one kernel after another.
const IDLE_BETWEEN_FENCES: Duration = Duration::from_micros(200);

fn wake_latency(report: &mut Report, runtime: &Runtime, raw: &Raw, wake: &str, idle: Duration) {
    const SAMPLES: usize = 300;
    let s = runtime.default_stream();
    let empty = Kernel::custom("empty").cuda(EMPTY, "empty").build();
    let one = Grid::new([1, 1, 1], [1, 1, 1]);
    s.execute(&empty, one, &[]).unwrap();
    s.fence().unwrap().wait().unwrap();

    // Weir: the fence's future resolves on another thread.
    let (to_waiter, fences) = channel::<weir_core::Fence>();
    let (to_main, resolved) = channel::<Instant>();
    let awaiting = thread::spawn(move || {
        for fence in fences {
            futures::executor::block_on(fence.wait_async()).unwrap();
            to_main.send(Instant::now()).unwrap();
        }
    });
    let mut weir = Vec::with_capacity(SAMPLES);
    let cpu_before = cpu_time();
    for _ in 0..SAMPLES {
        let start = Instant::now();
        s.execute(&empty, one, &[]).unwrap();
        to_waiter.send(s.fence().unwrap()).unwrap();
        weir.push(resolved.recv().unwrap() - start);
        thread::sleep(idle);
    }
    let weir_cpu = (cpu_time() - cpu_before) / SAMPLES as u32;
    drop(to_waiter);
    awaiting.join().unwrap();

    // Raw: an event-waiter thread blocking in cuEventSynchronize.
    let function = raw.function(EMPTY, "empty");
    let stream = raw.stream();
    let (to_waiter, events) = channel::<usize>();
    let (to_main, resolved) = channel::<()>();
    let context = raw.context as usize;
    let waiter = thread::spawn(move || {
        // SAFETY: the retained primary context, made current on this thread.
        ck("cuCtxSetCurrent", unsafe { cu::cuCtxSetCurrent(context as cu::CUcontext) });
        for event in events {
            // SAFETY: a recorded event, alive until the main thread destroys it after this thread ends.
            ck("cuEventSynchronize", unsafe { cu::cuEventSynchronize(event as cu::CUevent) });
            to_main.send(()).unwrap();
        }
    });
    // One event, made before timing and recorded again for each fence, as
    // Weir's pooled events are: neither side makes or destroys one per fence.
    let event = raw.event(true);
    let mut baseline = Vec::with_capacity(SAMPLES);
    let cpu_before = cpu_time();
    for _ in 0..SAMPLES {
        let start = Instant::now();
        launch(function, 1, 1, stream, &mut []);
        // SAFETY: live handles; the previous record was waited for.
        ck("cuEventRecord", unsafe { cu::cuEventRecord(event, stream) });
        to_waiter.send(event as usize).unwrap();
        resolved.recv().unwrap();
        // Resolved on another thread, as Weir's future is.
        baseline.push(start.elapsed());
        thread::sleep(idle);
    }
    let raw_cpu = (cpu_time() - cpu_before) / SAMPLES as u32;
    drop(to_waiter);
    waiter.join().unwrap();
    // SAFETY: no thread uses the event any more.
    ck("cuEventDestroy", unsafe { cu::cuEventDestroy_v2(event) });
    report.add(Figure {
        backend: "cuda".into(),
        name: format!("fence wake-up, empty kernel ({wake})"),
        unit: "us".into(),
        weir: micros(median(&mut weir)),
        baseline: Some(micros(median(&mut baseline))),
        higher_is_better: false,
        baseline_is_raw: true,
        note: format!(
            "median of {SAMPLES}, {} us idle between fences; CPU per fence, all threads: weir {:.1} us, raw {:.1} us; baseline: blocking-sync event, a waiter thread in cuEventSynchronize wakes another thread",
            idle.as_micros(),
            micros(weir_cpu),
            micros(raw_cpu)
        ),
    });
    assert_eq!(runtime.diagnostics().backend.live_events, 0);
}

fn admission(report: &mut Report, runtime: &Runtime, raw: &Raw) {
    const LAUNCHES: u32 = 10_000;
    const ROUNDS: usize = 25;
    let s = runtime.default_stream();
    let bump = Kernel::custom("bump").cuda(BUMP, "bump").build();
    let grid = Grid::new([1, 1, 1], [32, 1, 1]);
    let counter = s.zeros(ElementType::Bytes, 128).unwrap();
    s.execute(&bump, grid, &[Arg::read_write(&counter)]).unwrap();
    s.fence().unwrap().wait().unwrap();
    let function = raw.function(BUMP, "bump");
    let stream = raw.stream();
    let ptr = raw.alloc(128);
    // 25 rounds, the two sides taken in turn (see `InTurn`). Each round
    // times how long until every launch has run (the enqueue loop, then a
    // wait for the stream), the loop's share of it, and the CPU time of the
    // calling thread and of every thread (a Weir thread busy meanwhile
    // shows). Weir's driver calls are made by its issuing thread, so its
    // loop ends long before its launches are made: only the time until
    // they ran compares the two.
    let mut rounds: [Vec<Round>; 2] = [Vec::new(), Vec::new()];
    let timed = |body: &mut dyn FnMut(), drain: &dyn Fn()| {
        let ((took, looped), cpu) = CpuSpent::measure(|| {
            let start = Instant::now();
            body();
            let looped = start.elapsed();
            drain();
            (start.elapsed(), looped)
        });
        Round { took, looped, cpu }
    };
    let mut in_turn = InTurn::default();
    for _ in 0..ROUNDS {
        let weir = timed(
            &mut || {
                for _ in 0..LAUNCHES {
                    s.execute(&bump, grid, &[Arg::read_write(&counter)]).unwrap();
                }
            },
            &|| s.fence().unwrap().wait().unwrap(),
        );
        let raw = timed(
            &mut || {
                for _ in 0..LAUNCHES {
                    let mut arg = ptr;
                    launch(function, 1, 32, stream, &mut [(&mut arg as *mut u64).cast()]);
                }
            },
            &|| raw.sync(stream),
        );
        in_turn.push(weir.took, raw.took);
        rounds[0].push(weir);
        rounds[1].push(raw);
    }
    let counts: Vec<u32> = s.read_as(&counter).unwrap();
    assert_eq!(counts[0], 1 + ROUNDS as u32 * LAUNCHES, "every admitted launch ran");
    let per_launch = |time: Duration| micros(time) / f64::from(LAUNCHES);
    let (weir, baseline) = in_turn.median_rounds();
    let (weir, baseline) = (rounds[0][weir], rounds[1][baseline]);
    report.add(Figure {
        backend: "cuda".into(),
        name: "admission, 10 000 small launches".into(),
        unit: "us/launch".into(),
        weir: per_launch(weir.took),
        baseline: Some(per_launch(baseline.took)),
        higher_is_better: false,
        baseline_is_raw: true,
        note: format!(
            "until all ran; {}; in the median rounds, the enqueue loop alone: weir {:.2} us, raw {:.2} us; CPU per launch, calling thread: weir {:.2} us, raw {:.2} us; all threads: weir {:.2} us, raw {:.2} us; baseline: cuLaunchKernel loop, then cuStreamSynchronize",
            in_turn.describe(per_launch, "us"),
            per_launch(weir.looped),
            per_launch(baseline.looped),
            per_launch(weir.cpu.thread),
            per_launch(baseline.cpu.thread),
            per_launch(weir.cpu.all),
            per_launch(baseline.cpu.all)
        ),
    });
}

/// One timed round of the launch figure.
#[derive(Clone, Copy)]
struct Round {
    /// Until every launch ran.
    took: Duration,
    /// The enqueue loop alone.
    looped: Duration,
    cpu: CpuSpent,
}

/// 1 000 small launches admitted one by one, against one replay of the same
/// 1 000 recorded (a CUDA graph, captured at the first replay).
fn graph_replay(report: &mut Report, runtime: &Runtime, raw: &Raw) {
    const OPS: u32 = 1000;
    const ROUNDS: u32 = 5;
    let s = runtime.default_stream();
    let bump = Kernel::custom("bump").cuda(BUMP, "bump").build();
    let grid = Grid::new([1, 1, 1], [32, 1, 1]);
    let counter = s.zeros(ElementType::Bytes, 128).unwrap();
    let graph = s
        .record(|r| {
            for _ in 0..OPS {
                r.execute(&bump, grid, &[Arg::read_write(&counter)])?;
            }
            Ok(())
        })
        .unwrap();
    // The first replay captures and instantiates the graph: not timed.
    s.replay(&graph).unwrap();
    s.fence().unwrap().wait().unwrap();
    // Each side until its launches ran (admission, then the fence), and
    // the admission alone: one by one, the issuing thread makes the driver
    // calls after the admitting loop returned.
    let (mut one_by_one, mut replayed) = ((Duration::MAX, Duration::MAX), (Duration::MAX, Duration::MAX));
    let best = |best: &mut (Duration, Duration), admit: &dyn Fn()| {
        let start = Instant::now();
        admit();
        let admitted = start.elapsed();
        s.fence().unwrap().wait().unwrap();
        *best = (best.0.min(start.elapsed()), best.1.min(admitted));
    };
    for _ in 0..ROUNDS {
        best(&mut one_by_one, &|| {
            for _ in 0..OPS {
                s.execute(&bump, grid, &[Arg::read_write(&counter)]).unwrap();
            }
        });
        best(&mut replayed, &|| s.replay(&graph).unwrap());
    }
    // Where the time between replay and raw graph goes, once more on each
    // side: the device's clock from a mark before the launch to one after
    // it (for Weir, a timestamp each side of the replay, so its admission
    // counts as well when the device is idle meanwhile).
    let device_replay = {
        let before = s.timestamp().unwrap();
        s.replay(&graph).unwrap();
        let after = s.timestamp().unwrap();
        s.fence().unwrap().wait().unwrap();
        after.elapsed_since(&before).unwrap()
    };
    let counts: Vec<u32> = s.read_as(&counter).unwrap();
    assert_eq!(counts[0], OPS * (2 + 2 * ROUNDS), "every replayed and every admitted launch ran");
    // The driver's own floor: a graph of the same launches captured from
    // raw cuLaunchKernel calls, launched, then the stream synchronized.
    let (function, stream, ptr) = (raw.function(BUMP, "bump"), raw.stream(), raw.alloc(128));
    let raw_replay = {
        let exec = raw_graph(function, stream, ptr, OPS);
        let mut best = (Duration::MAX, Duration::MAX);
        for _ in 0..=ROUNDS {
            let start = Instant::now();
            // SAFETY: an instance made above on a live stream.
            ck("cuGraphLaunch", unsafe { cu::cuGraphLaunch(exec, stream) });
            let launched = start.elapsed();
            raw.sync(stream);
            best = (best.0.min(start.elapsed()), best.1.min(launched));
        }
        let (before, after) = (raw.timing_event(), raw.timing_event());
        let mut ms = 0f32;
        // SAFETY: live events, instance and stream made above; out-pointer to a local.
        unsafe {
            ck("cuEventRecord", cu::cuEventRecord(before, stream));
            ck("cuGraphLaunch", cu::cuGraphLaunch(exec, stream));
            ck("cuEventRecord", cu::cuEventRecord(after, stream));
            raw.sync(stream);
            ck("cuEventElapsedTime", cu::cuEventElapsedTime_v2(&mut ms, before, after));
            ck("cuEventDestroy", cu::cuEventDestroy_v2(before));
            ck("cuEventDestroy", cu::cuEventDestroy_v2(after));
        }
        (best.0, best.1, Duration::from_secs_f64(f64::from(ms) / 1e3))
    };
    report.add(Figure {
        backend: "cuda".into(),
        name: "replay of 1 000 recorded launches".into(),
        unit: "us".into(),
        weir: micros(replayed.0),
        baseline: Some(micros(one_by_one.0)),
        higher_is_better: false,
        // Weir's replay against Weir's one by one; the raw graph is in the note.
        baseline_is_raw: false,
        note: format!(
            "until all ran, best of {ROUNDS}; admission alone: replay {:.0} us, one by one {:.0} us; between device marks: replay {:.0} us; a raw CUDA graph of the same launches: {:.0} us until all ran, cuGraphLaunch alone {:.0} us, between device marks {:.0} us; baseline: the same 1 000 launches admitted one by one",
            micros(replayed.1),
            micros(one_by_one.1),
            micros(device_replay),
            micros(raw_replay.0),
            micros(raw_replay.1),
            micros(raw_replay.2)
        ),
    });
}

/// The two-stream pipeline with 1 MiB kernels: the host's driver calls
/// and the cross-stream hops set the pace, so it shows what Weir's issuing
/// costs beside a hand-placed loop.
fn pipeline(report: &mut Report, runtime: &Runtime, raw: &Raw) {
    pipeline_of(report, runtime, raw, 1 << 18, "two-stream pipeline, 1000 rounds");
}

/// The same pipeline with 16 MiB kernels, where the device sets the pace:
/// what the ordering costs once kernels do real work. Steady across
/// processes, so measured in this one.
fn pipeline_device_paced(report: &mut Report, runtime: &Runtime, raw: &Raw) {
    pipeline_of(report, runtime, raw, 1 << 22, "two-stream pipeline, 1000 rounds of 16 MiB");
}

/// Round after round, a fill of `floats` floats on one stream and a scale
/// reading it on another: each round waits for the one before it across
/// the streams both ways (the scale reads the fill; the next fill
/// overwrites what the scale read).
fn pipeline_of(report: &mut Report, runtime: &Runtime, raw: &Raw, floats: usize, name: &str) {
    const ROUNDS: u32 = 1000;
    let (s, t) = (runtime.default_stream(), runtime.new_stream().unwrap());
    let x = s.zeros(ElementType::Bytes, 4 * floats as u64).unwrap();
    let y = t.zeros(ElementType::Bytes, 4 * floats as u64).unwrap();
    runtime.fence().unwrap().wait().unwrap();
    // The CPU time covers the rounds and their fence, not the check after
    // them: reading the output back stages and copies it on the calling
    // thread, and raw's side reads nothing back.
    let weir_pipeline = || {
        let waits_before = runtime.diagnostics().inserted_waits;
        let start = Instant::now();
        let ((), spent) = CpuSpent::measure(|| {
            for round in 0..ROUNDS {
                s.fill_f32(&x, round as f32).unwrap();
                t.scale(&x, 2.0, &y).unwrap();
            }
            runtime.fence().unwrap().wait().unwrap();
        });
        let took = start.elapsed();
        assert_eq!(t.read_as::<f32>(&y).unwrap()[0], 2.0 * (ROUNDS - 1) as f32);
        (took, runtime.diagnostics().inserted_waits - waits_before, spent)
    };

    let scale = raw.function(cuda_source(), "weir_scale_f32");
    let fill = raw.function(cuda_source(), "weir_fill_u32");
    let (rs, rt) = (raw.stream(), raw.stream());
    let (px, py) = (raw.alloc(4 * floats), raw.alloc(4 * floats));
    let groups = (floats as u32).div_ceil(256);
    // `fresh`: an event made and destroyed per wait; else two reused events,
    // one per stream, as Weir records each stream's own ordering event.
    let raw_pipeline = |fresh: bool| {
        let (mut written, mut read) = (raw.event(false), raw.event(false));
        let mut raw_waits = 0u64;
        let start = Instant::now();
        for round in 0..ROUNDS {
            if round > 0 {
                // SAFETY: live handles.
                ck("wait", unsafe { cu::cuStreamWaitEvent(rs, read, 0) });
                raw_waits += 1;
            }
            let (mut x, mut bits, mut count) = (px, (round as f32).to_bits(), floats as u64);
            let mut fill_args =
                [(&mut x as *mut u64).cast(), (&mut bits as *mut u32).cast(), (&mut count as *mut u64).cast()];
            launch(fill, groups, 256, rs, &mut fill_args);
            if fresh {
                // SAFETY: the event was waited on already; the driver frees it once that wait is met.
                ck("destroy", unsafe { cu::cuEventDestroy_v2(written) });
                written = raw.event(false);
            }
            // SAFETY: live handles.
            unsafe {
                ck("record", cu::cuEventRecord(written, rs));
                ck("wait", cu::cuStreamWaitEvent(rt, written, 0));
            }
            raw_waits += 1;
            let (mut a, mut b, mut alpha, mut n) = (px, py, 2.0f32, floats as u64);
            let mut scale_args = [
                (&mut a as *mut u64).cast(),
                (&mut b as *mut u64).cast(),
                (&mut alpha as *mut f32).cast(),
                (&mut n as *mut u64).cast(),
            ];
            launch(scale, groups, 256, rt, &mut scale_args);
            if fresh {
                // SAFETY: as above.
                ck("destroy", unsafe { cu::cuEventDestroy_v2(read) });
                read = raw.event(false);
            }
            // SAFETY: live handles.
            ck("record", unsafe { cu::cuEventRecord(read, rt) });
        }
        raw.sync(rs);
        raw.sync(rt);
        (start.elapsed(), raw_waits)
    };
    // 15 runs, the sides taken in turn (see `InTurn`).
    const RUNS: usize = 15;
    let (mut in_turn, mut fresh_events) = (InTurn::default(), Vec::new());
    let (mut waits, mut raw_waits) = (Vec::new(), 0);
    // CPU time per run, each side: whether the thread making the driver
    // calls is what limits a round.
    let mut cpu: [Vec<CpuSpent>; 2] = Default::default();
    for _ in 0..RUNS {
        let (weir, inserted, spent) = weir_pipeline();
        waits.push(inserted);
        cpu[0].push(spent);
        let ((raw, placed), spent) = CpuSpent::measure(|| raw_pipeline(false));
        raw_waits = placed;
        cpu[1].push(spent);
        in_turn.push(weir, raw);
        fresh_events.push(raw_pipeline(true).0);
    }
    let [[weir_thread, weir_all], [raw_thread, raw_all]] = cpu.map(|side| {
        let mut thread: Vec<Duration> = side.iter().map(|spent| spent.thread).collect();
        let mut all: Vec<Duration> = side.iter().map(|spent| spent.all).collect();
        [median(&mut thread), median(&mut all)]
    });
    let per_round = |time: Duration| micros(time) / f64::from(ROUNDS);
    let (weir, baseline) = in_turn.medians();
    report.add(Figure {
        backend: "cuda".into(),
        name: name.into(),
        unit: "us/round".into(),
        weir: per_round(weir),
        baseline: Some(per_round(baseline)),
        higher_is_better: false,
        baseline_is_raw: true,
        note: format!(
            "{}; CPU per round (median), calling thread: weir {:.2} us, raw {:.2} us; all threads: weir {:.2} us, raw {:.2} us; inserted event waits per run: weir {}, hand-placed raw {raw_waits} (expected {}); raw with an event made per wait: {:.2} us/round (median)",
            in_turn.describe(per_round, "us"),
            per_round(weir_thread),
            per_round(raw_thread),
            per_round(weir_all),
            per_round(raw_all),
            match waits.windows(2).all(|pair| pair[0] == pair[1]) {
                true => format!("{} in each run", waits[0]),
                false => format!("{waits:?}"),
            },
            2 * ROUNDS - 1,
            per_round(median(&mut fresh_events))
        ),
    });
    assert!(waits.iter().all(|&inserted| inserted == u64::from(2 * ROUNDS - 1)), "inserted waits {waits:?}");
}
