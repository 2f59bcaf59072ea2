//! Host buffers: uploads from them and reads that hand them back, ordered
//! like any write and read, page-locked where the backend locks memory.

use futures::executor::block_on;
use weir_core::{BackendKind, ElementType, Error};

use crate::common::hold;

conformance! {
    fn an_upload_from_a_host_buffer_is_read_back_on_another_stream_after_it(runtime: &Runtime) {
        let (s, t) = (runtime.default_stream(), runtime.new_stream().unwrap());
        let locks = matches!(runtime.info().backend, BackendKind::Cuda | BackendKind::Hip);
        let data: Vec<f32> = (0..4096).map(|i| i as f32).collect();
        let mut host = runtime.host_buffer(&data).unwrap();
        assert_eq!(host.is_page_locked(), locks, "page-locked where the backend locks memory");
        assert_eq!(host.as_slice::<f32>().unwrap(), &data[..]);
        let x = s.zeros(ElementType::F32, 4096).unwrap();
        // The reader on t is admitted while s is held before the upload: it
        // must wait for the upload, not read the zeros.
        let held = hold(&s);
        s.write_host(&x, 0, &host).unwrap();
        let read = t.enqueue_read(&x).unwrap();
        if held.is_gate() {
            std::thread::sleep(std::time::Duration::from_millis(20));
            assert!(!read.is_complete(), "the read ran ahead of the upload it depends on");
        }
        held.release();
        let back = read.wait_host().unwrap();
        assert_eq!(back.is_page_locked(), locks, "a read hands back the memory the device copied into");
        assert_eq!(back.as_slice::<f32>().unwrap(), &data[..]);

        // Once the upload is done the source is the caller's again, to refill and upload.
        s.fence().unwrap().wait().unwrap();
        let bytes = host.get_mut().expect("nothing holds the host buffer after its upload");
        bytes.copy_from_slice(bytemuck::cast_slice(&vec![2.5f32; 4096]));
        s.write_host(&x, 0, &host).unwrap();
        let again = block_on(t.enqueue_read(&x).unwrap().into_host()).unwrap();
        assert!(again.as_slice::<f32>().unwrap().iter().all(|&v| v == 2.5));
        assert_eq!(t.read_as::<f32>(&x).unwrap(), vec![2.5; 4096], "a plain read sees the same bytes");
    }

    fn a_staging_buffer_is_filled_in_place_then_uploaded(runtime: &Runtime) {
        let s = runtime.default_stream();
        let locks = matches!(runtime.info().backend, BackendKind::Cuda | BackendKind::Hip);
        let x = s.zeros(ElementType::U32, 1024).unwrap();
        for round in 0..3u32 {
            let mut staging = s.staging_buffer(4096).unwrap();
            assert_eq!((staging.len(), staging.is_page_locked()), (4096, locks));
            let words: Vec<u32> = (0..1024).map(|i| i * 3 + round).collect();
            staging.get_mut().expect("a new staging buffer is the caller's").copy_from_slice(bytemuck::cast_slice(&words));
            s.write_host(&x, 0, &staging).unwrap();
            // Dropped at once: the upload holds its own handle until its copy is done.
            drop(staging);
            assert_eq!(s.read_as::<u32>(&x).unwrap(), words, "round {round}");
        }
    }

    fn a_staging_buffer_larger_than_any_memory_is_refused_as_out_of_memory(runtime: &Runtime) {
        let s = runtime.default_stream();
        // The first past what a slice may span; the last a page-locked
        // pool's power-of-two sizes could not round up to; and one a
        // slice may span that no host holds. None may panic or abort.
        for len in [isize::MAX as usize + 1, usize::MAX, 1 << 60] {
            match s.staging_buffer(len) {
                Err(Error::OutOfMemory { host: true, .. }) => {}
                Err(other) if len == 1 << 60 => assert!(!other.to_string().is_empty()),
                other => panic!("a staging buffer of {len} bytes: {:?}", other.map(|buffer| buffer.len())),
            }
        }
        let mut staging = s.staging_buffer(8).expect("the runtime goes on");
        staging.get_mut().expect("the caller's").copy_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
        let x = s.zeros(ElementType::Bytes, 8).unwrap();
        s.write_host(&x, 0, &staging).unwrap();
        assert_eq!(s.read_as::<u8>(&x).unwrap(), vec![1, 2, 3, 4, 5, 6, 7, 8]);
    }

    fn a_host_buffer_of_the_wrong_size_is_refused_and_changes_nothing(runtime: &Runtime) {
        let s = runtime.default_stream();
        let x = s.upload(&[1.0f32, 2.0]).unwrap();
        let two = runtime.host_buffer(&[7.0f32, 8.0]).unwrap();
        assert!(matches!(s.write_host(&x, 1, &two), Err(Error::OutOfRange { .. })));
        let odd = runtime.host_buffer(&[1u8, 2, 3]).unwrap();
        assert!(matches!(s.write_host(&x, 0, &odd), Err(Error::InvalidArgument(_))), "not whole f32s");
        let empty = runtime.host_buffer::<f32>(&[]).unwrap();
        assert!(matches!(s.write_host(&x, 0, &empty), Err(Error::InvalidArgument(_))));
        assert_eq!(s.read_as::<f32>(&x).unwrap(), vec![1.0, 2.0]);
        s.write_host(&x, 0, &two).unwrap();
        assert_eq!(s.read_as::<f32>(&x).unwrap(), vec![7.0, 8.0]);
    }

    fn a_recorded_upload_from_a_host_buffer_replays_the_bytes_it_was_recorded_with(runtime: &Runtime) {
        let s = runtime.default_stream();
        let x = s.zeros(ElementType::U32, 2).unwrap();
        let mut host = runtime.host_buffer(&[3u32, 4]).unwrap();
        let graph = s.record(|r| r.write_host(&x, 0, &host)).unwrap();
        host.get_mut().expect("a recording keeps its own copy").fill(0);
        s.replay(&graph).unwrap();
        assert_eq!(s.read_as::<u32>(&x).unwrap(), vec![3, 4]);
    }
}
