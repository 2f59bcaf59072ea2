//! Collectives over a [`DeviceGroup`]: all-reduce, broadcast, all-gather and
//! reduce-scatter, one buffer (or a send and a receive) per member, each
//! member's part an op on a stream of that member.
//!
//! The checks here run before anything is admitted: a refused collective
//! changes nothing on any member.

use crate::backend::{Collective, CollectiveKind, ReduceOp};
use crate::buffer::Buffer;
use crate::element::ElementType;
use crate::error::{Error, Result};
use crate::group::DeviceGroup;
use crate::runtime::Runtime;
use crate::scheduler::{Engine, PartKeys};
use crate::stream::Stream;

/// The buffers of one collective: one per member, or a send and a receive.
struct Buffers<'a> {
    sends: &'a [Buffer],
    receives: Option<&'a [Buffer]>,
}

/// # Collectives
///
/// Each call takes one stream and one buffer (or a send and a receive
/// buffer) per member, `streams[i]` a stream of member `i` and the buffers
/// of member `i`, all whole buffers (no views) of one element type. Member
/// `i`'s part is one op on `streams[i]`, ordered as any op there:
/// - it waits for the latest write of what it reads (a send, an in-place
///   buffer) and for every user of what it writes, on any stream of member `i`;
/// - it publishes a version of what it writes on member `i`, and counts as a
///   read of what it only reads, so a later write of a send (on any stream
///   of that member) waits for the collective;
/// - all parts are admitted together, under every member's ordering
///   boundary (taken in one global order), so every device sees the
///   collectives of a group in one order, whichever threads call them; NCCL
///   needs that, and the parts cannot wait for each other in a cycle.
///
/// A failed version among the inputs of any part fails the whole
/// collective: every member publishes failed versions of what it writes,
/// and the error names the original failure. A part that fails as it runs
/// (CPU) fails every part. Bad input (counts, a stream or buffer of another
/// member, views, sizes that do not fit, mixed or unsupported element
/// types) is [`Error::InvalidArgument`] naming what was passed, and nothing
/// is admitted on any member.
///
/// A joined group ([`DeviceGroup::join`]) takes one stream and buffer of
/// its one member, and its sizes count every rank in every process. Every
/// rank must admit the group's collectives in one order. A rank whose input
/// is a failed version still takes its part, so that the others do not wait
/// for it forever, and publishes failed versions; on the CPU its failure
/// travels with its part and fails the collective on every rank, while NCCL
/// has no way to say it: there the other ranks' results hold whatever that
/// rank's buffer held.
///
/// Backends: CPU (each member's part runs on its stream's worker and meets
/// the others there) and CUDA (NCCL, loaded at run time; one communicator
/// per group, made at its first collective; a group naming one device twice
/// is [`Error::Unsupported`], as NCCL refuses it). HIP and wgpu are
/// [`Error::Unsupported`]; wgpu adapters share no memory to meet in.
impl DeviceGroup {
    /// Reduces every member's buffer with `op` into all of them, in place:
    /// afterwards `buffers[i]` holds, element by element, `op` over
    /// `buffers[0..n]` as they were (summed in rank order on the CPU).
    /// `f32`, `i32` or `u32` buffers of one size.
    pub fn all_reduce(&self, streams: &[Stream], buffers: &[Buffer], op: ReduceOp) -> Result<()> {
        self.admit_collective(CollectiveKind::AllReduce(op), streams, Buffers { sends: buffers, receives: None })
    }

    /// Copies member `root`'s buffer into every member's, in place: the
    /// root's part reads its buffer, every other part overwrites its own.
    /// Buffers of one size and type, raw bytes included.
    pub fn broadcast(&self, streams: &[Stream], buffers: &[Buffer], root: usize) -> Result<()> {
        if root >= self.ranks {
            return Err(Error::invalid(format!("broadcast from rank {root} of a group of {} ranks", self.ranks)));
        }
        self.admit_collective(CollectiveKind::Broadcast { root }, streams, Buffers { sends: buffers, receives: None })
    }

    /// Gathers every member's `sends[i]` into every member's `receives[i]`,
    /// in rank order: `receives[i]` holds n times the elements of a send,
    /// member 0's first. Sends of one size; raw bytes allowed.
    pub fn all_gather(&self, streams: &[Stream], sends: &[Buffer], receives: &[Buffer]) -> Result<()> {
        self.admit_collective(CollectiveKind::AllGather, streams, Buffers { sends, receives: Some(receives) })
    }

    /// Reduces every member's `sends[i]` with `op` and scatters the result:
    /// `receives[i]` holds chunk `i` (its length, from element `i ×
    /// receives[i].len()`) of the reduction. Sends hold n times the elements
    /// of a receive; `f32`, `i32` or `u32`.
    pub fn reduce_scatter(
        &self,
        streams: &[Stream],
        sends: &[Buffer],
        receives: &[Buffer],
        op: ReduceOp,
    ) -> Result<()> {
        self.admit_collective(CollectiveKind::ReduceScatter(op), streams, Buffers { sends, receives: Some(receives) })
    }

    fn admit_collective(&self, kind: CollectiveKind, streams: &[Stream], buffers: Buffers<'_>) -> Result<()> {
        let n = self.devices.len();
        let element = buffers.sends.first().map_or(ElementType::Bytes, Buffer::element_type);
        let collective = Collective { kind, element };
        let name = collective.name();
        let count = |what: &str, got: usize| {
            if got == n {
                return Ok(());
            }
            Err(Error::invalid(format!("{name} takes one {what} per member: got {got} for a group of {n} members")))
        };
        count("stream", streams.len())?;
        count(if buffers.receives.is_some() { "send buffer" } else { "buffer" }, buffers.sends.len())?;
        if let Some(receives) = buffers.receives {
            count("receive buffer", receives.len())?;
        }
        let reduces = matches!(kind, CollectiveKind::AllReduce(_) | CollectiveKind::ReduceScatter(_));
        if reduces && element == ElementType::Bytes {
            return Err(Error::invalid(format!("{name} reduces f32, i32 or u32 elements, not raw bytes (u8)")));
        }
        let mut parts = Vec::with_capacity(n);
        for (rank, (member, stream)) in self.devices.iter().zip(streams).enumerate() {
            stream.admitting()?;
            if !Runtime::same_engine(stream.engine(), &member.engine) {
                return Err(Error::invalid(format!(
                    "{name}: streams[{rank}] is a stream of another runtime, not of member {rank} of the group"
                )));
            }
            let key = |list: &str, buffer: &Buffer| -> Result<u64> {
                if buffer.element_type() != element {
                    return Err(Error::invalid(format!(
                        "{name} needs buffers of one element type: {list}[{rank}] holds {}, sends[0] {element}",
                        buffer.element_type()
                    )));
                }
                if buffer.is_view() {
                    return Err(Error::invalid(format!(
                        "{name} takes whole buffers, not views: {list}[{rank}] is a view of {} elements from element {}",
                        buffer.len(),
                        buffer.first()
                    )));
                }
                buffer.key_in(&member.engine).map_err(|_| {
                    Error::invalid(format!(
                        "{name}: {list}[{rank}] is a buffer of another runtime, not of member {rank} of the group"
                    ))
                })
            };
            let sends_name = if buffers.receives.is_some() { "sends" } else { "buffers" };
            let send = key(sends_name, &buffers.sends[rank])?;
            let receive = match buffers.receives {
                Some(receives) => Some(key("receives", &receives[rank])?),
                None => None,
            };
            if receive == Some(send) {
                return Err(Error::invalid(format!("{name}: sends[{rank}] and receives[{rank}] are one buffer")));
            }
            parts.push(PartKeys { rank: self.first_rank + rank, stream: stream.index(), send, receive });
        }
        check_sizes(&collective, self.ranks, &buffers)?;
        // Each part takes room in its runtime's queue as any op does.
        for stream in streams {
            stream.make_room()?;
        }
        let engines: Vec<&dyn Engine> = self.devices.iter().map(|member| &*member.engine).collect();
        engines[0].collective(&engines, &self.communicator, &collective, &parts)
    }
}

/// Refuses sizes that do not fit: one size for the in-place buffers and for
/// the sends (all-gather) or receives (reduce-scatter), and the other side
/// n times it.
fn check_sizes(collective: &Collective, n: usize, buffers: &Buffers<'_>) -> Result<()> {
    let name = collective.name();
    let unit = buffers.sends[0].element_type().unit();
    // (the side of one size, the side n times it), with their names.
    let ((same, same_name), whole) = match (collective.kind, buffers.receives) {
        (CollectiveKind::ReduceScatter(_), Some(receives)) => ((receives, "receives"), Some((buffers.sends, "sends"))),
        (_, Some(receives)) => ((buffers.sends, "sends"), Some((receives, "receives"))),
        (_, None) => ((buffers.sends, "buffers"), None),
    };
    let len = same[0].len();
    if let Some((rank, other)) = same.iter().enumerate().find(|(_, buffer)| buffer.len() != len) {
        return Err(Error::invalid(format!(
            "{name} needs {same_name} of one size: {same_name}[{rank}] holds {} {unit}, {same_name}[0] {len}",
            other.len()
        )));
    }
    let Some((whole, whole_name)) = whole else { return Ok(()) };
    if let Some((rank, other)) =
        whole.iter().enumerate().find(|(_, buffer)| Some(buffer.len()) != len.checked_mul(n as u64))
    {
        return Err(Error::invalid(format!(
            "{name} over {n} members needs each of {whole_name} to hold {n} × {len} {unit}: {whole_name}[{rank}] holds {}",
            other.len(),
        )));
    }
    Ok(())
}
