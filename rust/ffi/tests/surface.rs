//! The FFI surface as Kotlin and Swift see it, driven from Rust.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::executor::block_on;
use futures::FutureExt;
use weir_ffi::{Access, Arg, Backend, BuiltinOp, CancelToken, Grid, Kernel, WeirError, WeirRuntime};

fn grid() -> Grid {
    weir_ffi::grid_linear(1, 1)
}

fn floats(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

fn bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// Polls `probe` until it holds or 5 s pass.
fn eventually(mut probe: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(5) {
        if probe() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    false
}

fn axpy(x: &Arc<weir_ffi::Buffer>, y: &Arc<weir_ffi::Buffer>, alpha: f32) -> Vec<Arg> {
    vec![
        Arg::Buffer { buffer: x.clone(), access: Access::Read },
        Arg::Buffer { buffer: y.clone(), access: Access::ReadWrite },
        Arg::F32 { value: alpha },
    ]
}

#[test]
fn plain_verbs_return_once_admitted_before_the_work_is_done() {
    let runtime = WeirRuntime::open(Backend::Cpu).unwrap();
    let stream = runtime.default_stream();
    let x = stream.upload(bytes(&[1.0, 2.0, 3.0])).unwrap();
    let y = stream.zeros(12).unwrap();
    let hold = stream.hold().unwrap();
    stream.write(y.clone(), bytes(&[10.0, 20.0, 30.0]), 0).unwrap();
    stream.execute(Kernel::builtin(BuiltinOp::Axpy), grid(), axpy(&x, &y, 2.0)).unwrap();
    stream.memset_zero(x.clone()).unwrap();
    let fence = stream.fence().unwrap();
    std::thread::sleep(Duration::from_millis(20));
    assert!(!fence.is_complete(), "the enqueued ops ran past the hold");
    hold.release();
    fence.wait_blocking().unwrap();
    assert_eq!(floats(&stream.read_blocking(y, 0, None).unwrap()), [12.0, 24.0, 36.0]);
    assert_eq!(floats(&stream.read_blocking(x, 0, None).unwrap()), [0.0, 0.0, 0.0]);
}

#[test]
fn and_wait_forms_wait_until_the_stream_has_run_the_op() {
    let runtime = WeirRuntime::open(Backend::Cpu).unwrap();
    let stream = runtime.default_stream();
    let x = stream.upload(bytes(&[1.0, 2.0, 3.0])).unwrap();
    let y = stream.zeros(12).unwrap();
    let hold = stream.hold().unwrap();
    let mut write = Box::pin(stream.write_and_wait(y.clone(), bytes(&[10.0, 20.0, 30.0]), 0, None));
    assert!((&mut write).now_or_never().is_none(), "write_and_wait finished behind a hold");
    hold.release();
    block_on(write).unwrap();
    assert!(stream.is_synced());

    let hold = stream.hold().unwrap();
    let mut execute =
        Box::pin(stream.execute_and_wait(Kernel::builtin(BuiltinOp::Axpy), grid(), axpy(&x, &y, 2.0), None));
    assert!((&mut execute).now_or_never().is_none(), "execute_and_wait finished behind a hold");
    hold.release();
    block_on(execute).unwrap();
    assert_eq!(floats(&block_on(stream.read(y.clone(), 0, None, None)).unwrap()), [12.0, 24.0, 36.0]);

    let hold = stream.hold().unwrap();
    let mut zero = Box::pin(stream.memset_zero_and_wait(y.clone(), None));
    assert!((&mut zero).now_or_never().is_none(), "memset_zero_and_wait finished behind a hold");
    hold.release();
    block_on(zero).unwrap();
    assert_eq!(floats(&stream.read_blocking(y, 0, None).unwrap()), [0.0, 0.0, 0.0]);
}

#[test]
fn read_and_read_blocking_take_the_same_range() {
    let runtime = WeirRuntime::open(Backend::Cpu).unwrap();
    let stream = runtime.default_stream();
    let buffer = stream.upload(bytes(&[1.0, 2.0, 3.0, 4.0])).unwrap();
    assert_eq!(floats(&block_on(stream.read(buffer.clone(), 0, None, None)).unwrap()), [1.0, 2.0, 3.0, 4.0]);
    assert_eq!(floats(&block_on(stream.read(buffer.clone(), 4, Some(8), None)).unwrap()), [2.0, 3.0]);
    assert_eq!(floats(&block_on(stream.read(buffer.clone(), 8, None, None)).unwrap()), [3.0, 4.0]);
    assert_eq!(floats(&stream.read_blocking(buffer.clone(), 4, Some(8)).unwrap()), [2.0, 3.0]);
    assert_eq!(floats(&stream.read_blocking(buffer.clone(), 12, None).unwrap()), [4.0]);
    assert!(matches!(stream.read_blocking(buffer.clone(), 8, Some(12)), Err(WeirError::OutOfRange { .. })));
    assert!(matches!(block_on(stream.read(buffer.clone(), 20, None, None)), Err(WeirError::OutOfRange { .. })));
    // Refused reads changed nothing: the buffer reads as before.
    assert_eq!(floats(&stream.read_blocking(buffer, 0, None).unwrap()), [1.0, 2.0, 3.0, 4.0]);
}

#[test]
fn cancel_token_ends_a_gated_wait_and_leaves_no_waiter() {
    let runtime = WeirRuntime::open(Backend::Cpu).unwrap();
    let stream = runtime.default_stream();
    let hold = stream.hold().unwrap();
    let token = CancelToken::new();
    let waiter = {
        let (stream, token) = (stream.clone(), token.clone());
        std::thread::spawn(move || block_on(stream.sync(Some(token))))
    };
    assert!(eventually(|| runtime.diagnostics().live_waiters == 1));
    let cancelled_at = Instant::now();
    token.cancel();
    let outcome = waiter.join().unwrap();
    assert!(cancelled_at.elapsed() < Duration::from_secs(1));
    assert!(matches!(outcome, Err(WeirError::Cancelled { .. })), "{outcome:?}");
    let diagnostics = runtime.diagnostics();
    assert_eq!((diagnostics.live_waiters, diagnostics.live_fences), (0, 0));
    hold.release();
    block_on(stream.sync(None)).unwrap();
}

#[test]
fn a_dropped_wait_leaves_no_waiter_or_fence() {
    let runtime = WeirRuntime::open(Backend::Cpu).unwrap();
    let stream = runtime.default_stream();
    let hold = stream.hold().unwrap();
    let mut wait = Box::pin(stream.sync(None));
    assert!((&mut wait).now_or_never().is_none());
    assert_eq!(runtime.diagnostics().live_waiters, 1);
    drop(wait);
    let diagnostics = runtime.diagnostics();
    assert_eq!((diagnostics.live_waiters, diagnostics.live_fences), (0, 0));
    hold.release();
}

#[test]
fn errors_arrive_as_their_typed_variant() {
    let runtime = WeirRuntime::open(Backend::Cpu).unwrap();
    let stream = runtime.default_stream();
    let small = stream.zeros(4).unwrap();
    match stream.write(small.clone(), vec![0; 8], 0) {
        Err(WeirError::OutOfRange { description: message }) => {
            assert!(message.contains("8 bytes at offset 0 do not fit in a buffer of 4 bytes"), "{message}")
        }
        other => panic!("expected OutOfRange, got {other:?}"),
    }
    let custom = Kernel::custom("gpu_only".into(), None, None, None);
    match stream.execute(custom, grid(), vec![]) {
        Err(WeirError::Unsupported { backend, description }) => {
            assert_eq!(backend, weir_ffi::BackendKind::Cpu);
            assert!(description.contains("gpu_only"), "{description}")
        }
        other => panic!("expected Unsupported, got {other:?}"),
    }
    let bad_grid = Grid { groups_x: 0, ..grid() };
    assert!(matches!(
        stream.execute(Kernel::builtin(BuiltinOp::Delay), bad_grid, vec![Arg::U32 { value: 0 }]),
        Err(WeirError::InvalidArgument { .. })
    ));
    let other = WeirRuntime::open(Backend::Cpu).unwrap();
    assert!(matches!(other.default_stream().memset_zero(small), Err(WeirError::ForeignHandle { .. })));
}

#[test]
fn shutdown_waits_for_work_then_refuses_use_and_is_idempotent() {
    let runtime = WeirRuntime::open(Backend::Cpu).unwrap();
    let stream = runtime.default_stream();
    let buffer = stream.zeros(4).unwrap();
    stream.execute(Kernel::builtin(BuiltinOp::Delay), grid(), vec![Arg::U32 { value: 20_000 }]).unwrap();
    let fence = stream.fence().unwrap();
    runtime.shutdown().unwrap();
    assert!(fence.is_complete(), "shutdown waits for work in flight");
    runtime.shutdown().unwrap();
    assert!(matches!(block_on(stream.sync(None)), Err(WeirError::Closed { .. })));
    assert!(matches!(block_on(stream.read(buffer, 0, None, None)), Err(WeirError::Closed { .. })));
    let _ = Arc::strong_count(&runtime);
}
