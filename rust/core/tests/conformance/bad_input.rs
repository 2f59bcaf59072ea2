//! Bad input gets a typed error, and the runtime keeps working.

use weir_core::{Arg, BackendKind, Builtin, ElementType, Error, Grid, Kernel, Runtime};

/// The runtime still does real work after an error.
fn still_works(runtime: &Runtime) {
    let s = runtime.default_stream();
    let b = s.upload(&[2.0f32, 3.0]).unwrap();
    let out = s.empty(ElementType::Bytes, 8).unwrap();
    s.mul(&b, &b, &out).unwrap();
    assert_eq!(s.read_as::<f32>(&out).unwrap(), vec![4.0, 9.0]);
}

conformance! {
    fn out_of_range_offsets_are_typed_errors(runtime: &Runtime) {
        let s = runtime.default_stream();
        let b = s.zeros(ElementType::Bytes, 16).unwrap();
        assert!(matches!(s.write(&b, 12, &[1u32, 2]), Err(Error::OutOfRange { offset: 12, size: 8, len: 16, element: ElementType::Bytes })));
        assert!(matches!(s.write(&b, u64::MAX, &[1u8]), Err(Error::OutOfRange { .. })));
        assert!(matches!(s.enqueue_read_at(&b, 8, 9), Err(Error::OutOfRange { .. })));
        still_works(runtime);
    }
}

conformance! {
    fn wrong_sizes_and_signatures_are_typed_errors(runtime: &Runtime) {
        let s = runtime.default_stream();
        let (a, b, odd) = (s.zeros(ElementType::Bytes, 16).unwrap(), s.zeros(ElementType::Bytes, 32).unwrap(), s.zeros(ElementType::Bytes, 6).unwrap());
        let invalid = |r: weir_core::Result<()>| assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
        invalid(s.add(&a, &b, &a.clone()));
        invalid(s.add(&a, &a, &b));
        invalid(s.copy(&a, &b));
        invalid(s.fill_f32(&odd, 1.0));
        invalid(s.copy(&a, &a));
        let add = Kernel::builtin(Builtin::Add);
        invalid(s.execute(&add, Grid::linear(4, 4), &[Arg::read(&a), Arg::read(&a)]));
        invalid(s.execute(&add, Grid::linear(4, 4), &[Arg::read(&a), Arg::read(&a), Arg::read(&b)]));
        invalid(s.execute(&Kernel::builtin(Builtin::FillU32), Grid::linear(4, 4), &[Arg::write(&a), Arg::f32(1.0)]));
        assert!(matches!(s.zeros(ElementType::Bytes, 0), Err(Error::InvalidArgument(_))));
        assert!(matches!(s.zeros(ElementType::Bytes, u64::MAX), Err(Error::InvalidArgument(_) | Error::OutOfMemory { .. })));
        let cpu_only = Kernel::custom("cpu_only").cpu(|_| Ok(())).build();
        if runtime.info().backend != BackendKind::Cpu {
            assert!(matches!(s.execute(&cpu_only, Grid::linear(1, 1), &[]), Err(Error::Unsupported { .. })));
        }
        let no_source = Kernel::custom("no_source").build();
        assert!(matches!(s.execute(&no_source, Grid::linear(1, 1), &[]), Err(Error::Unsupported { .. })));
        still_works(runtime);
    }
}

conformance! {
    fn buffers_of_another_runtime_are_rejected(runtime: &Runtime) {
        let other = Runtime::open(BackendKind::Cpu).unwrap();
        let foreign = other.default_stream().zeros(ElementType::Bytes, 16).unwrap();
        let s = runtime.default_stream();
        let mine = s.zeros(ElementType::Bytes, 16).unwrap();
        assert!(matches!(s.copy(&foreign, &mine), Err(Error::ForeignHandle("buffer"))));
        assert!(matches!(s.read(&foreign), Err(Error::ForeignHandle(_))));
        assert!(matches!(s.external_write(&[&foreign], |_| Ok(())), Err(Error::ForeignHandle(_))));
        other.close().unwrap();
        still_works(runtime);
    }
}

#[test]
fn use_after_close_is_a_typed_error() {
    let runtime = Runtime::open(BackendKind::Cpu).unwrap();
    let s = runtime.default_stream();
    let b = s.upload(&[1u32; 4]).unwrap();
    runtime.close().unwrap();
    assert!(matches!(s.zeros(ElementType::Bytes, 4), Err(Error::Closed)));
    assert!(matches!(s.read(&b), Err(Error::Closed)));
    assert!(matches!(s.fence(), Err(Error::Closed)));
    assert!(matches!(runtime.new_stream(), Err(Error::Closed)));
    drop(b);
    // Another runtime is unaffected.
    still_works(&Runtime::open(BackendKind::Cpu).unwrap());
}

conformance! {
    fn messages_name_what_was_asked_and_sizes_are_checked_without_overflow(runtime: &Runtime) {
        let s = runtime.default_stream();
        let small = s.zeros(ElementType::Bytes, 16).unwrap();
        let huge = u64::MAX - 2;
        let error = s.enqueue_read_at(&small, huge, 8).err().unwrap();
        assert_eq!(error.to_string(), format!("8 bytes at offset {huge} do not fit in a buffer of 16 bytes"));
        let six = s.zeros(ElementType::Bytes, 6).unwrap();
        assert!(matches!(s.read_as::<f32>(&six), Err(Error::InvalidArgument(_))), "a part of an element");
        let kernel = Kernel::custom("any").cpu(|_| Ok(())).wgsl("", "main").cuda("", "k").hip("", "k").build();
        let overflowing = Grid::new([u32::MAX; 3], [u32::MAX; 3]);
        assert_eq!(overflowing.threads(), None);
        assert!(matches!(s.execute(&kernel, overflowing, &[Arg::write(&small)]), Err(Error::InvalidArgument(_))));
        still_works(runtime);
    }
}
