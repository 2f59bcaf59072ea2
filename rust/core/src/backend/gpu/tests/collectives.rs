//! Collectives: every rank's part enqueued in one group, and a communicator
//! the driver cannot make.

use super::*;

#[test]
fn a_collective_enqueues_every_ranks_part_in_one_group_on_its_stream() {
    use crate::backend::{Collective, CollectiveKind, CollectivePart, ReduceOp};
    let ((a, shared_a), (b, shared_b)) = (backend(Wake::Waiter), backend(Wake::Waiter));
    let communicator = GpuBackend::<Fake>::communicator(&[&a, &b]).unwrap();
    let (sa, sb) = (a.create_stream(0).unwrap(), b.create_stream(0).unwrap());
    let (send_a, send_b) = (a.allocate(64).unwrap(), b.allocate(64).unwrap());
    let (all_a, all_b) = (a.allocate(128).unwrap(), b.allocate(128).unwrap());
    let gather = Collective { kind: CollectiveKind::AllGather, element: crate::ElementType::F32 };
    let part = |backend, stream, send, receive| CollectivePart { backend, stream, send, receive, io: OpIo::default() };
    let parts = vec![part(&a, &sa, &send_a, Some(&all_a)), part(&b, &sb, &send_b, Some(&all_b))];
    // SAFETY: the fake touches no memory; the memory outlives the call.
    unsafe { GpuBackend::<Fake>::enqueue_collective(&communicator, &gather, parts) }.unwrap();
    let collective_calls = |shared: &Shared| -> Vec<Call> {
        shared.calls().into_iter().filter(|call| matches!(call, Call::Collective { .. })).collect()
    };
    assert_eq!(
        collective_calls(&shared_a),
        vec![Call::Collective { group: 1, stream: sa.raw, send: send_a.ptr, receive: all_a.ptr, bytes: 128 }]
    );
    assert_eq!(
        collective_calls(&shared_b),
        vec![Call::Collective { group: 1, stream: sb.raw, send: send_b.ptr, receive: all_b.ptr, bytes: 128 }]
    );
    assert_eq!(shared_a.unbound_calls.load(Ordering::SeqCst), 0, "a rank's call ran without its device bound");
    assert_eq!(shared_b.unbound_calls.load(Ordering::SeqCst), 0, "a rank's call ran without its device bound");

    // In place: the one buffer is both sides; a rank's failure fails the collective.
    let reduce = Collective { kind: CollectiveKind::AllReduce(ReduceOp::Sum), element: crate::ElementType::I32 };
    shared_b.fail("collective");
    let parts = vec![part(&a, &sa, &send_a, None), part(&b, &sb, &send_b, None)];
    // SAFETY: as above.
    let failed = unsafe { GpuBackend::<Fake>::enqueue_collective(&communicator, &reduce, parts) };
    assert!(matches!(failed, Err(EnqueueError::Failed(_))), "{failed:?}");
    assert!(collective_calls(&shared_a).contains(&Call::Collective {
        group: 2,
        stream: sa.raw,
        send: send_a.ptr,
        receive: send_a.ptr,
        bytes: 64
    }));
}

#[test]
fn a_communicator_that_cannot_be_made_is_the_drivers_error() {
    let ((a, _), (b, shared_b)) = (backend(Wake::Waiter), backend(Wake::Waiter));
    shared_b.fail("communicator");
    assert!(matches!(GpuBackend::<Fake>::communicator(&[&a, &b]), Err(Error::Backend { .. })));
}

#[test]
fn a_collective_over_an_input_that_failed_as_it_ran_fails_every_ranks_result() {
    use crate::backend::{Collective, CollectiveKind, CollectivePart, ReduceOp};
    let ((a, shared_a), (b, shared_b)) = (backend(Wake::Waiter), backend(Wake::Waiter));
    let communicator = GpuBackend::<Fake>::communicator(&[&a, &b]).unwrap();
    let (sa, sb) = (a.create_stream(0).unwrap(), b.create_stream(1).unwrap());
    let (buf_a, buf_b) = (a.allocate(64).unwrap(), b.allocate(64).unwrap());
    // Rank 0's input: its launch fails as it is made, after admission looked.
    shared_a.fail("launch");
    let producer = Arc::new(OpOutcome::default());
    let command = Command::Fill { dst: span(&buf_a, 0, 64), word: 1 };
    let prepared = a.prepare(&command).unwrap();
    // SAFETY: the fake touches no memory.
    unsafe { a.enqueue(&sa, command, prepared, OpIo { outcome: Some(producer.clone()), ..Default::default() }) }
        .unwrap();
    lock(&shared_a.failing).clear();
    let (out_a, out_b) = (Arc::new(OpOutcome::default()), Arc::new(OpOutcome::default()));
    let reads =
        OpIo { inputs: [producer.clone()].into_iter().collect(), outcome: Some(out_a.clone()), ..Default::default() };
    let parts = vec![
        CollectivePart { backend: &a, stream: &sa, send: &buf_a, receive: None, io: reads },
        CollectivePart {
            backend: &b,
            stream: &sb,
            send: &buf_b,
            receive: None,
            io: OpIo { outcome: Some(out_b.clone()), ..Default::default() },
        },
    ];
    let reduce = Collective { kind: CollectiveKind::AllReduce(ReduceOp::Sum), element: crate::ElementType::I32 };
    // SAFETY: as above.
    unsafe { GpuBackend::<Fake>::enqueue_collective(&communicator, &reduce, parts) }.unwrap();
    assert!(producer.failure().is_some(), "the producer failed as it ran");
    // Both ranks met (a joined group's other ranks would wait for a part left out) ...
    for shared in [&shared_a, &shared_b] {
        assert_eq!(shared.calls().iter().filter(|call| matches!(call, Call::Collective { .. })).count(), 1);
    }
    // ... and both results, which mix the failed input, are failed, each stream's fence told.
    for (out, stream, index) in [(&out_a, &sa, 0), (&out_b, &sb, 1)] {
        match out.failure() {
            Some(Error::OpFailed { stream, message }) => {
                assert_eq!(*stream, index);
                assert!(message.contains("launch failed"), "{message}");
            }
            other => panic!("rank {index}'s result: {other:?}"),
        }
        assert!(!stream.failed_ops.is_clear(), "rank {index}'s fence is not told");
    }
}
