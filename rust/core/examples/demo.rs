//! `cargo xtask demo`: Weir's main job, on the CPU backend unless
//! `--backend NAME` says otherwise.
//!
//! A chunked pipeline over three streams: host data is uploaded on one, a
//! kernel transforms each chunk on another, and the results are read back on
//! a third, with `--in-flight K` chunks' device buffers reused in a ring. No
//! wait is placed by hand: reusing a slot is a write after the previous
//! chunk's read of it, so the scheduler orders the upload of chunk i + K
//! after the compute of chunk i, and that compute's output after the read of
//! chunk i - K, and nothing more: where a stage's fence already showed that
//! earlier use finished, it inserts no wait at all (at most one per chunk at
//! each of the two stage boundaries). The demo prints each chunk's timeline and
//! the throughput beside each stage alone and beside the same work on one
//! stream.
//!
//! The host side keeps its chunks in [`HostBuffer`]s, page-locked on CUDA
//! and HIP: uploads copy straight from them and reads hand back the memory
//! the device copied into, so no stage makes a host copy and each runs at the
//! speed of its copy engine.
//!
//! Options: `--chunks N` (default 64), `--chunk-mib M` (default 1; 16 on a
//! GPU), `--in-flight K` (default 8).

use std::time::{Duration, Instant};

use std::sync::mpsc::{channel, Receiver};

use weir_core::{
    Arg, BackendKind, Buffer, ElementType, Fence, Grid, HostBuffer, Kernel, PendingRead, Runtime, ScalarArg, Stream,
    Timeline, TimelineBar, TimelineWait,
};

/// Cores the CPU backend needs for the pipeline's targets to measure Weir:
/// one per stage, and one for the host thread that admits and reads.
const CPU_CORES_FOR_TARGETS: usize = 4;

/// `y = x`, then `y = y / 2 + 1/2` `iters` times: work that scales with `iters`.
fn transform_kernel() -> Kernel {
    const CUDA: &str = r#"extern "C" __global__ void transform(const float* x, float* y, unsigned n, unsigned iters) {
        for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
            float v = x[i];
            for (unsigned k = 0; k < iters; ++k) v = v * 0.5f + 0.5f;
            y[i] = v;
        }
    }"#;
    const WGSL: &str = r#"
        @group(0) @binding(0) var<storage, read> x: array<f32>;
        @group(0) @binding(1) var<storage, read_write> y: array<f32>;
        struct Params { n: u32, iters: u32 }
        @group(0) @binding(2) var<uniform> params: Params;
        @compute @workgroup_size(256)
        fn main(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
            for (var i = id.x; i < params.n; i += groups.x * 256u) {
                var v = x[i];
                for (var k = 0u; k < params.iters; k += 1u) { v = v * 0.5 + 0.5; }
                y[i] = v;
            }
        }"#;
    Kernel::custom("transform")
        .cpu(|args| {
            let ScalarArg::U32(iters) = args.scalar(1)? else { return Err("transform takes (x, y, n, iters)".into()) };
            let x = args.f32s(0)?.to_vec();
            for (out, &v) in args.f32s_mut(1)?.iter_mut().zip(&x) {
                *out = (0..iters).fold(v, |v, _| v * 0.5 + 0.5);
            }
            Ok(())
        })
        .cuda(CUDA, "transform")
        .hip(CUDA, "transform")
        .wgsl(WGSL, "main")
        .build()
}

fn expected(v: f32, iters: u32) -> f32 {
    (0..iters).fold(v, |v, _| v * 0.5 + 0.5)
}

struct Options {
    backend: BackendKind,
    chunks: usize,
    chunk_floats: usize,
    in_flight: usize,
}

fn options() -> Result<Options, String> {
    let args: Vec<String> = std::env::args().collect();
    let value = |name: &str| args.windows(2).find(|w| w[0] == name).map(|w| w[1].clone());
    let number = |name: &str, default: usize| -> Result<usize, String> {
        value(name).map_or(Ok(default), |v| v.parse().map_err(|_| format!("{name} takes a number, not {v:?}")))
    };
    let backend = match value("--backend") {
        Some(name) => BackendKind::from_name(&name).ok_or_else(|| format!("no backend named {name:?}"))?,
        None => BackendKind::Cpu,
    };
    let gpu = !matches!(backend, BackendKind::Cpu);
    let mib = number("--chunk-mib", if gpu { 16 } else { 1 })?;
    Ok(Options {
        backend,
        chunks: number("--chunks", 64)?.max(1),
        chunk_floats: (mib.max(1) << 20) / 4,
        in_flight: number("--in-flight", 8)?.max(1),
    })
}

/// The device buffers of one in-flight chunk.
struct Slot {
    input: Buffer,
    output: Buffer,
}

/// Where each stage of one chunk ended, from the start of its run.
#[derive(Clone, Copy, Default)]
struct Ends {
    upload: Duration,
    compute: Duration,
    download: Duration,
}

struct Pipeline<'a> {
    runtime: &'a Runtime,
    kernel: Kernel,
    /// Each chunk's input, and the value all its floats hold.
    host: Vec<(HostBuffer, f32)>,
    chunk_floats: usize,
    slots: Vec<Slot>,
    iters: u32,
}

impl Pipeline<'_> {
    fn grid(&self) -> Grid {
        let n = self.chunk_floats as u32;
        Grid::new([n.div_ceil(256).min(4096), 1, 1], [256, 1, 1])
    }

    fn compute(&self, stream: &Stream, slot: &Slot) -> weir_core::Result<()> {
        let n = self.chunk_floats as u32;
        stream.execute(
            &self.kernel,
            self.grid(),
            &[Arg::read(&slot.input), Arg::write(&slot.output), Arg::u32(n), Arg::u32(self.iters)],
        )
    }

    /// The ring slot of chunk `i`.
    fn slot(&self, i: usize) -> &Slot {
        &self.slots[i % self.slots.len()]
    }

    fn bytes(&self) -> f64 {
        (self.host.len() * self.chunk_floats * 4) as f64
    }

    /// Runs every chunk on the streams given (the same stream three times for
    /// the one-stream run). One thread per stage waits for that stage's
    /// fences in order, so each end is taken as it happens.
    fn run(&self, upload: &Stream, compute: &Stream, download: &Stream) -> weir_core::Result<(Duration, Vec<Ends>)> {
        self.runtime.fence()?.wait()?;
        let start = Instant::now();
        let (uploads, computes, downloads) = (channel::<Fence>(), channel::<Fence>(), channel::<PendingRead>());
        let ends_of = |fences: Receiver<Fence>| {
            move || {
                fences.into_iter().map(|fence| fence.wait().map(|()| start.elapsed())).collect::<Result<Vec<_>, _>>()
            }
        };
        let (uploaded, computed, read) = std::thread::scope(|scope| -> weir_core::Result<_> {
            let uploaded = scope.spawn(ends_of(uploads.1));
            let computed = scope.spawn(ends_of(computes.1));
            let read = scope.spawn(move || {
                downloads
                    .1
                    .into_iter()
                    .map(|read| read.wait_host().map(|bytes| (start.elapsed(), bytes)))
                    .collect::<Result<Vec<_>, _>>()
            });
            // At most one chunk per slot in flight on the host side too: the
            // next upload into a slot is admitted once that slot's previous
            // chunk was read back, so page-locked memory stays bounded.
            let mut read_back: std::collections::VecDeque<Fence> = Default::default();
            for (i, (data, _)) in self.host.iter().enumerate() {
                if read_back.len() == self.slots.len() {
                    if let Some(fence) = read_back.pop_front() {
                        fence.wait()?;
                    }
                }
                let slot = self.slot(i);
                upload.write_host(&slot.input, 0, data)?;
                let _ = uploads.0.send(upload.fence()?);
                self.compute(compute, slot)?;
                let _ = computes.0.send(compute.fence()?);
                let _ = downloads.0.send(download.enqueue_read(&slot.output)?);
                read_back.push_back(download.fence()?);
            }
            drop((uploads.0, computes.0, downloads.0));
            Ok((joined(uploaded)??, joined(computed)??, joined(read)??))
        })?;
        let elapsed = read.iter().map(|(end, _)| *end).max().unwrap_or_default();
        let mut timeline = Vec::with_capacity(read.len());
        for (i, (download, bytes)) in read.into_iter().enumerate() {
            let got: &[f32] = bytes.as_slice()?;
            let want = expected(self.host[i].1, self.iters);
            if got.len() != self.chunk_floats || got.iter().any(|&v| (v - want).abs() > 1e-5 * want.abs().max(1.0)) {
                return Err(weir_core::Error::InvalidArgument(format!("chunk {i}: read {} for {want}", got[0])));
            }
            timeline.push(Ends { upload: uploaded[i], compute: computed[i], download });
        }
        Ok((elapsed, timeline))
    }

    /// Each stage alone over every chunk: (upload, compute, download).
    fn stages_alone(&self, stream: &Stream) -> weir_core::Result<[Duration; 3]> {
        let timed = |work: &dyn Fn() -> weir_core::Result<()>| -> weir_core::Result<Duration> {
            self.runtime.fence()?.wait()?;
            let start = Instant::now();
            work()?;
            stream.fence()?.wait()?;
            Ok(start.elapsed())
        };
        let upload = timed(&|| {
            self.host.iter().enumerate().try_for_each(|(i, (data, _))| stream.write_host(&self.slot(i).input, 0, data))
        })?;
        let compute = timed(&|| (0..self.host.len()).try_for_each(|i| self.compute(stream, self.slot(i))))?;
        let download = timed(&|| {
            let reads = (0..self.host.len())
                .map(|i| stream.enqueue_read(&self.slot(i).output))
                .collect::<Result<Vec<_>, _>>()?;
            reads.into_iter().try_for_each(|read| read.wait_host().map(drop))
        })?;
        Ok([upload, compute, download])
    }

    /// Every chunk's upload and every chunk's read at once, on two streams
    /// (a chunk's read reads another slot than its upload writes, so neither
    /// waits for the other): how fast the copies go when they share the
    /// link, the pipeline's ceiling beside the slowest stage alone.
    fn copies_together(&self, upload: &Stream, download: &Stream) -> weir_core::Result<Duration> {
        self.runtime.fence()?.wait()?;
        let start = Instant::now();
        let mut reads = Vec::with_capacity(self.host.len());
        for (i, (data, _)) in self.host.iter().enumerate() {
            upload.write_host(&self.slot(i).input, 0, data)?;
            reads.push(download.enqueue_read(&self.slot(i + 1).output)?);
        }
        reads.into_iter().try_for_each(|read| read.wait_host().map(drop))?;
        upload.fence()?.wait()?;
        Ok(start.elapsed())
    }
}

fn joined<T>(handle: std::thread::ScopedJoinHandle<'_, T>) -> weir_core::Result<T> {
    handle.join().map_err(|_| weir_core::Error::InvalidArgument("a timing thread panicked".into()))
}

fn gbps(bytes: f64, time: Duration) -> f64 {
    bytes / time.as_secs_f64() / 1e9
}

fn millis(time: Duration) -> f64 {
    time.as_secs_f64() * 1e3
}

/// The pipelined run as a timeline: one row per stream (upload, compute,
/// download), each chunk a bar from when its stage could start to when it
/// ended, and a wait for each cross-stream dependency of a chunk (its
/// compute after its upload, its download after its compute).
fn timeline_of(bars: &[[(Duration, Duration); 3]], device: &str) -> Timeline {
    let mut timeline = Timeline {
        title: format!("Weir demo on {device}: {} chunks", bars.len()),
        rows: ["upload stream", "compute stream", "download stream"].map(str::to_owned).to_vec(),
        ..Timeline::default()
    };
    for (chunk, spans) in bars.iter().enumerate() {
        for (row, &(start, end)) in spans.iter().enumerate() {
            timeline.bars.push(TimelineBar { row, start, end, label: format!("chunk {chunk}") });
            if row > 0 {
                let from = spans[row - 1].1;
                timeline.waits.push(TimelineWait { from_row: row - 1, from, to_row: row, until: start });
            }
        }
    }
    timeline
}

/// Runs of the pipelined and of the one-stream version; the best of each counts.
const RUNS: usize = 3;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let options = options()?;
    let runtime = Runtime::open(options.backend)?;
    println!(
        "weir demo on {} ({}): {} chunks of {} MiB, {} in flight",
        runtime.info().backend.name(),
        runtime.info().name,
        options.chunks,
        (options.chunk_floats * 4) >> 20,
        options.in_flight
    );
    let s = runtime.default_stream();
    let host = (0..options.chunks)
        .map(|i| Ok((runtime.host_buffer(&vec![i as f32; options.chunk_floats])?, i as f32)))
        .collect::<weir_core::Result<Vec<_>>>()?;
    let slots = (0..options.in_flight.min(options.chunks))
        .map(|_| {
            let bytes = (options.chunk_floats * 4) as u64;
            Ok(Slot { input: s.zeros(ElementType::Bytes, bytes)?, output: s.zeros(ElementType::Bytes, bytes)? })
        })
        .collect::<weir_core::Result<Vec<_>>>()?;
    let mut pipeline = Pipeline {
        runtime: &runtime,
        kernel: transform_kernel(),
        host,
        chunk_floats: options.chunk_floats,
        iters: 1,
        slots,
    };

    // Balance the stages: the smallest power of two of iterations whose
    // compute takes as long as the slower copy. The first run only warms up:
    // it takes the page-locked memory the reads land in.
    pipeline.stages_alone(&s)?;
    let mut alone = pipeline.stages_alone(&s)?;
    while alone[1] < alone[0].max(alone[2]) && pipeline.iters < 1 << 16 {
        pipeline.iters *= 2;
        alone = pipeline.stages_alone(&s)?;
    }
    let bytes = pipeline.bytes();
    let slowest = alone.iter().copied().max().unwrap_or_default();
    println!(
        "stages alone on one stream: upload {:.2} GB/s, compute ({} iterations) {:.2} GB/s, download {:.2} GB/s",
        gbps(bytes, alone[0]),
        pipeline.iters,
        gbps(bytes, alone[1]),
        gbps(bytes, alone[2])
    );

    let (upload, compute, download) = (runtime.new_stream()?, runtime.new_stream()?, runtime.new_stream()?);
    let together = pipeline.copies_together(&upload, &download)?;
    println!("uploads and downloads at once on two streams: {:.2} GB/s each way", gbps(bytes, together));
    // Best of a few runs of each, taken in turn, so that one slow moment of
    // a shared machine lands on neither side alone; the timeline printed is
    // the best pipelined run's.
    let (mut pipelined, mut timeline, mut one_stream) = (Duration::MAX, Vec::new(), Duration::MAX);
    let mut waits = 0;
    for _ in 0..RUNS {
        let waits_before = runtime.diagnostics().inserted_waits;
        let (took, ends) = pipeline.run(&upload, &compute, &download)?;
        waits = runtime.diagnostics().inserted_waits - waits_before;
        if took < pipelined {
            (pipelined, timeline) = (took, ends);
        }
        one_stream = one_stream.min(pipeline.run(&s, &s, &s)?.0);
    }

    println!(
        "timeline of the pipelined run (ms from its start; a stage starts once its input and its stream are free):"
    );
    println!("{:>6} {:>18} {:>18} {:>18}", "chunk", "upload", "compute", "download");
    let k = pipeline.slots.len();
    let mut bars: Vec<[(Duration, Duration); 3]> = Vec::with_capacity(timeline.len());
    for (i, end) in timeline.iter().enumerate() {
        let before = |stage: fn(&Ends) -> Duration| if i > 0 { stage(&timeline[i - 1]) } else { Duration::ZERO };
        let slot_free = |stage: fn(&Ends) -> Duration| if i >= k { stage(&timeline[i - k]) } else { Duration::ZERO };
        // The host admits a slot's next upload once its previous chunk was read back.
        let upload_start = before(|e| e.upload).max(slot_free(|e| e.download));
        let compute_start = before(|e| e.compute).max(end.upload).max(slot_free(|e| e.download));
        let download_start = before(|e| e.download).max(end.compute);
        let span = |from: Duration, to: Duration| format!("{:7.2} - {:7.2}", millis(from), millis(to.max(from)));
        println!(
            "{i:>6} {:>18} {:>18} {:>18}",
            span(upload_start, end.upload),
            span(compute_start, end.compute),
            span(download_start, end.download)
        );
        bars.push([(upload_start, end.upload), (compute_start, end.compute), (download_start, end.download)]);
    }
    let picture = std::env::current_dir()?.join("target").join("weir-demo-timeline.svg");
    match std::fs::create_dir_all(picture.parent().unwrap_or(&picture))
        .and_then(|()| std::fs::write(&picture, timeline_of(&bars, &runtime.info().name).to_svg()))
    {
        Ok(()) => println!("the timeline as a picture: {}", picture.display()),
        Err(error) => println!("the timeline picture could not be written to {}: {error}", picture.display()),
    }
    let backend = runtime.info().backend.name();
    // On the CPU backend each stage is a thread doing the work itself: the
    // stages overlap only as far as the machine has a core for each of them
    // and one for the host thread that feeds them. With fewer, the targets
    // measure the machine, not Weir, and the demo says so instead.
    let cores = std::thread::available_parallelism().map_or(1, |cores| cores.get());
    let machine_bound = runtime.info().backend == BackendKind::Cpu && cores < CPU_CORES_FOR_TARGETS;
    let target = |value: f64| (!machine_bound).then_some(value);
    let figures = [
        ("pipeline, 3 streams", gbps(bytes, pipelined), None),
        ("slowest stage alone", gbps(bytes, slowest), None),
        ("uploads and downloads at once, each way", gbps(bytes, together), None),
        ("one stream", gbps(bytes, one_stream), None),
        ("pipeline / slowest stage", pipelined.as_secs_f64().recip() / slowest.as_secs_f64().recip(), target(0.85)),
        ("pipeline / one stream", one_stream.as_secs_f64() / pipelined.as_secs_f64(), target(2.0)),
    ];
    for (name, value, target) in figures {
        let target = target.map_or("null".to_owned(), |t| format!("{t}"));
        println!("{{\"backend\":\"{backend}\",\"demo\":\"{name}\",\"value\":{value:.3},\"target\":{target}}}");
    }
    println!(
        "pipelined {:.2} GB/s ({:.2}x the slowest stage alone, {:.2}x one stream; best of {RUNS} runs each); {} cross-stream waits inserted for {} chunks in a run",
        gbps(bytes, pipelined),
        slowest.as_secs_f64() / pipelined.as_secs_f64(),
        one_stream.as_secs_f64() / pipelined.as_secs_f64(),
        waits,
        options.chunks
    );
    if machine_bound {
        println!(
            "this machine has {cores} cores for three CPU stages and the host thread that feeds them: the stages \
             share cores, so no target applies here (they do with {CPU_CORES_FOR_TARGETS} cores, or on a GPU: \
             `cargo xtask demo --backend cuda`, or `--backend wgpu` on a GPU adapter)"
        );
    }
    println!("every chunk read back correct");
    runtime.close()?;
    Ok(())
}
