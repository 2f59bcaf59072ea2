//! `cargo xtask soak [--ops N] [--threads T] [--backend NAME] [--flood N]`: a long mixed
//! run that must leave nothing behind.
//!
//! A few threads share a small pool of streams that is churned (streams are
//! created, used from every thread and dropped while their work may still
//! run) and keep their own buffers, created and dropped as they go. The ops
//! mix kernels, host writes, blocking and async fence waits, futures polled
//! once and dropped mid-wait, pending reads dropped unread, read-backs that
//! check their contents, and cancel tokens cancelled or dropped.
//!
//! At every tenth of the run the threads pause, the runtime drains, and one
//! JSON line (stdout) and one table row (stderr) report ops done, the
//! process's RSS and thread count (`/proc/self/status`) and the runtime's
//! diagnostics. At the end, with every handle dropped, the soak fails unless
//! the thread count and every live counter are back at their start values
//! and RSS grew by at most [`RSS_BOUND_KIB`] after the first tenth. That
//! tenth is the warm-up: a driver grows its own caches and pools in its
//! first thousands of calls (Vulkan's on the H200 by about 110 MiB, then
//! flat), while a leak goes on growing over the nine tenths measured.
//!
//! Then a flood (`--flood N`, default 2 000 000; 0 skips it): one thread
//! admits N tiny ops on one stream as fast as it can, far faster than the
//! device runs them, then waits for them. The runtime's queue limit must
//! hold the queue at its bound (one JSON line reports the peak), and RSS
//! after the drain must again be within [`RSS_BOUND_KIB`] of the warm mark.

use std::error::Error;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex, PoisonError};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use futures::executor::block_on;
use weir_core::{BackendKind, Buffer, CancelToken, Diagnostics, ElementType, Runtime, Stream};

#[path = "../tests/support/proc_status.rs"]
mod proc_status;
use proc_status::status;

type Result<T = (), E = Box<dyn Error + Send + Sync>> = std::result::Result<T, E>;

/// How much RSS may grow from the end of the first tenth to the end.
const RSS_BOUND_KIB: u64 = 64 * 1024;
/// Streams in the shared pool, besides the default stream.
const POOLED_STREAMS: usize = 4;
/// Buffers each thread keeps at most.
const POOLED_BUFFERS: usize = 8;
/// Elements of an op buffer (f32).
const WORDS: usize = 256;
const SAMPLES: u64 = 10;

/// A waker that counts its wake-ups.
#[derive(Default)]
struct Counter(AtomicUsize);

impl Wake for Counter {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

impl Counter {
    fn waker() -> (Arc<Counter>, Waker) {
        let counter = Arc::new(Counter::default());
        (counter.clone(), Waker::from(counter))
    }

    /// Waits (the wake runs on Weir's delivery thread) until woken `times`;
    /// an error if it takes longer than a few seconds or overshoots.
    fn expect(&self, times: usize, what: &str) -> Result {
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.0.load(Ordering::SeqCst) < times && Instant::now() < deadline {
            std::thread::yield_now();
        }
        match self.0.load(Ordering::SeqCst) {
            n if n == times => Ok(()),
            n => Err(format!("{what}: woken {n} times, expected {times}").into()),
        }
    }
}

/// Polls `future` once with `waker`.
fn poll_once<F: std::future::Future + Unpin>(future: &mut F, waker: &Waker) -> Poll<F::Output> {
    std::pin::Pin::new(future).poll(&mut Context::from_waker(waker))
}

/// xorshift64*: a fixed sequence per thread, so a failing run can be replayed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33) as usize % n
    }
}

struct Shared {
    runtime: Runtime,
    streams: Mutex<Vec<Stream>>,
    ops: AtomicUsize,
    streams_created: AtomicUsize,
}

impl Shared {
    fn stream(&self, rng: &mut Rng) -> Stream {
        let pool = self.streams.lock().unwrap_or_else(PoisonError::into_inner);
        match rng.below(pool.len() + 1) {
            0 => self.runtime.default_stream(),
            i => pool[i - 1].clone(),
        }
    }

    /// Replaces one pooled stream with a new one; the old one is dropped here
    /// (or by whichever thread still holds a clone) while its work may run.
    fn churn(&self, rng: &mut Rng) -> Result {
        let fresh = self.runtime.new_stream()?;
        self.streams_created.fetch_add(1, Ordering::Relaxed);
        let mut pool = self.streams.lock().unwrap_or_else(PoisonError::into_inner);
        let index = rng.below(pool.len());
        let old = std::mem::replace(&mut pool[index], fresh);
        drop(pool);
        drop(old);
        Ok(())
    }
}

struct Worker {
    shared: Arc<Shared>,
    rng: Rng,
    buffers: Vec<Buffer>,
}

impl Worker {
    fn buffer(&mut self, stream: &Stream) -> Result<Buffer> {
        if self.buffers.is_empty() {
            self.buffers.push(stream.zeros(ElementType::Bytes, (WORDS * 4) as u64)?);
        }
        Ok(self.buffers[self.rng.below(self.buffers.len())].clone())
    }

    /// Two distinct buffers (an op may not read and write one buffer), if there are two.
    fn two_buffers(&mut self) -> Option<(Buffer, Buffer)> {
        let n = self.buffers.len();
        if n < 2 {
            return None;
        }
        let a = self.rng.below(n);
        let b = (a + 1 + self.rng.below(n - 1)) % n;
        Some((self.buffers[a].clone(), self.buffers[b].clone()))
    }

    fn op(&mut self) -> Result {
        let stream = self.shared.stream(&mut self.rng);
        match self.rng.below(100) {
            // Stream churn.
            0..=1 => self.shared.churn(&mut self.rng)?,
            // A new buffer; the oldest goes when the pool is full.
            2..=11 => {
                let buffer = match self.rng.below(3) {
                    0 => stream.upload(&[1.0f32; WORDS])?,
                    1 => stream.zeros(ElementType::Bytes, (WORDS * 4) as u64)?,
                    _ => {
                        let buffer = stream.empty(ElementType::Bytes, (WORDS * 4) as u64)?;
                        stream.fill_f32(&buffer, 2.0)?;
                        buffer
                    }
                };
                self.buffers.push(buffer);
                if self.buffers.len() > POOLED_BUFFERS {
                    self.buffers.remove(0);
                }
            }
            // A large buffer, used once and dropped while its op may run.
            12 => {
                let big = stream.empty(ElementType::Bytes, 1 << 20)?;
                stream.memset_zero(&big)?;
            }
            // Kernels.
            13..=49 => match self.two_buffers() {
                Some((a, b)) => match self.rng.below(4) {
                    0 => stream.axpy(0.5, &a, &b)?,
                    1 => stream.add(&a, &a, &b)?,
                    2 => stream.scale(&a, 0.25, &b)?,
                    _ => stream.copy(&a, &b)?,
                },
                None => stream.fill_f32(&self.buffer(&stream)?, 3.0)?,
            },
            // Host writes.
            50..=54 => {
                let buffer = self.buffer(&stream)?;
                stream.write(&buffer, 0, &[4.0f32; 16])?;
            }
            // A blocking fence wait.
            55..=61 => stream.fence()?.wait()?,
            // A fence polled once, then dropped mid-wait (future and fence).
            62..=71 => {
                let fence = stream.fence()?;
                let (_, waker) = Counter::waker();
                let mut wait = fence.wait_async();
                let _ = poll_once(&mut wait, &waker);
                drop(wait);
                drop(fence);
            }
            // A fence awaited; a future pending on it must be woken exactly once.
            72..=76 => {
                let fence = stream.fence()?;
                let (counter, waker) = Counter::waker();
                let mut wait = fence.wait_async();
                if poll_once(&mut wait, &waker).is_pending() {
                    block_on(fence.wait_async())?;
                    counter.expect(1, "a fence's pending future")?;
                    if let Poll::Ready(outcome) = poll_once(&mut wait, &waker) {
                        outcome?;
                    } else {
                        return Err("a woken fence future was still pending".into());
                    }
                }
            }
            // A pending read dropped unread (after one poll).
            77..=81 => {
                let buffer = self.buffer(&stream)?;
                let mut read = stream.enqueue_read(&buffer)?;
                let (_, waker) = Counter::waker();
                let _ = poll_once(&mut read, &waker);
            }
            // A write read back, checked, from another stream.
            82..=84 => {
                let buffer = self.buffer(&stream)?;
                let value = self.rng.below(1000) as f32;
                stream.fill_f32(&buffer, value)?;
                let reader = self.shared.stream(&mut self.rng);
                let got: Vec<f32> = reader.read_as(&buffer)?;
                if got.iter().any(|&x| x != value) {
                    return Err(format!("read back {:?}…, expected {value} everywhere", &got[..4]).into());
                }
            }
            // Cancel tokens: a wait cancelled (woken once), or the token dropped.
            85..=91 => {
                let token = CancelToken::new();
                let (counter, waker) = Counter::waker();
                let mut cancelled = token.wait_async();
                if !poll_once(&mut cancelled, &waker).is_pending() {
                    return Err("a fresh cancel token was already cancelled".into());
                }
                if self.rng.below(2) == 0 {
                    token.cancel();
                    token.cancel();
                    counter.expect(1, "a cancelled wait")?;
                    match poll_once(&mut cancelled, &waker) {
                        Poll::Ready(Err(weir_core::Error::Cancelled)) => {}
                        _ => return Err("a cancelled wait did not end with Cancelled".into()),
                    }
                } else {
                    drop(token);
                    drop(cancelled);
                }
            }
            // A runtime-wide fence, polled once and dropped, or waited.
            92..=95 => {
                let fence = self.shared.runtime.fence()?;
                if self.rng.below(4) == 0 {
                    fence.wait()?;
                } else {
                    let (_, waker) = Counter::waker();
                    let _ = poll_once(&mut fence.wait_async(), &waker);
                }
            }
            // A buffer dropped, perhaps while ops on it still run.
            _ => {
                if !self.buffers.is_empty() {
                    let index = self.rng.below(self.buffers.len());
                    self.buffers.swap_remove(index);
                }
            }
        }
        self.shared.ops.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// The names of this process's threads (`/proc/self/task/*/comm`).
fn thread_names() -> Vec<String> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return Vec::new() };
    let mut names: Vec<String> = tasks
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .map(|name| name.trim().to_owned())
        .collect();
    names.sort();
    names
}

struct Sample {
    ops: u64,
    seconds: f64,
    rss_kib: u64,
    threads: u64,
    streams_created: usize,
    diagnostics: Diagnostics,
}

impl Sample {
    fn take(shared: &Shared, start: Instant) -> Result<Sample> {
        // Drain, so the counters show what is left, not what is in flight.
        shared.runtime.fence()?.wait()?;
        Ok(Sample {
            ops: shared.ops.load(Ordering::SeqCst) as u64,
            seconds: start.elapsed().as_secs_f64(),
            rss_kib: status("VmRSS"),
            threads: status("Threads"),
            streams_created: shared.streams_created.load(Ordering::SeqCst),
            diagnostics: shared.runtime.diagnostics(),
        })
    }

    /// The counters that must come back to their start values.
    fn live(&self) -> [(&'static str, u64); 10] {
        let d = &self.diagnostics;
        [
            ("threads", self.threads),
            ("live_buffers", d.live_buffers),
            ("retiring_buffers", d.retiring_buffers),
            ("live_streams", d.live_streams),
            ("retiring_streams", d.retiring_streams),
            ("backend.live_streams", d.backend.live_streams),
            ("backend.live_events", d.backend.live_events),
            ("backend.live_allocations", d.backend.live_allocations),
            ("live_fences", d.live_fences),
            ("live_waiters", d.live_waiters),
        ]
    }

    fn json(&self, label: &str) -> String {
        let fields: Vec<String> = self.live().iter().map(|(name, value)| format!("\"{name}\":{value}")).collect();
        format!(
            "{{\"soak\":\"{label}\",\"ops\":{},\"seconds\":{:.2},\"rss_kib\":{},\"streams_created\":{},\"admitted_ops\":{},\"inserted_waits\":{},{}}}",
            self.ops,
            self.seconds,
            self.rss_kib,
            self.streams_created,
            self.diagnostics.admitted_ops,
            self.diagnostics.inserted_waits,
            fields.join(",")
        )
    }

    fn row(&self, label: &str) -> String {
        let counters: Vec<String> = self.live()[1..].iter().map(|(_, value)| format!("{value:>9}")).collect();
        format!(
            "{label:>5} {:>9} {:>7.1} {:>9} {:>7} {:>8}{}",
            self.ops,
            self.seconds,
            self.rss_kib,
            self.threads,
            self.streams_created,
            counters.join("")
        )
    }
}

/// The table's header: short names for the counters of [`Sample::live`], in order.
fn header() -> String {
    let names = ["bufs", "r.bufs", "strms", "r.strms", "b.strms", "b.evts", "b.allocs", "fences", "waiters"];
    let counters: Vec<String> = names.iter().map(|name| format!("{name:>9}")).collect();
    format!(
        "{:>5} {:>9} {:>7} {:>9} {:>7} {:>8}{}\n(streams: created so far; bufs, strms: live_buffers, live_streams; \
         r.: retiring_; b.: backend.live_; fences, waiters: live_)",
        "when",
        "ops",
        "s",
        "rss KiB",
        "threads",
        "streams",
        counters.join("")
    )
}

fn report(sample: &Sample, label: &str) {
    println!("{}", sample.json(label));
    eprintln!("{}", sample.row(label));
}

fn arg<T: std::str::FromStr>(args: &[String], name: &str) -> Result<Option<T>> {
    match args.iter().position(|a| a == name) {
        None => Ok(None),
        Some(i) => match args.get(i + 1).map(|value| value.replace('_', "").parse::<T>()) {
            Some(Ok(value)) => Ok(Some(value)),
            _ => Err(format!("{name} needs a value").into()),
        },
    }
}

/// Floods one stream with `ops` fills from one thread, then drains it; the
/// failures it finds: a queue past its limit, RSS past the bound after the drain.
fn flood_then_drain(runtime: &Runtime, ops: u64, warm_rss_kib: u64) -> Result<Vec<String>> {
    let stream = runtime.new_stream()?;
    let buffer = stream.zeros(ElementType::U32, 4)?;
    let began = Instant::now();
    for value in 0..ops {
        stream.fill_u32(&buffer, value as u32)?;
    }
    let admitted = began.elapsed();
    stream.fence()?.wait()?;
    drop((buffer, stream));
    runtime.fence()?.wait()?;
    let d = runtime.diagnostics();
    let rss_kib = status("VmRSS");
    let limit = runtime.queue_limit();
    println!(
        "{{\"soak\":\"flood\",\"ops\":{ops},\"admit_seconds\":{:.2},\"drained_seconds\":{:.2},\"peak_ops_in_queue\":{},\"queue_limit_ops\":{},\"rss_kib\":{rss_kib}}}",
        admitted.as_secs_f64(),
        began.elapsed().as_secs_f64(),
        d.peak_ops_in_queue,
        limit.ops
    );
    eprintln!(
        "flood: {ops} ops admitted in {:.2} s, drained in {:.2} s; at most {} in the queue (limit {}); RSS {rss_kib} KiB",
        admitted.as_secs_f64(),
        began.elapsed().as_secs_f64(),
        d.peak_ops_in_queue,
        limit.ops
    );
    let mut failures = Vec::new();
    // One producer: its check and its charge are one admission apart.
    if d.peak_ops_in_queue > limit.ops + 1 {
        failures.push(format!("the flood queued {} ops, past the limit of {}", d.peak_ops_in_queue, limit.ops));
    }
    if rss_kib > warm_rss_kib + RSS_BOUND_KIB {
        failures.push(format!("RSS after the flood drained: {rss_kib} KiB, from {warm_rss_kib} KiB after the warm-up"));
    }
    Ok(failures)
}

fn main() -> Result {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let total: u64 = arg(&args, "--ops")?.unwrap_or(1_000_000);
    let threads: u64 = arg(&args, "--threads")?.unwrap_or(4).max(1);
    let backend: String = arg(&args, "--backend")?.unwrap_or_else(|| "cpu".to_owned());
    let kind = BackendKind::from_name(&backend).ok_or_else(|| format!("no backend named {backend}"))?;

    let runtime = Runtime::open(kind)?;
    let info = runtime.info();
    eprintln!("weir soak: {total} ops from {threads} threads on {} ({})", info.backend.name(), info.name);
    // Warm up what lives as long as the process (the wake and release
    // threads) before the start sample.
    {
        let stream = runtime.default_stream();
        let buffer = stream.zeros(ElementType::Bytes, 4)?;
        let fence = stream.fence()?;
        let (_, waker) = Counter::waker();
        let _ = poll_once(&mut fence.wait_async(), &waker);
        fence.wait()?;
        drop(buffer);
        // The buffer's release completes before this fence, and the
        // diagnostics run the deliveries it left: the release thread is up.
        stream.fence()?.wait()?;
        runtime.diagnostics();
    }
    let start_time = Instant::now();
    let shared = Arc::new(Shared {
        runtime: runtime.clone(),
        streams: Mutex::new(Vec::new()),
        ops: AtomicUsize::new(0),
        streams_created: AtomicUsize::new(0),
    });
    let start = Sample::take(&shared, start_time)?;
    eprintln!("{}", header());
    report(&start, "start");

    for _ in 0..POOLED_STREAMS {
        let stream = runtime.new_stream()?;
        shared.streams.lock().unwrap_or_else(PoisonError::into_inner).push(stream);
        shared.streams_created.fetch_add(1, Ordering::Relaxed);
    }
    // Workers run one tenth of the ops, then meet the sampler twice: once to
    // stop for the sample, once to go on.
    let barrier = Arc::new(Barrier::new(threads as usize + 1));
    let workers: Vec<_> = (0..threads)
        .map(|index| {
            let (shared, barrier) = (shared.clone(), barrier.clone());
            std::thread::Builder::new().name(format!("soak-{index}")).spawn(move || -> Result {
                let mut worker = Worker { shared, rng: Rng(0x9E37_79B9_7F4A_7C15 ^ (index + 1)), buffers: Vec::new() };
                let mut failure = None;
                for tenth in 0..SAMPLES {
                    let (from, to) = (total * tenth / SAMPLES, total * (tenth + 1) / SAMPLES);
                    let mine = (to - from) / threads + u64::from(index < (to - from) % threads);
                    for _ in 0..mine {
                        if failure.is_none() {
                            failure = worker.op().err();
                        }
                    }
                    barrier.wait();
                    barrier.wait();
                }
                failure.map_or(Ok(()), Err)
            })
        })
        .collect::<std::io::Result<_>>()?;

    let mut samples = Vec::new();
    for tenth in 1..=SAMPLES {
        barrier.wait();
        let sample = Sample::take(&shared, start_time);
        barrier.wait();
        let sample = sample?;
        report(&sample, &format!("{}%", tenth * 100 / SAMPLES));
        samples.push(sample);
    }
    // The warm mark: RSS once the first tenth ran (see the module doc).
    let warm_rss_kib = samples.first().map_or(start.rss_kib, |sample| sample.rss_kib);
    let mut failures = Vec::new();
    for worker in workers {
        match worker.join() {
            Ok(Ok(())) => {}
            Ok(Err(error)) => failures.push(error.to_string()),
            Err(_) => failures.push("a worker panicked".to_owned()),
        }
    }
    shared.streams.lock().unwrap_or_else(PoisonError::into_inner).clear();
    let mut end = Sample::take(&shared, start_time)?;
    // A joined thread leaves /proc a moment after its join returns.
    let deadline = Instant::now() + Duration::from_secs(2);
    while end.threads > start.threads && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
        end.threads = status("Threads");
    }
    report(&end, "end");

    // CPU pool workers retire when idle: the end may have fewer than the start, never more.
    if end.threads > start.threads {
        failures.push(format!("threads alive at the end: {}", thread_names().join(", ")));
    }
    for ((name, before), (_, after)) in start.live().iter().zip(end.live()) {
        if *name != "threads" && *before != after {
            failures.push(format!("{name}: {before} at the start, {after} at the end"));
        }
    }
    if end.rss_kib > warm_rss_kib + RSS_BOUND_KIB {
        failures.push(format!(
            "RSS grew from {warm_rss_kib} KiB after the first tenth to {} KiB, more than {RSS_BOUND_KIB} KiB",
            end.rss_kib
        ));
    }
    if end.ops != total {
        failures.push(format!("{} ops done of {total}", end.ops));
    }
    let flood: u64 = arg(&args, "--flood")?.unwrap_or(2_000_000);
    if flood > 0 && failures.is_empty() {
        failures.extend(flood_then_drain(&runtime, flood, warm_rss_kib)?);
    }
    if failures.is_empty() {
        eprintln!(
            "weir soak: flat after {} ops in {:.1} s ({} streams created); RSS {} -> {} (first tenth) -> {} KiB (bound +{} KiB after the first tenth)",
            end.ops, end.seconds, end.streams_created, start.rss_kib, warm_rss_kib, end.rss_kib, RSS_BOUND_KIB
        );
        Ok(())
    } else {
        Err(format!("soak failed:\n  {}", failures.join("\n  ")).into())
    }
}
