//! Order between streams: one record of the source stream's own event per
//! order, and what a failed record or wait fails.

use super::*;

#[test]
fn a_stream_ordered_after_another_waits_for_one_record_of_the_source_streams_own_event() {
    let (backend, shared) = backend(Wake::Waiter);
    let (source, stream) = (backend.create_stream(0).unwrap(), backend.create_stream(0).unwrap());
    for _ in 0..3 {
        backend.wait_for_stream(&stream, &source).unwrap();
        backend.wait_for_stream(&source, &stream).unwrap();
    }
    backend.device.issuer.flush();
    assert_eq!(backend.counters().live_events, 0, "a stream's ordering event counts as a live event");
    let records = lock(&shared.event_records).clone();
    let waits = lock(&shared.stream_waits).clone();
    assert_eq!((records.len(), waits.len()), (6, 6), "one record and one wait per order: {records:?}, {waits:?}");
    for (order, ((event, on), (waiting, waited))) in records.iter().zip(&waits).enumerate() {
        let (from, to) = if order % 2 == 0 { (&source, &stream) } else { (&stream, &source) };
        assert_eq!((*on, *waiting, *waited), (from.raw, to.raw, *event), "records {records:?}, waits {waits:?}");
        assert_eq!(Some(event), from.order_event.get(), "an order recorded another event than its source's");
    }
    // Made once per source stream, destroyed with it.
    assert_eq!(shared.events_created.load(Ordering::SeqCst), 2, "orders made events beyond one per source");
    let destroyed = shared.events_destroyed.load(Ordering::SeqCst);
    drop((source, stream));
    assert_eq!(shared.events_destroyed.load(Ordering::SeqCst), destroyed + 2, "a stream's ordering event outlived it");
}

#[test]
fn a_failed_record_fails_both_streams_of_an_order_and_a_failed_wait_the_waiting_one() {
    let (backend, shared) = backend(Wake::Waiter);
    let (source, stream) = (backend.create_stream(0).unwrap(), backend.create_stream(0).unwrap());
    shared.fail("event_record");
    backend.wait_for_stream(&stream, &source).unwrap();
    lock(&shared.failing).clear();
    assert!(fence(&backend, &source).is_err(), "the stream the record failed on reports it");
    let unordered = fence(&backend, &stream).expect_err("the stream left unordered reports it");
    assert!(unordered.to_string().contains("could not be recorded"), "{unordered}");
    // A watched fence's waiting thread may wait through its relay stream: only the two streams' waits count.
    let ordered = lock(&shared.stream_waits).iter().filter(|(on, _)| *on == stream.raw || *on == source.raw).count();
    assert_eq!(ordered, 0, "a wait for an event never recorded was made");
    shared.fail("stream_wait_event");
    backend.wait_for_stream(&stream, &source).unwrap();
    lock(&shared.failing).clear();
    assert!(fence(&backend, &source).is_ok(), "the source of a failed wait is not failed");
    assert!(fence(&backend, &stream).is_err(), "the waiting stream reports its failed wait");
    // Reported once: both streams are usable again.
    backend.wait_for_stream(&stream, &source).unwrap();
    assert!(fence(&backend, &source).is_ok() && fence(&backend, &stream).is_ok());
    assert_eq!(backend.counters().live_events, 0, "a failed order left an event live");
}
