//! A wait for a stream's fence watches it on its own thread first, for about
//! as long as the stream's recent waits took, while they were short; behind
//! long work it parks at once. Shown on the CPU backend with kernels that
//! take a known time.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use futures::executor::block_on;
use weir_core::{BackendKind, Fence, Grid, Kernel, Runtime, Stream};

/// A CPU kernel that keeps its worker busy for `time`.
fn busy(time: Duration) -> Kernel {
    Kernel::custom("busy")
        .cpu(move |_| {
            let start = Instant::now();
            while start.elapsed() < time {
                std::hint::spin_loop();
            }
            Ok(())
        })
        .build()
}

fn run(stream: &Stream, kernel: &Kernel) {
    stream.execute(kernel, Grid::linear(1, 1), &[]).unwrap();
}

fn poll_once<F: Future + Unpin>(future: &mut F) -> Poll<F::Output> {
    Pin::new(future).poll(&mut Context::from_waker(Waker::noop()))
}

/// Waits for 20 µs kernels until the stream's waits count as short (a
/// first wait starts a worker thread, and a busy host may delay any), or
/// gives up after 200.
fn teach_short_waits(stream: &Stream, short: &Kernel) -> bool {
    for _ in 0..200 {
        run(stream, short);
        block_on(stream.sync()).unwrap();
        if stream.waits_are_short() {
            return true;
        }
    }
    false
}

/// Of 50 rounds, in how many a wait for a 20 µs kernel admitted just
/// before ended in its first poll: a stream fence's wait, and a runtime
/// fence's (never watched), taken in turn so that a busy host weighs on
/// both alike. The first poll comes right after the admission, long before
/// such a kernel is done: only a poll that watches its fence finds it done,
/// or one whose thread the host put aside meanwhile.
fn seen_in_first_poll(runtime: &Runtime, stream: &Stream, short: &Kernel) -> (usize, usize) {
    let (mut watched, mut unwatched) = (0, 0);
    for _ in 0..50 {
        run(stream, short);
        watched += usize::from(ends_in_first_poll(stream.fence().unwrap()));
        run(stream, short);
        unwatched += usize::from(ends_in_first_poll(runtime.fence().unwrap()));
    }
    (watched, unwatched)
}

/// Whether a wait for `fence` ended in its first poll; it has ended either way.
fn ends_in_first_poll(fence: Fence) -> bool {
    let mut wait = fence.wait_async();
    match poll_once(&mut wait) {
        Poll::Ready(outcome) => {
            outcome.unwrap();
            true
        }
        Poll::Pending => {
            block_on(wait).unwrap();
            false
        }
    }
}

/// One test, its parts in turn: they time kernels, so they must not share
/// the host's cores with each other.
#[test]
fn a_short_op_is_seen_done_in_the_first_poll_long_work_parks_at_once_and_no_spin_never_watches() {
    let short = busy(Duration::from_micros(20));
    let runtime = Runtime::open(BackendKind::Cpu).unwrap();
    let stream = runtime.new_stream().unwrap();
    // Timed on a shared host: three tries, so that a host too busy to run
    // the kernel on time during one does not decide.
    let watched_more = (0..3).any(|_| {
        if !teach_short_waits(&stream, &short) {
            eprintln!("waits of 20 µs never counted as short: the host was too busy this try");
            return false;
        }
        let (watched, unwatched) = seen_in_first_poll(&runtime, &stream, &short);
        eprintln!("first polls that saw the kernel done: {watched} of 50 watched, {unwatched} of 50 not");
        watched >= unwatched + 10
    });
    assert!(
        watched_more,
        "in three tries, waits of 20 µs never counted as short, or watched first polls did not see short kernels \
         done more often than unwatched ones"
    );

    let long = busy(Duration::from_millis(20));
    for _ in 0..4 {
        run(&stream, &long);
        stream.fence().unwrap().wait().unwrap();
    }
    assert!(!stream.waits_are_short(), "waits of 20 ms are long");
    // The quickest of three first polls: a host that puts the thread aside
    // during one does not decide, while a poll that watched would take about
    // the kernel's 20 ms every time.
    let polled = (0..3)
        .map(|_| {
            run(&stream, &long);
            let fence = stream.fence().unwrap();
            let mut wait = fence.wait_async();
            let start = Instant::now();
            assert!(poll_once(&mut wait).is_pending());
            let polled = start.elapsed();
            block_on(wait).unwrap();
            polled
        })
        .min()
        .unwrap_or_default();
    assert!(polled < Duration::from_millis(5), "behind long work the quickest of three first polls took {polled:?}");
    assert_eq!(runtime.diagnostics().live_waiters, 0, "a watch leaves no waiter behind");

    // A runtime built never to spin: its streams' waits never count as
    // short, and a first poll finds the kernel done only by chance.
    let never = Runtime::builder(BackendKind::Cpu).spin(Duration::ZERO).open().unwrap();
    let stream = never.new_stream().unwrap();
    assert!(!teach_short_waits(&stream, &short), "a runtime that never spins watched a fence");
    let (watched, unwatched) = seen_in_first_poll(&never, &stream, &short);
    eprintln!("never spinning: {watched} of 50 stream fences, {unwatched} of 50 runtime fences");
    assert!(watched < unwatched + 10, "{watched} of 50 first polls saw the kernel done, against {unwatched} unwatched");
}

/// Each wait of a stream fence not yet done is counted as seen while
/// watching or as blocked (the probe `weir_core::wait_paths`, in a build
/// with test support), whichever way its host made it go.
#[cfg(feature = "test-support")]
#[test]
fn each_wait_of_a_stream_fence_not_done_is_counted_as_seen_or_blocked() {
    let runtime = Runtime::open(BackendKind::Cpu).unwrap();
    let stream = runtime.new_stream().unwrap();
    let long = busy(Duration::from_millis(2));
    let before = weir_core::wait_paths();
    for _ in 0..5 {
        run(&stream, &long);
        stream.fence().unwrap().wait().unwrap();
    }
    let paths = weir_core::wait_paths().since(&before);
    // Other tests of this file wait for fences meanwhile: at least these five.
    let counted = paths.fences_seen + paths.fences_blocked;
    assert!(counted >= 5, "{counted} of 5 waits counted");
}
