//! What goes wrong on a shared wgpu device outside any op reaches only the
//! runtimes it concerns (wgpu only; skipped by name where no adapter is
//! available). One test, in a process of its own: it breaks the process's
//! shared device on purpose, which would fail any test beside it.
#![cfg(feature = "wgpu")]

#[path = "support/wgpu_runtime.rs"]
mod wgpu_runtime;

use std::time::{Duration, Instant};

use weir_core::Error;
use wgpu_runtime::device_of;

#[test]
fn a_fault_outside_any_op_fails_the_runtimes_open_then_and_no_later_one() {
    let Some(first) = wgpu_runtime::open() else { return };
    let device = device_of(&first);
    // An invalid call outside any op: no scope catches it.
    let _invalid = device.create_buffer(&weir_core::wgpu::BufferDescriptor {
        label: Some("invalid: map for reading and writing"),
        size: 16,
        usage: weir_core::wgpu::BufferUsages::MAP_READ | weir_core::wgpu::BufferUsages::MAP_WRITE,
        mapped_at_creation: false,
    });
    let s = first.default_stream();
    let error = s.upload(&[1u32, 2]).and_then(|buffer| s.read_as::<u32>(&buffer)).unwrap_err();
    assert!(error.to_string().contains("outside any op"), "{error}");
    // A runtime opened since is not failed by it: it was, for the process's life.
    let second = wgpu_runtime::open().unwrap();
    let t = second.default_stream();
    assert_eq!(t.read_as::<u32>(&t.upload(&[1u32, 2]).unwrap()).unwrap(), vec![1, 2]);

    // A lost device serves no runtime opened after the loss: a new device does.
    device_of(&second).destroy();
    assert!(t.upload(&[3u32]).and_then(|buffer| t.read_as::<u32>(&buffer)).is_err(), "read from a destroyed device");
    // wgpu reports the loss from a poll once the destroyed device's queue is
    // empty, which a busy host can put off: after the loss means once it is known.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !matches!(t.fence(), Err(Error::DeviceLost { .. })) {
        assert!(Instant::now() < deadline, "the destroyed device's loss was never reported");
        std::thread::sleep(Duration::from_millis(5));
    }
    let third = wgpu_runtime::open().unwrap();
    let u = third.default_stream();
    assert_eq!(u.read_as::<u32>(&u.upload(&[4u32, 5]).unwrap()).unwrap(), vec![4, 5]);
    for runtime in [first, second, third] {
        let _ = runtime.close();
    }
}
