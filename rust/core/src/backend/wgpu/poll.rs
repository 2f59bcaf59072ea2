//! The device's poll thread: the one place wgpu callbacks run from.
//!
//! It blocks in `device.poll(Wait)` only while a fence or a map request is
//! registered and parks on a condvar otherwise: no busy loop, and no future
//! ever polls the device from its own `poll`. Completion callbacks run on this
//! long-lived thread, so waking futures costs one thread, not one per fence.

use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use super::scope::BACKEND;
use crate::error::{Error, Result};
use crate::lock::lock;

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

/// Owns the poll thread; dropping it lets the thread finish the callbacks
/// still registered, then joins it.
pub(crate) struct Poller {
    state: Arc<PollState>,
    thread: Option<JoinHandle<()>>,
}

impl Poller {
    pub fn spawn(device: wgpu::Device) -> Result<Poller> {
        let state = Arc::new(PollState::default());
        let shared = state.clone();
        let thread = std::thread::Builder::new()
            .name("weir-wgpu-poll".to_owned())
            .spawn(move || run(&device, &shared))
            .map_err(|e| Error::backend(BACKEND, format!("cannot start the poll thread: {e}")))?;
        Ok(Poller { state, thread: Some(thread) })
    }

    pub fn state(&self) -> &Arc<PollState> {
        &self.state
    }
}

fn run(device: &wgpu::Device, state: &PollState) {
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
        let outcome = device.poll(wgpu::PollType::wait_indefinitely());
        // An empty queue with callbacks still pending and nothing new registered
        // means they wait on something outside the queue: back off, never spin.
        if matches!(outcome, Ok(wgpu::PollStatus::QueueEmpty) | Err(_)) {
            let waiting = lock(&state.waiting);
            if waiting.pending > 0 && waiting.registered == registered {
                drop(
                    state
                        .changed
                        .wait_timeout(waiting, Duration::from_millis(1))
                        .unwrap_or_else(|poisoned| poisoned.into_inner()),
                );
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
