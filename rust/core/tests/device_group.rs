//! Device groups: copies between devices ordered by the versions on both.
//!
//! On the CPU every member of a group is a device of its own, so these run
//! in CI; on CUDA they run on devices 0 and 1 where there are two, else on
//! two runtimes of device 0 (cross-runtime events and copies all the same).
//! A backend that cannot open is skipped by name unless
//! `WEIR_REQUIRE_BACKENDS` lists it.

use std::time::{Duration, Instant};

use futures::executor::block_on;
use weir_core::{
    Arg, BackendKind, Buffer, DeviceGroup, ElementType, Error, Grid, Hold, Kernel, PendingRead, ReduceOp, Runtime,
    Stream,
};

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
    match other {
        Ok(other) => {
            let foreign = other.default_stream().zeros(ElementType::Bytes, 16).unwrap();
            assert!(matches!(t.copy_from_peer(&foreign, &big), Err(Error::Unsupported { .. })));
        }
        Err(error) => eprintln!("skipped: bad_peer_copies: a copy from another backend's runtime: {error}"),
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
    // Known only as it runs (CPU kernels fail as they run): the source comes
    // from a kernel that fails behind a gate, after the copy was admitted.
    if a.info().backend == BackendKind::Cpu {
        let failing = Kernel::custom("fails_as_it_runs").cpu(|_| Err("the kernel gave up".to_owned())).build();
        let held = hold(&s);
        s.execute(&failing, Grid::linear(16, 16), &[Arg::write(&broken)]).unwrap();
        t.copy_from_peer(&broken, &big).unwrap();
        let read = t.enqueue_read(&big).unwrap();
        drop(held);
        match read.wait() {
            Err(Error::OpFailed { message, .. }) => assert!(message.contains("the kernel gave up"), "{message}"),
            other => panic!("a copy of a version that failed as it ran must fail its readers, got {other:?}"),
        }
        assert!(block_on(s.sync()).is_err(), "device 0's fence reports the kernel");
        assert!(block_on(t.sync()).is_err(), "device 1's fence reports the copy");
        s.fill_u32(&broken, 6).unwrap();
        t.copy_from_peer(&broken, &big).unwrap();
        assert_eq!(t.read_as::<u32>(&big).unwrap(), vec![6; 4], "a healthy version heals the copy");
    }
    // From inside an external write on device 0, a copy would wait for that write.
    let mut inside = None;
    s.external_write(&[&small], |_| {
        inside = Some(t.copy_from_peer(&broken, &big));
        Ok(())
    })
    .unwrap();
    assert!(matches!(inside, Some(Err(Error::InvalidArgument(_)))), "{inside:?}");
}

/// Random ops over three devices against a sequential model: fills, axpys
/// and peer copies, and where the group has them, collectives over a random
/// stream and buffer of every member.
fn random_ops_over_devices_match_a_sequential_model(group: &DeviceGroup) {
    const BUFFERS: usize = 6;
    const WORDS: usize = 64;
    let ops: usize = std::env::var("WEIR_STRESS_OPS").ok().and_then(|v| v.parse().ok()).unwrap_or(20_000);
    let with_collectives = collectives_run(group, "random_ops (collectives)");
    let devices = group.devices();
    let n = devices.len();
    // A sum's rounding depends on its order, which only the CPU fixes (rank
    // order); elsewhere the reductions are exact ones.
    let sum = if devices[0].info().backend == BackendKind::Cpu { ReduceOp::Sum } else { ReduceOp::Max };
    let streams: Vec<Vec<Stream>> = devices.iter().map(|d| (0..2).map(|_| d.new_stream().unwrap()).collect()).collect();
    let buffers: Vec<Vec<Buffer>> = devices
        .iter()
        .map(|d| (0..BUFFERS).map(|_| d.default_stream().zeros(ElementType::F32, WORDS as u64).unwrap()).collect())
        .collect();
    // One buffer per device n times as large, for gathers and scatters.
    let wide: Vec<Buffer> =
        devices.iter().map(|d| d.default_stream().zeros(ElementType::F32, (n * WORDS) as u64).unwrap()).collect();
    let mut model = vec![vec![vec![0.0f32; WORDS]; BUFFERS]; n];
    let mut wide_model = vec![vec![0.0f32; n * WORDS]; n];
    let mut seed = 0x5EED_0014u64;
    let mut next = |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    let mut reads = Vec::new();
    let mut collectives = 0;
    for op in 0..ops {
        let (d, s, i) = (next(n), next(2), next(BUFFERS));
        let stream = &streams[d][s];
        match next(if with_collectives { 8 } else { 5 }) {
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
                let (from, j) = (next(n), next(BUFFERS));
                if from == d && j == i {
                    continue;
                }
                stream.copy_from_peer(&buffers[from][j], &buffers[d][i]).unwrap();
                model[d][i] = model[from][j].clone();
            }
            4 => {
                if op % 7 == 0 {
                    reads.push((stream.enqueue_read(&buffers[d][i]).unwrap(), model[d][i].clone(), op));
                }
            }
            kind => {
                // A random stream and buffer on every member.
                let chosen: Vec<(Stream, usize)> =
                    (0..n).map(|m| (streams[m][next(2)].clone(), next(BUFFERS))).collect();
                let on: Vec<Stream> = chosen.iter().map(|(stream, _)| stream.clone()).collect();
                let picked: Vec<Buffer> = chosen.iter().enumerate().map(|(m, &(_, b))| buffers[m][b].clone()).collect();
                let before: Vec<Vec<f32>> = chosen.iter().enumerate().map(|(m, &(_, b))| model[m][b].clone()).collect();
                match (kind, op % 2) {
                    (5, _) => {
                        let op = if op % 3 == 0 { ReduceOp::Min } else { sum };
                        group.all_reduce(&on, &picked, op).unwrap();
                        let mut reduced = before[0].clone();
                        for other in &before[1..] {
                            for (acc, &x) in reduced.iter_mut().zip(other) {
                                *acc = match op {
                                    ReduceOp::Sum => *acc + x,
                                    ReduceOp::Min => acc.min(x),
                                    _ => acc.max(x),
                                };
                            }
                        }
                        chosen.iter().enumerate().for_each(|(m, &(_, b))| model[m][b] = reduced.clone());
                    }
                    (6, _) => {
                        let root = next(n);
                        group.broadcast(&on, &picked, root).unwrap();
                        chosen.iter().enumerate().for_each(|(m, &(_, b))| model[m][b] = before[root].clone());
                    }
                    (_, 0) => {
                        group.all_gather(&on, &picked, &wide).unwrap();
                        let gathered = before.concat();
                        wide_model.iter_mut().for_each(|w| *w = gathered.clone());
                    }
                    _ => {
                        group.reduce_scatter(&on, &wide, &picked, ReduceOp::Max).unwrap();
                        for (m, &(_, b)) in chosen.iter().enumerate() {
                            model[m][b] = (0..WORDS)
                                .map(|k| wide_model.iter().map(|w| w[m * WORDS + k]).fold(f32::MIN, f32::max))
                                .collect();
                        }
                    }
                }
                collectives += 1;
            }
        }
    }
    for (d, device_buffers) in buffers.iter().enumerate() {
        for (i, buffer) in device_buffers.iter().enumerate() {
            reads.push((streams[d][0].enqueue_read(buffer).unwrap(), model[d][i].clone(), ops));
        }
        reads.push((streams[d][1].enqueue_read(&wide[d]).unwrap(), wide_model[d].clone(), ops));
    }
    let count = reads.len();
    for (read, expected, op) in reads {
        let bytes = read.wait().unwrap();
        assert_eq!(bytemuck::cast_slice::<u8, f32>(&bytes), &expected[..], "read admitted after op {op}");
    }
    block_on(group.sync()).unwrap();
    assert_settled(group);
    eprintln!("  {ops} ops ({collectives} collectives) over {n} devices matched the model ({count} reads)");
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

// ---------------------------------------------------------------------------
// Collectives: results against the host, ordering on every member, failures.

/// The group's collectives, or `None` (skipped by name) where the backend or
/// the group cannot run them: NCCL missing, or one CUDA device named twice.
fn collectives_run(group: &DeviceGroup, test: &str) -> bool {
    let streams: Vec<Stream> = group.devices().iter().map(Runtime::default_stream).collect();
    let buffers: Vec<Buffer> = streams.iter().map(|s| s.zeros(ElementType::F32, 4).unwrap()).collect();
    match group.all_reduce(&streams, &buffers, ReduceOp::Sum) {
        Ok(()) => true,
        Err(Error::Unavailable { reason, .. }) if !required(group.devices()[0].info().backend) => {
            eprintln!("skipped: {test}: collectives unavailable: {reason}");
            false
        }
        // The CPU has collectives: there, unsupported is a failure.
        Err(Error::Unsupported { what, .. }) if group.devices()[0].info().backend != BackendKind::Cpu => {
            eprintln!("skipped: {test}: collectives unsupported here: {what}");
            false
        }
        Err(error) => panic!("{test}: a first all_reduce failed: {error}"),
    }
}

/// A group of `count` devices of `kind`, or `None` (skipped by name) where
/// there are fewer; the CPU always has them.
fn members(kind: BackendKind, count: usize) -> Option<DeviceGroup> {
    let indices: Vec<usize> = (0..count).collect();
    match DeviceGroup::open(kind, &indices) {
        Ok(group) => Some(group),
        Err(error) if kind != BackendKind::Cpu => {
            eprintln!("skipped: a group of {count} {} devices: {error}", kind.name());
            None
        }
        Err(error) => panic!("a CPU group of {count}: {error}"),
    }
}

/// Member `rank`'s contribution: distinct per member and element, with
/// negatives, all exact in f32.
fn contribution(rank: usize, len: usize) -> Vec<i32> {
    (0..len).map(|i| (rank as i32 + 1) * 1000 - (i as i32 * 7) % 23 - if i % 3 == rank % 3 { 500 } else { 0 }).collect()
}

fn upload_as(stream: &Stream, element: ElementType, values: &[i32]) -> Buffer {
    match element {
        ElementType::F32 => stream.upload(&values.iter().map(|&v| v as f32).collect::<Vec<_>>()).unwrap(),
        _ => stream.upload(values).unwrap(),
    }
}

fn read_back(stream: &Stream, buffer: &Buffer) -> Vec<i32> {
    match buffer.element_type() {
        ElementType::F32 => stream.read_as::<f32>(buffer).unwrap().into_iter().map(|v| v as i32).collect(),
        _ => stream.read_as::<i32>(buffer).unwrap(),
    }
}

fn host_reduce(inputs: &[Vec<i32>], op: ReduceOp) -> Vec<i32> {
    (0..inputs[0].len())
        .map(|i| {
            let column = inputs.iter().map(|input| input[i]);
            match op {
                ReduceOp::Sum => column.sum(),
                ReduceOp::Max => column.max().unwrap(),
                ReduceOp::Min => column.min().unwrap(),
            }
        })
        .collect()
}

/// Every collective, f32 and i32, against what the host computes.
fn collectives_match_the_host(group: &DeviceGroup) {
    if !collectives_run(group, "collectives_match_the_host") {
        return;
    }
    const LEN: usize = 1000;
    let n = group.devices().len();
    let streams: Vec<Stream> = group.devices().iter().map(|d| d.new_stream().unwrap()).collect();
    let inputs: Vec<Vec<i32>> = (0..n).map(|rank| contribution(rank, LEN)).collect();
    for element in [ElementType::F32, ElementType::I32] {
        for op in [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min] {
            let buffers: Vec<Buffer> = streams.iter().zip(&inputs).map(|(s, v)| upload_as(s, element, v)).collect();
            group.all_reduce(&streams, &buffers, op).unwrap();
            let expected = host_reduce(&inputs, op);
            for (rank, (s, b)) in streams.iter().zip(&buffers).enumerate() {
                assert_eq!(read_back(s, b), expected, "all_reduce {op:?} of {element} on member {rank} of {n}");
            }
        }
        let root = n - 1;
        let buffers: Vec<Buffer> = streams.iter().zip(&inputs).map(|(s, v)| upload_as(s, element, v)).collect();
        group.broadcast(&streams, &buffers, root).unwrap();
        for (rank, (s, b)) in streams.iter().zip(&buffers).enumerate() {
            assert_eq!(read_back(s, b), inputs[root], "broadcast of {element} on member {rank} of {n}");
        }
        let sends: Vec<Buffer> = streams.iter().zip(&inputs).map(|(s, v)| upload_as(s, element, v)).collect();
        let receives: Vec<Buffer> = streams.iter().map(|s| s.zeros(element, (n * LEN) as u64).unwrap()).collect();
        group.all_gather(&streams, &sends, &receives).unwrap();
        let gathered: Vec<i32> = inputs.concat();
        for (rank, (s, b)) in streams.iter().zip(&receives).enumerate() {
            assert_eq!(read_back(s, b), gathered, "all_gather of {element} on member {rank} of {n}");
        }
        let wide: Vec<Vec<i32>> = (0..n).map(|rank| contribution(rank + 5, n * LEN)).collect();
        let sends: Vec<Buffer> = streams.iter().zip(&wide).map(|(s, v)| upload_as(s, element, v)).collect();
        let receives: Vec<Buffer> = streams.iter().map(|s| s.zeros(element, LEN as u64).unwrap()).collect();
        group.reduce_scatter(&streams, &sends, &receives, ReduceOp::Sum).unwrap();
        let reduced = host_reduce(&wide, ReduceOp::Sum);
        for (rank, (s, b)) in streams.iter().zip(&receives).enumerate() {
            assert_eq!(
                read_back(s, b),
                reduced[rank * LEN..(rank + 1) * LEN],
                "reduce_scatter of {element} on member {rank} of {n}"
            );
        }
    }
    // Raw bytes move as they are.
    let bytes: Vec<Buffer> =
        streams.iter().enumerate().map(|(rank, s)| s.upload(&[rank as u8 + 1; 3]).unwrap()).collect();
    let all: Vec<Buffer> = streams.iter().map(|s| s.zeros(ElementType::Bytes, 3 * n as u64).unwrap()).collect();
    group.all_gather(&streams, &bytes, &all).unwrap();
    let expected: Vec<u8> = (0..n).flat_map(|rank| [rank as u8 + 1; 3]).collect();
    assert_eq!(streams[0].read(&all[0]).unwrap(), expected);
    block_on(group.sync()).unwrap();
    assert_settled(group);
}

fn assert_settled(group: &DeviceGroup) {
    for (rank, device) in group.devices().iter().enumerate() {
        let diagnostics = device.diagnostics();
        assert_eq!(diagnostics.backend.live_events, 0, "events outlived their work on member {rank}");
        assert_eq!(diagnostics.live_waiters, 0, "waiters outlived their work on member {rank}");
        assert_eq!(diagnostics.backend.race_violations, 0, "the race detector saw a conflict on member {rank}");
    }
}

/// The seed race through a collective: member 0's input is written on
/// another stream just before (held), and a consumer on another stream of
/// member 1, synchronised with member 1's collective stream earlier (an
/// unrelated pre-sync), reads the result.
fn collective_orders_after_its_inputs_and_before_its_consumers(group: &DeviceGroup) {
    if !collectives_run(group, "collective_orders_after_its_inputs_and_before_its_consumers") {
        return;
    }
    let (a, b) = (group.device(0).unwrap(), group.device(1).unwrap());
    let (writer, c0) = (a.new_stream().unwrap(), a.new_stream().unwrap());
    let (c1, consumer) = (b.new_stream().unwrap(), b.new_stream().unwrap());
    let rest: Vec<Stream> = group.devices()[2..].iter().map(|d| d.new_stream().unwrap()).collect();
    let streams: Vec<Stream> = [c0.clone(), c1.clone()].into_iter().chain(rest.iter().cloned()).collect();
    let x0 = c0.zeros(ElementType::F32, 4096).unwrap();
    let x1 = c1.upload(&[1.0f32; 4096]).unwrap();
    let others: Vec<Buffer> = rest.iter().map(|s| s.zeros(ElementType::F32, 4096).unwrap()).collect();
    // The consumer synchronises with c1 past x1's upload: an unrelated pre-sync.
    let unrelated = c1.upload(&[2u32; 16]).unwrap();
    let pre = consumer.zeros(ElementType::U32, 16).unwrap();
    consumer.copy(&unrelated, &pre).unwrap();
    block_on(consumer.sync()).unwrap();
    let held = hold(&writer);
    writer.fill_f32(&x0, 5.0).unwrap();
    let buffers: Vec<Buffer> = [x0.clone(), x1.clone()].into_iter().chain(others).collect();
    group.all_reduce(&streams, &buffers, ReduceOp::Sum).unwrap();
    let read = consumer.enqueue_read(&x1).unwrap();
    if matches!(held, Held::Gate(_)) {
        give_it_a_chance(&read);
        assert!(!read.is_complete(), "member 1's consumer read the all_reduce before member 0's held input");
    }
    drop(held);
    let bytes = read.wait().unwrap();
    assert_eq!(bytemuck::cast_slice::<u8, f32>(&bytes), &[6.0f32; 4096][..], "member 1 read a stale result");
    assert_eq!(c0.read_as::<f32>(&x0).unwrap(), vec![6.0; 4096], "member 0's buffer holds the sum");
    assert_eq!(consumer.read_as::<u32>(&pre).unwrap(), vec![2; 16]);
    block_on(group.sync()).unwrap();
    assert_settled(group);
}

/// A write of a collective's send, on another stream of its member, waits
/// for the collective to have read it (held on another member).
fn write_after_a_collectives_read(group: &DeviceGroup) {
    if !collectives_run(group, "write_after_a_collectives_read") {
        return;
    }
    let n = group.devices().len();
    let streams: Vec<Stream> = group.devices().iter().map(|d| d.new_stream().unwrap()).collect();
    // Written on streams of their own, so that only the collective's read
    // (not the sends' writer) can order the overwrite after the collective.
    let uploaders: Vec<Stream> = group.devices().iter().map(|d| d.new_stream().unwrap()).collect();
    let sends: Vec<Buffer> =
        uploaders.iter().enumerate().map(|(rank, s)| s.upload(&[rank as u32 + 3; 256]).unwrap()).collect();
    let receives: Vec<Buffer> = streams.iter().map(|s| s.zeros(ElementType::U32, 256 * n as u64).unwrap()).collect();
    block_on(group.sync()).unwrap();
    // Member 1's part cannot start, so member 0's cannot finish either.
    let held = hold(&streams[1]);
    group.all_gather(&streams, &sends, &receives).unwrap();
    let overwriter = group.device(0).unwrap().new_stream().unwrap();
    overwriter.fill_u32(&sends[0], 9).unwrap();
    let overwritten = overwriter.fence().unwrap();
    if matches!(held, Held::Gate(_)) {
        std::thread::sleep(Duration::from_millis(300));
        assert!(!overwritten.is_complete(), "member 0 overwrote its send before the all_gather read it");
    }
    drop(held);
    overwritten.wait().unwrap();
    let gathered: Vec<u32> = (0..n).flat_map(|rank| [rank as u32 + 3; 256]).collect();
    assert_eq!(streams[1].read_as::<u32>(&receives[1]).unwrap(), gathered, "the all_gather saw the later write");
    assert_eq!(overwriter.read_as::<u32>(&sends[0]).unwrap(), vec![9; 256]);
    block_on(group.sync()).unwrap();
    assert_settled(group);
}

/// A failed input fails the collective on every member, known at admission
/// or only as the parts run; nothing hangs, and the group goes on.
fn a_failed_input_fails_the_collective_on_every_member(group: &DeviceGroup) {
    if !collectives_run(group, "a_failed_input_fails_the_collective_on_every_member") {
        return;
    }
    let streams: Vec<Stream> = group.devices().iter().map(|d| d.new_stream().unwrap()).collect();
    let buffers: Vec<Buffer> = streams.iter().map(|s| s.upload(&[1i32; 64]).unwrap()).collect();
    // Known at admission: member 0's input is a failed version.
    assert!(streams[0].fail_write(&buffers[0], "broken on member 0").is_err());
    let reduced = group.all_reduce(&streams, &buffers, ReduceOp::Sum);
    assert!(
        matches!(&reduced, Err(Error::OpFailed { message, .. }) if message.contains("broken on member 0")),
        "{reduced:?}"
    );
    for (rank, (s, b)) in streams.iter().zip(&buffers).enumerate() {
        match s.read(b) {
            Err(Error::OpFailed { message, .. }) => assert!(message.contains("broken on member 0"), "{message}"),
            other => panic!("member {rank}'s output must read as failed, got {other:?}"),
        }
    }
    // Healed by full overwrites, the same collective runs.
    for (s, b) in streams.iter().zip(&buffers) {
        s.write(b, 0, &[2i32; 64]).unwrap();
    }
    group.all_reduce(&streams, &buffers, ReduceOp::Sum).unwrap();
    let n = group.devices().len() as i32;
    assert_eq!(streams[1].read_as::<i32>(&buffers[1]).unwrap(), vec![2 * n; 64]);
    for s in &streams {
        let _ = block_on(s.sync());
    }

    // Known only as the parts run (CPU kernels fail as they run): member 1's
    // input comes from a kernel that fails behind a gate, after admission.
    if group.devices()[0].info().backend == BackendKind::Cpu {
        let failing = Kernel::custom("fails_as_it_runs").cpu(|_| Err("the kernel gave up".to_owned())).build();
        let held = hold(&streams[1]);
        streams[1].execute(&failing, Grid::linear(64, 64), &[Arg::write(&buffers[1])]).unwrap();
        group.all_reduce(&streams, &buffers, ReduceOp::Max).unwrap();
        let read0 = streams[0].enqueue_read(&buffers[0]).unwrap();
        drop(held);
        match read0.wait() {
            Err(Error::OpFailed { message, .. }) => assert!(message.contains("the kernel gave up"), "{message}"),
            other => panic!("member 0's part must fail with member 1's, got {other:?}"),
        }
        assert!(block_on(streams[0].sync()).is_err(), "member 0's fence reports its failed part");
        assert!(block_on(streams[1].sync()).is_err(), "member 1's fence reports its failed parts");
        for (s, b) in streams.iter().zip(&buffers) {
            s.write(b, 0, &[3i32; 64]).unwrap();
        }
        group.all_reduce(&streams, &buffers, ReduceOp::Sum).unwrap();
        assert_eq!(streams[0].read_as::<i32>(&buffers[0]).unwrap(), vec![3 * n; 64]);
    }
    block_on(group.sync()).unwrap();
    assert_settled(group);
}

/// Bad input: a clear error naming what was passed, and nothing admitted.
fn bad_collectives_are_refused(group: &DeviceGroup) {
    let n = group.devices().len();
    let streams: Vec<Stream> = group.devices().iter().map(|d| d.new_stream().unwrap()).collect();
    let f32s: Vec<Buffer> = streams.iter().map(|s| s.zeros(ElementType::F32, 8).unwrap()).collect();
    block_on(group.sync()).unwrap();
    let admitted =
        |group: &DeviceGroup| -> Vec<u64> { group.devices().iter().map(|d| d.diagnostics().admitted_ops).collect() };
    let before = admitted(group);
    let refused = |result: Result<(), Error>, names: &str| match result {
        Err(Error::InvalidArgument(message)) => {
            assert!(message.contains(names), "{message:?} should name {names:?}");
        }
        other => panic!("expected InvalidArgument naming {names:?}, got {other:?}"),
    };
    refused(group.all_reduce(&streams[..1], &f32s, ReduceOp::Sum), "got 1");
    refused(group.all_reduce(&streams, &f32s[..1], ReduceOp::Sum), "got 1");
    let reversed: Vec<Stream> = streams.iter().rev().cloned().collect();
    refused(group.all_reduce(&reversed, &f32s, ReduceOp::Sum), "streams[0]");
    let swapped: Vec<Buffer> = f32s.iter().rev().cloned().collect();
    refused(group.all_reduce(&streams, &swapped, ReduceOp::Sum), "buffers[0]");
    let mut viewed = f32s.clone();
    viewed[1] = f32s[1].view(0, 4).unwrap();
    refused(group.all_reduce(&streams, &viewed, ReduceOp::Sum), "buffers[1] is a view");
    assert_eq!(admitted(group), before, "a refused collective admitted something");
    let mut mixed = f32s.clone();
    mixed[1] = streams[1].zeros(ElementType::I32, 8).unwrap();
    refused(group.all_reduce(&streams, &mixed, ReduceOp::Sum), "buffers[1] holds i32");
    let mut sized = f32s.clone();
    sized[1] = streams[1].zeros(ElementType::F32, 9).unwrap();
    refused(group.broadcast(&streams, &sized, 0), "buffers[1] holds 9");
    let bytes: Vec<Buffer> = streams.iter().map(|s| s.zeros(ElementType::Bytes, 8).unwrap()).collect();
    refused(group.all_reduce(&streams, &bytes, ReduceOp::Sum), "raw bytes");
    refused(group.broadcast(&streams, &f32s, n), &format!("rank {n} of a group of {n} ranks"));
    let small: Vec<Buffer> = streams.iter().map(|s| s.zeros(ElementType::F32, 8).unwrap()).collect();
    refused(group.all_gather(&streams, &f32s, &small), "receives[0] holds 8");
    refused(group.reduce_scatter(&streams, &small, &f32s, ReduceOp::Sum), "sends[0] holds 8");
    refused(group.all_gather(&streams, &f32s, &f32s), "one buffer");
    // The buffers made above are admitted ops; count from here.
    let before_calls = admitted(group);
    refused(group.all_reduce(&reversed, &f32s, ReduceOp::Max), "streams[0]");
    refused(group.all_reduce(&streams, &swapped, ReduceOp::Max), "buffers[0]");
    refused(group.all_gather(&streams, &f32s, &small), "receives[0]");
    assert_eq!(admitted(group), before_calls, "a refused collective admitted something");
    // The group goes on.
    if collectives_run(group, "bad_collectives_are_refused") {
        group.all_reduce(&streams, &f32s, ReduceOp::Sum).unwrap();
        block_on(group.sync()).unwrap();
    }
}

on_backends! {
    collective_results => |group: &DeviceGroup| {
        collectives_match_the_host(group);
        let kind = group.devices()[0].info().backend;
        if let Some(three) = members(kind, 3) {
            collectives_match_the_host(&three);
        }
    };
    collective_seed_race => collective_orders_after_its_inputs_and_before_its_consumers;
    collective_write_after_read => write_after_a_collectives_read;
    collective_failures => a_failed_input_fails_the_collective_on_every_member;
    collective_refusals => bad_collectives_are_refused;
}

/// A CUDA group of one device runs every collective through NCCL, one rank:
/// on a machine with one GPU, this shows that NCCL loads, makes the group's
/// communicator and runs on Weir's streams, in order with the ops around it.
#[test]
fn a_one_device_cuda_group_runs_every_collective_through_nccl() {
    const TEST: &str = "a_one_device_cuda_group_runs_every_collective_through_nccl";
    let group = match DeviceGroup::open(BackendKind::Cuda, &[0]) {
        Ok(group) => group,
        Err(Error::Unavailable { reason, .. }) if !required(BackendKind::Cuda) => {
            eprintln!("skipped: {TEST}: cuda unavailable: {reason}");
            return;
        }
        Err(error) => panic!("{TEST}: cannot open a cuda group of device 0: {error}"),
    };
    collectives_match_the_host(&group);
}

/// A collective takes room in each member's queue as any op does: it
/// bypassed the queue limit (admitted on a full queue through a non-waiting
/// handle, and never counted).
#[test]
fn a_collective_takes_room_in_each_members_queue() {
    let Some(group) = group(BackendKind::Cpu, "a_collective_takes_room") else { return };
    let [one, two] = group.devices() else { panic!("a group of two") };
    let (s0, s1) = (one.new_stream().unwrap(), two.new_stream().unwrap());
    let (x0, x1) = (s0.upload(&[1.0f32; 64]).unwrap(), s1.upload(&[2.0f32; 64]).unwrap());
    block_on(s0.sync()).unwrap();
    let held = s0.hold().unwrap();
    group.all_reduce(&[s0.clone(), s1.clone()], &[x0.clone(), x1.clone()], ReduceOp::Sum).unwrap();
    assert_eq!(one.diagnostics().ops_in_queue, 1, "the held part is counted in its queue");
    // A full queue refuses a non-waiting handle's collective, and admits nothing.
    let eager = s0.without_waiting();
    let limit = one.queue_limit().ops;
    while one.diagnostics().ops_in_queue < limit {
        eager.fill_f32(&x0, 0.0).unwrap();
    }
    let admitted = (one.diagnostics().admitted_ops, two.diagnostics().admitted_ops);
    match group.all_reduce(&[eager, s1.clone()], &[x0.clone(), x1.clone()], ReduceOp::Sum) {
        Err(Error::QueueFull { .. }) => {}
        other => panic!("a collective on a full queue: {other:?}"),
    }
    assert_eq!((one.diagnostics().admitted_ops, two.diagnostics().admitted_ops), admitted);
    held.release();
    assert_eq!(s1.read_as::<f32>(&x1).unwrap(), vec![3.0; 64]);
    block_on(s0.sync()).unwrap();
    group.close().unwrap();
}
