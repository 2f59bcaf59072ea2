//! The bound on queued work: a full queue makes blocking admission wait,
//! non-waiting admission refuse, and `room()` pending, until the device takes
//! some; every queued op's share comes back.

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use futures::executor::block_on;
use weir_core::{BackendKind, ElementType, Error, QueueLimit, Runtime};

use crate::common::{hold, CountingWaker, Held};

/// A runtime of `runtime`'s backend with `limit`, and its held stream. None
/// where the backend has no gate: a delay would let the queue drain on its own.
fn limited(runtime: &Runtime, limit: QueueLimit) -> Option<(Runtime, weir_core::Stream, Held)> {
    let limited = Runtime::builder(runtime.info().backend).queue_limit(limit).open().expect("open with a queue limit");
    assert_eq!(limited.queue_limit(), limit);
    let stream = limited.new_stream().expect("stream");
    let held = hold(&stream);
    if !held.is_gate() {
        eprintln!("no gate on {}: the queue is not held", runtime.info().backend.name());
        held.release();
        return None;
    }
    Some((limited, stream, held))
}

conformance! {
    fn a_full_queue_refuses_non_waiting_admission_until_the_device_takes_some(runtime: &Runtime) {
        let limit = QueueLimit { ops: 8, host_bytes: 1 << 20 };
        let Some((limited, stream, held)) = limited(runtime, limit) else { return };
        let out = limited.default_stream().zeros(ElementType::U32, 64).expect("buffer");
        limited.default_stream().fence().and_then(|fence| fence.wait()).expect("zeroed");
        let eager = stream.without_waiting();
        for value in 0..8 {
            eager.fill_u32(&out, value).expect("room for eight ops");
        }
        assert_eq!(limited.diagnostics().ops_in_queue, 8);
        match eager.fill_u32(&out, 99) {
            Err(Error::QueueFull { ops: 8, limit: full, .. }) => assert_eq!(full, limit),
            other => panic!("a ninth op was not refused as full: {other:?}"),
        }
        // A foreign op (a GEMM is one) takes room as any op does: it bypassed the limit.
        let foreign = eager.external_write(&[&out], |_| Ok(()));
        assert!(matches!(foreign, Err(Error::QueueFull { .. })), "a foreign op on a full queue: {foreign:?}");
        // Refused means not admitted: nothing was queued or published.
        assert_eq!(limited.diagnostics().ops_in_queue, 8);
        let mut room = pin!(stream.room());
        let waker = futures::task::noop_waker();
        assert!(room.as_mut().poll(&mut Context::from_waker(&waker)).is_pending(), "room while full");
        held.release();
        block_on(room).expect("room once the stream ran");
        eager.external_write(&[&out], |_| Ok(())).expect("a foreign op admitted once there is room");
        eager.fill_u32(&out, 42).expect("admitted once there is room");
        assert_eq!(stream.read_as::<u32>(&out).expect("read"), vec![42; 64]);
        // The worker drops the read's share just after delivering it.
        let d = crate::common::settled_diagnostics(&limited);
        assert_eq!((d.ops_in_queue, d.host_bytes_in_queue), (0, 0), "shares not given back: {d:?}");
        assert!(d.peak_ops_in_queue >= 8, "{d:?}");
        limited.close().expect("close");
    }

    fn a_blocking_admission_waits_for_room_and_then_admits(runtime: &Runtime) {
        let Some((limited, stream, held)) = limited(runtime, QueueLimit { ops: 4, host_bytes: 1 << 20 }) else {
            return;
        };
        let out = stream.empty(ElementType::U32, 16).expect("buffer");
        for value in 0..4 {
            stream.fill_u32(&out, value).expect("room for four ops");
        }
        let admitted = Arc::new(AtomicBool::new(false));
        let producer = {
            let (stream, out, admitted) = (stream.clone(), out.clone(), admitted.clone());
            std::thread::spawn(move || {
                let filled = stream.fill_u32(&out, 7);
                admitted.store(true, Ordering::SeqCst);
                filled
            })
        };
        // However slow this machine, the producer cannot get past a full
        // queue whose stream is held.
        std::thread::sleep(Duration::from_millis(100));
        assert!(!admitted.load(Ordering::SeqCst), "admission did not wait for room");
        held.release();
        producer.join().expect("producer").expect("admitted once there is room");
        assert_eq!(stream.read_as::<u32>(&out).expect("read"), vec![7; 16]);
        limited.close().expect("close");
    }

    fn queued_host_bytes_are_bounded_too(runtime: &Runtime) {
        let limit = QueueLimit { ops: 1 << 16, host_bytes: 1 << 20 };
        let Some((limited, stream, held)) = limited(runtime, limit) else { return };
        let chunk = vec![3u8; 600 << 10];
        let out = stream.empty(ElementType::Bytes, chunk.len() as u64).expect("buffer");
        let eager = stream.without_waiting();
        eager.write_bytes(&out, 0, &chunk).expect("below the byte limit");
        assert_eq!(limited.diagnostics().host_bytes_in_queue, chunk.len() as u64);
        // Room is asked before, not for, an admission: one more fits while below.
        eager.write_bytes(&out, 0, &chunk).expect("still below the byte limit");
        assert!(matches!(eager.write_bytes(&out, 0, &chunk), Err(Error::QueueFull { .. })));
        assert!(matches!(eager.upload_as(ElementType::Bytes, &chunk), Err(Error::QueueFull { .. })));
        held.release();
        block_on(stream.room()).expect("room");
        assert_eq!(stream.read(&out).expect("read"), chunk);
        assert_eq!(crate::common::settled_diagnostics(&limited).host_bytes_in_queue, 0);
        limited.close().expect("close");
    }

    fn closing_ends_a_wait_for_room(runtime: &Runtime) {
        let Some((limited, stream, held)) = limited(runtime, QueueLimit { ops: 1, host_bytes: 1 << 20 }) else {
            return;
        };
        let out = stream.empty(ElementType::U32, 4).expect("buffer");
        stream.fill_u32(&out, 1).expect("room for one op");
        // The wait is under way, its waker registered, before the close.
        let mut room = pin!(stream.room());
        let wakes = Arc::new(CountingWaker::default());
        let waker = Waker::from(wakes.clone());
        assert!(room.as_mut().poll(&mut Context::from_waker(&waker)).is_pending(), "room while full");
        let closer = {
            let limited = limited.clone();
            std::thread::spawn(move || limited.close())
        };
        held.release();
        closer.join().expect("closer").expect("close");
        // Drained, then closed: the wait was woken, and ends either way.
        assert!(wakes.0.load(Ordering::SeqCst) > 0, "the wait for room was never woken");
        let ended = room.as_mut().poll(&mut Context::from_waker(&waker));
        assert!(matches!(ended, Poll::Ready(Ok(()) | Err(Error::Closed))), "{ended:?}");
        assert!(matches!(stream.fill_u32(&out, 2), Err(Error::Closed)));
        // Asked once closed, the room is no room: its queue is empty, and it said `Ok`.
        assert!(matches!(block_on(stream.room()), Err(Error::Closed)));
    }

    fn a_flood_of_ops_never_queues_past_the_limit(runtime: &Runtime) {
        let limit = QueueLimit { ops: 256, host_bytes: 1 << 20 };
        let limited = Runtime::builder(runtime.info().backend).queue_limit(limit).open().expect("open");
        let stream = limited.default_stream();
        let out = stream.zeros(ElementType::U32, 4).expect("buffer");
        // Held a moment, the flood fills the queue before the device takes any.
        let held = hold(&stream);
        let gated = held.is_gate();
        let releaser = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            held.release();
        });
        for value in 0..20_000u32 {
            stream.fill_u32(&out, value).expect("fill");
        }
        releaser.join().expect("releaser");
        assert_eq!(stream.read_as::<u32>(&out).expect("read"), vec![19_999; 4]);
        let d = limited.diagnostics();
        // One producer: the check and the charge are one admission apart at most.
        assert!(d.peak_ops_in_queue <= limit.ops + 1, "the queue outgrew its limit: {d:?}");
        assert!(!gated || d.peak_ops_in_queue >= limit.ops, "the flood never filled the queue: {d:?}");
        limited.close().expect("close");
    }

    fn a_delay_keeps_its_share_until_its_stream_passes_it(runtime: &Runtime) {
        // CUDA and HIP time a delay on the device: it leaves the host's queue as it is issued.
        if matches!(runtime.info().backend, BackendKind::Cuda | BackendKind::Hip) {
            eprintln!("a delay on {} is device work", runtime.info().backend.name());
            return;
        }
        let own = Runtime::builder(runtime.info().backend).open().expect("open");
        let stream = own.new_stream().expect("stream");
        stream.delay(Duration::from_millis(300)).expect("delay");
        assert_eq!(own.diagnostics().ops_in_queue, 1, "a delay the stream has not passed left the queue");
        stream.fence().and_then(|fence| fence.wait()).expect("the delay passed");
        assert_eq!(crate::common::settled_diagnostics(&own).ops_in_queue, 0, "the delay's share never came back");
        own.close().expect("close");
    }

    fn a_queue_limit_of_nothing_is_invalid(runtime: &Runtime) {
        for limit in [QueueLimit { ops: 0, host_bytes: 1 }, QueueLimit { ops: 1, host_bytes: 0 }] {
            match Runtime::builder(runtime.info().backend).queue_limit(limit).open() {
                Err(Error::InvalidArgument(_)) => {}
                other => panic!("{limit:?} was not refused: {other:?}"),
            }
        }
    }
}

#[test]
fn a_cpu_kernel_admitting_into_a_full_queue_does_not_wait_for_itself() {
    use weir_core::{Arg, Grid, Kernel};
    let limited =
        Runtime::builder(BackendKind::Cpu).queue_limit(QueueLimit { ops: 1, host_bytes: 1 << 20 }).open().expect("cpu");
    let stream = limited.default_stream();
    let out = stream.zeros(ElementType::U32, 4).expect("buffer");
    let other = limited.new_stream().expect("stream");
    let inner = other.clone();
    let target = out.clone();
    // The kernel's own op fills the queue; what it admits from inside must
    // not wait for the queue to drain, which waits for the kernel.
    let kernel = Kernel::custom("admit_inside")
        .cpu(move |_| {
            inner.fill_u32(&target, 5).map_err(|error| error.to_string())?;
            inner.fill_u32(&target, 6).map_err(|error| error.to_string())
        })
        .build();
    let scratch = stream.zeros(ElementType::U32, 1).expect("scratch");
    stream.execute(&kernel, Grid::linear(1, 1), &[Arg::read(&scratch)]).expect("kernel");
    limited.fence().and_then(|fence| fence.wait()).expect("the kernel and its ops ran");
    assert_eq!(other.read_as::<u32>(&out).expect("read"), vec![6; 4]);
    limited.close().expect("close");
}
