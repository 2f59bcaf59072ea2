//! Failures follow the data: a failed op publishes failed versions of what
//! it writes, every later reader of them (on any stream) fails with it, its
//! stream reports it to one fence and goes on, and a full overwrite heals.

use weir_core::{Arg, ElementType, Error, Grid, Kernel, Runtime, Stream};

use crate::common::words;

const LAUNCH_BOUNDED: &str = "extern \"C\" __global__ void __launch_bounds__(32) \
    deliberately_failing(unsigned int* out) { out[threadIdx.x] = 1u; }";

/// A kernel that fails on the device, for every backend that can express one.
fn failing_kernel() -> Kernel {
    Kernel::custom("deliberately_failing")
        .cpu(|_| Err("deliberate failure".into()))
        // Compiles, but needs 16 KiB where it is given less: recording it fails.
        .wgsl(
            "@group(0) @binding(0) var<storage, read_write> out: array<vec4<u32>, 1024>;\n\
             override block_x: u32 = 1;\n\
             @compute @workgroup_size(block_x)\nfn main() { out[0] = vec4<u32>(1u); }\n",
            "main",
        )
        // Launched with more threads per block than it allows: a launch failure.
        .cuda(LAUNCH_BOUNDED, "deliberately_failing")
        .hip(LAUNCH_BOUNDED, "deliberately_failing")
        .build()
}

/// Admits the failing kernel on `s`, writing `target`; false if this backend
/// has no way to express one.
fn admit_failing_write(runtime: &Runtime, s: &Stream, target: &weir_core::Buffer) -> bool {
    match s.execute(&failing_kernel(), Grid::linear(256, 64), &[Arg::write(target)]) {
        Err(Error::Unsupported { .. }) => {
            eprintln!("  {}: no failing kernel for this backend, skipped", runtime.info().backend.name());
            false
        }
        // Failing on the device: found later, as the op runs.
        Ok(()) => true,
        // Failing at launch: found now.
        Err(error) => {
            assert!(matches!(error, Error::OpFailed { .. }), "{error:?}");
            true
        }
    }
}

/// Holds a new stream of `runtime` and admits two failing ops on it, one
/// found as it runs (at launch on CUDA), then one found at admission; the
/// stream and its hold, or None where the backend has no failing kernel.
fn two_failures_behind_a_hold(runtime: &Runtime) -> Option<(Stream, crate::common::Held)> {
    let s = runtime.new_stream().unwrap();
    let (target, other) = (s.upload(&[1u32; 256]).unwrap(), s.zeros(ElementType::U32, 16).unwrap());
    let held = crate::common::hold(&s);
    if !admit_failing_write(runtime, &s, &target) {
        held.release();
        return None;
    }
    assert!(s.fail_write(&other, "a deliberate failure").is_err());
    Some((s, held))
}

fn is_the_failure(error: &Error) -> bool {
    let message = error.to_string().to_lowercase();
    matches!(error, Error::OpFailed { .. })
        && ["deliberate", "launch", "binding"].iter().any(|word| message.contains(word))
}

conformance! {
    fn a_failed_write_fails_its_readers_on_every_stream_not_its_stream(runtime: &Runtime) {
        let (s, t, u) = (runtime.new_stream().unwrap(), runtime.new_stream().unwrap(), runtime.new_stream().unwrap());
        let shared = s.upload(&[4u32; 256]).unwrap();
        let target = s.upload(&[1u32; 256]).unwrap();
        if !admit_failing_write(runtime, &s, &target) {
            return;
        }
        // A reader on another stream gets the failure, never the old bytes.
        let read = t.read(&target);
        assert!(matches!(&read, Err(error) if is_the_failure(error)), "T read {read:?}");
        // And it travels on: S -> T -> U.
        let mid = t.empty(ElementType::Bytes, 1024).unwrap();
        let _ = t.copy(&target, &mid);
        let chained = u.read(&mid);
        assert!(matches!(&chained, Err(error) if is_the_failure(error)), "U read {chained:?}");
        // S's fence reports its failure once; S itself goes on.
        let error = s.fence().unwrap().wait().unwrap_err();
        assert!(is_the_failure(&error), "{error}");
        assert_eq!(words(&s.read(&shared).unwrap()), vec![4; 256], "S no longer runs healthy work");
        s.fence().unwrap().wait().expect("the next fence after healthy work is clean");
        // Writes after the failure happen, for every stream to see.
        let fresh = s.upload(&[7u32; 4]).unwrap();
        s.fill_u32(&shared, 9).unwrap();
        assert_eq!(words(&t.read(&fresh).unwrap()), vec![7; 4]);
        assert_eq!(words(&t.read(&shared).unwrap()), vec![9; 256]);
        // A full overwrite makes the failed buffer healthy again.
        s.fill_u32(&target, 5).unwrap();
        assert_eq!(words(&t.read(&target).unwrap()), vec![5; 256]);
        assert!(t.fence().unwrap().wait().is_err(), "T's fence reports its failed copy");
        t.fence().unwrap().wait().expect("and only once");
    }

    fn a_partial_write_keeps_a_failed_version_failed(runtime: &Runtime) {
        let (s, t) = (runtime.new_stream().unwrap(), runtime.new_stream().unwrap());
        let target = s.upload(&[1u32; 256]).unwrap();
        if !admit_failing_write(runtime, &s, &target) {
            return;
        }
        // Writing a part leaves the rest as the failed op left it.
        let _ = t.write(&target, 0, &[3u32; 4]);
        assert!(t.read(&target).is_err(), "a partial write healed a failed buffer");
        // A whole write does heal it.
        t.write(&target, 0, &[3u32; 256]).unwrap();
        assert_eq!(words(&t.read(&target).unwrap()), vec![3; 256]);
    }
}

#[test]
fn panicking_cpu_kernel_is_an_error_not_a_crash() {
    let runtime = weir_core::Runtime::open(weir_core::BackendKind::Cpu).unwrap();
    let s = runtime.new_stream().unwrap();
    let out = s.zeros(ElementType::Bytes, 16).unwrap();
    let kernel = Kernel::custom("panics").cpu(|_| panic!("kernel bug")).build();
    s.execute(&kernel, Grid::linear(4, 4), &[Arg::write(&out)]).unwrap();
    let error = s.fence().unwrap().wait().unwrap_err();
    assert!(error.to_string().contains("kernel bug"), "{error}");
    let t = runtime.new_stream().unwrap();
    assert_eq!(t.read_as::<u32>(&t.upload(&[1u32, 2]).unwrap()).unwrap(), vec![1, 2]);
    runtime.close().unwrap();
}

conformance! {
    fn a_failure_at_admission_follows_the_data_like_one_found_later(runtime: &Runtime) {
        let (s, t) = (runtime.new_stream().unwrap(), runtime.new_stream().unwrap());
        let target = s.upload(&[1u32; 16]).unwrap();
        let error = s.fail_write(&target, "a deliberate failure").unwrap_err();
        assert!(error.to_string().contains("deliberate"), "{error}");
        let read = t.read(&target).unwrap_err();
        assert!(read.to_string().contains("deliberate"), "the reader names the original failure: {read}");
        assert!(s.fence().unwrap().wait().is_err());
        s.fence().unwrap().wait().unwrap();
        t.fill_u32(&target, 2).unwrap();
        assert_eq!(words(&s.read(&target).unwrap()), vec![2; 16]);
    }
}

conformance! {
    /// A read refused for its failed input says nothing of how far its
    /// stream got: a writer still waits for that stream's earlier reader.
    fn a_failed_read_does_not_count_as_its_stream_finished(runtime: &Runtime) {
        let (r, w, check) = (runtime.new_stream().unwrap(), runtime.new_stream().unwrap(), runtime.new_stream().unwrap());
        let data = w.upload(&[5u32; 256]).unwrap();
        let failed = w.upload(&[1u32; 256]).unwrap();
        if !admit_failing_write(runtime, &w, &failed) {
            return;
        }
        assert!(w.fence().unwrap().wait().is_err(), "the failing write did not fail");
        let out = r.empty(ElementType::Bytes, 1024).unwrap();
        let held = crate::common::hold(&r);
        r.copy(&data, &out).unwrap();
        assert!(r.enqueue_read(&failed).is_err(), "a read of a failed buffer was admitted");
        let before = runtime.diagnostics().inserted_waits;
        w.fill_u32(&data, 9).unwrap();
        assert_eq!(runtime.diagnostics().inserted_waits - before, 1, "the write must wait for the held copy");
        let written = w.fence().unwrap();
        if held.is_gate() {
            std::thread::sleep(std::time::Duration::from_millis(20));
            assert!(!written.is_complete(), "the write ran before the held copy read");
        }
        held.release();
        written.wait().unwrap();
        assert_eq!(check.read_as::<u32>(&out).unwrap(), vec![5; 256]);
        assert_eq!(check.read_as::<u32>(&data).unwrap(), vec![9; 256]);
    }
}

conformance! {
    fn a_stream_fence_counts_the_failures_found_at_admission_and_as_ops_ran(runtime: &Runtime) {
        let Some((s, held)) = two_failures_behind_a_hold(runtime) else { return };
        held.release();
        let error = s.fence().unwrap().wait().unwrap_err();
        assert!(is_the_failure(&error), "{error}");
        assert!(error.to_string().ends_with("(and 1 more failed ops)"), "both failures counted: {error}");
        s.fence().unwrap().wait().expect("each failure is reported once");
    }

    fn a_runtime_fence_reports_the_total_of_every_streams_failures(runtime: &Runtime) {
        let streams: Vec<Stream> = (0..3).map(|_| runtime.new_stream().unwrap()).collect();
        for s in &streams {
            for _ in 0..2 {
                let target = s.upload(&[1u32; 256]).unwrap();
                if !admit_failing_write(runtime, s, &target) {
                    return;
                }
                assert!(s.fail_write(&s.zeros(ElementType::U32, 16).unwrap(), "a deliberate failure").is_err());
            }
        }
        let error = runtime.fence().unwrap().wait().unwrap_err();
        assert!(is_the_failure(&error), "{error}");
        assert!(error.to_string().ends_with("(and 11 more failed ops)"), "12 failures on 3 streams: {error}");
        for s in &streams {
            s.fence().unwrap().wait().expect("the runtime fence reported every stream's failures");
        }
        runtime.fence().unwrap().wait().expect("once");
    }

    fn a_dropped_streams_unreported_failures_reach_the_runtimes_next_fence(runtime: &Runtime) {
        // Dropped while its work waits (the runtime's fence is made as it
        // retires), then dropped once its work has run.
        for fence_while_retiring in [true, false] {
            let Some((s, held)) = two_failures_behind_a_hold(runtime) else { return };
            drop(s);
            let fence = fence_while_retiring.then(|| runtime.fence().unwrap());
            held.release();
            let fence = fence.unwrap_or_else(|| {
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
                while runtime.diagnostics().retiring_streams > 0 {
                    assert!(std::time::Instant::now() < deadline, "the dropped stream never retired");
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                runtime.fence().unwrap()
            });
            let error = fence.wait().unwrap_err();
            assert!(is_the_failure(&error), "{error}");
            assert!(error.to_string().ends_with("(and 1 more failed ops)"), "both failures counted: {error}");
            runtime.fence().unwrap().wait().expect("each failure is reported once");
        }
    }

    fn an_op_failing_for_a_failed_input_fails_on_its_own_stream_naming_the_original(runtime: &Runtime) {
        // Retired streams' slots are reused: the numbers a runtime gives its
        // streams are what every report names, whatever the backend counted.
        let churned: Vec<Stream> = (0..4).map(|_| runtime.new_stream().unwrap()).collect();
        drop(churned);
        crate::common::settled_diagnostics(runtime);
        let s = runtime.new_stream().unwrap();
        let readers: Vec<Stream> = (0..3).map(|_| runtime.new_stream().unwrap()).collect();
        let target = s.upload(&[1u32; 256]).unwrap();
        let outs: Vec<_> = readers.iter().map(|r| r.empty(ElementType::U32, 256).unwrap()).collect();
        let held = crate::common::hold(&s);
        if !admit_failing_write(runtime, &s, &target) {
            return;
        }
        // Admitted while the writer is held: their input fails as they run
        // (at admission where the write failed at launch).
        let reads: Vec<_> = readers
            .iter()
            .zip(&outs)
            .map(|(r, out)| {
                let _ = r.copy(&target, out);
                r.enqueue_read(out)
            })
            .collect();
        held.release();
        let original = format!("op failed on stream {}", s.index());
        for (r, read) in readers.iter().zip(reads) {
            let error = read.and_then(|read| read.wait()).unwrap_err();
            match &error {
                Error::OpFailed { stream, message } => {
                    assert_eq!(*stream, r.index() as u32, "a read on stream {} names another: {error}", r.index());
                    assert!(message.contains(&original) && is_the_failure(&error), "the original is named: {error}");
                }
                other => panic!("expected OpFailed, got {other:?}"),
            }
            match r.fence().unwrap().wait() {
                Err(Error::OpFailed { stream, message }) => {
                    assert_eq!(stream, r.index() as u32, "stream {}'s fence: {message}", r.index());
                    assert!(message.ends_with("(and 1 more failed ops)"), "its copy and its read: {message}");
                }
                other => panic!("expected stream {}'s fence to report its copy and read, got {other:?}", r.index()),
            }
        }
        match s.fence().unwrap().wait() {
            Err(Error::OpFailed { stream, message }) => {
                assert_eq!(stream, s.index() as u32, "{message}");
                assert!(!message.contains("more failed ops"), "the writer failed once: {message}");
            }
            other => panic!("expected the writer's failure, got {other:?}"),
        }
    }
}
