//! The completion path: panicking callbacks contained, actions run on the
//! delivery thread, and quick fences completed by the wake thread or the
//! waiter, in stream order.

use super::*;

/// A fence on `stream`, failing the test rather than hanging it if no completion comes.
fn fence_within(backend: &GpuBackend<Fake>, stream: &GpuStream<Fake>, limit: Duration) -> Result<()> {
    let done = completion();
    backend.signal(stream, done.clone(), SignalKind::Fence)?;
    let start = std::time::Instant::now();
    while !done.is_complete() {
        assert!(start.elapsed() < limit, "no completion within {limit:?}");
        std::thread::sleep(Duration::from_millis(1));
    }
    done.wait()
}

fn panicking_callback_does_not_stop_later_completions(wake: Wake) {
    let (backend, _shared) = backend(wake);
    let stream = backend.create_stream(0).unwrap();
    stream.after(Box::new(|_| panic!("a panicking completion (expected by this test)")), false).unwrap();
    fence_within(&backend, &stream, Duration::from_secs(10)).unwrap();
    fence_within(&backend, &stream, Duration::from_secs(10)).unwrap();
}

#[test]
fn a_panicking_callback_does_not_stop_later_completions_on_the_waiter() {
    panicking_callback_does_not_stop_later_completions(Wake::Waiter);
}

#[test]
fn a_panicking_callback_does_not_stop_later_completions_on_the_callback_thread() {
    panicking_callback_does_not_stop_later_completions(Wake::Callback);
}

#[test]
fn completions_run_no_waker_or_action_on_the_waiter() {
    let (backend, _shared) = backend(Wake::Waiter);
    let stream = backend.create_stream(0).unwrap();
    let done = completion();
    let (tell, ran_on) = mpsc::channel();
    done.then(move |_| {
        let _ = tell.send(std::thread::current().name().map(str::to_owned));
    });
    backend.signal(&stream, done.clone(), SignalKind::Fence).unwrap();
    done.wait().unwrap();
    let thread = ran_on.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(thread.as_deref(), Some("weir-wake"), "actions run on the delivery thread");
}

#[test]
fn the_wake_thread_completes_a_quick_fence_its_waiter_has_not_seen_reached_in_stream_order() {
    let (backend, shared) = backend_spinning(Wake::Waiter, Duration::from_secs(10));
    // Only the wake thread sees events reached; the waiter spins, then sleeps in a synchronisation.
    shared.queries.store(REACHED_ON_WAKE_THREAD, Ordering::SeqCst);
    let latch = Arc::new(Latch::default());
    *lock(&shared.slow_sync) = Some(latch.clone());
    let stream = backend.create_stream(0).unwrap();
    // Opened however the test ends (dropped first), so the stream's drop does not wait forever.
    let _open = OpenOnDrop(latch.clone());

    #[cfg(feature = "test-support")]
    let probed = crate::wait_paths().probes_completed;
    let first = completion();
    backend.signal(&stream, first.clone(), SignalKind::Fence).unwrap();
    assert!(soon(|| first.is_complete()), "a quick fence waited for its waiter");
    assert_eq!(first.outcome(), Some(Ok(())));
    #[cfg(feature = "test-support")]
    assert!(crate::wait_paths().probes_completed > probed, "the probe's completion was not counted");
    assert_eq!(backend.counters().live_events, 0, "the completed fence's event still counts as live");

    // A drain queued before the next fence (a completion nobody awaits, so
    // not watched), which the waiter does not see reached: the fence is not
    // completed ahead of it, though the wake thread sees its event reached.
    let drained = completion();
    backend.signal(&stream, drained.clone(), SignalKind::Drain).unwrap();
    let second = completion();
    backend.signal(&stream, second.clone(), SignalKind::Fence).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert!(!drained.is_complete());
    assert!(!second.is_complete(), "a fence completed before the completion queued ahead of it");
    shared.queries.store(REACHED, Ordering::SeqCst);
    latch.open();
    second.wait().unwrap();
    assert!(drained.is_complete(), "the fence completed before the completion ahead of it");
    assert!(soon(|| backend.counters().live_events == 0));
}

#[test]
fn without_an_event_query_a_quick_fence_is_completed_by_its_waiter() {
    let (backend, shared) = backend(Wake::Waiter);
    let latch = Arc::new(Latch::default());
    *lock(&shared.slow_sync) = Some(latch.clone());
    let stream = backend.create_stream(0).unwrap();
    let _open = OpenOnDrop(latch.clone());
    #[cfg(feature = "test-support")]
    let beaten = crate::wait_paths().waiters_beat_probe;
    let done = completion();
    backend.signal(&stream, done.clone(), SignalKind::Fence).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert!(!done.is_complete(), "a fence completed with its event neither queried nor synchronised");
    latch.open();
    done.wait().unwrap();
    #[cfg(feature = "test-support")]
    assert!(
        soon(|| crate::wait_paths().waiters_beat_probe > beaten),
        "the waiter's completion of a watched fence was not counted"
    );
}

#[test]
fn a_watched_fence_waited_for_on_the_wake_thread_is_completed_by_its_waiter() {
    // A waker may block on a fence (the wake thread owes Weir no progress),
    // and the probe that watches that fence runs on the very thread it
    // blocks: the stream's waiter must complete it without the probe.
    let (backend, shared) = backend(Wake::Waiter);
    shared.queries.store(REACHED, Ordering::SeqCst);
    let stream = Arc::new(backend.create_stream(0).unwrap());
    let backend = Arc::new(backend);
    let first = completion();
    let (tell, told) = mpsc::channel();
    let (on_wake, on_stream) = (backend.clone(), stream.clone());
    first.then(move |_| {
        let inner = completion();
        let waited = on_wake.signal(&on_stream, inner.clone(), SignalKind::Fence).map(|()| inner.wait());
        let _ = tell.send(matches!(waited, Ok(Ok(()))));
    });
    backend.signal(&stream, first, SignalKind::Fence).unwrap();
    assert_eq!(
        told.recv_timeout(Duration::from_secs(10)),
        Ok(true),
        "a fence waited for on the wake thread was left to its probe, which could not run"
    );
}

#[test]
fn a_watched_fence_wakes_no_waiting_thread_until_its_probe_ends() {
    let (backend, shared) = backend_spinning(Wake::Waiter, Duration::from_secs(10));
    let stream = backend.create_stream(0).unwrap();
    let syncs = || shared.event_syncs.load(Ordering::SeqCst);
    // A job on the wake thread (another test's, in this process) lets its
    // waiting thread go, as it should: one quiet try of several is enough.
    let mut held_back = false;
    for _ in 0..20 {
        shared.queries.store(NOT_REACHED, Ordering::SeqCst);
        let before = syncs();
        let done = completion();
        backend.signal(&stream, done.clone(), SignalKind::Fence).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        held_back |= syncs() == before && !done.is_complete();
        shared.queries.store(REACHED, Ordering::SeqCst);
        assert!(soon(|| done.is_complete()), "a watched fence was not completed");
        if held_back {
            break;
        }
    }
    assert!(held_back, "a waiting thread blocked on every fence the probe watched");
    // The completions behind it still run, on their waiting thread.
    let drained = completion();
    backend.signal(&stream, drained.clone(), SignalKind::Drain).unwrap();
    assert!(soon(|| drained.is_complete()), "the stream's completions stopped after a watched fence");
    assert!(soon(|| backend.counters().live_events == 0));
}

#[test]
fn a_watched_fence_its_probe_gave_up_on_is_waited_for_through_the_relay() {
    // The probe's budget runs out before the device gets there: its waiting
    // thread must block, and a light event would have it spin.
    let (backend, shared) = backend_spinning(Wake::Waiter, Duration::from_millis(2));
    shared.queries.store(NOT_REACHED, Ordering::SeqCst);
    let stream = backend.create_stream(0).unwrap();
    let done = completion();
    backend.signal(&stream, done.clone(), SignalKind::Fence).unwrap();
    assert!(soon(|| done.is_complete()), "a watched fence its probe gave up on was not completed");
    assert_eq!(done.outcome(), Some(Ok(())));
    assert_eq!(shared.light_syncs.load(Ordering::SeqCst), 0, "the waiting thread synchronised a light event");
    let light = lock(&shared.light_events).clone();
    let relayed: Vec<_> =
        lock(&shared.stream_waits).iter().filter(|(_, event)| light.contains(event)).cloned().collect();
    assert_eq!(relayed.len(), 1, "no stream waited for the fence's light event: {relayed:?}");
    assert_ne!(relayed[0].0, stream.raw, "the fence's own stream waited for its event");
    assert!(shared.event_syncs.load(Ordering::SeqCst) >= 1, "nothing blocked for the fence");
    assert!(soon(|| backend.counters().live_events == 0));
}

/// A job on the wake thread that waits for a fence of `stream`, made
/// before the job starts (`before`) or while it runs: the fence is left to
/// its stream's waiting thread, since the probe cannot run meanwhile.
fn a_job_on_the_wake_thread_waits_for_a_watched_fence(before: bool) {
    let (backend, shared) = backend_spinning(Wake::Waiter, Duration::from_secs(10));
    // Only a synchronisation sees the event reached.
    shared.queries.store(NOT_REACHED, Ordering::SeqCst);
    let stream = backend.create_stream(0).unwrap();
    let fence = || {
        let done = completion();
        backend.signal(&stream, done.clone(), SignalKind::Fence).map(|()| done).unwrap()
    };
    let (to_job, fences) = mpsc::channel::<Arc<Completion>>();
    let (started, job_started) = mpsc::channel();
    let (tell, told) = mpsc::channel();
    let early = before.then(fence);
    crate::completion::deliver(move || {
        let _ = started.send(());
        let waited = fences.recv().map(|done| done.wait_at_most(Duration::from_secs(10)));
        let _ = tell.send(waited == Ok(true));
    });
    job_started.recv_timeout(Duration::from_secs(10)).unwrap();
    to_job.send(early.unwrap_or_else(fence)).unwrap();
    assert_eq!(
        told.recv_timeout(Duration::from_secs(20)),
        Ok(true),
        "the fence waited for its probe, which could not run"
    );
}

#[test]
fn a_fence_watched_before_the_wake_thread_runs_a_job_is_left_to_its_waiter() {
    a_job_on_the_wake_thread_waits_for_a_watched_fence(true);
}

#[test]
fn a_fence_watched_while_the_wake_thread_runs_a_job_is_left_to_its_waiter() {
    a_job_on_the_wake_thread_waits_for_a_watched_fence(false);
}

#[test]
fn waiting_threads_serve_streams_with_completions_queued_not_every_stream() {
    let (backend, shared) = backend(Wake::Waiter);
    let streams: Vec<_> = (0..32).map(|index| backend.create_stream(index).unwrap()).collect();
    assert_eq!(backend.device.waiters.threads(), 0, "streams with nothing queued started threads");

    // Streams made, used and dropped one after another: a thread that
    // served one serves the next. A fence may complete before its server is
    // back (the wake thread's probe may complete it; a busy host delays the server), so
    // each stream is used once the server is back.
    let server_back = || {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while backend.device.waiters.serving() > 0 && std::time::Instant::now() < deadline {
            std::thread::yield_now();
        }
    };
    for stream in &streams {
        fence(&backend, stream).unwrap();
        server_back();
    }
    drop(streams);
    for index in 0..64 {
        let stream = backend.create_stream(index).unwrap();
        fence(&backend, &stream).unwrap();
        server_back();
    }
    assert!(
        backend.device.waiters.threads() <= 1,
        "{} threads for streams used one at a time",
        backend.device.waiters.threads()
    );

    // Streams whose completions are all pending each have a thread: none
    // waits behind another's event.
    shared.queries.store(NO_QUERY, Ordering::SeqCst);
    let latch = Arc::new(Latch::default());
    *lock(&shared.slow_sync) = Some(latch.clone());
    let _open = OpenOnDrop(latch.clone());
    let streams: Vec<_> = (0..8).map(|index| backend.create_stream(index).unwrap()).collect();
    let pending: Vec<_> = streams
        .iter()
        .map(|stream| {
            let done = completion();
            backend.signal(stream, done.clone(), SignalKind::Drain).unwrap();
            done
        })
        .collect();
    assert!(
        soon(|| backend.device.waiters.threads() == 8),
        "{} threads for 8 blocked streams",
        backend.device.waiters.threads()
    );
    latch.open();
    for done in pending {
        done.wait().unwrap();
    }
}
