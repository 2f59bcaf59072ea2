//! The Rust side: tests on every available backend, the demo, the benchmarks.

use crate::util::{cargo, run, Result};

/// Every Rust test, on every backend compiled in.
pub fn test() -> Result {
    run(cargo().args(["test", "--workspace", "--exclude", "xtask", "--exclude", "weir-bindgen"]))
}

/// The demo: a multi-stream pipeline on the default backend.
pub fn demo(args: &[String]) -> Result {
    run(cargo().args(["run", "--release", "--quiet", "-p", "weir-core", "--example", "demo", "--"]).args(args))
}

/// The benchmarks.
pub fn bench(args: &[String]) -> Result {
    run(cargo().args(["run", "--release", "--quiet", "-p", "weir-core", "--example", "bench", "--"]).args(args))
}
