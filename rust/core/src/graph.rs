//! Recorded op graphs: a sequence of ops recorded once and replayed as one op.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use crate::backend::{Command, Span};
use crate::buffer::Buffer;
use crate::error::{Error, Result};
use crate::kernel::Access;
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
    /// Each buffer once, with the union of what the commands do to it: what
    /// a replay waits for and publishes. Worked out once, so that a replay
    /// costs the same for 10 recorded ops as for 10 000.
    accesses: Vec<(BufferKey, Access)>,
    /// The spans whose versions a replay reads, set at the first replay
    /// (which span covers a whole buffer needs the buffers' sizes).
    inputs: OnceLock<Vec<(Span<BufferKey>, Access)>>,
}

impl std::fmt::Debug for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Graph({} ops over {} buffers)", self.commands.len(), self.keys.len())
    }
}

impl Graph {
    pub(crate) fn new(engine: Arc<dyn Engine>, commands: Vec<Command<BufferKey>>) -> Result<Graph> {
        let mut accesses: Vec<(BufferKey, Access)> = Vec::new();
        for (key, access) in commands.iter().flat_map(|command| command.accesses()) {
            match accesses.iter_mut().find(|(known, _)| *known == key) {
                Some((_, known)) => *known = union(*known, access),
                None => accesses.push((key, access)),
            }
        }
        let mut keys: Vec<BufferKey> = accesses.iter().map(|&(key, _)| key).collect();
        keys.sort_unstable();
        engine.pin(&keys)?;
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        Ok(Graph { engine, id, commands, keys, accesses, inputs: OnceLock::new() })
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

    /// An error unless the graph was recorded in `engine`.
    pub(crate) fn check_engine(&self, engine: &Arc<dyn Engine>) -> Result<()> {
        match Runtime::same_engine(&self.engine, engine) {
            true => Ok(()),
            false => Err(Error::ForeignHandle("graph")),
        }
    }

    /// Each buffer the recorded ops use, once, with the union of their accesses.
    pub(crate) fn accesses(&self) -> &[(BufferKey, Access)] {
        &self.accesses
    }

    /// The spans whose versions a replay reads: what a command reads, or
    /// leaves in place of a partial write, unless an earlier command wrote
    /// the whole buffer first; and the whole of each buffer written, once
    /// each. `len_of` gives a buffer's size.
    pub(crate) fn inputs(&self, len_of: impl Fn(BufferKey) -> Result<u64>) -> Result<&[(Span<BufferKey>, Access)]> {
        if let Some(inputs) = self.inputs.get() {
            return Ok(inputs);
        }
        let mut inputs: Vec<(Span<BufferKey>, Access)> = Vec::new();
        let mut overwritten: Vec<BufferKey> = Vec::new();
        let mut add = |input: (Span<BufferKey>, Access)| {
            if !inputs.contains(&input) {
                inputs.push(input);
            }
        };
        for command in &self.commands {
            for (span, access) in command.spans() {
                let len = len_of(span.buffer)?;
                let whole = span.offset == 0 && span.len == len;
                if (access.reads() || !whole) && !overwritten.contains(&span.buffer) {
                    add((span, Access::Read));
                }
                if access.writes() {
                    add((Span { buffer: span.buffer, offset: 0, len }, Access::Write));
                    if whole {
                        overwritten.push(span.buffer);
                    }
                }
            }
        }
        Ok(self.inputs.get_or_init(|| inputs))
    }

    /// The commands, each ready to be prepared and enqueued once more.
    pub(crate) fn commands(&self) -> Result<Vec<Command<BufferKey>>> {
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

/// What two ops do to one buffer, taken together: `a` and `b`.
fn union(a: Access, b: Access) -> Access {
    match (a.reads() || b.reads(), a.writes() || b.writes()) {
        (true, true) => Access::ReadWrite,
        (false, _) => Access::Write,
        (true, false) => Access::Read,
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        self.engine.forget_graph(self.id);
        self.engine.unpin(&self.keys);
    }
}
