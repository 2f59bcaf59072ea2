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
    // Where the device takes timestamps, how busy it was is measured each way.
    if runtime.default_stream().timestamp().is_ok() {
        for name in ["device busy fraction, one stream", "device busy fraction, 4 streams"] {
            let busy = named(name);
            assert!(busy.is_some_and(|fraction| fraction > 0.0 && fraction <= 1.0), "{name}: {:?}", report.figures);
        }
    }
    runtime.close().unwrap();
}

#[test]
fn the_busy_fraction_counts_time_covered_by_any_span_once() {
    let ms = std::time::Duration::from_millis;
    // 0-4 and 2-6 overlap (6 covered), 8-9 apart (1 more), 8-8 empty: 7 of 10.
    let spans = vec![(ms(2), ms(6)), (ms(8), ms(9)), (ms(0), ms(4)), (ms(8), ms(8))];
    assert!((transformer::busy_fraction(spans, ms(10)) - 0.7).abs() < 1e-9);
    // A span inside another adds nothing; more than the wall is capped.
    assert!((transformer::busy_fraction(vec![(ms(0), ms(10)), (ms(1), ms(2))], ms(10)) - 1.0).abs() < 1e-9);
    assert!((transformer::busy_fraction(vec![(ms(0), ms(12))], ms(10)) - 1.0).abs() < 1e-9);
}
