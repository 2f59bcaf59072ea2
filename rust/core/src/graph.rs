//! Recorded op graphs: a sequence of ops recorded once and replayed as one op.

use std::sync::Arc;

use crate::backend::Command;
use crate::buffer::Buffer;
use crate::error::{Error, Result};
use crate::ops::Recipe;
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
    /// How each recorded command was made, in order: what a rebind makes again.
    recipes: Vec<Recipe>,
    /// Every buffer the commands name, once each; pinned while the graph lives.
    keys: Vec<BufferKey>,
}

impl std::fmt::Debug for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Graph({} ops over {} buffers)", self.recording.len(), self.keys.len())
    }
}

impl Graph {
    pub(crate) fn new(
        engine: Arc<dyn Engine>,
        commands: Vec<Command<BufferKey>>,
        recipes: Vec<Recipe>,
    ) -> Result<Graph> {
        if recipes.len() != commands.len() {
            return Err(Error::internal("a graph recorded without a recipe for each op"));
        }
        let recording = Recording::new(commands);
        let mut keys: Vec<BufferKey> = recording.accesses().iter().map(|&(key, _)| key).collect();
        keys.sort_unstable();
        engine.pin(&keys)?;
        Ok(Graph { engine, recording, recipes, keys })
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
    /// `from` by `to`, which must have the same size (ranges stay as
    /// recorded: a view of `from` becomes the same bytes of `to`). Each op
    /// is made again through the checks it passed when recorded, so the
    /// rebound graph holds only ops that could be admitted directly: of
    /// buffers of a type it takes, of fitting sizes, of this runtime, no
    /// memory it writes named twice.
    pub fn rebind(&self, pairs: &[(&Buffer, &Buffer)]) -> Result<Graph> {
        let mut map = Vec::with_capacity(pairs.len());
        for &(from, to) in pairs {
            if from.size_bytes() != to.size_bytes() {
                return Err(Error::invalid(format!(
                    "a graph rebinds a buffer of {} bytes to one of {} bytes: sizes must match",
                    from.size_bytes(),
                    to.size_bytes()
                )));
            }
            let from = from.whole_allocation_in(&self.engine, "rebinding a graph")?;
            to.whole_allocation_in(&self.engine, "rebinding a graph")?;
            map.push((from, to));
        }
        let swap = |buffer: &Buffer| match map.iter().find(|(from, _)| *from == buffer.owner().1) {
            Some((_, to)) => buffer.same_bytes_of(to),
            None => Ok(buffer.clone()),
        };
        let recipes = self.recipes.iter().map(|recipe| recipe.rebound(swap)).collect::<Result<Vec<_>>>()?;
        let commands = recipes
            .iter()
            .zip(self.recording.commands()?)
            .map(|(recipe, recorded)| recipe.command(&self.engine, recorded))
            .collect::<Result<Vec<_>>>()?;
        Graph::new(self.engine.clone(), commands, recipes)
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        self.engine.forget_graph(self.recording.id());
        self.engine.unpin(&self.keys);
    }
}
