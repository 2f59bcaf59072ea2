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
