//! The device's poll thread: the one place wgpu callbacks run from.
//!
//! It waits on the device only while a fence or a map request is registered
//! and parks on a condvar otherwise: no future ever polls the device from its
//! own `poll`. By the spin policy ([`crate::completion::spin`]), it polls
//! without blocking for up to the spin budget first (a blocking
//! `device.poll(Wait)` wakes it hundreds of microseconds after the device
//! got there on some drivers), then blocks in `device.poll(Wait)`. Completion callbacks run on this long-lived thread,
//! so waking futures costs one thread, not one per fence.
//!
//! Callbacks others registered on the device (through raw access, or another
//! runtime on the same device) run in the same polls, and may panic: the
//! thread contains that and goes on polling. wgpu drops the callbacks of the
//! batch that were not fired yet when one panics, so every callback of ours is
//! made with [`once`]: its body runs when it is dropped uncalled too.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::completion::spin::SpinPolicy;
use crate::error::{Error, Result};
use crate::lock::lock;
use scopeguard::ScopeGuard;
use weir_device::wgpu::scope::BACKEND;

#[derive(Default)]
struct Waiting {
    /// Callbacks registered with wgpu that have not run yet.
    pending: usize,
    /// Registrations so far: tells a poll that found the queue empty whether
    /// anything new arrived meanwhile.
    registered: u64,
    stopping: bool,
}

/// Counts what the poll thread is waiting for.
#[derive(Default)]
pub(crate) struct PollState {
    waiting: Mutex<Waiting>,
    changed: Condvar,
}

impl PollState {
    /// Call before registering a wgpu callback; the callback must call [`PollState::done`].
    pub fn register(&self) {
        let mut waiting = lock(&self.waiting);
        waiting.pending += 1;
        waiting.registered += 1;
        drop(waiting);
        self.changed.notify_one();
    }

    /// A registered callback ran.
    pub fn done(&self) {
        let mut waiting = lock(&self.waiting);
        waiting.pending = waiting.pending.saturating_sub(1);
    }
}

/// The body of a wgpu callback, run exactly once: with the callback's
/// argument when wgpu calls it, with `None` when wgpu drops it uncalled.
pub(crate) fn once<A>(body: impl FnOnce(Option<A>)) -> impl FnOnce(A) {
    let body = scopeguard::guard(body, |body| body(None));
    move |argument| ScopeGuard::into_inner(body)(Some(argument))
}

/// Owns the poll thread; dropping it lets the thread finish the callbacks
/// still registered, then joins it.
pub(crate) struct Poller {
    /// What the thread waits for: the callbacks the lanes register.
    pub state: Arc<PollState>,
    thread: Option<JoinHandle<()>>,
}

impl Poller {
    /// The poll thread of `device`, which spins for up to `spin` per wait
    /// (see [`SpinPolicy`]) before it blocks.
    pub fn spawn(device: wgpu::Device, spin: Duration) -> Result<Poller> {
        let state = Arc::new(PollState::default());
        let shared = state.clone();
        let thread = std::thread::Builder::new()
            .name("weir-wgpu-poll".to_owned())
            .spawn(move || run(&device, &shared, spin))
            .map_err(|e| Error::backend(BACKEND, format!("cannot start the poll thread: {e}")))?;
        Ok(Poller { state, thread: Some(thread) })
    }
}

fn run(device: &wgpu::Device, state: &PollState, budget: Duration) {
    let spin = SpinPolicy::new(budget);
    loop {
        let registered = {
            let mut waiting = lock(&state.waiting);
            while waiting.pending == 0 && !waiting.stopping {
                waiting = state.changed.wait(waiting).unwrap_or_else(|poisoned| poisoned.into_inner());
            }
            if waiting.pending == 0 {
                return;
            }
            waiting.registered
        };
        let start = Instant::now();
        let seen = spin.spin(start, || {
            // Without blocking. A panicking callback unwinds out of `poll` (see below).
            let _ = catch_unwind(AssertUnwindSafe(|| device.poll(wgpu::PollType::Poll)));
            let pending = lock(&state.waiting).pending > 0;
            // A pause between polls: each takes the device's locks, which
            // submitting threads want too.
            for _ in 0..64 {
                std::hint::spin_loop();
            }
            (!pending).then_some(())
        });
        if seen.is_some() {
            spin.learn(start);
            continue;
        }
        // A panicking callback unwinds out of `poll`; the callbacks wgpu had
        // not fired yet ran their drop paths (see `once`). Poll again.
        let outcome = catch_unwind(AssertUnwindSafe(|| device.poll(wgpu::PollType::wait_indefinitely())))
            .unwrap_or(Ok(wgpu::PollStatus::WaitSucceeded));
        spin.learn(start);
        // An empty queue with callbacks still pending and nothing new registered
        // means they wait on something outside the queue: back off, never spin.
        if matches!(outcome, Ok(wgpu::PollStatus::QueueEmpty) | Err(_)) {
            let waiting = lock(&state.waiting);
            if waiting.pending > 0 && waiting.registered == registered {
                // The guard drops at once, poisoned or not: the loop locks again.
                drop(state.changed.wait_timeout(waiting, Duration::from_millis(1)));
            }
        }
    }
}

impl Drop for Poller {
    fn drop(&mut self) {
        lock(&self.state.waiting).stopping = true;
        self.state.changed.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
