//! The conformance suite: the scheduling contract of the crate docs, proven
//! on every backend compiled in (unavailable ones are reported as skipped).
//!
//! Each case is written once, as `fn name(runtime: &Runtime)` inside
//! [`conformance!`], and runs as one test per backend, so a report names
//! `seed_race::seed_race_reader_waits_for_kernel_producer::wgpu` and a failure on
//! one backend never hides the others.

/// One `#[test]` per backend for each case: `case::cpu`, `case::wgpu`,
/// `case::cuda`, `case::hip`.
macro_rules! conformance {
    ($( $(#[$meta:meta])* fn $name:ident($runtime:ident: &Runtime) $body:block )*) => {
        $(
            $(#[$meta])*
            mod $name {
                #[allow(unused_imports)]
                use super::*;

                fn case($runtime: &weir_core::Runtime) $body

                #[test]
                fn cpu() {
                    crate::common::on_backend(weir_core::BackendKind::Cpu, stringify!($name), case);
                }

                #[test]
                fn wgpu() {
                    crate::common::on_backend(weir_core::BackendKind::Wgpu, stringify!($name), case);
                }

                #[test]
                fn cuda() {
                    crate::common::on_backend(weir_core::BackendKind::Cuda, stringify!($name), case);
                }

                #[test]
                fn hip() {
                    crate::common::on_backend(weir_core::BackendKind::Hip, stringify!($name), case);
                }
            }
        )*
    };
}

mod backpressure;
mod bad_input;
mod common;
mod errors;
mod external;
mod fences;
mod graphs;
mod host_buffers;
mod lifecycle;
mod ordering;
mod portable;
mod reentrancy;
mod seed_race;
mod stress;
mod timestamps;
mod typed;
mod zeros;

#[test]
fn backends_report() {
    use weir_core::BackendKind;
    for kind in BackendKind::CONCRETE {
        match weir_core::Runtime::open(kind) {
            Ok(runtime) => eprintln!("backend {}: available ({})", kind.name(), runtime.info().name),
            Err(error) => {
                assert!(
                    !common::required_backends().contains(&kind),
                    "required backend {} is unavailable: {error}",
                    kind.name()
                );
                eprintln!("backend {}: skipped ({error})", kind.name());
            }
        }
    }
}
