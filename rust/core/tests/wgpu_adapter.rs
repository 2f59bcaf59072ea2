//! Adapter selection through the builder: the graphics APIs tried and a
//! name filter (skipped by name where no wgpu adapter is available).
#![cfg(feature = "wgpu")]

#[path = "support/wgpu_runtime.rs"]
mod wgpu_runtime;

use weir_core::{BackendKind, Error, Runtime};

#[test]
fn no_matching_adapter_is_unavailable_naming_the_backends_tried() {
    let error = Runtime::builder(BackendKind::Wgpu).adapter_named("No adapter has this name").open().unwrap_err();
    assert!(matches!(error, Error::Unavailable { .. }), "{error:?}");
    let message = error.to_string();
    assert!(message.contains("vulkan") && message.contains("no adapter has this name"), "{message}");
}

#[test]
fn a_backend_list_naming_none_is_unavailable_saying_so() {
    let error = Runtime::builder(BackendKind::Wgpu).wgpu_backends("glide").open().unwrap_err();
    assert!(matches!(error, Error::Unavailable { .. }), "{error:?}");
    assert!(error.to_string().contains("\"glide\" name none"), "{error}");
}

#[test]
fn the_name_filter_keeps_the_adapter_it_names() {
    let Some(runtime) = wgpu_runtime::open() else { return };
    let name = runtime.info().name.clone();
    runtime.close().unwrap();
    // Part of its name, in another case, keeps it; it is then device 0.
    let part: String = name.chars().take(5).collect::<String>().to_uppercase();
    let named = Runtime::builder(BackendKind::Wgpu).adapter_named(&part).wgpu_backends("vulkan,metal,dx12").open();
    let named = named.unwrap_or_else(|error| panic!("{part:?} did not keep {name:?}: {error}"));
    assert!(named.info().name.to_uppercase().contains(&part), "{} for {part:?}", named.info().name);
    named.close().unwrap();
}
