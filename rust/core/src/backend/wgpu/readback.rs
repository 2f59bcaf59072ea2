//! Downloads: the device copies into a staging buffer, `map_async` maps it
//! once that copy is done, and the poll thread hands the bytes to the
//! reader's [`HostSink`]. The staging buffer is owned by exactly one of the
//! pending read or the map callback, and freed with it on every path: data
//! delivered, mapping failed, stream failed before the read, or backend
//! dropped before the read was issued. A reader that stopped waiting changes
//! nothing: the sink is filled and dropped.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::poll::PollState;
use super::scope::BACKEND;
use crate::backend::HostSink;
use crate::error::Error;

/// A download whose device copy is recorded, waiting for its submission.
pub(crate) struct Readback {
    pub staging: wgpu::Buffer,
    /// Bytes to skip at the start of the staging buffer (the copy starts on a word).
    pub skip: usize,
    pub len: usize,
    pub sink: Arc<HostSink>,
}

impl Readback {
    /// Fails the read; the staging buffer goes with `self`.
    pub fn fail(self, error: Error) {
        self.sink.fail(error);
    }

    /// Maps the staging buffer; call after the copy's submission. `in_flight`
    /// counts the stream's reads not yet delivered.
    pub fn start(self, poll: &Arc<PollState>, in_flight: &Arc<AtomicUsize>) {
        poll.register();
        in_flight.fetch_add(1, Ordering::SeqCst);
        let (poll, in_flight) = (poll.clone(), in_flight.clone());
        let Readback { staging, skip, len, sink } = self;
        let mapped = staging.clone();
        staging.map_async(wgpu::MapMode::Read, .., move |outcome| {
            let bytes = match outcome {
                Ok(()) => {
                    let copied = match mapped.slice(..).get_mapped_range() {
                        Ok(view) => view
                            .get(skip..skip + len)
                            .map(<[u8]>::to_vec)
                            .ok_or_else(|| "the read-back range is outside the staging buffer".to_owned()),
                        Err(e) => Err(format!("reading the mapped buffer failed: {e}")),
                    };
                    mapped.unmap();
                    copied
                }
                Err(e) => Err(format!("mapping the read-back buffer failed: {e}")),
            };
            drop(mapped);
            match bytes {
                Ok(bytes) => sink.deliver(bytes),
                Err(message) => sink.fail(Error::backend(BACKEND, message)),
            }
            in_flight.fetch_sub(1, Ordering::SeqCst);
            poll.done();
        });
    }
}
