//! A waker that counts its wake-ups, for the loom model checks.

use std::task::{Wake, Waker};

use loom::sync::atomic::{AtomicUsize, Ordering::SeqCst};

#[derive(Default)]
pub struct Counter {
    wakes: AtomicUsize,
}

impl Wake for Counter {
    fn wake(self: std::sync::Arc<Self>) {
        self.wakes.fetch_add(1, SeqCst);
    }
}

impl Counter {
    /// A counter and a waker that counts on it.
    pub fn new() -> (std::sync::Arc<Counter>, Waker) {
        let counter = std::sync::Arc::new(Counter::default());
        let waker = Waker::from(counter.clone());
        (counter, waker)
    }

    pub fn wakes(&self) -> usize {
        self.wakes.load(SeqCst)
    }
}
