//! Rejections versus failures: argument checks that reject before any
//! driver call, driver calls that fail their op, failed inputs, a lost
//! device, and fences that report every failure once.

use super::issuing::hold_the_issuing_thread;
use super::*;

#[test]
fn a_fault_seen_by_a_completion_loses_the_device_and_no_driver_call_follows() {
    let (backend, shared) = backend(Wake::Waiter);
    let stream = backend.create_stream(0).unwrap();
    let memory = backend.allocate(64).unwrap();
    submit(&backend, &stream, Command::Fill { dst: span(&memory, 0, 64), word: 1 }).unwrap();
    assert!(backend.lost().is_none());
    lock(&shared.fatal).push("event_synchronize");
    match fence(&backend, &stream) {
        Err(Error::DeviceLost { status: Some(status), message, .. }) => {
            assert_eq!((status.code, status.name.as_str()), (700, "CUDA_ERROR_ILLEGAL_ADDRESS"));
            assert!(message.contains("event_synchronize"), "{message}");
        }
        other => panic!("expected the fence to report the lost device, got {other:?}"),
    }
    assert!(matches!(backend.lost(), Some(Error::DeviceLost { .. })));
    // Every later use fails with the loss, before any driver call.
    assert!(matches!(backend.allocate(8), Err(Error::DeviceLost { .. })));
    assert!(matches!(
        submit(&backend, &stream, Command::Zero { dst: span(&memory, 0, 64) }),
        Err(EnqueueError::Failed(Error::DeviceLost { .. }))
    ));
    assert!(matches!(backend.record_event(&stream), Err(Error::DeviceLost { .. })));
    assert!(matches!(fence(&backend, &stream), Err(Error::DeviceLost { .. })));
    // The owners' drops touch no handle the lost context may have taken along.
    let frees = shared.calls().iter().filter(|call| matches!(call, Call::Free { .. })).count();
    drop(memory);
    drop(stream);
    drop(backend);
    assert_eq!(shared.calls_after_loss.load(Ordering::SeqCst), 0);
    assert_eq!(shared.calls().iter().filter(|call| matches!(call, Call::Free { .. })).count(), frees);
}

#[test]
fn a_fault_as_an_op_is_issued_loses_the_device_and_a_plain_failure_fails_its_op() {
    let (backend, shared) = backend(Wake::Callback);
    let stream = backend.create_stream(0).unwrap();
    let memory = backend.allocate(64).unwrap();
    shared.fail("launch");
    match failure_of(&backend, &stream, Command::Fill { dst: span(&memory, 0, 64), word: 1 }) {
        Some(Error::OpFailed { message, .. }) => assert!(message.contains("launch failed"), "{message}"),
        other => panic!("expected the op's versions to carry its failure, got {other:?}"),
    }
    assert!(backend.lost().is_none(), "an ordinary failure fails its op only");
    assert!(!backend.is_settled(&stream), "a failure waits for the next fence");
    assert!(matches!(fence(&backend, &stream), Err(Error::OpFailed { .. })), "the next fence reports it");
    fence(&backend, &stream).unwrap();
    lock(&shared.failing).clear();
    lock(&shared.fatal).push("launch");
    let lost = failure_of(&backend, &stream, Command::Fill { dst: span(&memory, 0, 64), word: 1 });
    assert!(matches!(lost, Some(Error::DeviceLost { .. })), "{lost:?}");
    assert!(backend.lost().is_some());
    assert!(matches!(fence(&backend, &stream), Err(Error::DeviceLost { .. })));
}

#[test]
fn an_op_whose_input_failed_as_it_ran_makes_no_driver_call_and_fails_too() {
    let (backend, shared) = backend(Wake::Waiter);
    let stream = backend.create_stream(0).unwrap();
    let memory = backend.allocate(64).unwrap();
    let failed = Arc::new(OpOutcome::default());
    failed.fail(Error::OpFailed { stream: 0, message: "the producer failed".into() });
    let outcome = Arc::new(OpOutcome::default());
    let command = Command::Fill { dst: span(&memory, 0, 64), word: 1 };
    let prepared = backend.prepare(&command).unwrap();
    let io = OpIo { inputs: [failed].into_iter().collect(), outcome: Some(outcome.clone()), ..Default::default() };
    // SAFETY: the fake touches no memory.
    unsafe { backend.enqueue(&stream, command, prepared, io) }.unwrap();
    backend.device.issuer.flush();
    assert!(shared.device_calls().is_empty(), "the op did not run");
    match outcome.failure() {
        Some(Error::OpFailed { message, .. }) => assert!(message.contains("the producer failed"), "{message}"),
        other => panic!("expected the dependency's failure, got {other:?}"),
    }
    assert!(fence(&backend, &stream).is_err(), "the next fence reports it");
}

#[test]
fn argument_checks_reject_before_any_driver_call_and_driver_failures_fail() {
    let (backend, shared) = backend(Wake::Waiter);
    let stream = backend.create_stream(0).unwrap();
    let memory = backend.allocate(16).unwrap();
    let rejected = |outcome: Result<(), EnqueueError>| matches!(outcome, Err(EnqueueError::Rejected(_)));
    assert!(matches!(
        submit(&backend, &stream, Command::Zero { dst: span(&memory, 8, 16) }),
        Err(EnqueueError::Rejected(Error::OutOfRange {
            offset: 8,
            size: 16,
            len: 16,
            element: crate::ElementType::Bytes
        }))
    ));
    assert!(rejected(submit(&backend, &stream, Command::Fill { dst: span(&memory, 12, 8), word: 1 })));
    assert!(rejected(submit(&backend, &stream, Command::Copy { src: span(&memory, 0, 4), dst: span(&memory, 8, 8) })));
    assert!(rejected(submit(&backend, &stream, Command::Upload { dst: span(&memory, 0, 8), data: vec![1; 4] })));
    // A prepared command handed with another.
    let prepared = backend.prepare(&Command::Zero { dst: span(&memory, 0, 4) }).unwrap();
    // SAFETY: the fake touches no memory.
    let mismatched = unsafe {
        backend.enqueue(&stream, Command::Iota { out: span(&memory, 0, 4), start: 0 }, prepared, OpIo::default())
    };
    assert!(rejected(mismatched));
    assert!(shared.device_calls().is_empty(), "a rejection touches no stream");

    // A driver call that fails on the issuing thread fails its op.
    shared.fail("memset_d32");
    assert!(failure_of(&backend, &stream, Command::Zero { dst: span(&memory, 0, 16) }).is_some());
    shared.fail("launch");
    assert!(failure_of(&backend, &stream, Command::Iota { out: span(&memory, 0, 16), start: 0 }).is_some());
    match fence(&backend, &stream) {
        Err(Error::OpFailed { message, .. }) => assert!(message.contains("1 more failed op"), "{message}"),
        other => panic!("expected the fence to report both failures, got {other:?}"),
    }
}

#[test]
fn a_fence_over_several_streams_reports_their_failures_total_each_named_by_its_stream() {
    let (backend, shared) = backend(Wake::Waiter);
    // Numbered as a runtime numbers them: the failures name those numbers.
    let streams = [3, 5].map(|index| (index, backend.create_stream(index).unwrap()));
    let memory = backend.allocate(64).unwrap();
    shared.fail("memset_d32");
    for (index, stream) in &streams {
        for _ in 0..2 {
            match failure_of(&backend, stream, Command::Zero { dst: span(&memory, 0, 64) }) {
                Some(Error::OpFailed { stream, .. }) => assert_eq!(stream, *index),
                other => panic!("expected a failure on stream {index}, got {other:?}"),
            }
        }
    }
    let done = Completion::new(streams.len(), Arc::new(LiveCounters::default()));
    for (_, stream) in &streams {
        backend.signal(stream, done.clone(), SignalKind::Fence).unwrap();
    }
    match done.wait() {
        Err(Error::OpFailed { stream, message }) => {
            assert!(stream == 3 || stream == 5, "{stream}");
            assert!(message.ends_with("(and 3 more failed ops)"), "every stream's failures counted: {message}");
        }
        other => panic!("expected the fence to report four failures, got {other:?}"),
    }
    for (_, stream) in &streams {
        fence(&backend, stream).expect("each failure is reported once");
    }
}

#[test]
fn a_signal_whose_completion_cannot_be_handed_to_the_driver_waits_for_the_work_before_it() {
    let (backend, shared) = backend(Wake::Waiter);
    let stream = backend.create_stream(0).unwrap();
    let memory = backend.allocate(64).unwrap();
    shared.fail("launch");
    submit(&backend, &stream, Command::Fill { dst: span(&memory, 0, 64), word: 1 }).unwrap();
    lock(&shared.failing).clear();
    // The stream's work runs until this opens; the next signal's event cannot be recorded.
    let device_done = Arc::new(Latch::default());
    *lock(&shared.slow_stream_sync) = Some(device_done.clone());
    let _open = OpenOnDrop(device_done.clone());
    shared.fail("event_record");
    let (fence, drain) = (completion(), completion());
    std::thread::scope(|scope| {
        let signalling = scope.spawn(|| {
            backend.signal(&stream, fence.clone(), SignalKind::Fence).unwrap();
            backend.signal(&stream, drain.clone(), SignalKind::Drain).unwrap();
            backend.device.issuer.flush();
        });
        std::thread::sleep(Duration::from_millis(50));
        // What a drain frees would be freed under the running work.
        assert!(!fence.is_complete() && !drain.is_complete(), "a signal completed before the work before it");
        device_done.open();
        signalling.join().unwrap();
    });
    // The fence reports the failed launch before it, and the refusal.
    match fence.outcome() {
        Some(Err(failures)) => {
            let message = failures.to_string();
            assert!(message.contains("launch failed") && message.contains("1 more"), "{message}");
        }
        other => panic!("the fence: {other:?}"),
    }
    assert!(matches!(drain.outcome(), Some(Err(_))));
}

/// A download queued on the issuing thread behind a launch whose fault
/// loses the device: its bind fails before the download's arm runs, and
/// its reader must still hear of it (it waited forever).
#[test]
fn a_read_queued_behind_a_launch_that_loses_the_device_completes() {
    let (backend, shared) = backend(Wake::Waiter);
    let stream = backend.create_stream(0).unwrap();
    let memory = backend.allocate(64).unwrap();
    let (latch, _open, _) = hold_the_issuing_thread(&backend, &stream, &shared, &memory);
    // Behind the held launch: a read.
    let sink = HostSink::new(completion());
    let command = Command::Download { src: span(&memory, 0, 8), sink: sink.clone() };
    let prepared = backend.prepare(&command).unwrap();
    // SAFETY: the fake touches no memory.
    unsafe { backend.enqueue(&stream, command, prepared, OpIo::default()) }.unwrap();
    assert!(!backend.device.issuer.is_idle(), "the read is queued behind the held launch");
    // The held launch faults: the device is lost.
    lock(&shared.fatal).push("launch");
    latch.open();
    backend.device.issuer.flush();
    assert!(backend.lost().is_some(), "the fault lost the device");
    assert!(soon(|| sink.completion.is_complete()), "the read never completes: a reader waits forever");
}

/// Same, on the admitting thread: a bind that fails (not a loss) fails the read.
#[test]
fn a_read_whose_bind_fails_completes() {
    let (backend, shared) = backend(Wake::Waiter);
    let stream = backend.create_stream(0).unwrap();
    let memory = backend.allocate(64).unwrap();
    let sink = HostSink::new(completion());
    let command = Command::Download { src: span(&memory, 0, 8), sink: sink.clone() };
    let prepared = backend.prepare(&command).unwrap();
    shared.fail("bind");
    // SAFETY: the fake touches no memory.
    unsafe { backend.enqueue(&stream, command, prepared, OpIo::default()) }.unwrap();
    backend.device.issuer.flush();
    lock(&shared.failing).clear();
    assert!(soon(|| sink.completion.is_complete()), "the read never completes: a reader waits forever");
}
