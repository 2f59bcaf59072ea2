//! A fault that poisons the CUDA context (a kernel that traps) loses the
//! device: the runtime then fails every call with `DeviceLost`, nothing
//! hangs, closing it works, opening another runtime in the same process is
//! `DeviceLost` too (the driver refuses the process), and a new process
//! runs work at once.
//!
//! Its own test binary, so its own process: every runtime of a process shares
//! device 0's primary context, which the trap poisons for all of them.
//! Skipped by name where CUDA is unavailable, unless `WEIR_REQUIRE_BACKENDS`
//! lists `cuda`.
#![cfg(feature = "cuda")]

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use weir_core::{Arg, BackendKind, ElementType, Error, Grid, Kernel, Runtime};

/// Longer than any call takes on a healthy device: past it, a call hung.
const HUNG: Duration = Duration::from_secs(30);

fn required() -> bool {
    std::env::var("WEIR_REQUIRE_BACKENDS")
        .map(|list| list.split(',').any(|name| name.trim() == "cuda"))
        .unwrap_or(false)
}

/// `call`'s result, or a failure naming `what` if it does not return.
fn within<T: Send + 'static>(what: &str, call: impl FnOnce() -> T + Send + 'static) -> T {
    let (sent, received) = mpsc::channel();
    thread::spawn(move || {
        let _ = sent.send(call());
    });
    match received.recv_timeout(HUNG) {
        Ok(outcome) => outcome,
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("{what} hung on a lost device"),
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("{what} panicked (see above)"),
    }
}

fn assert_lost<T: std::fmt::Debug>(what: &str, outcome: Result<T, Error>) {
    match outcome {
        Err(Error::DeviceLost { backend: BackendKind::Cuda, status: Some(status), .. }) => {
            assert!(status.name.starts_with("CUDA_ERROR_"), "{what}: {status}");
        }
        other => panic!("{what}: expected DeviceLost with the driver's status, got {other:?}"),
    }
}

#[test]
fn a_trapping_kernel_loses_the_runtime_and_every_later_call_says_so() {
    let runtime = match Runtime::open(BackendKind::Cuda) {
        Ok(runtime) => runtime,
        Err(Error::Unavailable { reason, .. }) if !required() => {
            eprintln!(
                "skipped: a_trapping_kernel_loses_the_runtime_and_every_later_call_says_so: cuda unavailable: {reason}"
            );
            return;
        }
        Err(error) => panic!("cannot open cuda: {error}"),
    };
    let s = runtime.default_stream();
    let t = runtime.new_stream().unwrap();
    let healthy = s.upload(&[1.0f32, 2.0, 3.0, 4.0]).unwrap();
    assert_eq!(t.read_as::<f32>(&healthy).unwrap(), vec![1.0, 2.0, 3.0, 4.0]);

    let trap = Kernel::custom("trap")
        .cuda(r#"extern "C" __global__ void trap(float* out) { out[0] = 1.0f; __trap(); }"#, "trap")
        .build();
    let out = s.zeros(ElementType::Bytes, 16).unwrap();
    // The launch itself is accepted: the fault happens on the device.
    s.execute(&trap, Grid::linear(1, 1), &[Arg::write(&out)]).unwrap();
    let fence = s.fence().unwrap();
    assert_lost("the fence after the trap", within("the fence", move || fence.wait()));

    // Every later call of the runtime says so, on every stream.
    let (s2, t2, runtime2) = (s.clone(), t.clone(), runtime.clone());
    let healthy2 = healthy.clone();
    within("later calls", move || {
        assert_lost("upload", s2.upload(&[7u32; 4]));
        assert_lost("read on another stream", t2.read_as::<f32>(&healthy2));
        assert_lost("fill", t2.fill_f32(&healthy2, 9.0));
        assert_lost("new stream", runtime2.new_stream());
        assert_lost("runtime fence", runtime2.fence());
        assert_lost("stream sync", futures::executor::block_on(t2.sync()));
    });
    // Closing a lost runtime works, and returns.
    let closing = runtime.clone();
    within("close", move || closing.close()).unwrap();
    drop((s, t, healthy, out, runtime));

    // The driver refuses CUDA to this process now: a typed error, at once.
    assert_lost("a runtime opened afterwards", within("open", || Runtime::open(BackendKind::Cuda).map(drop)));

    // Another process is unaffected: this binary again, running only the
    // test below.
    let exe = std::env::current_exe().unwrap();
    let child =
        std::process::Command::new(exe).args(["--ignored", "--exact", "a_fresh_process_runs_work"]).output().unwrap();
    let log = String::from_utf8_lossy(&child.stdout);
    assert!(child.status.success() && log.contains("1 passed"), "the fresh process failed:\n{log}");
}

#[test]
#[ignore = "run in a process of its own by the test above"]
fn a_fresh_process_runs_work() {
    let fresh = Runtime::open(BackendKind::Cuda).expect("a new process opens cuda");
    let s = fresh.default_stream();
    let x = s.upload(&[1.0f32, 2.0, 3.0, 4.0]).unwrap();
    let y = s.upload(&[10.0f32, 20.0, 30.0, 40.0]).unwrap();
    s.axpy(2.0, &x, &y).unwrap();
    let t = fresh.new_stream().unwrap();
    assert_eq!(t.read_as::<f32>(&y).unwrap(), vec![12.0, 24.0, 36.0, 48.0]);
    fresh.fence().unwrap().wait().unwrap();
    assert_eq!(fresh.diagnostics().backend.live_events, 0);
}
