//! Benchmark figures: one JSON line each as they are measured, then a table.

use std::time::Duration;

/// One measured figure, beside its raw-backend baseline where there is one.
pub struct Figure {
    pub backend: String,
    pub name: String,
    pub unit: &'static str,
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
        unit: &'static str,
        weir: f64,
        baseline: f64,
        higher_is_better: bool,
        note: &str,
    ) -> Figure {
        Figure {
            backend: backend.into(),
            name: name.into(),
            unit,
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
}

#[derive(Default)]
pub struct Report {
    figures: Vec<Figure>,
}

impl Report {
    pub fn add(&mut self, figure: Figure) {
        let json = format!(
            "{{\"backend\":\"{}\",\"bench\":\"{}\",\"unit\":\"{}\",\"weir\":{:.4},\"baseline\":{},\"ratio\":{},\"higher_is_better\":{},\"note\":\"{}\"}}",
            figure.backend,
            figure.name,
            figure.unit,
            figure.weir,
            figure.baseline.map_or("null".to_owned(), |b| format!("{b:.4}")),
            figure.ratio().map_or("null".to_owned(), |r| format!("{r:.3}")),
            figure.higher_is_better,
            figure.note.replace('"', "'"),
        );
        println!("{json}");
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
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return Duration::ZERO };
    let nanos: u64 = tasks.flatten().filter_map(|task| run_time(&task.path().join("schedstat"))).sum();
    Duration::from_nanos(nanos)
}

/// CPU time used so far by the calling thread; zero off Linux.
pub fn thread_cpu_time() -> Duration {
    Duration::from_nanos(run_time(std::path::Path::new("/proc/thread-self/schedstat")).unwrap_or(0))
}

/// The run time, in nanoseconds, in a task's `schedstat`.
fn run_time(schedstat: &std::path::Path) -> Option<u64> {
    std::fs::read_to_string(schedstat).ok()?.split_whitespace().next()?.parse().ok()
}
