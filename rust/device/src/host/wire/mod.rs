//! Collectives of a CPU group whose ranks live in several processes: one
//! member per process, the ranks meeting over TCP on this host's loopback.
//!
//! Rank 0's process makes the group's id: a listener on a free loopback
//! port, named in the id's bytes beside a random nonce. Every other rank
//! connects when it joins and says who it is; rank 0's join accepts until
//! every rank has come, then answers them all, so a join returns only once
//! the whole group has met (as `ncclCommInitRank` does).
//!
//! A collective's part, on its member's worker, sends what it brings to
//! rank 0: the collective it is, its sizes, its input bytes, or the failure
//! that keeps it from running. Rank 0 gathers every rank's, checks that all
//! called the same collective with fitting sizes, computes every rank's
//! result with the code an in-process group runs, and sends each rank its
//! share. A rank that called something else, brought a failed input, or is
//! gone fails the collective on every rank; a rank that is gone breaks the
//! group, so later collectives fail at once instead of waiting for it.
//!
//! Ranks must admit the group's collectives in one order, as with NCCL: each
//! collective takes a sequence number when admitted, and the parts run on
//! the wire in that order whichever of a member's streams they are on. A
//! rank that never calls a collective leaves the others' parts, and their
//! streams, waiting for it.

mod frames;
mod hub;
mod join;

use std::net::{Shutdown, TcpStream};
use std::sync::{Condvar, Mutex};

use super::collective::Arrival;
use crate::collective::{Collective, CollectiveKind};
use crate::host::CpuMemory;
use crate::lock::lock;
use frames::{receive, send, Contribution, Outcome, Share};
use hub::gather;
pub use join::{join, new_id, Listening};

/// The links to the other ranks, as a rank holds them.
enum Links {
    /// Rank 0: one stream per other rank, in rank order from rank 1.
    Hub(Vec<TcpStream>),
    /// Any other rank: its stream to rank 0.
    Spoke(TcpStream),
    /// A rank is gone or a part could not run: every later collective fails.
    Broken(String),
}

/// The turn of the next collective to run on the wire.
struct Turns {
    admitted: u64,
    next: u64,
}

/// One rank's membership of a group that spans processes.
pub struct Wire {
    pub rank: usize,
    links: Mutex<Links>,
    turns: Mutex<Turns>,
    turned: Condvar,
}

impl std::fmt::Debug for Wire {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wire").field("rank", &self.rank).finish_non_exhaustive()
    }
}

impl Wire {
    /// The turn of a collective admitted now: parts run on the wire in the
    /// order their collectives were admitted.
    pub fn admit(&self) -> u64 {
        let mut turns = lock(&self.turns);
        turns.admitted += 1;
        turns.admitted - 1
    }

    /// Breaks the group: every later collective fails with `reason`, and the
    /// other ranks' current and later ones too (their links close).
    fn break_with(&self, reason: String) {
        let mut links = lock(&self.links);
        match &*links {
            Links::Hub(peers) => peers.iter().for_each(|peer| drop(peer.shutdown(Shutdown::Both))),
            Links::Spoke(hub) => drop(hub.shutdown(Shutdown::Both)),
            Links::Broken(_) => return,
        }
        *links = Links::Broken(reason);
    }

    /// This rank's part of the collective admitted as `turn`: brings its
    /// memory (`read` only read, `write` written) or its `failure`, meets the
    /// other ranks, and writes its share of the result.
    pub fn run(
        &self,
        turn: u64,
        collective: &Collective,
        failure: Option<String>,
        read: Option<CpuMemory>,
        write: Option<CpuMemory>,
    ) -> std::result::Result<(), String> {
        let mut turns = lock(&self.turns);
        while turns.next != turn {
            turns = self.turned.wait(turns).unwrap_or_else(|poisoned| poisoned.into_inner());
        }
        drop(turns);
        let write_len = write.as_ref().map(CpuMemory::size);
        let outcome =
            self.exchange(turn, collective, Arrival::register(failure, read.as_ref(), write.as_ref()), write_len);
        lock(&self.turns).next += 1;
        self.turned.notify_all();
        outcome
    }

    /// Sends this rank's part (its registered memory, or why it cannot run)
    /// and writes the share that comes back.
    fn exchange(
        &self,
        turn: u64,
        collective: &Collective,
        guards: std::result::Result<Arrival, String>,
        write_len: Option<u64>,
    ) -> std::result::Result<(), String> {
        let in_place = matches!(collective.kind, CollectiveKind::AllReduce(_));
        let (mut read_guard, mut write_guard, failure) = match guards {
            Ok(Arrival { read, write }) => (read, write, None),
            Err(failure) => (None, None, Some(failure)),
        };
        let mine = Contribution {
            sequence: turn,
            collective: *collective,
            failure,
            read: read_guard.as_ref().map(|guard| guard.bytes().to_vec()),
            write_len,
            write: if in_place { write_guard.as_ref().map(|guard| guard.bytes().to_vec()) } else { None },
        };
        let (share, broken) = match &mut *lock(&self.links) {
            Links::Broken(reason) => (Err(format!("{} on a broken CPU group: {reason}", collective.name())), None),
            Links::Spoke(hub) => match send(hub, &mine).and_then(|()| receive::<Outcome<Share>>(hub)) {
                Ok(Outcome::Share(share)) => (Ok(share.map(serde_bytes::ByteBuf::into_vec)), None),
                Ok(Outcome::Failed(failure)) => (Err(failure), None),
                Err(error) => {
                    let reason = format!("rank 0 is gone ({error})");
                    (Err(format!("{} on rank {}: {reason}", collective.name(), self.rank)), Some(reason))
                }
            },
            Links::Hub(peers) => gather(collective, peers, mine),
        };
        if let Some(reason) = broken {
            self.break_with(reason);
        }
        let share = share?;
        read_guard.take();
        if let (Some(share), Some(guard)) = (share, write_guard.as_mut()) {
            let target = guard.bytes_mut()?;
            if target.len() != share.len() {
                return Err(format!(
                    "{} brought {} B for a {}-byte buffer",
                    collective.name(),
                    share.len(),
                    target.len()
                ));
            }
            target.copy_from_slice(&share);
        }
        Ok(())
    }
}
