//! Running commands from the workspace root.

use std::path::PathBuf;
use std::process::Command;

pub type Result<T = ()> = std::result::Result<T, String>;

/// The workspace root (the parent of `xtask/`).
pub fn root() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().map(PathBuf::from).unwrap_or(manifest)
}

/// Cargo's target directory: `CARGO_TARGET_DIR`, else `target/` in the root.
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root().join("target"))
}

/// Runs `command` in the workspace root, echoing it; fails on a non-zero exit.
pub fn run(command: &mut Command) -> Result {
    command.current_dir(root());
    eprintln!("+ {command:?}");
    let status = command.status().map_err(|e| format!("cannot start {command:?}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{command:?} failed with {status}"))
    }
}

/// `cargo` as invoked by the user (rustup proxies and all).
pub fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned()))
}

/// Says how far a long run got and the disk left for the next part: builds
/// fill the disk, and a run that stops for it should say where.
pub fn report_progress(done: &str) {
    let free = Command::new("df")
        .args(["-h", "--output=avail"])
        .arg(root())
        .output()
        .ok()
        .and_then(|output| String::from_utf8(output.stdout).ok())
        .and_then(|text| text.lines().nth(1).map(|line| line.trim().to_owned()));
    match free {
        Some(free) => eprintln!("xtask: {done} passed; {free} free on the build disk"),
        None => eprintln!("xtask: {done} passed"),
    }
}
