//! The Swift package: natives, bindings, SwiftPM tests and the Swift demo.

use crate::util::Result;

/// Swift tests (not wired yet).
pub fn test() -> Result {
    eprintln!("swift: not wired yet, skipped");
    Ok(())
}

/// The Swift demo (not wired yet).
pub fn demo(_args: &[String]) -> Result {
    Err("the Swift demo is not wired yet".to_owned())
}
