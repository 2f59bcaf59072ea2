//! Page-locked staging: uploads staged by `prepare`, a host buffer of this
//! device copied from directly, downloads handed to the reader, and staging
//! abandoned when nobody will see its copy end.

use super::*;
use crate::backend::UploadFrom;

#[test]
fn uploads_are_staged_in_prepare_and_the_staging_returns_after_the_copy() {
    let (backend, shared) = backend(Wake::Waiter);
    let stream = backend.create_stream(0).unwrap();
    let memory = backend.allocate(8).unwrap();
    let data: Vec<u8> = (1..=8).collect();
    let command = Command::Upload { dst: span(&memory, 0, 8), data: data.clone() };
    let prepared = backend.prepare(&command).unwrap();
    assert_eq!(backend.counters().host_staging_buffers, 1, "prepare takes the page-locked buffer");
    assert!(shared.device_calls().is_empty());
    // SAFETY: the fake touches no memory.
    unsafe { backend.enqueue(&stream, command, prepared, OpIo::default()) }.unwrap();
    backend.device.issuer.flush();
    assert_eq!(shared.device_calls(), vec![Call::CopyH2D { dst: memory.ptr, bytes: data }]);
    fence(&backend, &stream).unwrap();
    // The loan came back once the stream passed the copy: the next upload reuses it.
    submit(&backend, &stream, Command::Upload { dst: span(&memory, 0, 8), data: vec![0; 8] }).unwrap();
    assert_eq!(backend.counters().host_staging_buffers, 1);
    // A download delivers what the device held.
    let sink = HostSink::new(completion());
    submit(&backend, &stream, Command::Download { src: span(&memory, 0, 8), sink: sink.clone() }).unwrap();
    sink.completion.wait().unwrap();
    assert_eq!(sink.take().map(HostBuffer::into_vec), Some(vec![7; 8]));
}

#[test]
fn an_upload_from_this_devices_host_buffer_copies_from_it_and_holds_it_until_the_copy_is_done() {
    let (backend, shared) = backend(Wake::Waiter);
    // The waiter cannot see the copy end until the latch opens.
    let latch = Arc::new(Latch::default());
    *lock(&shared.slow_sync) = Some(latch.clone());
    let stream = backend.create_stream(0).unwrap();
    let _open = OpenOnDrop(latch.clone());
    let memory = backend.allocate(8).unwrap();
    let mut host = HostBuffer::filled(backend.staging_buffer(8).unwrap(), &[5; 8]).unwrap();
    assert!(host.is_page_locked());
    assert_eq!(backend.counters().host_staging_buffers, 1);

    let wrong = backend.prepare_upload(span(&memory, 0, 4), UploadFrom::Host(&host));
    assert!(matches!(wrong, Err(Error::InvalidArgument(_))), "a size that is not its destination's");
    let (command, prepared) = backend.prepare_upload(span(&memory, 0, 8), UploadFrom::Host(&host)).unwrap();
    // SAFETY: the fake touches no device memory.
    unsafe { backend.enqueue(&stream, command, prepared, OpIo::default()) }.unwrap();
    backend.device.issuer.flush();
    assert_eq!(shared.device_calls(), vec![Call::CopyH2D { dst: memory.ptr, bytes: vec![5; 8] }]);
    assert_eq!(backend.counters().host_staging_buffers, 1, "staged beside the host buffer");
    assert!(host.get_mut().is_none(), "writable while the copy may read it");
    latch.open();
    // Completions run in stream order: the upload's ran before the fence's.
    fence(&backend, &stream).unwrap();
    host.get_mut().expect("the copy is done").fill(9);

    // Another device's locked memory is staged like any bytes.
    let (other, _) = super::backend(Wake::Waiter);
    let foreign = HostBuffer::filled(other.staging_buffer(8).unwrap(), &[6; 8]).unwrap();
    let (command, prepared) = backend.prepare_upload(span(&memory, 0, 8), UploadFrom::Host(&foreign)).unwrap();
    assert_eq!(backend.counters().host_staging_buffers, 2, "staged in this device's memory");
    // SAFETY: as above.
    unsafe { backend.enqueue(&stream, command, prepared, OpIo::default()) }.unwrap();
    backend.device.issuer.flush();
    fence(&backend, &stream).unwrap();
    assert_eq!(shared.device_calls()[1], Call::CopyH2D { dst: memory.ptr, bytes: vec![6; 8] });
}

#[test]
fn a_download_hands_its_page_locked_memory_to_the_reader_until_dropped() {
    let (backend, _shared) = backend(Wake::Waiter);
    let stream = backend.create_stream(0).unwrap();
    let memory = backend.allocate(8).unwrap();
    let read = || {
        let sink = HostSink::new(completion());
        submit(&backend, &stream, Command::Download { src: span(&memory, 0, 8), sink: sink.clone() }).unwrap();
        sink.completion.wait().unwrap();
        sink.take().unwrap()
    };
    let first = read();
    assert!(first.is_page_locked());
    assert_eq!(first.as_bytes(), &[7; 8]);
    let second = read();
    assert_eq!(backend.counters().host_staging_buffers, 2, "a held read keeps its memory");
    drop((first, second));
    let third = read();
    assert_eq!(backend.counters().host_staging_buffers, 2, "a dropped read's memory is lent again");
    // It stays readable after its backend is gone: it keeps the device.
    drop((stream, memory, backend));
    assert_eq!(third.into_vec(), vec![7; 8]);
}

#[test]
fn a_refused_completion_abandons_the_staging_and_fails_the_read() {
    let (backend, shared) = backend(Wake::Waiter);
    let stream = backend.create_stream(0).unwrap();
    let memory = backend.allocate(8).unwrap();
    submit(&backend, &stream, Command::Upload { dst: span(&memory, 0, 8), data: vec![1; 8] }).unwrap();
    fence(&backend, &stream).unwrap();
    assert_eq!(backend.counters().host_staging_buffers, 1);
    // The copy is enqueued but the callback that would return its loan is not:
    // the loan must not be lent again while the copy may still read it.
    shared.fail("event_record");
    let upload = Command::Upload { dst: span(&memory, 0, 8), data: vec![2; 8] };
    assert!(failure_of(&backend, &stream, upload).is_some(), "the upload fails as it is issued");
    let sink = HostSink::new(completion());
    let download = Command::Download { src: span(&memory, 0, 8), sink: sink.clone() };
    submit(&backend, &stream, download).unwrap();
    assert!(sink.completion.wait().is_err(), "nobody else completes the read");
    // Neither loan came back: the next one is a third buffer.
    drop(backend.prepare(&Command::Upload { dst: span(&memory, 0, 8), data: vec![3; 8] }).unwrap());
    assert_eq!(backend.counters().host_staging_buffers, 3, "each abandoned loan stays out of the pool");
}

/// Page-locked memory is the context's: a runtime that goes while another
/// is on its context frees none (a free would wait for the other's
/// kernels, and hold up every driver call meanwhile); the other reuses it,
/// and the context's last runtime frees it.
#[test]
fn runtimes_on_one_context_share_its_page_locked_staging_and_the_last_one_frees_it() {
    let context = new_context();
    let (first, first_fake) = backend_on_context(context);
    drop(first.staging_buffer(64).unwrap());
    assert_eq!(lock(&first_fake.host).len(), 1);
    let (second, second_fake) = backend_on_context(context);
    drop(first);
    assert_eq!(lock(&first_fake.host).len(), 1, "the first runtime freed page-locked memory as it went");
    let lent = second.staging_buffer(64).unwrap();
    assert_eq!(second.counters().host_staging_buffers, 0, "the second allocated rather than reuse the first's");
    assert!(lock(&second_fake.host).is_empty());
    drop((lent, second));
    assert!(lock(&first_fake.host).is_empty(), "the context's last runtime freed its page-locked memory");
    let (unshared, unshared_fake) = backend(Wake::Waiter);
    drop(unshared.staging_buffer(64).unwrap());
    drop(unshared);
    assert!(lock(&unshared_fake.host).is_empty(), "a runtime that shares no context frees its own as it goes");
}

#[test]
fn a_staging_buffer_past_what_a_slice_may_span_is_refused() {
    let (backend, _shared) = backend(Wake::Waiter);
    // The pool's power-of-two sizes: none above the first, which a slice may not span.
    for len in [isize::MAX as usize, isize::MAX as usize + 1, usize::MAX] {
        match backend.staging_buffer(len) {
            Err(Error::OutOfMemory { host: true, bytes }) => assert_eq!(bytes, len as u64),
            other => panic!("a staging buffer of {len} bytes: {:?}", other.map(|buffer| buffer.len())),
        }
    }
    assert_eq!(backend.counters().host_staging_buffers, 0, "nothing was allocated");
    assert_eq!(backend.staging_buffer(8).unwrap().len(), 8, "the device goes on");
}

#[test]
fn small_loans_kept_long_do_not_take_large_buffers_so_page_locked_memory_stays_bounded() {
    let (backend, shared) = backend(Wake::Waiter);
    let mut kept = Vec::new();
    for _ in 0..8 {
        drop(backend.staging_buffer(4 << 20).unwrap());
        kept.push(backend.staging_buffer(8).unwrap());
    }
    // One 4 MiB buffer, lent again each time, and a small one per kept loan:
    // a small loan took the free 4 MiB buffer, and each round pinned another.
    let pinned: usize = lock(&shared.host).values().sum();
    assert!(pinned <= (4 << 20) + 8 * (64 << 10), "{pinned} bytes page-locked");
    drop(kept);
}
