//! The version history of one buffer: its latest write, and the reads since.
//!
//! The latest write carries the outcome of the op that made it, so that a
//! failed write reaches every reader of that version, on any stream.

use std::sync::Arc;

use crate::backend::OpOutcome;
use crate::kernel::Access;

/// (stream index, position) of an op.
pub(crate) type OpPosition = (usize, u64);

/// Latest write plus one read entry per stream since it: a second reader on
/// another stream never hides the first.
#[derive(Debug, Clone, Default)]
pub(crate) struct History {
    latest_write: Option<OpPosition>,
    /// The outcome of the op that made the latest version.
    outcome: Option<Arc<OpOutcome>>,
    reads: Vec<OpPosition>,
}

impl History {
    /// A history whose latest write is `write` (the seed's bug, test support).
    #[cfg(any(test, feature = "test-support"))]
    pub fn written_at(write: OpPosition) -> Self {
        History { latest_write: Some(write), outcome: None, reads: Vec::new() }
    }

    /// The outcome of the op that made the latest version, if one did.
    pub fn outcome(&self) -> Option<&Arc<OpOutcome>> {
        self.outcome.as_ref()
    }

    /// Adds to `deps` what an op with `access` must be ordered after.
    pub fn dependencies(&self, access: Access, deps: &mut Dependencies) {
        if let Some(write) = self.latest_write {
            deps.add(write);
        }
        if access.writes() {
            for &read in &self.reads {
                deps.add(read);
            }
        }
    }

    /// Publishes an op at `at` that touched the buffer with `access`.
    /// `publish_writes` is false only under the stale-cursor fault.
    pub fn publish(&mut self, at: OpPosition, access: Access, publish_writes: bool, outcome: Option<&Arc<OpOutcome>>) {
        if access.writes() {
            if publish_writes {
                self.latest_write = Some(at);
                self.outcome = outcome.cloned();
                self.reads.clear();
            }
            return;
        }
        match self.reads.iter_mut().find(|(stream, _)| *stream == at.0) {
            Some(read) => read.1 = read.1.max(at.1),
            None => self.reads.push(at),
        }
    }

    /// Every stream that used the buffer since its latest write, the writer included.
    pub fn streams(&self) -> impl Iterator<Item = usize> + '_ {
        self.uses().map(|(stream, _)| stream)
    }

    /// The latest write and the reads since (a stream may appear twice).
    pub fn uses(&self) -> impl Iterator<Item = OpPosition> + '_ {
        self.latest_write.into_iter().chain(self.reads.iter().copied())
    }
}

/// The latest position needed per stream.
#[derive(Debug, Default)]
pub(crate) struct Dependencies(smallvec::SmallVec<[OpPosition; 4]>);

impl Dependencies {
    fn add(&mut self, (stream, position): OpPosition) {
        match self.0.iter_mut().find(|(s, _)| *s == stream) {
            Some(dep) => dep.1 = dep.1.max(position),
            None => self.0.push((stream, position)),
        }
    }

    /// The dependencies on streams other than `target`.
    pub fn foreign(&self, target: usize) -> impl Iterator<Item = OpPosition> + '_ {
        self.0.iter().copied().filter(move |(stream, _)| *stream != target)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deps_of(history: &History, access: Access) -> Vec<OpPosition> {
        let mut deps = Dependencies::default();
        history.dependencies(access, &mut deps);
        let mut all: Vec<_> = deps.foreign(usize::MAX).collect();
        all.sort();
        all
    }

    #[test]
    fn writer_waits_for_every_reader_since_the_latest_write() {
        let mut h = History::written_at((0, 1));
        h.publish((1, 4), Access::Read, true, None);
        h.publish((2, 7), Access::Read, true, None);
        h.publish((1, 5), Access::Read, true, None);
        assert_eq!(deps_of(&h, Access::Read), vec![(0, 1)]);
        assert_eq!(deps_of(&h, Access::Write), vec![(0, 1), (1, 5), (2, 7)]);
        h.publish((2, 8), Access::Write, true, None);
        assert_eq!(deps_of(&h, Access::Write), vec![(2, 8)]);
    }
}
