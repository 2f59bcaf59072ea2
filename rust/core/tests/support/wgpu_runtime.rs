//! Opens a wgpu runtime for a test, or reports wgpu skipped by name (a
//! failure where `WEIR_REQUIRE_BACKENDS` lists wgpu).

use weir_core::{BackendKind, ElementType, Error, RawAccess, Runtime};

/// Only an unavailable wgpu is a skip: any other error opening it fails the test.
pub fn open() -> Option<Runtime> {
    match Runtime::open(BackendKind::Wgpu) {
        Ok(runtime) => Some(runtime),
        Err(error @ Error::Unavailable { .. }) => {
            let required = std::env::var("WEIR_REQUIRE_BACKENDS").unwrap_or_default();
            assert!(!required.split(',').any(|name| name.trim() == "wgpu"), "wgpu is required: {error}");
            eprintln!("wgpu: skipped ({error})");
            None
        }
        Err(error) => panic!("opening wgpu failed: {error}"),
    }
}

/// The wgpu device `runtime`'s ops run on, as raw access shows it, kept
/// past the external op that lends it.
#[allow(dead_code)] // Not every test that opens a runtime looks at its device.
pub fn device_of(runtime: &Runtime) -> weir_core::wgpu::Device {
    let s = runtime.default_stream();
    let buffer = s.zeros(ElementType::U32, 1).unwrap();
    let mut device = None;
    s.external_write(&[&buffer], |raw| {
        let RawAccess::Wgpu(raw) = raw else { unreachable!("a wgpu runtime") };
        device = Some(raw.device().clone());
        Ok(())
    })
    .unwrap();
    device.expect("the closure ran")
}
