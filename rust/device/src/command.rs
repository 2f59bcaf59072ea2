//! The commands an engine hands to a device: what an op does, over which
//! byte ranges of which buffers. Where a download's bytes go is the
//! engine's (`S`, its sink); everything else is the device's to run.

use std::sync::Arc;
#[cfg(feature = "test-support")]
use std::time::Duration;

use crate::builtin::BuiltinKernel;
use crate::kernel::{CustomKernel, ScalarArg};
use crate::{Access, Grid};

/// A byte range of one buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span<R> {
    pub buffer: R,
    pub offset: u64,
    pub len: u64,
}

/// A kernel argument: a buffer with its declared access, or a scalar.
#[derive(Debug, Clone)]
pub enum KernelArg<R> {
    Buffer(Span<R>, Access),
    Scalar(ScalarArg),
}

impl<R: Copy> KernelArg<R> {
    /// The buffer range and access of a buffer argument.
    pub fn span(&self) -> Option<(Span<R>, Access)> {
        match self {
            KernelArg::Buffer(span, access) => Some((*span, *access)),
            KernelArg::Scalar(_) => None,
        }
    }
}

/// The byte ranges one command touches: a few, kept inline.
pub type Spans<R> = smallvec::SmallVec<[(Span<R>, Access); 4]>;
/// The buffers one command touches, with their access: a few, kept inline.
pub type Accesses<R> = smallvec::SmallVec<[(R, Access); 4]>;
/// An element-wise op's buffers, in its kernel's order: kept inline.
pub type Operands<'a, R> = smallvec::SmallVec<[&'a Span<R>; 3]>;

/// Element-wise binary f32 ops.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    Add,
    Mul,
}

/// One op on a stream. `R` names buffers: buffer keys in the scheduler,
/// the backend's memory once handed to a backend. `S` is where a download's
/// bytes go: the engine's sink, which the device only hands them to.
#[derive(Debug, Clone)]
pub enum Command<R, S> {
    /// Every byte of `dst` zero.
    Zero { dst: Span<R> },
    /// `dst` filled with a 32-bit word.
    Fill { dst: Span<R>, word: u32 },
    /// `src` copied to `dst` (same length).
    Copy { src: Span<R>, dst: Span<R> },
    /// Host bytes copied into `dst`. `data` is empty where the backend
    /// staged the bytes while preparing it: then its preparation holds them.
    Upload { dst: Span<R>, data: Vec<u8> },
    /// `src` copied to the host; the backend fills `sink` when the bytes are there.
    Download { src: Span<R>, sink: S },
    /// out = a ∘ b over f32.
    Binary { op: BinaryOp, a: Span<R>, b: Span<R>, out: Span<R> },
    /// out = alpha·x over f32.
    Scale { x: Span<R>, out: Span<R>, alpha: f32 },
    /// y = alpha·x + y over f32.
    Axpy { x: Span<R>, y: Span<R>, alpha: f32 },
    /// `out[i] = start + i` over u32.
    Iota { out: Span<R>, start: u32 },
    /// Holds the stream for `duration` (test support only: a build without
    /// the hooks has no such command).
    #[cfg(feature = "test-support")]
    Delay { duration: Duration },
    /// A user kernel.
    Custom { kernel: Arc<CustomKernel>, grid: Grid, args: Vec<KernelArg<R>> },
}

impl<R, S> Command<R, S> {
    /// The host bytes the op holds while queued: an upload's data, staged or
    /// not (what the engine's room for queued work counts).
    pub fn host_bytes(&self) -> u64 {
        match self {
            Command::Upload { dst, .. } => dst.len,
            _ => 0,
        }
    }

    /// An element-wise op's built-in kernel, its scalar's bits (if it takes
    /// one) and its buffers in the kernel's order, the one it writes last;
    /// `None` for any other command.
    pub fn elementwise(&self) -> Option<(BuiltinKernel, Option<u32>, Operands<'_, R>)> {
        use smallvec::smallvec;
        Some(match self {
            Command::Fill { dst, word } => (BuiltinKernel::Fill, Some(*word), smallvec![dst]),
            Command::Iota { out, start } => (BuiltinKernel::Iota, Some(*start), smallvec![out]),
            Command::Binary { op: BinaryOp::Add, a, b, out } => (BuiltinKernel::Add, None, smallvec![a, b, out]),
            Command::Binary { op: BinaryOp::Mul, a, b, out } => (BuiltinKernel::Mul, None, smallvec![a, b, out]),
            Command::Scale { x, out, alpha } => (BuiltinKernel::Scale, Some(alpha.to_bits()), smallvec![x, out]),
            Command::Axpy { x, y, alpha } => (BuiltinKernel::Axpy, Some(alpha.to_bits()), smallvec![x, y]),
            _ => return None,
        })
    }

    /// A copy of the command to run again (a recorded graph's replay); `None`
    /// for a download, whose result goes to one reader only.
    pub fn replayable(&self) -> Option<Command<R, S>>
    where
        R: Clone,
        S: Clone,
    {
        (!matches!(self, Command::Download { .. })).then(|| self.clone())
    }

    /// The same command with every buffer name mapped through `f`.
    pub fn map<T>(self, mut f: impl FnMut(R) -> T) -> Command<T, S> {
        let Ok(command) = self.try_map(|r| Ok::<T, std::convert::Infallible>(f(r)));
        command
    }

    /// The same command with every buffer name mapped through `f`, or `f`'s first error.
    pub fn try_map<T, E>(self, mut f: impl FnMut(R) -> Result<T, E>) -> Result<Command<T, S>, E> {
        let mut span =
            |s: Span<R>| -> Result<Span<T>, E> { Ok(Span { buffer: f(s.buffer)?, offset: s.offset, len: s.len }) };
        Ok(match self {
            Command::Zero { dst } => Command::Zero { dst: span(dst)? },
            Command::Fill { dst, word } => Command::Fill { dst: span(dst)?, word },
            Command::Copy { src, dst } => Command::Copy { src: span(src)?, dst: span(dst)? },
            Command::Upload { dst, data } => Command::Upload { dst: span(dst)?, data },
            Command::Download { src, sink } => Command::Download { src: span(src)?, sink },
            Command::Binary { op, a, b, out } => Command::Binary { op, a: span(a)?, b: span(b)?, out: span(out)? },
            Command::Scale { x, out, alpha } => Command::Scale { x: span(x)?, out: span(out)?, alpha },
            Command::Axpy { x, y, alpha } => Command::Axpy { x: span(x)?, y: span(y)?, alpha },
            Command::Iota { out, start } => Command::Iota { out: span(out)?, start },
            #[cfg(feature = "test-support")]
            Command::Delay { duration } => Command::Delay { duration },
            Command::Custom { kernel, grid, args } => Command::Custom {
                kernel,
                grid,
                args: args
                    .into_iter()
                    .map(|arg| match arg {
                        KernelArg::Buffer(s, access) => Ok(KernelArg::Buffer(span(s)?, access)),
                        KernelArg::Scalar(scalar) => Ok(KernelArg::Scalar(scalar)),
                    })
                    .collect::<Result<_, E>>()?,
            },
        })
    }
}

impl<R: Copy, S> Command<R, S> {
    /// Every byte range the command touches, with its access.
    pub fn spans(&self) -> Spans<R> {
        use Access::*;
        let list = |spans: &[(Span<R>, Access)]| Spans::from_slice(spans);
        match self {
            Command::Zero { dst } | Command::Fill { dst, .. } | Command::Upload { dst, .. } => list(&[(*dst, Write)]),
            Command::Copy { src, dst } => list(&[(*src, Read), (*dst, Write)]),
            Command::Download { src, .. } => list(&[(*src, Read)]),
            Command::Binary { a, b, out, .. } => list(&[(*a, Read), (*b, Read), (*out, Write)]),
            Command::Scale { x, out, .. } => list(&[(*x, Read), (*out, Write)]),
            Command::Axpy { x, y, .. } => list(&[(*x, Read), (*y, ReadWrite)]),
            Command::Iota { out, .. } => list(&[(*out, Write)]),
            #[cfg(feature = "test-support")]
            Command::Delay { .. } => Spans::new(),
            Command::Custom { args, .. } => args.iter().filter_map(KernelArg::span).collect(),
        }
    }

    /// Every buffer the command touches, with its access.
    pub fn accesses(&self) -> Accesses<R> {
        self.spans().into_iter().map(|(span, access)| (span.buffer, access)).collect()
    }
}
