//! What a stream has already waited for.
//!
//! `seen[s] = p` means: every op of stream `s` up to position `p` is ordered
//! before the owning stream's next op. Waiting on stream `s` at `p` also
//! passes on what `s` itself had seen by then (a vector clock), which saves
//! waits along chains of streams.

/// A vector clock indexed by stream.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct VectorClock(Vec<u64>);

impl VectorClock {
    /// True if ops of `stream` up to `position` are already ordered before us.
    pub fn covers(&self, stream: usize, position: u64) -> bool {
        self.0.get(stream).is_some_and(|&seen| seen >= position)
    }

    /// Records a wait on `stream` at `position`, when `stream` had seen `known`.
    pub fn observe(&mut self, stream: usize, position: u64, known: &VectorClock) {
        if self.0.len() < known.0.len().max(stream + 1) {
            self.0.resize(known.0.len().max(stream + 1), 0);
        }
        for (mine, theirs) in self.0.iter_mut().zip(&known.0) {
            *mine = (*mine).max(*theirs);
        }
        self.0[stream] = self.0[stream].max(position);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observing_a_stream_passes_on_what_it_had_seen() {
        let mut s1 = VectorClock::default();
        s1.observe(0, 5, &VectorClock::default());
        let mut s2 = VectorClock::default();
        s2.observe(1, 3, &s1);
        assert!(s2.covers(1, 3) && !s2.covers(1, 4));
        assert!(s2.covers(0, 5) && !s2.covers(0, 6));
        assert!(!s2.covers(7, 1));
    }
}
