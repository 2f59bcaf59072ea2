//! What holds a stream of a host engine at a point (test support), and one
//! thread that opens gates when their time is up: a delay on the host
//! engines is a gate the timer opens, so it holds its stream as a hold
//! does, with no thread (nor a CPU pool worker) asleep per delay. CUDA and
//! HIP time a delay on the device instead.

use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use crate::lock::lock;

/// A host-controlled barrier in a stream (test support): work behind it
/// waits until it is opened.
///
/// One mechanism for every engine: an engine that holds a stream at a gate
/// polls it with a waker, and the opening wakes it (a CPU stream is
/// rescheduled onto the pool, a wgpu lane issues on). No thread blocks on a gate.
#[derive(Debug, Default)]
pub struct Gate {
    /// Whether it is open, and the wakers of the engines held at it.
    state: Mutex<(bool, Vec<Waker>)>,
}

impl Gate {
    /// Lets the stream run past the gate.
    pub fn open(&self) {
        let held = {
            let mut state = lock(&self.state);
            state.0 = true;
            std::mem::take(&mut state.1)
        };
        // Out of the lock: a waker may poll the gate again.
        held.into_iter().for_each(Waker::wake);
    }

    /// Ready once open; else `waker` is woken when it opens. Never blocks.
    pub(crate) fn poll_open(&self, waker: &Waker) -> Poll<()> {
        let mut state = lock(&self.state);
        if state.0 {
            return Poll::Ready(());
        }
        state.1.push(waker.clone());
        Poll::Pending
    }
}

/// A gate that opens by itself `duration` after this call: on the timer
/// thread, never on the calling one (whose locks a waker of the gate may
/// want), unless no timer thread could start, when it opens at once (a
/// delay is best effort).
pub(crate) fn gate_after(duration: Duration) -> Arc<Gate> {
    let gate = Arc::new(Gate::default());
    let due = Instant::now() + duration;
    let sent = timer().is_some_and(|sender| sender.send((due, gate.clone())).is_ok());
    if !sent {
        gate.open();
    }
    gate
}

/// What holds a stream at a point: a gate its holder opens, or a delay,
/// counted from when the stream gets there (a host engine's lane polls it
/// first there: `lane::Step::Hold`).
pub(crate) enum Hold {
    Gate(Arc<Gate>),
    Delay(Duration),
}

impl Hold {
    /// Ready once the stream may go on; else `waker` is woken then. A
    /// delay's time starts at its first poll; a zero delay holds nothing.
    pub(crate) fn poll_open(&mut self, waker: &Waker) -> Poll<()> {
        match self {
            Hold::Delay(duration) if duration.is_zero() => Poll::Ready(()),
            Hold::Delay(duration) => {
                let gate = gate_after(*duration);
                let opened = gate.poll_open(waker);
                *self = Hold::Gate(gate);
                opened
            }
            Hold::Gate(gate) => gate.poll_open(waker),
        }
    }
}

/// A gate and when it opens.
type Timed = (Instant, Arc<Gate>);

/// Where timed gates go: the timer thread's queue, started at the first
/// delay; `None` if it could not start.
fn timer() -> Option<&'static Sender<Timed>> {
    static TIMER: OnceLock<Option<Sender<Timed>>> = OnceLock::new();
    TIMER
        .get_or_init(|| {
            let (sender, due) = channel::<Timed>();
            std::thread::Builder::new()
                .name("weir-timer".to_owned())
                .spawn(move || {
                    // Few at a time (a test's delays): a list does.
                    let mut waiting: Vec<Timed> = Vec::new();
                    loop {
                        let now = Instant::now();
                        waiting.retain(|(at, gate)| {
                            let open = *at <= now;
                            if open {
                                gate.open();
                            }
                            !open
                        });
                        // None waiting: `Duration::MAX` waits as `recv` does.
                        let next = waiting.iter().map(|(at, _)| at.saturating_duration_since(Instant::now())).min();
                        match due.recv_timeout(next.unwrap_or(Duration::MAX)) {
                            Ok(entry) => waiting.push(entry),
                            Err(RecvTimeoutError::Timeout) => {}
                            Err(RecvTimeoutError::Disconnected) => return,
                        }
                    }
                })
                .ok()
                .map(|_| sender)
        })
        .as_ref()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delay_counts_from_its_first_poll_and_a_zero_one_holds_nothing() {
        let waker = std::task::Waker::noop();
        assert!(Hold::Delay(Duration::ZERO).poll_open(waker).is_ready());
        let mut delay = Hold::Delay(Duration::from_millis(30));
        std::thread::sleep(Duration::from_millis(40));
        let reached = Instant::now();
        assert!(delay.poll_open(waker).is_pending(), "the time before the stream got there does not count");
        while delay.poll_open(waker).is_pending() {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(reached.elapsed() >= Duration::from_millis(30));
        let gate = Arc::new(Gate::default());
        let mut held = Hold::Gate(gate.clone());
        assert!(held.poll_open(waker).is_pending());
        gate.open();
        assert!(held.poll_open(waker).is_ready());
    }

    #[test]
    fn a_timed_gate_opens_once_its_time_is_up_in_order_of_its_time() {
        let start = Instant::now();
        let (late, early) = (gate_after(Duration::from_millis(60)), gate_after(Duration::from_millis(20)));
        let waker = std::task::Waker::noop();
        assert!(late.poll_open(waker).is_pending() && early.poll_open(waker).is_pending());
        while early.poll_open(waker).is_pending() {
            std::thread::sleep(Duration::from_millis(1));
        }
        let opened = start.elapsed();
        assert!(opened >= Duration::from_millis(20), "opened after {opened:?}");
        assert!(late.poll_open(waker).is_pending() || start.elapsed() >= Duration::from_millis(60));
        while late.poll_open(waker).is_pending() {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(start.elapsed() >= Duration::from_millis(60));
    }
}
