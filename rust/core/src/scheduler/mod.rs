//! The scheduler: admission under one ordering boundary per runtime.
//!
//! Every op is prepared first (compiles, staging: [`Backend::prepare`]),
//! then admitted while holding the runtime's state lock: its dependencies
//! are read from the buffers' version histories, the minimal cross-stream
//! waits are inserted, the op is enqueued at its position and every buffer it
//! touches is published at that position — all before the lock is released.
//! The lock is never held while waiting for the device or while foreign code
//! runs: completions deliver on their own thread, and an external write's
//! closure runs with only its own stream reserved (see [`lifecycle`] for
//! streams, memory and teardown).
//!
//! [`Backend::prepare`]: crate::backend::Backend::prepare

mod admission;
mod clock;
mod collective;
mod engine;
mod engine_impl;
mod external;
mod lifecycle;
mod peer;
mod recording;
mod state;
mod streams;
mod versions;

#[cfg(test)]
mod tests;

pub(crate) use collective::{CommunicatorSlot, PartKeys};
pub(crate) use engine::{Engine, Init};
pub(crate) use recording::Recording;
pub(crate) use state::Scheduler;

/// Names a buffer inside one runtime. Keys are never reused.
pub(crate) type BufferKey = u64;
