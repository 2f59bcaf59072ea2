//! `cargo xtask demo`: Weir's main job, on the CPU backend unless
//! `--backend NAME` says otherwise.
//!
//! A three-stage pipeline over three streams: a loader stream brings chunks
//! in, a compute stream transforms each chunk as soon as its load is done
//! (the scheduler inserts exactly the waits the data needs), and a reduce
//! stream accumulates the results. Every chunk's fence is awaited
//! concurrently, and the demo prints when each one resolved.

use std::time::{Duration, Instant};

use futures::executor::block_on;
use futures::future::join_all;
use weir_core::{Arg, BackendKind, Error, Grid, Kernel, Runtime};

const CHUNKS: usize = 8;
const WORDS: usize = 1 << 16;
/// How long each chunk's "I/O" takes.
const LOAD_LATENCY: Duration = Duration::from_millis(5);

/// A kernel that only takes time, standing in for I/O: a host sleep on the
/// CPU backend, a spin on the global timer in CUDA. Other backends skip it.
fn simulated_io() -> Kernel {
    const SPIN: &str = "extern \"C\" __global__ void simulated_io(unsigned int nanos) {
        unsigned long long start, now;
        asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(start));
        do { asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(now)); } while (now - start < nanos);
    }";
    Kernel::custom("simulated_io")
        .cpu(|_| {
            std::thread::sleep(LOAD_LATENCY);
            Ok(())
        })
        .cuda(SPIN, "simulated_io")
        .build()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let backend = args
        .windows(2)
        .find(|w| w[0] == "--backend")
        .and_then(|w| BackendKind::from_name(&w[1]))
        .unwrap_or(BackendKind::Cpu);
    let runtime = Runtime::open(backend)?;
    println!("weir demo on {} ({})", runtime.info().backend.name(), runtime.info().name);

    let (load, compute, reduce) = (runtime.new_stream()?, runtime.new_stream()?, runtime.new_stream()?);
    let total = reduce.zeros((WORDS * 4) as u64)?;
    let io = simulated_io();
    let start = Instant::now();
    let mut fences = Vec::new();
    for chunk in 0..CHUNKS {
        // Load: chunk i holds the value i everywhere, after a little I/O-like latency.
        let input = load.empty((WORDS * 4) as u64)?;
        match load.execute(&io, Grid::linear(1, 1), &[Arg::u32(LOAD_LATENCY.as_nanos() as u32)]) {
            Err(Error::Unsupported { .. }) => {}
            other => other?,
        }
        load.fill_f32(&input, chunk as f32)?;
        // Compute: y = 2·x + 1, waiting only for this chunk's load.
        let ones = compute.empty((WORDS * 4) as u64)?;
        compute.fill_f32(&ones, 1.0)?;
        compute.axpy(2.0, &input, &ones)?;
        // Reduce: total += y.
        reduce.axpy(1.0, &ones, &total)?;
        fences.push((chunk, compute.fence()?));
    }
    let admitted = start.elapsed();
    println!(
        "admitted {} ops in {:.2} ms; the scheduler inserted {} cross-stream waits",
        runtime.diagnostics().admitted_ops,
        admitted.as_secs_f64() * 1e3,
        runtime.diagnostics().inserted_waits
    );

    let resolved = block_on(join_all(
        fences.iter().map(|(chunk, fence)| async move { fence.wait_async().await.map(|()| (*chunk, start.elapsed())) }),
    ));
    for outcome in resolved {
        let (chunk, at) = outcome?;
        println!("  chunk {chunk}: compute fence resolved after {:7.2} ms", at.as_secs_f64() * 1e3);
    }
    let synced = Instant::now();
    block_on(reduce.sync())?;
    println!("  reduce stream synced {:.2} ms later", synced.elapsed().as_secs_f64() * 1e3);

    let expected: f32 = (0..CHUNKS).map(|i| 2.0 * i as f32 + 1.0).sum();
    let got = reduce.read_as::<f32>(&total)?;
    let correct = got.iter().all(|&v| v == expected);
    println!("total = {} everywhere: {}", expected, if correct { "correct" } else { "WRONG" });
    runtime.close()?;
    if correct {
        Ok(())
    } else {
        Err("the pipeline computed a wrong total".into())
    }
}
