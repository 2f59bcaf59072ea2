//! The timeline picture the demos write, checked in a real browser: headless
//! Chromium lays the SVG out in a page and a script there measures what it
//! drew (one visible row per stream, each below the last, every op a visible
//! bar, every wait an arrow). Without Chromium the test reports itself
//! skipped, unless `WEIR_REQUIRE_BROWSER` is set (CI sets it; `cargo xtask
//! test` installs Chromium as root).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use weir_core::{Timeline, TimelineBar, TimelineWait};

fn chromium() -> Option<PathBuf> {
    let found = ["chromium", "chromium-browser", "google-chrome"].iter().find_map(|name| {
        let out = Command::new("sh").args(["-c", &format!("command -v {name}")]).output().ok()?;
        out.status.success().then(|| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
    });
    if found.is_none() {
        let required = std::env::var("WEIR_REQUIRE_BROWSER").is_ok_and(|value| !value.is_empty());
        assert!(!required, "WEIR_REQUIRE_BROWSER is set, but no Chromium is on PATH");
        eprintln!("timeline in a browser: skipped (no chromium on PATH)");
    }
    found
}

/// Runs headless Chromium on `page` with `args` (`--dump-dom`, `--screenshot=…`).
fn headless(browser: &Path, profile: &Path, page: &Path, args: &[&str]) -> String {
    let out = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--window-size=1200,320",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("chromium runs");
    assert!(out.status.success(), "chromium failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A pipeline's timeline as the demos draw it: three streams, a chunk's
/// stages one after another on them, a wait per stage boundary.
fn pipeline(chunks: usize) -> Timeline {
    let rows = ["upload stream", "compute stream", "download stream"].map(str::to_owned).to_vec();
    let mut timeline = Timeline { title: "three streams".into(), rows, ..Timeline::default() };
    let ms = |value: usize| Duration::from_micros(value as u64 * 500);
    for chunk in 0..chunks {
        for row in 0..3 {
            let (start, end) = (ms(chunk + row), ms(chunk + row + 1));
            timeline.bars.push(TimelineBar { row, start, end, label: format!("chunk {chunk}") });
            if row > 0 {
                timeline.waits.push(TimelineWait { from_row: row - 1, from: start, to_row: row, until: start });
            }
        }
    }
    timeline
}

/// Measures, in the page, what the browser drew of the inline SVG.
const MEASURE: &str = r#"
const svg = document.querySelector('svg');
const box = e => e.getBoundingClientRect();
const shown = e => box(e).width > 0 && box(e).height > 0;
const rows = [...svg.querySelectorAll('g.stream')];
const tops = rows.map(g => Math.round(box(g).top));
document.getElementById('result').textContent = [
  'rows=' + rows.length,
  'rows_shown=' + rows.filter(shown).length,
  'rows_stacked=' + tops.every((top, i) => i === 0 || top > tops[i - 1]),
  'ops=' + svg.querySelectorAll('rect.op').length,
  'ops_shown=' + [...svg.querySelectorAll('rect.op')].filter(shown).length,
  'waits_shown=' + [...svg.querySelectorAll('line.wait')].filter(e => box(e).height > 0).length,
].join(' ');
"#;

#[test]
fn the_timeline_renders_in_a_headless_browser_with_one_row_per_stream() {
    let Some(browser) = chromium() else { return };
    let dir = std::env::temp_dir().join(format!("weir-timeline-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let chunks = 12;
    let svg = pipeline(chunks).to_svg();
    let page = dir.join("timeline.html");
    std::fs::write(
        &page,
        format!("<!DOCTYPE html><html><body>{svg}<pre id=\"result\"></pre><script>{MEASURE}</script></body></html>"),
    )
    .unwrap();
    let dom = headless(&browser, &dir.join("profile"), &page, &["--dump-dom"]);
    let result = dom
        .split("<pre id=\"result\">")
        .nth(1)
        .and_then(|rest| rest.split("</pre>").next())
        .unwrap_or_else(|| panic!("the page's script did not run: {dom}"));
    let expected =
        format!("rows=3 rows_shown=3 rows_stacked=true ops={0} ops_shown={0} waits_shown={1}", 3 * chunks, 2 * chunks);
    assert_eq!(result, expected);
    // The SVG file alone, as a demo writes it, renders to a picture too.
    let picture = dir.join("timeline.svg");
    std::fs::write(&picture, &svg).unwrap();
    let shot = dir.join("timeline.png");
    headless(&browser, &dir.join("profile"), &picture, &[&format!("--screenshot={}", shot.display())]);
    let png = std::fs::read(&shot).expect("a screenshot");
    assert!(png.starts_with(b"\x89PNG") && png.len() > 2_000, "{} bytes", png.len());
    let _ = std::fs::remove_dir_all(&dir);
}
