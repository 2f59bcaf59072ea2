//! Timestamps: the device time between two points of one stream.

use std::sync::Arc;
use std::time::Duration;

use crate::backend::AnyTimestamp;
use crate::completion::Completion;
use crate::error::{Error, Result};
use crate::scheduler::Engine;
use crate::stream::StreamIdentity;

/// A point in a stream, timed on the device when the stream gets there
/// ([`Stream::timestamp`](crate::Stream::timestamp)). The time between two
/// timestamps of one stream is [`Timestamp::elapsed_since`]: the device's
/// own clock (CUDA and HIP events with timing, wgpu timestamp queries, the
/// CPU worker's monotonic clock), not the host's.
///
/// A timestamp is a point, not a fence: waiting for one reports no op's
/// failure (the stream's next fence does, as always), only what keeps the
/// time from being read (a lost device, a closed runtime). The time across a
/// failed op is what the device spent, which is little for an op that never
/// ran. Dropping a timestamp at any moment, taken or not, leaks nothing.
pub struct Timestamp {
    completion: Arc<Completion>,
    device: Box<dyn AnyTimestamp>,
    /// Keeps the runtime alive, and tells a wait that would wait for itself.
    engine: Arc<dyn Engine>,
    stream: StreamIdentity,
    index: usize,
    /// The timestamp's place in its stream: later ones have higher ones.
    position: u64,
}

impl std::fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Timestamp")
            .field("stream", &self.index)
            .field("position", &self.position)
            .field("complete", &self.is_complete())
            .finish()
    }
}

impl Timestamp {
    pub(crate) fn new(
        completion: Arc<Completion>,
        device: Box<dyn AnyTimestamp>,
        engine: Arc<dyn Engine>,
        stream: StreamIdentity,
        index: usize,
        position: u64,
    ) -> Self {
        Timestamp { completion, device, engine, stream, index, position }
    }

    /// True once the device has taken the time. Never blocks.
    pub fn is_complete(&self) -> bool {
        self.completion.is_complete()
    }

    /// Blocks until both this timestamp and `earlier` are taken, then gives
    /// the device time from `earlier` to this one: zero for a timestamp
    /// against itself. `earlier` must be a timestamp of the same stream
    /// taken before this one (or this one): anything else is
    /// [`Error::InvalidArgument`], as is a wait from inside a CPU kernel of
    /// that stream (it would wait for itself).
    pub fn elapsed_since(&self, earlier: &Timestamp) -> Result<Duration> {
        self.check_pair(earlier)?;
        for timestamp in [earlier, self] {
            if !timestamp.completion.is_complete() {
                self.engine.check_can_wait(Some(self.index))?;
            }
            timestamp.completion.wait()?;
        }
        self.measure(earlier)
    }

    /// [`Timestamp::elapsed_since`] without blocking a thread.
    pub async fn elapsed_since_async(&self, earlier: &Timestamp) -> Result<Duration> {
        self.check_pair(earlier)?;
        earlier.completion.wait_async().await?;
        self.completion.wait_async().await?;
        self.measure(earlier)
    }

    fn check_pair(&self, earlier: &Timestamp) -> Result<()> {
        if !Arc::ptr_eq(&self.engine, &earlier.engine) {
            return Err(Error::invalid("the two timestamps belong to different runtimes: time one stream"));
        }
        if !self.stream.is(&earlier.stream) {
            return Err(Error::invalid(format!(
                "the timestamps belong to different streams ({} and {}): streams run side by side, time one",
                earlier.index, self.index
            )));
        }
        if earlier.position > self.position {
            return Err(Error::invalid("the timestamp given as the earlier one was taken after this one"));
        }
        Ok(())
    }

    /// The time between two taken timestamps of one stream.
    fn measure(&self, earlier: &Timestamp) -> Result<Duration> {
        if earlier.position == self.position {
            return Ok(Duration::ZERO);
        }
        self.device.elapsed_since(&*earlier.device)
    }
}
