//! `cargo xtask bundle --kotlin`: the Kotlin and Java JUnit suites, built
//! here, for a machine with a GPU and no JDK.
//!
//! The bundle is `kotlin.tar.gz` and `run-kotlin.sh`: a `jlink`ed Java
//! runtime, the package jar (a release library with the test hooks and the
//! CUDA and wgpu backends), the test classes, their dependency jars and
//! JUnit's console launcher, and the Rust baselines of the Kotlin bench.
//! Copy the folder over, then `sh run-kotlin.sh` there; set `LD_LIBRARY_PATH`
//! to where the CUDA libraries (and a Vulkan loader) are,
//! `WEIR_REQUIRE_BACKENDS` to make a missing backend fail, and
//! `WEIR_BENCH_BACKEND` to run `cargo xtask bench --kotlin` there too.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::{lay_out, maven, project, versions};
use crate::bindings::{self, Natives, Profile};
use crate::bundle::Staged;
use crate::util::{run, Result};

/// JUnit's console launcher, of the JUnit platform the suites' `junit.version` goes with.
const CONSOLE_LAUNCHER: &str = "org.junit.platform:junit-platform-console-standalone";

/// The dependency plugin, named in full (Maven's default binding is old).
const DEPENDENCY_PLUGIN: &str = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1";

pub fn bundle(out: Option<PathBuf>) -> Result {
    let staged = Staged::new(out, "kotlin")?;
    let (staging, lib) = (&staged.staging, &staged.lib);

    // Release keeps the library small; the suites need the hooks.
    lay_out(&bindings::build_native(Profile::Release, Natives::GpuTests)?)?;
    // Compiled afresh: a class whose source is gone must not ride along in the tests' jar.
    let classes = project().join("target/test-classes");
    if classes.exists() {
        std::fs::remove_dir_all(&classes).map_err(|e| format!("cannot empty {}: {e}", classes.display()))?;
    }
    run(maven().args(["-DskipTests", "package"]))?;
    let version = versions::project_version()?;
    let jar = project().join(format!("target/weir-{version}.jar"));
    std::fs::copy(&jar, lib.join(format!("weir-{version}.jar")))
        .map_err(|e| format!("cannot copy {}: {e}", jar.display()))?;
    run(Command::new("jar")
        .arg("--create")
        .arg("--file")
        .arg(lib.join("weir-tests.jar"))
        .arg("-C")
        .arg(project().join("target/test-classes"))
        .arg("."))?;
    // The suites' dependencies; JUnit itself comes with the console launcher.
    run(maven().args([
        &format!("{DEPENDENCY_PLUGIN}:copy-dependencies"),
        "-DincludeScope=test",
        "-DexcludeGroupIds=org.junit.jupiter,org.junit.platform,org.opentest4j,org.apiguardian",
        &format!("-DoutputDirectory={}", lib.display()),
    ]))?;
    let platform = junit_platform_version(&versions::pom_property("junit.version")?)?;
    run(maven().args([
        &format!("{DEPENDENCY_PLUGIN}:copy"),
        &format!("-Dartifact={CONSOLE_LAUNCHER}:{platform}"),
        &format!("-DoutputDirectory={}", lib.display()),
    ]))?;

    // The bench's Rust baselines, measured on the GPU machine beside it.
    bindings::bundle_baselines(&staging.join("bin"))?;

    let modules = java_modules(lib)?;
    run(Command::new("jlink")
        .args(["--add-modules", &modules])
        .args(["--strip-debug", "--no-man-pages", "--no-header-files", "--compress=2", "--output"])
        .arg(staging.join("runtime")))?;

    staged.pack(RUN)
}

/// The JUnit platform version of a JUnit Jupiter version (5.x.y goes with 1.x.y).
fn junit_platform_version(jupiter: &str) -> Result<String> {
    match jupiter.split_once('.') {
        Some(("5", rest)) => Ok(format!("1.{rest}")),
        _ => Err(format!("junit.version {jupiter}: which JUnit platform goes with it?")),
    }
}

/// The Java modules the jars in `lib` use (jdeps), `jdk.unsupported`, which
/// JNA and kotlinx.coroutines reach reflectively, and `jdk.zipfs`, with which
/// JUnit scans the test jar.
fn java_modules(lib: &Path) -> Result<String> {
    let jars: Vec<_> = std::fs::read_dir(lib)
        .map_err(|e| format!("cannot list {}: {e}", lib.display()))?
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "jar"))
        .collect();
    let output = Command::new("jdeps")
        .args(["--print-module-deps", "--ignore-missing-deps", "--multi-release", "17"])
        .args(&jars)
        .output()
        .map_err(|e| format!("cannot run jdeps: {e}"))?;
    if !output.status.success() {
        return Err(format!("jdeps failed: {}", String::from_utf8_lossy(&output.stderr)));
    }
    // Warnings come first, on stdout too; the list is the last line.
    let stdout = String::from_utf8_lossy(&output.stdout);
    let found = stdout.lines().map(str::trim).rfind(|line| !line.is_empty()).unwrap_or("java.base").to_owned();
    eprintln!("xtask: the suites use the Java modules {found}");
    Ok(format!("{found},jdk.unsupported,jdk.zipfs"))
}

/// Unpacks the bundle, then runs the suites as `mvn verify` does: everything
/// but the heap tests (Kotlin's and Java's), then those in a JVM of their
/// own at `-Xmx128m`; then,
/// with `WEIR_BENCH_BACKEND` set, the bench as `cargo xtask bench --kotlin`
/// runs it (the Rust baselines first, on the same backend), and with
/// `WEIR_DEMO_BACKEND` set, the demo as `cargo xtask demo --kotlin` runs it.
/// Extra arguments go to both launcher runs (a `--select-method`, `--details=flat`).
const RUN: &str = r#"#!/bin/sh
# Made by `cargo xtask bundle --kotlin`. Runs the Kotlin and Java JUnit suites
# with the bundled Java runtime on every backend in WEIR_TEST_BACKENDS
# (default here: cpu,wgpu,cuda); WEIR_REQUIRE_BACKENDS=cuda,wgpu makes a
# backend that cannot open a failure instead of a skip.
set -u
cd "$(dirname "$0")"
[ -d kotlin ] || tar -xzf kotlin.tar.gz
export WEIR_TEST_BACKENDS="${WEIR_TEST_BACKENDS:-cpu,wgpu,cuda}"
java=kotlin/runtime/bin/java
launcher="org.junit.platform.console.ConsoleLauncher execute --disable-banner --fail-if-no-tests --details=tree --details-theme=ascii"
status=0
echo "== suites (backends: $WEIR_TEST_BACKENDS; required: ${WEIR_REQUIRE_BACKENDS:-none})"
"$java" -ea -cp 'kotlin/lib/*' $launcher --scan-class-path kotlin/lib/weir-tests.jar \
    --exclude-classname '.*HeapTest$' --reports-dir reports/suites "$@" || status=1
echo "== bounded heap (-Xmx128m)"
"$java" -ea -Xmx128m -cp 'kotlin/lib/*' $launcher --select-class dev.weir.HeapTest --select-class dev.weir.java.JavaHeapTest \
    --reports-dir reports/heap "$@" || status=1
if [ -n "${WEIR_BENCH_BACKEND:-}" ]; then
    echo "== bench (backend: $WEIR_BENCH_BACKEND)"
    baselines="$(kotlin/bin/round_trip --backend "$WEIR_BENCH_BACKEND") $(kotlin/bin/bulk --backend "$WEIR_BENCH_BACKEND")" || status=1
    "$java" -cp 'kotlin/lib/*' dev.weir.bench.BenchKt \
        --backend "$WEIR_BENCH_BACKEND" $baselines || status=1
fi
if [ -n "${WEIR_DEMO_BACKEND:-}" ]; then
    echo "== demo (backend: $WEIR_DEMO_BACKEND)"
    "$java" -cp 'kotlin/lib/*' dev.weir.demo.DemoKt --backend "$WEIR_DEMO_BACKEND" || status=1
fi
exit $status
"#;
