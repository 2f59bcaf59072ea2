//! CPU streams run on a bounded pool of workers: however many streams are
//! made, used and dropped, the process's threads stay a small multiple of
//! the cores.

#[path = "support/proc_status.rs"]
mod proc_status;

use weir_core::{BackendKind, Runtime};

/// The most threads the process may have: those it had before, plus four per core.
fn thread_bound(before: u64) -> u64 {
    let cores = std::thread::available_parallelism().map_or(2, |cores| cores.get()) as u64;
    before + 4 * cores.max(2)
}

#[test]
fn threads_stay_bounded_by_the_cores_whatever_the_stream_churn() {
    let runtime = Runtime::open(BackendKind::Cpu).unwrap();
    let before = proc_status::status("Threads");
    assert!(before > 0, "no thread count in /proc/self/status");
    let bound = thread_bound(before);
    let mut most = before;
    let source = runtime.default_stream();
    let x = source.upload(&[1.0f32, 2.0, 3.0]).unwrap();

    // Many live at once, each waiting for another stream's write, then all dropped together.
    let streams: Vec<_> = (0..2000).map(|_| runtime.new_stream().unwrap()).collect();
    let outs: Vec<_> = streams
        .iter()
        .map(|stream| {
            let out = stream.upload(&[0.0f32; 3]).unwrap();
            stream.add(&x, &x, &out).unwrap();
            out
        })
        .collect();
    most = most.max(proc_status::status("Threads"));
    for (stream, out) in streams.iter().zip(&outs).step_by(97) {
        stream.fence().unwrap().wait().unwrap();
        assert_eq!(stream.read_as::<f32>(out).unwrap(), vec![2.0, 4.0, 6.0]);
    }
    drop(outs);
    drop(streams);
    most = most.max(proc_status::status("Threads"));

    // Made, used and dropped one after another.
    for _ in 0..2000 {
        let stream = runtime.new_stream().unwrap();
        let out = stream.upload(&[0.0f32; 3]).unwrap();
        stream.add(&x, &x, &out).unwrap();
        drop(stream);
        most = most.max(proc_status::status("Threads"));
    }
    assert!(most <= bound, "{most} threads with CPU stream churn; at most {bound} expected (had {before})");
}

#[test]
fn delayed_streams_hold_no_worker_so_others_run_meanwhile() {
    let runtime = Runtime::open(BackendKind::Cpu).unwrap();
    // More delayed streams than the pool has workers: a delay that slept on a
    // worker would leave none for the stream below until the delays ended.
    let cores = std::thread::available_parallelism().map_or(2, |cores| cores.get());
    let delayed: Vec<_> = (0..2 * cores.max(2) + 1).map(|_| runtime.new_stream().unwrap()).collect();
    let delays: Vec<_> = delayed
        .iter()
        .map(|stream| {
            stream.delay(std::time::Duration::from_secs(3)).unwrap();
            stream.fence().unwrap()
        })
        .collect();
    let other = runtime.new_stream().unwrap();
    let x = other.upload(&[1.0f32, 2.0]).unwrap();
    let out = other.upload(&[0.0f32; 2]).unwrap();
    other.scale(&x, 2.0, &out).unwrap();
    assert_eq!(other.read_as::<f32>(&out).unwrap(), vec![2.0, 4.0]);
    assert!(delays.iter().all(|fence| !fence.is_complete()), "the delays ended before the other stream ran");
    for fence in &delays {
        fence.wait().unwrap();
    }
}
