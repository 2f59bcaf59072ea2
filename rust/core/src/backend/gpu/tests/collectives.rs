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
