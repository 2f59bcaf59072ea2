//! The model check of the completion cell: every interleaving of a few
//! threads that wait on, poll, forget, register actions on and complete one
//! cell, explored by loom over the cell's real source.
//!
//! ```text
//! RUSTFLAGS="--cfg loom" cargo test -p weir-core --no-default-features --test loom_cell --release
//! ```
//!
//! (`cargo xtask test --rust` runs it so, with its own target directory.)
//! Each model asserts, in every interleaving: no lost wake-up (a future that
//! was pending when the cell completed is woken), each waker woken at most
//! once and only while registered, each action run exactly once, a blocked
//! `wait` returns (loom fails a model that deadlocks), the waiter count
//! returns to zero, and for a cell of several parts the first error wins.
#![cfg(loom)]

/// What `cell.rs` builds on: here loom's primitives instead of `std::sync`'s.
mod sync {
    pub(crate) use loom::sync::atomic::{AtomicBool, Ordering};
    pub(crate) use loom::sync::{Condvar, Mutex, MutexGuard};
}

#[path = "../src/completion/cell.rs"]
mod cell;
#[path = "support/counting_waker.rs"]
mod counting_waker;

use std::task::{Context, Poll, Waker};

use cell::{Action, Cell, Registration};
use counting_waker::Counter;
use loom::sync::atomic::AtomicUsize;
use loom::sync::Arc;
use loom::thread;
use sync::Ordering::SeqCst;

/// The outcome a cell of several parts folds: the library's first-error rule,
/// plus the order in which parts arrived, so the model can tell which was first.
#[derive(Clone, Debug, PartialEq)]
struct Outcome {
    result: Result<(), u32>,
    arrivals: Vec<Result<(), u32>>,
}

fn first_error(outcome: &mut Outcome, part: Outcome) {
    for arrived in part.arrivals {
        if let (Ok(()), Err(error)) = (&outcome.result, arrived) {
            outcome.result = Err(error);
        }
        outcome.arrivals.push(arrived);
    }
}

fn part(result: Result<(), u32>) -> Outcome {
    Outcome { result: Ok(()), arrivals: vec![result] }
}

fn new_cell(parts: usize) -> Arc<Cell<Outcome>> {
    Arc::new(Cell::new(parts, Outcome { result: Ok(()), arrivals: Vec::new() }, first_error))
}

/// Completes one part and runs what it finished, as `Completion::complete_here` does.
/// True if this call was the one that finished the cell.
fn complete(cell: &Cell<Outcome>, result: Result<(), u32>) -> bool {
    match cell.complete(part(result)) {
        Some(finished) => {
            let _ = finished.is_empty();
            finished.run();
            true
        }
        None => false,
    }
}

/// The waiter count as `Completion` keeps it from the registrations.
fn count(registration: Registration) -> isize {
    match registration {
        Registration::Added => 1,
        Registration::Removed => -1,
        Registration::Unchanged => 0,
    }
}

/// A future that polls once with `waker`; true if it was left pending.
fn poll_once(cell: &Cell<Outcome>, waker: &Waker, slot: &mut Option<usize>, waiters: &mut isize) -> bool {
    let (poll, registration) = cell.poll(&mut Context::from_waker(waker), slot);
    *waiters += count(registration);
    match poll {
        Poll::Pending => {
            assert!(slot.is_some(), "a pending poll holds a slot");
            true
        }
        Poll::Ready(outcome) => {
            assert!(cell.is_complete());
            assert_eq!(outcome.result, Ok(()));
            assert!(slot.is_none(), "a ready poll leaves no slot behind");
            false
        }
    }
}

/// A future polled before completion is woken exactly once by it; re-polling
/// with a new waker moves the registration to the new waker.
#[test]
fn pending_future_is_woken_once() {
    loom::model(|| {
        let cell = new_cell(1);
        let completer = {
            let cell = cell.clone();
            thread::spawn(move || assert!(complete(&cell, Ok(()))))
        };
        let (first, first_waker) = Counter::new();
        let (second, second_waker) = Counter::new();
        let mut slot = None;
        let mut waiters = 0;
        let pending_first = poll_once(&cell, &first_waker, &mut slot, &mut waiters);
        let pending_second = pending_first && poll_once(&cell, &second_waker, &mut slot, &mut waiters);
        completer.join().unwrap();

        if pending_second {
            // Registered (under the latest waker) when the cell completed.
            assert_eq!((first.wakes(), second.wakes()), (0, 1));
        } else if pending_first {
            // Completed between the polls: the first waker was the registered one.
            assert_eq!((first.wakes(), second.wakes()), (1, 0));
        } else {
            assert_eq!((first.wakes(), second.wakes()), (0, 0));
        }
        // The woken future polls ready and unregisters.
        if slot.is_some() {
            assert!(!poll_once(&cell, &second_waker, &mut slot, &mut waiters));
        }
        cell.forget(&mut slot);
        assert_eq!(waiters, 0);
        assert!(cell.then(Box::new(|_| {})).is_some());
    });
}

/// A future dropped mid-wait is never woken after it went, and its slot, when
/// reused by another future, wakes that future instead.
#[test]
fn dropped_future_frees_its_slot() {
    loom::model(|| {
        let cell = new_cell(1);
        let (dropped, dropped_waker) = Counter::new();
        let (kept, kept_waker) = Counter::new();
        let completer = {
            let cell = cell.clone();
            thread::spawn(move || assert!(complete(&cell, Ok(()))))
        };
        let mut waiters = 0;
        let mut dropped_slot = None;
        let dropped_pending = poll_once(&cell, &dropped_waker, &mut dropped_slot, &mut waiters);
        let dropped_index = dropped_slot;
        waiters += count(cell.forget(&mut dropped_slot));
        assert!(dropped_slot.is_none());
        let mut kept_slot = None;
        let kept_pending = poll_once(&cell, &kept_waker, &mut kept_slot, &mut waiters);
        completer.join().unwrap();

        // Woken at most once, and only if the completion took its waker before
        // the drop (that wake-up may still run after the drop: harmless).
        assert!(dropped.wakes() <= usize::from(dropped_pending));
        if kept_pending && kept_slot == dropped_index {
            // The kept future reused the dropped one's slot, so the drop came first.
            assert_eq!(dropped.wakes(), 0);
        }
        assert_eq!(kept.wakes(), usize::from(kept_pending));
        waiters += count(cell.forget(&mut kept_slot));
        assert_eq!(waiters, 0);
    });
}

/// Two futures on two threads, each woken exactly once if pending.
#[test]
fn two_futures_each_woken_once() {
    loom::model(|| {
        let cell = new_cell(1);
        let other = {
            let cell = cell.clone();
            thread::spawn(move || {
                let (counter, waker) = Counter::new();
                let mut slot = None;
                let mut waiters = 0;
                let pending = poll_once(&cell, &waker, &mut slot, &mut waiters);
                waiters += count(cell.forget(&mut slot));
                (counter, pending, waiters)
            })
        };
        let completer = {
            let cell = cell.clone();
            thread::spawn(move || assert!(complete(&cell, Ok(()))))
        };
        let (counter, waker) = Counter::new();
        let mut slot = None;
        let mut waiters = 0;
        let pending = poll_once(&cell, &waker, &mut slot, &mut waiters);
        completer.join().unwrap();
        let (other_counter, other_pending, other_waiters) = other.join().unwrap();
        waiters += count(cell.forget(&mut slot));

        assert_eq!(counter.wakes(), usize::from(pending));
        // The other future was dropped right after its poll: woken at most once.
        assert!(other_counter.wakes() <= usize::from(other_pending));
        assert_eq!(waiters + other_waiters, 0);
    });
}

/// A thread blocked in `wait` returns once the cell completes, with its outcome,
/// and tells its blocking before and after.
#[test]
fn blocked_wait_returns() {
    loom::model(|| {
        let cell = new_cell(1);
        let waiter = {
            let cell = cell.clone();
            thread::spawn(move || {
                let mut blocked = 0isize;
                let outcome = cell.wait(None, |blocking| blocked += if blocking { 1 } else { -1 });
                assert!(cell.is_complete());
                (outcome, blocked)
            })
        };
        let (counter, waker) = Counter::new();
        let mut slot = None;
        let mut waiters = 0;
        let pending = poll_once(&cell, &waker, &mut slot, &mut waiters);
        assert!(complete(&cell, Err(7)));
        let (outcome, blocked) = waiter.join().unwrap();
        assert_eq!(outcome.map(|outcome| outcome.result), Some(Err(7)));
        assert_eq!(blocked, 0);
        assert_eq!(counter.wakes(), usize::from(pending));
        waiters += count(cell.forget(&mut slot));
        assert_eq!(waiters, 0);
        assert_eq!(cell.outcome().map(|outcome| outcome.result), Some(Err(7)));
    });
}

/// An action registered with `then` runs exactly once, whether it was
/// registered before the completion or after; an action may call back into
/// the cell (it runs outside the cell's lock).
/// A bounded wait is woken by the completing thread too (loom's timed wait
/// never times out, so a skipped notification deadlocks the model).
#[test]
fn bounded_wait_is_woken_by_the_completion() {
    loom::model(|| {
        let cell = new_cell(1);
        let waiter = {
            let cell = cell.clone();
            thread::spawn(move || {
                let mut blocked = 0isize;
                let done = cell
                    .wait(Some(std::time::Duration::from_secs(1)), |blocking| blocked += if blocking { 1 } else { -1 });
                (done.is_some(), blocked)
            })
        };
        assert!(complete(&cell, Ok(())));
        let (done, blocked) = waiter.join().unwrap();
        assert!(done, "a completed cell ends the bounded wait with true");
        assert_eq!(blocked, 0);
    });
}

#[test]
fn action_runs_exactly_once() {
    loom::model(|| {
        let cell = new_cell(1);
        let runs = Arc::new(AtomicUsize::new(0));
        let registrar = {
            let (cell, runs) = (cell.clone(), runs.clone());
            thread::spawn(move || {
                let inner = cell.clone();
                let action: Action<Outcome> = Box::new(move |outcome: &Outcome| {
                    assert_eq!(outcome.result, Err(3));
                    // Re-entry: the cell is complete, so this hands the action back.
                    assert_eq!(inner.outcome().map(|outcome| outcome.result), Some(Err(3)));
                    assert!(inner.then(Box::new(|_| {})).is_some());
                    runs.fetch_add(1, SeqCst);
                });
                if let Some((action, outcome)) = cell.then(action) {
                    action(&outcome);
                }
            })
        };
        assert!(complete(&cell, Err(3)));
        registrar.join().unwrap();
        assert_eq!(runs.load(SeqCst), 1);
    });
}

/// Cancel: `complete` called from two threads (a 1-part cell, like a cancel
/// token's) finishes the cell once; the loser's call is ignored, and a
/// pending future is woken once.
#[test]
fn concurrent_cancels_finish_once() {
    loom::model(|| {
        let cell = new_cell(1);
        let runs = Arc::new(AtomicUsize::new(0));
        {
            let runs = runs.clone();
            assert!(cell
                .then(Box::new(move |_| {
                    runs.fetch_add(1, SeqCst);
                }))
                .is_none());
        }
        let canceller = {
            let cell = cell.clone();
            thread::spawn(move || complete(&cell, Err(1)))
        };
        let (counter, waker) = Counter::new();
        let mut slot = None;
        let mut waiters = 0;
        let pending = poll_once_any(&cell, &waker, &mut slot, &mut waiters);
        let here = complete(&cell, Err(2));
        let there = canceller.join().unwrap();

        assert!(here != there, "exactly one cancel finishes the cell");
        assert_eq!(runs.load(SeqCst), 1);
        assert_eq!(counter.wakes(), usize::from(pending));
        let expected = if here { Err(2) } else { Err(1) };
        assert_eq!(cell.outcome().map(|outcome| outcome.result), Some(expected));
        waiters += count(cell.forget(&mut slot));
        assert_eq!(waiters, 0);
    });
}

/// Like [`poll_once`], for a cell whose outcome may be an error.
fn poll_once_any(cell: &Cell<Outcome>, waker: &Waker, slot: &mut Option<usize>, waiters: &mut isize) -> bool {
    let (poll, registration) = cell.poll(&mut Context::from_waker(waker), slot);
    *waiters += count(registration);
    poll.is_pending()
}

/// A cell of three parts completed from three threads: no part is lost, the
/// last part finishes it, exactly once, and the first error to arrive wins.
#[test]
fn multi_part_first_error_wins() {
    loom::model(|| {
        let cell = new_cell(3);
        let parts: Vec<_> = [Err(1), Err(2)]
            .into_iter()
            .map(|result| {
                let cell = cell.clone();
                thread::spawn(move || complete(&cell, result))
            })
            .collect();
        let runs = Arc::new(AtomicUsize::new(0));
        {
            let runs = runs.clone();
            let action: Action<Outcome> = Box::new(move |_| {
                runs.fetch_add(1, SeqCst);
            });
            if let Some((action, outcome)) = cell.then(action) {
                action(&outcome);
            }
        }
        let mut finished = usize::from(complete(&cell, Ok(())));
        for part in parts {
            finished += usize::from(part.join().unwrap());
        }
        assert_eq!(finished, 1);
        assert_eq!(runs.load(SeqCst), 1);
        let outcome = cell.outcome().unwrap();
        assert_eq!(outcome.arrivals.len(), 3);
        let first = outcome.arrivals.iter().find(|arrived| arrived.is_err()).cloned().unwrap();
        assert_eq!(outcome.result, first);
        // Extra parts after the last are ignored.
        assert!(!complete(&cell, Err(9)));
        assert_eq!(cell.outcome(), Some(outcome));
    });
}
