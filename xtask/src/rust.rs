//! The Rust side: lints, tests on every available backend, the model check
//! of the completion cell, the demo, the benchmarks and the soak.

use crate::util::{cargo, run, target_dir, Result};

/// The test hooks (gates, the delay op, the faulty scheduler) the suites and
/// benchmarks use; applications build without them.
pub const TEST_HOOKS: &str = "weir-core/test-support,weir-ffi/test-support";

/// Formatting, clippy over every target with the test hooks, and the docs
/// (with the hooks, whose backend module the suites and benchmarks use; the
/// private items' too; then the default features a user sees), all with
/// warnings as errors.
pub fn lint() -> Result {
    run(cargo().args(["fmt", "--all", "--", "--check"]))?;
    run(cargo().args(["clippy", "--workspace", "--all-targets", "--features", TEST_HOOKS, "--", "-D", "warnings"]))?;
    // The demo and the soak are what a user runs: they build without the hooks.
    run(cargo().args(["clippy", "-p", "weir-core", "--examples", "--", "-D", "warnings"]))?;
    run(cargo()
        .args(["doc", "--no-deps", "-p", "weir-core", "--features", "test-support"])
        .env("RUSTDOCFLAGS", "-D warnings"))?;
    // The private items' docs too: a link there that no longer resolves
    // misleads the next reader as much as a public one.
    run(cargo()
        .args(["doc", "--no-deps", "--document-private-items", "--features", TEST_HOOKS])
        .args(["-p", "weir-device", "-p", "weir-core", "-p", "weir-ffi"])
        .env("RUSTDOCFLAGS", "-D warnings"))?;
    // Last, so that the docs left in the target directory are the user's.
    run(cargo()
        .args(["doc", "--no-deps", "-p", "weir-device", "-p", "weir-core", "-p", "weir-ffi"])
        .env("RUSTDOCFLAGS", "-D warnings"))
}

/// The loom model checks of the completion cell, a lane and a lane's
/// progress (`rust/core/tests/loom_cell.rs`, `loom_lane.rs`, `loom_progress.rs`): every
/// interleaving, in release, CPU backend only. `--cfg loom` changes every
/// crate's flags, so it builds in a target directory of its own rather than
/// invalidating the main build.
pub fn loom() -> Result {
    let rustflags = match std::env::var("RUSTFLAGS") {
        Ok(flags) if !flags.trim().is_empty() => format!("{flags} --cfg loom"),
        _ => "--cfg loom".to_owned(),
    };
    run(cargo()
        .args(["test", "-p", "weir-core", "--no-default-features", "--release"])
        .args(["--test", "loom_cell", "--test", "loom_lane", "--test", "loom_progress"])
        .env("RUSTFLAGS", rustflags)
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env("CARGO_TARGET_DIR", target_dir().join("loom")))
}

/// Every Rust test, on every backend compiled in; with ROCm's headers (at
/// `HIP_PATH`, or the system's under `/usr`), the device layer's HIP unit
/// tests (its code-object reader among them: hiprtc compiles without a GPU),
/// the HIP backend's suite and the conformance suite built with it;
/// then the model checks of the completion cell, a lane and its progress.
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
    // This tool's own checks (the generated Swift's one patch against what
    // UniFFI writes, the build files' versions in step, the line count).
    run(cargo().args(["test", "-p", "xtask"]))?;
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
    match crate::setup::hip_path() {
        Some(hip) => {
            // The device layer's HIP driver: its code-object reader and hiprtc.
            run(cargo().env("HIP_PATH", &hip).args(["test", "-p", "weir-device", "--features", "hip,test-support", "--lib"]))?;
            run(cargo().env("HIP_PATH", hip).args([
                "test",
                "-p",
                "weir-core",
                "--features",
                "hip,test-support",
                "--lib",
                "--test",
                "hip_backend",
                "--test",
                "conformance",
            ]))?
        }
        None => eprintln!(
            "xtask: HIP tests skipped (no hip/hip_runtime_api.h under HIP_PATH or /usr: `apt-get install libamdhip64-dev`)"
        ),
    }
    loom()
}

/// The demo: a multi-stream pipeline on the default backend.
pub fn demo(args: &[String]) -> Result {
    run(cargo().args(["run", "--release", "--quiet", "-p", "weir-core", "--example", "demo", "--"]).args(args))
}

/// The transformer example: a GPT-2 block served to several requests at once.
pub fn transformer(args: &[String]) -> Result {
    run(cargo().args(["run", "--release", "--quiet", "-p", "weir-core", "--example", "transformer", "--"]).args(args))
}

/// `cargo run` of the benchmarks, in release with the test hooks.
fn bench_command() -> std::process::Command {
    let mut command = cargo();
    command.args([
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
    ]);
    command
}

/// The benchmarks.
pub fn bench(args: &[String]) -> Result {
    run(bench_command().args(args))
}

/// The Kotlin or Swift transformer example's arguments, with the raw
/// single-stream version's rate added (`--raw-tokens-per-second R`) when
/// they ask for CUDA at full size: the Rust bench's `transformer` part
/// measures it just before (printing Rust's figures beside it), so the
/// bindings' figures stand beside raw from the same command. A JVM or a
/// Swift program cannot run the raw version in its own process.
pub fn with_raw_transformer_rate(args: &[String]) -> Result<Vec<String>> {
    let cuda = args.windows(2).any(|pair| pair[0] == "--backend" && pair[1] == "cuda");
    if !cuda || args.iter().any(|arg| arg == "--small") {
        return Ok(args.to_vec());
    }
    let output = bench_command()
        .args(["--backend", "cuda", "--only", "transformer", "--processes", "1"])
        .output()
        .map_err(|e| format!("cannot run the raw transformer: {e}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    print!("{stdout}");
    // `{"backend":"cuda","bench":"transformer block (GPT-2 small), Weir one stream",…,"baseline":R,…}`
    let raw = stdout
        .lines()
        .find(|line| line.contains("\"bench\":\"transformer block (GPT-2 small), Weir one stream\""))
        .and_then(|line| line.split_once("\"baseline\":"))
        .and_then(|(_, rest)| rest.split(',').next())
        .and_then(|value| value.parse::<f64>().ok());
    let mut args = args.to_vec();
    match raw {
        Some(rate) => args.extend(["--raw-tokens-per-second".to_owned(), format!("{rate:.1}")]),
        None => eprintln!(
            "xtask: no raw transformer figure (is CUDA there?): {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ),
    }
    Ok(args)
}

/// The soak (`rust/core/examples/soak.rs`), in release.
pub fn soak(args: &[String]) -> Result {
    run(cargo().args(["run", "--release", "--quiet", "-p", "weir-core", "--example", "soak", "--"]).args(args))
}
