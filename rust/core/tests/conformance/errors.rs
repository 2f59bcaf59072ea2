//! A failed op poisons its stream, and only its stream.

use weir_core::{Arg, Error, Grid, Kernel};

const LAUNCH_BOUNDED: &str = "extern \"C\" __global__ void __launch_bounds__(32) \
    deliberately_failing(unsigned int* out) { out[threadIdx.x] = 1u; }";

/// A kernel that fails on the device, for every backend that can express one.
fn failing_kernel() -> Kernel {
    Kernel::custom("deliberately_failing")
        .cpu(|_| Err("deliberate failure".into()))
        // Fails to compile; the device's diagnostic quotes the offending line.
        .wgsl("@compute @workgroup_size(1)\nfn main() { deliberate failure }\n", "main")
        // Launched with more threads per block than it allows: a launch failure.
        .cuda(LAUNCH_BOUNDED, "deliberately_failing")
        .hip(LAUNCH_BOUNDED, "deliberately_failing")
        .build()
}

conformance! {
    fn failed_op_poisons_only_its_stream(runtime: &Runtime) {
        let (s, t) = (runtime.new_stream().unwrap(), runtime.new_stream().unwrap());
        let shared = s.upload(&[4u32; 256]).unwrap();
        let target = s.zeros(1024).unwrap();
        match s.execute(&failing_kernel(), Grid::linear(256, 64), &[Arg::write(&target)]) {
            Err(Error::Unsupported { .. }) => {
                eprintln!("  {}: no failing kernel for this backend, skipped", runtime.info().backend.name());
                return;
            }
            Ok(()) => {}
            // Failing at launch poisons the stream just as failing on the device does.
            Err(error) => assert!(matches!(error, Error::OpFailed { .. }), "{error:?}"),
        }
        let error = s.fence().unwrap().wait().unwrap_err();
        assert!(matches!(error, Error::OpFailed { .. }), "{error:?}");
        let message = error.to_string().to_lowercase();
        assert!(message.contains("deliberate") || message.contains("launch"), "{error}");
        // Sticky: later fences and reads on s report it too.
        assert!(s.fence().unwrap().wait().is_err());
        assert!(s.read(&shared).is_err());
        // Other streams keep working, also on buffers s wrote before failing.
        let out = t.empty(1024).unwrap();
        t.copy(&shared, &out).unwrap();
        assert_eq!(t.read_as::<u32>(&out).unwrap(), vec![4; 256]);
        t.fence().unwrap().wait().unwrap();
    }
}

#[test]
fn panicking_cpu_kernel_is_an_error_not_a_crash() {
    let runtime = weir_core::Runtime::open(weir_core::BackendKind::Cpu).unwrap();
    let s = runtime.new_stream().unwrap();
    let out = s.zeros(16).unwrap();
    let kernel = Kernel::custom("panics").cpu(|_| panic!("kernel bug")).build();
    s.execute(&kernel, Grid::linear(4, 4), &[Arg::write(&out)]).unwrap();
    let error = s.fence().unwrap().wait().unwrap_err();
    assert!(error.to_string().contains("kernel bug"), "{error}");
    let t = runtime.new_stream().unwrap();
    assert_eq!(t.read_as::<u32>(&t.upload(&[1u32, 2]).unwrap()).unwrap(), vec![1, 2]);
    runtime.close().unwrap();
}
