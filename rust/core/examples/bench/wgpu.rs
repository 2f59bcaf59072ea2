//! wgpu backend figures, each beside raw wgpu driven by hand on the same
//! adapter, in the same run:
//! - fence round trip: one 4-byte `clear_buffer` submitted, then the future
//!   resolved (raw: `on_submitted_work_done` woken from a background poll
//!   thread that blocks in `poll(Wait)` only while a callback is pending),
//!   with the CPU time per fence of both, and the floor: the same clear seen
//!   done by polling without blocking on the submitting thread;
//! - zero fill of 1 GiB: `memset_zero` vs raw `clear_buffer`, in GB/s;
//! - fill kernel over 1 GiB: `fill_u32` vs a raw WGSL fill dispatch, in GB/s.
//!
//! - launches: 10 000 tiny dispatches, each with its own scalar, admitted
//!   then fenced, in µs per launch (raw: one command buffer per dispatch, a
//!   bind group made once, the scalars in a dynamic-offset uniform ring,
//!   submitted 32 at a time; and beside raw recording 32 dispatches into
//!   one compute pass of one command buffer, as Weir records a batch);
//! - tiny dispatch round trip: one tiny dispatch, then its fence resolved;
//! - admission with many live buffers: µs per admitted op with 10, 1 000 and
//!   100 000 buffers alive, beside raw recording and submitting the same op
//!   with as many raw buffers alive;
//! - queued ops: host memory held per op queued behind a held stream
//!   (resident set before and after; raw: as many finished command buffers
//!   of the same dispatch held unsubmitted, what one command buffer costs).
//!
//! Runs alternate Weir and raw, so both see the same device state (the
//! live-buffer figures alternate per phase: each side's ops alone).
//!
//! One figure has no raw side: the admission time of tiny ops on one stream
//! while another thread makes first-use compiles of new WGSL kernels, beside
//! the same loop with no compiles (compiles run in `prepare`, outside the
//! runtime's ordering boundary, so they must not show in it).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Waker};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use futures::executor::block_on;
use weir_core::backend::wgpu::wgpu;
use weir_core::{Arg, BackendKind, Buffer, ElementType, Grid, Kernel, Runtime, Stream};

use crate::report::{cpu_time, median, micros, CpuSpent, Figure, Report};

const GIB: u64 = 1 << 30;

/// A one-shot future completed from a wgpu callback.
#[derive(Default)]
struct Signal {
    state: Mutex<(bool, Option<Waker>)>,
}

impl Signal {
    fn fire(&self) {
        let waker = {
            let mut state = self.state.lock().unwrap();
            state.0 = true;
            state.1.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

struct Wait(Arc<Signal>);

impl Future for Wait {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut state = self.0.state.lock().unwrap();
        if state.0 {
            Poll::Ready(())
        } else {
            state.1 = Some(cx.waker().clone());
            Poll::Pending
        }
    }
}

/// Raw wgpu with the usual background poll thread.
struct Raw {
    device: wgpu::Device,
    queue: wgpu::Queue,
    pending: Arc<(Mutex<(usize, bool)>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl Raw {
    /// The adapter Weir chose (on its default backends), opened again by hand.
    fn open(weir_name: &str) -> Raw {
        let backends = wgpu::Backends::PRIMARY;
        let mut descriptor = wgpu::InstanceDescriptor::new_without_display_handle();
        descriptor.backends = backends;
        let instance = wgpu::Instance::new(descriptor);
        let adapter = block_on(instance.enumerate_adapters(backends))
            .into_iter()
            .find(|a| weir_name.starts_with(&format!("{} (", a.get_info().name)))
            .expect("Weir's adapter");
        let limits = adapter.limits();
        let (device, queue) = block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("raw"),
            required_limits: limits,
            ..Default::default()
        }))
        .expect("raw device");
        let pending = Arc::new((Mutex::new((0usize, false)), Condvar::new()));
        let (poll_device, poll_pending) = (device.clone(), pending.clone());
        let thread = std::thread::spawn(move || loop {
            {
                let (lock, changed) = &*poll_pending;
                let mut state = lock.lock().unwrap();
                while state.0 == 0 && !state.1 {
                    state = changed.wait(state).unwrap();
                }
                if state.0 == 0 {
                    return;
                }
            }
            let _ = poll_device.poll(wgpu::PollType::wait_indefinitely());
        });
        Raw { device, queue, pending, thread: Some(thread) }
    }

    /// Submits `commands` and polls the device on this thread, without
    /// blocking, until they are done: the soonest any waiter can see it.
    fn submit_and_spin(&self, commands: wgpu::CommandBuffer) {
        let done = Arc::new(AtomicBool::new(false));
        self.queue.submit(Some(commands));
        let fired = done.clone();
        self.queue.on_submitted_work_done(move || fired.store(true, Ordering::Release));
        while !done.load(Ordering::Acquire) {
            let _ = self.device.poll(wgpu::PollType::Poll);
        }
    }

    /// Submits `commands` at once and resolves once they are done, like a fence.
    fn submit_and_wait(&self, commands: impl IntoIterator<Item = wgpu::CommandBuffer>) {
        let signal = Arc::new(Signal::default());
        self.queue.submit(commands);
        let (fired, pending) = (signal.clone(), self.pending.clone());
        {
            let mut state = self.pending.0.lock().unwrap();
            state.0 += 1;
        }
        self.pending.1.notify_one();
        self.queue.on_submitted_work_done(move || {
            fired.fire();
            pending.0.lock().unwrap().0 -= 1;
        });
        block_on(Wait(signal));
    }

    fn buffer(&self, size: u64) -> wgpu::Buffer {
        self.device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        })
    }

    fn encoder(&self) -> wgpu::CommandEncoder {
        self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor::default())
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        self.pending.0.lock().unwrap().1 = true;
        self.pending.1.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

const RAW_FILL: &str = "
struct Params { n: u32, value: u32 }
@group(0) @binding(0) var<storage, read_write> dst: array<u32>;
@group(0) @binding(1) var<uniform> p: Params;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = id.x + id.y * groups.x * 256u;
    if (i < p.n) { dst[i] = p.value; }
}
";

/// A raw fill dispatch over a buffer, in windows no larger than the binding limit.
struct RawFill {
    pipeline: wgpu::ComputePipeline,
    groups: Vec<(wgpu::BindGroup, [u32; 2])>,
}

impl RawFill {
    fn new(raw: &Raw, buffer: &wgpu::Buffer, value: u32) -> RawFill {
        let module = raw.device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: None,
            source: wgpu::ShaderSource::Wgsl(RAW_FILL.into()),
        });
        let pipeline = raw.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: None,
            layout: None,
            module: &module,
            entry_point: Some("main"),
            compilation_options: Default::default(),
            cache: None,
        });
        let limits = raw.device.limits();
        let align = u64::from(limits.min_storage_buffer_offset_alignment);
        let window = limits.max_storage_buffer_binding_size / align * align;
        let max = u64::from(limits.max_compute_workgroups_per_dimension);
        let mut groups = Vec::new();
        let mut start = 0;
        while start < buffer.size() {
            let size = window.min(buffer.size() - start);
            let words = size / 4;
            let params = raw.device.create_buffer(&wgpu::BufferDescriptor {
                label: None,
                size: 16,
                usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            let bytes: Vec<u8> = [words as u32, value, 0, 0].iter().flat_map(|w| w.to_le_bytes()).collect();
            raw.queue.write_buffer(&params, 0, &bytes);
            let bind = raw.device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: None,
                layout: &pipeline.get_bind_group_layout(0),
                entries: &[
                    wgpu::BindGroupEntry {
                        binding: 0,
                        resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                            buffer,
                            offset: start,
                            size: wgpu::BufferSize::new(size),
                        }),
                    },
                    wgpu::BindGroupEntry { binding: 1, resource: params.as_entire_binding() },
                ],
            });
            let total = words.div_ceil(256);
            let x = total.min(max);
            groups.push((bind, [x as u32, total.div_ceil(x) as u32]));
            start += size;
        }
        RawFill { pipeline, groups }
    }

    fn record(&self, raw: &Raw) -> wgpu::CommandBuffer {
        let mut encoder = raw.encoder();
        for (bind, [x, y]) in &self.groups {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
            pass.set_pipeline(&self.pipeline);
            pass.set_bind_group(0, bind, &[]);
            pass.dispatch_workgroups(*x, *y, 1);
        }
        encoder.finish()
    }
}

fn timed(f: impl FnOnce()) -> Duration {
    let start = Instant::now();
    f();
    start.elapsed()
}

fn sync(stream: &Stream) {
    block_on(stream.fence().expect("fence").wait_async()).expect("fence");
}

fn fence_round_trip(report: &mut Report, runtime: &Runtime, raw: &Raw, rounds: usize) {
    let stream = runtime.default_stream();
    let tiny = stream.zeros(ElementType::Bytes, 4).expect("zeros");
    let raw_tiny = raw.buffer(4);
    let (mut weir, mut baseline, mut floor) = (Vec::new(), Vec::new(), Vec::new());
    let (mut weir_cpu, mut raw_cpu) = (Duration::ZERO, Duration::ZERO);
    let clear = || {
        let mut encoder = raw.encoder();
        encoder.clear_buffer(&raw_tiny, 0, None);
        encoder.finish()
    };
    for round in 0..rounds + rounds / 10 {
        let cpu = cpu_time();
        let w = timed(|| {
            stream.memset_zero(&tiny).expect("memset");
            sync(&stream);
        });
        let between = cpu_time();
        let b = timed(|| raw.submit_and_wait(Some(clear())));
        let after = cpu_time();
        let f = timed(|| raw.submit_and_spin(clear()));
        if round >= rounds / 10 {
            weir.push(w);
            baseline.push(b);
            floor.push(f);
            weir_cpu += between - cpu;
            raw_cpu += after - between;
        }
    }
    let per = |cpu: Duration| micros(cpu) / rounds as f64;
    report.add(Figure::beside(
        "wgpu",
        "fence round trip (4-byte clear, then future resolved)",
        "us",
        micros(median(&mut weir)),
        micros(median(&mut baseline)),
        false,
        &format!(
            "median; raw = submit + on_submitted_work_done + background poll thread blocking in poll(Wait); \
             CPU per fence, all threads: weir {:.1} us, raw {:.1} us",
            per(weir_cpu),
            per(raw_cpu)
        ),
    ));
    report.add(Figure {
        backend: "wgpu".into(),
        name: "4-byte clear seen done, same-thread poll spin".into(),
        unit: "us".into(),
        weir: micros(median(&mut floor)),
        baseline: None,
        higher_is_better: false,
        note: "raw only, median: the floor under every fence figure".into(),
        baseline_is_raw: true,
    });
    // Weir needs no submission for a fence on an idle stream; raw still submits.
    let (mut weir, mut baseline) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        weir.push(timed(|| sync(&stream)));
        baseline.push(timed(|| raw.submit_and_wait(None)));
    }
    report.add(
        Figure::beside(
            "wgpu",
            "fence on an idle stream (raw: empty submit)",
            "us",
            micros(median(&mut weir)),
            micros(median(&mut baseline)),
            false,
            "median; Weir resolves it without a submission or wake-up",
        )
        // Not the same work: Weir skips what raw does.
        .against_itself(),
    );
}

fn gbps(bytes: u64, time: Duration) -> f64 {
    bytes as f64 / time.as_secs_f64() / 1e9
}

/// A bandwidth figure: the best round of each side (what the device sustains,
/// as the CUDA figures report it), with both medians in the note, since one
/// 1 GiB op is short enough for host noise to move a median by several percent.
///
/// Each round moved `bytes` `per_round` times.
fn bandwidth(bytes: u64, per_round: usize, name: &str, weir: &mut [Duration], raw: &mut [Duration]) -> Figure {
    let bytes = bytes * per_round as u64;
    let (weir_median, raw_median) = (gbps(bytes, median(weir)), gbps(bytes, median(raw)));
    let best = |samples: &[Duration]| samples.iter().min().copied().unwrap_or_default();
    Figure::beside(
        "wgpu",
        name,
        "GB/s",
        gbps(bytes, best(weir)),
        gbps(bytes, best(raw)),
        true,
        &format!(
            "best of {} rounds ({per_round} per round), submit to fence resolved; medians {weir_median:.0} vs {raw_median:.0} GB/s ({:.3})",
            weir.len(),
            weir_median / raw_median
        ),
    )
}

/// Fills per timed round: enough that a round's closing fence (a wake-up of
/// some 250 us on a GPU, against about 1 ms per 1 GiB fill) weighs little
/// beside the fills, as in the CUDA memset figure.
const FILLS_PER_ROUND: usize = 8;

fn fills(report: &mut Report, runtime: &Runtime, raw: &Raw, bytes: u64, rounds: usize, per_round: usize) {
    let stream = runtime.default_stream();
    let buffer: Buffer = stream.empty(ElementType::Bytes, bytes).expect("allocate");
    let raw_buffer = raw.buffer(bytes);
    let raw_fill = RawFill::new(raw, &raw_buffer, 7);
    // Warm up: first touch of the memory, pipeline compiles.
    stream.memset_zero(&buffer).expect("memset");
    stream.fill_u32(&buffer, 7).expect("fill");
    sync(&stream);
    raw.submit_and_wait(Some(raw_fill.record(raw)));
    let (mut zero_w, mut zero_b, mut fill_w, mut fill_b) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        zero_w.push(timed(|| {
            for _ in 0..per_round {
                stream.memset_zero(&buffer).expect("memset");
            }
            sync(&stream);
        }));
        zero_b.push(timed(|| {
            let clears = (0..per_round).map(|_| {
                let mut encoder = raw.encoder();
                encoder.clear_buffer(&raw_buffer, 0, None);
                encoder.finish()
            });
            raw.submit_and_wait(clears);
        }));
        fill_w.push(timed(|| {
            for _ in 0..per_round {
                stream.fill_u32(&buffer, round as u32).expect("fill");
            }
            sync(&stream);
        }));
        fill_b.push(timed(|| raw.submit_and_wait((0..per_round).map(|_| raw_fill.record(raw)))));
    }
    let check = stream.enqueue_read_at(&buffer, bytes - 4, 4).expect("read").wait().expect("read");
    assert_eq!(check, ((rounds - 1) as u32).to_le_bytes(), "the fill kernel did not write the last word");
    let size = format!("{} MiB", bytes >> 20);
    report.add(bandwidth(
        bytes,
        per_round,
        &format!("zero fill {size} (memset_zero vs clear_buffer)"),
        &mut zero_w,
        &mut zero_b,
    ));
    report.add(bandwidth(
        bytes,
        per_round,
        &format!("fill kernel {size} (fill_u32 vs raw dispatch)"),
        &mut fill_w,
        &mut fill_b,
    ));
}

const TINY: &str = "
@group(0) @binding(0) var<storage, read_write> x: array<u32>;
@compute @workgroup_size(1)
fn main() { x[0] = x[0] + 1u; }
";

/// The launch bench's kernel: adds its scalar to a counter.
const ADD_SCALAR: &str = "
struct Params { k: u32 }
@group(0) @binding(0) var<storage, read_write> x: array<u32>;
@group(0) @binding(1) var<uniform> p: Params;
@compute @workgroup_size(1)
fn main() { x[0] = x[0] + p.k; }
";

/// Runs of the launch figure per side (its best counts).
const LAUNCH_ROUNDS: u32 = 7;

/// Ops per raw submission, as Weir batches them.
const RAW_BATCH: usize = 32;

/// Raw dispatches of [`ADD_SCALAR`] over one buffer: the bind group made
/// once, each launch's scalar at its slot of a uniform ring bound with a
/// dynamic offset, one command buffer per launch, submitted in batches.
struct RawLaunches {
    pipeline: wgpu::ComputePipeline,
    bind: wgpu::BindGroup,
    ring: wgpu::Buffer,
    stride: u64,
    batch: Vec<wgpu::CommandBuffer>,
    scalars: Vec<u8>,
}

impl RawLaunches {
    fn new(raw: &Raw, target: &wgpu::Buffer) -> RawLaunches {
        let device = &raw.device;
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: None,
            source: wgpu::ShaderSource::Wgsl(ADD_SCALAR.into()),
        });
        let entry = |binding, ty, has_dynamic_offset| wgpu::BindGroupLayoutEntry {
            binding,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer { ty, has_dynamic_offset, min_binding_size: None },
            count: None,
        };
        let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: None,
            entries: &[
                entry(0, wgpu::BufferBindingType::Storage { read_only: false }, false),
                entry(1, wgpu::BufferBindingType::Uniform, true),
            ],
        });
        let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: None,
            bind_group_layouts: &[Some(&layout)],
            immediate_size: 0,
        });
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: None,
            layout: Some(&pipeline_layout),
            module: &module,
            entry_point: Some("main"),
            compilation_options: Default::default(),
            cache: None,
        });
        let stride = u64::from(device.limits().min_uniform_buffer_offset_alignment).max(16);
        let ring = device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size: stride * RAW_BATCH as u64,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let bind = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &layout,
            entries: &[
                wgpu::BindGroupEntry { binding: 0, resource: target.as_entire_binding() },
                wgpu::BindGroupEntry {
                    binding: 1,
                    resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                        buffer: &ring,
                        offset: 0,
                        size: wgpu::BufferSize::new(16),
                    }),
                },
            ],
        });
        RawLaunches { pipeline, bind, ring, stride, batch: Vec::new(), scalars: vec![0; (stride as usize) * RAW_BATCH] }
    }

    /// Records one launch in ring slot `slot`, as its own command buffer.
    fn record(&self, raw: &Raw, slot: usize) -> wgpu::CommandBuffer {
        let mut encoder = raw.encoder();
        {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
            pass.set_pipeline(&self.pipeline);
            pass.set_bind_group(0, &self.bind, &[(slot as u64 * self.stride) as u32]);
            pass.dispatch_workgroups(1, 1, 1);
        }
        encoder.finish()
    }

    /// Records one launch adding `k`; submits when a batch is full.
    fn launch(&mut self, raw: &Raw, k: u32) {
        let slot = self.batch.len();
        let at = slot * self.stride as usize;
        self.scalars[at..at + 4].copy_from_slice(&k.to_le_bytes());
        let commands = self.record(raw, slot);
        self.batch.push(commands);
        if self.batch.len() == RAW_BATCH {
            self.submit(raw);
        }
    }

    /// Submits the launches recorded so far (the ring's writes land first).
    fn submit(&mut self, raw: &Raw) {
        if !self.batch.is_empty() {
            raw.queue.write_buffer(&self.ring, 0, &self.scalars[..self.batch.len() * self.stride as usize]);
            raw.queue.submit(std::mem::take(&mut self.batch));
        }
    }

    /// Submits what is recorded and waits for it, in one submission (as
    /// Weir's fence submits its batch).
    fn finish(&mut self, raw: &Raw) {
        if !self.batch.is_empty() {
            raw.queue.write_buffer(&self.ring, 0, &self.scalars[..self.batch.len() * self.stride as usize]);
        }
        raw.submit_and_wait(std::mem::take(&mut self.batch));
    }
}

/// The same launches recorded the way Weir records a batch: each adds its
/// scalar to the ring, and every 32 are recorded into one command buffer,
/// as dispatches of one compute pass, and submitted.
struct RawPassLaunches {
    launches: RawLaunches,
    pending: usize,
}

impl RawPassLaunches {
    fn new(raw: &Raw, target: &wgpu::Buffer) -> RawPassLaunches {
        RawPassLaunches { launches: RawLaunches::new(raw, target), pending: 0 }
    }

    fn launch(&mut self, raw: &Raw, k: u32) {
        let at = self.pending * self.launches.stride as usize;
        self.launches.scalars[at..at + 4].copy_from_slice(&k.to_le_bytes());
        self.pending += 1;
        if self.pending == RAW_BATCH {
            let commands = self.record(raw);
            raw.queue.submit(commands);
        }
    }

    /// The pending launches as one command buffer, their scalars written.
    fn record(&mut self, raw: &Raw) -> Option<wgpu::CommandBuffer> {
        if self.pending == 0 {
            return None;
        }
        let l = &self.launches;
        let mut encoder = raw.encoder();
        {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
            pass.set_pipeline(&l.pipeline);
            for slot in 0..self.pending {
                pass.set_bind_group(0, &l.bind, &[(slot as u64 * l.stride) as u32]);
                pass.dispatch_workgroups(1, 1, 1);
            }
        }
        raw.queue.write_buffer(&l.ring, 0, &l.scalars[..self.pending * l.stride as usize]);
        self.pending = 0;
        Some(encoder.finish())
    }

    /// Submits what is pending (nothing more where nothing is: the wait is
    /// for the last submission, as Weir's batch fence is) and waits for it.
    fn finish(&mut self, raw: &Raw) {
        let commands = self.record(raw);
        raw.submit_and_wait(commands);
    }
}

fn read_u32(raw: &Raw, buffer: &wgpu::Buffer) -> u32 {
    let staging = raw.device.create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: 4,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let mut encoder = raw.encoder();
    encoder.copy_buffer_to_buffer(buffer, 0, &staging, 0, 4);
    raw.submit_and_wait(Some(encoder.finish()));
    let (sent, received) = std::sync::mpsc::channel();
    staging.slice(..).map_async(wgpu::MapMode::Read, move |outcome| sent.send(outcome).unwrap());
    raw.device.poll(wgpu::PollType::wait_indefinitely()).expect("poll");
    received.recv().unwrap().expect("map");
    let view = staging.slice(..).get_mapped_range().expect("mapped");
    u32::from_le_bytes([view[0], view[1], view[2], view[3]])
}

/// 10 000 launches of a tiny kernel with a scalar each, admitted then
/// fenced, beside the raw loop; then one tiny dispatch → fence resolved.
fn launches(report: &mut Report, runtime: &Runtime, raw: &Raw, launches: u32, rounds: usize) {
    let stream = runtime.new_stream().expect("stream");
    let counter = stream.zeros(ElementType::Bytes, 4).expect("zeros");
    let raw_counter = raw.buffer(4);
    let mut raw_launches = RawLaunches::new(raw, &raw_counter);
    let pass_counter = raw.buffer(4);
    let mut pass_launches = RawPassLaunches::new(raw, &pass_counter);
    let kernel = Kernel::custom("add_scalar").wgsl(ADD_SCALAR, "main").build();
    let launch = |k: u32| stream.execute(&kernel, Grid::linear(1, 1), &[Arg::read_write(&counter), Arg::u32(k)]);
    // Warm up: compiles, first submissions.
    for k in 0..64 {
        launch(k).expect("launch");
        raw_launches.launch(raw, k);
        pass_launches.launch(raw, k);
    }
    sync(&stream);
    raw_launches.finish(raw);
    pass_launches.finish(raw);
    let (mut weir, mut baseline, mut in_passes) = (Vec::new(), Vec::new(), Vec::new());
    // CPU time per side, summed over the runs.
    let mut cpu = [CpuSpent::default(); 2];
    let mut expected = (0..64).sum::<u32>();
    for _ in 0..LAUNCH_ROUNDS {
        let (took, spent) = CpuSpent::measure(|| {
            timed(|| {
                for k in 0..launches {
                    launch(k).expect("launch");
                }
                sync(&stream);
            })
        });
        weir.push(took);
        cpu[0] += spent;
        baseline.push(timed(|| {
            for k in 0..launches {
                raw_launches.launch(raw, k);
            }
            raw_launches.finish(raw);
        }));
        let (took, spent) = CpuSpent::measure(|| {
            timed(|| {
                for k in 0..launches {
                    pass_launches.launch(raw, k);
                }
                pass_launches.finish(raw);
            })
        });
        in_passes.push(took);
        cpu[1] += spent;
        expected = expected.wrapping_add((0..launches).fold(0u32, u32::wrapping_add));
    }
    let cpu_per_launch = |time: Duration| micros(time) / f64::from(LAUNCH_ROUNDS * launches);
    assert_eq!(stream.read_as::<u32>(&counter).expect("read"), vec![expected], "Weir's launches");
    assert_eq!(read_u32(raw, &raw_counter), expected, "raw launches");
    assert_eq!(read_u32(raw, &pass_counter), expected, "raw launches in passes");
    let per_launch = |d: Duration| micros(d) / f64::from(launches);
    let best = |runs: &[Duration]| runs.iter().copied().min().unwrap_or_default();
    let weir = per_launch(best(&weir));
    report.add(Figure::beside(
        "wgpu",
        &format!("{launches} tiny launches, us/launch"),
        "us",
        weir,
        per_launch(best(&baseline)),
        false,
        "best of 7, the sides taken in turn (a shared host's noise only adds time), admission to fence \
         resolved; raw = a command buffer per dispatch, one bind group, scalars in a dynamic-offset uniform \
         ring, 32 per submit",
    ));
    report.add(Figure::beside(
        "wgpu",
        &format!("{launches} tiny launches, us/launch (raw in passes)"),
        "us",
        weir,
        per_launch(best(&in_passes)),
        false,
        &format!(
            "the same Weir run; raw = 32 dispatches per command buffer in one compute pass, as Weir records a batch; \
             CPU per launch, calling thread: weir {:.2} us, raw {:.2} us; all threads: weir {:.2} us, raw {:.2} us",
            cpu_per_launch(cpu[0].thread),
            cpu_per_launch(cpu[1].thread),
            cpu_per_launch(cpu[0].all),
            cpu_per_launch(cpu[1].all)
        ),
    ));
    let (mut weir, mut baseline) = (Vec::new(), Vec::new());
    for round in 0..rounds + rounds / 10 {
        let w = timed(|| {
            launch(1).expect("launch");
            sync(&stream);
        });
        let b = timed(|| {
            raw_launches.launch(raw, 1);
            raw_launches.finish(raw);
        });
        if round >= rounds / 10 {
            weir.push(w);
            baseline.push(b);
        }
    }
    report.add(Figure::beside(
        "wgpu",
        "tiny dispatch, then its fence resolved",
        "us",
        micros(median(&mut weir)),
        micros(median(&mut baseline)),
        false,
        "median; raw = the launch loop's dispatch + submit + on_submitted_work_done",
    ));
}

/// Admission time per op with `live` buffers alive, beside raw recording and
/// submitting the same dispatch with as many raw buffers alive.
fn admission_with_live_buffers(report: &mut Report, runtime: &Runtime, raw: &Raw, counts: &[usize], ops: usize) {
    let stream = runtime.new_stream().expect("stream");
    let counter = stream.zeros(ElementType::Bytes, 4).expect("zeros");
    let raw_counter = raw.buffer(4);
    let mut raw_launches = RawLaunches::new(raw, &raw_counter);
    let mut pass_launches = RawPassLaunches::new(raw, &raw_counter);
    let kernel = Kernel::custom("add_scalar").wgsl(ADD_SCALAR, "main").build();
    let (mut alive, mut raw_alive) = (Vec::new(), Vec::new());
    for &live in counts {
        while alive.len() < live {
            alive.push(stream.empty(ElementType::Bytes, 4).expect("allocate"));
            raw_alive.push(raw.buffer(4));
        }
        let (mut weir, mut baseline, mut in_passes) = (Vec::new(), Vec::new(), Vec::new());
        // Each side alone, one after another with the same buffers alive: the
        // raw loops' submissions, and wgpu-core's clean-up of them, would
        // otherwise land inside the other side's timed ops.
        for op in 0..ops {
            weir.push(timed(|| {
                stream.execute(&kernel, Grid::linear(1, 1), &[Arg::read_write(&counter), Arg::u32(1)]).expect("op")
            }));
            if op % RAW_BATCH == RAW_BATCH - 1 {
                sync(&stream);
            }
        }
        sync(&stream);
        for op in 0..ops {
            baseline.push(timed(|| raw_launches.launch(raw, 1)));
            if op % RAW_BATCH == RAW_BATCH - 1 {
                raw_launches.finish(raw);
            }
        }
        raw_launches.finish(raw);
        for op in 0..ops {
            in_passes.push(timed(|| pass_launches.launch(raw, 1)));
            if op % RAW_BATCH == RAW_BATCH - 1 {
                pass_launches.finish(raw);
            }
        }
        pass_launches.finish(raw);
        let mean = |samples: &[Duration]| micros(samples.iter().sum::<Duration>()) / samples.len() as f64;
        report.add(Figure::beside(
            "wgpu",
            &format!("admission with {live} live buffers, us/op"),
            "us",
            mean(&weir),
            mean(&baseline),
            false,
            &format!("mean over {ops} ops, fenced every {RAW_BATCH} (untimed); raw = record + submit per 32"),
        ));
        report.add(Figure::beside(
            "wgpu",
            &format!("admission with {live} live buffers, us/op (raw in passes)"),
            "us",
            mean(&weir),
            mean(&in_passes),
            false,
            "the same Weir ops; raw = 32 dispatches per command buffer in one compute pass, as Weir records a batch",
        ));
    }
}

/// Host memory per op queued behind a held stream: resident set size before
/// and after queueing `ops` tiny ops, reported per op.
fn queued_op_memory(report: &mut Report, runtime: &Runtime, raw: &Raw, ops: usize) {
    let Some(before) = resident_bytes() else {
        eprintln!("wgpu: queued-op memory skipped (no /proc/self/statm)");
        return;
    };
    let stream = runtime.new_stream().expect("stream");
    let counter = stream.zeros(ElementType::Bytes, 4).expect("zeros");
    let kernel = Kernel::custom("add_scalar").wgsl(ADD_SCALAR, "main").build();
    stream.execute(&kernel, Grid::linear(1, 1), &[Arg::read_write(&counter), Arg::u32(1)]).expect("op");
    sync(&stream);
    let before = resident_bytes().unwrap_or(before);
    let hold = stream.hold().expect("hold");
    for _ in 0..ops {
        stream.execute(&kernel, Grid::linear(1, 1), &[Arg::read_write(&counter), Arg::u32(1)]).expect("op");
    }
    let held = resident_bytes().unwrap_or(before);
    let counted = runtime.diagnostics().backend.queued_bytes;
    hold.release();
    sync(&stream);
    assert_eq!(stream.read_as::<u32>(&counter).expect("read"), vec![ops as u32 + 1]);
    let per_op = held.saturating_sub(before) as f64 / ops as f64;
    // Raw: as many finished command buffers of the same dispatch, held
    // unsubmitted. Its pipeline and ring are made, and one dispatch recorded,
    // before the count starts, as Weir's warm-up op made its pipeline.
    let raw_counter = raw.buffer(4);
    let raw_launches = RawLaunches::new(raw, &raw_counter);
    drop(raw_launches.record(raw, 0));
    let raw_before = resident_bytes().unwrap_or(0);
    let recorded: Vec<wgpu::CommandBuffer> = (0..ops).map(|_| raw_launches.record(raw, 0)).collect();
    let raw_held = resident_bytes().unwrap_or(raw_before);
    drop(recorded);
    let raw_per_op = raw_held.saturating_sub(raw_before) as f64 / ops as f64;
    report.add(Figure::beside(
        "wgpu",
        &format!("host memory per op queued ({ops} behind a hold)"),
        "bytes",
        per_op,
        raw_per_op,
        false,
        &format!(
            "resident set {} -> {} MB, the backend counts {} bytes per op queued; raw = {ops} finished command \
             buffers of one dispatch held unsubmitted ({} -> {} MB)",
            before >> 20,
            held >> 20,
            counted / ops as u64,
            raw_before >> 20,
            raw_held >> 20
        ),
    ));
}

/// This process's resident set size (Linux).
fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

/// A kernel no cache has seen: `seed` makes the source new, and a few
/// hundred dependent steps give the driver's compiler real work, as real
/// kernels do.
fn fresh_kernel(seed: usize) -> Kernel {
    let steps: String = (0..400)
        .map(|step| {
            let (a, b) = (1_664_525u32.wrapping_mul(step + 1), 1_013_904_223u32 ^ step);
            format!(
                "    v = v * {a}u + {b}u; if ((v & 7u) == {}u) {{ v = v ^ (v >> {}u); }}\n",
                step % 8,
                step % 31 + 1
            )
        })
        .collect();
    let source = format!(
        "
@group(0) @binding(0) var<storage, read_write> x: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {{
    var v = id.x + {seed}u;
{steps}    x[id.x % arrayLength(&x)] = v;
}}
"
    );
    Kernel::custom(format!("fresh_{seed}")).wgsl(source, "main").build()
}

/// Times `ops` admissions of the tiny kernel on `stream`, waiting (untimed)
/// for the stream every 32 ops so the queue stays short.
fn admissions(stream: &Stream, kernel: &Kernel, buffer: &Buffer, keep_going: impl Fn(usize) -> bool) -> Vec<Duration> {
    let mut samples = Vec::new();
    while keep_going(samples.len()) {
        samples
            .push(timed(|| stream.execute(kernel, Grid::linear(1, 1), &[Arg::read_write(buffer)]).expect("tiny op")));
        if samples.len() % 32 == 0 {
            sync(stream);
        }
    }
    sync(stream);
    samples
}

fn percentile(samples: &mut [Duration], per_cent: usize) -> Duration {
    samples.sort();
    samples.get((samples.len() * per_cent / 100).min(samples.len().saturating_sub(1))).copied().unwrap_or_default()
}

fn admission_under_compiles(report: &mut Report, runtime: &Runtime, compiles: usize) {
    let stream = runtime.new_stream().expect("stream");
    let buffer = stream.zeros(ElementType::Bytes, 4).expect("zeros");
    let tiny = Kernel::custom("tiny").wgsl(TINY, "main").build();
    // Warm up: the tiny kernel's own compile is not what is measured.
    let _ = admissions(&stream, &tiny, &buffer, |done| done < 256);
    let compiling = AtomicBool::new(true);
    let mut compile_times = Vec::new();
    let mut busy = std::thread::scope(|scope| {
        let compiler = scope.spawn(|| {
            let other = runtime.new_stream().expect("stream");
            let target = other.zeros(ElementType::Bytes, 256).expect("zeros");
            let times: Vec<Duration> = (0..compiles)
                .map(|seed| {
                    timed(|| {
                        other
                            .execute(&fresh_kernel(seed), Grid::linear(64, 64), &[Arg::read_write(&target)])
                            .expect("compile")
                    })
                })
                .collect();
            compiling.store(false, Ordering::Release);
            sync(&other);
            times
        });
        let samples = admissions(&stream, &tiny, &buffer, |_| compiling.load(Ordering::Acquire));
        compile_times = compiler.join().expect("compile thread");
        samples
    });
    let mut alone = admissions(&stream, &tiny, &buffer, |done| done < busy.len());
    let compile = median(&mut compile_times);
    let over_a_ms = |samples: &[Duration]| samples.iter().filter(|&&d| d > Duration::from_millis(1)).count();
    let note = format!(
        "{} admissions beside {compiles} first-use compiles (median {:.1} ms each) vs as many alone; over 1 ms: {} vs {}",
        busy.len(),
        compile.as_secs_f64() * 1e3,
        over_a_ms(&busy),
        over_a_ms(&alone)
    );
    let (busy_p99, alone_p99) = (percentile(&mut busy, 99), percentile(&mut alone, 99));
    let (busy_max, alone_max) = (percentile(&mut busy, 100), percentile(&mut alone, 100));
    report.add(
        Figure::beside(
            "wgpu",
            "tiny op admission p99 during compiles (vs none)",
            "us",
            micros(busy_p99),
            micros(alone_p99),
            false,
            &note,
        )
        .against_itself(),
    );
    report.add(
        Figure::beside(
            "wgpu",
            "tiny op admission max during compiles (vs none)",
            "us",
            micros(busy_max),
            micros(alone_max),
            false,
            &note,
        )
        .against_itself(),
    );
}

/// A trivial fill and read in a second runtime while this runtime's queue
/// runs about a second of work: on the shared device (it waits behind that
/// work) and with a device of its own (`RuntimeBuilder::own_device`), as far
/// as the hardware runs two queues at once. Milliseconds, own against shared.
fn beside_long_work(report: &mut Report, runtime: &Runtime) {
    let s = runtime.default_stream();
    let big = s.zeros(ElementType::U32, 64 << 20).unwrap();
    let mut fills = 4u32;
    let took = loop {
        let start = Instant::now();
        for value in 0..fills {
            s.fill_u32(&big, value).unwrap();
        }
        s.fence().unwrap().wait().unwrap();
        let took = start.elapsed();
        if took >= Duration::from_millis(200) || fills >= 1 << 20 {
            break took;
        }
        fills *= 4;
    };
    let fills = (f64::from(fills) / took.as_secs_f64()) as u32;
    let beside = |other: &Runtime| -> (Duration, Duration) {
        let t = other.default_stream();
        let small = t.zeros(ElementType::U32, 16).unwrap();
        t.fill_u32(&small, 1).unwrap();
        t.read_as::<u32>(&small).unwrap();
        let start = Instant::now();
        for value in 0..fills {
            s.fill_u32(&big, value).unwrap();
        }
        let long = s.fence().unwrap();
        t.fill_u32(&small, 7).unwrap();
        assert_eq!(t.read_as::<u32>(&small).unwrap(), vec![7; 16]);
        let small_done = start.elapsed();
        long.wait().unwrap();
        (small_done, start.elapsed())
    };
    let shared = Runtime::open(BackendKind::Wgpu).unwrap();
    let own = Runtime::builder(BackendKind::Wgpu).own_device(true).open().unwrap();
    let (shared_small, shared_long) = beside(&shared);
    let (own_small, own_long) = beside(&own);
    report.add(Figure::beside(
        "wgpu",
        "fill + read beside 1 s of another runtime's work",
        "ms",
        micros(own_small) / 1e3,
        micros(shared_small) / 1e3,
        false,
        &format!(
            "weir: the second runtime with a device of its own; baseline: on the shared device. The other runtime's {fills} fills of 256 MiB took {:.0} ms and {:.0} ms",
            micros(shared_long) / 1e3,
            micros(own_long) / 1e3
        ),
    )
    .against_itself());
    own.close().unwrap();
    shared.close().unwrap();
}

/// Runs the parts `part` accepts (see `main`).
pub fn run(report: &mut Report, part: &dyn Fn(&str) -> bool) {
    let runtime = match Runtime::open(BackendKind::Wgpu) {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("wgpu: skipped ({error})");
            return;
        }
    };
    let info = runtime.info();
    eprintln!("wgpu adapter: {}", info.name);
    let raw = Raw::open(&info.name);
    // Software adapters are slow: fewer rounds, same sizes.
    let software = info.name.contains("software");
    let bytes = std::env::var("WEIR_BENCH_FILL_BYTES").ok().and_then(|v| v.parse().ok()).unwrap_or(GIB);
    let bytes = bytes.min(info.max_buffer_bytes);
    if part("fence") {
        fence_round_trip(report, &runtime, &raw, if software { 500 } else { 2000 });
    }
    if part("queued") {
        queued_op_memory(report, &runtime, &raw, 5_000);
    }
    if part("launches") {
        launches(report, &runtime, &raw, 10_000, if software { 500 } else { 2000 });
    }
    if part("fills") {
        fills(report, &runtime, &raw, bytes, if software { 9 } else { 40 }, if software { 1 } else { FILLS_PER_ROUND });
    }
    if part("compiles") {
        admission_under_compiles(report, &runtime, if software { 20 } else { 50 });
    }
    if part("own-device") {
        beside_long_work(report, &runtime);
    }
    // Last: wgpu-core sizes every command buffer's trackers to the most
    // buffers the device ever had alive, so what runs after this is slower.
    if part("live") {
        let counts = [10, 1_000, 100_000];
        admission_with_live_buffers(report, &runtime, &raw, &counts, if software { 2_000 } else { 20_000 });
    }
    drop(raw);
    runtime.close().expect("close");
}
