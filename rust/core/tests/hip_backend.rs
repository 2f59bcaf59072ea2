//! The HIP backend where no AMD GPU exists: opening is a clean
//! `Unavailable`, and hiprtc still compiles every built-in kernel.
#![cfg(feature = "hip")]

use weir_core::backend::gpu::{cuda_source, BuiltinKernel};
use weir_core::backend::hip::{check_arguments_for, compile_builtins_for, compile_for, param_sizes_in};
use weir_core::backend::{KernelArg, Span};
use weir_core::{Access, Arg, BackendKind, ElementType, Error, Grid, Kernel, Runtime, ScalarArg};

fn required() -> bool {
    std::env::var("WEIR_REQUIRE_BACKENDS").map(|list| list.split(',').any(|name| name.trim() == "hip")).unwrap_or(false)
}

/// A HIP runtime for a test's device half, or `None`, reported skipped by
/// name, where there is no device (a failure where hip is required).
fn device(test: &str) -> Option<Runtime> {
    match Runtime::open(BackendKind::Hip) {
        Ok(runtime) => Some(runtime),
        Err(Error::Unavailable { reason, .. }) => {
            assert!(!required(), "hip is required but unavailable: {reason}");
            eprintln!("hip: skipped: {test} on a device: {reason}");
            None
        }
        Err(other) => panic!("opening hip must succeed or be Unavailable, got {other}"),
    }
}

#[test]
fn opening_without_a_device_is_unavailable_naming_the_cause() {
    match Runtime::open(BackendKind::Hip) {
        Ok(runtime) => assert_eq!(runtime.info().backend, BackendKind::Hip),
        Err(Error::Unavailable { backend, reason }) => {
            assert_eq!(backend, BackendKind::Hip);
            assert!(reason.contains("device"), "reason: {reason}");
            assert!(!required(), "hip is required but unavailable: {reason}");
        }
        Err(other) => panic!("opening hip must succeed or be Unavailable, got {other}"),
    }
}

#[test]
fn hiprtc_compiles_every_builtin_kernel_for_a_gfx_target() {
    for arch in ["gfx90a", "gfx1030"] {
        let image = compile_builtins_for(arch).unwrap_or_else(|e| panic!("{arch}: {e}"));
        assert!(image.len() > 1024, "{arch}: a {}-byte code object", image.len());
        let text = String::from_utf8_lossy(&image);
        for entry in BuiltinKernel::ALL.map(BuiltinKernel::entry) {
            assert!(cuda_source().contains(entry));
            assert!(text.contains(entry), "{arch}: no {entry} in the code object");
        }
        assert!(text.contains(arch), "{arch}: the code object names another target");
    }
}

#[test]
fn hiprtc_reports_a_broken_kernel_as_an_invalid_argument_with_its_log() {
    // The path custom HIP kernels take.
    let error = weir_core::backend::hip::compile_for("gfx90a", "this is not HIP").unwrap_err();
    match error {
        Error::InvalidArgument(message) => assert!(message.contains("error"), "{message}"),
        other => panic!("expected an invalid argument, got {other}"),
    }
}

/// A HIP source that does not compile, naming what the compiler will complain about.
const BROKEN: &str = r#"extern "C" __global__ void broken(unsigned int* out) { out[0] = weir_undeclared_name; }"#;

#[test]
fn a_broken_hip_kernel_is_refused_by_prepare_with_the_compilers_message() {
    match Runtime::open(BackendKind::Hip) {
        Ok(runtime) => {
            // With a device: refused before admission, and the stream goes on.
            let s = runtime.default_stream();
            let out = s.zeros(ElementType::Bytes, 4).unwrap();
            let admitted = runtime.diagnostics().admitted_ops;
            let kernel = Kernel::custom("broken").hip(BROKEN, "broken").build();
            match s.execute(&kernel, Grid::linear(1, 1), &[Arg::write(&out)]).unwrap_err() {
                Error::InvalidArgument(message) => assert!(message.contains("weir_undeclared_name"), "{message}"),
                other => panic!("expected an invalid argument, got {other}"),
            }
            assert_eq!(runtime.diagnostics().admitted_ops, admitted);
            s.memset_zero(&out).unwrap();
            s.fence().unwrap().wait().unwrap();
        }
        Err(Error::Unavailable { .. }) => {
            // Without one, the compile that `prepare` runs, for a real target:
            // the error is the caller's, with hiprtc's own diagnostic.
            match compile_for("gfx90a", BROKEN).unwrap_err() {
                Error::InvalidArgument(message) => {
                    assert!(message.contains("does not compile"), "{message}");
                    assert!(message.contains("undeclared identifier 'weir_undeclared_name'"), "{message}");
                }
                other => panic!("expected an invalid argument, got {other}"),
            }
        }
        Err(other) => panic!("opening hip must succeed or be Unavailable, got {other}"),
    }
}

/// A pointer and a 32-bit scalar: the layout the arguments `(buffer, u32)` need.
const PUT: &str = r#"extern "C" __global__ void put(unsigned int* out, unsigned int v) { out[0] = v; }"#;
/// A pointer and a 64-bit scalar: no 32-bit scalar argument fits it.
const WIDE: &str = r#"extern "C" __global__ void wide(unsigned int* out, unsigned long long n) { out[0] = n; }"#;

#[test]
fn a_hiprtc_code_object_declares_a_pointer_and_a_u32_as_8_and_4_bytes() {
    for arch in ["gfx90a", "gfx1030"] {
        let image = compile_for(arch, PUT).unwrap_or_else(|e| panic!("{arch}: {e}"));
        assert_eq!(param_sizes_in(&image, "put").unwrap(), [8, 4], "{arch}");
        let image = compile_for(arch, WIDE).unwrap_or_else(|e| panic!("{arch}: {e}"));
        assert_eq!(param_sizes_in(&image, "wide").unwrap(), [8, 8], "{arch}");
    }
}

/// `outcome` is a refusal as an invalid argument whose message contains `expected`.
fn assert_refused(outcome: Result<(), Error>, expected: &str) {
    match outcome {
        Err(Error::InvalidArgument(message)) => assert!(message.contains(expected), "{message}"),
        other => panic!("expected an invalid argument containing {expected:?}, got {other:?}"),
    }
}

#[test]
fn arguments_that_do_not_match_a_hip_kernels_parameters_are_refused() {
    // The check reads only the arguments' kinds: a buffer, or a scalar.
    let out = || KernelArg::Buffer(Span { buffer: (), offset: 0, len: 4 }, Access::Write);
    let u32 = || KernelArg::Scalar(ScalarArg::U32(1));
    let put = Kernel::custom("put").hip(PUT, "put").build();
    check_arguments_for("gfx90a", &put, &[out(), u32()]).unwrap();
    let cases = [
        (vec![out()], "but its 1 arguments need (8) bytes"),
        (vec![out(), u32(), KernelArg::Scalar(ScalarArg::F32(2.0))], "but its 3 arguments need (8, 4, 4) bytes"),
        (vec![u32(), out()], "but its 2 arguments need (4, 8) bytes"),
    ];
    for (args, need) in cases {
        assert_refused(
            check_arguments_for("gfx90a", &put, &args),
            &format!("kernel put takes 2 parameters of (8, 4) bytes, {need}"),
        );
    }
    // A scalar the declared layout does not fit.
    let wide = Kernel::custom("wide").hip(WIDE, "wide").build();
    assert_refused(
        check_arguments_for("gfx90a", &wide, &[out(), u32()]),
        "kernel wide takes 2 parameters of (8, 8) bytes, but its 2 arguments need (8, 4) bytes",
    );
    if let Some(runtime) = device("arguments_that_do_not_match_a_hip_kernels_parameters_are_refused") {
        // With a device, `prepare` refuses them before admission.
        let s = runtime.default_stream();
        let out = s.zeros(ElementType::Bytes, 4).unwrap();
        let admitted = runtime.diagnostics().admitted_ops;
        assert_refused(
            s.execute(&put, Grid::linear(1, 1), &[Arg::u32(1), Arg::write(&out)]),
            "kernel put takes 2 parameters of (8, 4) bytes, but its 2 arguments need (4, 8) bytes",
        );
        assert_eq!(runtime.diagnostics().admitted_ops, admitted);
        s.execute(&put, Grid::linear(1, 1), &[Arg::write(&out), Arg::u32(7)]).unwrap();
        assert_eq!(s.read_as::<u32>(&out).unwrap()[0], 7);
    }
}

#[test]
fn a_missing_hip_entry_point_is_an_invalid_argument_naming_it() {
    let absent = Kernel::custom("absent").hip(PUT, "weir_absent_entry").build();
    let args = [
        KernelArg::Buffer(Span { buffer: (), offset: 0, len: 4 }, Access::Write),
        KernelArg::Scalar(ScalarArg::U32(1)),
    ];
    assert_refused(check_arguments_for("gfx90a", &absent, &args), "no kernel named \"weir_absent_entry\"");
    if let Some(runtime) = device("a_missing_hip_entry_point_is_an_invalid_argument_naming_it") {
        let s = runtime.default_stream();
        let out = s.zeros(ElementType::Bytes, 4).unwrap();
        assert_refused(
            s.execute(&absent, Grid::linear(1, 1), &[Arg::write(&out), Arg::u32(1)]),
            "no kernel named \"weir_absent_entry\"",
        );
    }
}

/// A kernel written as projects write them: a template in a namespace, a
/// `size_t`, a project header found through an include directory.
const TEMPLATED: &str = r#"
#include "weir_scale_factor.h"
namespace ops {
template <typename T>
__global__ void scale(T* out, T factor, size_t n) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) out[i] = out[i] * factor * WEIR_SCALE_FACTOR;
}
}
"#;

/// A folder of its own holding the header [`TEMPLATED`] includes.
fn header_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("weir-hip-include-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("weir_scale_factor.h"), "#define WEIR_SCALE_FACTOR 2\n").unwrap();
    dir
}

#[test]
fn a_hip_template_in_a_namespace_is_launched_by_its_cpp_name_with_its_include_directory() {
    let dir = header_dir();
    let include = format!("-I{}", dir.display());
    let kernel = |entry: &str| Kernel::custom("scale").hip(TEMPLATED, entry).hip_options([include.as_str()]).build();
    let out = || KernelArg::Buffer(Span { buffer: (), offset: 0, len: 64 }, Access::ReadWrite);
    let (f32, f64, size) = (
        || KernelArg::Scalar(ScalarArg::F32(2.0)),
        || KernelArg::Scalar(ScalarArg::F64(2.0)),
        || KernelArg::Scalar(ScalarArg::U64(8)),
    );
    // Each instance resolves to its own symbol, with its own parameter sizes.
    check_arguments_for("gfx90a", &kernel("ops::scale<float>"), &[out(), f32(), size()]).unwrap();
    check_arguments_for("gfx90a", &kernel("ops::scale<double>"), &[out(), f64(), size()]).unwrap();
    assert_refused(
        check_arguments_for("gfx90a", &kernel("ops::scale<double>"), &[out(), f32(), size()]),
        "kernel scale takes 3 parameters of (8, 8, 8) bytes, but its 3 arguments need (8, 4, 8) bytes",
    );
    // A name the source does not declare, and a header nowhere on the path.
    assert_refused(check_arguments_for("gfx90a", &kernel("ops::shift<float>"), &[out(), f32(), size()]), "shift");
    let without_include = Kernel::custom("scale").hip(TEMPLATED, "ops::scale<float>").build();
    assert_refused(check_arguments_for("gfx90a", &without_include, &[out(), f32(), size()]), "weir_scale_factor.h");
    let _ = std::fs::remove_dir_all(dir);
}
