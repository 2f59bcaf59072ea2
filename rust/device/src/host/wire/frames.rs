//! What travels on the wire once a rank has joined: a rank's contribution
//! to a collective (what the collective is, its sizes, its input bytes or
//! its failure), and rank 0's answer (the rank's share, or the failure).
//! Each is one MessagePack value (`rmp-serde`), which delimits itself, so a
//! link needs no framing of its own.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::collective::Collective;

/// One rank's contribution to a collective, as it travels.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Contribution {
    pub(crate) sequence: u64,
    /// What the rank called, which every rank's must equal.
    pub(crate) collective: Collective,
    pub(crate) failure: Option<String>,
    /// What the part only reads (a send, the broadcast root's buffer).
    #[serde(with = "serde_bytes")]
    pub(crate) read: Option<Vec<u8>>,
    /// The length of what it writes, and its bytes where the collective
    /// reads them too (all-reduce, in place).
    pub(crate) write_len: Option<u64>,
    #[serde(with = "serde_bytes")]
    pub(crate) write: Option<Vec<u8>>,
}

/// Rank 0's answer to one rank: its share of the result, or the failure.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum Outcome<Share> {
    Share(Share),
    Failed(String),
}

/// A share as rank 0 sends it, borrowed.
pub(crate) type SentShare<'a> = Option<&'a serde_bytes::Bytes>;
/// A share as a rank receives it.
pub(crate) type Share = Option<serde_bytes::ByteBuf>;

/// Sends `message` whole.
pub(crate) fn send(out: &mut impl Write, message: &impl Serialize) -> std::io::Result<()> {
    // Encoded first, so that the link sees one write, not one per field.
    let bytes = rmp_serde::to_vec(message).map_err(std::io::Error::other)?;
    out.write_all(&bytes)
}

/// How long a link may go quiet inside a message, or while a message is
/// sent, before its peer counts as gone (short in this crate's tests).
pub(crate) const STALL: Duration = if cfg!(test) { Duration::from_secs(1) } else { Duration::from_secs(60) };

/// Receives one message of at most `limit` bytes from a peer. Its start is
/// waited for as long as it takes (a rank may come to a collective late);
/// once it has started, a link quiet for [`STALL`] fails it: that peer
/// stopped mid-message and would otherwise hold this rank forever.
pub(crate) fn receive_from<T: DeserializeOwned>(link: &TcpStream, limit: u64) -> std::io::Result<T> {
    link.set_read_timeout(None)?;
    loop {
        match link.peek(&mut [0]) {
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(_) => break,
            // A signal while waiting (a handler installed without SA_RESTART) breaks no group.
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    link.set_read_timeout(Some(STALL))?;
    let message = receive(&mut Read::take(link, limit));
    link.set_read_timeout(None)?;
    message
}

/// Receives one message.
pub(crate) fn receive<T: DeserializeOwned>(input: &mut impl Read) -> std::io::Result<T> {
    rmp_serde::from_read(input).map_err(|error| match error {
        rmp_serde::decode::Error::InvalidMarkerRead(io) | rmp_serde::decode::Error::InvalidDataRead(io) => io,
        other => std::io::Error::new(std::io::ErrorKind::InvalidData, other),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::CollectiveKind;
    use crate::element::ElementType;

    #[test]
    fn a_contribution_and_an_outcome_arrive_as_sent_one_after_another() {
        let sent = Contribution {
            sequence: 7,
            collective: Collective { kind: CollectiveKind::Broadcast { root: 3 }, element: ElementType::I32 },
            failure: None,
            read: Some(vec![1, 2, 3]),
            write_len: Some(12),
            write: None,
        };
        let mut link = Vec::new();
        send(&mut link, &sent).unwrap();
        send(&mut link, &Outcome::Share::<SentShare>(Some(serde_bytes::Bytes::new(&[9, 8])))).unwrap();
        send(&mut link, &Outcome::<SentShare>::Failed("rank 2 broke".into())).unwrap();
        let mut input = link.as_slice();
        let got: Contribution = receive(&mut input).unwrap();
        assert_eq!(
            (got.sequence, got.collective, got.read, got.write_len, got.write),
            (7, sent.collective, Some(vec![1, 2, 3]), Some(12), None)
        );
        let share = receive::<Outcome<Share>>(&mut input).unwrap();
        assert!(matches!(share, Outcome::Share(Some(bytes)) if bytes.as_slice() == [9, 8]));
        assert!(
            matches!(receive::<Outcome<Share>>(&mut input).unwrap(), Outcome::Failed(why) if why == "rank 2 broke")
        );
        assert!(input.is_empty(), "each message was read whole, and no more");
        let whole = rmp_serde::to_vec(&sent).unwrap();
        let cut = &whole[..whole.len() - 1];
        assert!(receive::<Contribution>(&mut &cut[..]).is_err(), "a message cut short is an error");
    }
}
