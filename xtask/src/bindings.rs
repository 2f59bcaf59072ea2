//! The native library and the generated bindings, shared by Kotlin and Swift.
//!
//! `weir-ffi` is built without UniFFI's `cli` feature; the bindings come from
//! `rust/bindgen` (UniFFI library mode), run on the built library. Generated
//! sources go into build directories, never into git.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::util::{cargo, root, run, target_dir, Result};

/// How the native library is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    Debug,
    Release,
}

impl Profile {
    fn dir(self) -> &'static str {
        match self {
            Profile::Debug => "debug",
            Profile::Release => "release",
        }
    }
}

/// The file name of the shared library on this platform.
pub fn library_file() -> &'static str {
    if cfg!(target_os = "macos") {
        "libweir_ffi.dylib"
    } else if cfg!(target_os = "windows") {
        "weir_ffi.dll"
    } else {
        "libweir_ffi.so"
    }
}

/// What the native library is built for: this decides its features.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Natives {
    /// The suites, benchmarks and demos: with the `test-support` hooks.
    Tests,
    /// An installed artifact (`cargo xtask install`): what applications get,
    /// no test hooks.
    Installed,
    /// The GPU bundle (`cargo xtask bundle --kotlin`): the suites' hooks and
    /// every backend a GPU machine may have.
    GpuTests,
}

impl Natives {
    fn features(self) -> &'static str {
        match self {
            Natives::Tests => "test-support",
            Natives::Installed => "",
            Natives::GpuTests => "cuda,wgpu,test-support",
        }
    }
}

/// Builds `weir-ffi` (cdylib + staticlib) for the suites, benchmarks and
/// demos (with the test hooks) and returns the shared library's path.
pub fn native(profile: Profile) -> Result<PathBuf> {
    build_native(profile, Natives::Tests)
}

/// Builds `weir-ffi` (cdylib + staticlib) for `purpose` and returns the shared
/// library's path. Builds of one profile share `target/<profile>/`, so the
/// library there is whichever was built last: copy it before building another.
pub fn build_native(profile: Profile, purpose: Natives) -> Result<PathBuf> {
    let mut command = cargo();
    command.args(["build", "--quiet", "-p", "weir-ffi"]);
    let features = purpose.features();
    if !features.is_empty() {
        command.args(["--features", features]);
    }
    if profile == Profile::Release {
        command.arg("--release");
    }
    run(&mut command)?;
    let library = target_dir().join(profile.dir()).join(library_file());
    if !library.is_file() {
        return Err(format!("{} was not built", library.display()));
    }
    Ok(library)
}

/// Generates the `language` bindings of `library` into `out_dir` (emptied first).
pub fn generate(language: &str, library: &Path, out_dir: &Path) -> Result {
    if out_dir.exists() {
        std::fs::remove_dir_all(out_dir).map_err(|e| format!("cannot empty {}: {e}", out_dir.display()))?;
    }
    let config = root().join("uniffi.toml");
    run(cargo().args(["run", "--quiet", "-p", "weir-bindgen", "--", language]).arg(library).arg(out_dir).arg(config))
}

/// `cargo xtask bindings kotlin|swift [--release] [--out DIR]`: builds the
/// native library and generates one language's bindings.
pub fn command(language: &str, profile: Profile, out: Option<PathBuf>) -> Result {
    let out = match (language, out) {
        // The Maven project's build: bindings, the waker-thread step and the library resource.
        ("kotlin", None) => return crate::kotlin::prepare(profile),
        (_, Some(out)) => root().join(out),
        (_, None) => root().join("target/bindings/swift"),
    };
    let library = native(profile)?;
    generate(language, &library, &out)?;
    eprintln!("{language} bindings of {} in {}", library.display(), out.display());
    Ok(())
}

/// The weir-ffi examples that measure the Rust side of the Kotlin and Swift benchmarks.
const BASELINES: [&str; 2] = ["round_trip", "bulk"];

/// The Rust side of the Kotlin and Swift benchmarks, measured now on
/// `backend`: the very weir-ffi calls the bindings make, from Rust
/// (`rust/ffi/examples/round_trip.rs`: per-call costs; `bulk.rs`: 256 MiB
/// uploads and reads), as `--baseline NAME VALUE` arguments for the
/// benchmarks. Release builds with `test-support` (the no-op is the delay op).
pub fn rust_baselines(backend: &str) -> Result<String> {
    let mut baselines = Vec::new();
    for example in BASELINES {
        let output = cargo()
            .current_dir(root())
            .args(["run", "--release", "--quiet", "-p", "weir-ffi", "--features", "test-support"])
            .args(["--example", example, "--", "--backend", backend])
            .output()
            .map_err(|e| format!("cannot run the Rust baseline {example}: {e}"))?;
        if !output.status.success() {
            return Err(format!("the Rust baseline {example} failed: {}", String::from_utf8_lossy(&output.stderr)));
        }
        baselines.push(String::from_utf8_lossy(&output.stdout).trim().to_owned());
    }
    Ok(baselines.join(" "))
}

/// Builds the Rust baselines of the Kotlin and Swift benchmarks (release,
/// `test-support`, every backend weir-core builds by default) and copies them,
/// stripped, into `into`, for a bundle: there they print the same
/// `--baseline NAME VALUE` arguments as [`rust_baselines`] does here.
pub fn bundle_baselines(into: &Path) -> Result {
    let mut build = cargo();
    build.args(["build", "--release", "--quiet", "-p", "weir-ffi", "--features", "test-support"]);
    for example in BASELINES {
        build.args(["--example", example]);
    }
    run(&mut build)?;
    std::fs::create_dir_all(into).map_err(|e| format!("cannot create {}: {e}", into.display()))?;
    for example in BASELINES {
        let (from, to) = (target_dir().join("release/examples").join(example), into.join(example));
        std::fs::copy(&from, &to).map_err(|e| format!("cannot copy {}: {e}", from.display()))?;
        run(Command::new("strip").arg(&to))?;
    }
    Ok(())
}
