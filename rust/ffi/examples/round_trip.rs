//! The Rust side of the Kotlin/Swift overhead benchmarks: the very weir-ffi
//! calls the bindings make, called or awaited from Rust (`futures::executor::block_on`),
//! so the difference is the foreign-language cost alone.
//!
//! Prints `--baseline NAME MICROS` pairs, median microseconds per call, ready to
//! hand to the Kotlin and Swift benchmarks. `--backend NAME` picks the backend
//! (cpu). Each figure is the median over `--processes N` fresh processes
//! (default 5; 1 measures here): one process's figures move by up to a
//! quarter with where its threads landed, and a binding's ratio is only as
//! steady as its baseline.

mod support;

use std::sync::Arc;
use std::time::Instant;

use futures::executor::block_on;
use weir_ffi::{Access, Arg, BuiltinOp, CpuKernelBody, ElementType, Grid, Kernel, KernelSource};

/// A CPU kernel body that does nothing: the four-buffer admission figure's kernel.
struct Nothing;

impl CpuKernelBody for Nothing {
    fn run(&self, _call: Arc<weir_ffi::CpuKernelCall>) -> Option<String> {
        None
    }
}

/// The four-buffer admission figure's kernel on wgpu, and on CUDA and HIP.
const FOUR_BUFFERS_WGSL: &str = "@group(0) @binding(0) var<storage, read> a: array<u32>;
@group(0) @binding(1) var<storage, read> b: array<u32>;
@group(0) @binding(2) var<storage, read> c: array<u32>;
@group(0) @binding(3) var<storage, read_write> d: array<u32>;
@compute @workgroup_size(1) fn main() { d[0] = a[0] + b[0] + c[0]; }";
const FOUR_BUFFERS_CUDA: &str = "extern \"C\" __global__ void four(const unsigned* a, const unsigned* b, const unsigned* c, unsigned* d) { d[0] = a[0] + b[0] + c[0]; }";

/// Ops in the batch figures.
const BATCH: u32 = 1000;

fn median_micros(iterations: usize, mut call: impl FnMut()) -> f64 {
    for _ in 0..iterations / 10 {
        call();
    }
    let mut samples: Vec<u128> = (0..iterations)
        .map(|_| {
            let start = Instant::now();
            call();
            start.elapsed().as_nanos()
        })
        .collect();
    samples.sort_unstable();
    samples[iterations / 2] as f64 / 1e3
}

/// Fresh processes whose figures' medians are printed, unless `--processes` says otherwise.
const PROCESSES: usize = 5;

fn main() -> Result<(), weir_ffi::WeirError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let processes = args
        .windows(2)
        // The last one given: a measuring process gets `--processes 1` after the caller's.
        .rfind(|w| w[0] == "--processes")
        .map_or(PROCESSES, |w| w[1].parse().unwrap_or_else(|_| panic!("--processes takes a count, not {}", w[1])));
    if processes > 1 {
        print_medians_of(processes, &args);
        return Ok(());
    }
    measure()
}

/// Runs this example in `processes` fresh processes, each measuring once,
/// and prints each figure's median in the same `--baseline NAME MICROS`
/// form, with every process's value on stderr.
fn print_medians_of(processes: usize, args: &[String]) {
    let this = std::env::current_exe().expect("this example's own path");
    let mut figures: Vec<(String, Vec<f64>)> = Vec::new();
    for _ in 0..processes {
        let output = std::process::Command::new(&this)
            .args(args)
            .args(["--processes", "1"])
            .stderr(std::process::Stdio::inherit())
            .output()
            .expect("a measuring process");
        assert!(output.status.success(), "a measuring process failed: {}", output.status);
        let printed = String::from_utf8_lossy(&output.stdout).into_owned();
        let words: Vec<&str> = printed.split_whitespace().collect();
        for pair in words.chunks(3) {
            let [flag, name, value] = pair else { panic!("a measuring process printed {printed:?}") };
            assert_eq!(*flag, "--baseline", "a measuring process printed {printed:?}");
            let value: f64 = value.parse().unwrap_or_else(|_| panic!("a measuring process printed {printed:?}"));
            match figures.iter_mut().find(|(known, _)| known == name) {
                Some((_, values)) => values.push(value),
                None => figures.push(((*name).to_owned(), vec![value])),
            }
        }
    }
    for (name, values) in &mut figures {
        values.sort_by(f64::total_cmp);
        eprintln!("round_trip: {name} across {processes} processes: {values:?}");
        print!("--baseline {name} {:.4} ", values[values.len() / 2]);
    }
    println!();
}

/// Measures every figure in this process and prints them.
fn measure() -> Result<(), weir_ffi::WeirError> {
    let runtime = support::open_from_args()?;
    let stream = runtime.default_stream();
    let kernel = Kernel::builtin(BuiltinOp::Delay);
    let index = median_micros(200_000, || {
        std::hint::black_box(std::hint::black_box(&stream).index());
    });
    let sync = median_micros(20_000, || {
        block_on(stream.sync(None)).expect("a measured call failed");
    });
    let paths_before = weir_core::wait_paths();
    let execute = median_micros(10_000, || {
        block_on(stream.execute_and_wait(kernel.clone(), Grid::default(), vec![Arg::U32 { value: 0 }], None))
            .expect("a measured call failed");
    });
    // Which way those waits went: what tells a process whose waits end late
    // which thread was late.
    let paths = weir_core::wait_paths().since(&paths_before);
    eprintln!(
        "round_trip: execute_and_wait {execute:.3} us; its waits: fences seen {}, blocked {}; events completed by \
         the probe {}, by a waiter spinning {}, blocking {}, beating the probe {}; the wake thread slept {} times",
        paths.fences_seen,
        paths.fences_blocked,
        paths.probes_completed,
        paths.waiters_spun,
        paths.waiters_blocked,
        paths.waiters_beat_probe,
        paths.wake_thread_slept,
    );
    // Admission of one small op (a fill of 1 KiB: one buffer; an add: three).
    let (a, b, c) = (
        stream.zeros(1024, ElementType::Bytes)?,
        stream.zeros(1024, ElementType::Bytes)?,
        stream.zeros(1024, ElementType::Bytes)?,
    );
    let fill = Kernel::builtin(BuiltinOp::FillU32);
    let add = Kernel::builtin(BuiltinOp::Add);
    let buffer = |buffer: &Arc<weir_ffi::Buffer>, access| Arg::Buffer { buffer: buffer.clone(), access };
    let admit_1 = median_micros(20_000, || {
        let args = vec![buffer(&a, Access::Write), Arg::U32 { value: 7 }];
        stream.execute(fill.clone(), Grid::default(), args).expect("a measured call failed");
    });
    block_on(stream.sync(None)).expect("a measured call failed");
    let admit_3 = median_micros(20_000, || {
        let args = vec![buffer(&a, Access::Read), buffer(&b, Access::Read), buffer(&c, Access::Write)];
        stream.execute(add.clone(), Grid::default(), args).expect("a measured call failed");
    });
    block_on(stream.sync(None)).expect("a measured call failed");
    // Four buffers: no built-in op takes them, so a custom kernel, tiny on
    // every backend (its CPU body does nothing).
    let d = stream.zeros(1024, ElementType::Bytes)?;
    let source = |code: &str, entry: &str| {
        Some(KernelSource { code: code.to_owned(), entry: entry.to_owned(), options: Vec::new() })
    };
    let four = Kernel::custom(
        "four_buffers".to_owned(),
        source(FOUR_BUFFERS_WGSL, "main"),
        source(FOUR_BUFFERS_CUDA, "four"),
        source(FOUR_BUFFERS_CUDA, "four"),
        Some(Arc::new(Nothing)),
        None,
        None,
    );
    let admit_4 = median_micros(20_000, || {
        let args = vec![
            buffer(&a, Access::Read),
            buffer(&b, Access::Read),
            buffer(&c, Access::Read),
            buffer(&d, Access::Write),
        ];
        stream.execute(four.clone(), Grid::default(), args).expect("a measured call failed");
    });
    block_on(stream.sync(None)).expect("a measured call failed");
    // On the CPU, that kernel's call on the worker, per op: a batch of
    // `BATCH` such ops admitted (untimed: the worker starts once the batch
    // is in), then the wait until the worker ran them all, which is their
    // calls (the body does nothing). Bindings call their own bodies.
    let is_cpu = runtime.info().backend == weir_ffi::Backend::Cpu;
    let kernel_calls = {
        // Each op: execute kernel 0, default grid, four arguments: buffers
        // 0, 1 and 2 read, buffer 3 written.
        let mut ops = Vec::with_capacity(BATCH as usize * 30);
        for _ in 0..BATCH {
            ops.extend([0, 0, 0, 0, 0, 0, 4, 0, 0, 0]);
            for (slot, access) in [(0, 0), (1, 0), (2, 0), (3, 1)] {
                ops.extend([0, slot, 0, 0, 0, access]);
            }
        }
        ops
    };
    let buffers = vec![a.clone(), b.clone(), c.clone(), d.clone()];
    let mut calls: Vec<u128> = (0..if is_cpu { 220 } else { 0 })
        .map(|_| {
            stream.submit_batch(buffers.clone(), vec![four.clone()], &kernel_calls).expect("a measured call failed");
            let start = Instant::now();
            block_on(stream.sync(None)).expect("a measured call failed");
            start.elapsed().as_nanos()
        })
        .skip(20)
        .collect();
    calls.sort_unstable();
    let kernel_call = calls.get(calls.len() / 2).map(|&nanos| nanos as f64 / 1e3 / f64::from(BATCH));
    // A batch of 1 000 such fills, per op, as the bindings hand it over
    // (building the ops and admitting them; the stream is synced between
    // batches, untimed, so no batch queues behind the last).
    let encode = || {
        // Each op in the batch encoding: execute kernel 0, default grid,
        // two arguments: buffer 0 written, u32 i.
        let mut ops = Vec::with_capacity(BATCH as usize * 21);
        for i in 0..BATCH {
            ops.extend([0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1]);
            ops.extend(i.to_le_bytes());
        }
        ops
    };
    stream.submit_batch(vec![a.clone()], vec![fill.clone()], &encode())?;
    // Median µs per op of 200 rounds of `BATCH` ops (after 20 untimed),
    // the stream synced, untimed, after each.
    let per_op_of_blocks = |round: &dyn Fn()| {
        let mut samples: Vec<u128> = (0..220)
            .map(|_| {
                let start = Instant::now();
                round();
                let elapsed = start.elapsed().as_nanos();
                block_on(stream.sync(None)).expect("a measured call failed");
                elapsed
            })
            .skip(20)
            .collect();
        samples.sort_unstable();
        samples[samples.len() / 2] as f64 / 1e3 / f64::from(BATCH)
    };
    let batch_per_op = per_op_of_blocks(&|| {
        stream.submit_batch(vec![a.clone()], vec![fill.clone()], &encode()).expect("a measured call failed");
    });
    // The same 1 000 fills admitted one by one, timed as a block like the
    // batch: what a batch saves. A median of single calls leaves out the
    // calls that pay for the device's queue (wgpu submits and applies
    // backpressure every so many ops), which every batch of 1 000 includes.
    let one_by_one_per_op = per_op_of_blocks(&|| {
        for i in 0..BATCH {
            let args = vec![buffer(&a, Access::Write), Arg::U32 { value: i }];
            stream.execute(fill.clone(), Grid::default(), args).expect("a measured call failed");
        }
    });
    if let Some(kernel_call) = kernel_call {
        print!("--baseline cpu_kernel_call_4_buffers {kernel_call:.4} ");
    }
    println!(
        "--baseline index {index:.4} --baseline sync_idle {sync:.4} --baseline execute_and_wait_noop {execute:.4} \
         --baseline admit_1_buffer {admit_1:.4} --baseline admit_3_buffers {admit_3:.4} --baseline admit_4_buffers {admit_4:.4} \
         --baseline batch_1000_per_op {batch_per_op:.4} --baseline one_by_one_1000_per_op {one_by_one_per_op:.4}"
    );
    runtime.shutdown()
}
