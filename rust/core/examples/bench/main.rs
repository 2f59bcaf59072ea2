//! `cargo xtask bench`: Weir beside the raw backend, measured in the same run.
//!
//! Prints one JSON line per figure, then a readable table, and draws the
//! figures beside raw as `target/weir-bench.svg`.
//! `--backend NAME` (repeatable) limits the run to some backends; `--only
//! PART` (repeatable) to some parts of them: `scaling`; on the CPU
//! `admission`, `fence`, `sparse`, `pipeline`; on wgpu `fence`,
//! `queued`, `launches`, `fills`, `compiles`, `own-device`, `live`; on CUDA `memset`,
//! `fence`, `awaited`, `launches`, `replay`, `pipeline`, `pipeline-device-paced`,
//! `sgemm`, `transformer` (a
//! quick run while iterating on one figure). `--processes N` (default 15):
//! how many fresh processes measure each figure that sets a Weir thread
//! against a raw loop on the main thread (see `report::across_processes`);
//! 1 measures it here. 15, because the processes' ratios fall into two
//! clusters by where their threads landed, and on one GPU host the median
//! of 7 still moved from 1.02 to 1.17 between three runs of one build.

mod cpu;
// The transformer example's model, for its raw CUDA baseline (`transformer`).
#[cfg(feature = "cuda")]
mod cuda;
mod report;
mod scaling;
#[cfg(feature = "cuda")]
#[allow(dead_code)]
#[path = "../transformer.rs"]
mod transformer;
#[cfg(feature = "wgpu")]
mod wgpu;

use report::Report;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let wanted: Vec<&str> = args.windows(2).filter(|w| w[0] == "--backend").map(|w| w[1].as_str()).collect();
    let wants = |name: &str| wanted.is_empty() || wanted.contains(&name);
    let parts: Vec<&str> = args.windows(2).filter(|w| w[0] == "--only").map(|w| w[1].as_str()).collect();
    let part = |name: &str| parts.is_empty() || parts.contains(&name);
    #[cfg_attr(not(feature = "cuda"), allow(unused_variables))]
    let processes = match args.windows(2).find(|w| w[0] == "--processes").map(|w| w[1].parse::<usize>()) {
        None => 15,
        Some(Ok(processes)) if processes > 0 => processes,
        Some(_) => panic!("--processes takes a count of at least 1"),
    };
    let mut report = Report::default();
    if wants("cpu") {
        cpu::run(&mut report, &part);
        if part("scaling") {
            scaling::run(&mut report, weir_core::BackendKind::Cpu);
        }
    }
    #[cfg(feature = "wgpu")]
    if wants("wgpu") {
        // First: wgpu's cost follows the most buffers ever alive, which its own bench raises last.
        if part("scaling") {
            scaling::run(&mut report, weir_core::BackendKind::Wgpu);
        }
        wgpu::run(&mut report, &part);
    }
    #[cfg(feature = "cuda")]
    if wants("cuda") {
        cuda::run(&mut report, &part, processes);
        if part("scaling") {
            scaling::run(&mut report, weir_core::BackendKind::Cuda);
        }
    }
    report.print_table();
    let picture = std::path::Path::new("target").join("weir-bench.svg");
    match std::fs::create_dir_all("target").and_then(|()| std::fs::write(&picture, report.plot())) {
        Ok(()) => println!("the figures as a picture: {}", picture.display()),
        Err(error) => println!("the figures' picture could not be written to {}: {error}", picture.display()),
    }
}
