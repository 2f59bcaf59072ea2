//! The HIP backend where no AMD GPU exists: opening is a clean
//! `Unavailable`, and hiprtc still compiles every built-in kernel.
#![cfg(feature = "hip")]

use weir_core::backend::gpu::{BUILTIN_ENTRIES, BUILTIN_SOURCE};
use weir_core::backend::hip::{compile_builtins_for, compile_for};
use weir_core::{Arg, BackendKind, Error, Grid, Kernel, Runtime};

fn required() -> bool {
    std::env::var("WEIR_REQUIRE_BACKENDS").map(|list| list.split(',').any(|name| name.trim() == "hip")).unwrap_or(false)
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
        for entry in BUILTIN_ENTRIES {
            assert!(BUILTIN_SOURCE.contains(entry));
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
            let out = s.zeros(4).unwrap();
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
