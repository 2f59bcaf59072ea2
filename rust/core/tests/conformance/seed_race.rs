//! The race of the seed bug report, deterministic, two threads, two streams.
//!
//! Thread A allocates an output on stream S. Before A's producer is admitted,
//! thread B admits an op on stream T that reads an unrelated buffer last
//! written on S, so T has synchronised with S past the output's allocation.
//! A then admits the producer, held back on S; B reads the output on T.
//! B must see the produced value: the producer's write was published at its
//! own position, which T has not seen yet.

use std::sync::mpsc::channel;
use std::time::{Duration, Instant};

use weir_core::{BackendKind, Buffer, ElementType, Fault, Runtime};

use crate::common::{hold, raw_fill, words, Held};

const WORDS: usize = 1024;

#[derive(Debug, Clone, Copy)]
enum Producer {
    Kernel,
    MemsetZero,
    ExternalWrite,
    /// A fill admitted in a batch.
    Batch,
    /// A recorded graph's replay that fills.
    Replay,
}

impl Producer {
    fn expected(self) -> Vec<u32> {
        match self {
            Producer::Kernel | Producer::Batch | Producer::Replay => vec![7; WORDS],
            Producer::MemsetZero => vec![0; WORDS],
            Producer::ExternalWrite => vec![0x0707_0707; WORDS],
        }
    }
}

/// Runs the scenario and returns what T read.
fn run_scenario(runtime: &Runtime, producer: Producer) -> Vec<u32> {
    let (s, t) = (runtime.new_stream().unwrap(), runtime.new_stream().unwrap());
    // A first op on S, so that the unrelated buffer is defined past S's start
    // (in the seed, cursors are positions and position 0 needs no wait).
    let _warm_up = s.zeros(ElementType::Bytes, 4).unwrap();
    let unrelated = s.upload(&[1u32; 16]).unwrap();

    let (a_to_b, b_from_a) = channel::<Option<(Buffer, Held)>>();
    let (b_to_a, a_from_b) = channel::<()>();
    let (s, t, unrelated) = (&s, &t, &unrelated);
    std::thread::scope(|scope| {
        scope.spawn(move || {
            // A first version, written before the hold, is what a broken
            // scheduler shows: never the producer's result (memset_zero must
            // overwrite something that is not zero). An empty buffer would
            // not do: its memory may hold an earlier buffer's result.
            let stale = match producer {
                Producer::MemsetZero => 0xFFFF_FFFFu32,
                _ => 0,
            };
            let out = s.upload(&vec![stale; WORDS]).unwrap();
            // Recording admits nothing: only the replay below writes.
            let graph = s.record(|r| r.fill_u32(&out, 7)).unwrap();
            a_to_b.send(None).unwrap();
            a_from_b.recv().unwrap();
            let held = hold(s);
            match producer {
                Producer::Kernel => s.fill_u32(&out, 7).unwrap(),
                Producer::MemsetZero => s.memset_zero(&out).unwrap(),
                Producer::ExternalWrite => s.external_write(&[&out], |raw| raw_fill(raw, 7)).unwrap(),
                Producer::Batch => s.batch(|b| b.fill_u32(&out, 7)).unwrap(),
                Producer::Replay => s.replay(&graph).unwrap(),
            }
            a_to_b.send(Some((out, held))).unwrap();
        });
        let b = scope.spawn(move || {
            assert!(b_from_a.recv().unwrap().is_none());
            let copy = t.empty(ElementType::Bytes, 64).unwrap();
            t.copy(unrelated, &copy).unwrap();
            b_to_a.send(()).unwrap();
            let (out, held) = b_from_a.recv().unwrap().unwrap();
            let pending = t.enqueue_read(&out).unwrap();
            if held.is_gate() {
                // A correct scheduler keeps the read behind the gate; a broken one lets
                // it run now. Give it the chance, so the broken case is caught reliably.
                let deadline = Instant::now() + Duration::from_millis(300);
                while !pending.is_complete() && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            held.release();
            words(&pending.wait().unwrap())
        });
        b.join().unwrap()
    })
}

fn check(runtime: &Runtime, producer: Producer) {
    let seen = run_scenario(runtime, producer);
    assert_eq!(seen, producer.expected(), "{producer:?}: T read a stale output");
}

conformance! {
    fn seed_race_reader_waits_for_kernel_producer(runtime: &Runtime) {
        check(runtime, Producer::Kernel);
    }

    fn seed_race_reader_waits_for_memset_zero(runtime: &Runtime) {
        check(runtime, Producer::MemsetZero);
    }

    fn seed_race_reader_waits_for_external_write(runtime: &Runtime) {
        check(runtime, Producer::ExternalWrite);
    }

    fn seed_race_reader_waits_for_a_batch(runtime: &Runtime) {
        check(runtime, Producer::Batch);
    }

    fn seed_race_reader_waits_for_a_replay(runtime: &Runtime) {
        check(runtime, Producer::Replay);
    }
}

/// The same scenario against a scheduler with the seed's bug (versions keyed
/// on the allocation position, writes unpublished): T must read stale data.
/// This proves the tests above would fail on that bug.
#[test]
fn seed_race_is_caught_when_versions_key_on_allocation() {
    for kind in BackendKind::CONCRETE {
        let Ok(runtime) = Runtime::builder(kind).fault(Fault::KeyVersionsAtAllocation).open() else { continue };
        // Only a gate holds the producer back deterministically.
        if runtime.default_stream().hold().is_err() {
            runtime.close().unwrap();
            continue;
        }
        for producer in
            [Producer::Kernel, Producer::MemsetZero, Producer::ExternalWrite, Producer::Batch, Producer::Replay]
        {
            let seen = run_scenario(&runtime, producer);
            assert_ne!(seen, producer.expected(), "{}: {producer:?}: the faulty scheduler went unnoticed", kind.name());
        }
        runtime.close().unwrap();
    }
}
