//! Device groups: copies between devices ordered by the versions on both.
//!
//! On the CPU every member of a group is a device of its own, so these run
//! in CI; on CUDA they run on devices 0 and 1 where there are two, else on
//! two runtimes of device 0 (cross-runtime events and copies all the same).
//! A backend that cannot open is skipped by name unless
//! `WEIR_REQUIRE_BACKENDS` lists it.

use std::time::{Duration, Instant};

use futures::executor::block_on;
use weir_core::{BackendKind, DeviceGroup, ElementType, Error, Hold, PendingRead, Runtime, Stream};

fn required(kind: BackendKind) -> bool {
    std::env::var("WEIR_REQUIRE_BACKENDS")
        .map(|list| list.split(',').any(|name| name.trim() == kind.name()))
        .unwrap_or(false)
}

/// A group of two devices of `kind`, or `None` (skipped) where it cannot open.
fn group(kind: BackendKind, test: &str) -> Option<DeviceGroup> {
    let opened = DeviceGroup::open(kind, &[0, 1]).or_else(|error| match (kind, error) {
        // One CUDA device: two runtimes on it.
        (BackendKind::Cuda, Error::Unavailable { .. }) => DeviceGroup::open(kind, &[0, 0]),
        (_, error) => Err(error),
    });
    match opened {
        Ok(group) => Some(group),
        Err(Error::Unavailable { reason, .. }) if !required(kind) => {
            eprintln!("skipped: {test}: {} unavailable: {reason}", kind.name());
            None
        }
        Err(error) => panic!("{test}: cannot open a {} group: {error}", kind.name()),
    }
}

/// Holds `stream` until dropped: a gate where the backend has one, else a delay.
enum Held {
    Gate(#[allow(dead_code)] Hold),
    Delay,
}

fn hold(stream: &Stream) -> Held {
    match stream.hold() {
        Ok(gate) => Held::Gate(gate),
        Err(Error::Unsupported { .. }) => {
            stream.delay(Duration::from_millis(1500)).unwrap();
            Held::Delay
        }
        Err(other) => panic!("hold: {other}"),
    }
}

fn give_it_a_chance(read: &PendingRead) {
    let deadline = Instant::now() + Duration::from_millis(300);
    while !read.is_complete() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
}

macro_rules! on_backends {
    ($($name:ident => $body:expr;)*) => {
        $(
            mod $name {
                use super::*;
                #[test]
                fn cpu() {
                    if let Some(group) = group(BackendKind::Cpu, stringify!($name)) {
                        ($body)(&group);
                    }
                }
                #[test]
                fn cuda() {
                    if let Some(group) = group(BackendKind::Cuda, stringify!($name)) {
                        ($body)(&group);
                    }
                }
            }
        )*
    };
}

/// The seed race across devices: after an unrelated pre-sync with device 0,
/// a consumer on device 1 reads, through a peer copy, what device 0 just wrote.
fn seed_race_across_devices(group: &DeviceGroup) {
    let (a, b) = (group.device(0).unwrap(), group.device(1).unwrap());
    let (s, t) = (a.new_stream().unwrap(), b.new_stream().unwrap());
    let unrelated = s.upload(&[1u32; 16]).unwrap();
    let out = s.empty(ElementType::Bytes, 4096).unwrap();
    let (pre, seen) = (t.zeros(ElementType::Bytes, 64).unwrap(), t.zeros(ElementType::Bytes, 4096).unwrap());
    // T synchronises with S past `out`'s allocation.
    t.copy_from_peer(&unrelated, &pre).unwrap();
    block_on(t.sync()).unwrap();
    let held = hold(&s);
    s.fill_u32(&out, 7).unwrap();
    t.copy_from_peer(&out, &seen).unwrap();
    let read = t.enqueue_read(&seen).unwrap();
    if matches!(held, Held::Gate(_)) {
        give_it_a_chance(&read);
        assert!(!read.is_complete(), "the read on device 1 ran before device 0's held write");
    }
    drop(held);
    let bytes = read.wait().unwrap();
    assert_eq!(bytemuck::cast_slice::<u8, u32>(&bytes), &[7u32; 1024][..], "device 1 read a stale copy");
    assert_eq!(t.read_as::<u32>(&pre).unwrap(), vec![1; 16]);
}

/// A write on device 0 after a copy to device 1 waits for the copy.
fn write_after_read_across_devices(group: &DeviceGroup) {
    let (a, b) = (group.device(0).unwrap(), group.device(1).unwrap());
    let (s, t) = (a.new_stream().unwrap(), b.new_stream().unwrap());
    let src = s.upload(&[3u32; 256]).unwrap();
    let dst = t.zeros(ElementType::Bytes, 1024).unwrap();
    block_on(group.sync()).unwrap();
    let held = hold(&t);
    t.copy_from_peer(&src, &dst).unwrap();
    // The overwrite must wait for the held copy to have read src.
    s.fill_u32(&src, 9).unwrap();
    let overwritten = s.fence().unwrap();
    if matches!(held, Held::Gate(_)) {
        std::thread::sleep(Duration::from_millis(300));
        assert!(!overwritten.is_complete(), "device 0 overwrote src before device 1's copy read it");
    }
    drop(held);
    overwritten.wait().unwrap();
    assert_eq!(t.read_as::<u32>(&dst).unwrap(), vec![3; 256], "the copy saw the later write");
    assert_eq!(s.read_as::<u32>(&src).unwrap(), vec![9; 256]);
    block_on(group.sync()).unwrap();
    for device in group.devices() {
        assert_eq!(device.diagnostics().backend.live_events, 0, "events outlived their work");
    }
}

/// Refusals and failures: clear errors, and a failed version travels across.
fn bad_peer_copies(group: &DeviceGroup) {
    let (a, b) = (group.device(0).unwrap(), group.device(1).unwrap());
    let (s, t) = (a.default_stream(), b.default_stream());
    let (small, big) = (s.zeros(ElementType::Bytes, 8).unwrap(), t.zeros(ElementType::Bytes, 16).unwrap());
    assert!(matches!(t.copy_from_peer(&small, &big), Err(Error::InvalidArgument(_))));
    let other = Runtime::open(if a.info().backend == BackendKind::Cpu { BackendKind::Wgpu } else { BackendKind::Cpu });
    if let Ok(other) = other {
        let foreign = other.default_stream().zeros(ElementType::Bytes, 16).unwrap();
        assert!(matches!(t.copy_from_peer(&foreign, &big), Err(Error::Unsupported { .. })));
    }
    let broken = s.zeros(ElementType::Bytes, 16).unwrap();
    assert!(matches!(s.fail_write(&broken, "broken on device 0"), Err(Error::OpFailed { .. })));
    let copied = t.copy_from_peer(&broken, &big);
    assert!(
        matches!(&copied, Err(Error::OpFailed { message, .. }) if message.contains("broken on device 0")),
        "{copied:?}"
    );
    match t.read(&big) {
        Err(Error::OpFailed { message, .. }) => assert!(message.contains("broken on device 0"), "{message}"),
        other => panic!("a copy of a failed version must fail its readers, got {other:?}"),
    }
    s.fill_u32(&broken, 5).unwrap();
    t.copy_from_peer(&broken, &big).unwrap();
    assert_eq!(t.read_as::<u32>(&big).unwrap(), vec![5; 4], "a healthy version heals the copy");
    // From inside an external write on device 0, a copy would wait for that write.
    let mut inside = None;
    s.external_write(&[&small], |_| {
        inside = Some(t.copy_from_peer(&broken, &big));
        Ok(())
    })
    .unwrap();
    assert!(matches!(inside, Some(Err(Error::InvalidArgument(_)))), "{inside:?}");
}

/// Random ops over three devices against a sequential model.
fn random_ops_over_devices_match_a_sequential_model(group: &DeviceGroup) {
    const BUFFERS: usize = 6;
    const WORDS: usize = 64;
    let ops: usize = std::env::var("WEIR_STRESS_OPS").ok().and_then(|v| v.parse().ok()).unwrap_or(20_000);
    let devices = group.devices();
    let streams: Vec<Vec<Stream>> = devices.iter().map(|d| (0..2).map(|_| d.new_stream().unwrap()).collect()).collect();
    let buffers: Vec<Vec<weir_core::Buffer>> = devices
        .iter()
        .map(|d| {
            (0..BUFFERS).map(|_| d.default_stream().zeros(ElementType::Bytes, (WORDS * 4) as u64).unwrap()).collect()
        })
        .collect();
    let mut model = vec![vec![vec![0.0f32; WORDS]; BUFFERS]; devices.len()];
    let mut seed = 0x5EED_0014u64;
    let mut next = |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    let mut reads = Vec::new();
    for op in 0..ops {
        let (d, s, i) = (next(devices.len()), next(2), next(BUFFERS));
        let stream = &streams[d][s];
        match next(5) {
            0 => {
                let value = next(100) as f32;
                stream.fill_f32(&buffers[d][i], value).unwrap();
                model[d][i] = vec![value; WORDS];
            }
            1 => {
                let j = (i + 1 + next(BUFFERS - 1)) % BUFFERS;
                stream.axpy(0.5, &buffers[d][j], &buffers[d][i]).unwrap();
                let x = model[d][j].clone();
                model[d][i].iter_mut().zip(x).for_each(|(y, x)| *y += 0.5 * x);
            }
            2 | 3 => {
                let (from, j) = (next(devices.len()), next(BUFFERS));
                if from == d && j == i {
                    continue;
                }
                stream.copy_from_peer(&buffers[from][j], &buffers[d][i]).unwrap();
                model[d][i] = model[from][j].clone();
            }
            _ => {
                if op % 7 == 0 {
                    reads.push((stream.enqueue_read(&buffers[d][i]).unwrap(), model[d][i].clone(), op));
                }
            }
        }
    }
    for (d, device_buffers) in buffers.iter().enumerate() {
        for (i, buffer) in device_buffers.iter().enumerate() {
            reads.push((streams[d][0].enqueue_read(buffer).unwrap(), model[d][i].clone(), ops));
        }
    }
    let count = reads.len();
    for (read, expected, op) in reads {
        let bytes = read.wait().unwrap();
        assert_eq!(bytemuck::cast_slice::<u8, f32>(&bytes), &expected[..], "read admitted after op {op}");
    }
    eprintln!("  {ops} ops over {} devices matched the model ({count} reads)", devices.len());
}

on_backends! {
    seed_race => seed_race_across_devices;
    write_after_read => write_after_read_across_devices;
    refusals_and_failures => bad_peer_copies;
    random_ops => |group: &DeviceGroup| {
        // A third device where the backend has one more to give.
        let kind = group.devices()[0].info().backend;
        let three = DeviceGroup::open(kind, &[0, 1, 2]).or_else(|_| DeviceGroup::open(kind, &[0, 0, 0]));
        random_ops_over_devices_match_a_sequential_model(three.as_ref().unwrap_or(group));
    };
}
