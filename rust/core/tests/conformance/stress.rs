//! Randomised stress: threads submit random ops on random streams over a pool
//! of buffers, with random gate pauses and random failing ops, and every read
//! and the final contents must equal a sequential reference model — which
//! also predicts which reads fail (they read what a failed op wrote). Seeded and reproducible:
//! `WEIR_STRESS_SEED` picks the seed, `WEIR_STRESS_OPS` the ops per thread.

use std::sync::Mutex;

use weir_core::{Buffer, Hold, PendingRead, Runtime, Stream};

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

/// A buffer as the model knows it: its words, or failed (a failed op wrote
/// it, or wrote something it was made from).
#[derive(Debug, Clone, PartialEq)]
enum Value {
    Words(Vec<f32>),
    Failed,
}

/// The host model of every buffer, in admission order. Its lock also makes
/// "admit the op" and "apply it to the model" one step, so the model's order
/// is the admission order.
struct Model(Vec<Value>);

impl Model {
    fn words(&self, i: usize) -> Option<&Vec<f32>> {
        match &self.0[i] {
            Value::Words(words) => Some(words),
            Value::Failed => None,
        }
    }

    /// Sets `out` to `f` of the inputs' words, or failed if one of them is.
    fn apply(&mut self, out: usize, inputs: &[usize], f: impl FnOnce(&[&Vec<f32>]) -> Vec<f32>) {
        let words: Option<Vec<&Vec<f32>>> = inputs.iter().map(|&i| self.words(i)).collect();
        self.0[out] = match words {
            Some(words) => Value::Words(f(&words)),
            None => Value::Failed,
        };
    }

    /// Checks how admission answered an op over `inputs`: an op whose inputs
    /// are healthy is admitted; one that reads a failure may be refused now
    /// (known at admission) or fail later.
    fn check_admitted(&self, inputs: &[usize], admitted: weir_core::Result<()>) {
        let healthy = inputs.iter().all(|&i| self.words(i).is_some());
        match admitted {
            Ok(()) => {}
            Err(weir_core::Error::OpFailed { .. }) if !healthy => {}
            Err(other) => panic!("an op over healthy buffers {inputs:?} was refused: {other}"),
        }
    }
}

/// A kernel that writes its one buffer argument and fails, where the backend
/// can express one (a CPU closure that returns an error; a CUDA/HIP launch
/// past the kernel's bounds).
fn failing_kernel() -> weir_core::Kernel {
    const BOUNDED: &str = "extern \"C\" __global__ void __launch_bounds__(32) \
        fails(float* out) { out[threadIdx.x] = 1.0f; }";
    weir_core::Kernel::custom("fails")
        .cpu(|_| Err("a failure the model expects".into()))
        .cuda(BOUNDED, "fails")
        .hip(BOUNDED, "fails")
        .build()
}

fn two_distinct(rng: &mut Rng) -> (usize, usize) {
    let a = rng.below(BUFFERS);
    let b = (a + 1 + rng.below(BUFFERS - 1)) % BUFFERS;
    (a, b)
}

/// A read and what the model says it must give.
type Checked = (weir_core::Result<PendingRead>, Value);

fn random_op(
    rng: &mut Rng,
    stream: &Stream,
    buffers: &[Buffer],
    m: &mut Model,
    reads: &mut Vec<Checked>,
    holds: &mut Vec<Hold>,
) {
    match rng.below(12) {
        0 => {
            let (i, v) = (rng.below(BUFFERS), rng.below(17) as f32 - 8.0);
            m.check_admitted(&[], stream.fill_f32(&buffers[i], v));
            m.apply(i, &[], |_| vec![v; WORDS]);
        }
        1 => {
            let (src, dst) = two_distinct(rng);
            m.check_admitted(&[src], stream.copy(&buffers[src], &buffers[dst]));
            m.apply(dst, &[src], |w| w[0].clone());
        }
        2 | 3 => {
            let (a, out) = two_distinct(rng);
            let b = if rng.below(2) == 0 { a } else { (out + 1 + rng.below(BUFFERS - 1)) % BUFFERS };
            let b = if b == out { a } else { b };
            let add = rng.below(2) == 0;
            let admitted = if add {
                stream.add(&buffers[a], &buffers[b], &buffers[out])
            } else {
                stream.mul(&buffers[a], &buffers[b], &buffers[out])
            };
            m.check_admitted(&[a, b], admitted);
            m.apply(out, &[a, b], |w| w[0].iter().zip(w[1]).map(|(x, y)| if add { x + y } else { x * y }).collect());
        }
        4 => {
            let (x, out) = two_distinct(rng);
            let alpha = [-1.0f32, 2.0][rng.below(2)];
            m.check_admitted(&[x], stream.scale(&buffers[x], alpha, &buffers[out]));
            m.apply(out, &[x], |w| w[0].iter().map(|v| alpha * v).collect());
        }
        5 => {
            let (x, y) = two_distinct(rng);
            // Products exact at any magnitude: a device may fuse `y + alpha·x`
            // into one rounding (Vulkan and CUDA do), which with alpha 2 gave
            // a finite sum where the model's 2·x overflowed to infinity.
            let alpha = [1.0f32, -1.0][rng.below(2)];
            m.check_admitted(&[x, y], stream.axpy(alpha, &buffers[x], &buffers[y]));
            m.apply(y, &[x, y], |w| w[1].iter().zip(w[0]).map(|(yv, xv)| yv + alpha * xv).collect());
        }
        6 => {
            let i = rng.below(BUFFERS);
            m.check_admitted(&[], stream.memset_zero(&buffers[i]));
            m.apply(i, &[], |_| vec![0.0; WORDS]);
        }
        7 => {
            let i = rng.below(BUFFERS);
            let start = rng.below(WORDS);
            let len = 1 + rng.below(WORDS - start);
            let data: Vec<f32> = (0..len).map(|_| rng.below(9) as f32).collect();
            // A write of part of the buffer keeps the rest: it reads what it leaves in place.
            let whole = len == WORDS;
            let inputs: &[usize] = if whole { &[] } else { &[i] };
            m.check_admitted(inputs, stream.write(&buffers[i], start as u64, &data));
            m.apply(i, inputs, |w| {
                let mut words = w.first().map_or_else(|| vec![0.0; WORDS], |old| (*old).clone());
                words[start..start + len].copy_from_slice(&data);
                words
            });
        }
        8 | 9 => {
            let i = rng.below(BUFFERS);
            reads.push((stream.enqueue_read(&buffers[i]), m.0[i].clone()));
        }
        10 => {
            let i = rng.below(BUFFERS);
            match stream.execute(
                &failing_kernel(),
                weir_core::Grid::linear(WORDS as u32, 64),
                &[weir_core::Arg::write(&buffers[i])],
            ) {
                // Refused as bad input, or no way to fail on this backend: nothing happened.
                Err(weir_core::Error::Unsupported { .. } | weir_core::Error::InvalidArgument(_)) => {}
                // Failed now, or admitted to fail as it runs.
                Ok(()) | Err(weir_core::Error::OpFailed { .. }) => m.0[i] = Value::Failed,
                Err(other) => panic!("the failing kernel: {other}"),
            }
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
    let model = Mutex::new(Model((0..BUFFERS).map(|i| Value::Words(vec![i as f32; WORDS])).collect()));
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
    // The fence reports the failures it covers; the reads say which.
    let _ = runtime.fence().unwrap().wait();
    let mismatch = |what: String, got: weir_core::Result<Vec<u8>>, expected: &Value| -> Option<String> {
        match (got, expected) {
            (Ok(bytes), Value::Words(want)) => {
                let got: Vec<f32> = bytemuck::pod_collect_to_vec(&bytes);
                (!same(&got, want)).then(|| format!("{what}: got {got:?}, want {want:?}"))
            }
            (Err(weir_core::Error::OpFailed { .. }), Value::Failed) => None,
            (got, want) => Some(format!("{what}: got {got:?}, the model says {want:?}")),
        }
    };
    let mut mismatches = Vec::new();
    for (index, (pending, expected)) in reads.into_iter().enumerate() {
        mismatches.extend(mismatch(format!("read #{index}"), pending.and_then(PendingRead::wait), &expected));
    }
    let model = model.into_inner().unwrap();
    for (i, buffer) in buffers.iter().enumerate() {
        mismatches.extend(mismatch(format!("buffer {i}"), init.read(buffer), &model.0[i]));
    }
    assert!(
        mismatches.is_empty(),
        "seed {seed}: {} mismatches with the model, first: {}",
        mismatches.len(),
        mismatches[0]
    );
    assert_eq!(runtime.diagnostics().backend.race_violations, 0, "seed {seed}: the race detector fired");
}

conformance! {
    fn random_ops_match_a_sequential_model(runtime: &Runtime) {
        let seed = env_or("WEIR_STRESS_SEED", 0x5EED_2026);
        // 10^5 ops in all, on every backend (lavapipe on 2 cores: some 40 s).
        let ops = env_or("WEIR_STRESS_OPS", 25_000);
        stress(runtime, seed, ops);
        eprintln!(
            "  {} ops over {STREAMS} streams from {THREADS} threads matched the model (seed {seed:#x})",
            ops * THREADS as u64
        );
    }
}
