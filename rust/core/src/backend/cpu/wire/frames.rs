//! What travels on the wire, as bytes: a rank's contribution to a
//! collective (what the collective is, its sizes, its input bytes or its
//! failure), and rank 0's answer (the rank's share, or the failure).

use std::io::{ErrorKind, Read, Write};

use crate::backend::{Collective, CollectiveKind, ReduceOp};
use crate::element::ElementType;

/// What a collective is, as the ranks compare it.
pub(super) fn describe(collective: &Collective) -> [u8; 7] {
    let (kind, op, root) = match collective.kind {
        CollectiveKind::AllReduce(op) => (0, Some(op), 0),
        CollectiveKind::Broadcast { root } => (1, None, root as u32),
        CollectiveKind::AllGather => (2, None, 0),
        CollectiveKind::ReduceScatter(op) => (3, Some(op), 0),
    };
    let op = match op {
        None => 0,
        Some(ReduceOp::Sum) => 1,
        Some(ReduceOp::Max) => 2,
        Some(ReduceOp::Min) => 3,
    };
    let element = match collective.element {
        ElementType::Bytes => 0,
        ElementType::F32 => 1,
        ElementType::I32 => 2,
        ElementType::U32 => 3,
    };
    let root = root.to_le_bytes();
    [kind, op, element, root[0], root[1], root[2], root[3]]
}

/// One rank's contribution to a collective, as it travels.
pub(super) struct Contribution {
    pub(super) sequence: u64,
    pub(super) collective: [u8; 7],
    pub(super) failure: Option<String>,
    /// What the part only reads (a send, the broadcast root's buffer).
    pub(super) read: Option<Vec<u8>>,
    /// The length of what it writes, and its bytes where the collective
    /// reads them too (all-reduce, in place).
    pub(super) write_len: Option<u64>,
    pub(super) write: Option<Vec<u8>>,
}

fn put_len(out: &mut Vec<u8>, len: Option<u64>) {
    match len {
        Some(len) => {
            out.push(1);
            out.extend_from_slice(&len.to_le_bytes());
        }
        None => out.push(0),
    }
}

fn put_bytes(out: &mut Vec<u8>, bytes: Option<&[u8]>) {
    put_len(out, bytes.map(|bytes| bytes.len() as u64));
    out.extend_from_slice(bytes.unwrap_or_default());
}

fn get_u64(input: &mut impl Read) -> std::io::Result<u64> {
    let mut word = [0; 8];
    input.read_exact(&mut word)?;
    Ok(u64::from_le_bytes(word))
}

fn get_len(input: &mut impl Read) -> std::io::Result<Option<u64>> {
    let mut present = [0];
    input.read_exact(&mut present)?;
    match present[0] {
        0 => Ok(None),
        _ => get_u64(input).map(Some),
    }
}

fn get_bytes(input: &mut impl Read) -> std::io::Result<Option<Vec<u8>>> {
    let Some(len) = get_len(input)? else { return Ok(None) };
    let len = usize::try_from(len).map_err(|_| ErrorKind::InvalidData)?;
    let mut bytes = Vec::new();
    bytes.try_reserve_exact(len).map_err(|_| ErrorKind::OutOfMemory)?;
    input.by_ref().take(len as u64).read_to_end(&mut bytes)?;
    if bytes.len() != len {
        return Err(ErrorKind::UnexpectedEof.into());
    }
    Ok(Some(bytes))
}

impl Contribution {
    pub(super) fn send(&self, out: &mut impl Write) -> std::io::Result<()> {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&self.sequence.to_le_bytes());
        bytes.extend_from_slice(&self.collective);
        put_bytes(&mut bytes, self.failure.as_deref().map(str::as_bytes));
        put_bytes(&mut bytes, self.read.as_deref());
        put_len(&mut bytes, self.write_len);
        put_bytes(&mut bytes, self.write.as_deref());
        out.write_all(&bytes)
    }

    pub(super) fn receive(input: &mut impl Read) -> std::io::Result<Contribution> {
        let sequence = get_u64(input)?;
        let mut collective = [0; 7];
        input.read_exact(&mut collective)?;
        let failure = get_bytes(input)?.map(|bytes| String::from_utf8_lossy(&bytes).into_owned());
        let read = get_bytes(input)?;
        let write_len = get_len(input)?;
        let write = get_bytes(input)?;
        Ok(Contribution { sequence, collective, failure, read, write_len, write })
    }
}

/// Rank 0's answer to one rank: its share of the result, or the failure.
pub(super) fn send_outcome(
    out: &mut impl Write,
    outcome: &std::result::Result<Option<&[u8]>, String>,
) -> std::io::Result<()> {
    let mut bytes = Vec::new();
    match outcome {
        Ok(share) => {
            bytes.push(0);
            put_bytes(&mut bytes, *share);
        }
        Err(failure) => {
            bytes.push(1);
            put_bytes(&mut bytes, Some(failure.as_bytes()));
        }
    }
    out.write_all(&bytes)
}

pub(super) fn receive_outcome(input: &mut impl Read) -> std::io::Result<std::result::Result<Option<Vec<u8>>, String>> {
    let mut status = [0];
    input.read_exact(&mut status)?;
    let bytes = get_bytes(input)?;
    Ok(match status[0] {
        0 => Ok(bytes),
        _ => Err(bytes.map(|bytes| String::from_utf8_lossy(&bytes).into_owned()).unwrap_or_default()),
    })
}
