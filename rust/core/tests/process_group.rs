//! Groups whose ranks live in several processes: every rank but 0 is a
//! child process (this test binary again, running the ignored `rank_process`
//! test), handed the group's id in its environment, as a user's launcher
//! would hand it. Rank 0 runs in the test itself. On the CPU (loopback TCP),
//! so these run in CI; CUDA's path (NCCL's `ncclCommInitRank`) needs a
//! machine with a GPU per rank and is run there with
//! `WEIR_PROCESS_GROUP_BACKEND=cuda`, skipped by name otherwise.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures::executor::block_on;
use weir_core::{Arg, BackendKind, Buffer, DeviceGroup, ElementType, Error, Grid, GroupId, Kernel, ReduceOp, Stream};

const RANK: &str = "WEIR_TEST_RANK";
const RANKS: &str = "WEIR_TEST_RANKS";
const GROUP_ID: &str = "WEIR_TEST_GROUP_ID";
const SCENARIO: &str = "WEIR_TEST_SCENARIO";
const BACKEND: &str = "WEIR_PROCESS_GROUP_BACKEND";

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex")).collect()
}

fn required(kind: BackendKind) -> bool {
    std::env::var("WEIR_REQUIRE_BACKENDS")
        .map(|list| list.split(',').any(|name| name.trim() == kind.name()))
        .unwrap_or(false)
}

fn backend() -> BackendKind {
    std::env::var(BACKEND).ok().and_then(|name| BackendKind::from_name(&name)).unwrap_or(BackendKind::Cpu)
}

/// Rank `rank`'s device: one per rank on CUDA, device 0 on the CPU.
fn device_of(kind: BackendKind, rank: usize) -> usize {
    if kind == BackendKind::Cpu {
        0
    } else {
        rank
    }
}

/// The child processes of ranks 1.. running `scenario`, then rank 0's
/// outcome of it here; panics with every rank's output if any failed.
fn run_ranks(scenario: &str, ranks: usize) {
    let kind = backend();
    if kind != BackendKind::Cpu && scenario != "collectives" {
        // NCCL hangs on a mismatch or a gone rank, and cannot carry a failure.
        eprintln!("skipped: {scenario}: the CPU's checks across ranks, which {} has not", kind.name());
        return;
    }
    let id = match GroupId::new(kind) {
        Ok(id) => id,
        Err(Error::Unavailable { reason, .. }) if kind != BackendKind::Cpu && !required(kind) => {
            eprintln!("skipped: {scenario}: {} unavailable: {reason}", kind.name());
            return;
        }
        Err(error) => panic!("{scenario}: no group id: {error}"),
    };
    let exe = std::env::current_exe().expect("the test binary");
    let children: Vec<Child> = (1..ranks)
        .map(|rank| {
            Command::new(&exe)
                .args(["rank_process", "--exact", "--ignored", "--nocapture", "--test-threads=1"])
                .env(RANK, rank.to_string())
                .env(RANKS, ranks.to_string())
                .env(GROUP_ID, hex(&id.to_bytes()))
                .env(SCENARIO, scenario)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("a rank's process")
        })
        .collect();
    let here = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_scenario(scenario, kind, &id, ranks, 0)));
    let mut failures = Vec::new();
    for (index, child) in children.into_iter().enumerate() {
        let output = child.wait_with_output().expect("a rank's output");
        if !output.status.success() {
            failures.push(format!(
                "rank {} ({}):\n{}{}",
                index + 1,
                output.status,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ));
        }
    }
    if let Err(panic) = here {
        let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
        failures.push(format!("rank 0: {message}"));
    }
    assert!(failures.is_empty(), "{scenario} failed:\n{}", failures.join("\n"));
}

/// A rank's process: runs the scenario its environment names.
#[test]
#[ignore = "a rank of a process group; run_ranks starts it in a process of its own"]
fn rank_process() {
    let var = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set"));
    let id = GroupId::from_bytes(&unhex(&var(GROUP_ID))).expect("the group id");
    let rank: usize = var(RANK).parse().expect("rank");
    let ranks: usize = var(RANKS).parse().expect("ranks");
    run_scenario(&var(SCENARIO), id.backend(), &id, ranks, rank);
}

fn run_scenario(scenario: &str, kind: BackendKind, id: &GroupId, ranks: usize, rank: usize) {
    if scenario == "dies" && rank > 0 {
        // Joins, then its process ends before the group's first collective.
        let group = DeviceGroup::join(kind, device_of(kind, rank), id, ranks, rank).expect("join");
        drop(group);
        std::process::exit(0);
    }
    let group = DeviceGroup::join(kind, device_of(kind, rank), id, ranks, rank).expect("join");
    assert_eq!((group.rank(), group.ranks(), group.devices().len()), (rank, ranks, 1));
    match scenario {
        "collectives" => collectives(&group),
        "mismatch" => mismatch(&group),
        "poison" => poison(&group),
        "dies" => a_gone_rank_fails_and_breaks(&group),
        other => panic!("no scenario {other}"),
    }
}

fn read_f32(stream: &Stream, buffer: &Buffer) -> Vec<f32> {
    stream.read_as::<f32>(buffer).expect("read")
}

/// Every collective, each rank checking its own share against the same
/// computation on the host; around an all-reduce, the seed-race shape.
fn collectives(group: &DeviceGroup) {
    let (rank, ranks) = (group.rank(), group.ranks());
    let member = group.device(0).unwrap();
    let (writer, c, consumer) =
        (member.new_stream().unwrap(), member.new_stream().unwrap(), member.new_stream().unwrap());
    const LEN: usize = 4096;

    // The seed race: the input is written on another stream just before,
    // a consumer synchronised earlier with the collective's stream (an
    // unrelated pre-sync) reads the result.
    let x = c.zeros(ElementType::F32, LEN as u64).unwrap();
    let unrelated = c.upload(&[2u32; 16]).unwrap();
    let pre = consumer.zeros(ElementType::U32, 16).unwrap();
    consumer.copy(&unrelated, &pre).unwrap();
    block_on(consumer.sync()).unwrap();
    writer.delay(Duration::from_millis(50)).unwrap();
    writer.fill_f32(&x, rank as f32 + 1.0).unwrap();
    group.all_reduce(std::slice::from_ref(&c), std::slice::from_ref(&x), ReduceOp::Sum).unwrap();
    let sum = (1..=ranks).sum::<usize>() as f32;
    let read = consumer.enqueue_read(&x).unwrap().wait().unwrap();
    assert_eq!(bytemuck::cast_slice::<u8, f32>(&read), &vec![sum; LEN][..], "rank {rank} read a stale all_reduce");

    // Broadcast from the last rank, in place.
    let root = ranks - 1;
    let b = c.upload(&vec![if rank == root { 7i32 } else { -1 }; LEN]).unwrap();
    group.broadcast(std::slice::from_ref(&c), std::slice::from_ref(&b), root).unwrap();
    assert_eq!(c.read_as::<i32>(&b).unwrap(), vec![7; LEN], "broadcast on rank {rank}");

    // All-gather, then an overwrite of the send on another stream, which
    // must wait for the gather's read of it.
    let send = writer.upload(&vec![rank as u32 + 3; LEN]).unwrap();
    let gathered = c.zeros(ElementType::U32, (LEN * ranks) as u64).unwrap();
    group.all_gather(std::slice::from_ref(&c), std::slice::from_ref(&send), std::slice::from_ref(&gathered)).unwrap();
    writer.fill_u32(&send, 99).unwrap();
    let expected: Vec<u32> = (0..ranks).flat_map(|r| vec![r as u32 + 3; LEN]).collect();
    assert_eq!(c.read_as::<u32>(&gathered).unwrap(), expected, "all_gather on rank {rank} saw the later write");
    assert_eq!(writer.read_as::<u32>(&send).unwrap(), vec![99; LEN]);

    // Reduce-scatter with Max: chunk `rank` of the element-wise maximum.
    let wide: Vec<f32> = (0..LEN * ranks).map(|i| ((i * 7 + rank * 13) % 101) as f32).collect();
    let sends = c.upload(&wide).unwrap();
    let receive = c.zeros(ElementType::F32, LEN as u64).unwrap();
    group
        .reduce_scatter(
            std::slice::from_ref(&c),
            std::slice::from_ref(&sends),
            std::slice::from_ref(&receive),
            ReduceOp::Max,
        )
        .unwrap();
    let max: Vec<f32> = (rank * LEN..(rank + 1) * LEN)
        .map(|i| (0..ranks).map(|r| ((i * 7 + r * 13) % 101) as f32).fold(f32::MIN, f32::max))
        .collect();
    assert_eq!(read_f32(&c, &receive), max, "reduce_scatter on rank {rank}");

    // Two collectives on two streams, each rank holding a different one
    // back: they still meet in the order they were admitted.
    let (s1, s2) = (member.new_stream().unwrap(), member.new_stream().unwrap());
    let a = s1.upload(&[rank as f32 + 1.0; 16]).unwrap();
    let b = s2.upload(&[10 * (rank as u32 + 1); 16]).unwrap();
    let held = if rank % 2 == 0 { &s1 } else { &s2 };
    held.delay(Duration::from_millis(80)).unwrap();
    group.all_reduce(std::slice::from_ref(&s1), std::slice::from_ref(&a), ReduceOp::Sum).unwrap();
    group.all_reduce(std::slice::from_ref(&s2), std::slice::from_ref(&b), ReduceOp::Max).unwrap();
    assert_eq!(read_f32(&s1, &a), vec![sum; 16], "the first collective on rank {rank}");
    assert_eq!(s2.read_as::<u32>(&b).unwrap(), vec![10 * ranks as u32; 16], "the second collective on rank {rank}");

    block_on(group.sync()).unwrap();
    let diagnostics = member.diagnostics();
    assert_eq!(diagnostics.backend.live_events, 0, "events outlived their work on rank {rank}");
    assert_eq!(diagnostics.live_waiters, 0, "waiters outlived their work on rank {rank}");
    assert_eq!(diagnostics.backend.race_violations, 0, "the race detector saw a conflict on rank {rank}");
}

/// Rank 0 sums where the others take the maximum: the collective fails on
/// every rank, naming the disagreement, and the group goes on.
fn mismatch(group: &DeviceGroup) {
    let rank = group.rank();
    let s = group.device(0).unwrap().new_stream().unwrap();
    let x = s.upload(&[rank as i32 + 1; 64]).unwrap();
    let op = if rank == 0 { ReduceOp::Sum } else { ReduceOp::Max };
    group.all_reduce(std::slice::from_ref(&s), std::slice::from_ref(&x), op).unwrap();
    match s.read(&x) {
        Err(Error::OpFailed { message, .. }) => {
            assert!(message.contains("called another collective"), "rank {rank}: {message}")
        }
        other => panic!("rank {rank}: a mismatched all_reduce must fail, got {other:?}"),
    }
    s.write(&x, 0, &[rank as i32 + 1; 64]).unwrap();
    group.all_reduce(std::slice::from_ref(&s), std::slice::from_ref(&x), ReduceOp::Sum).unwrap();
    let sum = (1..=group.ranks() as i32).sum::<i32>();
    assert_eq!(s.read_as::<i32>(&x).unwrap(), vec![sum; 64], "rank {rank}: the next all_reduce runs");
}

/// Rank 1's input is a failed version, known at admission there and only
/// as the parts meet elsewhere: every rank's output reads as failed, naming
/// rank 1's failure; nothing hangs; healed, the group goes on.
fn poison(group: &DeviceGroup) {
    let rank = group.rank();
    let s = group.device(0).unwrap().new_stream().unwrap();
    let x = s.upload(&[1i32; 64]).unwrap();
    if rank == 1 {
        assert!(s.fail_write(&x, "broken on rank 1").is_err());
        let reduced = group.all_reduce(std::slice::from_ref(&s), std::slice::from_ref(&x), ReduceOp::Sum);
        assert!(
            matches!(&reduced, Err(Error::OpFailed { message, .. }) if message.contains("broken on rank 1")),
            "{reduced:?}"
        );
    } else {
        group.all_reduce(std::slice::from_ref(&s), std::slice::from_ref(&x), ReduceOp::Sum).unwrap();
    }
    match s.read(&x) {
        Err(Error::OpFailed { message, .. }) => assert!(message.contains("broken on rank 1"), "rank {rank}: {message}"),
        other => panic!("rank {rank}'s output must read as failed, got {other:?}"),
    }
    let _ = block_on(s.sync());
    // A kernel that fails as it runs, on rank 0 this time.
    if rank == 0 {
        let failing = Kernel::custom("fails_as_it_runs").cpu(|_| Err("the kernel gave up".to_owned())).build();
        if group.device(0).unwrap().info().backend == BackendKind::Cpu {
            s.execute(&failing, Grid::linear(64, 64), &[Arg::write(&x)]).unwrap();
        } else {
            s.fail_write(&x, "the kernel gave up").unwrap_err();
        }
    } else {
        s.write(&x, 0, &[1i32; 64]).unwrap();
    }
    let _ = group.all_reduce(std::slice::from_ref(&s), std::slice::from_ref(&x), ReduceOp::Sum);
    match s.read(&x) {
        Err(Error::OpFailed { message, .. }) => {
            assert!(message.contains("the kernel gave up"), "rank {rank}: {message}")
        }
        other => panic!("rank {rank}'s output must read as failed with rank 0's kernel, got {other:?}"),
    }
    let _ = block_on(s.sync());
    s.write(&x, 0, &[3i32; 64]).unwrap();
    group.all_reduce(std::slice::from_ref(&s), std::slice::from_ref(&x), ReduceOp::Sum).unwrap();
    assert_eq!(s.read_as::<i32>(&x).unwrap(), vec![3 * group.ranks() as i32; 64], "rank {rank}: healed");
}

/// Rank 0's side of a rank whose process ended: its collective fails,
/// naming the rank, and the next one fails at once.
fn a_gone_rank_fails_and_breaks(group: &DeviceGroup) {
    let s = group.device(0).unwrap().new_stream().unwrap();
    let x = s.upload(&[1.0f32; 64]).unwrap();
    let started = Instant::now();
    group.all_reduce(std::slice::from_ref(&s), std::slice::from_ref(&x), ReduceOp::Sum).unwrap();
    match s.read(&x) {
        Err(Error::OpFailed { message, .. }) => assert!(message.contains("rank 1 is gone"), "{message}"),
        other => panic!("an all_reduce with a rank gone must fail, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(30), "the failure took {:?}", started.elapsed());
    s.write(&x, 0, &[1.0f32; 64]).unwrap();
    group.all_reduce(std::slice::from_ref(&s), std::slice::from_ref(&x), ReduceOp::Sum).unwrap();
    match s.read(&x) {
        Err(Error::OpFailed { message, .. }) => assert!(message.contains("broken"), "{message}"),
        other => panic!("a broken group's all_reduce must fail, got {other:?}"),
    }
    assert_eq!(s.read_as::<f32>(&s.upload(&[4.0f32]).unwrap()).unwrap(), vec![4.0], "the runtime stays usable");
}

#[test]
fn three_processes_run_every_collective_in_order_with_the_seed_race_shape() {
    // One GPU per rank: two on a GPU machine.
    run_ranks("collectives", if backend() == BackendKind::Cpu { 3 } else { 2 });
}

#[test]
fn a_rank_calling_another_collective_fails_it_on_every_rank_and_the_group_goes_on() {
    run_ranks("mismatch", 3);
}

#[test]
fn a_failed_input_on_one_rank_fails_the_collective_on_every_rank() {
    run_ranks("poison", 2);
}

#[test]
fn a_rank_whose_process_ended_fails_the_collective_and_breaks_the_group() {
    run_ranks("dies", 2);
}

#[test]
fn bad_ids_and_ranks_are_refused_with_invalid_argument() {
    let invalid = |result: Result<DeviceGroup, Error>, what: &str| match result {
        Err(Error::InvalidArgument(message)) => assert!(message.contains(what), "{message}"),
        other => panic!("expected InvalidArgument naming {what:?}, got {other:?}"),
    };
    assert!(matches!(GroupId::from_bytes(b"nonsense"), Err(Error::InvalidArgument(_))));
    assert!(matches!(GroupId::from_bytes(b"cpu\0short"), Err(Error::InvalidArgument(_))));
    assert!(matches!(GroupId::new(BackendKind::Auto), Err(Error::InvalidArgument(_))));
    assert!(matches!(GroupId::new(BackendKind::Wgpu), Err(Error::Unsupported { .. })));
    let id = GroupId::new(BackendKind::Cpu).unwrap();
    let copy = GroupId::from_bytes(&id.to_bytes()).unwrap();
    assert_eq!(copy.to_bytes(), id.to_bytes());
    invalid(DeviceGroup::join(BackendKind::Cpu, 0, &id, 2, 2), "rank 2 of a group of 2");
    invalid(DeviceGroup::join(BackendKind::Cpu, 0, &id, 0, 0), "of a group of 0");
    invalid(DeviceGroup::join(BackendKind::Cuda, 0, &id, 2, 1), "an id of a cpu group");
    // A group of one rank needs nobody else; its collectives are its own.
    let alone = DeviceGroup::join(BackendKind::Cpu, 0, &id, 1, 0).unwrap();
    let s = alone.device(0).unwrap().default_stream();
    let x = s.upload(&[2.5f32; 8]).unwrap();
    alone.all_reduce(std::slice::from_ref(&s), std::slice::from_ref(&x), ReduceOp::Sum).unwrap();
    assert_eq!(read_f32(&s, &x), vec![2.5; 8]);
    // Rank 0 joins once per id, in the process that made it.
    invalid(DeviceGroup::join(BackendKind::Cpu, 0, &copy, 1, 0), "joined already");
    drop((id, copy));
    let forgotten = GroupId::from_bytes(&GroupId::new(BackendKind::Cpu).unwrap().to_bytes()).unwrap();
    invalid(DeviceGroup::join(BackendKind::Cpu, 0, &forgotten, 2, 0), "in the process that made");
    // Sizes count every rank: a gather's receive holds `ranks` sends.
    let id = GroupId::new(BackendKind::Cpu).unwrap();
    let alone = DeviceGroup::join(BackendKind::Cpu, 0, &id, 1, 0).unwrap();
    let s = alone.device(0).unwrap().default_stream();
    let send = s.upload(&[1u32; 4]).unwrap();
    let receive = s.zeros(ElementType::U32, 8).unwrap();
    let refused =
        alone.all_gather(std::slice::from_ref(&s), std::slice::from_ref(&send), std::slice::from_ref(&receive));
    assert!(matches!(refused, Err(Error::InvalidArgument(_))), "{refused:?}");
    assert!(matches!(
        alone.broadcast(std::slice::from_ref(&s), std::slice::from_ref(&send), 1),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn a_rank_count_past_the_cpu_limit_is_refused_before_anything_is_sized_by_it() {
    let id = GroupId::new(BackendKind::Cpu).unwrap();
    // Past the limit is refused at once, for rank 0 and any other, naming it;
    // the id is untouched, so a group that fits still joins with it.
    for ranks in [usize::MAX, (1usize << 32) + 2, (1 << 16) + 1] {
        for rank in [0, 1] {
            match DeviceGroup::join(BackendKind::Cpu, 0, &id, ranks, rank) {
                Err(Error::InvalidArgument(message)) => {
                    assert!(message.contains(&format!("{ranks} ranks")) && message.contains("65536"), "{message}")
                }
                other => panic!("{ranks} ranks: expected InvalidArgument naming the limit, got {other:?}"),
            }
        }
    }
    let alone = DeviceGroup::join(BackendKind::Cpu, 0, &id, 1, 0).unwrap();
    assert_eq!(alone.ranks(), 1);
}
