//! Why an enqueue did not happen as asked.

use crate::error::Error;

/// Why `Backend::enqueue` (the engine's) did not enqueue a command as asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnqueueError {
    /// Bad input: nothing was enqueued and the stream is as it was.
    // The CPU backend checks its input in `prepare`, so alone it never rejects here.
    Rejected(Error),
    /// The op failed: the scheduler publishes failed versions of what it
    /// writes and reports the failure to the stream's next fence.
    Failed(Error),
}
