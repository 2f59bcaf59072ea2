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

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddrV4, TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

use super::collective::{run_collective, Arrival};
use super::memory::CpuMemory;
use crate::backend::{Collective, CollectiveKind, ReduceOp, GROUP_ID_BYTES};
use crate::device::BackendKind;
use crate::element::ElementType;
use crate::error::{Error, Result};
use crate::lock::lock;

const MAGIC: &[u8; 8] = b"weir-cpu";
const NONCE_BYTES: usize = 16;
/// How long a join waits for the whole group to meet.
const JOIN_TIMEOUT: Duration = Duration::from_secs(120);
/// How long rank 0 waits for a connecting rank to say who it is.
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);
/// The most ranks a CPU group has. Every rank but 0 holds a connection from
/// this host's loopback address to rank 0's one port, and each needs a
/// client port of its own: a 16-bit number, so no host fits more. Rank 0
/// holds a slot per rank while they join: this bound keeps that allocation,
/// and the ranks' hello (a 32-bit count), honest.
const MAX_RANKS: usize = 1 << 16;

/// What rank 0's process holds between making an id and joining with it.
pub(crate) struct Listening {
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
pub(crate) fn new_id() -> Result<([u8; GROUP_ID_BYTES], Arc<Listening>)> {
    let listener = TcpListener::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0))
        .map_err(|error| Error::backend(BackendKind::Cpu, format!("a group id's loopback listener: {error}")))?;
    let port = listener
        .local_addr()
        .map_err(|error| Error::backend(BackendKind::Cpu, format!("a group id's listener address: {error}")))?
        .port();
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
    let mut nonce = [0; NONCE_BYTES];
    nonce.copy_from_slice(&id[10..10 + NONCE_BYTES]);
    Ok((port, nonce))
}

fn io_error(what: &str, error: std::io::Error) -> Error {
    Error::backend(BackendKind::Cpu, format!("{what}: {error}"))
}

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
    /// A part could not be queued: no turn waits for the ones before it.
    abandoned: bool,
}

/// One rank's membership of a group that spans processes.
pub(crate) struct Wire {
    pub rank: usize,
    pub ranks: usize,
    links: Mutex<Links>,
    turns: Mutex<Turns>,
    turned: Condvar,
}

impl std::fmt::Debug for Wire {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wire").field("rank", &self.rank).field("ranks", &self.ranks).finish()
    }
}

/// Joins the group `id` names as `rank` of `ranks`; returns once every rank has.
pub(crate) fn join(id: &[u8; GROUP_ID_BYTES], ranks: usize, rank: usize) -> Result<Wire> {
    if ranks > MAX_RANKS {
        return Err(Error::invalid(format!(
            "a CPU group of {ranks} ranks: one has at most {MAX_RANKS} (each rank but 0 holds a loopback port)"
        )));
    }
    let (port, nonce) = parse(id)?;
    let links = if rank == 0 { accept_all(nonce, ranks)? } else { connect(port, nonce, ranks, rank)? };
    Ok(Wire {
        rank,
        ranks,
        links: Mutex::new(links),
        turns: Mutex::new(Turns { admitted: 0, next: 0, abandoned: false }),
        turned: Condvar::new(),
    })
}

fn hello(nonce: &[u8; NONCE_BYTES], ranks: usize, rank: usize) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(8 + NONCE_BYTES + 8);
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(nonce);
    bytes.extend_from_slice(&(ranks as u32).to_le_bytes());
    bytes.extend_from_slice(&(rank as u32).to_le_bytes());
    bytes
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
        match listener.accept() {
            Ok((stream, _)) => {
                // A stranger or a bad hello is turned away; the join goes on.
                if let Ok(Some(rank)) = greet(&stream, &nonce, ranks, deadline) {
                    if peers[rank - 1].is_none() {
                        peers[rank - 1] = Some(stream);
                    }
                }
            }
            Err(error) if error.kind() == ErrorKind::WouldBlock => {
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
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(error) => return Err(io_error("accepting a rank of a CPU group", error)),
        }
    }
    let peers: Vec<TcpStream> = peers.into_iter().flatten().collect();
    for mut peer in &peers {
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
    // A caller that says nothing is turned away soon, not at the deadline.
    let patience = deadline.saturating_duration_since(Instant::now()).min(HELLO_TIMEOUT);
    stream.set_read_timeout(Some(patience.max(Duration::from_millis(1))))?;
    let mut bytes = [0; 8 + NONCE_BYTES + 8];
    (&*stream).read_exact(&mut bytes)?;
    stream.set_read_timeout(None)?;
    let word = |at: usize| u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]) as usize;
    let (their_ranks, rank) = (word(8 + NONCE_BYTES), word(12 + NONCE_BYTES));
    let ours = &bytes[..8] == MAGIC && bytes[8..8 + NONCE_BYTES] == nonce[..];
    Ok((ours && their_ranks == ranks && (1..ranks).contains(&rank)).then_some(rank))
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
        stream.write_all(&hello(&nonce, ranks, rank))?;
        stream
            .set_read_timeout(Some(deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1))))?;
        let mut answer = [1];
        stream.read_exact(&mut answer)?;
        stream.set_read_timeout(None)?;
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

/// What a collective is, as the ranks compare it.
fn describe(collective: &Collective) -> [u8; 7] {
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
struct Contribution {
    sequence: u64,
    collective: [u8; 7],
    failure: Option<String>,
    /// What the part only reads (a send, the broadcast root's buffer).
    read: Option<Vec<u8>>,
    /// The length of what it writes, and its bytes where the collective
    /// reads them too (all-reduce, in place).
    write_len: Option<u64>,
    write: Option<Vec<u8>>,
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
    fn send(&self, out: &mut impl Write) -> std::io::Result<()> {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&self.sequence.to_le_bytes());
        bytes.extend_from_slice(&self.collective);
        put_bytes(&mut bytes, self.failure.as_deref().map(str::as_bytes));
        put_bytes(&mut bytes, self.read.as_deref());
        put_len(&mut bytes, self.write_len);
        put_bytes(&mut bytes, self.write.as_deref());
        out.write_all(&bytes)
    }

    fn receive(input: &mut impl Read) -> std::io::Result<Contribution> {
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
fn send_outcome(out: &mut impl Write, outcome: &std::result::Result<Option<&[u8]>, String>) -> std::io::Result<()> {
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

fn receive_outcome(input: &mut impl Read) -> std::io::Result<std::result::Result<Option<Vec<u8>>, String>> {
    let mut status = [0];
    input.read_exact(&mut status)?;
    let bytes = get_bytes(input)?;
    Ok(match status[0] {
        0 => Ok(bytes),
        _ => Err(bytes.map(|bytes| String::from_utf8_lossy(&bytes).into_owned()).unwrap_or_default()),
    })
}

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
            let size = len(&all[root].read);
            size.is_some() && (rank == root || part.write_len == size)
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
    let mut writes: Vec<Option<Vec<u8>>> = all
        .iter_mut()
        .map(|part| part.write.take().or_else(|| part.write_len.map(|len| vec![0; len as usize])))
        .collect();
    let reads: Vec<Option<&[u8]>> = all.iter().map(|part| part.read.as_deref()).collect();
    let mut targets: Vec<Option<&mut [u8]>> = writes.iter_mut().map(|write| write.as_deref_mut()).collect();
    run_collective(*collective, &reads, &mut targets)?;
    Ok(writes)
}

/// Rank 0's side of one collective: every rank's contribution in, every
/// rank's share (or the failure) out. Returns rank 0's share, and why the
/// group broke if a rank is gone.
fn gather(
    collective: &Collective,
    peers: &mut [TcpStream],
    mine: Contribution,
) -> (std::result::Result<Option<Vec<u8>>, String>, Option<String>) {
    let mut all = vec![mine];
    let mut gone = None;
    for (index, peer) in peers.iter_mut().enumerate() {
        match Contribution::receive(peer) {
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
        let share = match &outcome {
            Ok(shares) => Ok(shares[index + 1].as_deref()),
            Err(failure) => Err(failure.clone()),
        };
        if let Err(error) = send_outcome(peer, &share) {
            gone.get_or_insert(format!("rank {} is gone ({error})", index + 1));
        }
    }
    (outcome.map(|mut shares| shares.swap_remove(0)), gone)
}

impl Wire {
    /// The turn of a collective admitted now: parts run on the wire in the
    /// order their collectives were admitted.
    pub(crate) fn admit(&self) -> u64 {
        let mut turns = lock(&self.turns);
        turns.admitted += 1;
        turns.admitted - 1
    }

    /// A part admitted on the wire could not be queued: breaks the group, and
    /// lets every later part run (to fail) without waiting for that turn.
    pub(crate) fn abandon(&self, reason: String) {
        self.break_with(reason);
        lock(&self.turns).abandoned = true;
        self.turned.notify_all();
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
    pub(crate) fn run(
        &self,
        turn: u64,
        collective: &Collective,
        failure: Option<String>,
        read: Option<CpuMemory>,
        write: Option<CpuMemory>,
    ) -> std::result::Result<(), String> {
        let mut turns = lock(&self.turns);
        while turns.next != turn && !turns.abandoned {
            turns = self.turned.wait(turns).unwrap_or_else(|poisoned| poisoned.into_inner());
        }
        drop(turns);
        let write_len = write.as_ref().map(CpuMemory::len);
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
            collective: describe(collective),
            failure,
            read: read_guard.as_ref().map(|guard| guard.bytes().to_vec()),
            write_len,
            write: if in_place { write_guard.as_ref().map(|guard| guard.bytes().to_vec()) } else { None },
        };
        let (share, broken) = match &mut *lock(&self.links) {
            Links::Broken(reason) => (Err(format!("{} on a broken CPU group: {reason}", collective.name())), None),
            Links::Spoke(hub) => match mine.send(hub).and_then(|()| receive_outcome(hub)) {
                Ok(outcome) => (outcome, None),
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
            let target = guard.bytes_mut().ok_or_else(|| "a collective's write guard is read-only".to_owned())?;
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
