//! Fences: precise, multi-wait, drop-safe, woken by the completion path.

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use futures::executor::block_on;
use futures::future::join_all;
use weir_core::{BackendKind, ElementType, Timestamp};

use crate::common::{hold, retried, wait_for_waiters, CountingWaker, HOLD_DELAY};

conformance! {
    fn fence_resolves_only_after_all_prior_work(runtime: &Runtime) {
        let s = runtime.default_stream();
        let start = std::time::Instant::now();
        let held = hold(&s);
        let out = s.empty(ElementType::Bytes, 1 << 16).unwrap();
        s.fill_u32(&out, 3).unwrap();
        let fence = s.fence().unwrap();
        let gated = held.is_gate();
        if gated {
            assert!(!fence.is_complete(), "fence complete before the held work ran");
        }
        held.release();
        fence.wait().unwrap();
        assert!(fence.is_complete());
        if !gated {
            // A device-side delay may be over before this thread looks (a busy
            // machine can stall it that long), so judge by time instead.
            assert!(start.elapsed() >= HOLD_DELAY, "the fence resolved before the held work could have run");
        }
        // Completed: the data is there without any further wait.
        assert_eq!(s.read_as::<u32>(&out).unwrap(), vec![3; 1 << 14]);
    }
}

conformance! {
    fn fence_is_waited_many_times_from_threads_and_tasks(runtime: &Runtime) {
        let s = runtime.default_stream();
        let held = hold(&s);
        let out = s.zeros(ElementType::Bytes, 4096).unwrap();
        s.fill_f32(&out, 1.5).unwrap();
        let fence = s.fence().unwrap();
        std::thread::scope(|scope| {
            let threads: Vec<_> = (0..4).map(|_| scope.spawn(|| fence.wait())).collect();
            let tasks = scope.spawn(|| block_on(join_all((0..16).map(|_| fence.wait_async()))));
            // Behind a gate, release once every thread blocks and every task
            // waits (a delay-held stream may finish before that, on its own).
            if held.is_gate() {
                wait_for_waiters(runtime, 4 + 16);
            }
            held.release();
            for thread in threads {
                thread.join().unwrap().unwrap();
            }
            assert!(tasks.join().unwrap().into_iter().all(|r| r.is_ok()));
        });
        // Waiting again after completion resolves at once.
        fence.wait().unwrap();
        block_on(fence.wait_async()).unwrap();
    }
}

conformance! {
    fn future_is_woken_once_by_completion(runtime: &Runtime) {
        let s = runtime.default_stream();
        let (held, fence, counter, waker, mut future) = retried(|| {
            let held_at = std::time::Instant::now();
            let held = hold(&s);
            let fence = s.fence().unwrap();
            let counter = Arc::new(CountingWaker(AtomicUsize::new(0)));
            let waker = Waker::from(counter.clone());
            let mut future = Box::pin(fence.wait_async());
            let polled = future.as_mut().poll(&mut Context::from_waker(&waker));
            if polled.is_ready() && held.ran_out(held_at) {
                return None;
            }
            let since = held_at.elapsed();
            assert!(polled.is_pending(), "the fence of a held stream is done {since:?} after the hold: {polled:?}");
            Some((held, fence, counter, waker, future))
        });
        assert_eq!(runtime.diagnostics().live_waiters, 1);
        held.release();
        fence.wait().unwrap();
        // The completion path wakes right after it releases blocked waiters.
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        while counter.0.load(Ordering::SeqCst) == 0 && std::time::Instant::now() < deadline {
            std::thread::yield_now();
        }
        // Diagnostics first lets every wake-up already due run: a second one would show.
        runtime.diagnostics();
        assert_eq!(counter.0.load(Ordering::SeqCst), 1, "woken once by the completion path");
        assert!(matches!(future.as_mut().poll(&mut Context::from_waker(&waker)), Poll::Ready(Ok(()))));
        assert_eq!(runtime.diagnostics().live_waiters, 0);
    }
}

conformance! {
    fn complete_fence_resolves_without_a_wake_up(runtime: &Runtime) {
        let s = runtime.default_stream();
        let fence = s.fence().unwrap();
        fence.wait().unwrap();
        let counter = Arc::new(CountingWaker(AtomicUsize::new(0)));
        let waker = Waker::from(counter.clone());
        let mut future = pin!(fence.wait_async());
        assert!(matches!(future.as_mut().poll(&mut Context::from_waker(&waker)), Poll::Ready(Ok(()))));
        assert_eq!(counter.0.load(Ordering::SeqCst), 0);
    }
}

conformance! {
    fn fence_dropped_before_completion_leaks_nothing(runtime: &Runtime) {
        let s = runtime.default_stream();
        let held = hold(&s);
        let fences: Vec<_> = (0..8).map(|_| s.fence().unwrap()).collect();
        assert_eq!(runtime.diagnostics().live_fences, 8);
        drop(fences);
        assert_eq!(runtime.diagnostics().live_fences, 0);
        held.release();
        // The harness then checks that no backend event, fence or waiter is left.
    }
}

conformance! {
    fn fence_future_dropped_mid_wait_leaks_nothing(runtime: &Runtime) {
        let s = runtime.default_stream();
        let held = hold(&s);
        let held_by_gate = held.is_gate();
        let fence = s.fence().unwrap();
        let counter = Arc::new(CountingWaker(AtomicUsize::new(0)));
        let waker = Waker::from(counter.clone());
        {
            let mut futures: Vec<_> = (0..5).map(|_| Box::pin(fence.wait_async())).collect();
            for future in &mut futures {
                assert!(future.as_mut().poll(&mut Context::from_waker(&waker)).is_pending());
            }
            assert_eq!(runtime.diagnostics().live_waiters, 5);
        }
        assert_eq!(runtime.diagnostics().live_waiters, 0);
        drop(fence);
        held.release();
        runtime.fence().unwrap().wait().unwrap();
        runtime.diagnostics();
        // Behind a gate the futures surely went before the fence completed; a
        // delay-held stream may finish while they are still registered.
        if held_by_gate {
            assert_eq!(counter.0.load(Ordering::SeqCst), 0, "a dropped future was woken");
        }
    }
}

conformance! {
    fn dropping_a_buffer_in_use_by_held_work_is_safe(runtime: &Runtime) {
        let (s, t) = (runtime.new_stream().unwrap(), runtime.new_stream().unwrap());
        let allocations = runtime.diagnostics().backend.live_allocations;
        let held = hold(&s);
        let used = s.empty(ElementType::Bytes, 1 << 20).unwrap();
        s.fill_u32(&used, 1).unwrap();
        let copy = t.empty(ElementType::Bytes, 1 << 20).unwrap();
        t.copy(&used, &copy).unwrap();
        drop(used);
        if held.is_gate() {
            // A delay-held stream may be done by now; a gated one is not.
            let d = runtime.diagnostics();
            assert_eq!(d.retiring_buffers, 1, "memory still in use must not be freed yet");
            assert_eq!(d.backend.live_allocations, allocations + 2);
        }
        held.release();
        assert_eq!(t.read_as::<u32>(&copy).unwrap(), vec![1; 1 << 18]);
        runtime.fence().unwrap().wait().unwrap();
        // Freed once its users are done, with no allocation to sweep it.
        let d = runtime.diagnostics();
        assert_eq!(d.retiring_buffers, 0);
        assert_eq!(d.backend.live_allocations, allocations + 1);
    }
}

conformance! {
    fn runtime_fence_covers_every_stream(runtime: &Runtime) {
        let (s, t) = (runtime.new_stream().unwrap(), runtime.new_stream().unwrap());
        let held_s = hold(&s);
        let held_t = hold(&t);
        let fence = runtime.fence().unwrap();
        held_s.release();
        if held_t.is_gate() {
            // Once s is done, only the held t keeps the runtime fence pending.
            s.fence().unwrap().wait().unwrap();
            assert!(!fence.is_complete(), "runtime fence ignored a held stream");
        }
        held_t.release();
        block_on(runtime.sync()).unwrap();
        assert!(fence.is_complete());
    }
}

conformance! {
    fn fence_on_an_idle_stream_is_complete_at_once(runtime: &Runtime) {
        let s = runtime.new_stream().unwrap();
        let out = s.zeros(ElementType::Bytes, 4096).unwrap();
        s.fill_u32(&out, 1).unwrap();
        s.fence().unwrap().wait().unwrap();
        // Nothing admitted since a fence that succeeded: that fence answers,
        // on every backend, with no device round trip and no wake-up (on
        // CUDA and HIP a new fence would record an event and wait for the
        // wake thread to see it; the CPU and wgpu backends answer an idle
        // stream's fence at once themselves). The scheduler answers before
        // any backend is asked, so no backend's own timing (wgpu's counting
        // of a submission done) can leave it pending for a moment.
        for _ in 0..3 {
            assert!(s.fence().unwrap().is_complete(), "a fence on an idle stream waited for the device");
        }
    }
}

conformance! {
    fn is_synced_says_yes_only_when_sync_would_succeed_at_once_and_takes_no_failure(runtime: &Runtime) {
        // CPU and wgpu answer from their own state, CUDA asks the stream; HIP always says no.
        let settles = matches!(runtime.info().backend, BackendKind::Cpu | BackendKind::Wgpu | BackendKind::Cuda);
        let s = runtime.new_stream().unwrap();
        let synced_soon = |s: &weir_core::Stream| {
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            while !s.is_synced() {
                if std::time::Instant::now() > deadline {
                    return false;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            true
        };
        assert_eq!(synced_soon(&s), settles, "a new, idle stream");
        // Work in flight.
        let held = hold(&s);
        let out = s.zeros(ElementType::Bytes, 64).unwrap();
        // A gate holds until released; a delay (CUDA) for a second and more.
        assert!(!s.is_synced(), "synced with held work queued");
        held.release();
        block_on(s.sync()).unwrap();
        assert_eq!(synced_soon(&s), settles, "after a sync");
        // Synced means every earlier fence and timestamp says it is complete,
        // even where the device finishes before their completions are delivered.
        let fence = s.fence().unwrap();
        let stamp = s.timestamp().ok(); // wgpu without TIMESTAMP_QUERY takes none
        if synced_soon(&s) {
            assert!(fence.is_complete(), "synced, with an earlier fence pending");
            assert!(stamp.as_ref().is_none_or(Timestamp::is_complete), "synced, with an earlier timestamp pending");
        }
        drop((fence, stamp));
        // A failure to report: never synced, and asking takes nothing from the next sync.
        let _ = s.fail_write(&out, "a deliberate failure");
        for _ in 0..3 {
            assert!(!s.is_synced(), "synced with a failure to report");
        }
        let error = block_on(s.sync()).unwrap_err();
        assert!(error.to_string().contains("deliberate"), "the next sync reports the failure: {error}");
        block_on(s.sync()).unwrap();
        assert_eq!(synced_soon(&s), settles, "once the failure was reported");
        drop(out);
    }
}

conformance! {
    fn ten_thousand_fences_of_a_held_stream_register_their_waiters_and_all_wake(runtime: &Runtime) {
        const FENCES: usize = 10_000;
        let s = runtime.new_stream().unwrap();
        let held = hold(&s);
        let start = std::time::Instant::now();
        let fences: Vec<_> = (0..FENCES).map(|_| s.fence().unwrap()).collect();
        let waker = Arc::new(CountingWaker(AtomicUsize::new(0)));
        let mut waits: Vec<_> = fences.iter().map(|fence| Box::pin(fence.wait_async())).collect();
        let counting = Waker::from(waker.clone());
        let mut cx = Context::from_waker(&counting);
        let mut pending = 0;
        for wait in waits.iter_mut() {
            if wait.as_mut().poll(&mut cx).is_pending() {
                pending += 1;
            }
        }
        let registered = runtime.diagnostics().live_waiters;
        let made = start.elapsed();
        // A delay (where the backend has no gate) must outlast the fences' making.
        assert!(held.is_gate() || made < HOLD_DELAY / 2, "{FENCES} fences took {made:?}");
        assert_eq!(pending, FENCES, "a fence completed while the stream was held");
        assert_eq!(registered, FENCES as u64, "every pending wait registered its waker");
        held.release();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while waker.0.load(Ordering::SeqCst) < FENCES && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(waker.0.load(Ordering::SeqCst), FENCES, "each registered waker was woken once");
        for wait in waits.iter_mut() {
            assert!(matches!(wait.as_mut().poll(&mut cx), Poll::Ready(Ok(()))));
        }
        drop(waits);
        drop(fences);
        assert_eq!(runtime.diagnostics().live_waiters, 0);
        eprintln!("  {FENCES} fences made and polled in {made:?}");
    }
}
