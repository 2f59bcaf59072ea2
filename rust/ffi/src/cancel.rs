//! Rust-side cancellation of waits: a token, and a future combinator that
//! selects a core wait against the token. Runtime-agnostic: no executor needed.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use crate::error::{Result, WeirError};

#[derive(Default)]
struct Wakers {
    slots: Vec<Option<Waker>>,
    free: Vec<usize>,
}

/// Cancels waits from the outside. Pass it as the last argument of any async
/// call; `cancel()` then ends that wait with `Cancelled` and drops the Rust
/// side of it at once (no waiter is left behind). Cancelling ends the wait,
/// never the work: an op already admitted still runs.
///
/// One token may guard many waits; once cancelled it stays cancelled, and a
/// wait started with a cancelled token fails at once.
#[derive(Default, uniffi::Object)]
pub struct CancelToken {
    cancelled: AtomicBool,
    wakers: Mutex<Wakers>,
}

impl std::fmt::Debug for CancelToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CancelToken").field("cancelled", &self.is_cancelled()).finish()
    }
}

impl CancelToken {
    fn lock(&self) -> MutexGuard<'_, Wakers> {
        self.wakers.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Registers (or refreshes) `waker` in `slot`; true if already cancelled.
    fn register(&self, waker: &Waker, slot: &mut Option<usize>) -> bool {
        let mut wakers = self.lock();
        if self.cancelled.load(Ordering::Acquire) {
            return true;
        }
        match *slot {
            Some(index) => match wakers.slots.get_mut(index) {
                Some(Some(existing)) => existing.clone_from(waker),
                Some(entry) => *entry = Some(waker.clone()),
                None => *slot = None,
            },
            None => {
                let index = match wakers.free.pop() {
                    Some(index) => {
                        wakers.slots[index] = Some(waker.clone());
                        index
                    }
                    None => {
                        wakers.slots.push(Some(waker.clone()));
                        wakers.slots.len() - 1
                    }
                };
                *slot = Some(index);
            }
        }
        false
    }

    /// Forgets the waker in `slot`, if any.
    fn forget(&self, slot: &mut Option<usize>) {
        let Some(index) = slot.take() else { return };
        let mut wakers = self.lock();
        if let Some(entry) = wakers.slots.get_mut(index) {
            if entry.take().is_some() {
                wakers.free.push(index);
            }
        }
    }

    /// Waits guarded by this token now (for tests).
    #[cfg(test)]
    pub(crate) fn registered(&self) -> usize {
        self.lock().slots.iter().filter(|slot| slot.is_some()).count()
    }
}

#[uniffi::export]
impl CancelToken {
    /// A token that is not cancelled.
    #[uniffi::constructor]
    pub fn new() -> Arc<Self> {
        Arc::new(CancelToken::default())
    }

    /// Cancels every wait guarded by this token, now and later. Idempotent.
    pub fn cancel(&self) {
        let woken: Vec<Waker> = {
            let mut wakers = self.lock();
            self.cancelled.store(true, Ordering::Release);
            wakers.free.clear();
            std::mem::take(&mut wakers.slots).into_iter().flatten().collect()
        };
        // Wake outside the lock: a waker may poll the future right away.
        for waker in woken {
            waker.wake();
        }
    }

    /// True once `cancel()` was called.
    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Acquire)
    }
}

/// A core wait that a [`CancelToken`] can end early. When the token fires, the
/// inner future is dropped at once, so its waker leaves the core completion.
pub(crate) struct Cancellable<F> {
    inner: Option<F>,
    token: Option<Arc<CancelToken>>,
    slot: Option<usize>,
}

/// Guards `inner` with `token` (no token: just `inner`, errors converted).
pub(crate) fn cancellable<F>(inner: F, token: Option<Arc<CancelToken>>) -> Cancellable<F> {
    Cancellable { inner: Some(inner), token, slot: None }
}

impl<F, T> Future for Cancellable<F>
where
    F: Future<Output = weir_core::Result<T>> + Unpin,
{
    type Output = Result<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T>> {
        // Every field is Unpin, so the combinator is too.
        let this = self.get_mut();
        let cancelled = match &this.token {
            Some(token) => token.register(cx.waker(), &mut this.slot),
            None => false,
        };
        if cancelled {
            this.inner = None;
            return Poll::Ready(Err(WeirError::from(weir_core::Error::Cancelled)));
        }
        let Some(inner) = this.inner.as_mut() else {
            return Poll::Ready(Err(WeirError::invalid("wait polled after it finished")));
        };
        match Pin::new(inner).poll(cx) {
            Poll::Ready(outcome) => {
                this.inner = None;
                if let Some(token) = &this.token {
                    token.forget(&mut this.slot);
                }
                Poll::Ready(outcome.map_err(WeirError::from))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<F> Drop for Cancellable<F> {
    fn drop(&mut self) {
        if let Some(token) = &self.token {
            token.forget(&mut self.slot);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::Wake;

    struct Flag(AtomicBool);
    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    /// A future that never finishes.
    struct Never;
    impl Future for Never {
        type Output = weir_core::Result<()>;
        fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Self::Output> {
            Poll::Pending
        }
    }

    #[test]
    fn cancel_wakes_the_wait_and_ends_it_with_cancelled() {
        let token = CancelToken::new();
        let flag = Arc::new(Flag(AtomicBool::new(false)));
        let waker = Waker::from(flag.clone());
        let mut cx = Context::from_waker(&waker);
        let mut wait = cancellable(Never, Some(token.clone()));
        assert!(Pin::new(&mut wait).poll(&mut cx).is_pending());
        assert_eq!(token.registered(), 1);
        token.cancel();
        assert!(flag.0.load(Ordering::SeqCst), "cancel must wake the waiter");
        match Pin::new(&mut wait).poll(&mut cx) {
            Poll::Ready(Err(WeirError::Cancelled(message))) => assert!(message.contains("cancel")),
            other => panic!("expected Cancelled, got {other:?}"),
        }
        assert!(wait.inner.is_none(), "the inner wait is dropped");
        assert_eq!(token.registered(), 0);
    }

    #[test]
    fn dropping_a_wait_unregisters_it_from_the_token() {
        let token = CancelToken::new();
        let waker = Waker::from(Arc::new(Flag(AtomicBool::new(false))));
        let mut cx = Context::from_waker(&waker);
        let mut wait = cancellable(Never, Some(token.clone()));
        assert!(Pin::new(&mut wait).poll(&mut cx).is_pending());
        drop(wait);
        assert_eq!(token.registered(), 0);
        assert!(!token.is_cancelled());
    }

    #[test]
    fn a_wait_started_with_a_cancelled_token_fails_at_once() {
        let token = CancelToken::new();
        token.cancel();
        let waker = Waker::from(Arc::new(Flag(AtomicBool::new(false))));
        let mut cx = Context::from_waker(&waker);
        let mut wait = cancellable(std::future::ready(Ok(())), Some(token));
        assert!(matches!(Pin::new(&mut wait).poll(&mut cx), Poll::Ready(Err(WeirError::Cancelled(_)))));
    }
}
