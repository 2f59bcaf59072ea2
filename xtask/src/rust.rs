//! The Rust side: tests on every available backend, the demo, the benchmarks.

use crate::util::{cargo, run, Result};

/// The test hooks (gates, the delay op, the faulty scheduler) the suites and
/// benchmarks use; applications build without them.
pub const TEST_HOOKS: &str = "weir-core/test-support,weir-ffi/test-support";

/// Every Rust test, on every backend compiled in; with ROCm's headers at
/// `HIP_PATH`, the HIP backend's tests and the conformance suite built with it.
pub fn test() -> Result {
    run(cargo().args([
        "test",
        "--workspace",
        "--exclude",
        "xtask",
        "--exclude",
        "weir-bindgen",
        "--features",
        TEST_HOOKS,
    ]))?;
    // Which backends the suite ran on and which it skipped, and why.
    run(cargo().args([
        "test",
        "-p",
        "weir-core",
        "--features",
        "test-support",
        "--test",
        "conformance",
        "backends_report",
        "--",
        "--show-output",
    ]))?;
    match std::env::var_os("HIP_PATH") {
        Some(hip) if std::path::Path::new(&hip).join("include/hip/hip_runtime_api.h").is_file() => run(cargo().args([
            "test",
            "-p",
            "weir-core",
            "--features",
            "hip,test-support",
            "--test",
            "hip_backend",
            "--test",
            "conformance",
        ])),
        _ => {
            eprintln!("xtask: HIP tests skipped (set HIP_PATH to a ROCm install with hip/hip_runtime_api.h)");
            Ok(())
        }
    }
}

/// The demo: a multi-stream pipeline on the default backend.
pub fn demo(args: &[String]) -> Result {
    run(cargo().args(["run", "--release", "--quiet", "-p", "weir-core", "--example", "demo", "--"]).args(args))
}

/// The benchmarks.
pub fn bench(args: &[String]) -> Result {
    run(cargo()
        .args([
            "run",
            "--release",
            "--quiet",
            "-p",
            "weir-core",
            "--features",
            "test-support",
            "--example",
            "bench",
            "--",
        ])
        .args(args))
}
