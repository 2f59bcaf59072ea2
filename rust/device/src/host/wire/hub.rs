//! Rank 0's side of a collective: every rank's contribution gathered and
//! checked against the others, every rank's result computed with the code
//! an in-process group runs, and each rank sent its share.

use std::net::TcpStream;

use super::frames::{receive_from, send, Contribution, Outcome, SentShare};
use crate::collective::{Collective, CollectiveKind};
use crate::host::collective::run_collective;
use crate::host::heap_zeroed;

/// The sizes every rank's contribution must have, given rank 0's, or why not.
fn check_fits(collective: &Collective, all: &[Contribution]) -> std::result::Result<(), String> {
    let name = collective.name();
    let ranks = all.len() as u64;
    let len = |bytes: &Option<Vec<u8>>| bytes.as_ref().map(|bytes| bytes.len() as u64);
    for (rank, part) in all.iter().enumerate() {
        if part.collective != all[0].collective {
            return Err(format!("rank {rank} called another collective (or other arguments) than rank 0's {name}"));
        }
        if part.sequence != all[0].sequence {
            return Err(format!(
                "rank {rank} is at collective {} of the group where rank 0 is at {}: ranks must admit the group's \
                 collectives in one order",
                part.sequence, all[0].sequence
            ));
        }
    }
    let first = &all[0];
    let sizes_fit = all.iter().enumerate().all(|(rank, part)| match collective.kind {
        CollectiveKind::AllReduce(_) => part.write.is_some() && len(&part.write) == len(&first.write),
        CollectiveKind::Broadcast { root } => {
            // The root's part only reads; a length it claims to write would be
            // allocated here, so it must fit too.
            let size = len(&all[root].read);
            size.is_some() && (part.write_len == size || (rank == root && part.write_len.is_none()))
        }
        CollectiveKind::AllGather => {
            part.read.is_some()
                && len(&part.read) == len(&first.read)
                && part.write_len == len(&first.read).map(|l| l * ranks)
        }
        CollectiveKind::ReduceScatter(_) => {
            part.write_len.is_some()
                && part.write_len == first.write_len
                && len(&part.read) == first.write_len.map(|l| l * ranks)
        }
    });
    if sizes_fit {
        return Ok(());
    }
    let sizes: Vec<String> = all
        .iter()
        .enumerate()
        .map(|(rank, part)| {
            let read = len(&part.read).map_or("-".to_owned(), |l| l.to_string());
            let write = part.write_len.map_or("-".to_owned(), |l| l.to_string());
            format!("rank {rank} reads {read} B, writes {write} B")
        })
        .collect();
    Err(format!("{name} over {ranks} ranks with sizes that do not fit: {}", sizes.join("; ")))
}

/// Rank 0's side: every rank's result over every rank's contribution.
fn compute(collective: &Collective, all: &mut [Contribution]) -> std::result::Result<Vec<Option<Vec<u8>>>, String> {
    if let Some((rank, failure)) =
        all.iter().enumerate().find_map(|(rank, part)| part.failure.as_ref().map(|f| (rank, f)))
    {
        return Err(format!("{} failed on rank {rank}: {failure}", collective.name()));
    }
    check_fits(collective, all)?;
    // Every length fits the bytes some rank sent (checked above), yet a
    // result is still allocated fallibly: a failed allocation would end the
    // process.
    let mut writes = Vec::with_capacity(all.len());
    for part in all.iter_mut() {
        writes.push(match (part.write.take(), part.write_len) {
            (Some(write), _) => Some(write),
            (None, Some(len)) => {
                let len = usize::try_from(len).map_err(|_| format!("{len} bytes past rank 0's address space"))?;
                Some(heap_zeroed(len).map_err(|error| format!("rank 0: {error}"))?)
            }
            (None, None) => None,
        });
    }
    let reads: Vec<Option<&[u8]>> = all.iter().map(|part| part.read.as_deref()).collect();
    let mut targets: Vec<Option<&mut [u8]>> = writes.iter_mut().map(|write| write.as_deref_mut()).collect();
    run_collective(*collective, &reads, &mut targets)?;
    Ok(writes)
}

/// The most bytes a message about a collective of `ranks` ranks may take
/// beyond its buffers' (its failure's text, the encoding's own bytes).
pub(super) const SLACK: u64 = 1 << 20;

/// The most bytes of a failure's text that go on the wire, well inside
/// [`SLACK`]: a longer text ran past what its reader takes, which then
/// found the sender gone and broke the group for every later collective.
const MOST_FAILURE_TEXT: usize = 64 << 10;

/// `text`, cut to [`MOST_FAILURE_TEXT`] bytes (on a character's boundary)
/// with a note of what was cut.
pub(super) fn bounded(mut text: String) -> String {
    if text.len() > MOST_FAILURE_TEXT {
        let cut = (0..=MOST_FAILURE_TEXT).rev().find(|&end| text.is_char_boundary(end)).unwrap_or(0);
        let left_out = text.len() - cut;
        text.truncate(cut);
        text.push_str(&format!("… ({left_out} more bytes)"));
    }
    text
}

/// Rank 0's side of one collective: every rank's contribution in, every
/// rank's share (or the failure) out; `largest` is the size of rank 0's
/// largest buffer in it. Returns rank 0's share, and why the group broke if
/// a rank is gone.
pub(crate) fn gather(
    collective: &Collective,
    peers: &mut [TcpStream],
    mine: Contribution,
    largest: u64,
) -> (std::result::Result<Option<Vec<u8>>, String>, Option<String>) {
    // Every fitting contribution's bytes are at most the ranks' count times
    // rank 0's own largest buffer (an all-gather's results, a
    // reduce-scatter's input); a peer that sends more is refused while it
    // sends, rather than buffered whole.
    let limit = largest.saturating_mul(peers.len() as u64 + 1).saturating_add(SLACK);
    let mut all = vec![mine];
    let mut gone = None;
    for (index, peer) in peers.iter_mut().enumerate() {
        match receive_from::<Contribution>(peer, limit) {
            Ok(part) => all.push(part),
            Err(error) => {
                gone = Some(format!("rank {} is gone ({error})", index + 1));
                break;
            }
        }
    }
    let outcome = match &gone {
        Some(reason) => Err(format!("{} on rank 0: {reason}", collective.name())),
        None => compute(collective, &mut all),
    };
    // Every rank still there learns the outcome, even of a broken group.
    for (index, peer) in peers.iter_mut().enumerate() {
        let share: Outcome<SentShare> = match &outcome {
            Ok(shares) => Outcome::Share(shares[index + 1].as_deref().map(serde_bytes::Bytes::new)),
            Err(failure) => Outcome::Failed(bounded(failure.clone())),
        };
        if let Err(error) = send(peer, &share) {
            gone.get_or_insert(format!("rank {} is gone ({error})", index + 1));
        }
    }
    (outcome.map(|mut shares| shares.swap_remove(0)), gone)
}
