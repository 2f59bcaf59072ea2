//! Opens a wgpu runtime for a test, or reports wgpu skipped by name (a
//! failure where `WEIR_REQUIRE_BACKENDS` lists wgpu).

use weir_core::{BackendKind, Runtime};

pub fn open() -> Option<Runtime> {
    match Runtime::open(BackendKind::Wgpu) {
        Ok(runtime) => Some(runtime),
        Err(error) => {
            let required = std::env::var("WEIR_REQUIRE_BACKENDS").unwrap_or_default();
            assert!(!required.split(',').any(|name| name.trim() == "wgpu"), "wgpu is required: {error}");
            eprintln!("wgpu: skipped ({error})");
            None
        }
    }
}
