//! Rust-side cancellation of waits: a token, and a future combinator that
//! selects a core wait against the token. Runtime-agnostic: no executor needed.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use weir_core::CompletionWait;

use crate::error::{Result, WeirError};

/// Cancels waits from the outside. Pass it as the last argument of any async
/// call; `cancel()` then ends that wait with `Cancelled` and drops the Rust
/// side of it at once (no waiter is left behind). Cancelling ends the wait,
/// never the work: an op already admitted still runs.
///
/// One token may guard many waits; once cancelled it stays cancelled, and a
/// wait started with a cancelled token fails at once.
#[derive(Debug, uniffi::Object)]
pub struct CancelToken {
    cancelled: weir_core::CancelToken,
}

#[uniffi::export]
impl CancelToken {
    /// A token that is not cancelled.
    #[uniffi::constructor]
    pub fn new() -> Arc<Self> {
        Arc::new(CancelToken { cancelled: weir_core::CancelToken::new() })
    }

    /// Cancels every wait guarded by this token, now and later. Idempotent.
    pub fn cancel(&self) {
        self.cancelled.cancel();
    }

    /// True once `cancel()` was called.
    pub fn is_cancelled(&self) -> bool {
        self.cancelled.is_cancelled()
    }
}

/// A core wait that a [`CancelToken`] can end early. When the token fires, the
/// inner future is dropped at once, so its waker leaves the core completion.
pub(crate) struct Cancellable<F> {
    inner: Option<F>,
    cancelled: Option<CompletionWait>,
}

/// Guards `inner` with `token` (no token: just `inner`, errors converted).
pub(crate) fn cancellable<F>(inner: F, token: Option<Arc<CancelToken>>) -> Cancellable<F> {
    Cancellable { inner: Some(inner), cancelled: token.map(|token| token.cancelled.wait_async()) }
}

impl<F, T> Future for Cancellable<F>
where
    F: Future<Output = weir_core::Result<T>> + Unpin,
{
    type Output = Result<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T>> {
        // Every field is Unpin, so the combinator is too.
        let this = self.get_mut();
        if let Some(cancelled) = this.cancelled.as_mut() {
            if let Poll::Ready(outcome) = Pin::new(cancelled).poll(cx) {
                this.inner = None;
                this.cancelled = None;
                let error = outcome.err().unwrap_or(weir_core::Error::Cancelled);
                return Poll::Ready(Err(WeirError::from(error)));
            }
        }
        let Some(inner) = this.inner.as_mut() else {
            return Poll::Ready(Err(WeirError::invalid("wait polled after it finished")));
        };
        match Pin::new(inner).poll(cx) {
            Poll::Ready(outcome) => {
                this.inner = None;
                // Leave the token's waiters as soon as the wait is over.
                this.cancelled = None;
                Poll::Ready(outcome.map_err(WeirError::from))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::task::{Wake, Waker};

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

    /// A wait guarded by `token`, polled once; the flag tells whether it was woken.
    fn pending_wait(token: &Arc<CancelToken>) -> (Cancellable<Never>, Arc<Flag>, Waker) {
        let flag = Arc::new(Flag(AtomicBool::new(false)));
        let waker = Waker::from(flag.clone());
        let mut wait = cancellable(Never, Some(token.clone()));
        assert!(Pin::new(&mut wait).poll(&mut Context::from_waker(&waker)).is_pending());
        (wait, flag, waker)
    }

    #[test]
    fn cancel_wakes_the_wait_and_ends_it_with_cancelled() {
        let token = CancelToken::new();
        let (mut wait, flag, waker) = pending_wait(&token);
        let mut cx = Context::from_waker(&waker);
        token.cancel();
        assert!(flag.0.load(Ordering::SeqCst), "cancel must wake the waiter");
        match Pin::new(&mut wait).poll(&mut cx) {
            Poll::Ready(Err(WeirError::Cancelled { description: message })) => assert!(message.contains("cancel")),
            other => panic!("expected Cancelled, got {other:?}"),
        }
        assert!(wait.inner.is_none(), "the inner wait is dropped");
        assert!(wait.cancelled.is_none(), "the token's waiter is dropped");
    }

    #[test]
    fn dropping_a_wait_unregisters_it_from_the_token() {
        let token = CancelToken::new();
        let (wait, flag, _waker) = pending_wait(&token);
        drop(wait);
        assert!(!token.is_cancelled());
        token.cancel();
        assert!(!flag.0.load(Ordering::SeqCst), "a dropped wait was woken");
    }

    #[test]
    fn a_wait_started_with_a_cancelled_token_fails_at_once() {
        let token = CancelToken::new();
        token.cancel();
        let waker = Waker::from(Arc::new(Flag(AtomicBool::new(false))));
        let mut cx = Context::from_waker(&waker);
        let mut wait = cancellable(std::future::ready(Ok(())), Some(token));
        assert!(matches!(Pin::new(&mut wait).poll(&mut cx), Poll::Ready(Err(WeirError::Cancelled { .. }))));
    }
}
