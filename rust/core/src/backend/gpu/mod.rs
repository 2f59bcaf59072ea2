//! The event-stream layer CUDA and HIP share.
//!
//! A GPU backend is a [`Driver`]: the few calls that differ between CUDA and
//! HIP (streams, events, memory, copies, memsets, runtime compilation,
//! launches, host callbacks). Everything else lives here, once:
//! - the [`Backend`] implementation over any driver: `prepare` does the slow
//!   part of a command before the scheduler's ordering boundary (compiling and
//!   loading custom kernels, staging upload bytes in page-locked memory,
//!   building launch parameters), and `enqueue` only checks the buffers'
//!   ranges and writes their addresses; the driver calls are made in
//!   admission order, by the admitting thread or, once admissions come in a
//!   streak, by the device's issuing thread (see [`issue`]);
//! - owners for streams, events and allocations, each releasing its handle
//!   exactly once in `Drop`, with live counts;
//! - the completion path: a host callback or a per-stream waiter thread
//!   (see [`stream`]);
//! - the built-in kernels as one C source and the compiled-kernel cache;
//! - page-locked staging for uploads and downloads, so enqueueing a copy
//!   never waits for the device;
//! - frees from any thread: owners bind the device before their driver
//!   calls, since the scheduler drops them on its delivery thread.
//!
//! Cross-stream order comes only from the scheduler's `record_event` /
//! `wait_event`; this layer adds no ordering of its own.

mod device;
mod issue;
mod kernels;
mod owners;
mod stream;
// Over the device layer's fake driver.
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use crate::backend::{
    Backend, BackendCounters, BinaryOp, Collective, CollectivePart, Command, EnqueueError, KernelArg, OpIo, RawAccess,
    SignalKind, Span,
};
use crate::completion::Completion;
use crate::device::{BackendKind, DeviceInfo, KernelLanguage};
use crate::error::{Error, Result};
use crate::host::HostBuffer;
use crate::kernel::{Access, CustomKernel, Grid};
use crate::key_map::KeyMap;
use crate::lock::lock;
use crate::options::RuntimeOptions;

use device::{Device, LentToHost, Loan};
use issue::{Issue, Job, QueuedEvent};
use kernels::{Builtins, Entry, Function, Param, Params};
pub use weir_device::driver::DeviceBuffer;
pub(crate) use weir_device::driver::{Driver, EventUse, GraphExec, RawPart};
use weir_device::raw::RawStream;
// The built-ins' source and entry list are for test suites and benchmarks
// (the backend module is public only with `test-support`); the backend
// itself loads them through `Kernels::builtin` and indexes by `Entry`.
#[cfg_attr(not(feature = "test-support"), allow(unused_imports))]
pub use kernels::{BUILTIN_ENTRIES, BUILTIN_SOURCE};
pub(crate) use owners::{GpuEvent, GpuMemory, GpuTimestamp};
use stream::StreamRef;
pub(crate) use stream::{GpuStream, Wake};

/// Where a driver's completions arrive unless the runtime's builder says otherwise.
fn default_wake(kind: BackendKind) -> Wake {
    match kind {
        // ROCm 5.2 delivers stream callbacks without a thread of ours per stream.
        BackendKind::Hip => Wake::Callback,
        // CUDA, measured with `cargo xtask bench`: median fence wake-up 36 us
        // through the waiter thread, 59 us through stream callbacks.
        _ => Wake::Waiter,
    }
}

/// Threads per block of the built-in kernels.
const BLOCK: u32 = 256;
/// The built-ins loop over their elements, so a bounded grid covers any size.
const MAX_GROUPS: u64 = 65_535;

/// What [`Backend::prepare`] made for one command: everything its driver
/// calls need but its buffers' addresses, which only `enqueue` may read.
pub(crate) enum Prepared<D: Driver> {
    /// Memsets and device copies: the driver call is all there is.
    Direct,
    /// A kernel launch.
    Launch(PreparedLaunch<D>),
    /// An upload: the host bytes already in page-locked memory, and how many.
    Upload(Staged, u64),
    /// A download: the page-locked memory the bytes will land in.
    Download(Loan),
}

/// A launch made ready outside the boundary: the function compiled and
/// loaded, the grid, and every parameter but the buffer addresses.
pub(crate) struct PreparedLaunch<D: Driver> {
    launch: ReadyLaunch<D>,
    /// The parameters that take buffer addresses, in the order the command
    /// names its buffers.
    pointers: smallvec::SmallVec<[usize; 8]>,
}

/// A launch with every parameter filled: what the driver call takes, and
/// no more, since it is queued by value for the issuing thread to read.
pub(crate) struct ReadyLaunch<D: Driver> {
    function: D::Function,
    grid: Grid,
    params: Params,
}

/// Where an upload's bytes wait in page-locked memory.
pub(crate) enum Staged {
    /// Copied into a loan while the upload was prepared.
    Loan(Loan),
    /// The app's own buffer, locked by this device: held until the copy is done.
    Host(HostBuffer),
}

impl Staged {
    fn ptr(&self) -> *const u8 {
        match self {
            Staged::Loan(loan) => loan.ptr(),
            Staged::Host(host) => host.as_ptr(),
        }
    }
}

/// Page-locked memory a device copy may still read or write. Only the
/// copy's completion callback lets it go; dropped unrun (the driver refused
/// the callback, so nobody learns when the copy ends), it is abandoned
/// rather than reused under a running copy.
struct InFlight<T: Abandon>(Option<T>);

impl<T: Abandon> InFlight<T> {
    fn new(memory: T) -> Self {
        InFlight(Some(memory))
    }

    fn release(mut self) -> Option<T> {
        self.0.take()
    }
}

impl<T: Abandon> Drop for InFlight<T> {
    fn drop(&mut self) {
        if let Some(memory) = self.0.take() {
            memory.abandon();
        }
    }
}

/// Giving up page-locked memory that a copy nobody will see end may still use.
trait Abandon {
    fn abandon(self);
}

impl Abandon for Loan {
    fn abandon(self) {
        // Stays lent until the device goes, which frees it after every stream synchronised.
        Loan::abandon(self)
    }
}

impl Abandon for Staged {
    fn abandon(self) {
        match self {
            Staged::Loan(loan) => loan.abandon(),
            // Never unique again, so never written or returned to the pool.
            Staged::Host(host) => std::mem::forget(host),
        }
    }
}

fn rejected(message: &str) -> EnqueueError {
    EnqueueError::Rejected(Error::invalid(message))
}

impl<D: Driver> Drop for GpuBackend<D> {
    fn drop(&mut self) {
        // Every queued driver call is made, then the thread lets the device go.
        self.device.issuer.stop();
        let graphs: Vec<GraphExec> = lock(&self.graphs).drain().map(|(_, exec)| exec).collect();
        if !graphs.is_empty() && self.driver().bind().is_ok() {
            for exec in graphs {
                // SAFETY: captured by this driver, drained so destroyed once.
                unsafe { self.driver().graph_destroy(exec) };
            }
        }
    }
}

/// A custom kernel's function, beside a weak handle that tells whether the
/// kernel it was loaded for is still the one at its address.
type KnownKernel<D> = (Weak<CustomKernel>, Function<D>);

/// A [`Backend`] over one GPU driver.
pub(crate) struct GpuBackend<D: Driver> {
    device: Arc<Device<D>>,
    builtins: Builtins<D::Function>,
    /// Custom kernels' functions, by kernel (see `custom_function`).
    by_kernel: Mutex<KeyMap<usize, KnownKernel<D>>>,
    /// Captured replays, by recording.
    graphs: Mutex<HashMap<u64, GraphExec>>,
    /// Where replays are captured; made at the first capture.
    capture_stream: Mutex<Option<GpuStream<D>>>,
    wake: Wake,
}

impl<D: Driver> GpuBackend<D> {
    /// A backend over `driver`, its built-in kernels compiled and loaded now:
    /// loading a module can synchronise the whole device, which must not
    /// happen later behind work in flight.
    pub(crate) fn new(driver: D, options: &RuntimeOptions) -> Result<Self> {
        Self::with(driver, options.wake.unwrap_or(default_wake(D::KIND)), options.spin)
    }

    /// As [`GpuBackend::new`], completing through `wake`, its waiting
    /// threads spinning for up to `spin` per wait.
    pub(crate) fn with(driver: D, wake: Wake, spin: Duration) -> Result<Self> {
        let device = Device::new(driver, spin);
        device.driver.bind()?;
        let builtins = Builtins::load(|entry| device.kernels.builtin(&device.driver, entry).map(|f| f.raw))?;
        let backend = GpuBackend {
            device,
            builtins,
            by_kernel: Mutex::default(),
            graphs: Mutex::default(),
            capture_stream: Mutex::default(),
            wake,
        };
        // Last: a backend that fails to open stops no thread.
        backend.device.issuer.start(backend.device.clone(), spin)?;
        Ok(backend)
    }

    fn driver(&self) -> &D {
        &self.device.driver
    }

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

    /// Binds the device for the driver calls to come; failing, the op fails.
    fn bind(&self) -> Result<(), EnqueueError> {
        self.driver().bind().map_err(EnqueueError::Failed)
    }

    /// A built-in launch over `items` elements; `params` name buffers with
    /// placeholder pointers, filled by `enqueue`.
    fn builtin(&self, entry: Entry, items: u64, params: &[Param]) -> Prepared<D> {
        let groups = items.div_ceil(u64::from(BLOCK)).clamp(1, MAX_GROUPS) as u32;
        let grid = Grid::new([groups, 1, 1], [BLOCK, 1, 1]);
        Prepared::Launch(PreparedLaunch::new(self.builtins.get(entry), grid, params))
    }

    fn custom_source(kernel: &CustomKernel) -> Option<&crate::DeviceKernel> {
        match D::KIND {
            BackendKind::Cuda => kernel.cuda.as_ref(),
            BackendKind::Hip => kernel.hip.as_ref(),
            _ => None,
        }
    }

    /// The loaded function of `kernel`: from the per-kernel cache, else
    /// compiled (or found by its source) and loaded; a source that does not
    /// compile is an invalid argument carrying the compiler's log.
    fn custom_function(&self, kernel: &Arc<CustomKernel>) -> Result<Function<D>> {
        // Keyed by the kernel's address, checked against a weak handle: a
        // kernel dropped and another made at the same address is not mistaken
        // for it. Saves hashing the source on every launch.
        let key = Arc::as_ptr(kernel) as usize;
        if let Some((known, function)) = lock(&self.by_kernel).get(&key) {
            // A live kernel's address is its own: same address and alive is the same kernel.
            if known.strong_count() > 0 && std::ptr::eq(known.as_ptr(), Arc::as_ptr(kernel)) {
                return Ok(function.clone());
            }
        }
        let source = Self::custom_source(kernel).ok_or_else(|| {
            Error::unsupported(D::KIND, format!("kernel {} has no {} source", kernel.name, D::KIND.name()))
        })?;
        // Module loads need the device current on this thread, which may be any.
        self.driver().bind()?;
        let function = self.device.kernels.function(self.driver(), source)?;
        let mut by_kernel = lock(&self.by_kernel);
        by_kernel.retain(|_, (known, _)| known.strong_count() > 0);
        by_kernel.insert(key, (Arc::downgrade(kernel), function.clone()));
        Ok(function)
    }

    /// A launch of a custom kernel, its arguments checked against its parameters.
    fn prepare_custom<R>(&self, kernel: &Arc<CustomKernel>, grid: &Grid, args: &[KernelArg<R>]) -> Result<Prepared<D>> {
        let function = self.custom_function(kernel)?;
        if let Some(sizes) = &function.param_sizes {
            Self::check_params(kernel, sizes, args)?;
        }
        let function = function.raw;
        let params: smallvec::SmallVec<[Param; 8]> = args
            .iter()
            .map(|arg| match arg {
                KernelArg::Buffer(..) => Param::Pointer(0),
                KernelArg::Scalar(scalar) => Param::Scalar(scalar),
            })
            .collect();
        Ok(Prepared::Launch(PreparedLaunch::new(function, *grid, &params)))
    }

    /// Refuses arguments that do not match the kernel's parameters, which
    /// the device would otherwise read as garbage: one parameter per
    /// argument, a pointer (8 bytes) for each buffer, each scalar its own
    /// width, a struct's bytes its size.
    pub(crate) fn check_params<R>(kernel: &CustomKernel, sizes: &[usize], args: &[KernelArg<R>]) -> Result<()> {
        let size = |arg: &KernelArg<R>| match arg {
            KernelArg::Buffer(..) => 8,
            KernelArg::Scalar(scalar) => scalar.size(),
        };
        if sizes.len() == args.len() && sizes.iter().zip(args).all(|(&declared, arg)| declared == size(arg)) {
            return Ok(());
        }
        let expected: Vec<usize> = args.iter().map(size).collect();
        let describe = |sizes: &[usize]| sizes.iter().map(|size| format!("{size}")).collect::<Vec<_>>().join(", ");
        Err(Error::invalid(format!(
            "kernel {} takes {} parameters of ({}) bytes, but its {} arguments need ({}) bytes: \
             each buffer is a pointer (8 bytes) and each scalar its own width, in the order given",
            kernel.name,
            sizes.len(),
            describe(sizes),
            args.len(),
            describe(&expected),
        )))
    }

    /// `data`, to be uploaded into `dst`, in page-locked memory.
    fn stage_upload<R>(&self, dst: &Span<R>, data: &[u8]) -> Result<Prepared<D>> {
        if data.len() as u64 != dst.len {
            return Err(Error::invalid("upload size differs from its destination"));
        }
        // Page-locked allocations need the device current on this thread, which may be any.
        self.driver().bind()?;
        let mut loan = self.device.stage(data.len())?;
        // SAFETY: a fresh loan of at least `data.len()` bytes; no copy uses it yet.
        unsafe { loan.bytes_mut(data.len()) }.copy_from_slice(data);
        Ok(Prepared::Upload(Staged::Loan(loan), dst.len))
    }

    /// The pointers of `launch` filled with the addresses of `buffers`, in
    /// order; a rejection if they do not match what it was prepared for.
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
    fn resolve(command: Command<&GpuMemory<D>>, prepared: Prepared<D>) -> Result<Issue<D>, EnqueueError> {
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

    /// Has `job` run in admission order (see [`issue::Issuer::submit`]);
    /// a stopped issuer fails the op.
    fn submit(&self, job: Job<D>) -> Result<(), EnqueueError> {
        self.device.issuer.submit(job, &self.device).map_err(EnqueueError::Failed)
    }

    /// Captures `commands` on the capture stream as one graph; `None` where
    /// the driver has no graphs or nothing was given.
    ///
    /// # Safety
    /// As for [`Backend::enqueue`], for every command; the graph keeps the
    /// addresses and arguments, so the recording may never change.
    unsafe fn capture(
        &self,
        commands: Vec<(Command<&GpuMemory<D>>, Prepared<D>)>,
    ) -> Result<Option<GraphExec>, EnqueueError> {
        if commands.is_empty() {
            return Ok(None);
        }
        self.bind()?;
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

    /// `result`, remembering a lost device it reports.
    fn noting_loss<T>(&self, result: Result<T>) -> Result<T> {
        if let Err(error) = &result {
            self.driver().loss().record(error);
        }
        result
    }
}

impl<D: Driver> PreparedLaunch<D> {
    fn new(function: D::Function, grid: Grid, params: &[Param<'_>]) -> Self {
        let pointers =
            params.iter().enumerate().filter(|(_, p)| matches!(p, Param::Pointer(_))).map(|(i, _)| i).collect();
        PreparedLaunch { launch: ReadyLaunch { function, grid, params: Params::new(params) }, pointers }
    }
}

impl<D: Driver> Backend for GpuBackend<D> {
    type Stream = GpuStream<D>;
    type Event = Arc<QueuedEvent<D>>;
    type Memory = GpuMemory<D>;
    type Prepared = Prepared<D>;
    type Timestamp = GpuTimestamp<D>;
    type Communicator = D::Communicator;

    fn kind(&self) -> BackendKind {
        D::KIND
    }

    fn info(&self) -> DeviceInfo {
        self.device.info.clone()
    }

    fn kernel_language(&self) -> KernelLanguage {
        D::LANGUAGE
    }

    const PEER_COPIES: bool = D::PEER_COPIES;

    fn allocate(&self, bytes: u64) -> Result<GpuMemory<D>> {
        self.noting_loss(self.driver().bind().and_then(|()| GpuMemory::new(&self.device, bytes)))
    }

    fn create_stream(&self, index: u32) -> Result<GpuStream<D>> {
        self.driver().bind()?;
        self.noting_loss(GpuStream::new(&self.device, index, self.wake))
    }

    fn prepare<R: PartialEq>(&self, command: &Command<R>) -> Result<Prepared<D>> {
        let words = |span: &Span<R>| span.len / 4;
        let pointer = Param::Pointer(0);
        Ok(match command {
            Command::Zero { .. } | Command::Copy { .. } => Prepared::Direct,
            Command::Fill { dst, word } => {
                self.builtin(Entry::Fill, words(dst), &[pointer, Param::U32(*word), Param::U64(words(dst))])
            }
            Command::Upload { dst, data } => self.stage_upload(dst, data)?,
            Command::Download { src, .. } => {
                let len = usize::try_from(src.len)
                    .map_err(|_| Error::invalid("a download larger than the host's address space"))?;
                self.driver().bind()?;
                Prepared::Download(self.device.stage(len)?)
            }
            Command::Binary { op, out, .. } => {
                let entry = match op {
                    BinaryOp::Add => Entry::Add,
                    BinaryOp::Mul => Entry::Mul,
                };
                self.builtin(entry, words(out), &[pointer, pointer, pointer, Param::U64(words(out))])
            }
            Command::Scale { out, alpha, .. } => {
                self.builtin(Entry::Scale, words(out), &[pointer, pointer, Param::F32(*alpha), Param::U64(words(out))])
            }
            Command::Axpy { y, alpha, .. } => {
                self.builtin(Entry::Axpy, words(y), &[pointer, pointer, Param::F32(*alpha), Param::U64(words(y))])
            }
            Command::Iota { out, start } => {
                self.builtin(Entry::Iota, words(out), &[pointer, Param::U32(*start), Param::U64(words(out))])
            }
            #[cfg(feature = "test-support")]
            Command::Delay { duration } => {
                let ticks = self.driver().delay_ticks(*duration);
                let grid = Grid::new([1, 1, 1], [1, 1, 1]);
                Prepared::Launch(PreparedLaunch::new(self.builtins.get(Entry::Delay), grid, &[Param::U64(ticks)]))
            }
            Command::Custom { kernel, grid, args } => self.prepare_custom(kernel, grid, args)?,
        })
    }

    fn prepare_upload<R: PartialEq>(&self, dst: Span<R>, bytes: &[u8]) -> Result<(Command<R>, Prepared<D>)> {
        // Straight from the caller's bytes into page-locked memory.
        let prepared = self.stage_upload(&dst, bytes)?;
        Ok((Command::Upload { dst, data: Vec::new() }, prepared))
    }

    fn prepare_host_upload<R: PartialEq>(&self, dst: Span<R>, host: &HostBuffer) -> Result<(Command<R>, Prepared<D>)> {
        // Memory another device locked is staged like any host bytes.
        if host.locked_by() != Some(Device::address(&self.device)) {
            return self.prepare_upload(dst, host);
        }
        if host.len() as u64 != dst.len {
            return Err(Error::invalid("upload size differs from its destination"));
        }
        let len = dst.len;
        Ok((Command::Upload { dst, data: Vec::new() }, Prepared::Upload(Staged::Host(host.clone()), len)))
    }

    fn staging_buffer(&self, len: usize) -> Result<HostBuffer> {
        if len == 0 {
            return Ok(HostBuffer::heap(Vec::new()));
        }
        // Page-locked allocations need the device current on this thread, which may be any.
        self.driver().bind()?;
        let loan = self.device.stage(len)?;
        // SAFETY: a fresh loan of at least `len` bytes, and no copy uses it.
        Ok(unsafe { LentToHost::host_buffer(loan, len, self.device.clone()) })
    }

    fn host_buffer(&self, bytes: &[u8]) -> Result<HostBuffer> {
        let mut host = self.staging_buffer(bytes.len())?;
        // A new buffer has one handle, so it is writable.
        if let Some(into) = host.get_mut() {
            into.copy_from_slice(bytes);
        }
        Ok(host)
    }

    unsafe fn enqueue(
        &self,
        stream: &GpuStream<D>,
        command: Command<&GpuMemory<D>>,
        prepared: Prepared<D>,
        io: OpIo,
    ) -> Result<(), EnqueueError> {
        // A lost device takes no more work, before any driver call.
        self.driver().loss().check().map_err(EnqueueError::Failed)?;
        let issue = Self::resolve(command, prepared)?;
        // The caller's contract keeps the memory alive and ordered until a
        // signal queued after this job completes.
        self.submit(Job::Op { stream: StreamRef::new(stream), issue, io })
    }

    fn record_event(&self, stream: &GpuStream<D>) -> Result<Arc<QueuedEvent<D>>> {
        self.driver().loss().check()?;
        let event = Arc::new(QueuedEvent::new(&self.device));
        self.device
            .issuer
            .submit(Job::Record { stream: StreamRef::new(stream), event: event.clone() }, &self.device)?;
        Ok(event)
    }

    fn wait_event(&self, stream: &GpuStream<D>, event: &Arc<QueuedEvent<D>>) -> Result<()> {
        self.driver().loss().check()?;
        // An event of another device (a peer's) is recorded by that device's
        // issuing thread: recorded before this wait is queued.
        if !Arc::ptr_eq(&event.device, &self.device) {
            event.device.issuer.flush();
        }
        self.device.issuer.submit(Job::Wait { stream: StreamRef::new(stream), event: event.clone() }, &self.device)
    }

    fn wait_for_stream(&self, stream: &GpuStream<D>, source: &GpuStream<D>) -> Result<()> {
        self.driver().loss().check()?;
        // One job, not a record and a wait: the source's own ordering event,
        // recorded and waited for in one go, with nothing for another thread to hold.
        self.device
            .issuer
            .submit(Job::Order { source: StreamRef::new(source), stream: StreamRef::new(stream) }, &self.device)
    }

    fn timestamp(&self, stream: &GpuStream<D>, completion: Arc<Completion>) -> Result<GpuTimestamp<D>> {
        self.driver().can_time()?;
        // Rare: made here, once every queued driver call has been made.
        self.device.issuer.flush();
        self.driver().bind()?;
        let event = GpuEvent::new(&self.device, EventUse::Timing)?;
        // SAFETY: both handles are alive and belong to this driver.
        self.noting_loss(unsafe { self.driver().event_record(event.raw, stream.raw) })?;
        // The stream's completion path, as a drain: a lost device, never an op's failure.
        self.noting_loss(stream.after(Box::new(move |status| completion.complete(status)), false))?;
        Ok(GpuTimestamp { event })
    }

    fn signal(&self, stream: &GpuStream<D>, completion: Arc<Completion>, kind: SignalKind) -> Result<()> {
        self.driver().loss().check()?;
        self.device.issuer.submit(Job::Signal { stream: StreamRef::new(stream), completion, kind }, &self.device)
    }

    fn lost(&self) -> Option<Error> {
        self.driver().loss().get().cloned()
    }

    fn is_settled(&self, stream: &GpuStream<D>) -> bool {
        self.driver().bind().is_ok() && stream.is_settled()
    }

    unsafe fn enqueue_replay(
        &self,
        stream: &GpuStream<D>,
        id: u64,
        commands: Vec<(Command<&GpuMemory<D>>, Prepared<D>)>,
        io: OpIo,
    ) -> Result<(), EnqueueError> {
        let cached = lock(&self.graphs).get(&id).copied();
        // Without graphs, or with host copies (through staging buffers lent
        // per copy, which a graph cannot hold): command by command.
        let uploads = commands.iter().any(|(command, _)| matches!(command, Command::Upload { .. }));
        if cached.is_none() && (!D::GRAPHS || uploads) {
            // SAFETY: this function's contract.
            return unsafe { crate::backend::enqueue_in_order(self, stream, commands, io) };
        }
        let exec = match cached {
            Some(exec) => exec,
            // SAFETY: this function's contract, for the capture's commands.
            None => match unsafe { self.capture(commands) }? {
                Some(exec) => {
                    lock(&self.graphs).insert(id, exec);
                    exec
                }
                None => return Err(EnqueueError::Rejected(Error::internal("a replay was prepared for no commands"))),
            },
        };
        // The launch is a job like a launch of one kernel: in admission
        // order, and only once the replay's inputs ran without failing.
        self.submit(Job::Op { stream: StreamRef::new(stream), issue: Issue::Graph(exec), io })
    }

    fn prepares_replay(&self, id: u64) -> bool {
        !lock(&self.graphs).contains_key(&id)
    }

    fn forget_replay(&self, id: u64) {
        let forgotten = lock(&self.graphs).remove(&id);
        if let Some(exec) = forgotten {
            // A launch of it may still be queued: it is made before the graph goes.
            self.device.issuer.flush();
            if self.driver().bind().is_ok() {
                // SAFETY: captured by this driver, removed from the cache so
                // destroyed once; launches in flight finish first.
                unsafe { self.driver().graph_destroy(exec) };
            }
        }
    }

    unsafe fn external(
        &self,
        stream: &GpuStream<D>,
        buffers: &[(&GpuMemory<D>, Access)],
        io: OpIo,
        run: &mut dyn FnMut(RawAccess<'_>) -> Result<()>,
    ) -> Result<()> {
        // The closure's work follows every op queued before it, whose driver
        // calls have then been made: a failure among them is known.
        self.device.issuer.flush();
        if let Some(error) = io.failed_input(stream.index) {
            return Err(error);
        }
        self.driver().bind()?;
        let raw: Vec<DeviceBuffer> =
            buffers.iter().map(|(memory, _)| DeviceBuffer { ptr: memory.ptr, len: memory.len }).collect();
        let access = match D::raw_stream(stream.raw) {
            #[cfg(feature = "cuda")]
            RawStream::Cuda(stream) => RawAccess::Cuda { stream, buffers: &raw },
            #[cfg(feature = "hip")]
            RawStream::Hip(stream) => RawAccess::Hip { stream, buffers: &raw },
            _ => {
                return Err(Error::unsupported(D::KIND, "external ops on a driver with no raw stream for foreign code"))
            }
        };
        let outcome = run(access);
        // Foreign code may have switched the thread's current device.
        self.driver().bind()?;
        outcome
    }

    fn counters(&self) -> BackendCounters {
        self.device.counters.snapshot()
    }

    fn communicator(members: &[&Self]) -> Result<D::Communicator> {
        let drivers: Vec<&D> = members.iter().map(|member| member.driver()).collect();
        let made = D::communicator(&drivers);
        if let Err(error) = &made {
            drivers.iter().for_each(|driver| driver.loss().record(error));
        }
        made
    }

    fn joined_communicator(
        member: &Self,
        id: &[u8; crate::backend::GROUP_ID_BYTES],
        ranks: usize,
        rank: usize,
    ) -> Result<D::Communicator> {
        let made = D::joined_communicator(member.driver(), id, ranks, rank);
        if let Err(error) = &made {
            member.driver().loss().record(error);
        }
        made
    }

    unsafe fn enqueue_collective(
        communicator: &D::Communicator,
        collective: &Collective,
        parts: Vec<CollectivePart<'_, Self>>,
    ) -> Result<(), EnqueueError> {
        // Made here, after every member's queued driver calls.
        parts.iter().for_each(|part| part.backend.device.issuer.flush());
        let whole = |memory: &GpuMemory<D>| DeviceBuffer { ptr: memory.ptr, len: memory.len };
        let raw: Vec<RawPart<'_, D>> = parts
            .iter()
            .map(|part| RawPart {
                driver: part.backend.driver(),
                stream: part.stream.raw,
                send: whole(part.send),
                receive: whole(part.receive.unwrap_or(part.send)),
            })
            .collect();
        // SAFETY: every memory is a live allocation of its member's driver,
        // kept alive and ordered by the caller (this function's contract).
        let enqueued = unsafe { D::enqueue_collective(communicator, collective, &raw) };
        if let Err(error) = &enqueued {
            raw.iter().for_each(|part| part.driver.loss().record(error));
        }
        enqueued.map_err(EnqueueError::Failed)
    }
}
