//! `zeros` and `memset_zero`: exact zero, on the device, without host data.

use weir_core::ElementType;

use crate::common::hold;

const ODD_SIZE: u64 = (1 << 20) + 4;

conformance! {
    fn zeros_are_exact_zero_on_the_same_stream_without_host_copies(runtime: &Runtime) {
        let s = runtime.default_stream();
        let uploads = runtime.diagnostics().backend.host_to_device_copies;
        let z = s.zeros(ElementType::Bytes, ODD_SIZE).unwrap();
        assert_eq!(runtime.diagnostics().backend.host_to_device_copies, uploads, "zeros made a host-to-device copy");
        let bytes = s.read(&z).unwrap();
        assert_eq!(bytes.len() as u64, ODD_SIZE);
        assert!(bytes.iter().all(|&b| b == 0));
    }
}

conformance! {
    fn zeros_are_exact_zero_across_streams(runtime: &Runtime) {
        let (s, t) = (runtime.new_stream().unwrap(), runtime.new_stream().unwrap());
        let held = hold(&s);
        let uploads = runtime.diagnostics().backend.host_to_device_copies;
        let z = s.zeros(ElementType::Bytes, ODD_SIZE).unwrap();
        assert_eq!(runtime.diagnostics().backend.host_to_device_copies, uploads, "zeros made a host-to-device copy");
        let pending = t.enqueue_read(&z).unwrap();
        held.release();
        assert!(pending.wait().unwrap().iter().all(|&b| b == 0));
    }
}

#[test]
fn empty_buffers_are_not_zeroed() {
    // Guards the tests above: on the CPU backend fresh memory is deliberately dirty,
    // so a `zeros` that forgot to zero would be caught.
    let runtime = weir_core::Runtime::open(weir_core::BackendKind::Cpu).unwrap();
    let s = runtime.default_stream();
    let e = s.empty(ElementType::Bytes, 64).unwrap();
    assert!(s.read(&e).unwrap().iter().any(|&b| b != 0));
}

conformance! {
    fn memset_zero_clears_a_dirty_buffer(runtime: &Runtime) {
        let (s, t) = (runtime.new_stream().unwrap(), runtime.new_stream().unwrap());
        let dirty = s.upload(&[0xDEAD_BEEFu32; 4099]).unwrap();
        t.memset_zero(&dirty).unwrap();
        assert_eq!(s.read_as::<u32>(&dirty).unwrap(), vec![0; 4099]);
    }
}
