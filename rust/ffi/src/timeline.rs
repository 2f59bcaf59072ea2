//! The timeline picture for Kotlin, Java and Swift: the same renderer the
//! Rust demo draws with (weir-core's `Timeline`).

use std::time::Duration;

/// Ops on streams over time: one row per stream, a bar per op, an arrow per
/// cross-stream wait; `timeline_svg` draws it.
#[derive(Debug, Clone, uniffi::Record)]
pub struct Timeline {
    pub title: String,
    /// The rows, top to bottom: a stream's name each.
    pub rows: Vec<String>,
    pub bars: Vec<TimelineBar>,
    #[uniffi(default = [])]
    pub waits: Vec<TimelineWait>,
}

/// One op: on row `row`, from `start` to `end` (from the timeline's zero).
#[derive(Debug, Clone, uniffi::Record)]
pub struct TimelineBar {
    pub row: u32,
    pub start: Duration,
    pub end: Duration,
    /// Shown when the pointer rests on the bar.
    pub label: String,
}

/// A cross-stream wait: the op on row `to_row` starting at `until` waited
/// for the one on row `from_row` that ended at `from`.
#[derive(Debug, Clone, uniffi::Record)]
pub struct TimelineWait {
    pub from_row: u32,
    pub from: Duration,
    pub to_row: u32,
    pub until: Duration,
}

/// `timeline` as a self-contained SVG document: a `<g class="stream">` per
/// row with a `<rect class="op">` per bar, a `<line class="wait">` per wait.
#[uniffi::export]
pub fn timeline_svg(timeline: Timeline) -> String {
    let row = |index: u32| index as usize;
    weir_core::Timeline {
        title: timeline.title,
        rows: timeline.rows,
        bars: timeline
            .bars
            .into_iter()
            .map(|bar| weir_core::TimelineBar { row: row(bar.row), start: bar.start, end: bar.end, label: bar.label })
            .collect(),
        waits: timeline
            .waits
            .into_iter()
            .map(|wait| weir_core::TimelineWait {
                from_row: row(wait.from_row),
                from: wait.from,
                to_row: row(wait.to_row),
                until: wait.until,
            })
            .collect(),
    }
    .to_svg()
}
