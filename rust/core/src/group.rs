//! Device groups: several devices of one backend, each its own runtime, and
//! the ops that span them; and groups whose ranks live in several processes.

use std::any::Any;
use std::sync::Arc;

use crate::device::BackendKind;
use crate::error::{Error, Result};
use crate::runtime::Runtime;

use crate::backend::GROUP_ID_BYTES;

/// Names one group whose ranks live in several processes (or hosts), for
/// [`DeviceGroup::join`]. Made once, by the process of rank 0, and handed
/// by the caller to every other rank's process as [`GroupId::to_bytes`]
/// (a file, an environment variable, a socket: Weir does not care).
///
/// - CUDA: an `ncclUniqueId` (`ncclGetUniqueId`); NCCL's bootstrap listens
///   in the process that made it, across hosts as NCCL is set up to.
/// - CPU: a listener on a free port of this host's loopback, kept by the
///   id (and its copies in this process) until rank 0 joins; so CPU groups
///   span processes of one host, and rank 0 must join in the process that
///   made the id.
/// - HIP and wgpu: [`Error::Unsupported`].
#[derive(Clone)]
pub struct GroupId {
    kind: BackendKind,
    bytes: [u8; GROUP_ID_BYTES],
    /// What keeps the id usable in the process that made it (the CPU's listener).
    _held: Option<Arc<dyn Any + Send + Sync>>,
}

impl std::fmt::Debug for GroupId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupId").field("backend", &self.kind).finish_non_exhaustive()
    }
}

impl GroupId {
    /// A new id for a group of `kind` (CPU or CUDA), made in rank 0's process.
    pub fn new(kind: BackendKind) -> Result<GroupId> {
        match kind {
            BackendKind::Cpu => {
                let (bytes, listening) = crate::backend::cpu::new_group_id()?;
                Ok(GroupId { kind, bytes, _held: Some(listening) })
            }
            #[cfg(feature = "cuda")]
            BackendKind::Cuda => Ok(GroupId { kind, bytes: crate::backend::cuda::new_group_id()?, _held: None }),
            BackendKind::Auto => Err(Error::invalid("a group id is made for a named backend, not Auto")),
            other => Err(Error::unsupported(other, "groups whose ranks live in several processes")),
        }
    }

    /// The backend the id is for.
    pub fn backend(&self) -> BackendKind {
        self.kind
    }

    /// The id as bytes, for another process's [`GroupId::from_bytes`]: the
    /// backend's name, a NUL, then the backend's 128 bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut bytes = self.kind.name().as_bytes().to_vec();
        bytes.push(0);
        bytes.extend_from_slice(&self.bytes);
        bytes
    }

    /// The id `bytes` hold (as [`GroupId::to_bytes`] made them), or
    /// [`Error::InvalidArgument`] saying why they are none.
    pub fn from_bytes(bytes: &[u8]) -> Result<GroupId> {
        let invalid = || {
            Error::invalid(format!(
                "{} bytes that are no group id (one is a backend name, a NUL and {GROUP_ID_BYTES} bytes)",
                bytes.len()
            ))
        };
        let name_end = bytes.iter().position(|&b| b == 0).ok_or_else(invalid)?;
        let kind = std::str::from_utf8(&bytes[..name_end])
            .ok()
            .and_then(BackendKind::from_name)
            .filter(|kind| *kind != BackendKind::Auto)
            .ok_or_else(invalid)?;
        let id: [u8; GROUP_ID_BYTES] = bytes[name_end + 1..].try_into().map_err(|_| invalid())?;
        Ok(GroupId { kind, bytes: id, _held: None })
    }
}

/// Several devices of one backend, opened together. Each device is a
/// [`Runtime`] with its own streams and its own ordering boundary, as ever;
/// [`Stream::copy_from_peer`](crate::Stream::copy_from_peer) copies a buffer
/// of one into a buffer of another, ordered by the versions on both.
///
/// On the CPU every member is a device of its own (host memory, its own
/// threads), so the ordering across devices is tested without a GPU. On
/// CUDA the members are device ordinals; a group may name one device twice
/// (two runtimes on it). HIP members are ordinals and wgpu members adapters
/// (indices as [`devices`](crate::devices) lists them), without peer copies.
///
/// A group may also be one rank of a group that spans processes
/// ([`DeviceGroup::join`]): then it holds one member, this process's, and
/// its collectives meet the other ranks' as they call theirs.
#[derive(Clone, Debug)]
pub struct DeviceGroup {
    pub(crate) devices: Vec<Runtime>,
    /// The rank of `devices[0]` among every rank of the group, and how many
    /// ranks it has: `0` and `devices.len()` unless joined.
    pub(crate) first_rank: usize,
    pub(crate) ranks: usize,
    /// The backend's communicator for collectives, made at the first one and
    /// shared by the group's clones.
    pub(crate) communicator: std::sync::Arc<crate::scheduler::CommunicatorSlot>,
}

impl DeviceGroup {
    /// Opens `devices` (indices as [`Runtime::open_device`] takes them) of `kind`.
    pub fn open(kind: BackendKind, devices: &[usize]) -> Result<DeviceGroup> {
        if devices.is_empty() {
            return Err(Error::invalid("a device group needs at least one device"));
        }
        let devices = devices.iter().map(|&index| Runtime::open_device(kind, index)).collect::<Result<Vec<_>>>()?;
        let ranks = devices.len();
        Ok(DeviceGroup { devices, first_rank: 0, ranks, communicator: Default::default() })
    }

    /// Joins the group `id` names as rank `rank` of `ranks`, with device
    /// `device` of this process (an index as [`Runtime::open_device`] takes
    /// it). Blocks until every rank has joined (up to two minutes on the
    /// CPU; as long as NCCL's bootstrap waits on CUDA), so call it off any
    /// thread that must stay responsive.
    ///
    /// The group holds one member, this process's device. Its collectives
    /// take one stream and one buffer (or a send and a receive) of that
    /// member, and sizes count every rank: an all-gather's receive holds
    /// `ranks` times its send. Every rank must admit the group's collectives
    /// in one order, with fitting arguments: on the CPU a mismatch fails the
    /// collective on every rank, naming it; NCCL hangs or fails. A rank whose
    /// process is gone fails its peers' collectives on the CPU (and breaks
    /// the group); NCCL reports it, or hangs, as it is set up to.
    ///
    /// A CPU group has at most 65 536 ranks (every rank but 0 holds a
    /// loopback port), NCCL's at most `i32::MAX`: more is
    /// [`Error::InvalidArgument`] naming the limit, before anything is sized by it.
    pub fn join(kind: BackendKind, device: usize, id: &GroupId, ranks: usize, rank: usize) -> Result<DeviceGroup> {
        if id.kind != kind {
            return Err(Error::invalid(format!("a {} group joined with an id of a {} group", kind, id.kind)));
        }
        if ranks == 0 || rank >= ranks {
            return Err(Error::invalid(format!("rank {rank} of a group of {ranks} ranks")));
        }
        let member = Runtime::open_device(kind, device)?;
        let communicator: Arc<crate::scheduler::CommunicatorSlot> = Default::default();
        member.engine.join_group(&communicator, &id.bytes, ranks, rank)?;
        Ok(DeviceGroup { devices: vec![member], first_rank: rank, ranks, communicator })
    }

    /// This process's first member's rank in the group: `0` unless joined.
    pub fn rank(&self) -> usize {
        self.first_rank
    }

    /// How many ranks the group has, in every process: the members' count unless joined.
    pub fn ranks(&self) -> usize {
        self.ranks
    }

    /// The members, in the order opened.
    pub fn devices(&self) -> &[Runtime] {
        &self.devices
    }

    /// Member `index`.
    pub fn device(&self, index: usize) -> Result<&Runtime> {
        self.devices
            .get(index)
            .ok_or_else(|| Error::invalid(format!("device {index} of a group of {} devices", self.devices.len())))
    }

    /// Waits, without blocking a thread, for all work admitted on every
    /// member so far.
    pub async fn sync(&self) -> Result<()> {
        let fences = self.devices.iter().map(Runtime::fence).collect::<Result<Vec<_>>>()?;
        for fence in fences {
            fence.await?;
        }
        Ok(())
    }

    /// Closes every member (see [`Runtime::close`]); the first error comes back.
    pub fn close(&self) -> Result<()> {
        let mut first = Ok(());
        for device in &self.devices {
            let closed = device.close();
            if first.is_ok() {
                first = closed;
            }
        }
        first
    }
}
