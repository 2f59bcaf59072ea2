//! Collectives over a group of devices: what one does, as a driver gets it.

use crate::element::ElementType;
use crate::launch::Access;

/// How a reducing collective combines the members' elements, element by
/// element. Integers wrap on overflow; `Max`/`Min` of `f32` follow
/// `f32::max`/`f32::min` on the CPU (a NaN loses to a number) and NCCL on
/// CUDA.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum ReduceOp {
    Sum,
    Max,
    Min,
}

/// What a collective does, as the backend gets it (checked by the scheduler:
/// one part per member, sizes that fit, one element type).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum CollectiveKind {
    /// Every member's buffer becomes the reduction of all of them (in place).
    AllReduce(ReduceOp),
    /// Every member's buffer becomes member `root`'s (in place; the root's is read).
    Broadcast { root: usize },
    /// Member m's receive holds every member's send, in rank order.
    AllGather,
    /// Member m's receive holds chunk m of the reduction of every member's send.
    ReduceScatter(ReduceOp),
}

/// One collective over a group: what it does, over elements of which type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Collective {
    pub kind: CollectiveKind,
    pub element: ElementType,
}

impl Collective {
    /// How member `rank` uses its buffers: (send, receive); one buffer for
    /// the in-place collectives, where `receive` is `None`.
    pub fn accesses(&self, rank: usize) -> (Access, Option<Access>) {
        match self.kind {
            CollectiveKind::AllReduce(_) => (Access::ReadWrite, None),
            CollectiveKind::Broadcast { root } if root == rank => (Access::Read, None),
            // A full overwrite: what the member held before is not read.
            CollectiveKind::Broadcast { .. } => (Access::Write, None),
            CollectiveKind::AllGather | CollectiveKind::ReduceScatter(_) => (Access::Read, Some(Access::Write)),
        }
    }

    /// The name users call it by, for messages.
    pub fn name(&self) -> &'static str {
        match self.kind {
            CollectiveKind::AllReduce(_) => "all_reduce",
            CollectiveKind::Broadcast { .. } => "broadcast",
            CollectiveKind::AllGather => "all_gather",
            CollectiveKind::ReduceScatter(_) => "reduce_scatter",
        }
    }
}

/// The bytes of a group id as a backend makes them (an `ncclUniqueId`'s
/// size): what `Backend::joined_communicator` meets its ranks through.
pub const GROUP_ID_BYTES: usize = 128;
