//! Checks op arguments and turns them into scheduler commands.

use std::sync::Arc;

use crate::backend::{BinaryOp, Command, KernelArg, Span};
use crate::buffer::Buffer;
use crate::device::KernelLanguage;
use crate::element::ElementType;
use crate::error::{Error, Result};
use crate::kernel::{Access, Builtin, CustomKernel, Grid, Kernel, KernelDef, ScalarArg};
use crate::scheduler::{BufferKey, Engine};

/// An argument of [`crate::Stream::execute`].
#[derive(Debug, Clone)]
pub enum Arg<'a> {
    Buffer(&'a Buffer, Access),
    Scalar(ScalarArg),
}

impl<'a> Arg<'a> {
    pub fn read(buffer: &'a Buffer) -> Self {
        Arg::Buffer(buffer, Access::Read)
    }
    pub fn write(buffer: &'a Buffer) -> Self {
        Arg::Buffer(buffer, Access::Write)
    }
    pub fn read_write(buffer: &'a Buffer) -> Self {
        Arg::Buffer(buffer, Access::ReadWrite)
    }
    pub fn u32(value: u32) -> Self {
        Arg::Scalar(ScalarArg::U32(value))
    }
    pub fn i32(value: i32) -> Self {
        Arg::Scalar(ScalarArg::I32(value))
    }
    pub fn f32(value: f32) -> Self {
        Arg::Scalar(ScalarArg::F32(value))
    }
    pub fn u64(value: u64) -> Self {
        Arg::Scalar(ScalarArg::U64(value))
    }
    pub fn i64(value: i64) -> Self {
        Arg::Scalar(ScalarArg::I64(value))
    }
    pub fn f64(value: f64) -> Self {
        Arg::Scalar(ScalarArg::F64(value))
    }
    /// Any other scalar: `u8`, `i16`, half-precision bits, …
    pub fn scalar(value: ScalarArg) -> Self {
        Arg::Scalar(value)
    }
    /// A struct passed by value, as its bytes in the device's layout (for a
    /// `#[repr(C)]` Rust type of plain fields, `bytemuck::bytes_of(&value)`).
    pub fn bytes(bytes: &[u8]) -> Self {
        Arg::Scalar(ScalarArg::Bytes(bytes.into()))
    }
}

/// Arguments bound to one runtime: the spans of buffers (or views) and scalars.
struct Bound {
    op: &'static str,
    /// Inline: a built-in's arguments are only looked at, so admitting one
    /// allocates nothing here (a custom kernel's go on in its command).
    args: smallvec::SmallVec<[KernelArg<BufferKey>; 4]>,
    /// The element type of each argument that is a buffer.
    elements: smallvec::SmallVec<[Option<ElementType>; 8]>,
}

impl Bound {
    fn new(engine: &Arc<dyn Engine>, op: &'static str, args: &[Arg<'_>]) -> Result<Bound> {
        let mut bound = smallvec::SmallVec::with_capacity(args.len());
        let mut elements = smallvec::SmallVec::with_capacity(args.len());
        let mut spans: smallvec::SmallVec<[(Span<BufferKey>, Access); 8]> = smallvec::SmallVec::new();
        for arg in args {
            match *arg {
                Arg::Buffer(buffer, access) => {
                    let span = buffer.whole_in(engine)?;
                    spans.push((span, access));
                    bound.push(KernelArg::Buffer(span, access));
                    elements.push(Some(buffer.element_type()));
                }
                Arg::Scalar(ref scalar) => {
                    bound.push(KernelArg::Scalar(scalar.clone()));
                    elements.push(None);
                }
            }
        }
        reject_overlap(&spans)?;
        Ok(Bound { op, args: bound, elements })
    }

    fn expect_count(&self, count: usize) -> Result<()> {
        if self.args.len() != count {
            return Err(Error::invalid(format!("{} takes {count} arguments, got {}", self.op, self.args.len())));
        }
        Ok(())
    }

    fn buffer(&self, index: usize, needs: Access) -> Result<Span<BufferKey>> {
        match self.args.get(index) {
            Some(KernelArg::Buffer(span, declared))
                if (!needs.reads() || declared.reads()) && (!needs.writes() || declared.writes()) =>
            {
                Ok(*span)
            }
            Some(KernelArg::Buffer(_, declared)) => Err(Error::invalid(format!(
                "{} argument {index} must be declared {needs:?}, not {declared:?}",
                self.op
            ))),
            _ => Err(Error::invalid(format!("{} argument {index} must be a buffer", self.op))),
        }
    }

    /// Buffer argument `index`, which must hold `element`s (or raw bytes, a
    /// whole number of them).
    fn typed(&self, index: usize, needs: Access, element: ElementType) -> Result<Span<BufferKey>> {
        let span = self.words(index, needs)?;
        match self.elements.get(index).copied().flatten() {
            Some(held) if !held.serves(element) => {
                Err(Error::invalid(format!("{} argument {index} is a buffer of {held}: it takes {element}", self.op)))
            }
            _ => Ok(span),
        }
    }

    /// Refuses buffer arguments `a` and `b` unless of one element type (raw
    /// bytes go with any).
    fn same_element(&self, a: usize, b: usize) -> Result<()> {
        let element = |index: usize| self.elements.get(index).copied().flatten();
        match (element(a), element(b)) {
            (Some(x), Some(y)) if !x.agrees_with(y) => Err(Error::invalid(format!(
                "{} needs buffers of one element type, got {:?}",
                self.op,
                [x.name(), y.name()]
            ))),
            _ => Ok(()),
        }
    }

    fn words(&self, index: usize, needs: Access) -> Result<Span<BufferKey>> {
        let span = self.buffer(index, needs)?;
        if span.len % 4 != 0 {
            return Err(Error::invalid(format!(
                "{} argument {index}: {} bytes is not a whole number of 4-byte elements",
                self.op, span.len
            )));
        }
        Ok(span)
    }

    fn scalar(&self, index: usize) -> Result<ScalarArg> {
        match self.args.get(index) {
            Some(KernelArg::Scalar(scalar)) => Ok(scalar.clone()),
            _ => Err(Error::invalid(format!("{} argument {index} must be a scalar", self.op))),
        }
    }

    fn same_len(&self, spans: &[Span<BufferKey>]) -> Result<()> {
        if spans.windows(2).any(|pair| pair[0].len != pair[1].len) {
            let lens: Vec<u64> = spans.iter().map(|s| s.len).collect();
            return Err(Error::invalid(format!("{} needs buffers of equal size, got {lens:?}", self.op)));
        }
        Ok(())
    }
}

/// Memory an op writes may not be among its arguments twice: kernels see
/// disjoint memory. Disjoint ranges (views) of one buffer are fine.
pub(crate) fn reject_overlap(spans: &[(Span<BufferKey>, Access)]) -> Result<()> {
    // Ops take a handful of buffers: a quadratic scan beats allocating a set.
    for (index, (span, access)) in spans.iter().enumerate() {
        let clash = spans[index + 1..].iter().any(|(other, other_access)| {
            other.buffer == span.buffer
                && other.offset < span.offset + span.len
                && span.offset < other.offset + other.len
                && (access.writes() || other_access.writes())
        });
        if clash {
            return Err(Error::invalid("memory an op writes cannot appear twice among its arguments"));
        }
    }
    Ok(())
}

/// The command for a built-in op, its arguments checked.
pub(crate) fn builtin(engine: &Arc<dyn Engine>, op: Builtin, args: &[Arg<'_>]) -> Result<Command<BufferKey>> {
    let b = Bound::new(engine, op.name(), args)?;
    let typed_fill = |element: ElementType, want: fn(&ScalarArg) -> bool| -> Result<Command<BufferKey>> {
        b.expect_count(2)?;
        let dst = b.typed(0, Access::Write, element)?;
        let value = b.scalar(1)?;
        if !want(&value) {
            return Err(Error::invalid(format!("{} needs a {} value, got {value:?}", b.op, &b.op[5..])));
        }
        let word = value.bits().ok_or_else(|| Error::invalid(format!("{} needs a 4-byte scalar", b.op)))?;
        Ok(Command::Fill { dst, word })
    };
    match op {
        Builtin::MemsetZero => {
            b.expect_count(1)?;
            Ok(Command::Zero { dst: b.buffer(0, Access::Write)? })
        }
        Builtin::FillU32 => typed_fill(ElementType::U32, |v| matches!(v, ScalarArg::U32(_))),
        Builtin::FillI32 => typed_fill(ElementType::I32, |v| matches!(v, ScalarArg::I32(_))),
        Builtin::FillF32 => typed_fill(ElementType::F32, |v| matches!(v, ScalarArg::F32(_))),
        Builtin::Copy => {
            b.expect_count(2)?;
            let (src, dst) = (b.buffer(0, Access::Read)?, b.buffer(1, Access::Write)?);
            b.same_element(0, 1)?;
            b.same_len(&[src, dst])?;
            Ok(Command::Copy { src, dst })
        }
        Builtin::Add | Builtin::Mul => {
            b.expect_count(3)?;
            let f32s = |index, access| b.typed(index, access, ElementType::F32);
            let (a, bb, out) = (f32s(0, Access::Read)?, f32s(1, Access::Read)?, f32s(2, Access::Write)?);
            b.same_len(&[a, bb, out])?;
            let op = if op == Builtin::Add { BinaryOp::Add } else { BinaryOp::Mul };
            Ok(Command::Binary { op, a, b: bb, out })
        }
        Builtin::Scale => {
            b.expect_count(3)?;
            let (x, out) = (b.typed(0, Access::Read, ElementType::F32)?, b.typed(1, Access::Write, ElementType::F32)?);
            b.same_len(&[x, out])?;
            Ok(Command::Scale { x, out, alpha: f32_scalar(&b, 2)? })
        }
        Builtin::Axpy => {
            b.expect_count(3)?;
            let (x, y) =
                (b.typed(0, Access::Read, ElementType::F32)?, b.typed(1, Access::ReadWrite, ElementType::F32)?);
            b.same_len(&[x, y])?;
            Ok(Command::Axpy { x, y, alpha: f32_scalar(&b, 2)? })
        }
        Builtin::Iota => {
            b.expect_count(2)?;
            let out = b.typed(0, Access::Write, ElementType::U32)?;
            match b.scalar(1)? {
                ScalarArg::U32(start) => Ok(Command::Iota { out, start }),
                other => Err(Error::invalid(format!("iota needs a u32 start, got {other:?}"))),
            }
        }
        #[cfg(feature = "test-support")]
        Builtin::Delay => {
            b.expect_count(1)?;
            match b.scalar(0)? {
                ScalarArg::U32(micros) => {
                    Ok(Command::Delay { duration: std::time::Duration::from_micros(u64::from(micros)) })
                }
                other => Err(Error::invalid(format!("delay needs u32 microseconds, got {other:?}"))),
            }
        }
    }
}

fn f32_scalar(b: &Bound, index: usize) -> Result<f32> {
    match b.scalar(index)? {
        ScalarArg::F32(value) => Ok(value),
        other => Err(Error::invalid(format!("{} needs an f32 scalar, got {other:?}", b.op))),
    }
}

/// The command for a custom kernel, if it has a source for this backend.
pub(crate) fn custom(
    engine: &Arc<dyn Engine>,
    kernel: &Arc<CustomKernel>,
    grid: crate::kernel::Grid,
    args: &[Arg<'_>],
) -> Result<Command<BufferKey>> {
    let backend = engine.kind();
    // A runtime is always of a concrete backend.
    let Some(language) = backend.kernel_language() else {
        return Err(Error::invalid(format!("kernel {}: a runtime of {backend} runs no kernels", kernel.name)));
    };
    let has_source = match language {
        KernelLanguage::Rust => kernel.cpu.is_some(),
        KernelLanguage::Wgsl => kernel.wgsl.is_some(),
        KernelLanguage::CudaC => kernel.cuda.is_some(),
        KernelLanguage::HipC => kernel.hip.is_some(),
    };
    if !has_source {
        let wanted = match language {
            KernelLanguage::Rust => "a Rust closure (the CPU backend runs no kernel source)",
            KernelLanguage::Wgsl => "a WGSL source",
            KernelLanguage::CudaC => "a CUDA C source",
            KernelLanguage::HipC => "a HIP C source",
        };
        return Err(Error::unsupported(
            backend,
            format!("kernel {} has no {backend} implementation: it needs {wanted}", kernel.name),
        ));
    }
    if grid.groups.contains(&0) || grid.block.contains(&0) {
        return Err(Error::invalid(format!("kernel {}: grid {grid:?} has an empty dimension", kernel.name)));
    }
    if grid.threads().is_none() {
        return Err(Error::invalid(format!(
            "kernel {}: grid {grid:?} has more threads than a u64 counts",
            kernel.name
        )));
    }
    let bound = Bound::new(engine, "kernel", args)?;
    Ok(Command::Custom { kernel: kernel.clone(), grid, args: bound.args.into_vec() })
}

/// The command for any kernel.
pub(crate) fn kernel(
    engine: &Arc<dyn Engine>,
    kernel: &crate::Kernel,
    grid: crate::kernel::Grid,
    args: &[Arg<'_>],
) -> Result<Command<BufferKey>> {
    match &kernel.0 {
        KernelDef::Builtin(op) => builtin(engine, *op, args),
        KernelDef::Custom(custom_kernel) => custom(engine, custom_kernel, grid, args),
    }
}

/// Where a write of `len` bytes into `buffer` at element `offset` lands:
/// refused unless they are a whole number of its elements, at least one,
/// within it, and (for data of an `element` type rather than raw bytes) of
/// a type the buffer holds.
pub(crate) fn write_target(
    engine: &Arc<dyn Engine>,
    buffer: &Buffer,
    offset: u64,
    element: Option<ElementType>,
    len: usize,
) -> Result<Span<BufferKey>> {
    if let Some(element) = element {
        buffer.expect_element(element, "a write")?;
    }
    let count = whole_elements(buffer.element_type(), len)?;
    let dst = buffer.span_in(engine, offset, count)?;
    if len == 0 {
        return Err(Error::invalid("nothing to write"));
    }
    Ok(dst)
}

/// How many `element`s `bytes` hold, refusing a part of one.
pub(crate) fn whole_elements(element: ElementType, bytes: usize) -> Result<u64> {
    let bytes = bytes as u64;
    if !bytes.is_multiple_of(element.size_bytes()) {
        return Err(Error::invalid(format!("{bytes} bytes are not a whole number of {}", element.unit())));
    }
    Ok(bytes / element.size_bytes())
}

/// An argument as a recorded graph keeps it: the buffer itself (its type,
/// its range), not only the span it bound.
#[derive(Debug, Clone)]
pub(crate) enum HeldArg {
    Buffer(Buffer, Access),
    Scalar(ScalarArg),
}

fn held(args: &[Arg<'_>]) -> Vec<HeldArg> {
    args.iter()
        .map(|arg| match arg {
            Arg::Buffer(buffer, access) => HeldArg::Buffer((*buffer).clone(), *access),
            Arg::Scalar(scalar) => HeldArg::Scalar(scalar.clone()),
        })
        .collect()
}

fn lent(args: &[HeldArg]) -> Vec<Arg<'_>> {
    args.iter()
        .map(|arg| match arg {
            HeldArg::Buffer(buffer, access) => Arg::Buffer(buffer, *access),
            HeldArg::Scalar(scalar) => Arg::Scalar(scalar.clone()),
        })
        .collect()
}

/// An op as its caller asked for it, kept by a recorded graph so that
/// [`Graph::rebind`](crate::Graph::rebind) makes it again over other buffers
/// through the very checks it passed when recorded ([`builtin`], [`kernel`],
/// [`write_target`]): a rebound graph holds only ops that could be admitted.
#[derive(Debug, Clone)]
pub(crate) enum Recipe {
    Builtin {
        op: Builtin,
        args: Vec<HeldArg>,
    },
    Kernel {
        kernel: Kernel,
        grid: Grid,
        args: Vec<HeldArg>,
    },
    /// The recorded command's bytes written at element `offset` of
    /// `buffer`, as data of `element` (`None`: raw bytes).
    Write {
        buffer: Buffer,
        offset: u64,
        element: Option<ElementType>,
    },
}

impl Recipe {
    pub(crate) fn builtin(op: Builtin, args: &[Arg<'_>]) -> Recipe {
        Recipe::Builtin { op, args: held(args) }
    }

    pub(crate) fn kernel(kernel: &Kernel, grid: Grid, args: &[Arg<'_>]) -> Recipe {
        Recipe::Kernel { kernel: kernel.clone(), grid, args: held(args) }
    }

    /// The same op with every buffer passed through `swap`.
    pub(crate) fn rebound(&self, swap: impl Fn(&Buffer) -> Result<Buffer>) -> Result<Recipe> {
        let args = |args: &[HeldArg]| -> Result<Vec<HeldArg>> {
            args.iter()
                .map(|arg| match arg {
                    HeldArg::Buffer(buffer, access) => Ok(HeldArg::Buffer(swap(buffer)?, *access)),
                    HeldArg::Scalar(scalar) => Ok(HeldArg::Scalar(scalar.clone())),
                })
                .collect()
        };
        Ok(match self {
            Recipe::Builtin { op, args: held } => Recipe::Builtin { op: *op, args: args(held)? },
            Recipe::Kernel { kernel, grid, args: held } => {
                Recipe::Kernel { kernel: kernel.clone(), grid: *grid, args: args(held)? }
            }
            Recipe::Write { buffer, offset, element } => {
                Recipe::Write { buffer: swap(buffer)?, offset: *offset, element: *element }
            }
        })
    }

    /// The op's command in `engine`, checked as an op admitted directly is;
    /// `recorded` is the command first made from it, whose bytes a write keeps.
    pub(crate) fn command(&self, engine: &Arc<dyn Engine>, recorded: Command<BufferKey>) -> Result<Command<BufferKey>> {
        match self {
            Recipe::Builtin { op, args } => builtin(engine, *op, &lent(args)),
            Recipe::Kernel { kernel: k, grid, args } => kernel(engine, k, *grid, &lent(args)),
            Recipe::Write { buffer, offset, element } => match recorded {
                Command::Upload { data, .. } => {
                    Ok(Command::Upload { dst: write_target(engine, buffer, *offset, *element, data.len())?, data })
                }
                _ => Err(Error::internal("a recorded write whose command is no upload")),
            },
        }
    }
}
