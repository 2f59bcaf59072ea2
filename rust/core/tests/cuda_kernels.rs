//! Users' CUDA kernels and libraries. Kernels as their authors write them (`tests/cuda/kernels.cu`:
//! templates in a namespace, cooperative groups, a project header found
//! through an include directory, `size_t`, `double` and a struct by value),
//! launched by their C++ names without edits: from source through NVRTC, and
//! from the PTX, CUBIN and fatbin files nvcc builds from the same file (in
//! the folder `WEIR_CUDA_MODULES` names). Each runs a pipeline over three
//! streams sharing the same buffers, checked against the same arithmetic on
//! the host. A cuBLAS GEMM between Weir kernels on other streams is ordered
//! by the versions it reads and writes. Without CUDA every test reports
//! itself skipped, unless `WEIR_REQUIRE_BACKENDS` lists `cuda`.
#![cfg(feature = "cuda")]

use std::path::PathBuf;

use std::time::Duration;

use weir_core::{Arg, BackendKind, Blas, ElementType, Error, Gemm, Grid, Kernel, Runtime};

const KERNELS: &str = include_str!("cuda/kernels.cu");
const AFFINE_HEADER: &str = include_str!("cuda/weir_test/affine.cuh");

fn required() -> bool {
    std::env::var("WEIR_REQUIRE_BACKENDS").is_ok_and(|list| list.split(',').any(|name| name.trim() == "cuda"))
}

fn open(test: &str) -> Option<Runtime> {
    match Runtime::open(BackendKind::Cuda) {
        Ok(runtime) => Some(runtime),
        Err(error) => {
            assert!(!required(), "cuda is required but unavailable: {error}");
            eprintln!("[{test}] cuda: skipped: {error}");
            None
        }
    }
}

/// A folder of `test`'s own holding the project's header at
/// `weir_test/affine.cuh`, as a project keeps its headers; `-I` this folder
/// finds it.
fn include_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("weir-cuda-include-{}-{test}", std::process::id()));
    std::fs::create_dir_all(dir.join("weir_test")).unwrap();
    std::fs::write(dir.join("weir_test/affine.cuh"), AFFINE_HEADER).unwrap();
    dir
}

/// `weir_test::Affine`.
#[derive(Clone, Copy)]
struct Affine {
    scale: f64,
    shift: f32,
    bias: i32,
}

impl Affine {
    /// As the device lays the struct out: 16 bytes.
    fn bytes(self) -> Vec<u8> {
        let mut bytes = self.scale.to_le_bytes().to_vec();
        bytes.extend(self.shift.to_le_bytes());
        bytes.extend(self.bias.to_le_bytes());
        bytes
    }

    /// `weir_test::apply`, on the host.
    fn apply(self, x: f64, step: f64) -> f64 {
        self.scale * x + f64::from(self.shift) + f64::from(self.bias) * step
    }
}

const A: Affine = Affine { scale: 0.5, shift: 0.25, bias: 1 };
const B: Affine = Affine { scale: 1.5, shift: -0.125, bias: -1 };
const N: usize = 1 << 18;
const BLOCK: u32 = 256;
const ROUNDS: usize = 8;

/// `found` is `expected` within `tolerance`, relative to its size (at least 1).
fn assert_close(found: &[f32], expected: &[f32], tolerance: f32, what: &str) {
    assert_eq!(found.len(), expected.len(), "{what}: length");
    for (i, (&f, &e)) in found.iter().zip(expected).enumerate() {
        assert!((f - e).abs() <= tolerance * e.abs().max(1.0), "{what}[{i}]: {f}, expected {e}");
    }
}

/// The pipeline on three streams over shared buffers, `ROUNDS` times: on
/// stream 1 `y = affine(x, A, round)`; on stream 2 `sums[round] =
/// block_sums(y)`; on stream 3 `x = affine(y, B, -round)`, which writes
/// what stream 1 read. Checked against the host's run of the same.
fn pipeline(runtime: &Runtime, affine: &Kernel, block_sums: &Kernel) {
    let (s1, s2, s3) = (runtime.default_stream(), runtime.new_stream().unwrap(), runtime.new_stream().unwrap());
    let start: Vec<f32> = (0..N).map(|i| (i % 1000) as f32 * 0.001).collect();
    let x = s1.upload(&start).unwrap();
    let y = s1.empty(ElementType::F32, N as u64).unwrap();
    let groups = N as u32 / BLOCK;
    let sums: Vec<_> = (0..ROUNDS).map(|_| s1.empty(ElementType::F32, u64::from(groups)).unwrap()).collect();
    let grid = Grid::linear(N as u32, BLOCK);
    for (round, sums) in sums.iter().enumerate() {
        let step = round as f64;
        let (a, b) = (A.bytes(), B.bytes());
        s1.execute(affine, grid, &[Arg::read(&x), Arg::write(&y), Arg::bytes(&a), Arg::f64(step), Arg::u64(N as u64)])
            .unwrap();
        s2.execute(block_sums, grid, &[Arg::read(&y), Arg::write(sums), Arg::u64(N as u64)]).unwrap();
        s3.execute(affine, grid, &[Arg::read(&y), Arg::write(&x), Arg::bytes(&b), Arg::f64(-step), Arg::u64(N as u64)])
            .unwrap();
    }
    let mut host = start;
    let mut host_y = Vec::new();
    for (round, sums) in sums.iter().enumerate() {
        let step = round as f64;
        host_y = host.iter().map(|&v| A.apply(f64::from(v), step) as f32).collect();
        let expected: Vec<f32> = host_y
            .chunks(BLOCK as usize)
            .map(|block| block.iter().map(|&v| f64::from(v)).sum::<f64>() as f32)
            .collect();
        assert_close(&s2.read_as::<f32>(sums).unwrap(), &expected, 1e-4, &format!("round {round}'s block sums"));
        host = host_y.iter().map(|&v| B.apply(f64::from(v), -step) as f32).collect();
    }
    assert_close(&s1.read_as::<f32>(&y).unwrap(), &host_y, 1e-6, "y");
    assert_close(&s1.read_as::<f32>(&x).unwrap(), &host, 1e-6, "x");
}

fn from_source(name: &str, include: &std::path::Path) -> Kernel {
    Kernel::custom(name).cuda(KERNELS, name).cuda_options([format!("-I{}", include.display())]).build()
}

#[test]
fn cpp_kernels_from_source_run_by_their_names_with_a_project_header_on_three_streams() {
    let Some(runtime) = open("cpp_kernels_from_source") else { return };
    let include = include_dir("source");
    pipeline(
        &runtime,
        &from_source("weir_test::affine<float>", &include),
        &from_source("weir_test::block_sums<float>", &include),
    );
    // The double instance of the same template, with a double scalar.
    let s = runtime.default_stream();
    let values: Vec<f64> = (0..1000).map(|i| f64::from(i) * 0.125).collect();
    let x = s.upload_as(ElementType::Bytes, bytemuck::cast_slice(&values)).unwrap();
    let y = s.empty(ElementType::Bytes, 8 * 1000).unwrap();
    let affine = from_source("weir_test::affine<double>", &include);
    let args = [Arg::read(&x), Arg::write(&y), Arg::bytes(&A.bytes()), Arg::f64(3.0), Arg::u64(1000)];
    s.execute(&affine, Grid::linear(1000, 128), &args).unwrap();
    let found: Vec<f64> = bytemuck::pod_collect_to_vec(&s.read(&y).unwrap());
    for (i, (&found, &v)) in found.iter().zip(&values).enumerate() {
        let expected = A.apply(v, 3.0);
        assert!((found - expected).abs() <= 1e-12 * expected.abs().max(1.0), "[{i}]: {found}, expected {expected}");
    }
    let _ = std::fs::remove_dir_all(include);
    runtime.close().unwrap();
}

#[test]
fn what_a_users_kernel_gets_wrong_is_refused_by_name_before_anything_runs() {
    let Some(runtime) = open("what_a_users_kernel_gets_wrong") else { return };
    let s = runtime.default_stream();
    let include = include_dir("refusals");
    let (x, y) = (s.zeros(ElementType::F32, 16).unwrap(), s.zeros(ElementType::F32, 16).unwrap());
    let refused =
        |kernel: &Kernel, args: &[Arg<'_>], expected: &str| match s.execute(kernel, Grid::linear(16, 16), args) {
            Err(Error::InvalidArgument(message)) => {
                assert!(message.contains(expected), "{expected:?} not in: {message}")
            }
            other => panic!("expected a refusal naming {expected:?}, got {other:?}"),
        };
    let right = [Arg::read(&x), Arg::write(&y), Arg::bytes(&A.bytes()), Arg::f64(1.0), Arg::u64(16)];
    let admitted = runtime.diagnostics().admitted_ops;
    // The project header is not on the include path.
    let without_include = Kernel::custom("affine").cuda(KERNELS, "weir_test::affine<float>").build();
    refused(&without_include, &right, "weir_test/affine.cuh");
    // No such kernel in the source.
    refused(&from_source("weir_test::scale<float>", &include), &right, "no kernel named \"weir_test::scale<float>\"");
    // A float where the kernel takes a double: the parameter sizes differ.
    let affine = from_source("weir_test::affine<float>", &include);
    let wrong = [Arg::read(&x), Arg::write(&y), Arg::bytes(&A.bytes()), Arg::f32(1.0), Arg::u64(16)];
    refused(&affine, &wrong, "takes 5 parameters of (8, 8, 16, 8, 8) bytes, but its 5 arguments need (8, 8, 16, 4, 8)");
    // A struct of the wrong size.
    let short = [Arg::read(&x), Arg::write(&y), Arg::bytes(&[0; 12]), Arg::f64(1.0), Arg::u64(16)];
    refused(&affine, &short, "(8, 8, 12, 8, 8)");
    assert_eq!(runtime.diagnostics().admitted_ops, admitted, "a refused launch admits nothing");
    s.execute(&affine, Grid::linear(16, 16), &right).unwrap();
    let _ = std::fs::remove_dir_all(include);
    runtime.close().unwrap();
}

/// The folder of modules nvcc built from `tests/cuda/kernels.cu`, if given.
fn modules(test: &str) -> Option<PathBuf> {
    match std::env::var_os("WEIR_CUDA_MODULES") {
        Some(dir) => Some(PathBuf::from(dir)),
        None => {
            eprintln!("[{test}] cuda modules: skipped (WEIR_CUDA_MODULES names no folder of nvcc's output)");
            None
        }
    }
}

#[test]
fn modules_nvcc_built_run_by_their_cpp_names_as_ptx_cubin_and_fatbin() {
    let Some(runtime) = open("modules_nvcc_built") else { return };
    let Some(dir) = modules("modules_nvcc_built") else { return };
    for file in ["kernels.ptx", "kernels.cubin", "kernels.fatbin"] {
        let image: std::sync::Arc<[u8]> =
            std::fs::read(dir.join(file)).unwrap_or_else(|e| panic!("{file}: {e}")).into();
        let kernel = |name: &str| Kernel::custom(name).cuda_module(image.clone(), name).build();
        eprintln!("[modules_nvcc_built] {file}: {} bytes", image.len());
        pipeline(&runtime, &kernel("weir_test::affine<float>"), &kernel("weir_test::block_sums<float>"));
    }
    runtime.close().unwrap();
}

#[test]
fn a_module_built_for_another_architecture_is_refused_naming_the_device() {
    let Some(runtime) = open("a_module_built_for_another_architecture") else { return };
    let Some(dir) = modules("a_module_built_for_another_architecture") else { return };
    let image = std::fs::read(dir.join("kernels_other_arch.cubin")).unwrap();
    let kernel = Kernel::custom("affine").cuda_module(image, "weir_test::affine<float>").build();
    let s = runtime.default_stream();
    let (x, y) = (s.zeros(ElementType::F32, 16).unwrap(), s.zeros(ElementType::F32, 16).unwrap());
    let args = [Arg::read(&x), Arg::write(&y), Arg::bytes(&A.bytes()), Arg::f64(1.0), Arg::u64(16)];
    match s.execute(&kernel, Grid::linear(16, 16), &args) {
        Err(Error::InvalidArgument(message)) => assert!(message.contains("cannot run on this"), "{message}"),
        other => panic!("a CUBIN for another architecture was taken on {}: {other:?}", runtime.info().name),
    }
    runtime.close().unwrap();
}

#[test]
fn a_cut_module_image_is_refused_before_the_driver_reads_it() {
    // `cuModuleLoadData` takes no length: a CUBIN or fatbin cut short would
    // have the driver read past the caller's bytes.
    let Some(runtime) = open("a_cut_module_image") else { return };
    let Some(dir) = modules("a_cut_module_image") else { return };
    let s = runtime.default_stream();
    let (x, y) = (s.zeros(ElementType::F32, 16).unwrap(), s.zeros(ElementType::F32, 16).unwrap());
    let args = [Arg::read(&x), Arg::write(&y), Arg::bytes(&A.bytes()), Arg::f64(1.0), Arg::u64(16)];
    for file in ["kernels.cubin", "kernels.fatbin"] {
        let whole = std::fs::read(dir.join(file)).unwrap();
        let cut = whole[..whole.len() / 2].to_vec();
        let kernel = Kernel::custom("affine").cuda_module(cut, "weir_test::affine<float>").build();
        match s.execute(&kernel, Grid::linear(16, 16), &args) {
            Err(Error::InvalidArgument(message)) => assert!(message.contains("fit its bytes"), "{file}: {message}"),
            other => panic!("{file} cut in half was taken: {other:?}"),
        }
    }
    s.fence().unwrap().wait().unwrap();
    runtime.close().unwrap();
}

/// `C = op(A) · op(B)` on the host, column-major, for `count` packed matrices.
fn host_gemm(gemm: &Gemm, count: usize, a: &[f32], b: &[f32]) -> Vec<f32> {
    let (m, n, k) = (gemm.m as usize, gemm.n as usize, gemm.k as usize);
    let at = |i: usize, l: usize| if gemm.transpose_a { l + i * k } else { i + l * m };
    let bt = |l: usize, j: usize| if gemm.transpose_b { j + l * n } else { l + j * k };
    let mut c = vec![0f32; m * n * count];
    for batch in 0..count {
        let (a, b) = (&a[batch * m * k..], &b[batch * k * n..]);
        for j in 0..n {
            for i in 0..m {
                let sum: f64 = (0..k).map(|l| f64::from(a[at(i, l)]) * f64::from(b[bt(l, j)])).sum();
                c[batch * m * n + i + j * m] = gemm.alpha * sum as f32;
            }
        }
    }
    c
}

#[test]
fn a_cublas_gemm_between_weir_kernels_on_other_streams_waits_for_its_inputs_and_is_waited_for() {
    let Some(runtime) = open("a_cublas_gemm_between_weir_kernels") else { return };
    let blas = match Blas::new(&runtime) {
        Ok(blas) => blas,
        Err(error) => {
            assert!(!required(), "cuBLAS is unavailable where cuda is required: {error}");
            return eprintln!("[a_cublas_gemm_between_weir_kernels] cuBLAS: skipped: {error}");
        }
    };
    let (s1, s2, s3) = (runtime.default_stream(), runtime.new_stream().unwrap(), runtime.new_stream().unwrap());
    let mut gemm = Gemm::new(96, 80, 64);
    gemm.transpose_b = true;
    let values =
        |count: usize, seed: usize| -> Vec<f32> { (0..count).map(|i| ((i * 7 + seed) % 13) as f32 - 6.0).collect() };
    let (a_host, b_host) = (values(96 * 64, 1), values(80 * 64, 5));
    let a = s1.upload(&a_host).unwrap();
    let b = s1.upload(&b_host).unwrap();
    let (a2, c, d) = (
        s1.empty(ElementType::F32, a_host.len() as u64).unwrap(),
        s2.empty(ElementType::F32, 96 * 80).unwrap(),
        s3.empty(ElementType::F32, 96 * 80).unwrap(),
    );
    // A Weir kernel on stream 1 makes the GEMM's input, late: the GEMM on
    // stream 2 must wait for it, and a Weir kernel on stream 3 for the GEMM.
    s1.delay(Duration::from_millis(200)).unwrap();
    s1.scale(&a, 2.0, &a2).unwrap();
    blas.sgemm(&s2, &gemm, &a2, &b, &c).unwrap();
    s3.scale(&c, 0.5, &d).unwrap();
    let doubled: Vec<f32> = a_host.iter().map(|v| 2.0 * v).collect();
    let expected: Vec<f32> = host_gemm(&gemm, 1, &doubled, &b_host).iter().map(|v| 0.5 * v).collect();
    assert_close(&s3.read_as::<f32>(&d).unwrap(), &expected, 1e-5, "0.5 · (2A · Bᵀ)");
    // Overwriting A after the GEMM waits for the GEMM's read of it.
    s1.fill_f32(&a2, 0.0).unwrap();
    assert_close(&s2.read_as::<f32>(&c).unwrap(), &host_gemm(&gemm, 1, &doubled, &b_host), 1e-5, "C after A changed");

    // Four GEMMs of one shape in one call.
    let batch = Gemm::new(32, 16, 8);
    let (ba, bb) = (values(4 * 32 * 8, 2), values(4 * 8 * 16, 3));
    let (ba_d, bb_d) = (s2.upload(&ba).unwrap(), s2.upload(&bb).unwrap());
    let bc = s2.empty(ElementType::F32, 4 * 32 * 16).unwrap();
    blas.sgemm_batched(&s2, &batch, 4, &ba_d, &bb_d, &bc).unwrap();
    assert_close(&s2.read_as::<f32>(&bc).unwrap(), &host_gemm(&batch, 4, &ba, &bb), 1e-5, "batched");

    // Bad input is refused before anything runs.
    let admitted = runtime.diagnostics().admitted_ops;
    match blas.sgemm(&s2, &Gemm::new(97, 80, 64), &a2, &b, &c) {
        Err(Error::InvalidArgument(message)) => assert!(message.contains("sgemm's a is 97 × 64"), "{message}"),
        other => panic!("a GEMM past its buffer was admitted: {other:?}"),
    }
    // A batch whose size passes a u64 (2^16 × 2^16 × 2^30 × 4 bytes = 2^64).
    let huge = Gemm::new(1 << 16, 1 << 16, 1 << 16);
    match blas.sgemm_batched(&s2, &huge, 1 << 30, &a2, &b, &c) {
        Err(Error::InvalidArgument(message)) => assert!(message.contains("more than 2^64"), "{message}"),
        other => panic!("a batch past 2^64 bytes was admitted: {other:?}"),
    }
    assert_eq!(runtime.diagnostics().admitted_ops, admitted);

    // With beta 0, a C larger than the product keeps its tail: a failed C
    // stays failed (declared overwritten whole, its failed tail was healed).
    let wide = s2.empty(ElementType::F32, 2 * 96 * 80).unwrap();
    assert!(s2.fail_write(&wide, "a deliberate failure").is_err());
    let _ = s2.fence().unwrap().wait();
    blas.sgemm(&s2, &gemm, &a2, &b, &wide).unwrap();
    assert!(s2.read(&wide).is_err(), "a GEMM writing half of a failed C healed all of it");
    runtime.close().unwrap();
}

#[test]
fn blas_is_cuda_s_alone() {
    let runtime = Runtime::open(BackendKind::Cpu).unwrap();
    assert!(matches!(Blas::new(&runtime), Err(Error::Unsupported { .. })));
}
