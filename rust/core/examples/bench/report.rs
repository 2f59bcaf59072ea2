//! Benchmark figures: one JSON line each as they are measured, then a table.

use std::time::Duration;

/// One measured figure, beside its raw-backend baseline where there is one.
pub struct Figure {
    pub backend: String,
    pub name: String,
    pub unit: String,
    pub weir: f64,
    pub baseline: Option<f64>,
    /// True when a higher figure is better (throughput), false for latencies.
    pub higher_is_better: bool,
    pub note: String,
}

impl Figure {
    /// A figure of `backend` measured beside its raw baseline.
    pub fn beside(
        backend: &str,
        name: &str,
        unit: &str,
        weir: f64,
        baseline: f64,
        higher_is_better: bool,
        note: &str,
    ) -> Figure {
        Figure {
            backend: backend.into(),
            name: name.into(),
            unit: unit.into(),
            weir,
            baseline: Some(baseline),
            higher_is_better,
            note: note.into(),
        }
    }

    /// Weir divided by the baseline: for latencies lower is better, for
    /// throughputs higher is better (see `higher_is_better`).
    pub fn ratio(&self) -> Option<f64> {
        self.baseline.filter(|b| *b > 0.0).map(|b| self.weir / b)
    }

    /// The line [`Report::add`] prints.
    fn to_json(&self) -> String {
        format!(
            "{{\"backend\":\"{}\",\"bench\":\"{}\",\"unit\":\"{}\",\"weir\":{:.4},\"baseline\":{},\"ratio\":{},\"higher_is_better\":{},\"note\":\"{}\"}}",
            self.backend,
            self.name,
            self.unit,
            self.weir,
            self.baseline.map_or("null".to_owned(), |b| format!("{b:.4}")),
            self.ratio().map_or("null".to_owned(), |r| format!("{r:.3}")),
            self.higher_is_better,
            self.note.replace('"', "'"),
        )
    }

    /// The figure a line of [`Figure::to_json`] describes.
    fn from_json(line: &str) -> Option<Figure> {
        // The note, last, has no quotes of its own.
        let field = |key: &str| -> Option<&str> {
            let value = &line[line.find(&format!("\"{key}\":"))? + key.len() + 3..];
            match value.strip_prefix('"') {
                Some(quoted) => quoted.find('"').map(|end| &quoted[..end]),
                None => value.find([',', '}']).map(|end| &value[..end]),
            }
        };
        Some(Figure {
            backend: field("backend")?.into(),
            name: field("bench")?.into(),
            unit: field("unit")?.into(),
            weir: field("weir")?.parse().ok()?,
            baseline: field("baseline")?.parse().ok(),
            higher_is_better: field("higher_is_better")? == "true",
            note: line.split_once("\"note\":\"").map(|(_, note)| note.trim_end_matches("\"}").to_owned())?,
        })
    }
}

/// One figure of `backend`, the part `part` of this bench, measured again
/// in `processes` fresh processes, one after another, and reported as the
/// process whose ratio is the median, with every process's ratio in the
/// note.
///
/// For figures that set a Weir thread making driver calls against a raw
/// loop making them on the main thread: how fast each runs follows where
/// the OS placed those threads, for the life of the process (on a shared
/// GPU host one launch took 3.1 us on one vCPU, 4.1 on another, and one
/// build's pipeline ratio ranged from 0.95 to 1.43 between processes). Rounds
/// taken in turn within one process cannot average that out; each new
/// process draws the places again.
pub fn across_processes(backend: &str, part: &str, processes: usize) -> Figure {
    let bench = std::env::current_exe().expect("this bench's own path");
    let mut measured: Vec<Figure> = (0..processes)
        .map(|_| {
            let output = std::process::Command::new(&bench)
                .args(["--backend", backend, "--only", part, "--processes", "1"])
                .stderr(std::process::Stdio::inherit())
                .output()
                .expect("a bench process");
            assert!(output.status.success(), "a {backend} {part} process failed: {}", output.status);
            let stdout = String::from_utf8_lossy(&output.stdout);
            let mut figures = stdout.lines().filter(|line| line.starts_with('{')).filter_map(Figure::from_json);
            match (figures.next(), figures.next()) {
                (Some(figure), None) => figure,
                _ => panic!("a {backend} {part} process printed other than one figure:\n{stdout}"),
            }
        })
        .collect();
    measured.sort_by(|a, b| a.ratio().unwrap_or_default().total_cmp(&b.ratio().unwrap_or_default()));
    let ratios: Vec<String> = measured.iter().map(|f| format!("{:.3}", f.ratio().unwrap_or_default())).collect();
    let mut median = measured.swap_remove(processes / 2);
    median.note = format!(
        "the median of {processes} processes, each run afresh (their ratios: {}); in that process: {}",
        ratios.join(", "),
        median.note
    );
    median
}

#[derive(Default)]
pub struct Report {
    figures: Vec<Figure>,
}

impl Report {
    pub fn add(&mut self, figure: Figure) {
        println!("{}", figure.to_json());
        self.figures.push(figure);
    }

    pub fn print_table(&self) {
        println!();
        println!("{:<8} {:<44} {:>14} {:>14} {:>8}  note", "backend", "benchmark", "weir", "baseline", "ratio");
        for f in &self.figures {
            println!(
                "{:<8} {:<44} {:>18} {:>18} {:>8}  {}",
                f.backend,
                f.name,
                format!("{:.3} {}", f.weir, f.unit),
                f.baseline.map_or("-".to_owned(), |b| format!("{b:.3} {}", f.unit)),
                f.ratio().map_or("-".to_owned(), |r| format!("{r:.3}")),
                f.note
            );
        }
    }
}

/// Rounds of Weir and of its baseline, taken in turn, summed up so that a
/// shared host's noise moves the figure least: each side's median round is
/// the figure; each side's best round and the median of the rounds' own
/// ratios (a round's two sides run moments apart, under the same load) go
/// in its note. On these hosts one lucky baseline round moved a best-of
/// ratio by 0.1 between runs of one binary; the medians held within a few
/// percent.
#[derive(Default)]
pub struct InTurn {
    pub weir: Vec<Duration>,
    pub raw: Vec<Duration>,
}

impl InTurn {
    pub fn push(&mut self, weir: Duration, raw: Duration) {
        self.weir.push(weir);
        self.raw.push(raw);
    }

    /// Each side's median round.
    pub fn medians(&self) -> (Duration, Duration) {
        let (weir, raw) = self.median_rounds();
        (self.weir.get(weir).copied().unwrap_or_default(), self.raw.get(raw).copied().unwrap_or_default())
    }

    /// The index of each side's median round, for what else was measured in it.
    pub fn median_rounds(&self) -> (usize, usize) {
        let at = |side: &[Duration]| {
            let mut order: Vec<usize> = (0..side.len()).collect();
            order.sort_by_key(|&i| side[i]);
            order.get(side.len() / 2).copied().unwrap_or_default()
        };
        (at(&self.weir), at(&self.raw))
    }

    /// What the note says: the rounds, the median of their ratios, the best rounds.
    pub fn describe(&self, per: impl Fn(Duration) -> f64, unit: &str) -> String {
        let mut ratios: Vec<f64> =
            self.weir.iter().zip(&self.raw).map(|(w, r)| w.as_secs_f64() / r.as_secs_f64()).collect();
        ratios.sort_by(f64::total_cmp);
        let best = |side: &[Duration]| side.iter().min().copied().unwrap_or_default();
        let (weir, raw) = (best(&self.weir), best(&self.raw));
        format!(
            "median of {} rounds taken in turn; median of the rounds' ratios {:.3}; best rounds: weir {:.2} {unit}, raw {:.2} {unit} (ratio {:.3})",
            ratios.len(),
            ratios.get(ratios.len() / 2).copied().unwrap_or_default(),
            per(weir),
            per(raw),
            weir.as_secs_f64() / raw.as_secs_f64()
        )
    }
}

/// CPU time some work took: on the calling thread, and on every thread of
/// the process (a Weir thread busy meanwhile shows).
#[derive(Clone, Copy, Default)]
pub struct CpuSpent {
    pub thread: Duration,
    pub all: Duration,
}

impl CpuSpent {
    /// Runs `body`; what it returned, and the CPU time it took.
    pub fn measure<T>(body: impl FnOnce() -> T) -> (T, CpuSpent) {
        let (thread, all) = (thread_cpu_time(), cpu_time());
        let value = body();
        (value, CpuSpent { thread: thread_cpu_time() - thread, all: cpu_time() - all })
    }
}

impl std::ops::AddAssign for CpuSpent {
    fn add_assign(&mut self, other: CpuSpent) {
        self.thread += other.thread;
        self.all += other.all;
    }
}

/// Median of `samples`.
pub fn median(samples: &mut [Duration]) -> Duration {
    samples.sort();
    samples.get(samples.len() / 2).copied().unwrap_or_default()
}

/// Microseconds, as f64.
pub fn micros(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}

/// CPU time used so far by every thread of this process (Linux: the
/// scheduler's per-thread run time, in nanoseconds); zero elsewhere.
pub fn cpu_time() -> Duration {
    // The process's clock counts threads that have exited too (a CPU pool
    // worker retires when idle), which a sum over /proc/self/task would lose.
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `now` is a valid timespec for the call to fill.
    if unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut now) } != 0 {
        return Duration::ZERO;
    }
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

/// CPU time used so far by the calling thread; zero off Linux.
pub fn thread_cpu_time() -> Duration {
    Duration::from_nanos(run_time(std::path::Path::new("/proc/thread-self/schedstat")).unwrap_or(0))
}

/// The run time, in nanoseconds, in a task's `schedstat`.
fn run_time(schedstat: &std::path::Path) -> Option<u64> {
    std::fs::read_to_string(schedstat).ok()?.split_whitespace().next()?.parse().ok()
}
