//! `examples/swift-consumer`, built and run as a user would: against the
//! installed package, with a plain `swift build`, no flags and no library path.

use std::fs;
use std::path::{Path, PathBuf};

use super::toolchain::Toolchain;
use crate::util::{root, Result};

/// The example project (a SwiftPM package outside the bindings).
fn project() -> PathBuf {
    root().join("examples/swift-consumer")
}

/// Installs the package into the example's `Dependencies/`, as its README
/// says, builds the example, runs it (it checks its own result) and checks
/// that the binary finds its library in the installed package, not in the
/// development package's builds. Returns the installed package.
pub fn build_and_run(toolchain: &Toolchain) -> Result<PathBuf> {
    let project = project();
    let started = std::time::Instant::now();
    let installed = super::install::install(&project.join("Dependencies"), None)?;
    let output = toolchain.swift(&project, &["build".to_owned()], &[])?;
    super::no_warnings(&output)?;
    let binary = project.join(".build/debug/SwiftConsumer");
    let bytes = fs::read(&binary).map_err(|e| format!("cannot read {}: {e}", binary.display()))?;
    let contains = |text: &str| bytes.windows(text.len()).any(|window| window == text.as_bytes());
    // The rpath names the installed lib/ folder; nothing may point at the
    // development package's libraries (debug or test-support builds).
    let lib = installed.join("lib").display().to_string();
    if !contains(&lib) {
        return Err(format!("{} has no rpath to {lib}", binary.display()));
    }
    let development = super::package().join(".native").display().to_string();
    if contains(&development) {
        return Err(format!("{} refers to {development}", binary.display()));
    }
    toolchain.swift(&project, &["run".to_owned(), "--skip-build".to_owned(), "SwiftConsumer".to_owned()], &[])?;
    int_literals_refused(toolchain, &project)?;
    eprintln!("swift: the consumer example built and ran against {} in {:.1?}", installed.display(), started.elapsed());
    Ok(installed)
}

/// What `bindings/swift/README.md` promises of `s.upload([1, 2, 3])`: an
/// array literal of whole numbers is an `[Int]` in Swift, which no buffer
/// holds, so the call fails to compile with a message saying what to write,
/// rather than "no exact matches" or, worse, resolving to another overload
/// (a `Data`, raw bytes). Type-checked against the installed module the
/// example was just built with.
fn int_literals_refused(toolchain: &Toolchain, project: &Path) -> Result {
    let check = project.join(".build/weir-int-literal-check.swift");
    let source = "import Weir\nfunc upload(_ s: WeirStream) throws -> Buffer { try s.upload([1, 2, 3]) }\n";
    fs::write(&check, source).map_err(|e| format!("cannot write {}: {e}", check.display()))?;
    let module_map = project.join("Dependencies/Weir/Sources/WeirFFI/module.modulemap");
    let args = [
        "-typecheck".to_owned(),
        "-swift-version".to_owned(),
        "6".to_owned(),
        "-I".to_owned(),
        project.join(".build/debug/Modules").display().to_string(),
        "-Xcc".to_owned(),
        format!("-fmodule-map-file={}", module_map.display()),
        check.display().to_string(),
    ];
    // The diagnostic itself: the notes after it quote the source around the
    // declaration, the neighbouring overloads' messages included.
    const EXPECTED: &str =
        "error: 'upload' is unavailable: [1, 2, 3] is an [Int] in Swift, which no buffer holds: write [1, 2, 3] as [Int32]";
    match toolchain.run_quietly("swiftc", &args) {
        Err(message) if message.contains(EXPECTED) => {
            eprintln!("swift: `s.upload([1, 2, 3])` is refused at compile time, saying: {EXPECTED} …");
            Ok(())
        }
        Err(message) => Err(format!("`s.upload([1, 2, 3])` failed to compile, but not as the README says: {message}")),
        Ok(_) => Err("`s.upload([1, 2, 3])` compiled; the README says it is refused at compile time".to_owned()),
    }
}
