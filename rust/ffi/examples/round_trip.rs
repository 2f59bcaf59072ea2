//! The Rust side of the Kotlin/Swift overhead benchmarks: the very weir-ffi
//! calls the bindings make, called or awaited from Rust (`futures::executor::block_on`),
//! so the difference is the foreign-language cost alone.
//!
//! Prints `--baseline NAME MICROS` pairs, median microseconds per call, ready to
//! hand to the Kotlin benchmark. `--backend NAME` picks the backend (cpu).

use std::time::Instant;

use futures::executor::block_on;
use weir_ffi::{Arg, Backend, BuiltinOp, Grid, Kernel, WeirRuntime};

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

fn main() -> Result<(), weir_ffi::WeirError> {
    let args: Vec<String> = std::env::args().collect();
    let name = args.windows(2).find(|w| w[0] == "--backend").map_or("cpu", |w| w[1].as_str());
    let backend = match name {
        "wgpu" => Backend::Wgpu,
        "cuda" => Backend::Cuda,
        "hip" => Backend::Hip,
        "auto" => Backend::Auto,
        _ => Backend::Cpu,
    };
    let runtime = WeirRuntime::open(backend)?;
    let stream = runtime.default_stream();
    let kernel = Kernel::builtin(BuiltinOp::Delay);
    let index = median_micros(200_000, || {
        std::hint::black_box(std::hint::black_box(&stream).index());
    });
    let sync = median_micros(20_000, || {
        let _ = block_on(stream.sync(None));
    });
    let execute = median_micros(10_000, || {
        let _ = block_on(stream.execute_and_wait(kernel.clone(), Grid::default(), vec![Arg::U32 { value: 0 }], None));
    });
    println!(
        "--baseline index {index:.4} --baseline sync_idle {sync:.4} --baseline execute_and_wait_noop {execute:.4}"
    );
    runtime.shutdown()
}
