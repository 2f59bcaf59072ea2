//! Kernel launches: custom kernels compiled (or found in a module built
//! elsewhere) and loaded by `prepare`, their arguments checked against
//! their parameters, modules shared on a context, and the built-ins given
//! their addresses and counts at `enqueue`.

use super::*;

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
    let context = new_context();
    let on_context = || backend_on_context(context);
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
fn loading_one_module_holds_up_no_other_modules_kernels() {
    // A load can synchronise the whole context: under the context's one
    // lock, it held up every runtime's first use of any kernel.
    let (backend, shared) = backend(Wake::Waiter);
    let backend = Arc::new(backend);
    let command = |kernel: Arc<CustomKernel>| Command::Custom {
        kernel,
        grid: Grid::linear(1, 1),
        args: Vec::<KernelArg<()>>::new(),
    };
    let fast = "extern \"C\" __global__ void fast() {}";
    drop(backend.prepare(&command(custom("fast", fast))).unwrap());
    let latch = Arc::new(Latch::default());
    let (started, loading) = mpsc::channel();
    *lock(&shared.slow_load) = Some((latch.clone(), started));
    let slow = {
        let backend = backend.clone();
        std::thread::spawn(move || {
            backend.prepare(&command(custom("slow", "extern \"C\" __global__ void slow() {}"))).map(drop)
        })
    };
    loading.recv_timeout(Duration::from_secs(10)).unwrap();
    // Another kernel object of the loaded module: looked up, not loaded.
    let (done, finished) = mpsc::channel();
    let other = backend.clone();
    std::thread::spawn(move || drop(done.send(other.prepare(&command(custom("fast", fast))).map(drop))));
    let looked_up = finished.recv_timeout(Duration::from_secs(10));
    latch.open();
    looked_up.expect("a loaded module's kernel waited for another module's load").unwrap();
    slow.join().unwrap().unwrap();
}

/// Weir's built-ins not building (an NVRTC older than the GPU) leaves the
/// device unavailable, saying why: it was `InvalidArgument`, blaming a
/// kernel the caller never wrote.
#[test]
fn built_ins_that_do_not_build_leave_the_device_unavailable() {
    let (fake, shared) = Fake::new(false);
    shared.fail("compile");
    match GpuBackend::with(fake, Wake::Waiter, SPIN_BUDGET) {
        Err(Error::Unavailable { reason, .. }) => assert!(reason.contains("built-in kernels"), "{reason}"),
        Err(other) => panic!("not unavailable: {other:?}"),
        Ok(_) => panic!("opened without its built-ins"),
    }
}
