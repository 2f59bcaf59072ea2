//! The conformance suite: the scheduling contract of DESIGN.md, proven on
//! every backend compiled in (unavailable ones are reported as skipped).

mod bad_input;
mod common;
mod errors;
mod fences;
mod lifecycle;
mod ordering;
mod seed_race;
mod stress;
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
