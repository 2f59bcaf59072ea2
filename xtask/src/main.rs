//! `cargo xtask`: the one entry point for building natives, generating
//! bindings, testing, benchmarking and running the demos.

mod bindings;
mod bundle;
mod docs;
mod kotlin;
mod rust;
mod swift;
mod util;

use std::process::ExitCode;

const USAGE: &str = "usage: cargo xtask <command>

commands:
  test [--lint|--rust|--kotlin|--swift]
                  every check of the project: lints (rustfmt, clippy, rustdoc, warnings
                  as errors; the Maven and Gradle builds' versions in step), Rust tests
                  (all available backends, then the loom model check of the completion
                  cell), Kotlin (the suites, then the installed artifact and the consumer
                  project), Swift
  demo [--kotlin|--swift] [--backend NAME]
                  the main job: a multi-stream pipeline, timed fence by fence
  install --swift --to DIR [--features LIST]
                  the Swift package for apps: DIR/Weir, a release weir-ffi without test hooks
                  and its bindings; depend on it with .package(path: \"DIR/Weir\")
  bindings kotlin|swift [--release] [--out DIR]
                  build the native library and generate one language's bindings
  install --kotlin
                  the release library without test hooks, its bindings and the jar,
                  sources jar and Dokka javadoc jar of dev.weir:weir into the local
                  Maven repository
  soak [--ops N] [--threads T] [--backend NAME]
                  a long mixed run (default 10^6 ops from 4 threads on cpu) with stream,
                  buffer, fence and cancel churn: a JSON line and a table row every
                  tenth; fails unless threads, live counters and RSS end flat
  bundle [--out DIR]
                  the Rust suites and benchmarks as stripped binaries with a run.sh, for a
                  machine with a GPU and no Rust (default DIR: .device/bundle)
  bundle --kotlin [--out DIR]
                  the Kotlin and Java JUnit suites with a jlinked Java runtime and a
                  run-kotlin.sh, for a machine with a GPU and no JDK (default DIR:
                  .device/bundle-kotlin)
  docs [--out DIR]
                  the API documentation side by side (default DIR: target/docs): rustdoc
                  in rust/, Dokka's HTML in kotlin/, a DocC archive in swift/
  bench [--rust|--kotlin|--swift] [--backend NAME]
                  benchmarks beside their raw baselines: JSON lines, then a table;
                  Rust on every backend, then the Kotlin and Swift call overhead (cpu by default)

environment:
  WEIR_REQUIRE_BACKENDS=cpu,wgpu   fail (instead of skip) when a listed backend is unavailable";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("test") => match args.get(1).map(String::as_str) {
            Some("--lint") => rust::lint().and_then(|()| kotlin::check_versions()),
            Some("--rust") => rust::test(),
            Some("--kotlin") => kotlin::test(),
            Some("--swift") => swift::test(),
            _ => rust::lint()
                .and_then(|()| kotlin::check_versions())
                .and_then(|()| rust::test())
                .and_then(|()| kotlin::test())
                .and_then(|()| swift::test()),
        },
        Some("demo") => match args.get(1).map(String::as_str) {
            Some("--kotlin") => kotlin::demo(&args[2..]),
            Some("--swift") => swift::demo(&args[2..]),
            _ => rust::demo(&args[1..]),
        },
        Some("bindings") => bindings::command(&args[1..]),
        Some("install") => match args.get(1).map(String::as_str) {
            Some("--kotlin") => kotlin::install(),
            Some("--swift") => swift::install(&args[1..]),
            _ => Err("usage: cargo xtask install --kotlin | --swift --to DIR".to_owned()),
        },
        Some("soak") => rust::soak(&args[1..]),
        Some("bundle") => match args.get(1).map(String::as_str) {
            Some("--kotlin") => kotlin::bundle(&args[2..]),
            Some("--swift") => swift::bundle(&args[2..]),
            _ => bundle::bundle(&args[1..]),
        },
        Some("docs") => docs::command(&args[1..]),
        Some("bench") => match args.get(1).map(String::as_str) {
            Some("--rust") => rust::bench(&args[2..]),
            Some("--kotlin") => kotlin::bench(&args[2..]),
            Some("--swift") => swift::bench(&args[2..]),
            _ => {
                rust::bench(&args[1..]).and_then(|()| kotlin::bench(&args[1..])).and_then(|()| swift::bench(&args[1..]))
            }
        },
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("xtask: {message}");
            ExitCode::FAILURE
        }
    }
}
