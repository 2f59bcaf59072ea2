//! Adapter selection overrides. One test per process: it sets the environment.
#![cfg(feature = "wgpu")]

use weir_core::backend::wgpu::ADAPTER_VAR;
use weir_core::{BackendKind, Error, Runtime};

#[test]
fn no_matching_adapter_is_unavailable_naming_the_backends_tried() {
    // SAFETY: this test binary has no other test, so no thread reads the environment meanwhile.
    unsafe { std::env::set_var(ADAPTER_VAR, "no adapter has this name") };
    let error = Runtime::open(BackendKind::Wgpu).unwrap_err();
    assert!(matches!(error, Error::Unavailable { .. }), "{error:?}");
    let message = error.to_string();
    assert!(message.contains("vulkan") && message.contains("no adapter has this name"), "{message}");
}
