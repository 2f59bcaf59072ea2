//! The Kotlin package: natives, bindings, Maven tests, the installed
//! artifact and its consumer, and the Kotlin demo.

mod bundle;
mod install;
mod versions;

use std::path::{Path, PathBuf};

use crate::bindings::{self, Profile};
use crate::util::{root, run, Result};

pub use bundle::bundle;
pub use install::install;
pub use versions::check as check_versions;

/// The Maven project.
fn project() -> PathBuf {
    root().join("bindings/kotlin")
}

/// Where the generated Kotlin goes (a Maven source root, under `target/`).
pub(crate) fn generated_sources() -> PathBuf {
    project().join("target/generated-sources/uniffi")
}

/// Where the native library goes: a resource root, so the jar carries it
/// under JNA's platform folder.
fn generated_resources() -> PathBuf {
    project().join("target/generated-resources")
}

/// JNA's resource folder for this platform.
fn jna_platform() -> &'static str {
    if cfg!(all(target_os = "linux", target_arch = "x86_64")) {
        "linux-x86-64"
    } else if cfg!(all(target_os = "linux", target_arch = "aarch64")) {
        "linux-aarch64"
    } else if cfg!(all(target_os = "macos", target_arch = "aarch64")) {
        "darwin-aarch64"
    } else if cfg!(target_os = "macos") {
        "darwin-x86-64"
    } else {
        "win32-x86-64"
    }
}

/// Builds the native library for the suites, benchmarks and demos (with the
/// test hooks), generates the bindings and lays the library where Maven packs it.
pub fn prepare(profile: Profile) -> Result {
    lay_out(&bindings::native(profile)?)
}

/// Generates the bindings of `library` and lays it where Maven packs it.
fn lay_out(library: &Path) -> Result {
    bindings::generate("kotlin", library, &generated_sources())?;
    patch_generated()?;
    let platform = generated_resources().join(jna_platform());
    std::fs::create_dir_all(&platform).map_err(|e| format!("cannot create {}: {e}", platform.display()))?;
    let target = platform.join(bindings::library_file());
    std::fs::copy(library, &target)
        .map_err(|e| format!("cannot copy {} to {}: {e}", library.display(), target.display()))?;
    Ok(())
}

/// The build steps applied to the generated Kotlin: two fixes and one
/// missing capability that belong in UniFFI itself, kept here in one place.
/// UniFFI is pinned, so the anchors are stable; a missing anchor fails the
/// build instead of skipping, which is how an upgrade finds out which are
/// still needed. What is the binding's own choice (the fast `sync`,
/// `execute` and `executeAndWait`) is Kotlin in its sources instead, over
/// the generated calls renamed in uniffi.toml.
///
/// 1. A closed handle passed as an argument is refused. UniFFI 0.32 lowers an
///    object argument with `uniffiCloneHandle()`, which does not check that the
///    handle was destroyed: passing a closed `Buffer` to a call clones a freed
///    `Arc` and crashes the JVM. Lowering through `callWithHandle { it }` (the
///    guard every method call already uses) throws `IllegalStateException`.
/// 2. One call status per thread. UniFFI 0.32 allocates a JNA `Structure` for
///    the `RustCallStatus` of every call (native memory freed by JNA's one
///    cleaner thread, read and written reflectively around the call): most of
///    a trivial call's cost, and under sustained calls from a few threads more
///    garbage than that thread frees, until the heap is full. The calls take
///    the status as a plain `Pointer` instead, this thread's block from
///    `CallStatus`, which copies a failure out and leaves the block clear.
/// 3. Every object can lend its handle: `uniffiBeginBorrow` keeps it alive as
///    `callWithHandle` does and returns its own handle, without the cloning
///    call, until `uniffiEndBorrow`; for the JNI entry, which only borrows.
fn patch_generated() -> Result {
    /// Where a step applies: at exactly one place, or at every match (at least one).
    #[derive(Clone, Copy, PartialEq)]
    enum Matches {
        One,
        Every,
    }
    use Matches::{Every, One};
    const PATCHES: [(&str, Matches, &str, &str); 6] = [
        ("closed handle arguments", Every, "        return value.uniffiCloneHandle()\n", "        return value.callWithHandle { it }\n"),
        (
            "call status: checked calls",
            One,
            "callback: (UniffiRustCallStatus) -> U): U {\n    var status = UniffiRustCallStatus()\n    val return_value = callback(status)\n    uniffiCheckCallStatus(errorHandler, status)\n",
            "callback: (Pointer) -> U): U {\n    val status = CallStatus.get()\n    val return_value = callback(status)\n    if (CallStatus.failed(status)) uniffiCheckCallStatus(errorHandler, CallStatus.failure(status))\n",
        ),
        (
            "call status: plain calls",
            One,
            "private inline fun <U> uniffiRustCall(callback: (UniffiRustCallStatus) -> U): U {",
            "private inline fun <U> uniffiRustCall(callback: (Pointer) -> U): U {",
        ),
        ("call status: async completion", One, "completeFunc: (Long, UniffiRustCallStatus) -> F,", "completeFunc: (Long, Pointer) -> F,"),
        ("call status: native declarations", Every, "uniffi_out_err: UniffiRustCallStatus,", "uniffi_out_err: Pointer,"),
        ("lent handles", Every, "    internal inline fun <R> callWithHandle(block: (handle: Long) -> R): R {\n", LEND_HANDLE),
    ];
    /// Step 3's methods, before each object's `callWithHandle`: its counting, without the clone.
    const LEND_HANDLE: &str = "    internal fun uniffiBeginBorrow(): Long {
        if (handle == 0.toLong()) {
            throw InternalException(\"uniffiBeginBorrow() called on NoHandle object\")
        }
        do {
            val c = this.callCounter.get()
            if (c == 0L) {
                throw IllegalStateException(\"${this.javaClass.simpleName} object has already been destroyed\")
            }
            if (c == Long.MAX_VALUE) {
                throw IllegalStateException(\"${this.javaClass.simpleName} call counter would overflow\")
            }
        } while (! this.callCounter.compareAndSet(c, c + 1L))
        return handle
    }

    internal fun uniffiEndBorrow() {
        if (this.callCounter.decrementAndGet() == 0L) {
            cleanable?.clean()
        }
    }

    internal inline fun <R> callWithHandle(block: (handle: Long) -> R): R {
";
    let file = generated_sources().join("dev/weir/weir.kt");
    let mut text = std::fs::read_to_string(&file).map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    for (name, matches, anchor, replacement) in PATCHES {
        let found = text.matches(anchor).count();
        if found == 0 || (matches == One && found > 1) {
            return Err(format!(
                "{}: the '{name}' step found its anchor {found} times; did UniFFI change?",
                file.display()
            ));
        }
        text = text.replace(anchor, replacement);
    }
    // Nothing may still allocate a status of its own for a call.
    if let Some(at) = text.find("= UniffiRustCallStatus()") {
        return Err(format!(
            "{}: a call still allocates its status (at byte {at}); did UniFFI change?",
            file.display()
        ));
    }
    std::fs::write(&file, text).map_err(|e| format!("cannot write {}: {e}", file.display()))
}

/// `mvn` in batch mode, in the Maven project.
fn maven() -> std::process::Command {
    maven_in(&project())
}

/// `mvn` in batch mode, in the Maven project in `dir`.
fn maven_in(dir: &Path) -> std::process::Command {
    let mut command = std::process::Command::new("mvn");
    // `cargo run` puts target/*/ on the library path; JNA searches it before the
    // classpath, so without this Maven could load a stale library instead of the
    // one the jar carries.
    command.env_remove("LD_LIBRARY_PATH").env_remove("DYLD_FALLBACK_LIBRARY_PATH");
    command.args(["-B", "--no-transfer-progress", "-f"]).arg(dir.join("pom.xml"));
    command
}

/// Kotlin tests: natives, bindings, then `mvn verify` (JUnit 5 suites in
/// Kotlin and Java) on the debug library with the test hooks, which shares
/// its build with `cargo test` and keeps CI short; then the installed
/// artifact (release, no hooks) and the consumer project that depends on it.
pub fn test() -> Result {
    prepare(Profile::Debug)?;
    run(maven().arg("verify"))?;
    install::consumer()
}

/// The Kotlin demo: the chunked pipeline of the Rust demo, from coroutines.
pub fn demo(args: &[String]) -> Result {
    run_main("dev.weir.demo.DemoKt", args)
}

/// The Kotlin transformer example: the Rust example's block, from coroutines.
pub fn transformer(args: &[String]) -> Result {
    run_main("dev.weir.transformer.TransformerKt", args)
}

/// Runs `main_class` of the test sources with the release library.
fn run_main(main_class: &str, args: &[String]) -> Result {
    prepare(Profile::Release)?;
    run(maven().args(["-q", "-DskipTests", "package"]))?;
    run(maven().args([
        "-q",
        "exec:java",
        &format!("-Dexec.mainClass={main_class}"),
        "-Dexec.classpathScope=test",
        &format!("-Dexec.args={}", args.join(" ")),
    ]))
}

/// `cargo xtask bench --kotlin [--backend NAME]`: the Kotlin overhead of a
/// trivial call (`index()`), of a suspend round trip (`sync()` on an idle
/// stream, `executeAndWait` with a no-op kernel), of admitting one op and a
/// batch of 1 000, and the GB/s and memory of 256 MiB uploads and reads,
/// beside the same weir-ffi calls made from Rust in the same run.
pub fn bench(args: &[String]) -> Result {
    let backend = args.windows(2).find(|w| w[0] == "--backend").map_or("cpu", |w| w[1].as_str());
    let baselines = bindings::rust_baselines(backend)?;
    prepare(Profile::Release)?;
    run(maven().args(["-q", "-DskipTests", "package"]))?;
    run(maven().args([
        "-q",
        "exec:java",
        "-Dexec.mainClass=dev.weir.bench.BenchKt",
        "-Dexec.classpathScope=test",
        &format!("-Dexec.args=--backend {backend} {baselines}"),
    ]))
}
