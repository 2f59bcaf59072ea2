//! The transformer example (`cargo run --example transformer`) at its small
//! size on wgpu: lavapipe in CI, a GPU's Vulkan elsewhere. Every request's
//! output, on one stream, on several and replayed from recorded graphs, must
//! match the host's arithmetic.
#![cfg(feature = "wgpu")]

#[path = "../examples/transformer.rs"]
mod transformer;
#[path = "support/wgpu_runtime.rs"]
mod wgpu_runtime;

#[test]
fn the_transformer_block_at_small_size_matches_the_host_on_every_stream() {
    let Some(runtime) = wgpu_runtime::open() else { return };
    let options = transformer::Options { backend: None, shape: transformer::Shape::SMALL, requests: 12, in_flight: 4 };
    let report = transformer::run(&runtime, &options).unwrap();
    assert!(report.worst <= transformer::TOLERANCE, "{}", report.summary);
    let named = |name: &str| report.figures.iter().find(|(figure, _)| figure.as_str() == name).map(|(_, v)| *v);
    assert!(named("tokens/s, 4 streams").is_some_and(|rate| rate > 0.0), "{:?}", report.figures);
    // On wgpu every op of the block is a kernel: it records, and its replays' outputs were checked too.
    let replayed = named("tokens/s, 4 streams, each request a replayed graph");
    assert!(replayed.is_some_and(|rate| rate > 0.0), "{:?}", report.figures);
    runtime.close().unwrap();
}
