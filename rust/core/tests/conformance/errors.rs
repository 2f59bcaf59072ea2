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
