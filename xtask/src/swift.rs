//! The Swift package: natives, bindings, SwiftPM tests and the Swift demo.

mod toolchain;

use crate::util::{root, Result};
use toolchain::Toolchain;

/// Swift tests (not wired yet).
pub fn test() -> Result {
    let toolchain = Toolchain::find()?;
    toolchain.swift(&root().join("bindings/swift"), &["--version".to_owned()], &[])?;
    Ok(())
}

/// The Swift demo (not wired yet).
pub fn demo(_args: &[String]) -> Result {
    Err("the Swift demo is not wired yet".to_owned())
}
