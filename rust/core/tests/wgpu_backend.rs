//! wgpu-specific behaviour beyond the conformance suite. Skipped (with a
//! note) where no wgpu adapter is available, unless `WEIR_REQUIRE_BACKENDS`
//! lists wgpu.
#![cfg(feature = "wgpu")]

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::channel;
use std::sync::Arc;
use std::task::{Context, Wake, Waker};
use std::time::{Duration, Instant};

use weir_core::{Arg, BackendKind, ElementType, Error, Grid, Kernel, RawAccess, Runtime};

#[path = "support/wgpu_runtime.rs"]
mod wgpu_runtime;
use wgpu_runtime::{device_of, open};

#[test]
fn writes_and_reads_at_unaligned_offsets_keep_neighbouring_bytes() {
    let Some(runtime) = open() else { return };
    let s = runtime.default_stream();
    let buffer = s.upload(&[0xAAu8; 23]).unwrap();
    s.write(&buffer, 1, &[1u8, 2, 3]).unwrap(); // inside one word
    s.write(&buffer, 6, &[4u8, 5, 6, 7, 8, 9, 10]).unwrap(); // across three words
    s.write(&buffer, 21, &[11u8, 12]).unwrap(); // the buffer's last bytes
    let mut expected = vec![0xAAu8; 23];
    expected[1..4].copy_from_slice(&[1, 2, 3]);
    expected[6..13].copy_from_slice(&[4, 5, 6, 7, 8, 9, 10]);
    expected[21..23].copy_from_slice(&[11, 12]);
    assert_eq!(s.read(&buffer).unwrap(), expected);
    assert_eq!(s.enqueue_read_at(&buffer, 5, 3).unwrap().wait().unwrap(), expected[5..8].to_vec());
    runtime.close().unwrap();
}

const SAXPY: &str = "
struct Params { n: u32, alpha: f32 }
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;

@compute @workgroup_size(64)
fn saxpy(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < p.n) { y[id.x] = p.alpha * x[id.x] + y[id.x]; }
}
";

#[test]
fn custom_wgsl_kernel_binds_buffers_in_order_and_scalars_last() {
    let Some(runtime) = open() else { return };
    let s = runtime.default_stream();
    let x = s.upload(&(0..100).map(|i| i as f32).collect::<Vec<_>>()).unwrap();
    let y = s.upload(&[1.0f32; 100]).unwrap();
    let kernel = Kernel::custom("saxpy").wgsl(SAXPY, "saxpy").build();
    let args = [Arg::read(&x), Arg::read_write(&y), Arg::u32(100), Arg::f32(2.0)];
    s.execute(&kernel, Grid::linear(100, 64), &args).unwrap();
    // The second launch reuses the cached pipeline and sees the first one's result.
    s.execute(&kernel, Grid::linear(100, 64), &args).unwrap();
    let expected: Vec<f32> = (0..100).map(|i| 1.0 + 4.0 * i as f32).collect();
    assert_eq!(s.read_as::<f32>(&y).unwrap(), expected);
    runtime.close().unwrap();
}

#[test]
fn kernel_writing_a_buffer_declared_read_is_refused_before_admission() {
    let Some(runtime) = open() else { return };
    let s = runtime.new_stream().unwrap();
    let x = s.upload(&[1.0f32; 64]).unwrap();
    let y = s.zeros(ElementType::Bytes, 256).unwrap();
    s.fence().unwrap().wait().unwrap();
    let admitted = runtime.diagnostics().admitted_ops;
    let kernel = Kernel::custom("saxpy").wgsl(SAXPY, "saxpy").build();
    // y is written by the shader but declared Read: the pipeline does not
    // validate against the layout the accesses declare.
    let args = [Arg::read(&x), Arg::read(&y), Arg::u32(64), Arg::f32(2.0)];
    let error = s.execute(&kernel, Grid::linear(64, 64), &args).unwrap_err();
    assert!(matches!(&error, Error::InvalidArgument(message) if message.contains("saxpy")), "{error:?}");
    assert_eq!(runtime.diagnostics().admitted_ops, admitted, "a refused op was admitted");
    // Nothing was admitted: the stream goes on.
    s.fence().unwrap().wait().unwrap();
    assert!(s.read_as::<f32>(&y).unwrap().iter().all(|&v| v == 0.0));
    runtime.close().unwrap();
}

#[test]
fn wgsl_that_does_not_compile_is_refused_with_the_compiler_message() {
    let Some(runtime) = open() else { return };
    let s = runtime.new_stream().unwrap();
    let out = s.zeros(ElementType::Bytes, 16).unwrap();
    let admitted = runtime.diagnostics().admitted_ops;
    let kernel = Kernel::custom("broken")
        .wgsl("@compute @workgroup_size(1)\nfn main() { deliberate failure }\n", "main")
        .build();
    for _ in 0..2 {
        // The second launch meets the cached failure: the same refusal.
        let error = s.execute(&kernel, Grid::linear(1, 1), &[Arg::write(&out)]).unwrap_err();
        let Error::InvalidArgument(message) = &error else { panic!("not an argument error: {error:?}") };
        assert!(message.contains("broken") && message.contains("deliberate"), "{message}");
    }
    assert_eq!(runtime.diagnostics().admitted_ops, admitted, "a refused op was admitted");
    s.fill_u32(&out, 3).unwrap();
    assert_eq!(s.read_as::<u32>(&out).unwrap(), vec![3; 4]);
    runtime.close().unwrap();
}

/// A kernel whose one expression nests `depth` deep: naga recurses over it.
fn deep_kernel(depth: usize) -> String {
    let mut expression = "x[0]".to_owned();
    for _ in 0..depth {
        expression = format!("({expression} + 1u)");
    }
    format!(
        "@group(0) @binding(0) var<storage, read_write> x: array<u32>;
@compute @workgroup_size(1)
fn main() {{ x[0] = {expression}; }}
"
    )
}

/// Executes `kernel` over `out` from a thread with only `stack` bytes of stack.
fn execute_with_stack(
    stack: usize,
    s: &weir_core::Stream,
    kernel: &Kernel,
    out: &weir_core::Buffer,
) -> weir_core::Result<()> {
    let caller = std::thread::Builder::new().stack_size(stack);
    std::thread::scope(|scope| {
        caller
            .spawn_scoped(scope, || s.execute(kernel, Grid::linear(1, 1), &[Arg::read_write(out)]))
            .unwrap()
            .join()
            .unwrap()
    })
}

#[test]
fn a_deeply_nested_kernel_compiles_off_a_small_caller_stack() {
    let Some(runtime) = open() else { return };
    let s = runtime.new_stream().unwrap();
    let out = s.upload(&[5u32]).unwrap();
    let kernel = Kernel::custom("deep").wgsl(deep_kernel(150), "main").build();
    // A caller with a small stack, as JVM and test threads often have: the
    // compile must not run on it.
    let outcome = execute_with_stack(256 << 10, &s, &kernel, &out);
    match outcome {
        Ok(()) => assert_eq!(s.read_as::<u32>(&out).unwrap(), vec![155]),
        // Refused by a compiler limit is fine too: what matters is no overflow.
        Err(error) => assert!(matches!(error, Error::InvalidArgument(_)), "{error:?}"),
    }
    runtime.close().unwrap();
}

/// Declares 64 bytes of storage, so binding fewer fails when recorded.
const SIXTY_FOUR_BYTES: &str = "
@group(0) @binding(0) var<storage, read_write> out: array<vec4<u32>, 4>;
@compute @workgroup_size(1)
fn main() { out[0] = vec4<u32>(1u); }
";

#[test]
fn an_op_that_fails_to_record_fails_alone_with_its_data_and_its_stream_goes_on() {
    let Some(runtime) = open() else { return };
    let (s, t) = (runtime.new_stream().unwrap(), runtime.new_stream().unwrap());
    let small = s.zeros(ElementType::Bytes, 4).unwrap();
    let dependent = s.zeros(ElementType::Bytes, 4).unwrap();
    let (before, after) = (s.zeros(ElementType::U32, 4).unwrap(), s.zeros(ElementType::U32, 4).unwrap());
    s.fence().unwrap().wait().unwrap();
    let kernel = Kernel::custom("sixty_four").wgsl(SIXTY_FOUR_BYTES, "main").build();
    // Recorded into one encoder as the stream submits: the ops beside the
    // failing one still run, and the op reading its output fails with it.
    s.fill_u32(&before, 1).unwrap();
    s.execute(&kernel, Grid::linear(1, 1), &[Arg::write(&small)]).unwrap();
    s.copy(&small, &dependent).unwrap();
    s.fill_u32(&after, 2).unwrap();
    let fenced = s.fence().unwrap().wait().unwrap_err();
    match &fenced {
        Error::OpFailed { message, .. } => assert!(message.contains("and 1 more failed op"), "{message}"),
        other => panic!("{other:?}"),
    }
    // The op failed, not its stream: the next fence is clean and s runs work.
    s.fence().unwrap().wait().unwrap();
    assert_eq!(s.read_as::<u32>(&before).unwrap(), vec![1; 4]);
    assert_eq!(s.read_as::<u32>(&after).unwrap(), vec![2; 4]);
    // The failure follows the data, on any stream; a full overwrite heals it.
    assert!(matches!(t.read(&small).unwrap_err(), Error::OpFailed { .. }));
    assert!(matches!(s.read(&dependent).unwrap_err(), Error::OpFailed { .. }));
    s.fill_u32(&small, 3).unwrap();
    assert_eq!(s.read_as::<u32>(&small).unwrap(), vec![3]);
    let other = t.upload(&[8u32; 4]).unwrap();
    assert_eq!(t.read_as::<u32>(&other).unwrap(), vec![8; 4]);
    runtime.close().unwrap();
}

#[test]
fn a_failure_in_a_submission_streams_share_fails_only_its_op_and_its_readers() {
    let Some(runtime) = open() else { return };
    let (s, t) = (runtime.new_stream().unwrap(), runtime.new_stream().unwrap());
    let small = s.zeros(ElementType::Bytes, 4).unwrap();
    let dependent = t.zeros(ElementType::Bytes, 4).unwrap();
    let fine = t.zeros(ElementType::U32, 4).unwrap();
    runtime.fence().unwrap().wait().unwrap();
    let kernel = Kernel::custom("sixty_four").wgsl(SIXTY_FOUR_BYTES, "main").build();
    s.execute(&kernel, Grid::linear(1, 1), &[Arg::write(&small)]).unwrap();
    t.copy(&small, &dependent).unwrap(); // t waits for s: both go in one submission
    t.fill_u32(&fine, 4).unwrap();
    // t's fence submits s's op and t's together: only t's reader of it fails.
    let on_t = t.fence().unwrap().wait().unwrap_err();
    assert!(matches!(&on_t, Error::OpFailed { message, .. } if message.contains("failed op")), "{on_t:?}");
    let on_s = s.fence().unwrap().wait().unwrap_err();
    assert!(matches!(on_s, Error::OpFailed { .. }), "{on_s:?}");
    assert_eq!(t.read_as::<u32>(&fine).unwrap(), vec![4; 4]);
    assert!(t.read(&dependent).is_err());
    // s's failure was reported once: its stream goes on.
    s.fence().unwrap().wait().unwrap();
    runtime.close().unwrap();
}

/// A wgpu backend opened directly (beside the runtime's), for tests of its
/// own bookkeeping; `None` (skipped) where no adapter is.
fn open_backend() -> Option<weir_core::backend::wgpu::WgpuBackend> {
    open()?.close().unwrap();
    Some(weir_core::backend::wgpu::WgpuBackend::open(0).unwrap())
}

/// Signals a fence on `stream` and waits for it.
fn fence_and_wait<B: weir_core::backend::Backend>(backend: &B, stream: &B::Stream) {
    use weir_core::backend::{direct, SignalKind};
    let done = direct::completion(1);
    backend.signal(stream, done.clone(), SignalKind::Fence).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done.is_complete() {
        assert!(Instant::now() < deadline, "the fence never completed");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn bind_groups_are_reused_and_dropped_with_their_buffers() {
    use weir_core::backend::{direct, Backend, Command, Span};
    let Some(backend) = open_backend() else { return };
    let stream = backend.create_stream(0).unwrap();
    let (memory, other) = (backend.allocate(16).unwrap(), backend.allocate(16).unwrap());
    let fill = |memory, word| Command::Fill { dst: Span { buffer: memory, offset: 0, len: 16 }, word };
    for word in [1, 2, 3] {
        // SAFETY: both memories outlive the signal waited for below; one stream uses them.
        unsafe { direct::submit(&backend, &stream, fill(&memory, word)) }.unwrap();
    }
    // SAFETY: as above.
    unsafe { direct::submit(&backend, &stream, fill(&other, 4)) }.unwrap();
    fence_and_wait(&backend, &stream);
    let Some(kept) = backend.kept_bind_groups() else {
        eprintln!("wgpu: bind group reuse skipped (the device takes no immediate data)");
        return;
    };
    assert_eq!(kept, 2, "the fills of one buffer share one group");
    drop(memory);
    assert_eq!(backend.kept_bind_groups(), Some(1), "a freed buffer's groups go with it");
    drop(other);
    assert_eq!(backend.kept_bind_groups(), Some(0));
}

/// An external op admitted behind an op that fails only as its batch is
/// recorded (after the external op's admission saw no failure) fails with
/// it, and what it writes is not read as good: its commands were submitted
/// over the unwritten input before.
#[test]
fn an_external_op_over_an_input_that_fails_as_it_is_recorded_fails_too() {
    let Some(runtime) = open() else { return };
    let s = runtime.new_stream().unwrap();
    let small = s.zeros(ElementType::Bytes, 4).unwrap();
    let out = s.zeros(ElementType::U32, 1).unwrap();
    s.fence().unwrap().wait().unwrap();
    let kernel = Kernel::custom("sixty_four").wgsl(SIXTY_FOUR_BYTES, "main").build();
    s.execute(&kernel, Grid::linear(1, 1), &[Arg::write(&small)]).unwrap();
    s.external(&[(&small, weir_core::Access::Read), (&out, weir_core::Access::Write)], |raw| {
        let RawAccess::Wgpu(raw) = raw else { unreachable!("a wgpu runtime") };
        let (from, to) = (raw.buffers()[0].clone(), raw.buffers()[1].clone());
        // Through a buffer of its own: small buffers may share one wgpu buffer.
        let scratch = raw.device().create_buffer(&weir_core::wgpu::BufferDescriptor {
            label: Some("scratch"),
            size: 4,
            usage: weir_core::wgpu::BufferUsages::COPY_SRC | weir_core::wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        raw.encoder().copy_buffer_to_buffer(&from.buffer, from.offset, &scratch, 0, 4);
        raw.encoder().copy_buffer_to_buffer(&scratch, 0, &to.buffer, to.offset, 4);
        Ok(())
    })
    .unwrap();
    match s.fence().unwrap().wait() {
        Err(Error::OpFailed { message, .. }) => assert!(message.contains("and 1 more failed op"), "{message}"),
        other => panic!("both ops fail: {other:?}"),
    }
    assert!(s.read(&out).is_err(), "an external op over a failed input was read as written");
    runtime.close().unwrap();
}

#[test]
fn work_issued_before_a_failed_external_write_still_runs() {
    let Some(runtime) = open() else { return };
    let (s, t) = (runtime.new_stream().unwrap(), runtime.new_stream().unwrap());
    let (x, y) = (s.zeros(ElementType::U32, 4).unwrap(), s.zeros(ElementType::U32, 4).unwrap());
    runtime.fence().unwrap().wait().unwrap();
    s.fill_u32(&x, 7).unwrap();
    let copy_onto_itself = s.external_write(&[&y], |raw| {
        let RawAccess::Wgpu(raw) = raw else { unreachable!("a wgpu runtime") };
        let range = raw.buffers()[0].clone();
        raw.encoder().copy_buffer_to_buffer(&range.buffer, range.offset, &range.buffer, range.offset, 4);
        Ok(())
    });
    assert!(copy_onto_itself.is_err(), "a copy of a buffer onto itself is refused");
    // The failure is after the fill in s (issued with it, not yet
    // submitted): the fill ran, as t sees.
    assert_eq!(t.read_as::<u32>(&x).unwrap(), vec![7; 4]);
    runtime.close().unwrap();
}

#[test]
fn a_submission_refused_whole_fails_what_it_would_have_written() {
    let Some(runtime) = open() else { return };
    let (s, t, reader) = (runtime.new_stream().unwrap(), runtime.new_stream().unwrap(), runtime.new_stream().unwrap());
    let (x, z) = (t.zeros(ElementType::U32, 4).unwrap(), t.zeros(ElementType::U32, 4).unwrap());
    runtime.fence().unwrap().wait().unwrap();
    t.fill_u32(&x, 7).unwrap();
    t.fill_u32(&z, 9).unwrap();
    // The external write waits for t's fill of z, which issues t's fills
    // into the submission it goes in. Its copy reads a buffer it leaves
    // mapped, which wgpu only refuses as the commands are submitted: the
    // submission is refused whole, and nothing in it runs.
    let mut left_mapped = None;
    s.external(&[(&z, weir_core::Access::Write)], |raw| {
        let RawAccess::Wgpu(raw) = raw else { unreachable!("a wgpu runtime") };
        let range = raw.buffers()[0].clone();
        let scratch = raw.device().create_buffer(&weir_core::wgpu::BufferDescriptor {
            label: Some("left mapped"),
            size: 16,
            usage: weir_core::wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: true,
        });
        raw.encoder().copy_buffer_to_buffer(&scratch, 0, &range.buffer, range.offset, 16);
        left_mapped = Some(scratch);
        Ok(())
    })
    .unwrap();
    assert!(s.fence().unwrap().wait().is_err(), "the refused submission ran the external write");
    // t's fills were in it: what they would have written fails its readers,
    // rather than being read as zeros with no error.
    assert!(reader.read_as::<u32>(&x).is_err(), "a fill that never ran was read as written");
    assert!(reader.read_as::<u32>(&z).is_err(), "an external write that never ran was read as written");
    drop(left_mapped);
    // The runtime goes on: new work on a new stream runs.
    let fresh = runtime.new_stream().unwrap();
    fresh.fill_u32(&x, 3).unwrap();
    assert_eq!(fresh.read_as::<u32>(&x).unwrap(), vec![3; 4]);
}

/// Adds the scalar to the first word.
const ADD_SCALAR: &str = "
@group(0) @binding(0) var<storage, read_write> x: array<u32>;
struct Scalars { k: u32 }
@group(0) @binding(1) var<uniform> p: Scalars;
@compute @workgroup_size(1)
fn main() { x[0] = x[0] + p.k; }
";

#[test]
fn ops_queued_behind_a_hold_cost_bytes_not_command_buffers() {
    let Some(runtime) = open() else { return };
    let s = runtime.new_stream().unwrap();
    let counter = s.zeros(ElementType::U32, 1).unwrap();
    let kernel = Kernel::custom("add_scalar").wgsl(ADD_SCALAR, "main").build();
    let add = |k: u32| s.execute(&kernel, Grid::linear(1, 1), &[Arg::read_write(&counter), Arg::u32(k)]).unwrap();
    add(0);
    s.fence().unwrap().wait().unwrap();
    let idle = runtime.diagnostics().backend;
    assert_eq!((idle.queued_ops, idle.queued_bytes), (0, 0), "nothing queued on an idle runtime");
    let hold = s.hold().unwrap();
    const OPS: u64 = 5_000;
    for k in 0..OPS {
        add(k as u32);
    }
    let held = runtime.diagnostics().backend;
    assert_eq!(held.queued_ops, OPS, "every op behind the hold is queued, none recorded");
    let per_op = held.queued_bytes / OPS;
    assert!((64..=1024).contains(&per_op), "{per_op} bytes per queued op");
    hold.release();
    s.fence().unwrap().wait().unwrap();
    let done = runtime.diagnostics().backend;
    assert_eq!((done.queued_ops, done.queued_bytes), (0, 0), "recording releases what the queue held");
    let sum = (0..OPS as u32).fold(0u32, u32::wrapping_add);
    assert_eq!(s.read_as::<u32>(&counter).unwrap(), vec![sum]);
    runtime.close().unwrap();
}

#[test]
fn runs_recorded_together_keep_cross_stream_order() {
    let Some(runtime) = open() else { return };
    let (s, t) = (runtime.new_stream().unwrap(), runtime.new_stream().unwrap());
    let [a, b, c, d] = [0; 4].map(|_| s.zeros(ElementType::F32, 64).unwrap());
    s.fence().unwrap().wait().unwrap();
    // Everything below is queued behind the hold, more than a batch on s.
    let hold = s.hold().unwrap();
    s.fill_f32(&a, 1.0).unwrap();
    for _ in 0..40 {
        s.axpy(1.0, &a, &b).unwrap(); // b = 40
    }
    t.axpy(1.0, &b, &c).unwrap(); // t waits for s's last write of b: c = 40
    s.add(&b, &c, &d).unwrap(); // s waits for t: d = 80
    t.fill_f32(&a, 5.0).unwrap(); // t waits for s's reads of a
    let early = t.fence().unwrap();
    assert!(!early.is_complete(), "t ran past the held stream");
    hold.release();
    assert_eq!(t.read_as::<f32>(&c).unwrap(), vec![40.0; 64]);
    assert_eq!(s.read_as::<f32>(&d).unwrap(), vec![80.0; 64]);
    assert_eq!(s.read_as::<f32>(&b).unwrap(), vec![40.0; 64]);
    assert_eq!(s.read_as::<f32>(&a).unwrap(), vec![5.0; 64]);
    early.wait().unwrap();
    runtime.close().unwrap();
}

#[test]
fn too_many_work_groups_is_an_argument_error() {
    let Some(runtime) = open() else { return };
    let s = runtime.default_stream();
    let (x, y) = (s.zeros(ElementType::Bytes, 4).unwrap(), s.zeros(ElementType::Bytes, 4).unwrap());
    let kernel = Kernel::custom("saxpy").wgsl(SAXPY, "saxpy").build();
    let grid = Grid::new([u32::MAX, 1, 1], [64, 1, 1]);
    let args = [Arg::read(&x), Arg::read_write(&y), Arg::u32(1), Arg::f32(1.0)];
    let error = s.execute(&kernel, grid, &args).unwrap_err();
    assert!(matches!(error, Error::InvalidArgument(_)), "{error:?}");
    // Not a device failure: the stream goes on.
    s.fence().unwrap().wait().unwrap();
    runtime.close().unwrap();
}

#[test]
fn a_delay_holds_only_its_own_stream() {
    let Some(runtime) = open() else { return };
    let (s, t) = (runtime.new_stream().unwrap(), runtime.new_stream().unwrap());
    // Long against the other stream's work, so that a busy machine does not
    // make the delay run out first.
    const DELAY: Duration = Duration::from_secs(2);
    let start = Instant::now();
    s.delay(DELAY).unwrap();
    let held = s.fence().unwrap();
    let out = t.zeros(ElementType::Bytes, 16).unwrap();
    t.fill_u32(&out, 9).unwrap();
    assert_eq!(t.read_as::<u32>(&out).unwrap(), vec![9; 4]);
    assert!(!held.is_complete(), "the delayed stream finished early");
    held.wait().unwrap();
    assert!(start.elapsed() >= DELAY);
    runtime.close().unwrap();
}

#[test]
fn buffers_beyond_the_device_limit_are_refused_clearly() {
    let Some(runtime) = open() else { return };
    let too_big = runtime.info().max_buffer_bytes + 4;
    let error = runtime.default_stream().empty(ElementType::Bytes, too_big).unwrap_err();
    assert!(error.to_string().contains("buffer limit"), "{error}");
    runtime.close().unwrap();
}

/// Runs `body` on a thread of its own and fails the test if it has not
/// finished within `limit`: a stalled completion path shows as a failure,
/// not as a hung test run.
fn within<T: Send + 'static>(limit: Duration, what: &str, body: impl FnOnce() -> T + Send + 'static) -> T {
    let (sender, receiver) = channel();
    std::thread::spawn(move || {
        let _ = sender.send(body());
    });
    match receiver.recv_timeout(limit) {
        Ok(value) => value,
        Err(_) => panic!("{what} did not finish within {limit:?}"),
    }
}

#[test]
fn a_stream_fence_covers_the_reads_admitted_before_it() {
    let Some(runtime) = open() else { return };
    let s = runtime.new_stream().unwrap();
    let source = s.upload(&[7u32; 16]).unwrap();
    s.fence().unwrap().wait().unwrap();
    let stop = AtomicBool::new(false);
    let (mut trials, mut violations) = (0u32, 0u32);
    std::thread::scope(|scope| {
        // Two other threads submit all the time, so that callbacks fire from
        // their submissions as well as from the poll thread.
        for value in 0..2u32 {
            let (runtime, stop) = (&runtime, &stop);
            scope.spawn(move || {
                let t = runtime.new_stream().unwrap();
                let buffer = t.zeros(ElementType::Bytes, 64).unwrap();
                while !stop.load(Ordering::Relaxed) {
                    t.fill_u32(&buffer, value).unwrap();
                    t.fence().unwrap().wait().unwrap();
                }
            });
        }
        let start = Instant::now();
        while trials < 20_000 && start.elapsed() < Duration::from_secs(12) {
            let read = s.enqueue_read(&source).unwrap();
            let fence = s.fence().unwrap();
            fence.wait().unwrap();
            if !read.is_complete() {
                violations += 1;
            }
            assert_eq!(read.wait().unwrap(), [7u32; 16].iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<u8>>());
            trials += 1;
        }
        stop.store(true, Ordering::Relaxed);
    });
    eprintln!("{violations} of {trials} fences completed before the read admitted before them");
    assert!(trials >= 1000, "only {trials} trials ran");
    assert_eq!(violations, 0, "{violations} of {trials} fences completed before an earlier read");
    runtime.close().unwrap();
}

struct PanickingWaker;

impl Wake for PanickingWaker {
    fn wake(self: Arc<Self>) {
        panic!("a waker's own bug");
    }
}

#[test]
fn a_panicking_waker_does_not_stop_later_completions() {
    let Some(runtime) = open() else { return };
    let s = runtime.new_stream().unwrap();
    let hold = s.hold().unwrap();
    let fence = s.fence().unwrap();
    let waker = Waker::from(Arc::new(PanickingWaker));
    let mut waiting = pin!(fence.wait_async());
    assert!(waiting.as_mut().poll(&mut Context::from_waker(&waker)).is_pending());
    hold.release();
    within(Duration::from_secs(30), "the fence after a panicking waker", move || {
        fence.wait().unwrap();
        let t = runtime.new_stream().unwrap();
        for round in 0..20u32 {
            let buffer = t.upload(&[round; 8]).unwrap();
            assert_eq!(t.read_as::<u32>(&buffer).unwrap(), vec![round; 8]);
            s.fence().unwrap().wait().unwrap();
        }
        runtime.close().unwrap();
    });
}

#[test]
fn a_panicking_wgpu_callback_does_not_stop_the_poll_thread() {
    let Some(runtime) = open() else { return };
    within(Duration::from_secs(30), "work beside panicking wgpu callbacks", move || {
        let s = runtime.new_stream().unwrap();
        let target = s.zeros(ElementType::Bytes, 16).unwrap();
        let busy = s.zeros(ElementType::Bytes, 64 << 20).unwrap();
        // Callbacks registered through raw access run wherever wgpu fires
        // them: in a submission Weir makes, or in the poll thread's
        // `device.poll` when they wait for work still running (here, a large
        // clear) and nothing else is submitted meanwhile.
        for round in 0..6 {
            let running = (round % 2 == 1).then(|| {
                s.memset_zero(&busy).unwrap();
                s.fence().unwrap()
            });
            s.external_write(&[&target], |raw| {
                let RawAccess::Wgpu(raw) = raw else { unreachable!("a wgpu runtime") };
                raw.queue().on_submitted_work_done(|| panic!("a foreign callback's own bug"));
                let range = raw.buffers()[0].clone();
                raw.encoder().clear_buffer(&range.buffer, range.offset, Some(range.len));
                Ok(())
            })
            .unwrap();
            if let Some(running) = running {
                running.wait().unwrap();
            }
            s.fence().unwrap().wait().unwrap();
        }
        let t = runtime.new_stream().unwrap();
        for round in 0..20u32 {
            let buffer = t.upload(&[round; 8]).unwrap();
            assert_eq!(t.read_as::<u32>(&buffer).unwrap(), vec![round; 8]);
            s.fill_u32(&target, round).unwrap();
            s.fence().unwrap().wait().unwrap();
        }
        assert_eq!(s.read_as::<u32>(&target).unwrap(), vec![19; 4]);
        runtime.close().unwrap();
    });
}

#[test]
fn retired_streams_leave_no_live_lanes() {
    let Some(runtime) = open() else { return };
    let before = runtime.diagnostics().backend.live_streams;
    assert!(before >= 1, "the default stream is a live stream: {before}");
    let probe = runtime.new_stream().unwrap();
    assert_eq!(runtime.diagnostics().backend.live_streams, before + 1);
    drop(probe);
    for round in 0..1000u32 {
        let t = runtime.new_stream().unwrap();
        let buffer = t.zeros(ElementType::Bytes, 16).unwrap();
        t.fill_u32(&buffer, round).unwrap();
        assert_eq!(t.read_as::<u32>(&buffer).unwrap(), vec![round; 4]);
    }
    // Streams retire once their work is done; a fence on everything covers that.
    runtime.fence().unwrap().wait().unwrap();
    assert_eq!(runtime.diagnostics().backend.live_streams, before);
    runtime.close().unwrap();
}

/// `a[0] = 1u + 1u + …` with `terms` terms: one long expression.
fn long_sum_kernel(terms: usize) -> String {
    let sum = vec!["1u"; terms].join(" + ");
    format!("@group(0) @binding(0) var<storage, read_write> a: array<u32>;\n@compute @workgroup_size(1)\nfn main() {{ a[0] = {sum}; }}\n")
}

#[test]
fn long_kernel_sources_are_compiled_or_refused_from_a_small_stack_never_abort() {
    let Some(runtime) = open() else { return };
    let s = runtime.new_stream().unwrap();
    let out = s.zeros(ElementType::Bytes, 4).unwrap();
    for terms in [2_000, 10_000, 100_000] {
        let kernel = Kernel::custom("long").wgsl(long_sum_kernel(terms), "main").build();
        let outcome = execute_with_stack(512 << 10, &s, &kernel, &out);
        match outcome {
            Ok(()) => assert_eq!(s.read_as::<u32>(&out).unwrap(), vec![terms as u32]),
            // Within the bound a source compiles; past it, a typed refusal.
            Err(error) => {
                assert!(terms > 2_048, "{terms} terms should compile: {error:?}");
                assert!(matches!(error, Error::InvalidArgument(_)), "{terms} terms: {error:?}");
            }
        }
    }
    runtime.close().unwrap();
}

/// Launches `kernel` with `args` expecting a refusal before admission whose
/// message names the kernel and contains every one of `says`; the stream
/// goes on.
fn refused_at_first_launch(runtime: &Runtime, kernel: &Kernel, args: &[Arg<'_>], says: &[&str]) {
    let s = runtime.new_stream().unwrap();
    let admitted = runtime.diagnostics().admitted_ops;
    for _ in 0..2 {
        // The second launch meets the cached refusal.
        let error = s.execute(kernel, Grid::linear(4, 4), args).unwrap_err();
        let Error::InvalidArgument(message) = &error else { panic!("not an argument error: {error:?}") };
        assert!(message.contains(kernel.name()), "{message}");
        for part in says {
            assert!(message.contains(part), "{message:?} does not say {part:?}");
        }
    }
    assert_eq!(runtime.diagnostics().admitted_ops, admitted, "a refused op was admitted");
    s.fence().unwrap().wait().unwrap();
}

const ONE_BUFFER: &str = "
@group(0) @binding(0) var<storage, read_write> out: array<u32>;
@compute @workgroup_size(4)
fn main(@builtin(global_invocation_id) id: vec3<u32>) { out[id.x] = 5u; }
";

#[test]
fn a_kernel_binding_fewer_buffers_than_passed_is_refused() {
    let Some(runtime) = open() else { return };
    let s = runtime.default_stream();
    let (a, b, c) = (
        s.zeros(ElementType::Bytes, 16).unwrap(),
        s.zeros(ElementType::Bytes, 16).unwrap(),
        s.zeros(ElementType::Bytes, 16).unwrap(),
    );
    let kernel = Kernel::custom("one_buffer").wgsl(ONE_BUFFER, "main").build();
    refused_at_first_launch(
        &runtime,
        &kernel,
        &[Arg::write(&a), Arg::read(&b), Arg::read(&c)],
        &["3 buffer arguments passed", "declares 1 storage buffer", "`out` at @group(0) @binding(0)"],
    );
    // The same kernel with the one buffer it binds runs.
    s.execute(&kernel, Grid::linear(4, 4), &[Arg::write(&a)]).unwrap();
    assert_eq!(s.read_as::<u32>(&a).unwrap(), vec![5; 4]);
    runtime.close().unwrap();
}

const THREE_BUFFERS: &str = "
@group(0) @binding(0) var<storage, read> a: array<u32>;
@group(0) @binding(1) var<storage, read> b: array<u32>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;
@compute @workgroup_size(4)
fn main(@builtin(global_invocation_id) id: vec3<u32>) { out[id.x] = a[id.x] + b[id.x]; }
";

#[test]
fn a_kernel_binding_other_buffers_than_passed_is_refused() {
    let Some(runtime) = open() else { return };
    let s = runtime.default_stream();
    let (a, b, out) =
        (s.upload(&[1u32; 4]).unwrap(), s.upload(&[2u32; 4]).unwrap(), s.zeros(ElementType::Bytes, 16).unwrap());
    let kernel = Kernel::custom("three_buffers").wgsl(THREE_BUFFERS, "main").build();
    refused_at_first_launch(
        &runtime,
        &kernel,
        &[Arg::read(&a), Arg::write(&out)],
        &["2 buffer arguments passed", "declares 3 storage buffers", "`out` at @group(0) @binding(2)"],
    );
    // As many, with another access than each binding declares.
    refused_at_first_launch(
        &runtime,
        &kernel,
        &[Arg::read(&a), Arg::read(&b), Arg::read(&out)],
        &["`out` at @group(0) @binding(2) is declared read_write", "passed as a read"],
    );
    refused_at_first_launch(
        &runtime,
        &kernel,
        &[Arg::read_write(&a), Arg::read(&b), Arg::write(&out)],
        &["`a` at @group(0) @binding(0) is declared read-only", "passed writable"],
    );
    s.execute(&kernel, Grid::linear(4, 4), &[Arg::read(&a), Arg::read(&b), Arg::write(&out)]).unwrap();
    assert_eq!(s.read_as::<u32>(&out).unwrap(), vec![3; 4]);
    runtime.close().unwrap();
}

#[test]
fn scalars_that_do_not_fit_the_kernels_uniform_are_refused() {
    let Some(runtime) = open() else { return };
    let s = runtime.default_stream();
    let x = s.upload(&[1.0f32; 64]).unwrap();
    let y = s.zeros(ElementType::Bytes, 256).unwrap();
    let kernel = Kernel::custom("saxpy").wgsl(SAXPY, "saxpy").build();
    // Params is { n: u32, alpha: f32 }.
    refused_at_first_launch(
        &runtime,
        &kernel,
        &[Arg::read(&x), Arg::read_write(&y), Arg::u32(64)],
        &["`p` at @group(0) @binding(2)", "struct of 2 fields", "1 scalar passed (u32)"],
    );
    refused_at_first_launch(
        &runtime,
        &kernel,
        &[Arg::read(&x), Arg::read_write(&y), Arg::u32(64), Arg::u32(2)],
        &["field `alpha` is f32", "scalar 1 is u32"],
    );
    refused_at_first_launch(
        &runtime,
        &kernel,
        &[Arg::read(&x), Arg::read_write(&y)],
        &["`p` at @group(0) @binding(2) is a uniform", "no scalar arguments were passed"],
    );
    let unscaled = Kernel::custom("one_buffer").wgsl(ONE_BUFFER, "main").build();
    refused_at_first_launch(
        &runtime,
        &unscaled,
        &[Arg::write(&y), Arg::f32(1.0)],
        &["1 scalar argument passed", "declares no uniform to hold them"],
    );
    // The right arguments run.
    s.execute(&kernel, Grid::linear(64, 64), &[Arg::read(&x), Arg::read_write(&y), Arg::u32(64), Arg::f32(3.0)])
        .unwrap();
    assert_eq!(s.read_as::<f32>(&y).unwrap(), vec![3.0; 64]);
    runtime.close().unwrap();
}

#[test]
fn a_missing_entry_point_is_refused_naming_the_ones_there() {
    let Some(runtime) = open() else { return };
    let s = runtime.default_stream();
    let out = s.zeros(ElementType::Bytes, 16).unwrap();
    let kernel = Kernel::custom("misnamed").wgsl(ONE_BUFFER, "mian").build();
    refused_at_first_launch(&runtime, &kernel, &[Arg::write(&out)], &["no compute entry point `mian`", "it has: main"]);
    runtime.close().unwrap();
}

#[test]
fn small_buffers_share_a_wgpu_buffer_and_keep_to_their_own_bytes() {
    let Some(runtime) = open() else { return };
    let s = runtime.default_stream();
    let (x, y, z) =
        (s.upload(&[1u32; 4]).unwrap(), s.upload(&[2u32; 4]).unwrap(), s.zeros(ElementType::U32, 4).unwrap());
    let mut ranges = Vec::new();
    s.external_write(&[&x, &y, &z], |raw| {
        let RawAccess::Wgpu(raw) = raw else { unreachable!("a wgpu runtime") };
        ranges = raw.buffers().to_vec();
        Ok(())
    })
    .unwrap();
    assert!(ranges.iter().all(|range| range.buffer == ranges[0].buffer), "three 16-byte buffers share one: {ranges:?}");
    let mut starts: Vec<u64> = ranges.iter().map(|range| range.offset).collect();
    starts.sort_unstable();
    assert!(starts.windows(2).all(|pair| pair[1] - pair[0] >= 16), "each has bytes of its own: {starts:?}");
    // A kernel reading two of them and writing the third binds one wgpu
    // buffer read-only and writable at once, which wgpu refuses unless the
    // launch binds it writable throughout.
    let add = Kernel::custom("three_buffers").wgsl(THREE_BUFFERS, "main").build();
    s.execute(&add, Grid::linear(4, 4), &[Arg::read(&x), Arg::read(&y), Arg::write(&z)]).unwrap();
    assert_eq!(s.read_as::<u32>(&z).unwrap(), vec![3; 4]);
    // A built-in the same way.
    let (a, b, sum) =
        (s.upload(&[1.0f32; 4]).unwrap(), s.upload(&[2.0f32; 4]).unwrap(), s.zeros(ElementType::F32, 4).unwrap());
    s.add(&a, &b, &sum).unwrap();
    assert_eq!(s.read_as::<f32>(&sum).unwrap(), vec![3.0; 4]);
    // A copy between two of them goes through a scratch buffer (wgpu copies between two buffers only).
    s.copy(&z, &x).unwrap();
    assert_eq!(s.read_as::<u32>(&x).unwrap(), vec![3; 4]);
    assert_eq!(s.read_as::<u32>(&y).unwrap(), vec![2; 4], "the neighbours are untouched");
    runtime.close().unwrap();
}

#[test]
fn a_freed_small_buffers_slot_waits_for_the_work_queued_on_it() {
    use weir_core::backend::{direct, Backend, Command, Gate, Span};
    let Some(backend) = open_backend() else { return };
    let stream = backend.create_stream(0).unwrap();
    let gate = Arc::new(Gate::default());
    backend.hold(&stream, gate.clone()).unwrap();
    let memory = backend.allocate(16).unwrap();
    let slot = (memory.buffer().clone(), memory.offset());
    // SAFETY: the memory is dropped below while the fill is queued, which
    // the backend must allow (the queued op holds its slot); one stream uses it.
    unsafe {
        direct::submit(&backend, &stream, Command::Fill { dst: Span { buffer: &memory, offset: 0, len: 16 }, word: 7 })
    }
    .unwrap();
    drop(memory);
    let next = backend.allocate(16).unwrap();
    assert_ne!((next.buffer().clone(), next.offset()), slot, "a slot is not handed out while work queued on it waits");
    gate.open();
    fence_and_wait(&backend, &stream);
    let again = backend.allocate(16).unwrap();
    assert_eq!((again.buffer().clone(), again.offset()), slot, "once the work is recorded, the slot is free again");
    drop((next, again));
    assert!(backend.shared_buffers() <= 1, "an empty slab goes unless it is the only one with room");
}

#[test]
fn a_hundred_thousand_small_buffers_are_a_few_wgpu_buffers() {
    use weir_core::backend::Backend;
    let Some(backend) = open_backend() else { return };
    let memories: Vec<_> = (0..100_000).map(|_| backend.allocate(4).unwrap()).collect();
    let shared = backend.shared_buffers();
    // 100 000 slots of at most 256 bytes are at most 25 MB: 25 slabs of 1 MiB.
    assert!((1..=25).contains(&shared), "{shared} wgpu buffers hold 100 000 small ones");
    let big = backend.allocate(1 << 20).unwrap();
    assert_eq!(backend.shared_buffers(), shared, "a large allocation has a wgpu buffer of its own");
    assert_eq!(big.offset(), 0);
    drop(memories);
    assert!(backend.shared_buffers() <= 1, "{} slabs stay once every small buffer is gone", backend.shared_buffers());
}

/// Writes its second scalar at the index its first names; its uniform comes
/// first, so it binds by a layout of its own (its scalars cannot go as
/// immediate data).
const PUT: &str = "
struct Put { at: u32, value: u32 }
@group(0) @binding(0) var<uniform> p: Put;
@group(0) @binding(1) var<storage, read_write> out: array<u32>;
@compute @workgroup_size(1)
fn main() { out[p.at] = p.value; }
";

#[test]
fn ops_queued_behind_a_hold_keep_their_scalars_without_a_wgpu_buffer_each() {
    const OPS: u32 = 1_000;
    let Some(shared) = open() else { return };
    shared.close().unwrap();
    // A device of its own: wgpu counts live buffers per device, and other tests share the adapter's.
    let runtime = Runtime::builder(BackendKind::Wgpu).own_device(true).open().unwrap();
    let device = device_of(&runtime);
    let s = runtime.new_stream().unwrap();
    let out = s.zeros(ElementType::U32, u64::from(OPS)).unwrap();
    let kernel = Kernel::custom("put").wgsl(PUT, "main").build();
    let put = |at: u32, value: u32| {
        s.execute(&kernel, Grid::linear(1, 1), &[Arg::read_write(&out), Arg::u32(at), Arg::u32(value)]).unwrap()
    };
    put(0, 0);
    s.fence().unwrap().wait().unwrap();
    let live_buffers = || device.get_internal_counters().hal.buffers.read();
    let before = live_buffers();
    let hold = s.hold().unwrap();
    for at in 0..OPS {
        put(at, at + 1);
    }
    // Every wgpu buffer makes every later pass dearer (wgpu-core sizes its
    // tracking to the most there ever were): the queued ops' scalars wait in
    // host memory, and take slots of a shared buffer only when recorded.
    let grown = live_buffers() - before;
    assert!(grown <= 2, "{OPS} ops queued behind a hold made {grown} wgpu buffers");
    hold.release();
    assert_eq!(s.read_as::<u32>(&out).unwrap(), (1..=OPS).collect::<Vec<_>>());
    // Slots go round: each op still sees its own scalars, on two streams at once.
    let t = runtime.new_stream().unwrap();
    let other = t.zeros(ElementType::U32, u64::from(OPS)).unwrap();
    for round in 1..=3 {
        for at in 0..OPS {
            put(at, round * 10_000 + at);
            t.execute(&kernel, Grid::linear(1, 1), &[Arg::read_write(&other), Arg::u32(at), Arg::u32(round + at)])
                .unwrap();
        }
    }
    assert_eq!(s.read_as::<u32>(&out).unwrap(), (0..OPS).map(|at| 30_000 + at).collect::<Vec<_>>());
    assert_eq!(t.read_as::<u32>(&other).unwrap(), (0..OPS).map(|at| 3 + at).collect::<Vec<_>>());
    runtime.close().unwrap();
}

#[test]
fn a_runtime_asking_for_its_own_device_gets_one_and_runs_beside_the_shared_one() {
    let Some(a) = open() else { return };
    let shared = Runtime::open(BackendKind::Wgpu).unwrap();
    let own = Runtime::builder(BackendKind::Wgpu).own_device(true).open().expect("a wgpu runtime with its own device");
    // Runtimes on an adapter share its device (and so its one queue) unless one asks for its own.
    assert!(device_of(&a) == device_of(&shared), "two plain runtimes on one adapter have two devices");
    assert!(device_of(&own) != device_of(&a), "a runtime that asked for its own device shares the adapter's");
    // Its own device runs ops beside the shared one's long work. Whether it
    // finishes first is the hardware's to say: lavapipe runs every device's
    // dispatches on one thread pool, the H200's Vulkan side by side (see
    // `cargo xtask bench --rust --backend wgpu --only own-device`), so this
    // checks the work, and prints the times.
    let s = a.default_stream();
    let big = s.zeros(ElementType::U32, 16 << 20).unwrap();
    let start = Instant::now();
    for value in 0..8 {
        s.fill_u32(&big, value).unwrap();
    }
    let long = s.fence().unwrap();
    let t = own.default_stream();
    let small = t.zeros(ElementType::U32, 16).unwrap();
    t.fill_u32(&small, 7).unwrap();
    assert_eq!(t.read_as::<u32>(&small).unwrap(), vec![7; 16]);
    let own_done = start.elapsed();
    long.wait().unwrap();
    eprintln!(
        "own device: its fill and read took {own_done:?} beside {:?} of the shared device's fills",
        start.elapsed()
    );
    assert_eq!(s.read_as::<u32>(&big).unwrap()[..4], [7; 4]);
    own.close().unwrap();
    shared.close().unwrap();
    a.close().unwrap();
}
