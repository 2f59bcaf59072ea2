//! Waits that end before they suspend, where the stream's recent waits were
//! quick.
//!
//! A Kotlin or Swift `…AndWait` that suspends pays for the suspension twice
//! over: the coroutine or Task is parked, then resumed on another thread once
//! the completion's waker runs (some 5–20 µs on a busy host). A small op on
//! an idle stream is often done sooner than that. So before a wait returns
//! its future, it watches the fence on the calling thread for a short,
//! bounded time, when the stream's recent waits took about that long: a
//! wait that is over by then returns at the first poll, with no suspension
//! and no wake-up. Behind long work nothing spins.

use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use std::{future::Future, pin::Pin, sync::Arc};

/// The most a wait spins on its calling thread.
const MOST: Duration = Duration::from_micros(100);

/// How long a stream's recent waits took, as one handle saw them.
#[derive(Debug, Default)]
pub(crate) struct QuickWaits {
    /// A moving average of the time from a wait's start to its end, in ns.
    expected: Arc<AtomicU64>,
}

impl QuickWaits {
    /// True when the recent waits were quick enough to be watched.
    pub(crate) fn is_quick(&self) -> bool {
        Duration::from_nanos(self.expected.load(Ordering::Relaxed)) < MOST
    }

    /// Spins on `done` for at most twice the recent waits' time (and
    /// [`MOST`]) when they were quick, then hands back `wait` timed, so that
    /// how long it took teaches the next wait.
    pub(crate) fn settle<F: Future + Unpin>(&self, done: impl Fn() -> bool, wait: F) -> Timed<F> {
        let start = Instant::now();
        let expected = Duration::from_nanos(self.expected.load(Ordering::Relaxed));
        if expected < MOST {
            let budget = (expected * 2 + Duration::from_micros(5)).min(MOST);
            while !done() && start.elapsed() < budget {
                std::hint::spin_loop();
            }
        }
        Timed { wait, start, expected: self.expected.clone() }
    }
}

/// A wait that records how long it took once it is over.
pub(crate) struct Timed<F> {
    wait: F,
    start: Instant,
    expected: Arc<AtomicU64>,
}

impl<F: Future + Unpin> Future for Timed<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        let outcome = Pin::new(&mut this.wait).poll(cx);
        if outcome.is_ready() {
            let took = this.start.elapsed().as_nanos().min(u128::from(u64::MAX)) as u64;
            let expected = this.expected.load(Ordering::Relaxed);
            this.expected.store(expected.saturating_mul(3).saturating_add(took) / 4, Ordering::Relaxed);
        }
        outcome
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::future::{ready, Future};
    use std::pin::Pin;
    use std::sync::atomic::Ordering;
    use std::task::{Context, Poll, Waker};
    use std::time::Duration;

    use super::{QuickWaits, MOST};

    fn poll_once<F: Future + Unpin>(future: &mut F) -> Poll<F::Output> {
        Pin::new(future).poll(&mut Context::from_waker(Waker::noop()))
    }

    #[test]
    fn a_quick_stream_watches_its_fence_and_a_slow_one_does_not() {
        let waits = QuickWaits::default();
        // Nothing learnt yet: quick, so the fence is watched (and here it is done at once).
        let asked = Cell::new(0);
        let mut wait = waits.settle(
            || {
                asked.set(asked.get() + 1);
                true
            },
            ready(()),
        );
        assert_eq!(asked.get(), 1, "a quick stream's fence is watched");
        assert!(poll_once(&mut wait).is_ready());
        // Waits that took longer than the most it spins: it asks nothing.
        waits.expected.store(4 * MOST.as_nanos() as u64, Ordering::Relaxed);
        let asked = Cell::new(0);
        let _wait = waits.settle(
            || {
                asked.set(asked.get() + 1);
                false
            },
            ready(()),
        );
        assert_eq!(asked.get(), 0, "behind long work nothing spins");
    }

    #[test]
    fn a_wait_that_is_not_over_in_time_is_handed_back_and_teaches_the_next() {
        let waits = QuickWaits::default();
        let start = std::time::Instant::now();
        let mut wait = waits.settle(|| false, std::future::pending::<()>());
        // Bounded by twice nothing plus a margin, far below any MOST-sized hang.
        assert!(start.elapsed() < Duration::from_secs(1));
        assert!(poll_once(&mut wait).is_pending(), "the wait is handed back, not finished");
        // A wait that ends records how long it took.
        waits.expected.store(0, Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(2));
        let mut done = waits.settle(|| false, ready(()));
        std::thread::sleep(Duration::from_millis(2));
        assert!(poll_once(&mut done).is_ready());
        assert!(waits.expected.load(Ordering::Relaxed) > 0, "the time taken is learnt");
    }
}
