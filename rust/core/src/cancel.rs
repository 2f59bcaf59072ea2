//! Cancel tokens: end waits from outside, never the work.

use std::sync::Arc;

use crate::completion::Completion;
use crate::diagnostics::LiveCounters;
use crate::error::Error;
use crate::fence::CompletionWait;

/// Ends waits early. A wait that selects on [`CancelToken::wait_async`] ends
/// with [`Error::Cancelled`] once [`CancelToken::cancel`] is called; an op
/// already admitted still runs. Once cancelled it stays cancelled.
#[derive(Debug, Clone)]
pub struct CancelToken {
    // A cancellation is a completion like any other: waits select on it.
    cancelled: Arc<Completion>,
}

impl Default for CancelToken {
    fn default() -> Self {
        CancelToken::new()
    }
}

impl CancelToken {
    /// A token that is not cancelled.
    pub fn new() -> Self {
        CancelToken { cancelled: Completion::new(1, Arc::new(LiveCounters::default())) }
    }

    /// Cancels every wait on this token, now and later. Idempotent. The
    /// waits' wakers run on the calling thread, which holds no Weir lock.
    pub fn cancel(&self) {
        self.cancelled.complete_here(Err(Error::Cancelled));
    }

    /// True once [`CancelToken::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.cancelled.is_complete()
    }

    /// A future that resolves (with [`Error::Cancelled`]) once cancelled.
    pub fn wait_async(&self) -> CompletionWait {
        self.cancelled.wait_async()
    }
}
