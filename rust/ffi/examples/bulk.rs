//! The Rust side of the bulk-data benchmarks (`cargo xtask bench --kotlin`
//! and `--swift`): an upload and a read of 256 MiB through the very weir-ffi
//! calls the bindings make (`upload_borrowed`, then `sync`; `read_host`,
//! then a copy into memory of the caller's, as the bindings read into their
//! arrays), so the difference is the foreign side alone.
//!
//! Prints `--baseline NAME VALUE` pairs: the best of three rounds in GB/s,
//! and the peak growth of the process's resident memory during each call in
//! MiB (sampled every millisecond from /proc/self/statm; on the CPU backend
//! an upload's growth includes the new buffer itself). `--backend NAME`
//! picks the backend (cpu).

mod support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::executor::block_on;

/// Bytes moved per call.
const BYTES: usize = 256 << 20;

/// The process's resident bytes, from /proc/self/statm (0 where there is none).
fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm.split_whitespace().nth(1).and_then(|field| field.parse().ok()).unwrap_or(0);
    pages * 4096
}

/// Samples the resident size every millisecond, keeping the highest.
struct PeakResident {
    peak: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl PeakResident {
    fn start() -> Self {
        let (peak, stop) = (Arc::new(AtomicU64::new(resident_bytes())), Arc::new(AtomicBool::new(false)));
        let thread = {
            let (peak, stop) = (peak.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    peak.fetch_max(resident_bytes(), Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(1));
                }
            })
        };
        PeakResident { peak, stop, thread: Some(thread) }
    }

    /// Runs `call` and returns its seconds and the resident growth it peaked at, in MiB.
    fn measure<T>(&self, call: impl FnOnce() -> T) -> (T, f64, f64) {
        let before = resident_bytes();
        self.peak.store(before, Ordering::Relaxed);
        let start = Instant::now();
        let value = call();
        let seconds = start.elapsed().as_secs_f64();
        self.peak.fetch_max(resident_bytes(), Ordering::Relaxed);
        let growth = self.peak.load(Ordering::Relaxed).saturating_sub(before) as f64 / f64::from(1 << 20);
        (value, seconds, growth)
    }
}

impl Drop for PeakResident {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn main() -> Result<(), weir_ffi::WeirError> {
    let runtime = support::open_from_args()?;
    let stream = runtime.default_stream();
    let data: Vec<u8> = (0..BYTES).map(|i| (i % 251) as u8).collect();
    // Touched before the reads, as a caller's array is.
    let mut destination = vec![1u8; BYTES];
    let sampler = PeakResident::start();
    let gbps = |seconds: f64| BYTES as f64 / seconds / 1e9;
    let (mut upload, mut upload_growth, mut read, mut read_growth) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
    for _ in 0..3 {
        let (buffer, seconds, growth) = sampler.measure(|| {
            let buffer = stream.upload_borrowed(&data, weir_ffi::ElementType::Bytes)?;
            block_on(stream.sync(None))?;
            Ok::<_, weir_ffi::WeirError>(buffer)
        });
        let buffer = buffer?;
        (upload, upload_growth) = (upload.max(gbps(seconds)), upload_growth.max(growth));
        // Into memory of the caller's, as the bindings read into their arrays.
        let (outcome, seconds, growth) = sampler.measure(|| {
            let host = block_on(stream.read_host(buffer.clone(), 0, BYTES as u64, weir_ffi::ElementType::Bytes, None))?;
            destination.copy_from_slice(host.as_bytes());
            Ok::<_, weir_ffi::WeirError>(())
        });
        outcome?;
        if destination != data {
            return Err(weir_ffi::WeirError::Bug { description: "the read gave other bytes than uploaded".into() });
        }
        (read, read_growth) = (read.max(gbps(seconds)), read_growth.max(growth));
    }
    drop(sampler);
    println!(
        "--baseline upload_256mib_gbps {upload:.3} --baseline upload_256mib_growth_mib {upload_growth:.1} \
         --baseline read_256mib_gbps {read:.3} --baseline read_256mib_growth_mib {read_growth:.1}"
    );
    runtime.shutdown()
}
