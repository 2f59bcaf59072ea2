//! `cargo xtask install --swift --to DIR`: the Swift package users depend on.
//!
//! It writes DIR/Weir, a self-contained SwiftPM package named `Weir`:
//!
//! - `Package.swift`: `bindings/swift/install/Package.swift`, which links
//!   `lib/` beside itself and sets an rpath to it (no flags for consumers);
//! - `Sources/`: the module map, and the idiomatic layer of `bindings/swift`,
//!   with bindings generated from the installed library;
//! - `lib/libweir_ffi.so`: `weir-ffi` built in release, *without* the
//!   `test-support` feature (plus any `--features` given, e.g. `hip`).
//!
//! The development package (tests, demo) never uses this library, nor this one
//! the development package's test-support builds: the library is copied the
//! moment cargo has built it, and its bindings are checked to have no test hooks.

use std::fs;
use std::path::{Path, PathBuf};

use crate::bindings;
use crate::util::{cargo, root, run, target_dir, Result};

/// A line only the installed manifest has: what makes DIR/Weir ours to replace.
const MARKER: &str = "cargo xtask install --swift --to DIR";

/// `cargo xtask install --swift --to DIR [--features LIST]`.
pub fn command(to: &Path, features: Option<&str>) -> Result {
    let to = std::env::current_dir().map_err(|e| format!("no current directory: {e}"))?.join(to);
    let package = install(&to, features)?;
    eprintln!("swift: installed the Weir package in {}", package.display());
    eprintln!("swift: depend on it with .package(path: \"{}\")", package.display());
    Ok(())
}

/// Installs the package as `to`/Weir (replacing an earlier install); returns its path.
pub fn install(to: &Path, features: Option<&str>) -> Result<PathBuf> {
    let library = release_library(features)?;
    let staging = to.join("Weir.partial");
    remove_ours(&staging)?;
    // The library first, before any other build can replace it in target/release.
    copy(&library, &staging.join("lib").join(bindings::library_file()))?;
    let generated = root().join("target/bindings/swift-installed");
    super::generate(&staging.join("lib").join(bindings::library_file()), &generated)?;
    let swift =
        fs::read_to_string(generated.join("Weir.swift")).map_err(|e| format!("cannot read the bindings: {e}"))?;
    if swift.contains("func debugErrorProbe(") {
        return Err(format!("{} has test hooks: it is a test-support build", library.display()));
    }
    let dev = super::package();
    copy(&dev.join("install/Package.swift"), &staging.join("Package.swift"))?;
    for file in ["module.modulemap", "encoded.h"] {
        copy(&dev.join("Sources/WeirFFI").join(file), &staging.join("Sources/WeirFFI").join(file))?;
    }
    copy(&generated.join("WeirFFI.h"), &staging.join("Sources/WeirFFI/generated/WeirFFI.h"))?;
    copy(&generated.join("Weir.swift"), &staging.join("Sources/Weir/Generated/Weir.swift"))?;
    for source in swift_files(&dev.join("Sources/Weir"))? {
        let name = source.file_name().ok_or("a source without a name")?;
        copy(&source, &staging.join("Sources/Weir").join(name))?;
    }
    // The DocC catalog, so an IDE shows the package's documentation.
    let catalog = dev.join("Sources/Weir/Weir.docc");
    for page in fs::read_dir(&catalog).map_err(|e| format!("cannot list {}: {e}", catalog.display()))? {
        let page = page.map_err(|e| format!("cannot list {}: {e}", catalog.display()))?.path();
        let name = page.file_name().ok_or("a catalog page without a name")?;
        copy(&page, &staging.join("Sources/Weir/Weir.docc").join(name))?;
    }
    let package = to.join("Weir");
    remove_ours(&package)?;
    fs::rename(&staging, &package)
        .map_err(|e| format!("cannot move {} to {}: {e}", staging.display(), package.display()))?;
    Ok(package)
}

/// Builds `weir-ffi` in release without `test-support`; returns the library.
fn release_library(features: Option<&str>) -> Result<PathBuf> {
    if features.is_some_and(|list| list.split(',').any(|feature| feature.trim() == "test-support")) {
        return Err("the installed library never has test-support".to_owned());
    }
    let mut command = cargo();
    command.args(["build", "--quiet", "--release", "-p", "weir-ffi"]);
    if let Some(features) = features {
        command.args(["--features", features]);
    }
    run(&mut command)?;
    Ok(target_dir().join("release").join(bindings::library_file()))
}

/// The `.swift` files directly in `dir` (the hand-written layer, not `Generated/`).
fn swift_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let entries = fs::read_dir(dir).map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.is_file() && path.extension().is_some_and(|ext| ext == "swift"))
        .collect();
    files.sort();
    Ok(files)
}

fn copy(from: &Path, to: &Path) -> Result {
    if let Some(parent) = to.parent() {
        fs::create_dir_all(parent).map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    }
    fs::copy(from, to).map(|_| ()).map_err(|e| format!("cannot copy {} to {}: {e}", from.display(), to.display()))
}

/// Deletes `dir` if it is an install of ours (or a partial one); refuses anything else.
fn remove_ours(dir: &Path) -> Result {
    if !dir.exists() {
        return Ok(());
    }
    let manifest = fs::read_to_string(dir.join("Package.swift")).unwrap_or_default();
    let partial = dir.extension().is_some_and(|ext| ext == "partial");
    if !partial && !manifest.contains(MARKER) {
        return Err(format!("{} exists and is not an installed Weir package; not replacing it", dir.display()));
    }
    fs::remove_dir_all(dir).map_err(|e| format!("cannot remove {}: {e}", dir.display()))
}
