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
use frames::{receive_from, send, Contribution, Outcome, Share};
use hub::{bounded, gather, SLACK};
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
        let turns = self.turned.wait_while(lock(&self.turns), |turns| turns.next != turn);
        drop(turns.unwrap_or_else(|poisoned| poisoned.into_inner()));
        // The next turn comes however this one ends, a panic included: the
        // group's later collectives would otherwise wait for it forever.
        let _turned = scopeguard::guard((), |()| {
            lock(&self.turns).next += 1;
            self.turned.notify_all();
        });
        let write_len = write.as_ref().map(CpuMemory::size);
        let largest = read.as_ref().map(CpuMemory::size).max(write_len).unwrap_or(0);
        let arrival = Arrival::register(failure, read.as_ref(), write.as_ref());
        self.exchange(turn, collective, arrival, write_len, largest)
    }

    /// Sends this rank's part (its registered memory, or why it cannot run)
    /// and writes the share that comes back; `largest` is the size of this
    /// rank's largest buffer in it.
    fn exchange(
        &self,
        turn: u64,
        collective: &Collective,
        guards: std::result::Result<Arrival, String>,
        write_len: Option<u64>,
        largest: u64,
    ) -> std::result::Result<(), String> {
        let in_place = matches!(collective.kind, CollectiveKind::AllReduce(_));
        let (mut read_guard, mut write_guard, failure) = match guards {
            Ok(Arrival { read, write }) => (read, write, None),
            Err(failure) => (None, None, Some(bounded(failure))),
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
            // Rank 0's answer is this rank's share at most (or a failure's text).
            Links::Spoke(hub) => match send(hub, &mine)
                .and_then(|()| receive_from::<Outcome<Share>>(hub, write_len.unwrap_or(0).saturating_add(SLACK)))
            {
                Ok(Outcome::Share(share)) => (Ok(share.map(serde_bytes::ByteBuf::into_vec)), None),
                Ok(Outcome::Failed(failure)) => (Err(failure), None),
                Err(error) => {
                    let reason = format!("rank 0 is gone ({error})");
                    (Err(format!("{} on rank {}: {reason}", collective.name(), self.rank)), Some(reason))
                }
            },
            Links::Hub(peers) => gather(collective, peers, mine, largest),
        };
        if let Some(reason) = broken {
            self.break_with(reason);
        }
        let share = share?;
        read_guard.take();
        let Some(guard) = write_guard.as_mut() else { return Ok(()) };
        let target = guard.bytes_mut()?;
        // A buffer this part writes gets exactly its bytes: none would leave
        // it unwritten yet reported done.
        match share {
            Some(share) if share.len() == target.len() => {
                target.copy_from_slice(&share);
                Ok(())
            }
            share => Err(format!(
                "{} brought {} B for a {}-byte buffer",
                collective.name(),
                share.map_or(0, |share| share.len()),
                target.len()
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc::channel;
    use std::sync::Arc;
    use std::time::Duration;

    use super::frames::receive;
    use super::*;
    use crate::counters::Counters;
    use crate::element::ElementType;

    const FROM_RANK_1: Collective =
        Collective { kind: CollectiveKind::Broadcast { root: 1 }, element: ElementType::Bytes };

    /// A group of two whose rank 1 sends `contribution` by hand for turn 0
    /// and then plays turn 1 as any rank does; rank 0 brings a 4-byte buffer
    /// to turn 0. Returns what rank 0's turn 0 and turn 1 came to, and the
    /// answer rank 1 got for its turn 0.
    fn rank_0_beside(contribution: Contribution) -> (Result<(), String>, Result<(), String>, String) {
        let (id, _listening) = new_id().unwrap();
        let peer = std::thread::spawn(move || {
            let wire = join(&id, 2, 1).unwrap();
            let answer = match &mut *lock(&wire.links) {
                // Rank 0 may cut the link while this is still sent.
                Links::Spoke(hub) => match send(hub, &contribution).and_then(|()| receive::<Outcome<Share>>(hub)) {
                    Ok(Outcome::Failed(why)) => why,
                    Ok(Outcome::Share(_)) => "a share".to_owned(),
                    Err(error) => format!("no answer: {error}"),
                },
                _ => unreachable!("rank 1 is a spoke"),
            };
            lock(&wire.turns).next = 1;
            let _ = wire.run(1, &FROM_RANK_1, Some("rank 1 has nothing".into()), None, None);
            answer
        });
        let wire = Arc::new(join(&id, 2, 0).unwrap());
        let counters = Arc::new(Counters::default());
        let mine = CpuMemory::allocate(4, &counters).unwrap();
        let first = wire.run(0, &FROM_RANK_1, None, None, Some(mine));
        let (done, next) = channel();
        let second = wire.clone();
        std::thread::spawn(move || drop(done.send(second.run(1, &FROM_RANK_1, None, None, None))));
        let second = next.recv_timeout(Duration::from_secs(30)).expect("the next turn runs");
        (first, second, peer.join().unwrap())
    }

    #[test]
    fn a_broadcast_root_claiming_a_result_it_cannot_have_fails_the_collective_and_the_group_goes_on() {
        // Rank 0 would have allocated the claimed length: u64::MAX aborted
        // the process or panicked, and every later turn waited for it.
        let claim = Contribution {
            sequence: 0,
            collective: FROM_RANK_1,
            failure: None,
            read: Some(vec![1, 2, 3, 4]),
            write_len: Some(u64::MAX),
            write: None,
        };
        let (first, second, answer) = rank_0_beside(claim);
        let first = first.unwrap_err();
        assert!(first.contains("do not fit"), "{first}");
        assert!(answer.contains("do not fit"), "rank 1 learns it too: {answer}");
        assert!(second.unwrap_err().contains("rank 1 has nothing"), "the group is not broken");
    }

    #[test]
    fn a_peer_that_stops_mid_message_is_gone_after_a_stall_not_waited_for_forever() {
        // Half a contribution, then silence: rank 0 read on forever before.
        let whole = rmp_serde::to_vec(&Contribution {
            sequence: 0,
            collective: FROM_RANK_1,
            failure: None,
            read: Some(vec![1, 2, 3, 4]),
            write_len: None,
            write: None,
        })
        .unwrap();
        let (id, _listening) = new_id().unwrap();
        let (hold, held) = channel::<()>();
        let peer = std::thread::spawn(move || {
            let wire = join(&id, 2, 1).unwrap();
            if let Links::Spoke(hub) = &mut *lock(&wire.links) {
                std::io::Write::write_all(hub, &whole[..whole.len() / 2]).unwrap();
            }
            // The link stays open, silent, until the test is done.
            let _ = held.recv();
        });
        let wire = join(&id, 2, 0).unwrap();
        let counters = Arc::new(Counters::default());
        let mine = CpuMemory::allocate(4, &counters).unwrap();
        let started = std::time::Instant::now();
        let outcome = wire.run(0, &FROM_RANK_1, None, None, Some(mine)).unwrap_err();
        assert!(outcome.contains("rank 1 is gone"), "{outcome}");
        assert!(started.elapsed() < frames::STALL * 10, "gone after a stall, not later");
        drop(hold);
        peer.join().unwrap();
    }

    #[test]
    fn a_contribution_larger_than_any_that_fits_is_refused_as_it_arrives() {
        // Rank 0 brings 4 bytes: no fitting contribution of two ranks holds
        // more than 8 bytes of buffers, and this one would hold 4 MiB.
        let huge = Contribution {
            sequence: 0,
            collective: FROM_RANK_1,
            failure: None,
            read: Some(vec![7; 4 << 20]),
            write_len: None,
            write: None,
        };
        let (first, second, _) = rank_0_beside(huge);
        let first = first.unwrap_err();
        assert!(first.contains("rank 1 is gone"), "{first}");
        assert!(second.unwrap_err().contains("broken"), "a rank cut off mid-message breaks the group");
    }

    #[test]
    fn a_failure_of_any_length_fails_its_collective_and_the_group_goes_on() {
        // Past what a reader takes beyond the buffers, a failure's text made
        // its reader find the sender gone and break the group for good.
        let long = "x".repeat(2 << 20);
        let (id, _listening) = new_id().unwrap();
        let peer_long = long.clone();
        let peer = std::thread::spawn(move || {
            let wire = join(&id, 2, 1).unwrap();
            let turns: Vec<Result<(), String>> = [Some(peer_long), None, Some("short".into())]
                .into_iter()
                .enumerate()
                .map(|(turn, failure)| {
                    let failure = failure.or_else(|| Some("rank 1 waits".into()));
                    wire.run(turn as u64, &FROM_RANK_1, failure, None, None)
                })
                .collect();
            turns
        });
        let wire = join(&id, 2, 0).unwrap();
        let counters = Arc::new(Counters::default());
        let mut mine = Vec::new();
        for (turn, failure) in [None, Some(long), None].into_iter().enumerate() {
            let target = CpuMemory::allocate(4, &counters).unwrap();
            mine.push(wire.run(turn as u64, &FROM_RANK_1, failure, None, Some(target)).unwrap_err());
        }
        let theirs = peer.join().unwrap();
        for outcome in mine.iter().chain(theirs.iter().map(|turn| turn.as_ref().unwrap_err())) {
            assert!(!outcome.contains("gone") && !outcome.contains("broken"), "{}", &outcome[..200]);
            assert!(outcome.len() < 128 << 10, "a failure of {} bytes", outcome.len());
        }
        assert!(mine[0].contains("failed on rank 1") && mine[0].contains("more bytes)"), "{}", &mine[0][..200]);
        assert!(theirs[1].as_ref().unwrap_err().contains("failed on rank 0"));
        assert!(mine[2].contains("short"), "{}", mine[2]);
    }
}
