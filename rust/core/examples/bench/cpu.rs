//! CPU backend figures, each beside the raw backend driven by hand.

use std::time::{Duration, Instant};

use futures::executor::block_on;
use weir_core::backend::cpu::{CpuBackend, CpuMemory};
use weir_core::backend::{direct, Backend, Command, SignalKind, Span};
use weir_core::{Arg, BackendKind, ElementType, Grid, Kernel, Runtime};

use crate::report::{cpu_time, median, micros, Figure, Report};

const ADMISSIONS: usize = 20_000;
const WAKE_UPS: usize = 2_000;
const PIPELINE_STEPS: usize = 5_000;

fn span(memory: &CpuMemory, len: u64) -> Span<&CpuMemory> {
    Span { buffer: memory, offset: 0, len }
}

/// Per-op time on the submitting thread: Weir's admission vs the raw enqueue.
fn admission(report: &mut Report, buffers: usize) {
    let runtime = Runtime::open(BackendKind::Cpu).expect("cpu");
    let stream = runtime.default_stream();
    let owned: Vec<_> = (0..buffers).map(|_| stream.zeros(ElementType::Bytes, 64).expect("zeros")).collect();
    let noop = Kernel::custom("noop").cpu(|_| Ok(())).build();
    let args: Vec<Arg> = owned.iter().map(Arg::read_write).collect();
    let start = Instant::now();
    for _ in 0..ADMISSIONS {
        stream.execute(&noop, Grid::linear(1, 1), &args).expect("execute");
    }
    let weir = start.elapsed();
    stream.fence().and_then(|f| f.wait()).expect("sync");
    runtime.close().expect("close");

    let raw = CpuBackend::new();
    let raw_stream = raw.create_stream(0).expect("stream");
    let memories: Vec<_> = (0..buffers).map(|_| raw.allocate(64).expect("allocate")).collect();
    let custom = noop.as_custom().expect("a custom kernel").clone();
    let start = Instant::now();
    for _ in 0..ADMISSIONS {
        let args = memories
            .iter()
            .map(|m| weir_core::backend::KernelArg::Buffer(span(m, 64), weir_core::Access::ReadWrite))
            .collect();
        // SAFETY: the memory outlives the run; each stream's work completes before it is dropped.
        unsafe {
            direct::submit(
                &raw,
                &raw_stream,
                Command::Custom { kernel: custom.clone(), grid: Grid::linear(1, 1), args },
            )
        }
        .expect("enqueue");
    }
    let baseline = start.elapsed();
    let done = direct::completion(1);
    raw.signal(&raw_stream, done.clone(), SignalKind::Fence).expect("signal");
    done.wait().expect("raw sync");
    let per_op = |d: Duration| micros(d) / ADMISSIONS as f64;
    report.add(Figure::beside(
        "cpu",
        &format!("admission per op, {buffers} buffers"),
        "us",
        per_op(weir),
        per_op(baseline),
        false,
        "submitting thread; raw = backend enqueue without scheduling",
    ));
}

/// One trivial op, then a fence awaited on the calling thread and woken by the worker.
fn fence_wake_up(report: &mut Report) {
    let runtime = Runtime::open(BackendKind::Cpu).expect("cpu");
    let stream = runtime.default_stream();
    let mut weir: Vec<Duration> = (0..WAKE_UPS)
        .map(|_| {
            let start = Instant::now();
            stream.delay(Duration::ZERO).expect("delay");
            block_on(stream.sync()).expect("sync");
            start.elapsed()
        })
        .collect();
    runtime.close().expect("close");

    let raw = CpuBackend::new();
    let raw_stream = raw.create_stream(0).expect("stream");
    let mut baseline: Vec<Duration> = (0..WAKE_UPS)
        .map(|_| {
            let start = Instant::now();
            // SAFETY: the memory outlives the run; each stream's work completes before it is dropped.
            unsafe { direct::submit(&raw, &raw_stream, Command::Delay { duration: Duration::ZERO }) }.expect("delay");
            let done = direct::completion(1);
            raw.signal(&raw_stream, done.clone(), SignalKind::Fence).expect("signal");
            done.wait().expect("wait");
            start.elapsed()
        })
        .collect();
    report.add(Figure::beside(
        "cpu",
        "fence wake-up latency (median)",
        "us",
        micros(median(&mut weir)),
        micros(median(&mut baseline)),
        false,
        "a zero delay, then weir: sync().await on block_on; raw: signal + blocking wait",
    ));
}

/// Producer on one stream, consumer on another, one chunk per step.
fn pipeline(report: &mut Report) {
    let runtime = Runtime::open(BackendKind::Cpu).expect("cpu");
    let (producer, consumer) = (runtime.new_stream().expect("stream"), runtime.new_stream().expect("stream"));
    let (chunk, out) = (
        producer.zeros(ElementType::Bytes, 4096).expect("zeros"),
        consumer.zeros(ElementType::Bytes, 4096).expect("zeros"),
    );
    let start = Instant::now();
    for step in 0..PIPELINE_STEPS {
        producer.fill_u32(&chunk, step as u32).expect("fill");
        consumer.copy(&chunk, &out).expect("copy");
    }
    runtime.fence().and_then(|f| f.wait()).expect("sync");
    let weir = start.elapsed();
    let waits = runtime.diagnostics().inserted_waits;
    runtime.close().expect("close");

    let raw = CpuBackend::new();
    let (p, c) = (raw.create_stream(0).expect("stream"), raw.create_stream(1).expect("stream"));
    let (chunk, out) = (raw.allocate(4096).expect("allocate"), raw.allocate(4096).expect("allocate"));
    let start = Instant::now();
    for step in 0..PIPELINE_STEPS {
        // By hand: fill after the previous copy read the chunk, copy after the fill.
        let read_done = raw.record_event(&c).expect("event");
        raw.wait_event(&p, &read_done).expect("wait");
        // SAFETY: the memory outlives the run; each stream's work completes before it is dropped.
        unsafe { direct::submit(&raw, &p, Command::Fill { dst: span(&chunk, 4096), word: step as u32 }) }
            .expect("fill");
        let written = raw.record_event(&p).expect("event");
        raw.wait_event(&c, &written).expect("wait");
        // SAFETY: the memory outlives the run; each stream's work completes before it is dropped.
        unsafe { direct::submit(&raw, &c, Command::Copy { src: span(&chunk, 4096), dst: span(&out, 4096) }) }
            .expect("copy");
    }
    let done = direct::completion(2);
    raw.signal(&p, done.clone(), SignalKind::Fence).expect("signal");
    raw.signal(&c, done.clone(), SignalKind::Fence).expect("signal");
    done.wait().expect("raw sync");
    let baseline = start.elapsed();
    let rate = |d: Duration| PIPELINE_STEPS as f64 / d.as_secs_f64();
    report.add(Figure::beside(
        "cpu",
        "two-stream pipeline throughput",
        "steps/s",
        rate(weir),
        rate(baseline),
        true,
        &format!("{waits} waits inserted for {PIPELINE_STEPS} steps (2 per step expected, the first free)"),
    ));
}

pub fn run(report: &mut Report, part: &dyn Fn(&str) -> bool) {
    if part("admission") {
        for buffers in [0, 1, 4] {
            admission(report, buffers);
        }
    }
    if part("fence") {
        fence_wake_up(report);
    }
    if part("sparse") {
        sparse_ops(report);
    }
    if part("pipeline") {
        pipeline(report);
    }
}

/// What an idle worker's linger costs and buys: one zero delay every `gap`,
/// then its fence awaited, in wall time per op and in CPU time (every
/// thread of the process) per op; beside a bare worker thread on a channel,
/// which sleeps as soon as its queue is empty.
fn sparse_ops(report: &mut Report) {
    const OPS: u32 = 1_000;
    for gap in [Duration::ZERO, Duration::from_micros(200)] {
        let runtime = Runtime::open(BackendKind::Cpu).expect("cpu");
        let stream = runtime.default_stream();
        let timed = |op: &mut dyn FnMut()| {
            let (mut latencies, cpu_before) = (Vec::new(), cpu_time());
            for _ in 0..OPS {
                let start = Instant::now();
                while start.elapsed() < gap {
                    std::thread::sleep(gap / 4);
                }
                let start = Instant::now();
                op();
                latencies.push(start.elapsed());
            }
            (median(&mut latencies), (cpu_time() - cpu_before) / OPS)
        };
        let (weir_latency, weir_cpu) = timed(&mut || {
            stream.delay(Duration::ZERO).expect("delay");
            block_on(stream.sync()).expect("sync");
        });
        runtime.close().expect("close");
        let (jobs, queue) = std::sync::mpsc::channel::<std::sync::mpsc::Sender<()>>();
        let worker = std::thread::spawn(move || queue.into_iter().for_each(|done| done.send(()).unwrap_or(())));
        let (raw_latency, raw_cpu) = timed(&mut || {
            let (done, finished) = std::sync::mpsc::channel();
            jobs.send(done).expect("send");
            finished.recv().expect("recv");
        });
        drop(jobs);
        let _ = worker.join();
        let every = format!("one op every {} us", gap.as_micros());
        report.add(Figure::beside(
            "cpu",
            &format!("sparse ops, {every}: latency (median)"),
            "us",
            micros(weir_latency),
            micros(raw_latency),
            false,
            "a zero delay, then sync() on block_on; raw: a bare worker on a channel that sleeps when idle",
        ));
        report.add(Figure::beside(
            "cpu",
            &format!("sparse ops, {every}: CPU time per op"),
            "us",
            micros(weir_cpu),
            micros(raw_cpu),
            false,
            "every thread of the process; an idle Weir worker lingers (yielding) about as long as its recent idle spells, 50 us at most, while they are short",
        ));
    }
}
