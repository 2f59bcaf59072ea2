//! Batches (many ops, one crossing of the ordering boundary) and recorded
//! graphs (ops recorded once, each replay admitted as one op).

use weir_core::{ElementType, Error, Runtime};

use crate::common::settled_diagnostics;

fn floats(runtime: &Runtime, buffer: &weir_core::Buffer) -> Vec<f32> {
    runtime.new_stream().unwrap().read_as::<f32>(buffer).unwrap()
}

conformance! {
    fn a_batch_admits_its_ops_in_order_as_one_by_one_would(runtime: &Runtime) {
        let s = runtime.default_stream();
        let (x, y) = (s.zeros(ElementType::Bytes, 16).unwrap(), s.upload(&[1.0f32, 2.0, 3.0, 4.0]).unwrap());
        let before = runtime.diagnostics().admitted_ops;
        s.batch(|b| {
            b.fill_f32(&x, 2.0)?;
            b.axpy(3.0, &x, &y)?;
            b.scale(&y, 0.5, &x)
        })
        .unwrap();
        assert_eq!(runtime.diagnostics().admitted_ops - before, 3, "each op of the batch is its own op");
        assert_eq!(floats(runtime, &y), vec![7.0, 8.0, 9.0, 10.0]);
        assert_eq!(floats(runtime, &x), vec![3.5, 4.0, 4.5, 5.0]);
    }

    fn a_batch_whose_recording_fails_admits_nothing(runtime: &Runtime) {
        let s = runtime.default_stream();
        let x = s.upload(&[1.0f32; 4]).unwrap();
        let small = s.zeros(ElementType::Bytes, 8).unwrap();
        let before = runtime.diagnostics().admitted_ops;
        let refused = s.batch(|b| {
            b.fill_f32(&x, 9.0)?;
            b.copy(&x, &small) // sizes differ: refused as it is recorded
        });
        assert!(matches!(refused, Err(Error::InvalidArgument(_))), "{refused:?}");
        assert_eq!(runtime.diagnostics().admitted_ops, before);
        assert_eq!(floats(runtime, &x), vec![1.0; 4], "the fill before the refused op did not run");
    }

    fn a_batch_using_a_buffer_its_recording_dropped_is_refused_whole(runtime: &Runtime) {
        let s = runtime.default_stream();
        let (out, other) = (s.upload(&[5u32; 4]).unwrap(), s.upload(&[0u32; 4]).unwrap());
        let refused = s.batch(|b| {
            b.fill_u32(&other, 3)?;
            let scratch = s.zeros(ElementType::U32, 4)?;
            b.fill_u32(&scratch, 9)?;
            b.copy(&scratch, &out)
            // `scratch` is dropped here, before the batch is admitted.
        });
        assert!(matches!(&refused, Err(Error::InvalidArgument(message)) if message.contains("dropped")), "{refused:?}");
        // Nothing of it was admitted: not the fill before the dropped buffer's ops either.
        let t = runtime.new_stream().unwrap();
        assert_eq!((t.read_as::<u32>(&other).unwrap(), t.read_as::<u32>(&out).unwrap()), (vec![0; 4], vec![5; 4]));
    }

    fn inside_a_batch_the_stream_only_collects_ops(runtime: &Runtime) {
        let s = runtime.default_stream();
        let x = s.zeros(ElementType::Bytes, 16).unwrap();
        let outcome = s.batch(|b| {
            for refused in [b.zeros(ElementType::Bytes, 4).map(drop), b.fence().map(drop), b.read(&x).map(drop), b.record(|_| Ok(())).map(drop)] {
                assert!(matches!(refused, Err(Error::InvalidArgument(_))), "{refused:?}");
            }
            assert!(!b.is_synced());
            b.fill_u32(&x, 5)
        });
        outcome.unwrap();
        // A collecting stream kept past its batch refuses ops instead of losing them.
        let mut kept = None;
        s.batch(|b| {
            kept = Some(b.clone());
            Ok(())
        })
        .unwrap();
        let late = kept.map(|b| b.fill_u32(&x, 6));
        assert!(matches!(late, Some(Err(Error::InvalidArgument(_)))), "{late:?}");
        assert_eq!(runtime.default_stream().read_as::<u32>(&x).unwrap(), vec![5; 4]);
    }

    fn replays_run_the_recorded_ops_each_time_as_one_op(runtime: &Runtime) {
        let (s, t) = (runtime.default_stream(), runtime.new_stream().unwrap());
        let x = s.upload(&[1.0f32, 2.0, 3.0, 4.0]).unwrap();
        let y = s.zeros(ElementType::Bytes, 16).unwrap();
        // y = 2x + y, then x = x + y: each replay feeds the next.
        let graph = s.record(|r| {
            r.axpy(2.0, &x, &y)?;
            r.add(&x, &y, &x)
        });
        assert!(graph.is_err(), "an op reading and writing one buffer is refused as it is recorded");
        let z = s.zeros(ElementType::Bytes, 16).unwrap();
        let graph = s
            .record(|r| {
                r.axpy(2.0, &x, &y)?;
                r.add(&x, &y, &z)
            })
            .unwrap();
        assert_eq!(graph.len(), 2);
        assert_eq!(floats(runtime, &y), vec![0.0; 4], "recording runs nothing");
        let (mut model_y, model_x) = (vec![0.0f32; 4], [1.0f32, 2.0, 3.0, 4.0]);
        let before = runtime.diagnostics().admitted_ops;
        for round in 0..3 {
            // Replays alternate streams: each is ordered after the one before.
            let stream = if round % 2 == 0 { &s } else { &t };
            stream.replay(&graph).unwrap();
            for i in 0..4 {
                model_y[i] += 2.0 * model_x[i];
            }
        }
        assert_eq!(runtime.diagnostics().admitted_ops - before, 3, "one op per replay");
        let model_z: Vec<f32> = (0..4).map(|i| model_x[i] + model_y[i]).collect();
        assert_eq!(floats(runtime, &y), model_y);
        assert_eq!(floats(runtime, &z), model_z);
    }

    fn a_graph_keeps_its_buffers_and_rebinds_to_others(runtime: &Runtime) {
        let s = runtime.default_stream();
        let baseline = settled_diagnostics(runtime).live_buffers;
        let x = s.upload(&[1.0f32; 4]).unwrap();
        let y = s.zeros(ElementType::Bytes, 16).unwrap();
        let graph = s.record(|r| r.scale(&x, 3.0, &y)).unwrap();
        drop(x);
        // The graph still names x: the replay reads it.
        s.replay(&graph).unwrap();
        assert_eq!(floats(runtime, &y), vec![3.0; 4]);
        s.fill_f32(&y, 0.0).unwrap();
        let b = s.zeros(ElementType::Bytes, 16).unwrap();
        let rebound = graph.rebind(&[(&y, &b)]).unwrap();
        s.replay(&rebound).unwrap();
        assert_eq!(floats(runtime, &b), vec![3.0; 4], "the rebound graph writes b from the recorded input");
        assert_eq!(floats(runtime, &y), vec![0.0; 4], "and leaves y alone");
        let small = s.zeros(ElementType::Bytes, 8).unwrap();
        assert!(matches!(graph.rebind(&[(&y, &small)]), Err(Error::InvalidArgument(_))), "sizes must match");
        let (a, c) = (s.upload(&[1.0f32; 4]).unwrap(), s.zeros(ElementType::Bytes, 16).unwrap());
        let copy = s.record(|r| r.scale(&a, 2.0, &c)).unwrap();
        assert!(matches!(copy.rebind(&[(&c, &a)]), Err(Error::InvalidArgument(_))), "rebinding made an op alias");
        // Disjoint views of one buffer stay disjoint when it is rebound (256-byte
        // halves, which every wgpu device binds).
        let (halves, other) = (s.upload(&[1.0f32; 128]).unwrap(), s.upload(&[2.0f32; 128]).unwrap());
        let doubled = s.record(|r| r.scale(&halves.view(0, 64)?, 2.0, &halves.view(64, 64)?)).unwrap();
        s.replay(&doubled.rebind(&[(&halves, &other)]).unwrap()).unwrap();
        let expected: Vec<f32> = [vec![2.0; 64], vec![4.0; 64]].concat();
        assert_eq!(s.read_as::<f32>(&other).unwrap(), expected, "the rebound graph scaled other's front into its back");
        assert_eq!(s.read_as::<f32>(&halves).unwrap(), vec![1.0; 128]);
        drop((graph, rebound, copy, doubled, y, a, b, c, small, halves, other));
        assert_eq!(settled_diagnostics(runtime).live_buffers, baseline, "the graphs' buffers went with them");
    }

    fn a_rebind_refuses_what_the_op_admitted_directly_refuses(runtime: &Runtime) {
        let s = runtime.default_stream();
        let invalid = |result: Result<weir_core::Graph, Error>, what: &str| {
            assert!(matches!(result, Err(Error::InvalidArgument(_))), "{what}: {result:?}");
        };
        let (x, y) = (s.upload(&[1.0f32; 4]).unwrap(), s.upload(&[2.0f32; 4]).unwrap());
        let (words, ints) = (s.upload(&[7u32; 4]).unwrap(), s.upload(&[5i32; 4]).unwrap());
        // Types: f32 math over a u32 or an i32 buffer, a copy across types,
        // f32s written into u32s: each refused admitted directly, and rebound.
        assert!(matches!(s.scale(&x, 3.0, &words), Err(Error::InvalidArgument(_))));
        let scaled = s.record(|r| r.scale(&x, 3.0, &y)).unwrap();
        invalid(scaled.rebind(&[(&y, &words)]), "f32 math written into a u32 buffer");
        assert!(matches!(s.axpy(2.0, &ints, &y), Err(Error::InvalidArgument(_))));
        let axpy = s.record(|r| r.axpy(2.0, &x, &y)).unwrap();
        invalid(axpy.rebind(&[(&x, &ints)]), "f32 math reading an i32 buffer");
        assert!(matches!(s.copy(&x, &words), Err(Error::InvalidArgument(_))));
        let copy = s.record(|r| r.copy(&x, &y)).unwrap();
        invalid(copy.rebind(&[(&y, &words)]), "a copy across types");
        assert!(matches!(s.write(&words, 0, &[1.0f32; 4]), Err(Error::InvalidArgument(_))));
        let write = s.record(|r| r.write(&y, 0, &[1.0f32; 4])).unwrap();
        invalid(write.rebind(&[(&y, &words)]), "f32s written into a u32 buffer");
        // Views: bytes 2..6 of a raw buffer are no view of a buffer of f32s.
        let raw = s.zeros(ElementType::Bytes, 16).unwrap();
        let zero_part = s.record(|r| r.memset_zero(&raw.view(2, 4)?)).unwrap();
        invalid(zero_part.rebind(&[(&raw, &y)]), "a view across f32 elements");
        // Runtimes: a buffer of another runtime is no argument here.
        let other = Runtime::open(runtime.info().backend).unwrap();
        let foreign = other.default_stream().upload(&[0.0f32; 4]).unwrap();
        let refused = scaled.rebind(&[(&y, &foreign)]);
        assert!(matches!(refused, Err(Error::ForeignHandle(_))), "{refused:?}");
        // What the ops take is rebound as before: raw bytes go with any op.
        let (bytes, zeros) = (s.upload(&[4.0f32; 4]).unwrap(), s.zeros(ElementType::Bytes, 16).unwrap());
        s.replay(&axpy.rebind(&[(&x, &bytes), (&y, &zeros)]).unwrap()).unwrap();
        assert_eq!(floats(runtime, &zeros), vec![8.0; 4]);
        s.replay(&write.rebind(&[(&y, &zeros)]).unwrap()).unwrap();
        assert_eq!(floats(runtime, &zeros), vec![1.0; 4]);
        s.replay(&zero_part.rebind(&[(&raw, &zeros)]).unwrap()).unwrap();
        let mut expected = 1.0f32.to_le_bytes().repeat(4);
        expected[2..6].fill(0);
        assert_eq!(s.read(&zeros).unwrap(), expected, "the view's bytes of the raw buffer rebound to");
        assert_eq!(floats(runtime, &y), vec![2.0; 4], "no refused rebind ran anything");
        assert_eq!(s.read_as::<u32>(&words).unwrap(), vec![7; 4]);
        other.close().unwrap();
    }

    fn a_replay_that_reads_a_failed_version_fails_whole_and_an_overwrite_heals(runtime: &Runtime) {
        let (s, t) = (runtime.default_stream(), runtime.new_stream().unwrap());
        let x = s.upload(&[1.0f32; 4]).unwrap();
        let (y, z) = (s.zeros(ElementType::Bytes, 16).unwrap(), s.zeros(ElementType::Bytes, 16).unwrap());
        let graph = s
            .record(|r| {
                r.scale(&x, 2.0, &y)?;
                r.fill_f32(&z, 1.0)
            })
            .unwrap();
        // The graph's first op overwrites x whole before anything reads it:
        // a failed x is no input to this one.
        let healing = s
            .record(|r| {
                r.fill_f32(&x, 4.0)?;
                r.scale(&x, 2.0, &y)
            })
            .unwrap();
        assert!(matches!(s.fail_write(&x, "x broke"), Err(Error::OpFailed { .. })));
        let replayed = t.replay(&graph);
        assert!(matches!(&replayed, Err(Error::OpFailed { message, .. }) if message.contains("x broke")), "{replayed:?}");
        for written in [&y, &z] {
            match t.read(written) {
                Err(Error::OpFailed { message, .. }) => assert!(message.contains("x broke"), "{message}"),
                other => panic!("a buffer the failed replay writes must fail its readers, got {other:?}"),
            }
        }
        t.replay(&healing).unwrap();
        assert_eq!(floats(runtime, &y), vec![8.0; 4]);
        t.replay(&graph).unwrap();
        assert_eq!(floats(runtime, &z), vec![1.0; 4]);
        assert_eq!(floats(runtime, &y), vec![8.0; 4]);
    }
}
