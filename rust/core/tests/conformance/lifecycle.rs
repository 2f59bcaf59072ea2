//! Lifetimes: streams retire after their work, memory is freed on its last
//! use, any handle keeps the runtime alive, `close()` is the one explicit end
//! and every caller of it waits, and no drop waits for the device.

use std::time::{Duration, Instant};

use weir_core::{ElementType, Error, Runtime};

use crate::common::{hold, settled_diagnostics, wait_for_waiters, words, HOLD_DELAY};

conformance! {
    fn close_waits_for_work_in_flight_and_is_idempotent(runtime: &Runtime) {
        // A runtime of its own, so the harness can still check the shared one.
        let own = Runtime::open(runtime.info().backend).unwrap();
        let s = own.default_stream();
        let out = s.zeros(ElementType::Bytes, 4096).unwrap();
        s.delay(Duration::from_millis(100)).unwrap();
        s.fill_u32(&out, 5).unwrap();
        let fence = s.fence().unwrap();
        own.close().unwrap();
        assert!(fence.is_complete(), "close returned before work in flight finished");
        fence.wait().unwrap();
        own.close().unwrap();
        assert!(matches!(s.fill_u32(&out, 1), Err(Error::Closed)));
    }
}

conformance! {
    fn dropped_streams_are_retired_after_their_work(runtime: &Runtime) {
        let start = runtime.diagnostics();
        let shared = runtime.default_stream().upload(&[1u32; 64]).unwrap();
        for round in 0..1000u32 {
            let s = runtime.new_stream().unwrap();
            let out = s.empty(ElementType::Bytes, 256).unwrap();
            s.copy(&shared, &out).unwrap();
            s.fill_u32(&out, round).unwrap();
            if round % 100 == 0 {
                assert_eq!(words(&s.read(&out).unwrap()), vec![round; 64]);
            }
        }
        // Later users of what retired streams wrote still order after them.
        let reader = runtime.new_stream().unwrap();
        assert_eq!(words(&reader.read(&shared).unwrap()), vec![1; 64]);
        drop(reader);
        runtime.fence().unwrap().wait().unwrap();
        let end = settled_diagnostics(runtime);
        assert_eq!(end.backend.live_streams, start.backend.live_streams, "backend streams left behind: {end:?}");
        assert_eq!(end.live_streams, start.live_streams, "{end:?}");
        assert_eq!(end.retiring_streams, 0, "{end:?}");
        assert_eq!(end.backend.live_events, start.backend.live_events, "{end:?}");
    }

    fn a_released_buffer_is_freed_once_its_last_use_completes(runtime: &Runtime) {
        let s = runtime.new_stream().unwrap();
        let start = runtime.diagnostics();
        let held = hold(&s);
        let big = s.zeros(ElementType::Bytes, 1 << 30).unwrap();
        s.fill_u32(&big, 3).unwrap();
        let fence = s.fence().unwrap();
        drop(big);
        if held.is_gate() {
            let waiting = runtime.diagnostics();
            assert_eq!(waiting.retiring_buffers, 1, "memory in use was freed: {waiting:?}");
            assert_eq!(waiting.backend.live_allocations, start.backend.live_allocations + 1);
        }
        held.release();
        fence.wait().unwrap();
        // No allocation or release follows: the completion itself frees it.
        let completed = Instant::now();
        let deadline = completed + Duration::from_secs(60);
        let end = loop {
            let now = runtime.diagnostics();
            let freed = now.backend.live_allocations == start.backend.live_allocations && now.retiring_buffers == 0;
            if freed || Instant::now() > deadline {
                break now;
            }
            std::thread::yield_now();
        };
        let waited = completed.elapsed();
        assert_eq!(end.backend.live_allocations, start.backend.live_allocations, "after {waited:?}: {end:?}");
        assert_eq!(end.retiring_buffers, 0, "{end:?}");
    }

    fn keeping_only_a_fence_and_a_read_completes_the_work(runtime: &Runtime) {
        let kind = runtime.info().backend;
        for round in 0..20u32 {
            let own = Runtime::open(kind).unwrap();
            let s = own.new_stream().unwrap();
            let held = hold(&s);
            let out = s.zeros(ElementType::Bytes, 1024).unwrap();
            s.fill_u32(&out, round).unwrap();
            let read = s.enqueue_read(&out).unwrap();
            let fence = s.fence().unwrap();
            drop((own, s, out));
            held.release();
            fence.wait().unwrap();
            assert_eq!(words(&read.wait().unwrap()), vec![round; 256]);
        }
    }

    fn concurrent_close_callers_all_wait_for_the_work(runtime: &Runtime) {
        let own = Runtime::open(runtime.info().backend).unwrap();
        let s = own.new_stream().unwrap();
        let held = hold(&s);
        let out = s.zeros(ElementType::Bytes, 1 << 20).unwrap();
        s.fill_u32(&out, 8).unwrap();
        let fence = s.fence().unwrap();
        let barrier = std::sync::Barrier::new(3);
        let gated = held.is_gate();
        std::thread::scope(|scope| {
            let closers: Vec<_> = (0..2)
                .map(|_| {
                    scope.spawn(|| {
                        barrier.wait();
                        own.close().unwrap();
                        (Instant::now(), fence.is_complete())
                    })
                })
                .collect();
            barrier.wait();
            // Both closers are inside close(), waiting, before the work may run
            // (a delay-held stream may finish on its own meanwhile: nothing to wait for).
            if gated {
                wait_for_waiters(&own, 2);
            }
            let released = Instant::now();
            held.release();
            for closer in closers {
                let (returned, complete) = closer.join().unwrap();
                assert!(complete, "a close() returned before the work it must wait for");
                if gated {
                    assert!(returned >= released, "a close() returned while the stream was still held");
                }
            }
        });
        assert!(matches!(s.zeros(ElementType::Bytes, 4), Err(Error::Closed)));
    }

    fn dropping_the_last_handle_never_waits_for_device_work(runtime: &Runtime) {
        let own = Runtime::open(runtime.info().backend).unwrap();
        let s = own.new_stream().unwrap();
        let held = hold(&s);
        let out = s.zeros(ElementType::Bytes, 1 << 20).unwrap();
        s.fill_u32(&out, 8).unwrap();
        // Behind a gate, a drop that waited for the work would never return:
        // it runs on a thread of its own, given far longer than it needs.
        // Behind a delay, it must return well before the delay runs out.
        let most = if held.is_gate() { Duration::from_secs(10) } else { HOLD_DELAY / 3 };
        let started = Instant::now();
        let (dropped, done) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            drop((own, s, out));
            let _ = dropped.send(());
        });
        let returned = done.recv_timeout(most);
        let took = started.elapsed();
        held.release();
        assert!(returned.is_ok(), "dropping the last handles did not return within {most:?}");
        assert!(took < most, "dropping the last handles took {took:?}");
    }
}

conformance! {
    fn a_reused_stream_slot_keeps_its_new_uses_apart_from_the_old(runtime: &Runtime) {
        let first = runtime.new_stream().unwrap();
        let index = first.index();
        let buffer = first.upload(&[6u32; 64]).unwrap();
        drop(first);
        runtime.fence().unwrap().wait().unwrap();
        runtime.diagnostics();
        let second = runtime.new_stream().unwrap();
        assert_eq!(second.index(), index, "a retired stream's slot is reused");
        let held = hold(&second);
        let read = second.enqueue_read(&buffer).unwrap();
        let before = runtime.diagnostics();
        drop(buffer);
        if held.is_gate() {
            // The old stream wrote it and is done, but the new one still reads it.
            let waiting = runtime.diagnostics();
            assert_eq!(waiting.retiring_buffers, 1, "memory freed under a pending read: {waiting:?}");
            assert_eq!(waiting.backend.live_allocations, before.backend.live_allocations);
        }
        held.release();
        assert_eq!(words(&read.wait().unwrap()), vec![6; 64]);
    }
}
