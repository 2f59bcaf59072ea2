//! A picture of work on streams: one row per stream, a bar per op from when
//! it could start to when it ended, and an arrow per cross-stream wait, as a
//! self-contained SVG. The demos (Rust, Kotlin, Swift) draw their pipelined
//! runs with it, so one renderer serves every language.

use std::fmt::Write;
use std::time::Duration;

/// Ops on streams over time, to draw ([`Timeline::to_svg`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Timeline {
    /// The picture's heading.
    pub title: String,
    /// The rows, top to bottom: a stream's name each.
    pub rows: Vec<String>,
    pub bars: Vec<TimelineBar>,
    pub waits: Vec<TimelineWait>,
}

/// One op: on row `row`, from `start` to `end` (from the timeline's zero).
#[derive(Debug, Clone, PartialEq)]
pub struct TimelineBar {
    pub row: usize,
    pub start: Duration,
    pub end: Duration,
    /// Shown when the pointer rests on the bar.
    pub label: String,
}

/// A cross-stream wait: the op on row `to_row` starting at `until` waited
/// for the one on row `from_row` that ended at `from`.
#[derive(Debug, Clone, PartialEq)]
pub struct TimelineWait {
    pub from_row: usize,
    pub from: Duration,
    pub to_row: usize,
    pub until: Duration,
}

/// Bar colours, a row each (then again).
const COLOURS: [&str; 6] = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#b07aa1"];

fn millis(time: Duration) -> f64 {
    time.as_secs_f64() * 1e3
}

/// `text` as SVG character data.
fn escaped(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

impl Timeline {
    /// The timeline as an SVG document: a `<g class="stream">` per row (its
    /// name, then a `<rect class="op">` per bar), then a `<line class="wait">`
    /// arrow per wait. Bars and waits naming a row past the last are left out.
    pub fn to_svg(&self) -> String {
        let (left, top, row, width) = (130.0, 40.0, 60.0, 1000.0);
        let rows = self.rows.len();
        let end = self.bars.iter().map(|bar| millis(bar.end)).fold(0.0_f64, f64::max).max(1e-3);
        let x = |time: Duration| left + millis(time) / end * width;
        let y = |index: usize| top + index as f64 * row;
        let mut svg = format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" \
             font-size=\"12\">\n<text x=\"{left}\" y=\"20\">{}: {end:.2} ms</text>\n\
             <defs><marker id=\"head\" markerWidth=\"6\" markerHeight=\"6\" refX=\"5\" refY=\"3\" \
             orient=\"auto\"><path d=\"M0,0 L6,3 L0,6 z\" fill=\"#555\"/></marker></defs>\n",
            left + width + 20.0,
            top + rows as f64 * row + 30.0,
            escaped(&self.title),
        );
        for (index, name) in self.rows.iter().enumerate() {
            let _ = writeln!(
                svg,
                "<g class=\"stream\"><text x=\"10\" y=\"{}\">{}</text>",
                y(index) + row / 2.0,
                escaped(name)
            );
            for bar in self.bars.iter().filter(|bar| bar.row == index) {
                let _ = writeln!(
                    svg,
                    "<rect class=\"op\" x=\"{:.2}\" y=\"{:.2}\" width=\"{:.2}\" height=\"{:.2}\" fill=\"{}\" \
                     stroke=\"white\" stroke-width=\"0.5\"><title>{}: {:.3} - {:.3} ms</title></rect>",
                    x(bar.start),
                    y(index) + 8.0,
                    (x(bar.end) - x(bar.start)).max(0.5),
                    row - 16.0,
                    COLOURS[index % COLOURS.len()],
                    escaped(&bar.label),
                    millis(bar.start),
                    millis(bar.end)
                );
            }
            svg += "</g>\n";
        }
        for wait in self.waits.iter().filter(|wait| wait.from_row < rows && wait.to_row < rows) {
            // From the bottom of the row waited for down to the top of the
            // waiting one (or up, for a row above).
            let down = wait.to_row >= wait.from_row;
            let (y1, y2) = if down {
                (y(wait.from_row) + row - 8.0, y(wait.to_row) + 8.0)
            } else {
                (y(wait.from_row) + 8.0, y(wait.to_row) + row - 8.0)
            };
            let _ = writeln!(
                svg,
                "<line class=\"wait\" x1=\"{:.2}\" y1=\"{y1:.2}\" x2=\"{:.2}\" y2=\"{y2:.2}\" stroke=\"#555\" \
                 stroke-width=\"0.6\" marker-end=\"url(#head)\"/>",
                x(wait.from),
                x(wait.until.max(wait.from)),
            );
        }
        svg + "</svg>\n"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(value: u64) -> Duration {
        Duration::from_millis(value)
    }

    #[test]
    fn every_row_bar_and_wait_is_drawn_and_text_is_escaped() {
        let timeline = Timeline {
            title: "a <b> & c".into(),
            rows: vec!["upload".into(), "compute".into()],
            bars: vec![
                TimelineBar { row: 0, start: ms(0), end: ms(2), label: "chunk 0".into() },
                TimelineBar { row: 1, start: ms(2), end: ms(5), label: "chunk 0".into() },
                TimelineBar { row: 7, start: ms(0), end: ms(1), label: "no such row".into() },
            ],
            waits: vec![TimelineWait { from_row: 0, from: ms(2), to_row: 1, until: ms(2) }],
        };
        let svg = timeline.to_svg();
        assert_eq!(svg.matches("<g class=\"stream\">").count(), 2);
        assert_eq!(svg.matches("<rect class=\"op\"").count(), 2, "the bar on no row is left out");
        assert_eq!(svg.matches("<line class=\"wait\"").count(), 1);
        assert!(svg.contains("a &lt;b&gt; &amp; c") && !svg.contains("<b>"), "{svg}");
        // The last bar ends at the right edge: 130 + 1000.
        assert!(svg.contains("x=\"530.00\"") && svg.contains("width=\"600.00\""), "{svg}");
    }
}
