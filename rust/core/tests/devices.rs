//! `devices()` lists what every backend compiled in sees, each device as
//! opening it then reports it. A backend that cannot run here lists nothing
//! and is reported as skipped, by name, unless `WEIR_REQUIRE_BACKENDS` names it.

use weir_core::{devices, BackendKind, DeviceInfo, Error, Runtime};

fn required() -> Vec<BackendKind> {
    std::env::var("WEIR_REQUIRE_BACKENDS").unwrap_or_default().split(',').filter_map(BackendKind::from_name).collect()
}

fn listed(kind: BackendKind) -> Vec<DeviceInfo> {
    devices().into_iter().filter(|device| device.backend == kind).collect()
}

#[test]
fn the_cpu_is_listed_once_as_device_zero_with_the_hosts_memory() {
    let cpus = listed(BackendKind::Cpu);
    assert_eq!(cpus.len(), 1, "{cpus:?}");
    let cpu = &cpus[0];
    assert_eq!(cpu.index, 0);
    assert!(cpu.software, "{cpu:?}");
    assert!(!cpu.name.is_empty());
    if cfg!(any(target_os = "linux", target_os = "macos", target_os = "windows")) {
        // The system tells the installed memory on each of these.
        assert!(cpu.memory_bytes.is_some_and(|bytes| bytes > 1 << 20), "{cpu:?}");
    }
    if cfg!(target_arch = "x86_64") {
        // Every x86-64 processor names itself (its brand string).
        assert!(!cpu.name.starts_with("host CPU"), "the processor's name was not found: {cpu:?}");
    }
    let runtime = Runtime::open(BackendKind::Cpu).expect("cpu");
    assert_eq!(&runtime.info(), cpu);
}

#[test]
fn every_listed_device_opens_and_reports_what_the_listing_says() {
    let all = devices();
    for device in &all {
        let runtime = Runtime::open_device(device.backend, device.index)
            .unwrap_or_else(|error| panic!("listed device {device:?} does not open: {error}"));
        assert_eq!(&runtime.info(), device, "opened {} {}", device.backend, device.index);
        eprintln!(
            "{} {}: {} ({:?} bytes, limits {:?})",
            device.backend, device.index, device.name, device.memory_bytes, device.limits
        );
        runtime.close().expect("close");
    }
    // Best backend first, and each backend's devices in index order.
    let order = |kind: BackendKind| BackendKind::CONCRETE.iter().position(|&k| k == kind);
    for pair in all.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        assert!((order(a.backend), a.index) < (order(b.backend), b.index), "out of order: {all:?}");
    }
}

#[test]
fn a_backend_that_opens_lists_the_device_it_opens_and_one_that_cannot_lists_none() {
    for kind in [BackendKind::Cuda, BackendKind::Hip, BackendKind::Wgpu] {
        let devices = listed(kind);
        match Runtime::open(kind) {
            Ok(runtime) => {
                let first = devices.first().unwrap_or_else(|| panic!("{kind} opens but lists nothing"));
                assert_eq!(first.index, 0);
                assert_eq!(runtime.info(), *first, "{kind}: the default device is the first listed");
                runtime.close().expect("close");
            }
            Err(error @ Error::Unavailable { .. }) => {
                assert!(!required().contains(&kind), "required backend {kind} is unavailable: {error}");
                assert!(devices.is_empty(), "{kind} does not open ({error}) but lists {devices:?}");
                eprintln!("{kind}: skipped ({error})");
            }
            Err(other) => panic!("opening {kind} failed with an unexpected error: {other}"),
        }
    }
}

#[test]
fn an_index_past_the_listing_is_unavailable_and_auto_takes_no_index() {
    for kind in [BackendKind::Cuda, BackendKind::Hip, BackendKind::Wgpu] {
        let past = listed(kind).len();
        match Runtime::open_device(kind, past) {
            Err(Error::Unavailable { .. }) => {}
            other => panic!("{kind} device {past} (past the listing): {other:?}"),
        }
    }
    assert!(matches!(Runtime::open_device(BackendKind::Auto, 1), Err(Error::InvalidArgument(_))));
}

#[test]
fn every_listed_device_has_usable_launch_limits() {
    for device in devices() {
        let limits = device.limits;
        assert!(limits.max_block.iter().all(|&n| n >= 1), "{device:?}");
        assert!(limits.max_groups.iter().all(|&n| n >= 1), "{device:?}");
        assert!(limits.max_threads_per_block >= 1, "{device:?}");
        assert!(device.max_buffer_bytes >= 1 << 20, "{device:?}");
        if device.backend != BackendKind::Cpu {
            // A block of max_block[0] threads along x alone must fit the total.
            assert!(
                limits.max_threads_per_block >= limits.max_block[0].min(limits.max_threads_per_block),
                "{device:?}"
            );
            assert!(limits.max_threads_per_block >= 64, "{device:?}");
            assert!(limits.max_shared_bytes >= 16 * 1024, "{device:?}");
        }
    }
}
