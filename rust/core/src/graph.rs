//! Recorded op graphs: a sequence of ops recorded once and replayed as one op.

use std::sync::Arc;

use crate::backend::Command;
use crate::buffer::Buffer;
use crate::error::{Error, Result};
use crate::runtime::Runtime;
use crate::scheduler::{BufferKey, Engine, Recording};

/// Ops recorded by [`Stream::record`](crate::Stream::record), replayed by
/// [`Stream::replay`](crate::Stream::replay) as one op: the replay waits for
/// what any recorded op depends on and publishes one version of each buffer
/// they write, so the ordering rules hold as for any op. The buffers named
/// stay alive while the graph does; [`Graph::rebind`] makes a graph over
/// other buffers of the same sizes.
pub struct Graph {
    engine: Arc<dyn Engine>,
    recording: Recording,
    /// Every buffer the commands name, once each; pinned while the graph lives.
    keys: Vec<BufferKey>,
}

impl std::fmt::Debug for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Graph({} ops over {} buffers)", self.recording.len(), self.keys.len())
    }
}

impl Graph {
    pub(crate) fn new(engine: Arc<dyn Engine>, commands: Vec<Command<BufferKey>>) -> Result<Graph> {
        let recording = Recording::new(commands);
        let mut keys: Vec<BufferKey> = recording.accesses().iter().map(|&(key, _)| key).collect();
        keys.sort_unstable();
        engine.pin(&keys)?;
        Ok(Graph { engine, recording, keys })
    }

    /// How many ops a replay runs.
    pub fn len(&self) -> usize {
        self.recording.len()
    }

    /// Always false: a graph records at least one op.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// What `engine` replays: an error unless the graph was recorded in it.
    pub(crate) fn recording_in(&self, engine: &Arc<dyn Engine>) -> Result<&Recording> {
        match Runtime::same_engine(&self.engine, engine) {
            true => Ok(&self.recording),
            false => Err(Error::ForeignHandle("graph")),
        }
    }

    /// The same ops over other buffers: each `(from, to)` pair replaces
    /// `from` by `to`, which must have the same size (ranges stay as recorded).
    pub fn rebind(&self, pairs: &[(&Buffer, &Buffer)]) -> Result<Graph> {
        let mut map = Vec::with_capacity(pairs.len());
        for (from, to) in pairs {
            if from.size_bytes() != to.size_bytes() {
                return Err(Error::invalid(format!(
                    "a graph rebinds a buffer of {} bytes to one of {} bytes: sizes must match",
                    from.size_bytes(),
                    to.size_bytes()
                )));
            }
            let (from, to) = (
                from.whole_allocation_in(&self.engine, "rebinding a graph")?,
                to.whole_allocation_in(&self.engine, "rebinding a graph")?,
            );
            map.push((from, to));
        }
        let swap = |key: BufferKey| map.iter().find(|(from, _)| *from == key).map_or(key, |(_, to)| *to);
        let commands = self
            .recording
            .commands()?
            .into_iter()
            .map(|command| {
                let command = command.map(swap);
                // Rebinding may make two arguments of one op the same memory.
                crate::ops::reject_overlap(&command.spans())?;
                Ok(command)
            })
            .collect::<Result<Vec<_>>>()?;
        Graph::new(self.engine.clone(), commands)
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        self.engine.forget_graph(self.recording.id());
        self.engine.unpin(&self.keys);
    }
}
