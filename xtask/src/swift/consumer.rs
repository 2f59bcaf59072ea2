//! `examples/swift-consumer`, built and run as a user would: against the
//! installed package, with a plain `swift build`, no flags and no library path.

use std::fs;
use std::path::PathBuf;

use super::toolchain::Toolchain;
use crate::util::{root, Result};

/// The example project (a SwiftPM package outside the bindings).
fn project() -> PathBuf {
    root().join("examples/swift-consumer")
}

/// Installs the package into the example's `Dependencies/`, as its README
/// says, builds the example, runs it (it checks its own result) and checks
/// that the binary finds its library in the installed package, not in the
/// development package's builds.
pub fn build_and_run(toolchain: &Toolchain) -> Result {
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
    eprintln!("swift: the consumer example built and ran against {} in {:.1?}", installed.display(), started.elapsed());
    Ok(())
}
