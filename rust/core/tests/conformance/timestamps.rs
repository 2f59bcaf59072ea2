//! Timestamps: device time between two points of one stream, on every backend.
//!
//! wgpu takes timestamps only where the adapter has `TIMESTAMP_QUERY`; where
//! it has not, each case checks the refusal names the feature and says so.

use std::time::Duration;

use futures::executor::block_on;
use weir_core::{BackendKind, ElementType, Error, Runtime, Stream, Timestamp};

/// Long enough to tower over a timer's granularity, short enough to repeat.
const DELAY: Duration = Duration::from_millis(20);
/// Far above anything 20 ms of device time takes, even on a busy machine.
const BOUND: Duration = Duration::from_secs(5);
/// How far a device clock may run ahead of the host's over one test.
const CLOCK_SLACK: Duration = Duration::from_millis(50);

/// A timestamp on `stream`, or `None` where the backend cannot take one
/// (wgpu without `TIMESTAMP_QUERY`, which the refusal must name).
fn timestamp(runtime: &Runtime, stream: &Stream) -> Option<Timestamp> {
    match stream.timestamp() {
        Ok(timestamp) => Some(timestamp),
        Err(Error::Unsupported { backend: BackendKind::Wgpu, what }) if runtime.info().backend == BackendKind::Wgpu => {
            assert!(what.contains("TIMESTAMP_QUERY"), "the refusal names the missing feature: {what}");
            eprintln!("  wgpu: timestamps unsupported here, skipped ({what})");
            None
        }
        Err(other) => panic!("timestamp on {}: {other}", runtime.info().backend),
    }
}

conformance! {
    fn elapsed_across_a_delay_is_at_least_the_delay(runtime: &Runtime) {
        let s = runtime.new_stream().unwrap();
        let Some(before) = timestamp(runtime, &s) else { return };
        // Taken before the delay starts, whichever way the backend delays
        // (a device spin, a worker's sleep, a lane held on the host).
        s.fence().unwrap().wait().unwrap();
        assert!(before.is_complete());
        s.delay(DELAY).unwrap();
        let after = s.timestamp().unwrap();
        let elapsed = after.elapsed_since(&before).unwrap();
        eprintln!("  {}: {elapsed:?} across a delay of {DELAY:?}", runtime.info().backend);
        assert!(elapsed >= DELAY, "{elapsed:?} across a delay of {DELAY:?}");
        assert!(elapsed < BOUND, "{elapsed:?} across a delay of {DELAY:?}");
        // Asked again, and without blocking a thread: the same device time.
        assert_eq!(block_on(after.elapsed_since_async(&before)).unwrap(), elapsed);
    }

    fn a_timestamp_against_itself_is_zero_and_two_in_a_row_are_ordered(runtime: &Runtime) {
        let s = runtime.default_stream();
        let Some(first) = timestamp(runtime, &s) else { return };
        let buffer = s.zeros(ElementType::Bytes, 1 << 16).unwrap();
        s.fill_f32(&buffer, 1.5).unwrap();
        let second = s.timestamp().unwrap();
        assert_eq!(first.elapsed_since(&first).unwrap(), Duration::ZERO);
        assert_eq!(block_on(second.elapsed_since_async(&second)).unwrap(), Duration::ZERO);
        let between = second.elapsed_since(&first).unwrap();
        assert!(between < BOUND, "{between:?}");
        // The other way round would be negative: refused, not clamped.
        assert!(matches!(first.elapsed_since(&second), Err(Error::InvalidArgument(_))));
        assert!(first.is_complete() && second.is_complete());
    }

    fn timestamps_of_the_default_stream_through_two_handles_measure(runtime: &Runtime) {
        // Every default_stream() call makes a handle of its own (as Kotlin's
        // and Swift's `rt.defaultStream().timestamp()` do): one stream still.
        let Some(first) = timestamp(runtime, &runtime.default_stream()) else { return };
        let second = runtime.default_stream().timestamp().unwrap();
        let elapsed = second.elapsed_since(&first).unwrap();
        assert!(elapsed < BOUND, "{elapsed:?}");
    }

    fn timestamps_of_different_streams_or_runtimes_are_refused(runtime: &Runtime) {
        let (s, t) = (runtime.default_stream(), runtime.new_stream().unwrap());
        let start = std::time::Instant::now();
        let Some(on_s) = timestamp(runtime, &s) else { return };
        let on_t = t.timestamp().unwrap();
        assert!(matches!(on_t.elapsed_since(&on_s), Err(Error::InvalidArgument(_))));
        assert!(matches!(block_on(on_s.elapsed_since_async(&on_t)), Err(Error::InvalidArgument(_))));
        let other = Runtime::open(runtime.info().backend).unwrap();
        let elsewhere = other.default_stream().timestamp().unwrap();
        assert!(matches!(elsewhere.elapsed_since(&on_s), Err(Error::InvalidArgument(_))));
        drop(elsewhere);
        other.close().unwrap();
        // A stream that retired and a new one in its place are different streams.
        drop(t);
        let u = runtime.new_stream().unwrap();
        let on_u = u.timestamp().unwrap();
        assert!(matches!(on_u.elapsed_since(&on_t), Err(Error::InvalidArgument(_))));
        // Refusals change nothing: a pair of one stream still measures.
        // Opening and closing another runtime above may take seconds on a
        // busy machine (CUDA: module loads behind other tests' work), so the
        // bound is the host time from before the first to after the second.
        let later = s.timestamp().unwrap();
        let elapsed = later.elapsed_since(&on_s).unwrap();
        let host = start.elapsed();
        assert!(elapsed <= host + CLOCK_SLACK, "{elapsed:?} of device time within {host:?} of host time");
    }

    fn a_failed_op_between_two_timestamps_is_timed_and_reported_by_the_next_fence(runtime: &Runtime) {
        let s = runtime.new_stream().unwrap();
        let Some(before) = timestamp(runtime, &s) else { return };
        let target = s.zeros(ElementType::Bytes, 64).unwrap();
        assert!(s.fail_write(&target, "a deliberate failure").is_err());
        let after = s.timestamp().unwrap();
        // A timestamp is a point, not a fence: the range is timed...
        let elapsed = after.elapsed_since(&before).unwrap();
        assert!(elapsed < BOUND, "{elapsed:?}");
        // ...and the failure is still the next fence's to report, once.
        let reported = s.fence().unwrap().wait().unwrap_err();
        assert!(reported.to_string().contains("a deliberate failure"), "{reported}");
        s.fence().unwrap().wait().unwrap();
    }

    fn timestamps_dropped_untaken_or_unread_leak_nothing(runtime: &Runtime) {
        let s = runtime.new_stream().unwrap();
        let Some(first) = timestamp(runtime, &s) else { return };
        let held = crate::common::hold(&s);
        // Behind the hold: not taken yet when dropped.
        let pending: Vec<Timestamp> = (0..16).map(|_| s.timestamp().unwrap()).collect();
        drop(pending);
        drop(first);
        held.release();
        // The harness checks that no backend event is left alive.
    }

    fn a_closed_runtime_refuses_new_timestamps(runtime: &Runtime) {
        let other = Runtime::open(runtime.info().backend).unwrap();
        let s = other.default_stream();
        let Some(before) = timestamp(&other, &s) else { return };
        other.close().unwrap();
        assert!(matches!(s.timestamp(), Err(Error::Closed)));
        // One taken before the close still reads against itself.
        assert_eq!(before.elapsed_since(&before).unwrap(), Duration::ZERO);
    }
}
