//! Recorded op graphs: a sequence of ops recorded once and replayed as one op.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::backend::Command;
use crate::buffer::Buffer;
use crate::error::{Error, Result};
use crate::runtime::Runtime;
use crate::scheduler::{BufferKey, Engine};

/// Ops recorded by [`Stream::record`](crate::Stream::record), replayed by
/// [`Stream::replay`](crate::Stream::replay) as one op: the replay waits for
/// what any recorded op depends on and publishes one version of each buffer
/// they write, so the ordering rules hold as for any op. The buffers named
/// stay alive while the graph does; [`Graph::rebind`] makes a graph over
/// other buffers of the same sizes.
pub struct Graph {
    engine: Arc<dyn Engine>,
    /// Unique per recording (a rebound graph is a new one): what a backend
    /// keys a captured replay on.
    id: u64,
    commands: Vec<Command<BufferKey>>,
    /// Every buffer the commands name, once each; pinned while the graph lives.
    keys: Vec<BufferKey>,
}

impl std::fmt::Debug for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Graph({} ops over {} buffers)", self.commands.len(), self.keys.len())
    }
}

impl Graph {
    pub(crate) fn new(engine: Arc<dyn Engine>, commands: Vec<Command<BufferKey>>) -> Result<Graph> {
        let mut keys: Vec<BufferKey> = commands.iter().flat_map(|command| command.accesses()).map(|(k, _)| k).collect();
        keys.sort_unstable();
        keys.dedup();
        engine.pin(&keys)?;
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        Ok(Graph { engine, id, commands, keys })
    }

    /// How many ops a replay runs.
    pub fn len(&self) -> usize {
        self.commands.len()
    }

    /// Always false: a graph records at least one op.
    pub fn is_empty(&self) -> bool {
        false
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// The commands of one replay on `engine`.
    pub(crate) fn commands_in(&self, engine: &Arc<dyn Engine>) -> Result<Vec<Command<BufferKey>>> {
        if !Runtime::same_engine(&self.engine, engine) {
            return Err(Error::ForeignHandle("graph"));
        }
        self.commands
            .iter()
            .map(|command| command.replayable().ok_or_else(|| Error::internal("a recorded op cannot be replayed")))
            .collect()
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
            .commands
            .iter()
            .map(|command| {
                let command = command
                    .replayable()
                    .map(|command| command.map(swap))
                    .ok_or_else(|| Error::internal("a recorded op cannot be replayed"))?;
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
        self.engine.forget_graph(self.id);
        self.engine.unpin(&self.keys);
    }
}
