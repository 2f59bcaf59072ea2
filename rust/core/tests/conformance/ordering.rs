//! Dependencies and minimal waits, with exact counts.

use weir_core::{ElementType, Runtime};

use crate::common::hold;

fn waits(runtime: &Runtime) -> u64 {
    runtime.diagnostics().inserted_waits
}

conformance! {
    fn writer_waits_for_readers_on_two_other_streams(runtime: &Runtime) {
        let (w, r1, r2) = (runtime.new_stream().unwrap(), runtime.new_stream().unwrap(), runtime.new_stream().unwrap());
        let data = w.upload(&[5u32; 4096]).unwrap();
        let (out1, out2) = (r1.empty(ElementType::Bytes, 4 * 4096).unwrap(), r2.empty(ElementType::Bytes, 4 * 4096).unwrap());
        let held1 = hold(&r1);
        r1.copy(&data, &out1).unwrap();
        let held2 = hold(&r2);
        r2.copy(&data, &out2).unwrap();

        let before = waits(runtime);
        w.fill_u32(&data, 9).unwrap();
        assert_eq!(waits(runtime) - before, 2, "the writer must wait for both readers");
        let written = w.fence().unwrap();
        if held1.is_gate() {
            // Let the second reader finish: the writer must still wait for the first.
            held2.release();
            r2.fence().unwrap().wait().unwrap();
            assert!(!written.is_complete(), "the write ran before the first reader read");
            held1.release();
        }
        written.wait().unwrap();
        assert_eq!(r1.read_as::<u32>(&out1).unwrap(), vec![5; 4096]);
        assert_eq!(r2.read_as::<u32>(&out2).unwrap(), vec![5; 4096]);
        assert_eq!(w.read_as::<u32>(&data).unwrap(), vec![9; 4096]);
    }
}

conformance! {
    fn same_stream_ops_insert_no_waits(runtime: &Runtime) {
        let s = runtime.default_stream();
        let a = s.upload(&[1.0f32; 64]).unwrap();
        let b = s.zeros(ElementType::Bytes, 256).unwrap();
        let c = s.empty(ElementType::Bytes, 256).unwrap();
        for _ in 0..10 {
            s.axpy(2.0, &a, &b).unwrap();
            s.add(&a, &b, &c).unwrap();
            s.copy(&c, &a).unwrap();
        }
        let (mut ha, mut hb) = (1.0f32, 0.0f32);
        for _ in 0..10 {
            hb += 2.0 * ha;
            ha += hb;
        }
        assert_eq!(s.read_as::<f32>(&a).unwrap(), vec![ha; 64]);
        assert_eq!(waits(runtime), 0);
    }
}

conformance! {
    /// A pipeline over three streams with the exact number of inserted waits at
    /// every step, including waits saved by what a stream learnt from another.
    fn cross_stream_waits_are_minimal(runtime: &Runtime) {
        let (s, t, u) = (runtime.new_stream().unwrap(), runtime.new_stream().unwrap(), runtime.new_stream().unwrap());
        let a = s.upload(&[1.0f32; 256]).unwrap();
        let b = s.upload(&[2.0f32; 256]).unwrap();
        let step = |expected: u64, what: &str, op: &dyn Fn()| {
            let before = waits(runtime);
            op();
            assert_eq!(waits(runtime) - before, expected, "{what}");
        };
        let (ta, tb, tc) = (t.empty(ElementType::Bytes, 1024).unwrap(), t.empty(ElementType::Bytes, 1024).unwrap(), t.empty(ElementType::Bytes, 1024).unwrap());
        step(1, "T reads a: one wait on S", &|| t.copy(&a, &ta).unwrap());
        step(0, "T reads b, written before T's wait: none", &|| t.copy(&b, &tb).unwrap());
        step(1, "S overwrites a, read on T: one wait on T", &|| s.fill_f32(&a, 3.0).unwrap());
        let c = s.upload(&[4.0f32; 256]).unwrap();
        step(1, "T reads c, written after T's wait: one wait on S", &|| t.add(&ta, &c, &tc).unwrap());
        let (ud, ue) = (u.empty(ElementType::Bytes, 1024).unwrap(), u.empty(ElementType::Bytes, 1024).unwrap());
        step(1, "U reads T's output: one wait on T", &|| u.copy(&tc, &ud).unwrap());
        step(0, "U reads c: T had seen it, so U has", &|| u.copy(&c, &ue).unwrap());
        step(0, "U reads its own output: same stream", &|| u.copy(&ud, &ue).unwrap());
        assert_eq!(u.read_as::<f32>(&ue).unwrap(), vec![5.0; 256]);
        assert_eq!(t.read_as::<f32>(&tb).unwrap(), vec![2.0; 256]);
        assert_eq!(s.read_as::<f32>(&a).unwrap(), vec![3.0; 256]);
    }
}

conformance! {
    /// A use another stream finished, as a completed fence or read after it shows,
    /// needs no wait: a writer does not wait behind the reader's stream's
    /// newer work (the ring of a chunked pipeline, whose slot's previous
    /// reader fenced long ago), nor does a reader behind the writer's.
    fn uses_a_completed_fence_or_read_covers_need_no_wait(runtime: &Runtime) {
        let (r, w) = (runtime.new_stream().unwrap(), runtime.new_stream().unwrap());
        let data = w.upload(&[5u32; 1024]).unwrap();
        let out = r.empty(ElementType::Bytes, 4 * 1024).unwrap();
        r.copy(&data, &out).unwrap();
        let read = r.fence().unwrap();
        // Newer work behind a hold, and its pending fence, do not hide the
        // older completed one.
        let later = r.empty(ElementType::Bytes, 16).unwrap();
        let held = hold(&r);
        r.fill_u32(&later, 1).unwrap();
        let pending = r.fence().unwrap();
        read.wait().unwrap();

        let before = waits(runtime);
        w.fill_u32(&data, 9).unwrap();
        assert_eq!(waits(runtime) - before, 0, "the write waited for a read already finished");
        let written = w.fence().unwrap();
        if held.is_gate() {
            written.wait().unwrap();
            assert!(!pending.is_complete(), "the hold let go before the write finished");
        }
        // Nor does a reader of that write on a third stream, once the
        // write's fence completed.
        let again = runtime.new_stream().unwrap();
        let copy = again.empty(ElementType::Bytes, 4 * 1024).unwrap();
        written.wait().unwrap();
        let before = waits(runtime);
        again.copy(&data, &copy).unwrap();
        assert_eq!(waits(runtime) - before, 0, "the read waited for a write already finished");
        held.release();
        assert_eq!(again.read_as::<u32>(&copy).unwrap(), vec![9; 1024]);
        assert_eq!(r.read_as::<u32>(&out).unwrap(), vec![5; 1024]);

        // A fence dropped once complete teaches as well: the scheduler
        // keeps what it needs of it.
        let more = again.upload(&[6u32; 16]).unwrap();
        let read_back = r.empty(ElementType::Bytes, 64).unwrap();
        r.copy(&more, &read_back).unwrap();
        let read_more = r.fence().unwrap();
        read_more.wait().unwrap();
        drop(read_more);
        let held = hold(&r);
        r.fill_u32(&later, 2).unwrap();
        let before = waits(runtime);
        again.fill_u32(&more, 7).unwrap();
        assert_eq!(waits(runtime) - before, 0, "the write waited for a read whose dropped fence completed");
        held.release();
        assert_eq!(again.read_as::<u32>(&more).unwrap(), vec![7; 16]);
        assert_eq!(r.read_as::<u32>(&read_back).unwrap(), vec![6; 16]);

        // A read's delivery teaches as a fence does: the stream ran in order.
        let pending_read = r.enqueue_read(&more).unwrap();
        assert_eq!(bytemuck::cast_slice::<u8, u32>(&pending_read.wait().unwrap()), &[7u32; 16][..]);
        let held = hold(&r);
        r.fill_u32(&later, 3).unwrap();
        let before = waits(runtime);
        again.fill_u32(&more, 8).unwrap();
        assert_eq!(waits(runtime) - before, 0, "the write waited for a read already delivered");
        held.release();
        assert_eq!(again.read_as::<u32>(&more).unwrap(), vec![8; 16]);
        pending.wait().unwrap();
    }
}
