//! Benchmark figures: one JSON line each as they are measured, then a table.

// Taking rounds in turn, in fresh processes, and CPU time per round serve the
// GPU backends' parts: a build with neither CUDA nor wgpu has none of them.
#![cfg_attr(not(any(feature = "cuda", feature = "wgpu")), allow(dead_code))]

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
    /// False when the baseline is Weir itself in another case (a scaling
    /// series' smallest), not the raw backend: the plot leaves it out.
    pub baseline_is_raw: bool,
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
            baseline_is_raw: true,
        }
    }

    /// This figure, its baseline another case of Weir's own (see `baseline_is_raw`).
    pub fn against_itself(self) -> Figure {
        Figure { baseline_is_raw: false, ..self }
    }

    /// Weir divided by the baseline: for latencies lower is better, for
    /// throughputs higher is better (see `higher_is_better`).
    pub fn ratio(&self) -> Option<f64> {
        self.baseline.filter(|b| *b > 0.0).map(|b| self.weir / b)
    }

    /// The line [`Report::add`] prints.
    fn to_json(&self) -> String {
        format!(
            "{{\"backend\":\"{}\",\"bench\":\"{}\",\"unit\":\"{}\",\"weir\":{:.4},\"baseline\":{},\"ratio\":{},\"higher_is_better\":{},\"baseline_is_raw\":{},\"note\":\"{}\"}}",
            self.backend,
            self.name,
            self.unit,
            self.weir,
            self.baseline.map_or("null".to_owned(), |b| format!("{b:.4}")),
            self.ratio().map_or("null".to_owned(), |r| format!("{r:.3}")),
            self.higher_is_better,
            self.baseline_is_raw,
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
            baseline_is_raw: field("baseline_is_raw")? == "true",
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
        println!("{:<8} {:<44} {:>18} {:>18} {:>8}  note", "backend", "benchmark", "weir", "baseline", "ratio");
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

impl Report {
    /// The figures with a baseline as an SVG bar chart: a row per figure, its
    /// bar Weir's speed against the raw backend's (baseline ÷ Weir for times,
    /// Weir ÷ baseline for rates: past the line at 1×, Weir is ahead), on a
    /// log scale from 1/16× to 16×, coloured by how far behind raw it is.
    pub fn plot(&self) -> String {
        let rows: Vec<(&Figure, f64)> = self
            .figures
            .iter()
            .filter(|f| f.baseline_is_raw)
            .filter_map(|f| {
                let ratio = f.ratio()?;
                let speed = if f.higher_is_better { ratio } else { 1.0 / ratio };
                speed.is_finite().then_some((f, speed))
            })
            .collect();
        let (left, row, width, top) = (520.0, 18.0, 560.0, 40.0);
        let x = |speed: f64| left + (speed.clamp(1.0 / 16.0, 16.0).log2() + 4.0) / 8.0 * width;
        let escaped = |text: &str| text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;");
        let mut svg = format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" \
             font-size=\"11\">\n<text x=\"10\" y=\"20\" font-size=\"13\">Weir beside the raw backend \
             (right of 1×: Weir ahead; log scale)</text>\n",
            left + width + 80.0,
            top + rows.len() as f64 * row + 30.0
        );
        for (speed, label) in [(1.0 / 16.0, "1/16×"), (0.25, "1/4×"), (1.0, "1×"), (4.0, "4×"), (16.0, "16×")] {
            svg += &format!(
                "<line x1=\"{0:.1}\" y1=\"{1}\" x2=\"{0:.1}\" y2=\"{2}\" stroke=\"{3}\"/><text x=\"{0:.1}\" y=\"{1}\" \
                 text-anchor=\"middle\">{label}</text>\n",
                x(speed),
                top - 6.0,
                top + rows.len() as f64 * row,
                if speed == 1.0 { "#333" } else { "#ddd" }
            );
        }
        for (index, (figure, speed)) in rows.iter().enumerate() {
            let y = top + index as f64 * row;
            let colour = match speed {
                s if *s >= 0.97 => "#59a14f",
                s if *s >= 0.8 => "#f28e2b",
                _ => "#e15759",
            };
            let (from, to) = (x(1.0).min(x(*speed)), x(1.0).max(x(*speed)));
            svg += &format!(
                "<g class=\"figure\"><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}: {}</text>\
                 <rect x=\"{from:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{colour}\"/>\
                 <text x=\"{:.1}\" y=\"{:.1}\">{speed:.2}×</text></g>\n",
                left - 8.0,
                y + row * 0.7,
                figure.backend,
                escaped(&figure.name),
                y + 2.0,
                (to - from).max(1.0),
                row - 4.0,
                left + width + 6.0,
                y + row * 0.7,
            );
        }
        svg + "</svg>\n"
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

/// CPU time used so far by every thread of this process, threads that
/// have exited included (a CPU pool worker retires when idle); zero where
/// the clock cannot be read.
pub fn cpu_time() -> Duration {
    clock(libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// CPU time used so far by the calling thread; zero where the clock cannot be read.
pub fn thread_cpu_time() -> Duration {
    clock(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// The time on one of the system's CPU-time clocks.
fn clock(id: libc::clockid_t) -> Duration {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `now` is a valid timespec for the call to fill.
    if unsafe { libc::clock_gettime(id, &mut now) } != 0 {
        return Duration::ZERO;
    }
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}
