//! External ops (library calls) that declare what they read as well as what
//! they write: ordered like any op, and failures follow their data.

use weir_core::{Access, ElementType, Error, RawAccess};

use crate::common::hold;

/// Copies the first buffer of an external op into the second through the
/// backend's raw handles, as a library call would.
fn raw_copy(raw: RawAccess<'_>) -> weir_core::Result<()> {
    match raw {
        RawAccess::Cpu(cpu) => {
            cpu.enqueue(|buffers| {
                let source = buffers.bytes(0)?.to_vec();
                buffers.bytes_mut(1)?.copy_from_slice(&source);
                Ok(())
            });
            Ok(())
        }
        #[cfg(feature = "wgpu")]
        RawAccess::Wgpu(gpu) => {
            let [from, to] = [gpu.buffers()[0].clone(), gpu.buffers()[1].clone()];
            gpu.encoder().copy_buffer_to_buffer(&from.buffer, from.offset, &to.buffer, to.offset, from.len);
            Ok(())
        }
        #[cfg(feature = "cuda")]
        RawAccess::Cuda { stream, buffers } => {
            use weir_core::backend::cuda::cudarc::driver::sys as cu;
            // SAFETY: the admitted buffers' pointers and lengths, on the admitted stream.
            let result =
                unsafe { cu::cuMemcpyDtoDAsync_v2(buffers[1].ptr, buffers[0].ptr, buffers[0].len as usize, stream) };
            match result {
                cu::CUresult::CUDA_SUCCESS => Ok(()),
                error => Err(Error::InvalidArgument(format!("cuMemcpyDtoDAsync: {error:?}"))),
            }
        }
        #[cfg(feature = "hip")]
        RawAccess::Hip { stream, buffers } => {
            use weir_core::backend::hip::hip_sys::hiprt as hip;
            // SAFETY: the admitted buffers' pointers and lengths, on the admitted stream.
            let result = unsafe {
                hip::hipMemcpyAsync(
                    buffers[1].ptr as *mut _,
                    buffers[0].ptr as *const _,
                    buffers[0].len as usize,
                    hip::hipMemcpyKind::hipMemcpyDeviceToDevice,
                    stream,
                )
            };
            match result {
                hip::hipError_t::hipSuccess => Ok(()),
                error => Err(Error::InvalidArgument(format!("hipMemcpyAsync: {error:?}"))),
            }
        }
        #[allow(unreachable_patterns)]
        _ => Err(Error::InvalidArgument("no raw copy for this backend".into())),
    }
}

conformance! {
    fn a_closure_that_panics_fails_what_it_writes_and_the_next_fence(runtime: &Runtime) {
        let (s, t) = (runtime.default_stream(), runtime.new_stream().unwrap());
        let b = s.upload(&[1u32; 4]).unwrap();
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            s.external_write(&[&b], |_raw| panic!("foreign code panicked"))
        }));
        assert!(panicked.is_err(), "the panic reaches the caller");
        // The write was published as made: its readers must not get the old bytes as if it were.
        assert!(matches!(t.read_as::<u32>(&b), Err(Error::OpFailed { .. })), "a panicked write read as good");
        assert!(s.fence().unwrap().wait().is_err(), "the stream's next fence does not report it");
        // The stream goes on: a new write heals the buffer.
        s.fill_u32(&b, 7).unwrap();
        assert_eq!(t.read_as::<u32>(&b).unwrap(), vec![7; 4]);
    }
    fn an_external_op_reads_the_latest_write_and_a_later_write_waits_for_its_read(runtime: &Runtime) {
        let (s, t) = (runtime.default_stream(), runtime.new_stream().unwrap());
        // Past wgpu's shared slabs: a copy cannot go from a wgpu buffer to itself.
        const N: usize = 1 << 16;
        let x = s.zeros(ElementType::U32, N as u64).unwrap();
        let y = t.zeros(ElementType::U32, N as u64).unwrap();
        // s writes x while held: t's op must wait for that write.
        let held = hold(&s);
        s.fill_u32(&x, 7).unwrap();
        t.external(&[(&x, Access::Read), (&y, Access::Write)], raw_copy).unwrap();
        // And s's next write of x must wait for t's read of it.
        s.fill_u32(&x, 9).unwrap();
        drop(held);
        assert_eq!(t.read_as::<u32>(&y).unwrap(), vec![7; N], "the op read x before or after the write it needs");
        assert_eq!(s.read_as::<u32>(&x).unwrap(), vec![9; N]);
    }

    fn an_external_op_reading_a_failed_version_does_not_run_and_fails_what_it_writes(runtime: &Runtime) {
        let (s, t) = (runtime.default_stream(), runtime.new_stream().unwrap());
        let x = s.zeros(ElementType::U32, 16).unwrap();
        let y = t.zeros(ElementType::U32, 16).unwrap();
        assert!(s.fail_write(&x, "the producer broke").is_err());
        let mut ran = false;
        let outcome = t.external(&[(&x, Access::Read), (&y, Access::Write)], |raw| {
            ran = true;
            raw_copy(raw)
        });
        assert!(!ran, "the op ran over a failed input");
        for result in [outcome.map(|()| Vec::new()), t.read(&y)] {
            match result {
                Err(error) => assert!(error.to_string().contains("the producer broke"), "{error}"),
                Ok(_) => panic!("an op that read a failed version succeeded"),
            }
        }
        // Its stream's fence reports the failure once; then the stream goes on.
        assert!(futures::executor::block_on(t.sync()).is_err());
        // A full overwrite heals y; the streams go on.
        t.fill_u32(&y, 1).unwrap();
        assert_eq!(t.read_as::<u32>(&y).unwrap(), vec![1; 16]);
    }
}
