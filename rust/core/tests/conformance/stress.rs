//! Randomised stress: threads submit random ops on random streams over a pool
//! of buffers, with random gate pauses, and every read and the final contents
//! must equal a sequential reference model. Seeded and reproducible:
//! `WEIR_STRESS_SEED` picks the seed, `WEIR_STRESS_OPS` the ops per thread.

use std::sync::Mutex;

use weir_core::{BackendKind, Buffer, Hold, PendingRead, Runtime, Stream};

use crate::common::Rng;

const THREADS: usize = 4;
const STREAMS: usize = 4;
const BUFFERS: usize = 8;
const WORDS: usize = 64;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Equal as device results: same bits, or both NaN.
fn same(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()))
}

/// The host model of every buffer, in admission order. Its lock also makes
/// "admit the op" and "apply it to the model" one step, so the model's order
/// is the admission order.
struct Model(Vec<Vec<f32>>);

fn two_distinct(rng: &mut Rng) -> (usize, usize) {
    let a = rng.below(BUFFERS);
    let b = (a + 1 + rng.below(BUFFERS - 1)) % BUFFERS;
    (a, b)
}

fn random_op(
    rng: &mut Rng,
    stream: &Stream,
    buffers: &[Buffer],
    m: &mut Model,
    reads: &mut Vec<(PendingRead, Vec<f32>)>,
    holds: &mut Vec<Hold>,
) {
    let m = &mut m.0;
    match rng.below(11) {
        0 => {
            let (i, v) = (rng.below(BUFFERS), rng.below(17) as f32 - 8.0);
            stream.fill_f32(&buffers[i], v).unwrap();
            m[i].fill(v);
        }
        1 => {
            let (src, dst) = two_distinct(rng);
            stream.copy(&buffers[src], &buffers[dst]).unwrap();
            m[dst] = m[src].clone();
        }
        2 | 3 => {
            let (a, out) = two_distinct(rng);
            let b = if rng.below(2) == 0 { a } else { (out + 1 + rng.below(BUFFERS - 1)) % BUFFERS };
            let b = if b == out { a } else { b };
            let add = rng.below(2) == 0;
            if add {
                stream.add(&buffers[a], &buffers[b], &buffers[out]).unwrap();
            } else {
                stream.mul(&buffers[a], &buffers[b], &buffers[out]).unwrap();
            }
            m[out] = m[a].iter().zip(&m[b]).map(|(x, y)| if add { x + y } else { x * y }).collect();
        }
        4 => {
            let (x, out) = two_distinct(rng);
            let alpha = [-1.0f32, 2.0][rng.below(2)];
            stream.scale(&buffers[x], alpha, &buffers[out]).unwrap();
            m[out] = m[x].iter().map(|v| alpha * v).collect();
        }
        5 => {
            let (x, y) = two_distinct(rng);
            let alpha = [1.0f32, -1.0, 2.0][rng.below(3)];
            stream.axpy(alpha, &buffers[x], &buffers[y]).unwrap();
            let xs = m[x].clone();
            m[y].iter_mut().zip(&xs).for_each(|(yv, xv)| *yv += alpha * xv);
        }
        6 => {
            let i = rng.below(BUFFERS);
            stream.memset_zero(&buffers[i]).unwrap();
            m[i].fill(0.0);
        }
        7 => {
            let i = rng.below(BUFFERS);
            let start = rng.below(WORDS);
            let len = 1 + rng.below(WORDS - start);
            let data: Vec<f32> = (0..len).map(|_| rng.below(9) as f32).collect();
            stream.write(&buffers[i], (start * 4) as u64, &data).unwrap();
            m[i][start..start + len].copy_from_slice(&data);
        }
        8 | 9 => {
            let i = rng.below(BUFFERS);
            reads.push((stream.enqueue_read(&buffers[i]).unwrap(), m[i].clone()));
        }
        _ => match stream.hold() {
            Ok(hold) => holds.push(hold),
            Err(weir_core::Error::Unsupported { .. }) => {}
            Err(other) => panic!("hold: {other}"),
        },
    }
}

fn stress(runtime: &Runtime, seed: u64, ops_per_thread: u64) {
    let streams: Vec<Stream> = (0..STREAMS).map(|_| runtime.new_stream().unwrap()).collect();
    let init = runtime.default_stream();
    let buffers: Vec<Buffer> = (0..BUFFERS).map(|i| init.upload(&vec![i as f32; WORDS]).unwrap()).collect();
    let model = Mutex::new(Model((0..BUFFERS).map(|i| vec![i as f32; WORDS]).collect()));
    let reads = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..THREADS)
            .map(|thread| {
                let (streams, buffers, model) = (&streams, &buffers, &model);
                scope.spawn(move || {
                    let mut rng = Rng::new(seed ^ ((thread as u64 + 1) * 0x1000_0001));
                    let (mut reads, mut holds) = (Vec::new(), Vec::new());
                    for _ in 0..ops_per_thread {
                        let stream = &streams[rng.below(STREAMS)];
                        let mut m = model.lock().unwrap();
                        random_op(&mut rng, stream, buffers, &mut m, &mut reads, &mut holds);
                        drop(m);
                        if !holds.is_empty() && rng.below(3) == 0 {
                            holds.swap_remove(rng.below(holds.len())).release();
                        }
                    }
                    drop(holds);
                    reads
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().unwrap()).collect::<Vec<_>>()
    });
    runtime.fence().unwrap().wait().unwrap();
    for (index, (pending, expected)) in reads.into_iter().enumerate() {
        let got: Vec<f32> = bytemuck::pod_collect_to_vec(&pending.wait().unwrap());
        assert!(
            same(&got, &expected),
            "seed {seed}: read #{index} differs from the model:\n got {got:?}\nwant {expected:?}"
        );
    }
    let model = model.into_inner().unwrap();
    for (i, buffer) in buffers.iter().enumerate() {
        let got = init.read_as::<f32>(buffer).unwrap();
        assert!(same(&got, &model.0[i]), "seed {seed}: buffer {i} differs from the model");
    }
    assert_eq!(runtime.diagnostics().backend.race_violations, 0, "seed {seed}: the race detector fired");
}

conformance! {
    fn random_ops_match_a_sequential_model(runtime: &Runtime) {
        let seed = env_or("WEIR_STRESS_SEED", 0x5EED_2026);
        let default_ops = if runtime.info().backend == BackendKind::Cpu { 2000 } else { 250 };
        let ops = env_or("WEIR_STRESS_OPS", default_ops);
        stress(runtime, seed, ops);
        eprintln!(
            "  {} ops over {STREAMS} streams from {THREADS} threads matched the model (seed {seed:#x})",
            ops * THREADS as u64
        );
    }
}
