//! The Kotlin package: natives, bindings, Maven tests and the Kotlin demo.

use crate::util::Result;

/// Kotlin tests (not wired yet).
pub fn test() -> Result {
    eprintln!("kotlin: not wired yet, skipped");
    Ok(())
}

/// The Kotlin demo (not wired yet).
pub fn demo(_args: &[String]) -> Result {
    Err("the Kotlin demo is not wired yet".to_owned())
}
