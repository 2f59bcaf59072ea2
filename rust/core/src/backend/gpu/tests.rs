//! The shared GPU layer over the device layer's fake driver
//! (`weir_device::fake`), so that
//! what needs no device is tested where none exists: what `prepare` does and
//! what it leaves to `enqueue`, rejections versus failures, the completion
//! path's panic containment, and owners dropped on threads that never bound
//! the device.

use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::Duration;

use weir_device::fake::*;

use super::*;
use crate::backend::{Backend, Command, EnqueueError, HostSink, KernelArg, OpIo, OpOutcome, SignalKind, Span};
use crate::completion::Completion;
use crate::diagnostics::LiveCounters;
use crate::error::Error;
use crate::host::HostBuffer;
use crate::kernel::{Access, DeviceCode, DeviceKernel, Grid, KernelSource, ScalarArg};
use crate::lock::lock;
use crate::options::SPIN_BUDGET;

fn backend(wake: Wake) -> (GpuBackend<Fake>, Arc<Shared>) {
    backend_spinning(wake, SPIN_BUDGET)
}

/// A fake backend whose waiting threads spin for up to `spin` per wait.
fn backend_spinning(wake: Wake, spin: Duration) -> (GpuBackend<Fake>, Arc<Shared>) {
    let (fake, shared) = Fake::new(false);
    match GpuBackend::with(fake, wake, spin) {
        Ok(backend) => (backend, shared),
        Err(error) => panic!("the fake backend opens: {error}"),
    }
}

fn completion() -> Arc<Completion> {
    Completion::new(1, Arc::new(LiveCounters::default()))
}

fn span(memory: &GpuMemory<Fake>, offset: u64, len: u64) -> Span<&GpuMemory<Fake>> {
    Span { buffer: memory, offset, len }
}

fn custom(name: &str, code: &str) -> Arc<CustomKernel> {
    Arc::new(CustomKernel {
        name: name.into(),
        cpu: None,
        wgsl: None,
        cuda: Some(DeviceKernel { code: DeviceCode::Source(code.into()), entry: name.into(), options: Vec::new() }),
        hip: None,
    })
}

/// Prepares, then enqueues, `command` on `stream`.
fn submit(
    backend: &GpuBackend<Fake>,
    stream: &GpuStream<Fake>,
    command: Command<&GpuMemory<Fake>>,
) -> Result<(), EnqueueError> {
    let prepared = backend.prepare(&command).map_err(EnqueueError::Rejected)?;
    // SAFETY: the fake touches no memory; the memory outlives the call.
    let enqueued = unsafe { backend.enqueue(stream, command, prepared, OpIo::default()) };
    // The driver calls are made on the issuing thread: once they are, the test looks.
    backend.device.issuer.flush();
    enqueued
}

/// Submits `command` as an op that writes, and returns how it ended once
/// the issuing thread made its driver calls: its failure, if it failed.
fn failure_of(
    backend: &GpuBackend<Fake>,
    stream: &GpuStream<Fake>,
    command: Command<&GpuMemory<Fake>>,
) -> Option<Error> {
    let outcome = Arc::new(OpOutcome::default());
    let prepared = backend.prepare(&command).unwrap();
    let io = OpIo { outcome: Some(outcome.clone()), ..Default::default() };
    // SAFETY: the fake touches no memory; the memory outlives the call.
    unsafe { backend.enqueue(stream, command, prepared, io) }.unwrap();
    backend.device.issuer.flush();
    outcome.failure().cloned()
}

fn fence(backend: &GpuBackend<Fake>, stream: &GpuStream<Fake>) -> Result<()> {
    let done = completion();
    backend.signal(stream, done.clone(), SignalKind::Fence)?;
    done.wait()
}

#[test]
fn a_custom_kernel_compiles_and_loads_in_prepare_and_enqueue_only_launches() {
    let (backend, shared) = backend(Wake::Waiter);
    let stream = backend.create_stream(0).unwrap();
    let memory = backend.allocate(64).unwrap();
    let kernel = custom("put", "extern \"C\" __global__ void put(unsigned* out, unsigned v) {}");
    let command = Command::Custom {
        kernel: kernel.clone(),
        grid: Grid::linear(4, 4),
        args: vec![KernelArg::Buffer(span(&memory, 16, 16), Access::Write), KernelArg::Scalar(ScalarArg::U32(9))],
    };
    let compiles = shared.compiles();
    let prepared = backend.prepare(&command).unwrap();
    assert_eq!(shared.compiles(), compiles + 1, "prepare compiles the kernel");
    assert!(shared.device_calls().is_empty(), "prepare makes no stream call");
    // SAFETY: the fake touches no memory.
    unsafe { backend.enqueue(&stream, command, prepared, OpIo::default()) }.unwrap();
    backend.device.issuer.flush();
    match shared.device_calls().as_slice() {
        [Call::Launch { params, .. }] => assert_eq!(params, &[memory.ptr + 16, 9]),
        calls => panic!("one launch with the buffer's address, got {calls:?}"),
    }
    // Cached: the same source compiles once.
    let again = Command::Custom { kernel, grid: Grid::linear(4, 4), args: Vec::<KernelArg<()>>::new() };
    drop(backend.prepare(&again).unwrap());
    assert_eq!(shared.compiles(), compiles + 1);
    fence(&backend, &stream).unwrap();
    assert_eq!(shared.unbound_calls.load(Ordering::SeqCst), 0);
}

/// Prepares a launch of `kernel` with no arguments.
fn prepare_kernel(backend: &GpuBackend<Fake>, kernel: &Arc<CustomKernel>) -> Result<Prepared<Fake>> {
    let command =
        Command::Custom { kernel: kernel.clone(), grid: Grid::linear(1, 1), args: Vec::<KernelArg<()>>::new() };
    backend.prepare(&command)
}

fn with_cuda(name: &str, cuda: DeviceKernel) -> Arc<CustomKernel> {
    Arc::new(CustomKernel { name: name.into(), cpu: None, wgsl: None, cuda: Some(cuda), hip: None })
}

#[test]
fn a_kernel_named_as_cpp_is_resolved_by_the_compiler_and_one_named_as_c_only_when_needed() {
    let (backend, shared) = backend(Wake::Waiter);
    let source = |code: &str, entry: &str| DeviceKernel {
        code: DeviceCode::Source(code.into()),
        entry: entry.into(),
        options: vec!["-DX=1".into()],
    };
    let compiles = shared.compiles();
    // Found as written: one compile, no name expression.
    drop(prepare_kernel(&backend, &with_cuda("c", source("extern C plain_c", "plain_c"))).unwrap());
    assert_eq!(shared.compiles(), compiles + 1);
    // A C++ name: compiled once, resolving the name.
    drop(prepare_kernel(&backend, &with_cuda("t", source("templates", "ops::scale<float>"))).unwrap());
    assert_eq!(shared.compiles(), compiles + 2);
    // A plain name the module lacks as written (a C++ function's mangled
    // symbol): looked up as written, then resolved by the compiler.
    drop(prepare_kernel(&backend, &with_cuda("m", source("c++ only", "mangled"))).unwrap());
    assert_eq!(shared.compiles(), compiles + 4);
    // Each is cached: none compiles again, for a new kernel object either.
    for (code, entry) in [("extern C plain_c", "plain_c"), ("templates", "ops::scale<float>"), ("c++ only", "mangled")]
    {
        drop(prepare_kernel(&backend, &with_cuda("again", source(code, entry))).unwrap());
    }
    assert_eq!(shared.compiles(), compiles + 4);
    // Other options are another program.
    let mut other = source("templates", "ops::scale<float>");
    other.options.push("--use_fast_math".into());
    drop(prepare_kernel(&backend, &with_cuda("t", other)).unwrap());
    assert_eq!(shared.compiles(), compiles + 5);
    // A name the compiler cannot resolve in a source that compiles.
    match prepare_kernel(&backend, &with_cuda("a", source("templates", "ops::absent<int>"))) {
        Err(Error::InvalidArgument(message)) => {
            assert!(message.starts_with("no kernel named \"ops::absent<int>\" in its source"), "{message}")
        }
        other => panic!("an unresolvable name prepared: {:?}", other.err()),
    }
    assert!(shared.device_calls().is_empty(), "preparing makes no stream call");
}

#[test]
fn a_module_built_elsewhere_loads_without_compiling_and_takes_no_options() {
    let (backend, shared) = backend(Wake::Waiter);
    let image: Arc<[u8]> = b"a cubin holding module_kernel".as_slice().into();
    let module = |entry: &str, options: Vec<String>| DeviceKernel {
        code: DeviceCode::Module(image.clone()),
        entry: entry.into(),
        options,
    };
    let compiles = shared.compiles();
    drop(prepare_kernel(&backend, &with_cuda("m", module("module_kernel", Vec::new()))).unwrap());
    assert_eq!(shared.compiles(), compiles, "a module is never compiled");
    match prepare_kernel(&backend, &with_cuda("m", module("absent_kernel", Vec::new()))) {
        Err(Error::InvalidArgument(message)) => {
            assert!(message.contains("no kernel named \"absent_kernel\""), "{message}")
        }
        other => panic!("a kernel the module lacks prepared: {:?}", other.err()),
    }
    match prepare_kernel(&backend, &with_cuda("m", module("module_kernel", vec!["-DX".into()]))) {
        Err(Error::InvalidArgument(message)) => assert!(message.contains("module built elsewhere"), "{message}"),
        other => panic!("options for a module were taken: {:?}", other.err()),
    }
}

#[test]
fn a_source_that_does_not_compile_is_refused_by_prepare_with_the_compilers_log() {
    let (backend, shared) = backend(Wake::Waiter);
    let command = Command::Custom {
        kernel: custom("broken", "broken"),
        grid: Grid::linear(1, 1),
        args: Vec::<KernelArg<()>>::new(),
    };
    match backend.prepare(&command) {
        Err(Error::InvalidArgument(message)) => assert!(message.contains("error: broken is not CUDA"), "{message}"),
        Err(other) => panic!("expected an invalid argument, got {other}"),
        Ok(_) => panic!("a broken source prepared"),
    }
    let wgsl_only = Arc::new(CustomKernel {
        name: "wgsl".into(),
        cpu: None,
        wgsl: Some(KernelSource { code: String::new(), entry: "main".into() }),
        cuda: None,
        hip: None,
    });
    let command = Command::Custom { kernel: wgsl_only, grid: Grid::linear(1, 1), args: Vec::<KernelArg<()>>::new() };
    assert!(matches!(backend.prepare(&command), Err(Error::Unsupported { .. })));
    assert!(shared.device_calls().is_empty());
}

#[test]
fn uploads_are_staged_in_prepare_and_the_staging_returns_after_the_copy() {
    let (backend, shared) = backend(Wake::Waiter);
    let stream = backend.create_stream(0).unwrap();
    let memory = backend.allocate(8).unwrap();
    let data: Vec<u8> = (1..=8).collect();
    let command = Command::Upload { dst: span(&memory, 0, 8), data: data.clone() };
    let prepared = backend.prepare(&command).unwrap();
    assert_eq!(backend.counters().host_staging_buffers, 1, "prepare takes the page-locked buffer");
    assert!(shared.device_calls().is_empty());
    // SAFETY: the fake touches no memory.
    unsafe { backend.enqueue(&stream, command, prepared, OpIo::default()) }.unwrap();
    backend.device.issuer.flush();
    assert_eq!(shared.device_calls(), vec![Call::CopyH2D { dst: memory.ptr, bytes: data }]);
    fence(&backend, &stream).unwrap();
    // The loan came back once the stream passed the copy: the next upload reuses it.
    submit(&backend, &stream, Command::Upload { dst: span(&memory, 0, 8), data: vec![0; 8] }).unwrap();
    assert_eq!(backend.counters().host_staging_buffers, 1);
    // A download delivers what the device held.
    let sink = HostSink::new(completion());
    submit(&backend, &stream, Command::Download { src: span(&memory, 0, 8), sink: sink.clone() }).unwrap();
    sink.completion.wait().unwrap();
    assert_eq!(sink.take().map(HostBuffer::into_vec), Some(vec![7; 8]));
}

#[test]
fn an_upload_from_this_devices_host_buffer_copies_from_it_and_holds_it_until_the_copy_is_done() {
    let (backend, shared) = backend(Wake::Waiter);
    // The waiter cannot see the copy end until the latch opens.
    let latch = Arc::new(Latch::default());
    *lock(&shared.slow_sync) = Some(latch.clone());
    let stream = backend.create_stream(0).unwrap();
    let _open = OpenOnDrop(latch.clone());
    let memory = backend.allocate(8).unwrap();
    let mut host = backend.host_buffer(&[5; 8]).unwrap();
    assert!(host.is_page_locked());
    assert_eq!(backend.counters().host_staging_buffers, 1);

    let wrong = backend.prepare_host_upload(span(&memory, 0, 4), &host);
    assert!(matches!(wrong, Err(Error::InvalidArgument(_))), "a size that is not its destination's");
    let (command, prepared) = backend.prepare_host_upload(span(&memory, 0, 8), &host).unwrap();
    // SAFETY: the fake touches no device memory.
    unsafe { backend.enqueue(&stream, command, prepared, OpIo::default()) }.unwrap();
    backend.device.issuer.flush();
    assert_eq!(shared.device_calls(), vec![Call::CopyH2D { dst: memory.ptr, bytes: vec![5; 8] }]);
    assert_eq!(backend.counters().host_staging_buffers, 1, "staged beside the host buffer");
    assert!(host.get_mut().is_none(), "writable while the copy may read it");
    latch.open();
    // Completions run in stream order: the upload's ran before the fence's.
    fence(&backend, &stream).unwrap();
    host.get_mut().expect("the copy is done").fill(9);

    // Another device's locked memory is staged like any bytes.
    let (other, _) = super::tests::backend(Wake::Waiter);
    let foreign = other.host_buffer(&[6; 8]).unwrap();
    let (command, prepared) = backend.prepare_host_upload(span(&memory, 0, 8), &foreign).unwrap();
    assert_eq!(backend.counters().host_staging_buffers, 2, "staged in this device's memory");
    // SAFETY: as above.
    unsafe { backend.enqueue(&stream, command, prepared, OpIo::default()) }.unwrap();
    backend.device.issuer.flush();
    fence(&backend, &stream).unwrap();
    assert_eq!(shared.device_calls()[1], Call::CopyH2D { dst: memory.ptr, bytes: vec![6; 8] });
}

#[test]
fn a_download_hands_its_page_locked_memory_to_the_reader_until_dropped() {
    let (backend, _shared) = backend(Wake::Waiter);
    let stream = backend.create_stream(0).unwrap();
    let memory = backend.allocate(8).unwrap();
    let read = || {
        let sink = HostSink::new(completion());
        submit(&backend, &stream, Command::Download { src: span(&memory, 0, 8), sink: sink.clone() }).unwrap();
        sink.completion.wait().unwrap();
        sink.take().unwrap()
    };
    let first = read();
    assert!(first.is_page_locked());
    assert_eq!(first.as_bytes(), &[7; 8]);
    let second = read();
    assert_eq!(backend.counters().host_staging_buffers, 2, "a held read keeps its memory");
    drop((first, second));
    let third = read();
    assert_eq!(backend.counters().host_staging_buffers, 2, "a dropped read's memory is lent again");
    // It stays readable after its backend is gone: it keeps the device.
    drop((stream, memory, backend));
    assert_eq!(third.into_vec(), vec![7; 8]);
}

#[test]
fn built_ins_get_their_addresses_and_counts_at_enqueue() {
    let (backend, shared) = backend(Wake::Waiter);
    let stream = backend.create_stream(0).unwrap();
    let (a, b) = (backend.allocate(4096).unwrap(), backend.allocate(4096).unwrap());
    submit(&backend, &stream, Command::Axpy { x: span(&a, 0, 4096), y: span(&b, 0, 4096), alpha: 2.0 }).unwrap();
    submit(&backend, &stream, Command::Fill { dst: span(&b, 8, 8), word: 5 }).unwrap();
    submit(&backend, &stream, Command::Copy { src: span(&a, 4, 12), dst: span(&b, 0, 12) }).unwrap();
    submit(&backend, &stream, Command::Zero { dst: span(&a, 0, 3) }).unwrap();
    match shared.device_calls().as_slice() {
        [Call::Launch { function: axpy, params: axpy_params }, Call::Launch { function: fill, params: fill_params }, Call::CopyD2D { dst, src, len: 12 }, Call::Memset { ptr, count: 3 }] =>
        {
            assert_eq!(axpy_params, &[a.ptr, b.ptr, u64::from(2.0f32.to_bits()), 1024]);
            assert_eq!(fill_params, &[b.ptr + 8, 5, 2]);
            assert_ne!(axpy, fill);
            assert_eq!((*dst, *src, *ptr), (b.ptr, a.ptr + 4, a.ptr));
        }
        calls => panic!("unexpected calls {calls:?}"),
    }
}

#[test]
fn runtimes_on_one_context_share_its_loaded_modules() {
    // A context no other test names.
    let context = Some(NEXT_FAKE.fetch_add(1, Ordering::SeqCst) << 32);
    let on_context = || {
        let shared = Arc::new(Shared { id: NEXT_FAKE.fetch_add(1, Ordering::SeqCst), context, ..Shared::default() });
        match GpuBackend::with(Fake(shared.clone()), Wake::Waiter, SPIN_BUDGET) {
            Ok(backend) => (backend, shared),
            Err(error) => panic!("the fake backend opens: {error}"),
        }
    };
    let (first, first_fake) = on_context();
    assert_eq!(lock(&first_fake.modules).len(), 1, "the first runtime loads the built-ins");
    let (second, second_fake) = on_context();
    assert!(lock(&second_fake.modules).is_empty(), "the second finds them loaded on the context");
    let stream = second.create_stream(0).unwrap();
    let memory = second.allocate(64).unwrap();
    submit(&second, &stream, Command::Fill { dst: span(&memory, 0, 64), word: 1 }).unwrap();
    assert!(matches!(second_fake.device_calls().as_slice(), [Call::Launch { .. }]));
    drop(first);
    // The modules outlive the first runtime: the second still launches.
    submit(&second, &stream, Command::Fill { dst: span(&memory, 0, 64), word: 2 }).unwrap();
    fence(&second, &stream).unwrap();
    let (unshared, unshared_fake) = backend(Wake::Waiter);
    assert_eq!(lock(&unshared_fake.modules).len(), 1, "a driver that names no context shares nothing");
    drop((unshared, memory, stream, second));
}

#[test]
fn arguments_that_do_not_match_the_kernels_parameters_are_refused_by_prepare() {
    let (backend, shared) = backend(Wake::Waiter);
    *lock(&shared.param_sizes) = Some(vec![8, 4]);
    let memory = backend.allocate(64).unwrap();
    let kernel = custom("put", "extern \"C\" __global__ void put(unsigned* out, unsigned v) {}");
    let launch = |args: Vec<KernelArg<&GpuMemory<Fake>>>| {
        backend.prepare(&Command::Custom { kernel: kernel.clone(), grid: Grid::linear(1, 1), args }).map(drop)
    };
    let buffer = || KernelArg::Buffer(span(&memory, 0, 64), Access::Write);
    let scalar = || KernelArg::Scalar(ScalarArg::U32(1));
    launch(vec![buffer(), scalar()]).unwrap();
    for args in [vec![buffer()], vec![buffer(), scalar(), scalar()], vec![scalar(), buffer()]] {
        match launch(args) {
            Err(Error::InvalidArgument(message)) => {
                assert!(message.contains("kernel put takes 2 parameters of (8, 4) bytes"), "{message}")
            }
            other => panic!("expected the arguments refused, got {other:?}"),
        }
    }
    assert!(shared.device_calls().is_empty(), "nothing was launched");
}

#[test]
fn parameter_sizes_come_from_the_image_where_the_function_cannot_tell() {
    let (backend, shared) = backend(Wake::Waiter);
    *lock(&shared.image_param_sizes) = Some(vec![8, 4]);
    let memory = backend.allocate(64).unwrap();
    let launch = |kernel: &Arc<CustomKernel>, args: Vec<KernelArg<&GpuMemory<Fake>>>| {
        backend.prepare(&Command::Custom { kernel: kernel.clone(), grid: Grid::linear(1, 1), args }).map(drop)
    };
    let buffer = || KernelArg::Buffer(span(&memory, 0, 64), Access::Write);
    let scalar = || KernelArg::Scalar(ScalarArg::U32(1));
    let put = custom("put", "extern \"C\" __global__ void put(unsigned* out, unsigned v) {}");
    launch(&put, vec![buffer(), scalar()]).unwrap();
    match launch(&put, vec![scalar(), buffer()]) {
        Err(Error::InvalidArgument(message)) => assert!(
            message.contains("kernel put takes 2 parameters of (8, 4) bytes, but its 2 arguments need (4, 8) bytes"),
            "{message}"
        ),
        other => panic!("expected the arguments refused, got {other:?}"),
    }
    // Where the loaded function tells its parameters, that answer is the one checked.
    *lock(&shared.param_sizes) = Some(vec![8, 4, 4]);
    let three = custom("three", "extern \"C\" __global__ void three(unsigned* out, unsigned a, unsigned b) {}");
    launch(&three, vec![buffer(), scalar(), scalar()]).unwrap();
    assert!(shared.device_calls().is_empty(), "nothing was launched");
}

#[test]
fn a_fault_seen_by_a_completion_loses_the_device_and_no_driver_call_follows() {
    let (backend, shared) = backend(Wake::Waiter);
    let stream = backend.create_stream(0).unwrap();
    let memory = backend.allocate(64).unwrap();
    submit(&backend, &stream, Command::Fill { dst: span(&memory, 0, 64), word: 1 }).unwrap();
    assert!(backend.lost().is_none());
    lock(&shared.fatal).push("event_synchronize");
    match fence(&backend, &stream) {
        Err(Error::DeviceLost { status: Some(status), message, .. }) => {
            assert_eq!((status.code, status.name.as_str()), (700, "CUDA_ERROR_ILLEGAL_ADDRESS"));
            assert!(message.contains("event_synchronize"), "{message}");
        }
        other => panic!("expected the fence to report the lost device, got {other:?}"),
    }
    assert!(matches!(backend.lost(), Some(Error::DeviceLost { .. })));
    // Every later use fails with the loss, before any driver call.
    assert!(matches!(backend.allocate(8), Err(Error::DeviceLost { .. })));
    assert!(matches!(
        submit(&backend, &stream, Command::Zero { dst: span(&memory, 0, 64) }),
        Err(EnqueueError::Failed(Error::DeviceLost { .. }))
    ));
    assert!(matches!(backend.record_event(&stream), Err(Error::DeviceLost { .. })));
    assert!(matches!(fence(&backend, &stream), Err(Error::DeviceLost { .. })));
    // The owners' drops touch no handle the lost context may have taken along.
    let frees = shared.calls().iter().filter(|call| matches!(call, Call::Free { .. })).count();
    drop(memory);
    drop(stream);
    drop(backend);
    assert_eq!(shared.calls_after_loss.load(Ordering::SeqCst), 0);
    assert_eq!(shared.calls().iter().filter(|call| matches!(call, Call::Free { .. })).count(), frees);
}

#[test]
fn a_fault_as_an_op_is_issued_loses_the_device_and_a_plain_failure_fails_its_op() {
    let (backend, shared) = backend(Wake::Callback);
    let stream = backend.create_stream(0).unwrap();
    let memory = backend.allocate(64).unwrap();
    shared.fail("launch");
    match failure_of(&backend, &stream, Command::Fill { dst: span(&memory, 0, 64), word: 1 }) {
        Some(Error::OpFailed { message, .. }) => assert!(message.contains("launch failed"), "{message}"),
        other => panic!("expected the op's versions to carry its failure, got {other:?}"),
    }
    assert!(backend.lost().is_none(), "an ordinary failure fails its op only");
    assert!(!backend.is_settled(&stream), "a failure waits for the next fence");
    assert!(matches!(fence(&backend, &stream), Err(Error::OpFailed { .. })), "the next fence reports it");
    fence(&backend, &stream).unwrap();
    lock(&shared.failing).clear();
    lock(&shared.fatal).push("launch");
    let lost = failure_of(&backend, &stream, Command::Fill { dst: span(&memory, 0, 64), word: 1 });
    assert!(matches!(lost, Some(Error::DeviceLost { .. })), "{lost:?}");
    assert!(backend.lost().is_some());
    assert!(matches!(fence(&backend, &stream), Err(Error::DeviceLost { .. })));
}

#[test]
fn an_op_whose_input_failed_as_it_ran_makes_no_driver_call_and_fails_too() {
    let (backend, shared) = backend(Wake::Waiter);
    let stream = backend.create_stream(0).unwrap();
    let memory = backend.allocate(64).unwrap();
    let failed = Arc::new(OpOutcome::default());
    failed.fail(Error::OpFailed { stream: 0, message: "the producer failed".into() });
    let outcome = Arc::new(OpOutcome::default());
    let command = Command::Fill { dst: span(&memory, 0, 64), word: 1 };
    let prepared = backend.prepare(&command).unwrap();
    let io = OpIo { inputs: [failed].into_iter().collect(), outcome: Some(outcome.clone()), ..Default::default() };
    // SAFETY: the fake touches no memory.
    unsafe { backend.enqueue(&stream, command, prepared, io) }.unwrap();
    backend.device.issuer.flush();
    assert!(shared.device_calls().is_empty(), "the op did not run");
    match outcome.failure() {
        Some(Error::OpFailed { message, .. }) => assert!(message.contains("the producer failed"), "{message}"),
        other => panic!("expected the dependency's failure, got {other:?}"),
    }
    assert!(fence(&backend, &stream).is_err(), "the next fence reports it");
}

#[test]
fn argument_checks_reject_before_any_driver_call_and_driver_failures_fail() {
    let (backend, shared) = backend(Wake::Waiter);
    let stream = backend.create_stream(0).unwrap();
    let memory = backend.allocate(16).unwrap();
    let rejected = |outcome: Result<(), EnqueueError>| matches!(outcome, Err(EnqueueError::Rejected(_)));
    assert!(matches!(
        submit(&backend, &stream, Command::Zero { dst: span(&memory, 8, 16) }),
        Err(EnqueueError::Rejected(Error::OutOfRange {
            offset: 8,
            size: 16,
            len: 16,
            element: crate::ElementType::Bytes
        }))
    ));
    assert!(rejected(submit(&backend, &stream, Command::Fill { dst: span(&memory, 12, 8), word: 1 })));
    assert!(rejected(submit(&backend, &stream, Command::Copy { src: span(&memory, 0, 4), dst: span(&memory, 8, 8) })));
    assert!(rejected(submit(&backend, &stream, Command::Upload { dst: span(&memory, 0, 8), data: vec![1; 4] })));
    // A prepared command handed with another.
    let prepared = backend.prepare(&Command::Zero { dst: span(&memory, 0, 4) }).unwrap();
    // SAFETY: the fake touches no memory.
    let mismatched = unsafe {
        backend.enqueue(&stream, Command::Iota { out: span(&memory, 0, 4), start: 0 }, prepared, OpIo::default())
    };
    assert!(rejected(mismatched));
    assert!(shared.device_calls().is_empty(), "a rejection touches no stream");

    // A driver call that fails on the issuing thread fails its op.
    shared.fail("memset_d32");
    assert!(failure_of(&backend, &stream, Command::Zero { dst: span(&memory, 0, 16) }).is_some());
    shared.fail("launch");
    assert!(failure_of(&backend, &stream, Command::Iota { out: span(&memory, 0, 16), start: 0 }).is_some());
    match fence(&backend, &stream) {
        Err(Error::OpFailed { message, .. }) => assert!(message.contains("1 more failed op"), "{message}"),
        other => panic!("expected the fence to report both failures, got {other:?}"),
    }
}

#[test]
fn a_fence_over_several_streams_reports_their_failures_total_each_named_by_its_stream() {
    let (backend, shared) = backend(Wake::Waiter);
    // Numbered as a runtime numbers them: the failures name those numbers.
    let streams = [3, 5].map(|index| (index, backend.create_stream(index).unwrap()));
    let memory = backend.allocate(64).unwrap();
    shared.fail("memset_d32");
    for (index, stream) in &streams {
        for _ in 0..2 {
            match failure_of(&backend, stream, Command::Zero { dst: span(&memory, 0, 64) }) {
                Some(Error::OpFailed { stream, .. }) => assert_eq!(stream, *index),
                other => panic!("expected a failure on stream {index}, got {other:?}"),
            }
        }
    }
    let done = Completion::new(streams.len(), Arc::new(LiveCounters::default()));
    for (_, stream) in &streams {
        backend.signal(stream, done.clone(), SignalKind::Fence).unwrap();
    }
    match done.wait() {
        Err(Error::OpFailed { stream, message }) => {
            assert!(stream == 3 || stream == 5, "{stream}");
            assert!(message.ends_with("(and 3 more failed ops)"), "every stream's failures counted: {message}");
        }
        other => panic!("expected the fence to report four failures, got {other:?}"),
    }
    for (_, stream) in &streams {
        fence(&backend, stream).expect("each failure is reported once");
    }
}

#[test]
fn a_refused_completion_abandons_the_staging_and_fails_the_read() {
    let (backend, shared) = backend(Wake::Waiter);
    let stream = backend.create_stream(0).unwrap();
    let memory = backend.allocate(8).unwrap();
    submit(&backend, &stream, Command::Upload { dst: span(&memory, 0, 8), data: vec![1; 8] }).unwrap();
    fence(&backend, &stream).unwrap();
    assert_eq!(backend.counters().host_staging_buffers, 1);
    // The copy is enqueued but the callback that would return its loan is not:
    // the loan must not be lent again while the copy may still read it.
    shared.fail("event_record");
    let upload = Command::Upload { dst: span(&memory, 0, 8), data: vec![2; 8] };
    assert!(failure_of(&backend, &stream, upload).is_some(), "the upload fails as it is issued");
    let sink = HostSink::new(completion());
    let download = Command::Download { src: span(&memory, 0, 8), sink: sink.clone() };
    submit(&backend, &stream, download).unwrap();
    assert!(sink.completion.wait().is_err(), "nobody else completes the read");
    // Neither loan came back: the next one is a third buffer.
    drop(backend.prepare(&Command::Upload { dst: span(&memory, 0, 8), data: vec![3; 8] }).unwrap());
    assert_eq!(backend.counters().host_staging_buffers, 3, "each abandoned loan stays out of the pool");
}

/// A fence on `stream`, failing the test rather than hanging it if no completion comes.
fn fence_within(backend: &GpuBackend<Fake>, stream: &GpuStream<Fake>, limit: Duration) -> Result<()> {
    let done = completion();
    backend.signal(stream, done.clone(), SignalKind::Fence)?;
    let start = std::time::Instant::now();
    while !done.is_complete() {
        assert!(start.elapsed() < limit, "no completion within {limit:?}");
        std::thread::sleep(Duration::from_millis(1));
    }
    done.wait()
}

fn panicking_callback_does_not_stop_later_completions(wake: Wake) {
    let (backend, _shared) = backend(wake);
    let stream = backend.create_stream(0).unwrap();
    stream.after(Box::new(|_| panic!("a panicking completion (expected by this test)")), false).unwrap();
    fence_within(&backend, &stream, Duration::from_secs(10)).unwrap();
    fence_within(&backend, &stream, Duration::from_secs(10)).unwrap();
}

#[test]
fn a_panicking_callback_does_not_stop_later_completions_on_the_waiter() {
    panicking_callback_does_not_stop_later_completions(Wake::Waiter);
}

#[test]
fn a_panicking_callback_does_not_stop_later_completions_on_the_callback_thread() {
    panicking_callback_does_not_stop_later_completions(Wake::Callback);
}

#[test]
fn completions_run_no_waker_or_action_on_the_waiter() {
    let (backend, _shared) = backend(Wake::Waiter);
    let stream = backend.create_stream(0).unwrap();
    let done = completion();
    let (tell, ran_on) = mpsc::channel();
    done.then(move |_| {
        let _ = tell.send(std::thread::current().name().map(str::to_owned));
    });
    backend.signal(&stream, done.clone(), SignalKind::Fence).unwrap();
    done.wait().unwrap();
    let thread = ran_on.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(thread.as_deref(), Some("weir-wake"), "actions run on the delivery thread");
}

#[test]
fn a_stream_ordered_after_another_waits_for_one_record_of_the_source_streams_own_event() {
    let (backend, shared) = backend(Wake::Waiter);
    let (source, stream) = (backend.create_stream(0).unwrap(), backend.create_stream(0).unwrap());
    for _ in 0..3 {
        backend.wait_for_stream(&stream, &source).unwrap();
        backend.wait_for_stream(&source, &stream).unwrap();
    }
    backend.device.issuer.flush();
    assert_eq!(backend.counters().live_events, 0, "a stream's ordering event counts as a live event");
    let records = lock(&shared.event_records).clone();
    let waits = lock(&shared.stream_waits).clone();
    assert_eq!((records.len(), waits.len()), (6, 6), "one record and one wait per order: {records:?}, {waits:?}");
    for (order, ((event, on), (waiting, waited))) in records.iter().zip(&waits).enumerate() {
        let (from, to) = if order % 2 == 0 { (&source, &stream) } else { (&stream, &source) };
        assert_eq!((*on, *waiting, *waited), (from.raw, to.raw, *event), "records {records:?}, waits {waits:?}");
        assert_eq!(Some(event), from.order_event.get(), "an order recorded another event than its source's");
    }
    // Made once per source stream, destroyed with it.
    assert_eq!(shared.events_created.load(Ordering::SeqCst), 2, "orders made events beyond one per source");
    let destroyed = shared.events_destroyed.load(Ordering::SeqCst);
    drop((source, stream));
    assert_eq!(shared.events_destroyed.load(Ordering::SeqCst), destroyed + 2, "a stream's ordering event outlived it");
}

#[test]
fn a_failed_record_fails_both_streams_of_an_order_and_a_failed_wait_the_waiting_one() {
    let (backend, shared) = backend(Wake::Waiter);
    let (source, stream) = (backend.create_stream(0).unwrap(), backend.create_stream(0).unwrap());
    shared.fail("event_record");
    backend.wait_for_stream(&stream, &source).unwrap();
    lock(&shared.failing).clear();
    assert!(fence(&backend, &source).is_err(), "the stream the record failed on reports it");
    let unordered = fence(&backend, &stream).expect_err("the stream left unordered reports it");
    assert!(unordered.to_string().contains("could not be recorded"), "{unordered}");
    assert!(lock(&shared.stream_waits).is_empty(), "a wait for an event never recorded was made");
    shared.fail("stream_wait_event");
    backend.wait_for_stream(&stream, &source).unwrap();
    lock(&shared.failing).clear();
    assert!(fence(&backend, &source).is_ok(), "the source of a failed wait is not failed");
    assert!(fence(&backend, &stream).is_err(), "the waiting stream reports its failed wait");
    // Reported once: both streams are usable again.
    backend.wait_for_stream(&stream, &source).unwrap();
    assert!(fence(&backend, &source).is_ok() && fence(&backend, &stream).is_ok());
    assert_eq!(backend.counters().live_events, 0, "a failed order left an event live");
}

#[test]
fn streams_and_memory_drop_on_a_thread_that_never_bound_the_device() {
    for wake in [Wake::Waiter, Wake::Callback] {
        let (backend, shared) = backend(wake);
        let stream = backend.create_stream(0).unwrap();
        let memory = backend.allocate(64).unwrap();
        submit(&backend, &stream, Command::Zero { dst: span(&memory, 0, 64) }).unwrap();
        fence(&backend, &stream).unwrap();
        assert_eq!(backend.counters().live_streams, 1);
        let ptr = memory.ptr;
        // The scheduler drops both on its delivery thread, which never bound it.
        std::thread::spawn(move || drop((stream, memory))).join().unwrap();
        assert_eq!(shared.unbound_calls.load(Ordering::SeqCst), 0, "{wake:?}: every drop bound the device first");
        let counters = backend.counters();
        assert_eq!((counters.live_streams, counters.live_allocations, counters.live_events), (0, 0, 0));
        assert!(shared.calls().iter().any(|call| matches!(call, Call::Free { ptr: freed, .. } if *freed == ptr)));
        // Only the backend and its issuing thread hold the device now: the
        // waiter thread has exited, and the wake thread's probe let its event
        // go (on the release thread).
        assert!(soon(|| Arc::strong_count(&backend.device) == 2), "{wake:?}");
    }
}

#[test]
fn a_free_that_waits_for_the_device_runs_on_its_own_thread() {
    let (fake, shared) = Fake::new(true);
    let backend = GpuBackend::with(fake, Wake::Waiter, SPIN_BUDGET).unwrap();
    let memory = backend.allocate(64).unwrap();
    drop(memory);
    // The device's drop lets queued frees finish.
    drop(backend);
    match shared.calls().iter().find(|call| matches!(call, Call::Free { .. })) {
        Some(Call::Free { thread, .. }) => assert_eq!(thread.as_deref(), Some("weir-cuda-free")),
        _ => panic!("the memory was never freed"),
    }
    assert_eq!(shared.unbound_calls.load(Ordering::SeqCst), 0);
}

#[test]
fn compiling_one_kernel_holds_up_no_other_prepare() {
    let (backend, shared) = backend(Wake::Waiter);
    let backend = Arc::new(backend);
    let memory = backend.allocate(64).unwrap();
    let loaded = custom("fast", "extern \"C\" __global__ void fast() {}");
    let command = |kernel: &Arc<CustomKernel>| Command::Custom {
        kernel: kernel.clone(),
        grid: Grid::linear(1, 1),
        args: Vec::<KernelArg<()>>::new(),
    };
    drop(backend.prepare(&command(&loaded)).unwrap());
    let latch = Arc::new(Latch::default());
    let (started, compiling) = mpsc::channel();
    *lock(&shared.slow_compile) = Some((latch.clone(), started));
    let slow = {
        let backend = backend.clone();
        std::thread::spawn(move || backend.prepare(&command(&custom("slow", "slow"))).map(drop))
    };
    compiling.recv_timeout(Duration::from_secs(10)).unwrap();
    // While that compile runs: a loaded kernel, a built-in and an upload prepare.
    drop(backend.prepare(&command(&loaded)).unwrap());
    drop(backend.prepare(&Command::Iota { out: span(&memory, 0, 64), start: 0 }).unwrap());
    drop(backend.prepare(&Command::Upload { dst: span(&memory, 0, 4), data: vec![0; 4] }).unwrap());
    latch.open();
    slow.join().unwrap().unwrap();
}

#[test]
fn a_collective_enqueues_every_ranks_part_in_one_group_on_its_stream() {
    use crate::backend::{Collective, CollectiveKind, CollectivePart, ReduceOp};
    let ((a, shared_a), (b, shared_b)) = (backend(Wake::Waiter), backend(Wake::Waiter));
    let communicator = GpuBackend::communicator(&[&a, &b]).unwrap();
    let (sa, sb) = (a.create_stream(0).unwrap(), b.create_stream(0).unwrap());
    let (send_a, send_b) = (a.allocate(64).unwrap(), b.allocate(64).unwrap());
    let (all_a, all_b) = (a.allocate(128).unwrap(), b.allocate(128).unwrap());
    let gather = Collective { kind: CollectiveKind::AllGather, element: crate::ElementType::F32 };
    let part = |backend, stream, send, receive| CollectivePart { backend, stream, send, receive, io: OpIo::default() };
    let parts = vec![part(&a, &sa, &send_a, Some(&all_a)), part(&b, &sb, &send_b, Some(&all_b))];
    // SAFETY: the fake touches no memory; the memory outlives the call.
    unsafe { GpuBackend::enqueue_collective(&communicator, &gather, parts) }.unwrap();
    let collective_calls = |shared: &Shared| -> Vec<Call> {
        shared.calls().into_iter().filter(|call| matches!(call, Call::Collective { .. })).collect()
    };
    assert_eq!(
        collective_calls(&shared_a),
        vec![Call::Collective { group: 1, stream: sa.raw, send: send_a.ptr, receive: all_a.ptr, bytes: 128 }]
    );
    assert_eq!(
        collective_calls(&shared_b),
        vec![Call::Collective { group: 1, stream: sb.raw, send: send_b.ptr, receive: all_b.ptr, bytes: 128 }]
    );
    assert_eq!(shared_a.unbound_calls.load(Ordering::SeqCst), 0, "a rank's call ran without its device bound");
    assert_eq!(shared_b.unbound_calls.load(Ordering::SeqCst), 0, "a rank's call ran without its device bound");

    // In place: the one buffer is both sides; a rank's failure fails the collective.
    let reduce = Collective { kind: CollectiveKind::AllReduce(ReduceOp::Sum), element: crate::ElementType::I32 };
    shared_b.fail("collective");
    let parts = vec![part(&a, &sa, &send_a, None), part(&b, &sb, &send_b, None)];
    // SAFETY: as above.
    let failed = unsafe { GpuBackend::enqueue_collective(&communicator, &reduce, parts) };
    assert!(matches!(failed, Err(EnqueueError::Failed(_))), "{failed:?}");
    assert!(collective_calls(&shared_a).contains(&Call::Collective {
        group: 2,
        stream: sa.raw,
        send: send_a.ptr,
        receive: send_a.ptr,
        bytes: 64
    }));
}

#[test]
fn a_communicator_that_cannot_be_made_is_the_drivers_error() {
    let ((a, _), (b, shared_b)) = (backend(Wake::Waiter), backend(Wake::Waiter));
    shared_b.fail("communicator");
    assert!(matches!(GpuBackend::communicator(&[&a, &b]), Err(Error::Backend { .. })));
}

struct OpenOnDrop(Arc<Latch>);

impl Drop for OpenOnDrop {
    fn drop(&mut self) {
        self.0.open();
    }
}

/// Polls `done` for up to five seconds.
fn soon(done: impl Fn() -> bool) -> bool {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while std::time::Instant::now() < deadline {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    done()
}

#[test]
fn the_wake_thread_completes_a_quick_fence_its_waiter_has_not_seen_reached_in_stream_order() {
    let (backend, shared) = backend_spinning(Wake::Waiter, Duration::from_secs(10));
    // Only the wake thread sees events reached; the waiter spins, then sleeps in a synchronisation.
    shared.queries.store(REACHED_ON_WAKE_THREAD, Ordering::SeqCst);
    let latch = Arc::new(Latch::default());
    *lock(&shared.slow_sync) = Some(latch.clone());
    let stream = backend.create_stream(0).unwrap();
    // Opened however the test ends (dropped first), so the stream's drop does not wait forever.
    let _open = OpenOnDrop(latch.clone());

    let first = completion();
    backend.signal(&stream, first.clone(), SignalKind::Fence).unwrap();
    assert!(soon(|| first.is_complete()), "a quick fence waited for its waiter");
    assert_eq!(first.outcome(), Some(Ok(())));
    assert_eq!(backend.counters().live_events, 0, "the completed fence's event still counts as live");

    // A drain queued before the next fence (a completion nobody awaits, so
    // not watched), which the waiter does not see reached: the fence is not
    // completed ahead of it, though the wake thread sees its event reached.
    let drained = completion();
    backend.signal(&stream, drained.clone(), SignalKind::Drain).unwrap();
    let second = completion();
    backend.signal(&stream, second.clone(), SignalKind::Fence).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert!(!drained.is_complete());
    assert!(!second.is_complete(), "a fence completed before the completion queued ahead of it");
    shared.queries.store(REACHED, Ordering::SeqCst);
    latch.open();
    second.wait().unwrap();
    assert!(drained.is_complete(), "the fence completed before the completion ahead of it");
    assert!(soon(|| backend.counters().live_events == 0));
}

#[test]
fn without_an_event_query_a_quick_fence_is_completed_by_its_waiter() {
    let (backend, shared) = backend(Wake::Waiter);
    let latch = Arc::new(Latch::default());
    *lock(&shared.slow_sync) = Some(latch.clone());
    let stream = backend.create_stream(0).unwrap();
    let _open = OpenOnDrop(latch.clone());
    let done = completion();
    backend.signal(&stream, done.clone(), SignalKind::Fence).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert!(!done.is_complete(), "a fence completed with its event neither queried nor synchronised");
    latch.open();
    done.wait().unwrap();
}

/// Enqueues a fill of `memory` with `word` on `stream`, not waiting for its driver calls.
fn enqueue_fill(backend: &GpuBackend<Fake>, stream: &GpuStream<Fake>, memory: &GpuMemory<Fake>, word: u32) {
    let command = Command::Fill { dst: span(memory, 0, 64), word };
    let prepared = backend.prepare(&command).unwrap();
    // SAFETY: the fake touches no memory.
    unsafe { backend.enqueue(stream, command, prepared, OpIo::default()) }.unwrap();
}

/// Fills enqueued back to back on `stream`, each writing its own index,
/// until one was launched on the issuing thread; how many.
fn fill_until_issued_on_the_thread(
    backend: &GpuBackend<Fake>,
    stream: &GpuStream<Fake>,
    shared: &Shared,
    memory: &GpuMemory<Fake>,
) -> u32 {
    let on_thread = || lock(&shared.launched_on).iter().any(|thread| thread.as_deref() == Some(ISSUING_THREAD));
    let mut word = 0;
    while !on_thread() && word < 100_000 {
        if !backend.device.issuer.is_idle() {
            // Handed over: wait for the thread to reach it rather than fill
            // its queue (a thread held in its first launch would never make
            // room, and this would wait for room forever).
            std::thread::yield_now();
            continue;
        }
        enqueue_fill(backend, stream, memory, word);
        word += 1;
    }
    word
}

/// Fills as [`fill_until_issued_on_the_thread`], with the thread then held
/// in that launch until the returned latch opens (or its guard drops, however
/// the test ends); how many fills were admitted.
fn hold_the_issuing_thread(
    backend: &GpuBackend<Fake>,
    stream: &GpuStream<Fake>,
    shared: &Shared,
    memory: &GpuMemory<Fake>,
) -> (Arc<Latch>, OpenOnDrop, u32) {
    let latch = Arc::new(Latch::default());
    let open = OpenOnDrop(latch.clone());
    *lock(&shared.slow_issue) = Some(latch.clone());
    (latch, open, fill_until_issued_on_the_thread(backend, stream, shared, memory))
}

#[test]
fn a_streak_of_admissions_moves_to_the_issuing_thread_in_admission_order() {
    let (backend, shared) = backend(Wake::Waiter);
    let stream = backend.create_stream(0).unwrap();
    let memory = backend.allocate(64).unwrap();
    // One op alone is issued by the thread that admits it: no hand-off.
    submit(&backend, &stream, Command::Fill { dst: span(&memory, 0, 64), word: 7 }).unwrap();
    assert_ne!(lock(&shared.launched_on)[0].as_deref(), Some(ISSUING_THREAD));
    lock(&shared.calls).clear();
    let admitted = fill_until_issued_on_the_thread(&backend, &stream, &shared, &memory);
    assert!(admitted < 100_000, "a streak of admissions moved to the issuing thread");
    backend.device.issuer.flush();
    let words: Vec<u64> = shared
        .device_calls()
        .iter()
        .map(|call| match call {
            Call::Launch { params, .. } => params[1],
            other => panic!("only launches were admitted, got {other:?}"),
        })
        .collect();
    assert_eq!(words, (0..u64::from(admitted)).collect::<Vec<_>>(), "issued in admission order");
    fence(&backend, &stream).unwrap();
    assert_eq!(shared.unbound_calls.load(Ordering::SeqCst), 0);
}

#[test]
fn launches_that_block_in_the_driver_still_make_a_streak_that_moves_to_the_issuing_thread() {
    let (backend, shared) = backend(Wake::Waiter);
    let stream = backend.create_stream(0).unwrap();
    let memory = backend.allocate(64).unwrap();
    // Each launch blocks its caller far longer than the gap that ends a
    // streak, as launches into a backlogged device do. The caller's own
    // pause between admissions is what counts: ops admitted back to back
    // still move to the thread, and the caller stops waiting in the driver.
    *lock(&shared.launch_takes) = Some(issue::STREAK_GAP * 5);
    let mut admitted = 0;
    while backend.device.issuer.is_idle() && admitted < 50 {
        enqueue_fill(&backend, &stream, &memory, admitted);
        admitted += 1;
    }
    assert!(
        !backend.device.issuer.is_idle(),
        "{admitted} fills admitted back to back, each launched by the admitting thread"
    );
    backend.device.issuer.flush();
    let on_thread = lock(&shared.launched_on).iter().any(|thread| thread.as_deref() == Some(ISSUING_THREAD));
    assert!(on_thread, "the fills handed over were launched by the issuing thread");
    *lock(&shared.launch_takes) = None;
    fence(&backend, &stream).unwrap();
}

#[test]
fn a_stream_dropped_with_driver_calls_queued_for_it_waits_until_they_are_made() {
    let (backend, shared) = backend(Wake::Waiter);
    let stream = backend.create_stream(0).unwrap();
    let memory = backend.allocate(64).unwrap();
    let (latch, _open, admitted) = hold_the_issuing_thread(&backend, &stream, &shared, &memory);
    // The issuing thread is held in that launch; more queue behind it.
    for word in admitted..admitted + 8 {
        enqueue_fill(&backend, &stream, &memory, word);
    }
    assert!(!backend.is_settled(&stream), "driver calls are still queued");
    let (dropped, was_dropped) = mpsc::channel();
    let dropping = std::thread::spawn(move || {
        drop(stream);
        let _ = dropped.send(());
    });
    assert!(was_dropped.recv_timeout(Duration::from_millis(100)).is_err(), "the drop waits for the queued calls");
    latch.open();
    was_dropped.recv_timeout(Duration::from_secs(10)).expect("the drop returns once they are made");
    dropping.join().unwrap();
    let launches = shared.device_calls().iter().filter(|call| matches!(call, Call::Launch { .. })).count();
    assert_eq!(launches as u32, admitted + 8, "every queued launch was made before the stream went");
    assert_eq!(backend.counters().live_streams, 0);
}

#[test]
fn a_batch_of_launches_records_and_waits_on_the_issuing_thread_binds_the_device_once() {
    let (backend, shared) = backend(Wake::Waiter);
    let (stream, other) = (backend.create_stream(0).unwrap(), backend.create_stream(0).unwrap());
    let memory = backend.allocate(64).unwrap();
    let (latch, _open, admitted) = hold_the_issuing_thread(&backend, &stream, &shared, &memory);
    // The thread is held in that launch; behind it, in one batch, 32 rounds
    // of a launch, a wait for another stream (a two-stream pipeline's
    // driver calls), and an event recorded there and waited for (a peer's way).
    for word in admitted..admitted + 32 {
        enqueue_fill(&backend, &stream, &memory, word);
        backend.wait_for_stream(&stream, &other).unwrap();
        let event = backend.record_event(&other).unwrap();
        backend.wait_event(&stream, &event).unwrap();
    }
    shared.issuing_binds.store(0, Ordering::SeqCst);
    latch.open();
    backend.device.issuer.flush();
    let binds = shared.issuing_binds.load(Ordering::SeqCst);
    assert!(binds <= 2, "160 driver calls in one batch bound the device {binds} times");
    assert_eq!(shared.unbound_calls.load(Ordering::SeqCst), 0, "every call ran with its device bound");
}

#[test]
fn a_launch_after_a_job_that_bound_another_device_on_the_issuing_thread_binds_its_own_again() {
    let ((a, shared_a), (b, shared_b)) = (backend(Wake::Waiter), backend(Wake::Waiter));
    let (stream_a, stream_b) = (a.create_stream(0).unwrap(), b.create_stream(0).unwrap());
    let memory = a.allocate(64).unwrap();
    // b's event pool is full when `peer` goes, so its drop destroys it, with b bound.
    let spares: Vec<_> = (0..256).map(|_| b.record_event(&stream_b).unwrap()).collect();
    let peer = b.record_event(&stream_b).unwrap();
    b.device.issuer.flush();
    drop(spares);
    let (latch, _open, admitted) = hold_the_issuing_thread(&a, &stream_a, &shared_a, &memory);
    // Queued behind the held launch, in one batch: a launch, a wait that
    // holds the last reference to b's event (its drop binds b on a's
    // issuing thread), and a launch after it.
    enqueue_fill(&a, &stream_a, &memory, admitted);
    a.wait_event(&stream_a, &peer).unwrap();
    drop(peer);
    enqueue_fill(&a, &stream_a, &memory, admitted + 1);
    latch.open();
    a.device.issuer.flush();
    assert_eq!(shared_b.events_destroyed.load(Ordering::SeqCst), 1, "b's event was destroyed");
    assert_eq!(shared_b.unbound_calls.load(Ordering::SeqCst), 0, "b's event was dropped with b bound");
    assert_eq!(shared_a.unbound_calls.load(Ordering::SeqCst), 0, "the launch after it bound a again");
    let launches = shared_a.device_calls().iter().filter(|call| matches!(call, Call::Launch { .. })).count();
    assert_eq!(launches as u32, admitted + 2, "every launch was made");
}

/// Replays the recording `id` of two fills of `memory` on `stream` with
/// `io` (the first replay captures it).
fn replay(backend: &GpuBackend<Fake>, stream: &GpuStream<Fake>, memory: &GpuMemory<Fake>, id: u64, io: &OpIo) {
    let commands = match backend.prepares_replay(id) {
        true => (0..2)
            .map(|word| {
                let command = Command::Fill { dst: span(memory, 0, 64), word };
                let prepared = backend.prepare(&command).unwrap();
                (command, prepared)
            })
            .collect(),
        false => Vec::new(),
    };
    // SAFETY: the fake touches no memory; the memory outlives the graph.
    unsafe { backend.enqueue_replay(stream, id, commands, io.clone()) }.unwrap();
}

/// The graph launches in the calls made so far.
fn graph_launches(shared: &Shared) -> usize {
    shared.calls().iter().filter(|call| matches!(call, Call::GraphLaunch { .. })).count()
}

#[test]
fn a_replay_is_launched_in_admission_order_and_its_graph_goes_only_after_its_queued_launches() {
    let (backend, shared) = backend(Wake::Waiter);
    let stream = backend.create_stream(0).unwrap();
    let memory = backend.allocate(64).unwrap();
    replay(&backend, &stream, &memory, 1, &OpIo::default());
    backend.device.issuer.flush();
    assert_eq!(graph_launches(&shared), 1, "the first replay captured the graph and launched it");
    // Hold the issuing thread in a launch, and queue two replays behind it.
    let (latch, _open, _) = hold_the_issuing_thread(&backend, &stream, &shared, &memory);
    replay(&backend, &stream, &memory, 1, &OpIo::default());
    replay(&backend, &stream, &memory, 1, &OpIo::default());
    assert_eq!(graph_launches(&shared), 1, "the replays wait behind the launch before them");
    std::thread::scope(|scope| {
        let forgetting = scope.spawn(|| backend.forget_replay(1));
        std::thread::sleep(Duration::from_millis(100));
        assert!(!forgetting.is_finished(), "the graph stays while launches of it are queued");
        latch.open();
        forgetting.join().unwrap();
    });
    let calls = shared.calls();
    let destroyed = calls.iter().position(|call| matches!(call, Call::GraphDestroy { .. }));
    let last_launch = calls.iter().rposition(|call| matches!(call, Call::GraphLaunch { .. }));
    assert_eq!(graph_launches(&shared), 3);
    assert!(last_launch < destroyed, "destroyed after its last launch: {calls:?}");
    fence(&backend, &stream).unwrap();
}

#[test]
fn a_replay_whose_input_failed_as_it_ran_launches_nothing_and_fails() {
    let (backend, shared) = backend(Wake::Waiter);
    let stream = backend.create_stream(0).unwrap();
    let memory = backend.allocate(64).unwrap();
    replay(&backend, &stream, &memory, 1, &OpIo::default());
    fence(&backend, &stream).unwrap();
    let failed = Arc::new(OpOutcome::default());
    failed.fail(Error::OpFailed { stream: 0, message: "the producer failed".into() });
    let outcome = Arc::new(OpOutcome::default());
    let io = OpIo { inputs: [failed].into_iter().collect(), outcome: Some(outcome.clone()), ..Default::default() };
    replay(&backend, &stream, &memory, 1, &io);
    backend.device.issuer.flush();
    assert_eq!(graph_launches(&shared), 1, "only the first replay launched");
    assert!(outcome.failure().is_some(), "what the replay writes carries the failure");
    assert!(fence(&backend, &stream).is_err(), "the next fence reports it");
    // A graph launch the driver refuses fails the replay the same way.
    shared.fail("graph_launch");
    let outcome = Arc::new(OpOutcome::default());
    replay(&backend, &stream, &memory, 1, &OpIo { outcome: Some(outcome.clone()), ..Default::default() });
    backend.device.issuer.flush();
    assert!(outcome.failure().is_some());
    assert!(fence(&backend, &stream).is_err());
    backend.forget_replay(1);
}

#[test]
fn the_outcome_cells_of_ops_run_on_the_issuing_thread_are_let_go_once_it_is_idle() {
    let (backend, shared) = backend(Wake::Waiter);
    let stream = backend.create_stream(0).unwrap();
    let memory = backend.allocate(64).unwrap();
    let admitted = fill_until_issued_on_the_thread(&backend, &stream, &shared, &memory);
    assert!(admitted < 100_000, "a streak of admissions moved to the issuing thread");
    // A streak whose ops each hold an outcome cell, as the scheduler gives them.
    let cells: Vec<Arc<OpOutcome>> = (0..256).map(|_| Arc::new(OpOutcome::default())).collect();
    for cell in &cells {
        let command = Command::Fill { dst: span(&memory, 0, 64), word: 1 };
        let prepared = backend.prepare(&command).unwrap();
        let io =
            OpIo { inputs: [cell.clone()].into_iter().collect(), outcome: Some(cell.clone()), ..Default::default() };
        // SAFETY: the fake touches no memory.
        unsafe { backend.enqueue(&stream, command, prepared, io) }.unwrap();
    }
    fence(&backend, &stream).unwrap();
    let let_go = || cells.iter().all(|cell| Arc::strong_count(cell) == 1);
    assert!(soon(let_go), "every op's cells were dropped once the thread had nothing left to run");
}
