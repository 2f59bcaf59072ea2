//! The issuing thread: a streak of admissions moves to it in admission
//! order, a batch binds the device once, a stream's drop waits for its
//! queued driver calls, and ops' outcome cells are let go once it is idle.

use super::*;

/// Enqueues a fill of `memory` with `word` on `stream`, not waiting for its driver calls.
fn enqueue_fill(backend: &GpuBackend<Fake>, stream: &GpuStream<Fake>, memory: &GpuMemory<Fake>, word: u32) {
    let command = Command::Fill { dst: span(memory, 0, 64), word };
    let prepared = backend.prepare(&command).unwrap();
    // SAFETY: the fake touches no memory.
    unsafe { backend.enqueue(stream, command, prepared, OpIo::default()) }.unwrap();
}

/// True if the latest launch was made by the issuing thread. The latest
/// only: checked after each fill, the first one handed over is the latest
/// once the thread goes idle (a scan of every launch would lengthen the
/// gaps between fills until no streak could start).
fn latest_launch_on_the_thread(shared: &Shared) -> bool {
    lock(&shared.launched_on).last().is_some_and(|thread| thread.as_deref() == Some(ISSUING_THREAD))
}

/// Fills enqueued back to back on `stream`, each writing its own index,
/// until one was launched on the issuing thread; how many.
fn fill_until_issued_on_the_thread(
    backend: &GpuBackend<Fake>,
    stream: &GpuStream<Fake>,
    shared: &Shared,
    memory: &GpuMemory<Fake>,
) -> u32 {
    let on_thread = || latest_launch_on_the_thread(shared);
    let mut word = 0;
    while !on_thread() && word < 100_000 {
        if !backend.device.issuer.is_idle() {
            // Handed over: wait for the thread to reach it rather than fill
            // its queue (a thread held in its first launch would never make
            // room, and this would wait for room forever).
            std::thread::yield_now();
            continue;
        }
        enqueue_fill(backend, stream, memory, word);
        word += 1;
    }
    word
}

/// Fills as [`fill_until_issued_on_the_thread`], with the thread then held
/// in that launch until the returned latch opens (or its guard drops, however
/// the test ends); how many fills were admitted.
pub(super) fn hold_the_issuing_thread(
    backend: &GpuBackend<Fake>,
    stream: &GpuStream<Fake>,
    shared: &Shared,
    memory: &GpuMemory<Fake>,
) -> (Arc<Latch>, OpenOnDrop, u32) {
    let latch = Arc::new(Latch::default());
    let open = OpenOnDrop(latch.clone());
    *lock(&shared.slow_issue) = Some(latch.clone());
    (latch, open, fill_until_issued_on_the_thread(backend, stream, shared, memory))
}

#[test]
fn a_streak_of_admissions_moves_to_the_issuing_thread_in_admission_order() {
    let (backend, shared) = backend(Wake::Waiter);
    let stream = backend.create_stream(0).unwrap();
    let memory = backend.allocate(64).unwrap();
    // One op alone is issued by the thread that admits it: no hand-off.
    submit(&backend, &stream, Command::Fill { dst: span(&memory, 0, 64), word: 7 }).unwrap();
    assert_ne!(lock(&shared.launched_on)[0].as_deref(), Some(ISSUING_THREAD));
    lock(&shared.calls).clear();
    let admitted = fill_until_issued_on_the_thread(&backend, &stream, &shared, &memory);
    assert!(admitted < 100_000, "a streak of admissions moved to the issuing thread");
    backend.device.issuer.flush();
    let words: Vec<u64> = shared
        .device_calls()
        .iter()
        .map(|call| match call {
            Call::Launch { params, .. } => params[1],
            other => panic!("only launches were admitted, got {other:?}"),
        })
        .collect();
    assert_eq!(words, (0..u64::from(admitted)).collect::<Vec<_>>(), "issued in admission order");
    fence(&backend, &stream).unwrap();
    assert_eq!(shared.unbound_calls.load(Ordering::SeqCst), 0);
}

#[test]
fn launches_that_block_in_the_driver_still_make_a_streak_that_moves_to_the_issuing_thread() {
    let (backend, shared) = backend(Wake::Waiter);
    let stream = backend.create_stream(0).unwrap();
    let memory = backend.allocate(64).unwrap();
    // Each launch blocks its caller far longer than the gap that ends a
    // streak, as launches into a backlogged device do. The caller's own
    // pause between admissions is what counts: ops admitted back to back
    // still move to the thread, and the caller stops waiting in the driver.
    *lock(&shared.launch_takes) = Some(issue::STREAK_GAP * 5);
    // Checked between admissions, not only at the end: a busy host may
    // pause this thread long enough to end a streak now and then.
    let on_thread = || latest_launch_on_the_thread(&shared);
    let mut admitted = 0;
    while !on_thread() && admitted < 500 {
        enqueue_fill(&backend, &stream, &memory, admitted);
        admitted += 1;
        if !backend.device.issuer.is_idle() {
            backend.device.issuer.flush();
        }
    }
    assert!(on_thread(), "{admitted} fills admitted back to back, each launched by the admitting thread");
    *lock(&shared.launch_takes) = None;
    fence(&backend, &stream).unwrap();
}

#[test]
fn a_stream_dropped_with_driver_calls_queued_for_it_waits_until_they_are_made() {
    let (backend, shared) = backend(Wake::Waiter);
    let stream = backend.create_stream(0).unwrap();
    let memory = backend.allocate(64).unwrap();
    let (latch, _open, admitted) = hold_the_issuing_thread(&backend, &stream, &shared, &memory);
    // The issuing thread is held in that launch; more queue behind it.
    for word in admitted..admitted + 8 {
        enqueue_fill(&backend, &stream, &memory, word);
    }
    assert!(!backend.is_settled(&stream), "driver calls are still queued");
    let (dropped, was_dropped) = mpsc::channel();
    let dropping = std::thread::spawn(move || {
        drop(stream);
        let _ = dropped.send(());
    });
    assert!(was_dropped.recv_timeout(Duration::from_millis(100)).is_err(), "the drop waits for the queued calls");
    latch.open();
    was_dropped.recv_timeout(Duration::from_secs(10)).expect("the drop returns once they are made");
    dropping.join().unwrap();
    let launches = shared.device_calls().iter().filter(|call| matches!(call, Call::Launch { .. })).count();
    assert_eq!(launches as u32, admitted + 8, "every queued launch was made before the stream went");
    assert_eq!(backend.counters().live_streams, 0);
}

#[test]
fn a_batch_of_launches_records_and_waits_on_the_issuing_thread_binds_the_device_once() {
    let (backend, shared) = backend(Wake::Waiter);
    let (stream, other) = (backend.create_stream(0).unwrap(), backend.create_stream(0).unwrap());
    let memory = backend.allocate(64).unwrap();
    let (latch, _open, admitted) = hold_the_issuing_thread(&backend, &stream, &shared, &memory);
    // The thread is held in that launch; behind it, in one batch, 32 rounds
    // of a launch, a wait for another stream (a two-stream pipeline's
    // driver calls), and an event recorded there and waited for (a peer's way).
    for word in admitted..admitted + 32 {
        enqueue_fill(&backend, &stream, &memory, word);
        backend.wait_for_stream(&stream, &other).unwrap();
        let event = backend.record_event(&other).unwrap();
        backend.wait_event(&stream, &event).unwrap();
    }
    shared.issuing_binds.store(0, Ordering::SeqCst);
    latch.open();
    backend.device.issuer.flush();
    let binds = shared.issuing_binds.load(Ordering::SeqCst);
    assert!(binds <= 2, "160 driver calls in one batch bound the device {binds} times");
    assert_eq!(shared.unbound_calls.load(Ordering::SeqCst), 0, "every call ran with its device bound");
}

#[test]
fn a_launch_after_a_job_that_bound_another_device_on_the_issuing_thread_binds_its_own_again() {
    let ((a, shared_a), (b, shared_b)) = (backend(Wake::Waiter), backend(Wake::Waiter));
    let (stream_a, stream_b) = (a.create_stream(0).unwrap(), b.create_stream(0).unwrap());
    let memory = a.allocate(64).unwrap();
    // b's event pool is full when `peer` goes, so its drop destroys it, with b bound.
    let spares: Vec<_> = (0..256).map(|_| b.record_event(&stream_b).unwrap()).collect();
    let peer = b.record_event(&stream_b).unwrap();
    b.device.issuer.flush();
    drop(spares);
    let (latch, _open, admitted) = hold_the_issuing_thread(&a, &stream_a, &shared_a, &memory);
    // Queued behind the held launch, in one batch: a launch, a wait that
    // holds the last reference to b's event (its drop binds b on a's
    // issuing thread), and a launch after it.
    enqueue_fill(&a, &stream_a, &memory, admitted);
    a.wait_event(&stream_a, &peer).unwrap();
    drop(peer);
    enqueue_fill(&a, &stream_a, &memory, admitted + 1);
    latch.open();
    a.device.issuer.flush();
    assert_eq!(shared_b.events_destroyed.load(Ordering::SeqCst), 1, "b's event was destroyed");
    assert_eq!(shared_b.unbound_calls.load(Ordering::SeqCst), 0, "b's event was dropped with b bound");
    assert_eq!(shared_a.unbound_calls.load(Ordering::SeqCst), 0, "the launch after it bound a again");
    let launches = shared_a.device_calls().iter().filter(|call| matches!(call, Call::Launch { .. })).count();
    assert_eq!(launches as u32, admitted + 2, "every launch was made");
}

#[test]
fn the_outcome_cells_of_ops_run_on_the_issuing_thread_are_let_go_once_it_is_idle() {
    let (backend, shared) = backend(Wake::Waiter);
    let stream = backend.create_stream(0).unwrap();
    let memory = backend.allocate(64).unwrap();
    let admitted = fill_until_issued_on_the_thread(&backend, &stream, &shared, &memory);
    assert!(admitted < 100_000, "a streak of admissions moved to the issuing thread");
    // A streak whose ops each hold an outcome cell, as the scheduler gives them.
    let cells: Vec<Arc<OpOutcome>> = (0..256).map(|_| Arc::new(OpOutcome::default())).collect();
    for cell in &cells {
        let command = Command::Fill { dst: span(&memory, 0, 64), word: 1 };
        let prepared = backend.prepare(&command).unwrap();
        let io =
            OpIo { inputs: [cell.clone()].into_iter().collect(), outcome: Some(cell.clone()), ..Default::default() };
        // SAFETY: the fake touches no memory.
        unsafe { backend.enqueue(&stream, command, prepared, io) }.unwrap();
    }
    fence(&backend, &stream).unwrap();
    let let_go = || cells.iter().all(|cell| Arc::strong_count(cell) == 1);
    assert!(soon(let_go), "every op's cells were dropped once the thread had nothing left to run");
}
