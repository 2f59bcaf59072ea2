//! Replays of captured graphs: launched in admission order, destroyed only
//! after their queued launches, and failed by a failed input.

use super::issuing::hold_the_issuing_thread;
use super::*;

/// Replays the recording `id` of two fills of `memory` on `stream` with
/// `io` (the first replay captures it).
fn replay(backend: &GpuBackend<Fake>, stream: &GpuStream<Fake>, memory: &GpuMemory<Fake>, id: u64, io: &OpIo) {
    let commands = match backend.prepares_replay(id) {
        true => (0..2)
            .map(|word| {
                let command = Command::Fill { dst: span(memory, 0, 64), word };
                let prepared = backend.prepare(&command).unwrap();
                (command, prepared)
            })
            .collect(),
        false => Vec::new(),
    };
    // SAFETY: the fake touches no memory; the memory outlives the graph.
    unsafe { backend.enqueue_replay(stream, id, commands, io.clone()) }.unwrap();
}

/// The graph launches in the calls made so far.
fn graph_launches(shared: &Shared) -> usize {
    shared.calls().iter().filter(|call| matches!(call, Call::GraphLaunch { .. })).count()
}

#[test]
fn a_replay_is_launched_in_admission_order_and_its_graph_goes_only_after_its_queued_launches() {
    let (backend, shared) = backend(Wake::Waiter);
    let stream = backend.create_stream(0).unwrap();
    let memory = backend.allocate(64).unwrap();
    replay(&backend, &stream, &memory, 1, &OpIo::default());
    backend.device.issuer.flush();
    assert_eq!(graph_launches(&shared), 1, "the first replay captured the graph and launched it");
    // Hold the issuing thread in a launch, and queue two replays behind it.
    let (latch, _open, _) = hold_the_issuing_thread(&backend, &stream, &shared, &memory);
    replay(&backend, &stream, &memory, 1, &OpIo::default());
    replay(&backend, &stream, &memory, 1, &OpIo::default());
    assert_eq!(graph_launches(&shared), 1, "the replays wait behind the launch before them");
    std::thread::scope(|scope| {
        let forgetting = scope.spawn(|| backend.forget_replay(1));
        std::thread::sleep(Duration::from_millis(100));
        assert!(!forgetting.is_finished(), "the graph stays while launches of it are queued");
        latch.open();
        forgetting.join().unwrap();
    });
    let calls = shared.calls();
    let destroyed = calls.iter().position(|call| matches!(call, Call::GraphDestroy { .. }));
    let last_launch = calls.iter().rposition(|call| matches!(call, Call::GraphLaunch { .. }));
    assert_eq!(graph_launches(&shared), 3);
    assert!(last_launch < destroyed, "destroyed after its last launch: {calls:?}");
    fence(&backend, &stream).unwrap();
}

#[test]
fn a_replay_whose_input_failed_as_it_ran_launches_nothing_and_fails() {
    let (backend, shared) = backend(Wake::Waiter);
    let stream = backend.create_stream(0).unwrap();
    let memory = backend.allocate(64).unwrap();
    replay(&backend, &stream, &memory, 1, &OpIo::default());
    fence(&backend, &stream).unwrap();
    let failed = Arc::new(OpOutcome::default());
    failed.fail(Error::OpFailed { stream: 0, message: "the producer failed".into() });
    let outcome = Arc::new(OpOutcome::default());
    let io = OpIo { inputs: [failed].into_iter().collect(), outcome: Some(outcome.clone()), ..Default::default() };
    replay(&backend, &stream, &memory, 1, &io);
    backend.device.issuer.flush();
    assert_eq!(graph_launches(&shared), 1, "only the first replay launched");
    assert!(outcome.failure().is_some(), "what the replay writes carries the failure");
    assert!(fence(&backend, &stream).is_err(), "the next fence reports it");
    // A graph launch the driver refuses fails the replay the same way.
    shared.fail("graph_launch");
    let outcome = Arc::new(OpOutcome::default());
    replay(&backend, &stream, &memory, 1, &OpIo { outcome: Some(outcome.clone()), ..Default::default() });
    backend.device.issuer.flush();
    assert!(outcome.failure().is_some());
    assert!(fence(&backend, &stream).is_err());
    backend.forget_replay(1);
}
