//! A recorded sequence of ops as the scheduler replays it: one op whose
//! reads and writes are the union of the recorded ops'. What a replay
//! waits for and publishes is worked out once per recording, so a replay
//! costs the same for 10 recorded ops as for 10 000.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use super::BufferKey;
use crate::backend::{Command, Span};
use crate::error::{Error, Result};
use crate::kernel::Access;

/// Recorded ops, and what a replay of them waits for and publishes.
pub(crate) struct Recording {
    /// Unique per recording (a rebound graph is a new one): what a backend
    /// keys a captured replay on.
    id: u64,
    commands: Vec<Command<BufferKey>>,
    /// Each buffer once, with the union of what the commands do to it: what
    /// a replay waits for and publishes.
    accesses: Vec<(BufferKey, Access)>,
    /// The spans whose versions a replay reads, set at the first replay
    /// (which span covers a whole buffer needs the buffers' sizes).
    inputs: OnceLock<Vec<(Span<BufferKey>, Access)>>,
}

impl Recording {
    pub(crate) fn new(commands: Vec<Command<BufferKey>>) -> Recording {
        let mut accesses: Vec<(BufferKey, Access)> = Vec::new();
        for (key, access) in commands.iter().flat_map(|command| command.accesses()) {
            match accesses.iter_mut().find(|(known, _)| *known == key) {
                Some((_, known)) => *known = union(*known, access),
                None => accesses.push((key, access)),
            }
        }
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        Recording { id, commands, accesses, inputs: OnceLock::new() }
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// How many ops a replay runs.
    pub(crate) fn len(&self) -> usize {
        self.commands.len()
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
}

/// What two ops do to one buffer, taken together: `a` and `b`.
fn union(a: Access, b: Access) -> Access {
    match (a.reads() || b.reads(), a.writes() || b.writes()) {
        (true, true) => Access::ReadWrite,
        (false, _) => Access::Write,
        (true, false) => Access::Read,
    }
}
