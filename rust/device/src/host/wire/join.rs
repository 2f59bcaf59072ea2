//! How the ranks meet: a group's id (rank 0's loopback listener and a
//! nonce), and joining it: rank 0 accepts every other rank, each other rank
//! connects and says who it is, and every join returns once all have met.

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::frames::{receive, send, STALL};
use super::{Links, Turns, Wire};
use crate::collective::GROUP_ID_BYTES;
use crate::error::{Error, Result};
use crate::info::BackendKind;
use crate::lock::lock;

const MAGIC: &[u8; 8] = b"weir-cpu";
const NONCE_BYTES: usize = 16;
/// How long a join waits for the whole group to meet.
const JOIN_TIMEOUT: Duration = Duration::from_secs(120);
/// How long rank 0 waits for a connecting rank to say who it is, in all.
const HELLO_TIMEOUT: Duration = if cfg!(test) { Duration::from_secs(1) } else { Duration::from_secs(5) };
/// The most ranks a CPU group has. Every rank but 0 holds a connection from
/// this host's loopback address to rank 0's one port, and each needs a
/// client port of its own: a 16-bit number, so no host fits more. Rank 0
/// holds a slot per rank while they join: this bound keeps that allocation
/// honest.
const MAX_RANKS: usize = 1 << 16;

/// What rank 0's process holds between making an id and joining with it.
pub struct Listening {
    nonce: [u8; NONCE_BYTES],
    listener: Mutex<Option<TcpListener>>,
}

/// The ids this process made and has not joined as rank 0 yet; weak, so an
/// id that every holder dropped closes its port.
static LISTENING: Mutex<Vec<Weak<Listening>>> = Mutex::new(Vec::new());

/// A secret only the id's holders know: a rank that connects must say it.
fn nonce() -> Result<[u8; NONCE_BYTES]> {
    let mut bytes = [0; NONCE_BYTES];
    getrandom::fill(&mut bytes)
        .map_err(|error| Error::backend(BackendKind::Cpu, format!("no randomness for a group id: {error}")))?;
    Ok(bytes)
}

/// A new id: a listener on a free loopback port, kept for rank 0's join.
pub fn new_id() -> Result<([u8; GROUP_ID_BYTES], Arc<Listening>)> {
    let listener = TcpListener::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0))
        .map_err(|error| io_error("a group id's loopback listener", error))?;
    let port = listener.local_addr().map_err(|error| io_error("a group id's listener address", error))?.port();
    let listening = Arc::new(Listening { nonce: nonce()?, listener: Mutex::new(Some(listener)) });
    let mut id = [0; GROUP_ID_BYTES];
    id[..8].copy_from_slice(MAGIC);
    id[8..10].copy_from_slice(&port.to_le_bytes());
    id[10..10 + NONCE_BYTES].copy_from_slice(&listening.nonce);
    let mut known = lock(&LISTENING);
    known.retain(|weak| weak.strong_count() > 0);
    known.push(Arc::downgrade(&listening));
    Ok((id, listening))
}

/// The port and nonce an id names, or why it is no CPU group id.
fn parse(id: &[u8; GROUP_ID_BYTES]) -> Result<(u16, [u8; NONCE_BYTES])> {
    if &id[..8] != MAGIC {
        return Err(Error::invalid("a group id of another backend, not of a CPU group"));
    }
    let port = u16::from_le_bytes([id[8], id[9]]);
    Ok((port, std::array::from_fn(|at| id[10 + at])))
}

fn io_error(what: &str, error: std::io::Error) -> Error {
    Error::backend(BackendKind::Cpu, format!("{what}: {error}"))
}

/// Joins the group `id` names as `rank` of `ranks`; returns once every rank has.
pub fn join(id: &[u8; GROUP_ID_BYTES], ranks: usize, rank: usize) -> Result<Wire> {
    if ranks > MAX_RANKS {
        return Err(Error::invalid(format!(
            "a CPU group of {ranks} ranks: one has at most {MAX_RANKS} (each rank but 0 holds a loopback port)"
        )));
    }
    let (port, nonce) = parse(id)?;
    let links = if rank == 0 { accept_all(nonce, ranks)? } else { connect(port, nonce, ranks, rank)? };
    Ok(Wire {
        rank,
        links: Mutex::new(links),
        turns: Mutex::new(Turns { admitted: 0, next: 0 }),
        turned: Condvar::new(),
    })
}

/// The most bytes a hello takes, encoded: under 60 (a 16-byte nonce and
/// two counts, each a MessagePack number of at most 9 bytes).
const HELLO_MOST_BYTES: u64 = 128;

/// What a connecting rank says first: the id's nonce, proving it holds
/// the id, and who it is.
#[derive(Serialize, Deserialize)]
struct Hello {
    nonce: [u8; NONCE_BYTES],
    ranks: usize,
    rank: usize,
}

/// Rank 0: takes the id's listener and accepts every other rank.
fn accept_all(nonce: [u8; NONCE_BYTES], ranks: usize) -> Result<Links> {
    let listening = lock(&LISTENING).iter().filter_map(Weak::upgrade).find(|listening| listening.nonce == nonce);
    let Some(listening) = listening else {
        return Err(Error::invalid(
            "rank 0 of a CPU group joins in the process that made the group's id (its listener is there)",
        ));
    };
    let Some(listener) = lock(&listening.listener).take() else {
        return Err(Error::invalid("rank 0 of this CPU group has joined already"));
    };
    listener.set_nonblocking(true).map_err(|error| io_error("a group listener", error))?;
    let deadline = Instant::now() + JOIN_TIMEOUT;
    let mut peers: Vec<Option<TcpStream>> = (1..ranks).map(|_| None).collect();
    while peers.iter().any(Option::is_none) {
        // Checked on every turn: a process that keeps connecting (no nonce
        // needed to connect) would otherwise keep the join from ever timing out.
        if Instant::now() > deadline {
            let missing: Vec<String> = peers
                .iter()
                .enumerate()
                .filter(|(_, peer)| peer.is_none())
                .map(|(index, _)| (index + 1).to_string())
                .collect();
            return Err(Error::backend(
                BackendKind::Cpu,
                format!(
                    "a CPU group of {ranks} ranks did not meet within {} s: ranks {} never joined",
                    JOIN_TIMEOUT.as_secs(),
                    missing.join(", ")
                ),
            ));
        }
        match listener.accept() {
            Ok((stream, _)) => {
                // A stranger or a bad hello is turned away; the join goes on.
                // A rank that connects twice keeps its first link.
                if let Ok(Some(rank)) = greet(&stream, &nonce, ranks, deadline) {
                    peers[rank - 1].get_or_insert(stream);
                }
            }
            Err(error) if error.kind() == ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(2)),
            // A caller that hung up before it was accepted (BSD and macOS
            // report it), or a signal: the join goes on.
            Err(error) if matches!(error.kind(), ErrorKind::ConnectionAborted | ErrorKind::Interrupted) => {}
            Err(error) => return Err(io_error("accepting a rank of a CPU group", error)),
        }
    }
    let peers: Vec<TcpStream> = peers.into_iter().flatten().collect();
    for mut peer in &peers {
        // A peer that stops reading fails a send to it, rather than holding
        // this rank: each rank reads its answer as soon as it has sent its part.
        peer.set_write_timeout(Some(STALL)).map_err(|error| io_error("a CPU group's link", error))?;
        peer.write_all(&[0]).map_err(|error| io_error("answering a rank of a CPU group", error))?;
    }
    Ok(Links::Hub(peers))
}

/// Reads a connecting rank's hello: its rank, if it belongs to this group.
fn greet(
    stream: &TcpStream,
    nonce: &[u8; NONCE_BYTES],
    ranks: usize,
    deadline: Instant,
) -> std::io::Result<Option<usize>> {
    stream.set_nonblocking(false)?;
    stream.set_nodelay(true)?;
    // A caller that says nothing is turned away soon, not at the deadline;
    // nor does one that says a byte at a time hold the others up for longer.
    let patience = deadline.saturating_duration_since(Instant::now()).min(HELLO_TIMEOUT);
    let until = Until { stream, deadline: Instant::now() + patience.max(Duration::from_millis(1)) };
    // Bounded: a stranger's bytes cannot make rank 0 read (and hold) more than a hello's.
    let hello: Hello = receive(&mut until.take(HELLO_MOST_BYTES))?;
    stream.set_read_timeout(None)?;
    Ok((hello.nonce == *nonce && hello.ranks == ranks && (1..ranks).contains(&hello.rank)).then_some(hello.rank))
}

/// Reads from `stream` until `deadline` at the latest: each read waits only
/// for the time left (a timeout per read let a caller trickling one byte
/// within each hold the reader for as long as it kept on).
struct Until<'a> {
    stream: &'a TcpStream,
    deadline: Instant,
}

impl Read for Until<'_> {
    fn read(&mut self, buffer: &mut [u8]) -> std::io::Result<usize> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ErrorKind::TimedOut.into());
        }
        self.stream.set_read_timeout(Some(left))?;
        self.stream.read(buffer)
    }
}

/// Any rank but 0: connects to rank 0, retrying until it listens, and
/// waits for its answer (sent once every rank has joined).
fn connect(port: u16, nonce: [u8; NONCE_BYTES], ranks: usize, rank: usize) -> Result<Links> {
    let deadline = Instant::now() + JOIN_TIMEOUT;
    let address = SocketAddrV4::new(Ipv4Addr::LOCALHOST, port);
    let mut stream = loop {
        match TcpStream::connect(address) {
            Ok(stream) => break stream,
            Err(error) if Instant::now() > deadline => {
                return Err(io_error(&format!("rank {rank} reaching rank 0 of a CPU group at {address}"), error))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    };
    let setup = |stream: &mut TcpStream| -> std::io::Result<u8> {
        stream.set_nodelay(true)?;
        send(stream, &Hello { nonce, ranks, rank })?;
        stream
            .set_read_timeout(Some(deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1))))?;
        let mut answer = [1];
        stream.read_exact(&mut answer)?;
        stream.set_read_timeout(None)?;
        // No write timeout here: rank 0 reads the ranks' contributions one
        // after another, so a large one waits, unread, behind a rank that
        // comes to the collective late.
        Ok(answer[0])
    };
    match setup(&mut stream) {
        Ok(0) => Ok(Links::Spoke(stream)),
        Ok(_) => Err(Error::backend(BackendKind::Cpu, "rank 0 of a CPU group turned this rank away")),
        Err(error) => {
            Err(io_error(&format!("rank {rank} of {ranks} joining a CPU group (did every rank join?)"), error))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A caller that sends a hello one byte at a time, never finishing it
    /// within [`HELLO_TIMEOUT`], is turned away at that timeout: the real
    /// rank behind it joins. Each byte reset a per-read timeout, and the
    /// join waited for the stranger's whole trickle.
    #[test]
    fn a_hello_trickled_a_byte_at_a_time_is_turned_away_and_the_join_goes_on() {
        let (id, _listening) = new_id().unwrap();
        let (port, _) = parse(&id).unwrap();
        let stranger = std::thread::spawn(move || {
            let mut link = TcpStream::connect(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port)).unwrap();
            let hello = rmp_serde::to_vec(&Hello { nonce: [0; NONCE_BYTES], ranks: 2, rank: 1 }).unwrap();
            for byte in hello {
                if link.write_all(&[byte]).is_err() {
                    return; // turned away
                }
                std::thread::sleep(HELLO_TIMEOUT / 2);
            }
        });
        // The stranger connects first, then the real rank 1.
        std::thread::sleep(Duration::from_millis(100));
        let rank_1 = std::thread::spawn(move || join(&id, 2, 1).map(|_| ()));
        let started = Instant::now();
        join(&id, 2, 0).unwrap();
        assert!(started.elapsed() < HELLO_TIMEOUT * 4, "joined after {:?}", started.elapsed());
        rank_1.join().unwrap().unwrap();
        stranger.join().unwrap();
    }
}
