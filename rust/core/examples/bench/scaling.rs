//! How admission cost grows with the work, on any backend: µs per admitted
//! op with more live buffers, and with more streams in a cross-stream chain.
//! Each figure is beside the smallest case of its series in the same run.
//!
//! The chain is also timed to its end (admitted and run): admission alone
//! rewards a backend that runs nothing until the producer stops, while on a
//! host with few cores one that runs the chain as it comes shares them with
//! the producer and admits more slowly, yet finishes far sooner.

use std::time::Instant;

use weir_core::{BackendKind, ElementType, Runtime};

use crate::report::{micros, Figure, Report};

const OPS: u32 = 20_000;
/// Rounds of `OPS` fills per live-buffer count: the figure is their median,
/// as one round's time moves with what else the host runs.
const ROUNDS: usize = 5;

/// µs per op of `OPS` admissions, and µs per op until they all ran (the
/// runtime's fence after the last one has resolved).
fn per_op(runtime: &Runtime, admit: impl Fn(u32)) -> (f64, f64) {
    runtime.fence().unwrap().wait().unwrap();
    let start = Instant::now();
    for i in 0..OPS {
        admit(i);
    }
    let admitted = start.elapsed();
    runtime.fence().unwrap().wait().unwrap();
    let ran = start.elapsed();
    (micros(admitted) / f64::from(OPS), micros(ran) / f64::from(OPS))
}

pub fn run(report: &mut Report, kind: BackendKind) {
    let Ok(runtime) = Runtime::open(kind) else {
        eprintln!("{}: scaling skipped: unavailable", kind.name());
        return;
    };
    let name = kind.name();
    let s = runtime.default_stream();
    let target = s.zeros(ElementType::Bytes, 256).unwrap();

    // wgpu's bench measures this beside raw wgpu with the same live buffers
    // (its cost follows the most buffers ever alive, so that runs last there).
    let live_counts: &[usize] = if kind == BackendKind::Wgpu { &[] } else { &[10, 1_000, 100_000] };
    let mut smallest = None;
    for &live in live_counts {
        let others: Vec<_> = (0..live).map(|_| s.empty(ElementType::Bytes, 4).unwrap()).collect();
        let mut costs: Vec<f64> =
            (0..ROUNDS).map(|_| per_op(&runtime, |i| s.fill_u32(&target, i).unwrap()).0).collect();
        drop(others);
        costs.sort_by(f64::total_cmp);
        let cost = costs[ROUNDS / 2];
        let base = *smallest.get_or_insert(cost);
        report.add(
            Figure::beside(
                name,
                &format!("admission, {live} live buffers"),
                "us/op",
                cost,
                base,
                false,
                &format!(
                    "median of {ROUNDS} rounds of {OPS} fills of one buffer (rounds {:.3}-{:.3} us/op); \
                     baseline: the same with 10 live buffers",
                    costs[0],
                    costs[ROUNDS - 1]
                ),
            )
            .against_itself(),
        );
    }

    let (mut smallest, mut smallest_run) = (None, None);
    for streams in [1usize, 8, 64, 256] {
        let all: Vec<_> =
            (0..streams).map(|i| if i == 0 { s.clone() } else { runtime.new_stream().unwrap() }).collect();
        let (a, b) = (s.zeros(ElementType::Bytes, 256).unwrap(), s.zeros(ElementType::Bytes, 256).unwrap());
        let waits = runtime.diagnostics().inserted_waits;
        // Op i on stream i % streams reads what op i - 1 wrote: every op
        // after the first waits for the stream before it.
        let (cost, ran) = per_op(&runtime, |i| {
            let (from, to) = if i % 2 == 0 { (&a, &b) } else { (&b, &a) };
            all[i as usize % streams].copy(from, to).unwrap();
        });
        let inserted = runtime.diagnostics().inserted_waits - waits;
        let base = *smallest.get_or_insert(cost);
        report.add(
            Figure::beside(
                name,
                &format!("admission, chain over {streams} streams"),
                "us/op",
                cost,
                base,
                false,
                &format!(
                "{OPS} copies, each reading the previous one's output; {inserted} waits inserted; baseline: 1 stream"
            ),
            )
            .against_itself(),
        );
        let base = *smallest_run.get_or_insert(ran);
        report.add(
            Figure::beside(
                name,
                &format!("chain over {streams} streams, admitted and run"),
                "us/op",
                ran,
                base,
                false,
                &format!("the same {OPS} copies, timed until the fence after them resolved; baseline: 1 stream"),
            )
            .against_itself(),
        );
    }
}
