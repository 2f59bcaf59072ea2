//! CPU kernels of one runtime admitting into another runtime's full queue:
//! each waits for room on a worker of the pool both runtimes share, and the
//! ops that would make room need a worker too. Its own test binary: were
//! the pool stuck, every other CPU test of the process would be.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use weir_core::{BackendKind, ElementType, Grid, Kernel, QueueLimit, Runtime};

#[test]
fn cpu_kernels_waiting_for_room_in_another_runtime_leave_a_worker_for_its_ops() {
    let workers = std::thread::available_parallelism().map_or(2, |cores| cores.get()).max(2);
    let full = Runtime::builder(BackendKind::Cpu)
        .queue_limit(QueueLimit { ops: 2, host_bytes: 1 << 20 })
        .open()
        .expect("cpu runtime");
    let stream = full.new_stream().expect("stream");
    let out = stream.zeros(ElementType::U32, 4).expect("buffer");
    stream.fence().and_then(|fence| fence.wait()).expect("zeroed");
    // The queue filled behind a hold: nothing drains it until released.
    let held = stream.hold().expect("hold");
    let eager = stream.without_waiting();
    while eager.fill_u32(&out, 1).is_ok() {}

    // As many kernels as the pool has workers, each admitting into the full queue.
    let feeding = Runtime::open(BackendKind::Cpu).expect("cpu runtime");
    let started = Arc::new(AtomicUsize::new(0));
    let kernel = {
        let (stream, out, started) = (stream.clone(), out.clone(), started.clone());
        Kernel::custom("fill_another_runtime")
            .cpu(move |_| {
                started.fetch_add(1, Ordering::SeqCst);
                stream.fill_u32(&out, 7).map_err(|error| error.to_string())
            })
            .build()
    };
    let streams: Vec<_> = (0..workers).map(|_| feeding.new_stream().expect("stream")).collect();
    for feeder in &streams {
        feeder.execute(&kernel, Grid::linear(1, 1), &[]).expect("kernel");
    }
    while started.load(Ordering::SeqCst) < workers {
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(Duration::from_millis(50));
    held.release();

    // Waited for on another thread, so that a stuck pool fails the test rather than hanging it.
    let fences: Vec<_> = streams.iter().map(|feeder| feeder.fence().expect("fence")).collect();
    let (done, finished) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(fences.iter().map(|fence| fence.wait()).collect::<Result<Vec<_>, _>>());
    });
    match finished.recv_timeout(Duration::from_secs(30)) {
        Ok(outcome) => assert!(outcome.is_ok(), "a kernel's fill was refused: {outcome:?}"),
        Err(_) => {
            // Left behind: dropping them would wait for the stuck pool.
            std::mem::forget((full, feeding, streams, stream, out, kernel));
            panic!("every CPU worker waits for room in a queue whose ops wait for a worker");
        }
    }
    assert_eq!(stream.read_as::<u32>(&out).expect("read"), vec![7; 4]);
}
