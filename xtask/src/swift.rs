//! The Swift package: natives, bindings, SwiftPM build and tests, the Swift demo.
//!
//! `bindings/swift` is the development package (tests, demo) over a
//! `test-support` build of `weir-ffi`. Before SwiftPM runs, xtask builds it,
//! generates its Swift bindings (UniFFI library mode, shared with Kotlin in
//! `bindings.rs`) and lays them out, untracked by git:
//!
//! - `Sources/WeirFFI/generated/WeirFFI.h`: the C header (the module map beside it is in git);
//! - `Sources/Weir/Generated/Weir.swift`: the generated Swift, patched (`patch.rs`);
//! - `.native/debug/` (tests) or `.native/release/` (demo, benchmarks): the
//!   shared library of that profile, linked with `-L` and found through an rpath,
//!   so a command never links the other profile's library.
//!
//! What users depend on is the installed package (`install.rs`): a release
//! library without test hooks. `examples/swift-consumer` is built and run
//! against it by `cargo xtask test --swift` (`consumer.rs`).
//!
//! Files are rewritten only when their contents change, so SwiftPM rebuilds
//! only what changed. Swift runs on PATH, else in a cached chroot (`toolchain.rs`).

mod bundle;
mod consumer;
mod install;
mod patch;
mod toolchain;

use std::fs;
use std::path::{Path, PathBuf};

use crate::bindings::{self, Profile};
use crate::util::{root, Result};
use toolchain::Toolchain;

pub use bundle::bundle;
pub use install::command as install;

/// The SwiftPM package.
fn package() -> PathBuf {
    root().join("bindings/swift")
}

/// Where the development package links the native library of `profile` from.
fn native_dir(profile: Profile) -> PathBuf {
    package().join(".native").join(match profile {
        Profile::Debug => "debug",
        Profile::Release => "release",
    })
}

/// Generates the Swift bindings of `library` into `out` and applies the build step.
fn generate(library: &Path, out: &Path) -> Result {
    bindings::generate("swift", library, out)?;
    let swift = out.join("Weir.swift");
    let text = fs::read_to_string(&swift).map_err(|e| format!("cannot read {}: {e}", swift.display()))?;
    let text = patch::lower_camel_error_cases(&text).map_err(|e| format!("{}: {e}", swift.display()))?;
    fs::write(&swift, text).map_err(|e| format!("cannot write {}: {e}", swift.display()))
}

/// Builds the test-support native library of `profile`, generates the
/// bindings and lays both out in the development package.
fn prepare(profile: Profile) -> Result {
    lay_out(profile, &bindings::native(profile)?)
}

/// Generates the bindings of `library` and lays both out in the development
/// package as the library of `profile`.
fn lay_out(profile: Profile, library: &Path) -> Result {
    let generated = root().join("target/bindings/swift");
    generate(library, &generated)?;
    let package = package();
    update(&generated.join("WeirFFI.h"), &package.join("Sources/WeirFFI/generated/WeirFFI.h"))?;
    update(&generated.join("Weir.swift"), &package.join("Sources/Weir/Generated/Weir.swift"))?;
    update(library, &native_dir(profile).join(bindings::library_file()))
}

/// Copies `from` to `to` unless `to` already has the same contents.
fn update(from: &Path, to: &Path) -> Result {
    let contents = fs::read(from).map_err(|e| format!("cannot read {}: {e}", from.display()))?;
    if fs::read(to).is_ok_and(|existing| existing == contents) {
        return Ok(());
    }
    if let Some(parent) = to.parent() {
        fs::create_dir_all(parent).map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    }
    fs::write(to, contents).map_err(|e| format!("cannot write {}: {e}", to.display()))
}

/// Compiler and linker flags for every SwiftPM command (the same flags each
/// time, or SwiftPM rebuilds): Swift 6 mode is set in Package.swift; complete
/// concurrency checking, warnings as errors, and the native library.
fn flags(profile: Profile) -> Vec<String> {
    let native = native_dir(profile).display().to_string();
    let swiftc = ["-strict-concurrency=complete", "-warnings-as-errors"];
    let linker = ["-L", &native, "-rpath", &native];
    let swiftc = swiftc.into_iter().flat_map(|flag| ["-Xswiftc", flag]);
    let linker = linker.into_iter().flat_map(|flag| ["-Xlinker", flag]);
    swiftc.chain(linker).map(str::to_owned).collect()
}

/// `swift WORDS… FLAGS… REST…`'s arguments, linking the library of `profile`.
fn arguments(profile: Profile, words: &[&str], rest: &[String]) -> Vec<String> {
    words.iter().map(|word| word.to_string()).chain(flags(profile)).chain(rest.iter().cloned()).collect()
}

/// `WEIR_*` settings (WEIR_REQUIRE_BACKENDS, …) passed on to Swift.
fn environment() -> Vec<(String, String)> {
    std::env::vars().filter(|(name, _)| name.starts_with("WEIR_")).collect()
}

/// Fails if `output` reports a warning: the package must build without any.
fn no_warnings(output: &str) -> Result {
    let warnings: Vec<&str> = output.lines().filter(|line| line.contains("warning:")).collect();
    if warnings.is_empty() {
        Ok(())
    } else {
        Err(format!("the Swift build has {} warning(s):\n{}", warnings.len(), warnings.join("\n")))
    }
}

/// `swift build` (library, demo, tests) with the checks, then `swift test`,
/// against the debug test-support library (the build `cargo test` and Kotlin
/// already made); then the consumer example against an installed package.
pub fn test() -> Result {
    prepare(Profile::Debug)?;
    let toolchain = Toolchain::find()?;
    let package = package();
    let env = environment();
    let started = std::time::Instant::now();
    let build = arguments(Profile::Debug, &["build", "--build-tests"], &[]);
    no_warnings(&toolchain.swift(&package, &build, &env)?)?;
    eprintln!("swift: built without warnings in {:.1?}", started.elapsed());
    // Serial: the timing checks (prompt cancellation) must not compete with
    // the 10 000-Task test for the two-thread cooperative pool.
    toolchain.swift(&package, &arguments(Profile::Debug, &["test", "--skip-build", "--no-parallel"], &[]), &env)?;
    eprintln!("swift: build and tests took {:.1?}", started.elapsed());
    let installed = consumer::build_and_run(&toolchain)?;
    archive(&toolchain, &installed, &crate::util::target_dir().join("docs/swift"))
}

/// A DocC archive of the installed package's `Weir` module in `out` (a
/// release library without the test hooks, as users get it).
pub fn docs(out: &Path) -> Result {
    let toolchain = Toolchain::find()?;
    let package = install::install(&crate::util::target_dir().join("swift-docs"), None)?;
    archive(&toolchain, &package, out)
}

/// A DocC archive of `package`'s `Weir` module in `out`, for static hosting:
/// its catalog `Sources/Weir/Weir.docc` over the symbol graph of a build of
/// the module; a link the catalog or a doc comment gets wrong fails it.
fn archive(toolchain: &Toolchain, package: &Path, out: &Path) -> Result {
    let started = std::time::Instant::now();
    let graphs = package.join(".build/symbol-graphs");
    crate::docs::reset(&graphs)?;
    // docc makes the archive's folder but not its parent (a fresh target dir has none).
    if let Some(parent) = out.parent() {
        std::fs::create_dir_all(parent).map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    }
    let graph_dir = graphs.display().to_string();
    let mut build: Vec<String> = ["build", "--target", "Weir"].map(str::to_owned).to_vec();
    for flag in ["-emit-symbol-graph", "-emit-symbol-graph-dir", graph_dir.as_str()] {
        build.extend(["-Xswiftc".to_owned(), flag.to_owned()]);
    }
    toolchain.swift(package, &build, &[])?;
    let catalog = package.join("Sources/Weir/Weir.docc").display().to_string();
    let out_dir = out.display().to_string();
    let convert = [
        "convert",
        &catalog,
        "--additional-symbol-graph-dir",
        &graph_dir,
        "--output-path",
        &out_dir,
        "--fallback-display-name",
        "Weir",
        "--fallback-bundle-identifier",
        "dev.weir.Weir",
        "--transform-for-static-hosting",
        "--warnings-as-errors",
    ]
    .map(str::to_owned);
    toolchain.docc(package, &convert)?;
    eprintln!("swift: DocC archive in {} ({:.1?})", out.display(), started.elapsed());
    Ok(())
}

/// The Swift demo (`Sources/WeirDemo`): the chunked pipeline of the Rust demo, from Swift Tasks.
pub fn demo(args: &[String]) -> Result {
    run_release(&[&["weir-demo".to_owned()][..], args].concat())
}

/// The Swift transformer example (`Sources/WeirTransformer`): the Rust example's block, from Swift Tasks.
pub fn transformer(args: &[String]) -> Result {
    run_release(&[&["weir-transformer".to_owned()][..], args].concat())
}

/// Builds the package in release and runs `product_and_args[0]` with the rest.
fn run_release(product_and_args: &[String]) -> Result {
    prepare(Profile::Release)?;
    let toolchain = Toolchain::find()?;
    toolchain.swift(
        &package(),
        &arguments(Profile::Release, &["run", "-c", "release"], product_and_args),
        &environment(),
    )?;
    Ok(())
}

/// `cargo xtask bench --swift [--backend NAME]`: the Swift cost of a trivial
/// call (`index()`) and of an async round trip (`sync()` on an idle stream,
/// `executeAndWait` of a no-op), with and without the cancellation token the
/// plain calls set up, of admitting one op and a batch of 1 000, and the GB/s
/// and memory of 256 MiB uploads and reads, beside the same weir-ffi calls
/// made from Rust in the same run (`bindings::rust_baselines`). Both use
/// release builds with `test-support` (the no-op is the delay op).
pub fn bench(args: &[String]) -> Result {
    let backend = args.windows(2).find(|w| w[0] == "--backend").map_or("cpu", |w| w[1].as_str());
    let baselines = bindings::rust_baselines(backend)?;
    let product_and_args: Vec<String> = ["weir-bench", "--backend", backend]
        .into_iter()
        .map(str::to_owned)
        .chain(baselines.split_whitespace().map(str::to_owned))
        .collect();
    run_release(&product_and_args)
}
