//! Typed buffers and views: element types are checked, counts are in
//! elements, and a view is ordered like the buffer it is part of.

use weir_core::{Arg, Builtin, ElementType, Error, Kernel};

use crate::common::hold;

fn refused(outcome: weir_core::Result<()>, what: &str) {
    assert!(matches!(outcome, Err(Error::InvalidArgument(_))), "{what}: {outcome:?}");
}

conformance! {
    fn buffers_count_their_elements_and_reads_round_trip_their_type(runtime: &Runtime) {
        let s = runtime.default_stream();
        let f = s.zeros(ElementType::F32, 3).unwrap();
        assert_eq!((f.element_type(), f.len(), f.size_bytes()), (ElementType::F32, 3, 12));
        s.write(&f, 1, &[5.5f32]).unwrap();
        assert_eq!(s.read_as::<f32>(&f).unwrap(), vec![0.0, 5.5, 0.0], "the offset counts elements");
        let i = s.upload(&[-1i32, 2, -3]).unwrap();
        assert_eq!((i.element_type(), i.len()), (ElementType::I32, 3));
        assert_eq!(s.read_as::<i32>(&i).unwrap(), vec![-1, 2, -3]);
        let u = s.empty(ElementType::U32, 4).unwrap();
        s.iota(&u, 10).unwrap();
        assert_eq!(s.read_as::<u32>(&u).unwrap(), vec![10, 11, 12, 13]);
        assert_eq!(s.enqueue_read_at(&u, 1, 2).unwrap().wait().unwrap().len(), 8, "a read of 2 u32s is 8 bytes");
        let raw = s.zeros(ElementType::Bytes, 8).unwrap();
        assert_eq!((raw.len(), raw.size_bytes()), (8, 8));
        // Raw bytes take any data and read as anything whole.
        s.write(&raw, 4, &[7u32]).unwrap();
        assert_eq!(s.read_as::<u32>(&raw).unwrap(), vec![0, 7]);
        assert!(matches!(
            s.write(&f, 2, &[1.0f32, 2.0]),
            Err(Error::OutOfRange { offset: 2, size: 2, len: 3, element: ElementType::F32 })
        ));
    }

    fn a_wrong_element_type_is_refused_and_the_runtime_goes_on(runtime: &Runtime) {
        let s = runtime.default_stream();
        let (f, g) = (s.upload(&[1.0f32, 2.0]).unwrap(), s.zeros(ElementType::F32, 2).unwrap());
        let (i, u) = (s.upload(&[1i32, 2]).unwrap(), s.zeros(ElementType::U32, 2).unwrap());
        refused(s.axpy(2.0, &i, &g), "axpy reading i32s");
        refused(s.axpy(2.0, &f, &i), "axpy writing i32s");
        refused(s.add(&f, &f, &u), "add into u32s");
        refused(s.scale(&u, 2.0, &g), "scale of u32s");
        refused(s.fill_u32(&f, 1), "a u32 fill of f32s");
        refused(s.fill_f32(&i, 1.0), "an f32 fill of i32s");
        refused(s.iota(&f, 0), "iota into f32s");
        refused(s.copy(&f, &i), "a copy from f32s to i32s");
        refused(s.write(&f, 0, &[1u32]), "u32s written into f32s");
        assert!(matches!(s.read_as::<i32>(&f), Err(Error::InvalidArgument(_))), "f32s read as i32s");
        let named = s.axpy(2.0, &i, &g).unwrap_err().to_string();
        assert!(named.contains("i32") && named.contains("f32"), "the refusal names both types: {named}");
        // Nothing was admitted by the refusals: the buffers hold what they held.
        s.axpy(2.0, &f, &g).unwrap();
        assert_eq!(s.read_as::<f32>(&g).unwrap(), vec![2.0, 4.0]);
        assert_eq!(s.read_as::<i32>(&i).unwrap(), vec![1, 2]);
        // Memset and a custom kernel take any type.
        s.memset_zero(&i).unwrap();
        assert_eq!(s.read_as::<i32>(&i).unwrap(), vec![0, 0]);
        let fill = Kernel::builtin(Builtin::FillI32);
        s.execute(&fill, weir_core::Grid::linear(2, 64), &[Arg::write(&i), Arg::i32(-4)]).unwrap();
        assert_eq!(s.read_as::<i32>(&i).unwrap(), vec![-4, -4]);
    }

    fn views_are_arguments_that_see_only_their_range(runtime: &Runtime) {
        // Views start on 256-byte boundaries (64 elements), the coarsest
        // storage alignment wgpu allows a device for the ops that bind them.
        const N: u64 = 64;
        let s = runtime.default_stream();
        let data: Vec<f32> = (0..3 * N).map(|i| i as f32).collect();
        let whole = s.upload(&data).unwrap();
        let (front, back) = (whole.view(0, N).unwrap(), whole.view(N, N).unwrap());
        assert!(back.is_view() && !whole.is_view());
        assert_eq!((back.first(), back.len(), back.size_bytes()), (N, N, 4 * N));
        assert_eq!(s.read_as::<f32>(&back).unwrap(), data[N as usize..2 * N as usize]);
        // Disjoint views of one buffer may be read and written by one op.
        s.axpy(10.0, &front, &back).unwrap();
        let mut expected = data.clone();
        for i in 0..N as usize {
            expected[N as usize + i] += 10.0 * data[i];
        }
        assert_eq!(s.read_as::<f32>(&whole).unwrap(), expected);
        // A view of a view counts from the view; offsets of writes and reads too.
        let last = whole.view(N, 2 * N).unwrap().view(N, N).unwrap();
        assert_eq!(last.first(), 2 * N);
        s.fill_f32(&last, -1.0).unwrap();
        s.write(&front, 2, &[0.5f32]).unwrap();
        expected[2] = 0.5;
        expected[2 * N as usize..].fill(-1.0);
        assert_eq!(s.read_as::<f32>(&whole).unwrap(), expected);
        assert_eq!(s.enqueue_read_at(&back, N - 1, 1).unwrap().wait().unwrap(), expected[2 * N as usize - 1].to_le_bytes());
        // Overlapping ranges an op writes are refused; so is a view past the end.
        let overlapping = whole.view(N / 2, N).unwrap();
        refused(s.axpy(1.0, &front, &overlapping), "axpy over overlapping views");
        assert!(matches!(whole.view(2 * N, N + 1), Err(Error::OutOfRange { offset: 128, size: 65, len: 192, .. })));
        assert!(matches!(back.view(0, N + 1), Err(Error::OutOfRange { .. })));
        assert!(matches!(whole.view(u64::MAX, 2), Err(Error::OutOfRange { .. })));
        assert!(matches!(whole.view(0, 0), Err(Error::InvalidArgument(_))));
        // A view keeps the memory alive without the whole buffer's handle.
        drop((whole, front, back, overlapping));
        assert_eq!(s.read_as::<f32>(&last).unwrap(), vec![-1.0; N as usize]);
    }

    fn a_view_write_publishes_a_version_of_its_buffer_for_every_stream(runtime: &Runtime) {
        let (s, t) = (runtime.new_stream().unwrap(), runtime.new_stream().unwrap());
        let whole = s.zeros(ElementType::U32, 1024).unwrap();
        let tail = whole.view(512, 512).unwrap();
        weir_core::Stream::sync(&s).now_or_block();
        let held = hold(&s);
        s.fill_u32(&tail, 9).unwrap();
        // T reads the whole buffer and, through another view, the part the
        // view write left alone: both wait for the held write.
        let all = t.enqueue_read(&whole).unwrap();
        let head = t.enqueue_read(&whole.view(0, 512).unwrap()).unwrap();
        if held.is_gate() {
            std::thread::sleep(std::time::Duration::from_millis(20));
            assert!(!all.is_complete() && !head.is_complete(), "a read on T ran before S's held view write");
        }
        held.release();
        let words = crate::common::words(&all.wait().unwrap());
        assert_eq!(&words[..512], &[0; 512][..]);
        assert_eq!(&words[512..], &[9; 512][..], "T read a stale version: the view write was not published");
        assert_eq!(crate::common::words(&head.wait().unwrap()), vec![0; 512]);
        // A write of the whole buffer on T after a read of a view on S waits for that read.
        let gate = hold(&s);
        let read = s.enqueue_read(&tail).unwrap();
        t.fill_u32(&whole, 1).unwrap();
        let overwritten = t.fence().unwrap();
        if gate.is_gate() {
            std::thread::sleep(std::time::Duration::from_millis(20));
            assert!(!overwritten.is_complete(), "T overwrote memory that S's held read of a view still reads");
        }
        gate.release();
        assert_eq!(crate::common::words(&read.wait().unwrap()), vec![9; 512]);
        overwritten.wait().unwrap();
    }
}

/// Blocks on a future: these cases wait on the caller's thread.
trait NowOrBlock {
    fn now_or_block(self);
}

impl<F: std::future::Future<Output = weir_core::Result<()>>> NowOrBlock for F {
    fn now_or_block(self) {
        futures::executor::block_on(self).unwrap();
    }
}
