//! Work queued on a lane until the lane submits it, and the recording of a
//! lane's run of it.
//!
//! A queued op holds what it needs to be recorded — handles of its buffers,
//! its prepared plan, what it reads and publishes — and nothing of wgpu's
//! own: no encoder, no command buffer (which costs the driver 100 KB and
//! more each, kept until submitted). So an op queued behind a held or
//! waiting stream costs a few hundred bytes ([`QueuedOp::bytes`], counted in
//! the backend's `queued_bytes`).
//!
//! When the runs that lanes issued are submitted (see [`super::lanes`]),
//! they are recorded in issue order into one encoder ([`record_runs`]): one
//! command buffer for up to a batch of ops of any lanes, consecutive
//! dispatches in one compute pass. wgpu
//! reports a failure only when an encoder is finished, and then for the
//! whole encoder; so when a run fails, each of its ops is recorded again in
//! an encoder of its own, and only those that fail alone fail. A failed op
//! fails its outcome (the versions it wrote carry it), its read-back, and
//! the lane's next fence; an op reading a version that failed meanwhile
//! does not run and fails the same way, as on the CPU backend.

use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};

use super::lanes::WgpuLane;
use crate::backend::{Command, FailureTally, KernelArg, OpIo};
use crate::diagnostics::Counters;
use crate::error::Error;
use weir_device::wgpu::memory::WgpuMemory;
use weir_device::wgpu::plan::Plan;
use weir_device::wgpu::record::record;
use weir_device::wgpu::scope::scoped;
use weir_device::wgpu::Recorder;
use weir_device::wgpu::WgpuDevice;

/// One admitted op, not yet recorded.
pub(crate) struct QueuedOp {
    command: Command<WgpuMemory>,
    plan: Plan,
    io: OpIo,
    /// A download's: where its read-back learns that the copy failed.
    copy_failed: Option<Arc<OnceLock<Error>>>,
    /// What it counts for in `queued_bytes`.
    bytes: u64,
    counters: Arc<Counters>,
}

/// What a lane holds between admission and submission, in lane order.
/// Both kinds are boxed: a lane's batch of them then stays below the size
/// at which glibc's allocator consolidates its free lists on every batch.
pub(crate) enum Queued {
    Op(Box<QueuedOp>),
    Commands(Box<Recorded>),
}

/// Recorded already (an external write, a timestamp).
pub(crate) struct Recorded {
    pub commands: wgpu::CommandBuffer,
    /// The buffers it uses, held until it is submitted.
    pub buffers: Vec<WgpuMemory>,
    /// An external write's outcome (no share of the queue): what fails if
    /// its submission does.
    pub io: OpIo,
}

impl Queued {
    /// Never to run (its lane failed first, or its submission did): its
    /// versions, its read-back and its lane's next fence say so.
    pub(crate) fn fail(self, error: Error, tally: &FailureTally) {
        match self {
            Queued::Op(op) => op.fail(error, tally),
            Queued::Commands(recorded) => recorded.io.fail(error, tally),
        }
    }
}

impl QueuedOp {
    pub fn new(
        gpu: &WgpuDevice,
        command: Command<WgpuMemory>,
        plan: Plan,
        io: OpIo,
        copy_failed: Option<Arc<OnceLock<Error>>>,
    ) -> QueuedOp {
        // Boxed in its queue: its own size is on the heap too.
        let bytes = (std::mem::size_of::<QueuedOp>() + heap_bytes(&command) + plan.heap_bytes()) as u64;
        let counters = gpu.counters.clone();
        counters.queued_ops.fetch_add(1, Ordering::Relaxed);
        counters.queued_bytes.fetch_add(bytes, Ordering::Relaxed);
        QueuedOp { command, plan, io, copy_failed, bytes, counters }
    }

    /// Gives the op's share of the runtime's queue back: it is issued.
    pub(crate) fn give_back_credit(&mut self) {
        drop(std::mem::take(&mut self.io.credit));
    }

    /// The op failed (as recorded, or through an input): its versions, its
    /// read-back and the lane's next fence say so.
    pub(crate) fn fail(self: Box<Self>, error: Error, tally: &FailureTally) {
        self.io.fail(error.clone(), tally);
        if let Some(copy_failed) = &self.copy_failed {
            let _ = copy_failed.set(error);
        }
    }
}

impl Drop for QueuedOp {
    fn drop(&mut self) {
        self.counters.queued_ops.fetch_sub(1, Ordering::Relaxed);
        self.counters.queued_bytes.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

/// Bytes of our own a queued command holds beyond its inline size.
fn heap_bytes(command: &Command<WgpuMemory>) -> usize {
    match command {
        Command::Custom { args, .. } => args.capacity() * std::mem::size_of::<KernelArg<WgpuMemory>>(),
        Command::Upload { data, .. } => data.capacity(),
        _ => 0,
    }
}

/// What [`record_runs`] made: the command buffers to submit, and what they
/// use (the ops recorded into them, the buffers of work recorded already),
/// to drop once they are submitted: an op's scalars are in a slot whose next
/// owner writes it through the queue, which lands before the next
/// submission's commands. With them, the runs' lanes, in order.
#[derive(Default)]
pub(crate) struct Recording {
    pub commands: Vec<wgpu::CommandBuffer>,
    /// The ops recorded and the external writes' outcomes, each with the
    /// index of its lane in `lanes`: they fail if the submission does.
    // Boxed as they were queued: unboxing them would copy each.
    #[allow(clippy::vec_box)]
    pub ops: Vec<(usize, Box<QueuedOp>)>,
    pub written: Vec<(usize, OpIo)>,
    pub buffers: Vec<WgpuMemory>,
    pub lanes: Vec<Arc<WgpuLane>>,
}

/// Records `runs` (each lane's queued work, with its lane), in order: the
/// ops between two recorded command buffers into one encoder each. Failed
/// ops are reported through their lane's tally (see the module doc) and
/// left out.
pub(crate) fn record_runs(gpu: &WgpuDevice, runs: Vec<(Arc<WgpuLane>, Vec<Queued>)>) -> Recording {
    let mut recorded = Recording { lanes: Vec::with_capacity(runs.len()), ..Recording::default() };
    // Sized once; the ops stay boxed (a queued op is large, and a batch holds dozens).
    let mut ops = Vec::with_capacity(runs.iter().map(|(_, run)| run.len()).sum());
    for (lane, run) in runs {
        let origin = recorded.lanes.len();
        recorded.lanes.push(lane);
        for queued in run {
            match queued {
                Queued::Op(op) => ops.push((origin, op)),
                Queued::Commands(done) => {
                    record_together(gpu, std::mem::take(&mut ops), &mut recorded);
                    let Recorded { commands, buffers, io } = *done;
                    // As a queued op: an input that failed as its batch was
                    // recorded, after this op was admitted, fails it too, and
                    // its commands (made at admission) are left out.
                    let lane = &recorded.lanes[origin].runner;
                    if let Some(error) = io.failed_input(lane.stream) {
                        io.fail(error, &lane.tally);
                        continue;
                    }
                    recorded.commands.push(commands);
                    recorded.buffers.extend(buffers);
                    recorded.written.push((origin, io));
                }
            }
        }
    }
    record_together(gpu, ops, &mut recorded);
    recorded
}

/// Records `ops` (each with the index of its lane in the recording's) into
/// one encoder, or, if that fails, each alone.
fn record_together(gpu: &WgpuDevice, ops: Vec<(usize, Box<QueuedOp>)>, recorded: &mut Recording) {
    let lanes = &recorded.lanes;
    // An op whose input failed since it was admitted does not run.
    let skip = |(origin, op): (usize, Box<QueuedOp>)| {
        let lane = &lanes[origin].runner;
        match op.io.failed_input(lane.stream) {
            Some(error) => {
                op.fail(error, &lane.tally);
                None
            }
            None => Some((origin, op)),
        }
    };
    let ops: Vec<(usize, Box<QueuedOp>)> = ops.into_iter().filter_map(skip).collect();
    if ops.is_empty() {
        return;
    }
    let together = scoped(&gpu.device, || {
        let mut recorder = Recorder::new(&gpu.device);
        for (_, op) in &ops {
            record(gpu, &mut recorder, &op.command, &op.plan);
        }
        recorder.finish()
    });
    if let Ok(commands) = together {
        recorded.commands.push(commands);
        recorded.ops.extend(ops);
        return;
    }
    // One of them (at least) failed, and took the encoder with it: find it.
    // Each op's inputs are checked again as its turn comes: one that just
    // failed alone may be one of them.
    for (origin, op) in ops.into_iter().filter_map(skip) {
        let alone = scoped(&gpu.device, || {
            let mut recorder = Recorder::new(&gpu.device);
            record(gpu, &mut recorder, &op.command, &op.plan);
            recorder.finish()
        });
        let lane = &lanes[origin].runner;
        match alone {
            Ok(commands) => {
                recorded.commands.push(commands);
                recorded.ops.push((origin, op));
            }
            Err(failure) => op.fail(failure.on_stream(lane.stream), &lane.tally),
        }
    }
}
