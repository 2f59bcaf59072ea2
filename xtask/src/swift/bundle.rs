//! `cargo xtask bundle --swift`: the Swift test suite, built here, for a
//! machine with a GPU and no Swift.
//!
//! The bundle is `swift.tar.gz` and `run-swift.sh`: the suite's test binary
//! (release, against a release library with the test hooks and the CUDA and
//! wgpu backends, which it carries) and every shared library the binary
//! loads, taken from the toolchain that built it (the Swift runtime,
//! Foundation, swift-testing, the C++ runtime, and glibc with its loader, so
//! the host's own C library, however old, plays no part). `run-swift.sh`
//! starts the binary through the bundled loader; the bench and its Rust
//! baselines come along. Copy the folder over, then
//! `sh run-swift.sh` there; set `LD_LIBRARY_PATH` to where the CUDA libraries
//! (and a Vulkan loader) are, and `WEIR_REQUIRE_BACKENDS` to make a missing
//! backend fail.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::toolchain::Toolchain;
use super::{arguments, environment, lay_out, no_warnings, package};
use crate::bindings::{self, Natives, Profile};
use crate::bundle::Staged;
use crate::util::{run, Result};

/// The test binary SwiftPM links for the package's tests.
const TEST_BINARY: &str = "WeirPackageTests.xctest";

/// The bench's executable (`cargo xtask bench --swift`), which the release build makes too.
const BENCH_BINARY: &str = "weir-bench";

/// The demo's executable (`cargo xtask demo --swift`), made by the release build too.
const DEMO_BINARY: &str = "weir-demo";

/// The transformer example's executable (`cargo xtask transformer --swift`).
const TRANSFORMER_BINARY: &str = "weir-transformer";

/// The name the bundled dynamic loader goes by in `lib/`.
const LOADER: &str = "ld-linux.so";

pub fn bundle(out: Option<PathBuf>) -> Result {
    let staged = Staged::new(out, "swift")?;
    let (staging, lib) = (&staged.staging, &staged.lib);

    // Release keeps the library and the binary small; the suite needs the hooks.
    let library = bindings::build_native(Profile::Release, Natives::GpuTests)?;
    lay_out(Profile::Release, &library)?;
    let toolchain = Toolchain::find()?;
    let build = arguments(Profile::Release, &["build", "-c", "release", "--build-tests"], &[]);
    no_warnings(&toolchain.swift(&package(), &build, &environment())?)?;
    copy(&library, &lib.join(bindings::library_file()))?;
    // The suite's binary, the bench's, the demo's and the example's, with what each loads. Debug
    // sections are most of an unstripped binary's weight; the code stays as built.
    let mut strip = Command::new("strip");
    strip.arg("--strip-debug");
    for name in [TEST_BINARY, BENCH_BINARY, DEMO_BINARY, TRANSFORMER_BINARY] {
        let binary = package().join(".build/release").join(name);
        copy(&binary, &staging.join(name))?;
        for (name, path) in runtime_libraries(&toolchain, &binary)? {
            copy(&toolchain.host_path(&path), &lib.join(name))?;
        }
        strip.arg(staging.join(name));
    }
    bindings::bundle_baselines(&staging.join("bin"))?;
    for entry in std::fs::read_dir(lib).map_err(|e| format!("cannot list {}: {e}", lib.display()))? {
        strip.arg(entry.map_err(|e| format!("cannot list {}: {e}", lib.display()))?.path());
    }
    run(&mut strip)?;

    staged.pack(RUN)
}

/// The shared libraries `binary` loads (its dependencies, all the way down,
/// as `ldd` resolves them where the toolchain runs), each with the name it
/// goes by in `lib/`: its soname, the dynamic loader [`LOADER`]. The Weir
/// library is not among them: the bundle carries its own build.
fn runtime_libraries(toolchain: &Toolchain, binary: &Path) -> Result<Vec<(String, PathBuf)>> {
    let listing = toolchain.run_quietly("ldd", &[binary.display().to_string()])?;
    let mut libraries = Vec::new();
    let mut loader = false;
    for line in listing.lines().map(str::trim) {
        // `libname.so => /path/libname.so (0x…)`, or the loader as `/lib64/ld-linux-x86-64.so.2 (0x…)`.
        let (name, path) = match line.split_once(" => ") {
            Some((name, rest)) => (name.to_owned(), rest.split(" (").next().unwrap_or_default()),
            None if line.starts_with('/') => {
                loader = true;
                (LOADER.to_owned(), line.split(" (").next().unwrap_or_default())
            }
            None => continue, // the vDSO, which the kernel provides
        };
        if path == "not found" || path.is_empty() {
            return Err(format!("{} needs {name}, which ldd cannot find:\n{listing}", binary.display()));
        }
        if name != bindings::library_file() {
            libraries.push((name, PathBuf::from(path)));
        }
    }
    if !loader {
        return Err(format!("ldd named no dynamic loader for {}:\n{listing}", binary.display()));
    }
    Ok(libraries)
}

fn copy(from: &Path, to: &Path) -> Result {
    std::fs::copy(from, to).map(drop).map_err(|e| format!("cannot copy {} to {}: {e}", from.display(), to.display()))
}

/// Unpacks the bundle, then runs the swift-testing suite through the bundled
/// loader, with `lib/` (then `LD_LIBRARY_PATH`, for the GPU drivers) as the
/// library path, one test at a time as `cargo xtask test --swift` does (the
/// prompt-cancellation checks must not share the pool with the 10 000-Task
/// test); then, with `WEIR_BENCH_BACKEND` set, the bench as `cargo xtask
/// bench --swift` runs it (the Rust baselines first, on the same backend),
/// and with `WEIR_DEMO_BACKEND` set, the demo as `cargo xtask demo --swift`
/// runs it. Extra arguments go to the test binary (`--filter BatchTests`).
const RUN: &str = r#"#!/bin/sh
# Made by `cargo xtask bundle --swift`. Runs the Swift test suite with the
# bundled Swift runtime on every backend in WEIR_TEST_BACKENDS (default here:
# cpu,wgpu,cuda); WEIR_REQUIRE_BACKENDS=cuda,wgpu makes a backend that cannot
# open a failure instead of a skip. LD_LIBRARY_PATH: where libcuda/libnvrtc
# and the Vulkan loader are, if not in the system's library path.
set -u
cd "$(dirname "$0")"
[ -d swift ] || tar -xzf swift.tar.gz
export WEIR_TEST_BACKENDS="${WEIR_TEST_BACKENDS:-cpu,wgpu,cuda}"
lib="$PWD/swift/lib"
bundled() { "$lib/ld-linux.so" --library-path "$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"; }
status=0
echo "== Swift suite (backends: $WEIR_TEST_BACKENDS; required: ${WEIR_REQUIRE_BACKENDS:-none})"
bundled swift/WeirPackageTests.xctest --testing-library swift-testing --no-parallel "$@" || status=1
if [ -n "${WEIR_BENCH_BACKEND:-}" ]; then
    echo "== bench (backend: $WEIR_BENCH_BACKEND)"
    baselines="$(swift/bin/round_trip --backend "$WEIR_BENCH_BACKEND") $(swift/bin/bulk --backend "$WEIR_BENCH_BACKEND")" || status=1
    bundled swift/weir-bench --backend "$WEIR_BENCH_BACKEND" $baselines || status=1
fi
if [ -n "${WEIR_DEMO_BACKEND:-}" ]; then
    echo "== demo (backend: $WEIR_DEMO_BACKEND)"
    bundled swift/weir-demo --backend "$WEIR_DEMO_BACKEND" || status=1
fi
exit $status
"#;
