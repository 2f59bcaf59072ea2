//! What `enqueue` does with a prepared command, under the ordering boundary:
//! every check (the buffers' ranges, and that the preparation is of this
//! command's kind; that it was made for this very command, a download's
//! loan of its size among it, is `enqueue`'s safety contract), the
//! addresses filled in, and the driver calls handed to the issuing thread;
//! and a replay's commands captured as one graph.

use super::issue::{Issue, Job};
use super::prepare::PreparedLaunch;
use super::{Driver, GpuBackend, GpuMemory, GpuStream, GraphExec, Prepared};
use crate::backend::{Command, EnqueueError, Span};
use crate::error::{Error, Result};
use crate::lock::lock;

fn rejected(message: &str) -> EnqueueError {
    EnqueueError::Rejected(Error::invalid(message))
}

impl<D: Driver> GpuBackend<D> {
    /// The address of `span`, or a rejection if it leaves its buffer.
    fn address(span: &Span<&GpuMemory<D>>) -> Result<u64, EnqueueError> {
        match span.offset.checked_add(span.len) {
            Some(end) if end <= span.buffer.len => Ok(span.buffer.ptr + span.offset),
            _ => Err(EnqueueError::Rejected(Error::OutOfRange {
                offset: span.offset,
                size: span.len,
                len: span.buffer.len,
                element: crate::ElementType::Bytes,
            })),
        }
    }

    /// The pointers of `launch` filled with the addresses of `buffers`, in
    /// order; a rejection if they do not match what it was prepared for.
    // Inlined, as `resolve` and `submit`: the launch (some 200 bytes)
    // would be copied once more per call on every admission.
    #[inline(always)]
    fn resolve_launch<'m>(
        PreparedLaunch { mut launch, pointers }: PreparedLaunch<D>,
        buffers: impl IntoIterator<Item = Span<&'m GpuMemory<D>>>,
    ) -> Result<Issue<D>, EnqueueError> {
        let mut filled = 0;
        for span in buffers {
            let index = pointers.get(filled).copied();
            match index {
                Some(index) if launch.params.set_pointer(index, Self::address(&span)?) => filled += 1,
                _ => return Err(rejected("a launch was prepared for another command")),
            }
        }
        if filled != pointers.len() {
            return Err(rejected("a launch was prepared for another command"));
        }
        Ok(Issue::Launch(launch))
    }

    /// What the driver is to do for one prepared command, every check made:
    /// the buffers' ranges, and that `prepared` was made for `command`. A
    /// rejection leaves the stream untouched.
    #[inline(always)]
    pub(super) fn resolve(command: Command<&GpuMemory<D>>, prepared: Prepared<D>) -> Result<Issue<D>, EnqueueError> {
        match (command, prepared) {
            (Command::Zero { dst }, Prepared::Direct) => Ok(Issue::Zero { to: Self::address(&dst)?, len: dst.len }),
            (Command::Copy { src, dst }, Prepared::Direct) => {
                if src.len != dst.len {
                    return Err(rejected("a copy's source and destination differ in size"));
                }
                Ok(Issue::Copy { to: Self::address(&dst)?, from: Self::address(&src)?, len: dst.len })
            }
            (Command::Upload { dst, .. }, Prepared::Upload(staged, len)) => {
                if len != dst.len {
                    return Err(rejected("upload size differs from its destination"));
                }
                Ok(Issue::Upload { to: Self::address(&dst)?, len, staged })
            }
            (Command::Download { src, sink }, Prepared::Download(loan)) => match Self::address(&src) {
                Ok(from) => Ok(Issue::Download { from, len: src.len, sink, loan }),
                Err(refused) => {
                    if let EnqueueError::Rejected(error) = &refused {
                        sink.fail(error.clone());
                    }
                    Err(refused)
                }
            },
            (Command::Fill { dst, .. } | Command::Iota { out: dst, .. }, Prepared::Launch(launch)) => {
                Self::resolve_launch(launch, [dst])
            }
            (Command::Binary { a, b, out, .. }, Prepared::Launch(launch)) => Self::resolve_launch(launch, [a, b, out]),
            (Command::Scale { x, out, .. }, Prepared::Launch(launch)) => Self::resolve_launch(launch, [x, out]),
            (Command::Axpy { x, y, .. }, Prepared::Launch(launch)) => Self::resolve_launch(launch, [x, y]),
            #[cfg(feature = "test-support")]
            (Command::Delay { .. }, Prepared::Launch(launch)) => Self::resolve_launch(launch, []),
            (Command::Custom { args, .. }, Prepared::Launch(launch)) => {
                Self::resolve_launch(launch, args.iter().filter_map(|arg| arg.span().map(|(span, _)| span)))
            }
            (Command::Download { sink, .. }, _) => {
                let error = Error::invalid("a download was prepared for another command");
                sink.fail(error.clone());
                Err(EnqueueError::Rejected(error))
            }
            _ => Err(rejected("the command was prepared for another command")),
        }
    }

    /// Has `job` run in admission order (see [`issue::Issuer::submit`](super::issue::Issuer::submit));
    /// a stopped issuer fails the op.
    #[inline(always)]
    pub(super) fn submit(&self, job: Job<D>) -> Result<(), EnqueueError> {
        self.device.issuer.submit(job).map_err(EnqueueError::Failed)
    }

    /// Captures `commands` on the capture stream as one graph; `None` where
    /// the driver has no graphs or nothing was given.
    ///
    /// # Safety
    /// As for [`Backend::enqueue`](crate::backend::Backend::enqueue), for every command; the graph keeps the
    /// addresses and arguments, so the recording may never change.
    pub(super) unsafe fn capture(
        &self,
        commands: Vec<(Command<&GpuMemory<D>>, Prepared<D>)>,
    ) -> Result<Option<GraphExec>, EnqueueError> {
        if commands.is_empty() {
            return Ok(None);
        }
        self.driver().bind().map_err(EnqueueError::Failed)?;
        let mut capture_stream = lock(&self.capture_stream);
        if capture_stream.is_none() {
            *capture_stream = Some(GpuStream::internal(&self.device).map_err(EnqueueError::Failed)?);
        }
        let Some(on) = capture_stream.as_ref() else { return Ok(None) };
        let mut commands = Some(commands);
        let mut enqueue = || {
            for (command, prepared) in commands.take().into_iter().flatten() {
                Self::resolve(command, prepared)?.issue(on, &mut false).map_err(EnqueueError::Failed)?;
            }
            Ok(())
        };
        // SAFETY: the capture stream is used for captures only, under its
        // lock; the commands' memory is alive and ordered (this function's
        // contract), and nothing is queued for it (captures run inline).
        unsafe { self.driver().capture(on.raw, &mut enqueue) }.transpose()
    }
}
