//! Owners dropped on threads that never bound the device, and frees that
//! wait for the device on a thread of their own.

use super::*;

#[test]
fn streams_and_memory_drop_on_a_thread_that_never_bound_the_device() {
    for wake in [Wake::Waiter, Wake::Callback] {
        let (backend, shared) = backend(wake);
        let stream = backend.create_stream(0).unwrap();
        let memory = backend.allocate(64).unwrap();
        submit(&backend, &stream, Command::Zero { dst: span(&memory, 0, 64) }).unwrap();
        fence(&backend, &stream).unwrap();
        assert_eq!(backend.counters().live_streams, 1);
        let ptr = memory.ptr;
        // The scheduler drops both on its delivery thread, which never bound it.
        std::thread::spawn(move || drop((stream, memory))).join().unwrap();
        assert_eq!(shared.unbound_calls.load(Ordering::SeqCst), 0, "{wake:?}: every drop bound the device first");
        let counters = backend.counters();
        assert_eq!((counters.live_streams, counters.live_allocations, counters.live_events), (0, 0, 0));
        assert!(shared.calls().iter().any(|call| matches!(call, Call::Free { ptr: freed, .. } if *freed == ptr)));
        // Only the backend holds the device now (its issuing thread never
        // does): the waiter let the stream's completions go, and the wake
        // thread's probe let its event go (on the release thread).
        assert!(soon(|| Arc::strong_count(&backend.device) == 1), "{wake:?}");
    }
}

#[test]
fn a_free_that_waits_for_the_device_runs_on_its_own_thread() {
    let (fake, shared) = Fake::new(true);
    let backend = GpuBackend::with(fake, Wake::Waiter, SPIN_BUDGET).unwrap();
    let memory = backend.allocate(64).unwrap();
    drop(memory);
    // The device's drop lets queued frees finish.
    drop(backend);
    match shared.calls().iter().find(|call| matches!(call, Call::Free { .. })) {
        Some(Call::Free { thread, .. }) => assert_eq!(thread.as_deref(), Some("weir-cuda-free")),
        _ => panic!("the memory was never freed"),
    }
    assert_eq!(shared.unbound_calls.load(Ordering::SeqCst), 0);
}
