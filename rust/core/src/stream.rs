//! The public stream handle: where ops are admitted.

use std::sync::Arc;

#[cfg(feature = "test-support")]
use crate::backend::Gate;
use crate::backend::{Command, HostSink, RawAccess, Span, UploadFrom};
use crate::buffer::Buffer;
use crate::completion::spin::SpinPolicy;
use crate::completion::Completion;
use crate::element::{Element, ElementType};
use crate::error::{Error, Result};
use crate::fence::{Fence, PendingRead};
use crate::graph::Graph;
use crate::host::HostBuffer;
use crate::kernel::{Builtin, Grid, Kernel};
use crate::ops::{self, Arg, Recipe};
use crate::room::{RoomWait, WhenFull};
use crate::runtime::Runtime;
use crate::scheduler::{BufferKey, Engine, Init};
use crate::timestamp::Timestamp;

/// An ordered queue of device work. Any thread may submit to any stream;
/// clones name the same stream.
///
/// A stream keeps its runtime alive. When its last clone drops, the stream is
/// retired: its backend stream (a CPU worker lane, a `CUstream`) goes once the
/// work admitted on it is done; nothing waits for that on the dropping thread.
///
/// Admission waits while the runtime's queue is full (see
/// [`RuntimeBuilder::queue_limit`](crate::RuntimeBuilder::queue_limit)): a
/// handle from [`Stream::without_waiting`] fails with [`Error::QueueFull`]
/// instead, and [`Stream::room`] is a future that resolves once there is room.
#[derive(Clone)]
pub struct Stream {
    handle: Arc<StreamHandle>,
    /// What admission through this handle does when the queue is full.
    when_full: WhenFull,
}

struct StreamHandle {
    engine: Arc<dyn Engine>,
    index: usize,
    /// How long this handle's fence waits took lately: how long the next
    /// one watches its fence before it parks (see [`Fence`]).
    waits: SpinPolicy,
    /// Set on the stream a [`Stream::batch`] or [`Stream::record`] closure
    /// gets: its ops are collected here instead of admitted. It holds the
    /// real stream, which it does not retire.
    recording: Option<Recording>,
}

struct Recording {
    _stream: Stream,
    /// `None` once the batch or recording is over: a clone of the collecting
    /// stream kept past it refuses ops rather than drop them unseen.
    collected: std::sync::Mutex<Option<Collected>>,
}

/// The ops a batch or recording collected.
#[derive(Default)]
struct Collected {
    commands: Vec<Command<BufferKey>>,
    /// A recording's (not a batch's): how each command was made, for
    /// [`Graph::rebind`] to make it again over other buffers.
    recipes: Option<Vec<Recipe>>,
}

impl Drop for StreamHandle {
    fn drop(&mut self) {
        if self.recording.is_none() {
            self.engine.retire_stream(self.index);
        }
    }
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Stream({})", self.handle.index)
    }
}

impl Stream {
    pub(crate) fn new(engine: Arc<dyn Engine>, index: usize) -> Self {
        let waits = engine.fence_waits();
        Stream { handle: Arc::new(StreamHandle { engine, index, waits, recording: None }), when_full: WhenFull::Wait }
    }

    /// The ops `record` makes on the stream it is given, collected, not
    /// admitted; with their recipes if `recipes`.
    fn collect(&self, recipes: bool, record: impl FnOnce(&Stream) -> Result<()>) -> Result<Collected> {
        if self.handle.recording.is_some() {
            return Err(Error::invalid("batches and recordings do not nest"));
        }
        let collected = Collected { commands: Vec::new(), recipes: recipes.then(Vec::new) };
        let recording = Recording { _stream: self.clone(), collected: std::sync::Mutex::new(Some(collected)) };
        let recorder = Stream {
            handle: Arc::new(StreamHandle {
                engine: self.handle.engine.clone(),
                index: self.handle.index,
                waits: self.handle.waits.clone(),
                recording: Some(recording),
            }),
            when_full: self.when_full,
        };
        let recorded = record(&recorder);
        let collected = match &recorder.handle.recording {
            Some(recording) => crate::lock::lock(&recording.collected).take(),
            None => None,
        };
        recorded.map(|()| collected.unwrap_or_default())
    }

    /// Admits every op `record` makes on the stream it is given, in order,
    /// in one crossing of the ordering boundary: each op as if admitted
    /// alone (its own versions, its own failure), but no other op of any
    /// stream comes between them, and the lock is taken once. Everything is
    /// prepared before anything is admitted, so an op refused there (bad
    /// input, or a buffer `record` made and dropped) admits none; otherwise
    /// the first error comes back once all are admitted. The given stream
    /// collects: it may not create buffers, read, fence or wait.
    pub fn batch(&self, record: impl FnOnce(&Stream) -> Result<()>) -> Result<()> {
        let commands = self.collect(false, record)?.commands;
        if commands.is_empty() {
            return Ok(());
        }
        self.make_room()?;
        self.engine().submit_batch(self.handle.index, commands)
    }

    /// Records the ops `record` makes on the stream it is given, to replay
    /// as one op ([`Stream::replay`]) any number of times, on any stream of
    /// this runtime. The buffers named stay alive while the graph does.
    pub fn record(&self, record: impl FnOnce(&Stream) -> Result<()>) -> Result<Graph> {
        let Collected { commands, recipes } = self.collect(true, record)?;
        if commands.is_empty() {
            return Err(Error::invalid("nothing was recorded"));
        }
        Graph::new(self.engine().clone(), commands, recipes.unwrap_or_default())
    }

    /// Copies all of `src`, a buffer of another runtime of the same backend
    /// (another device of a [`DeviceGroup`](crate::DeviceGroup)), into `dst`,
    /// a buffer of this stream's runtime of the same size, as one op on this
    /// stream. The copy waits for `src`'s latest write on its device and for
    /// every user of `dst` here, and publishes a version of `dst`; on `src`'s
    /// device it counts as a read, so a later write of `src` there waits for
    /// the copy. CPU and CUDA; wgpu has no memory that two devices share
    /// (`Unsupported`: read the buffer, then write it on the other device).
    pub fn copy_from_peer(&self, src: &Buffer, dst: &Buffer) -> Result<()> {
        let (from, src_key) = src.owner();
        if Runtime::same_engine(from, self.engine()) {
            return self.copy(src, dst);
        }
        self.admitting()?;
        if src.is_view() {
            return Err(Error::invalid("a copy from a peer takes whole buffers, not views"));
        }
        if !src.element_type().agrees_with(dst.element_type()) {
            return Err(Error::invalid(format!(
                "a copy from a peer needs buffers of one element type, got {} and {}",
                src.element_type(),
                dst.element_type()
            )));
        }
        let dst = dst.whole_allocation_in(self.engine(), "a copy from a peer")?;
        self.make_room()?;
        self.engine().copy_from_peer(self.handle.index, &**from, src_key, dst)
    }

    /// Admits `graph` as one op on this stream: it waits for what any of its
    /// ops depends on, its ops run back to back, and it publishes one version
    /// of every buffer they write, so the ordering rules hold as for one op
    /// whose reads and writes are the union of theirs. A failure fails the
    /// whole replay: every buffer it writes gets the failed version.
    pub fn replay(&self, graph: &Graph) -> Result<()> {
        self.admitting()?;
        self.make_room()?;
        self.engine().replay(self.handle.index, graph.recording_in(self.engine())?)
    }

    /// An error on a stream that only collects ops (inside [`Stream::batch`]
    /// or [`Stream::record`]), for the calls that need the real stream.
    pub(crate) fn admitting(&self) -> Result<()> {
        match self.handle.recording {
            Some(_) => Err(Error::invalid("inside a batch or a recording, the stream only collects ops")),
            None => Ok(()),
        }
    }

    /// This stream, through a handle whose admissions never wait for room:
    /// while the runtime's queue is full (see
    /// [`RuntimeBuilder::queue_limit`](crate::RuntimeBuilder::queue_limit))
    /// they fail with [`Error::QueueFull`] and admit nothing. Await
    /// [`Stream::room`] and try again: that is how a task admits without
    /// blocking its thread.
    pub fn without_waiting(&self) -> Stream {
        Stream { handle: self.handle.clone(), when_full: WhenFull::Refuse }
    }

    /// Resolves once the runtime's queue has room for more work (at once
    /// while it has), or with [`Error::Closed`] once the runtime closed.
    /// Another producer may take the room first: a handle from
    /// [`Stream::without_waiting`] then says so again.
    pub fn room(&self) -> RoomWait {
        self.engine().room()
    }

    /// Returns once the queue has room, or fails with [`Error::QueueFull`]
    /// on a [`Stream::without_waiting`] handle.
    pub(crate) fn make_room(&self) -> Result<()> {
        self.engine().make_room(self.when_full)
    }

    /// The stream's index in its runtime (0 is the default stream).
    pub fn index(&self) -> usize {
        self.handle.index
    }

    pub(crate) fn engine(&self) -> &Arc<dyn Engine> {
        &self.handle.engine
    }

    fn create(&self, element: ElementType, count: u64, init: Init<'_>) -> Result<Buffer> {
        self.admitting()?;
        let bytes = count
            .checked_mul(element.size_bytes())
            .ok_or_else(|| Error::invalid(format!("{count} {} are more bytes than a u64 counts", element.unit())))?;
        if !matches!(init, Init::Empty) {
            self.make_room()?;
        }
        let key = self.engine().create(self.handle.index, bytes, init)?;
        Ok(Buffer::new(self.engine().clone(), key, element, bytes))
    }

    /// A buffer of `count` elements of `element` with unspecified contents,
    /// no definition yet.
    pub fn empty(&self, element: ElementType, count: u64) -> Result<Buffer> {
        self.create(element, count, Init::Empty)
    }

    /// A buffer of `count` zeroed elements of `element`: allocated, zeroed on
    /// the device and published in one admission; no host buffer and no
    /// host-to-device copy.
    pub fn zeros(&self, element: ElementType, count: u64) -> Result<Buffer> {
        self.create(element, count, Init::Zero)
    }

    /// A buffer of `T` holding `data`.
    pub fn upload<T: Element>(&self, data: &[T]) -> Result<Buffer> {
        self.upload_as(T::TYPE, bytemuck::cast_slice(data))
    }

    /// A buffer of `element`s holding `bytes` (the bindings' upload): a whole
    /// number of elements, little-endian as devices store them.
    pub fn upload_as(&self, element: ElementType, bytes: &[u8]) -> Result<Buffer> {
        let count = ops::whole_elements(element, bytes.len())?;
        self.create(element, count, Init::Data(bytes))
    }

    /// Admits `command`, or collects it inside a batch or recording (a
    /// recording with the `recipe` it was made by).
    fn submit(&self, command: Command<BufferKey>, recipe: impl FnOnce() -> Recipe) -> Result<()> {
        match &self.handle.recording {
            Some(recording) => match &mut *crate::lock::lock(&recording.collected) {
                Some(collected) => {
                    collected.commands.push(command);
                    if let Some(recipes) = &mut collected.recipes {
                        recipes.push(recipe());
                    }
                    Ok(())
                }
                None => Err(Error::invalid("this stream collected ops for a batch or recording that is over")),
            },
            None => {
                self.make_room()?;
                self.engine().submit(self.handle.index, command)
            }
        }
    }

    /// Enqueues `kernel` over `args`. Returns once admitted, not once done.
    pub fn execute(&self, kernel: &Kernel, grid: Grid, args: &[Arg<'_>]) -> Result<()> {
        self.submit(ops::kernel(self.engine(), kernel, grid, args)?, || Recipe::kernel(kernel, grid, args))
    }

    /// Enqueues `kernel`, then waits for this stream to finish it.
    pub async fn execute_async(&self, kernel: &Kernel, grid: Grid, args: &[Arg<'_>]) -> Result<()> {
        self.execute(kernel, grid, args)?;
        self.fence()?.await
    }

    fn builtin(&self, op: Builtin, args: &[Arg<'_>]) -> Result<()> {
        self.submit(ops::builtin(self.engine(), op, args)?, || Recipe::builtin(op, args))
    }

    /// Zeroes every byte of `buffer` on the device.
    pub fn memset_zero(&self, buffer: &Buffer) -> Result<()> {
        self.builtin(Builtin::MemsetZero, &[Arg::write(buffer)])
    }

    /// Fills `buffer` with `value`.
    pub fn fill_u32(&self, buffer: &Buffer, value: u32) -> Result<()> {
        self.builtin(Builtin::FillU32, &[Arg::write(buffer), Arg::u32(value)])
    }

    /// Fills `buffer` with `value`.
    pub fn fill_i32(&self, buffer: &Buffer, value: i32) -> Result<()> {
        self.builtin(Builtin::FillI32, &[Arg::write(buffer), Arg::i32(value)])
    }

    /// Fills `buffer` with `value`.
    pub fn fill_f32(&self, buffer: &Buffer, value: f32) -> Result<()> {
        self.builtin(Builtin::FillF32, &[Arg::write(buffer), Arg::f32(value)])
    }

    /// Copies `src` into `dst` (equal sizes).
    pub fn copy(&self, src: &Buffer, dst: &Buffer) -> Result<()> {
        self.builtin(Builtin::Copy, &[Arg::read(src), Arg::write(dst)])
    }

    /// out = a + b (f32).
    pub fn add(&self, a: &Buffer, b: &Buffer, out: &Buffer) -> Result<()> {
        self.builtin(Builtin::Add, &[Arg::read(a), Arg::read(b), Arg::write(out)])
    }

    /// out = a · b (f32).
    pub fn mul(&self, a: &Buffer, b: &Buffer, out: &Buffer) -> Result<()> {
        self.builtin(Builtin::Mul, &[Arg::read(a), Arg::read(b), Arg::write(out)])
    }

    /// out = alpha · x (f32).
    pub fn scale(&self, x: &Buffer, alpha: f32, out: &Buffer) -> Result<()> {
        self.builtin(Builtin::Scale, &[Arg::read(x), Arg::write(out), Arg::f32(alpha)])
    }

    /// y = alpha · x + y (f32).
    pub fn axpy(&self, alpha: f32, x: &Buffer, y: &Buffer) -> Result<()> {
        self.builtin(Builtin::Axpy, &[Arg::read(x), Arg::read_write(y), Arg::f32(alpha)])
    }

    /// `out[i] = start + i` (u32).
    pub fn iota(&self, out: &Buffer, start: u32) -> Result<()> {
        self.builtin(Builtin::Iota, &[Arg::write(out), Arg::u32(start)])
    }

    /// Holds the stream for `duration` (tests and benchmarks).
    #[cfg(feature = "test-support")]
    pub fn delay(&self, duration: std::time::Duration) -> Result<()> {
        let micros = u32::try_from(duration.as_micros()).unwrap_or(u32::MAX);
        self.builtin(Builtin::Delay, &[Arg::u32(micros)])
    }

    /// Enqueues a copy of `data` into `buffer` at element `offset`. `T` is
    /// the buffer's element type, or anything for a raw-bytes buffer.
    pub fn write<T: Element>(&self, buffer: &Buffer, offset: u64, data: &[T]) -> Result<()> {
        self.write_as(buffer, offset, Some(T::TYPE), bytemuck::cast_slice(data))
    }

    /// Enqueues a copy of `bytes`, a whole number of the buffer's elements,
    /// into `buffer` at element `offset`: raw bytes, into a buffer of any
    /// type (the bindings check their typed arrays with
    /// [`Buffer::expect_element`] first).
    pub fn write_bytes(&self, buffer: &Buffer, offset: u64, bytes: &[u8]) -> Result<()> {
        self.write_as(buffer, offset, None, bytes)
    }

    /// Enqueues a copy of `bytes`, data of `element` (`None`: raw bytes),
    /// into `buffer` at element `offset`.
    fn write_as(&self, buffer: &Buffer, offset: u64, element: Option<ElementType>, bytes: &[u8]) -> Result<()> {
        let dst = ops::write_target(self.engine(), buffer, offset, element, bytes.len())?;
        match &self.handle.recording {
            // A recording keeps its bytes for every replay.
            Some(_) => self.submit(Command::Upload { dst, data: bytes.to_vec() }, || Recipe::Write {
                buffer: buffer.clone(),
                offset,
                element,
            }),
            None => {
                self.make_room()?;
                self.engine().submit_upload(self.handle.index, dst, UploadFrom::Bytes(bytes))
            }
        }
    }

    /// Enqueues a copy of all of `host`, a whole number of the buffer's
    /// elements, into `buffer` at element `offset`. Where `host` is
    /// page-locked by this runtime the device copies from it directly, and
    /// the upload holds a clone of it until the copy is done (so
    /// [`HostBuffer::get_mut`] gives `None` until then); otherwise its bytes
    /// are copied as [`Stream::write`] copies a slice.
    pub fn write_host(&self, buffer: &Buffer, offset: u64, host: &HostBuffer) -> Result<()> {
        let dst = ops::write_target(self.engine(), buffer, offset, None, host.len())?;
        match &self.handle.recording {
            Some(_) => self.submit(Command::Upload { dst, data: host.to_vec() }, || Recipe::Write {
                buffer: buffer.clone(),
                offset,
                element: None,
            }),
            None => {
                self.make_room()?;
                self.engine().submit_upload(self.handle.index, dst, UploadFrom::Host(host))
            }
        }
    }

    /// Host memory of `len` bytes to fill (through [`HostBuffer::get_mut`])
    /// and then upload with [`Stream::write_host`]: page-locked on CUDA and
    /// HIP, where it comes from the runtime's pool and holds whatever bytes
    /// it held before (an earlier copy's), so fill all of it; zeros elsewhere.
    /// For data that is not in memory yet: [`crate::Runtime::host_buffer`]
    /// copies data that is.
    pub fn staging_buffer(&self, len: usize) -> Result<HostBuffer> {
        self.engine().staging_buffer(len)
    }

    /// Writes `data` into `buffer` at element `offset`, then waits for this stream to finish it.
    pub async fn write_async<T: Element>(&self, buffer: &Buffer, offset: u64, data: &[T]) -> Result<()> {
        self.write(buffer, offset, data)?;
        self.fence()?.await
    }

    /// Admits a read of the bytes of `len` elements of `buffer` from element
    /// `offset`; await or wait the result.
    pub fn enqueue_read_at(&self, buffer: &Buffer, offset: u64, len: u64) -> Result<PendingRead> {
        // A read inside a batch could only be waited for after it, and a
        // replay has nobody to hand bytes to: read after either.
        self.admitting()?;
        let src = buffer.span_in(self.engine(), offset, len)?;
        if len == 0 {
            return Err(Error::invalid("nothing to read"));
        }
        self.make_room()?;
        let sink = HostSink::new(Completion::new(1, self.engine().live().clone()));
        self.engine().submit(self.handle.index, Command::Download { src, sink: sink.clone() })?;
        Ok(PendingRead::new(sink, self.engine().clone(), self.handle.index))
    }

    /// Admits a read of the whole of `buffer`.
    pub fn enqueue_read(&self, buffer: &Buffer) -> Result<PendingRead> {
        self.enqueue_read_at(buffer, 0, buffer.len())
    }

    /// Reads `buffer` without blocking a thread.
    pub async fn read_async(&self, buffer: &Buffer) -> Result<Vec<u8>> {
        self.enqueue_read(buffer)?.await
    }

    /// Reads `buffer`, blocking until its latest write (on any stream) is done.
    pub fn read(&self, buffer: &Buffer) -> Result<Vec<u8>> {
        self.enqueue_read(buffer)?.wait()
    }

    /// Reads `buffer` as elements of `T`: its element type, or anything that
    /// its bytes hold a whole number of for a raw-bytes buffer.
    pub fn read_as<T: Element>(&self, buffer: &Buffer) -> Result<Vec<T>> {
        buffer.expect_element(T::TYPE, "a read")?;
        ops::whole_elements(T::TYPE, usize::try_from(buffer.size_bytes()).unwrap_or(usize::MAX))?;
        let bytes = self.read(buffer)?;
        Ok(bytemuck::pod_collect_to_vec(&bytes))
    }

    /// A fence on all work admitted on this stream so far. With nothing
    /// admitted since the last fence, it is that fence: pending, or, once it
    /// succeeded, complete when made, with no device call (a lost device
    /// still fails it).
    pub fn fence(&self) -> Result<Fence> {
        self.admitting()?;
        let completion = self.engine().fence(Some(self.handle.index))?;
        Ok(Fence::new(completion, self.engine().clone(), Some(self.handle.index)).watched(&self.handle.waits))
    }

    /// True when all work admitted on this stream so far is done and no
    /// failure waits to be reported, so [`Stream::sync`] would return `Ok` at
    /// once. Never blocks and reports nothing: a failure stays for the next
    /// fence. `false` whenever in doubt (work in flight, a failure to report,
    /// a closed runtime), and always on HIP (CUDA asks the stream). For bindings, which can
    /// then skip the machinery of an async call.
    pub fn is_synced(&self) -> bool {
        self.admitting().is_ok() && self.engine().is_synced(self.handle.index)
    }

    /// Waits, without blocking a thread, for all work admitted on this stream so far.
    pub async fn sync(&self) -> Result<()> {
        self.fence()?.await
    }

    /// True while this handle's recent fence waits were short enough that a
    /// wait watches its fence before it parks (see [`Fence`]). For bindings,
    /// which then check for a quick end before they suspend.
    pub fn waits_are_short(&self) -> bool {
        self.handle.waits.is_quick()
    }

    /// Admits a write by foreign code: [`Stream::external`] with every
    /// buffer declared [`Access::Write`](crate::Access::Write).
    pub fn external_write(&self, buffers: &[&Buffer], write: impl FnMut(RawAccess<'_>) -> Result<()>) -> Result<()> {
        let accesses: Vec<(&Buffer, crate::Access)> =
            buffers.iter().map(|&buffer| (buffer, crate::Access::Write)).collect();
        self.external(&accesses, write)
    }

    /// Admits an op of foreign code (a library call: a cuBLAS GEMM, a cuFFT
    /// plan, hand-written driver calls) that touches `buffers` as declared.
    /// Inside the ordering boundary the op takes its waits and its position,
    /// and the buffers are published as read or written there; then `run`
    /// runs, outside the runtime-wide lock, with the backend's raw stream and
    /// the buffers' memory in the order given, to enqueue its work on that
    /// stream. Failures follow the data as for any op: if a version it reads
    /// failed, `run` does not run and what it writes fails with it; if `run`
    /// fails, so does what it writes, and the stream's next fence reports
    /// it. While `run` runs, calls that need this stream wait for it; made
    /// from inside `run` they fail with [`Error::InvalidArgument`] instead of
    /// waiting for themselves.
    pub fn external(
        &self,
        buffers: &[(&Buffer, crate::Access)],
        mut run: impl FnMut(RawAccess<'_>) -> Result<()>,
    ) -> Result<()> {
        self.admitting()?;
        let mut spans = Vec::with_capacity(buffers.len());
        for &(buffer, access) in buffers {
            let key = buffer.whole_allocation_in(self.engine(), "a foreign op")?;
            spans.push((Span { buffer: key, offset: 0, len: buffer.size_bytes() }, access));
        }
        ops::reject_overlap(&spans)?;
        let accesses: Vec<(BufferKey, crate::Access)> =
            spans.iter().map(|(span, access)| (span.buffer, *access)).collect();
        // It takes room as any op does (a GEMM is one): it bypassed the queue limit.
        self.make_room()?;
        self.engine().external(self.handle.index, &accesses, &mut run)
    }

    /// Admits an op that writes `buffer` and fails with `message`, as a failed
    /// kernel would (test support: a failure every backend can show).
    #[cfg(feature = "test-support")]
    pub fn fail_write(&self, buffer: &Buffer, message: &str) -> Result<()> {
        self.admitting()?;
        self.engine().fail_write(self.handle.index, buffer.key_in(self.engine())?, message)
    }

    /// Holds the stream at this point until the returned [`Hold`] is released
    /// or dropped. Test support; the CPU and wgpu backends have it.
    #[cfg(feature = "test-support")]
    pub fn hold(&self) -> Result<Hold> {
        self.admitting()?;
        Ok(Hold(self.engine().hold(self.handle.index)?))
    }
}

/// Names one stream for as long as the name lives, without keeping the
/// stream alive: a weak handle holds the allocation, so no other stream
/// gets its address meanwhile (a stream's index is reused once it retires).
/// The default stream never retires, and every `default_stream()` call makes
/// a handle of its own: it is named by its index (`None`), or two handles of
/// it were two streams.
pub(crate) struct StreamIdentity(Option<std::sync::Weak<StreamHandle>>);

impl StreamIdentity {
    fn of(handle: &Arc<StreamHandle>) -> StreamIdentity {
        StreamIdentity((handle.index != 0).then(|| Arc::downgrade(handle)))
    }

    /// True when both name the same stream (of one runtime: the caller checks that).
    pub(crate) fn is(&self, other: &StreamIdentity) -> bool {
        match (&self.0, &other.0) {
            (None, None) => true,
            (Some(one), Some(other)) => std::sync::Weak::ptr_eq(one, other),
            _ => false,
        }
    }
}

impl Stream {
    /// Enqueues a timestamp: the device's clock once everything admitted on
    /// this stream so far is done. [`Timestamp::elapsed_since`] of two
    /// timestamps of this stream is the device time between them: time an
    /// op, or a range of ops, by a timestamp before and one after.
    ///
    /// On wgpu every stream of the device shares one queue, so a range also
    /// covers work of other streams submitted within it; wgpu needs the
    /// adapter's `TIMESTAMP_QUERY` feature ([`Error::Unsupported`], naming
    /// it, where absent). Inside a batch or a recording: refused.
    pub fn timestamp(&self) -> Result<Timestamp> {
        self.admitting()?;
        let (completion, device, position) = self.engine().timestamp(self.handle.index)?;
        let identity = StreamIdentity::of(&self.handle);
        Ok(Timestamp::new(completion, device, self.engine().clone(), identity, self.handle.index, position))
    }
}

/// A gate in a stream: work admitted after it waits until it is released.
#[cfg(feature = "test-support")]
#[derive(Debug)]
pub struct Hold(Arc<Gate>);

#[cfg(feature = "test-support")]
impl Hold {
    /// Lets the stream go on.
    pub fn release(self) {}
}

#[cfg(feature = "test-support")]
impl Drop for Hold {
    fn drop(&mut self) {
        self.0.open();
    }
}
