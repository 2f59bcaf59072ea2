//! `cargo xtask docs`: the API documentation of every language, side by side
//! in one folder, so that each can link the others by relative path.
//!
//! - `rust/`: rustdoc of weir-device, weir-core and weir-ffi (the crate docs hold the
//!   scheduling contract that the Kotlin and Swift pages point to);
//! - `kotlin/`: Dokka's HTML, as the installed artifact's javadoc jar holds it;
//! - `swift/`: a DocC archive of the Swift package, laid out for static hosting.

use std::path::{Path, PathBuf};

use crate::util::{cargo, root, run, target_dir, Result};

/// Builds all three into `--out DIR` (default `target/docs`).
pub fn command(out: Option<PathBuf>) -> Result {
    let out = out.unwrap_or_else(|| target_dir().join("docs"));
    reset(&out)?;
    run(cargo().args(["doc", "--no-deps", "-p", "weir-device", "-p", "weir-core", "-p", "weir-ffi"]))?;
    copy_tree(&target_dir().join("doc"), &out.join("rust"))?;
    crate::kotlin::install()?;
    copy_tree(&root().join("bindings/kotlin/target/dokka"), &out.join("kotlin"))?;
    crate::swift::docs(&out.join("swift"))?;
    eprintln!(
        "xtask: docs in {}: rust/weir_core/index.html, kotlin/index.html, swift/documentation/weir/index.html",
        out.display()
    );
    Ok(())
}

/// Empties `dir`, making it if needed.
pub fn reset(dir: &Path) -> Result {
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(|e| format!("cannot empty {}: {e}", dir.display()))?;
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))
}

/// Copies the files under `from` to the same places under `to`.
fn copy_tree(from: &Path, to: &Path) -> Result {
    let entries = std::fs::read_dir(from).map_err(|e| format!("cannot read {}: {e}", from.display()))?;
    std::fs::create_dir_all(to).map_err(|e| format!("cannot create {}: {e}", to.display()))?;
    for entry in entries {
        let entry = entry.map_err(|e| format!("cannot read {}: {e}", from.display()))?;
        let (source, target) = (entry.path(), to.join(entry.file_name()));
        if source.is_dir() {
            copy_tree(&source, &target)?;
        } else {
            std::fs::copy(&source, &target)
                .map_err(|e| format!("cannot copy {} to {}: {e}", source.display(), target.display()))?;
        }
    }
    Ok(())
}
