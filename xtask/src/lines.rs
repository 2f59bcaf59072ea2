//! `cargo xtask lines [--rev REV]`: the lines of code of the engine and the
//! device layer, the figure the redesign into one engine over a device
//! layer is held to (a quarter fewer than the engines it replaced).
//!
//! A line counts when it holds code: not blank, not a comment, not in a
//! test (a `tests.rs` or `tests/` file, or a module gated by `#[cfg(test)]`
//! or `#[cfg(all(test, ...))]`). Braces are counted as written, so a brace
//! inside a string would misplace a test module's end: none of these files
//! has one where it matters.

use std::process::Command;

use crate::util::{root, Result};

/// The folders counted, by what they hold.
const AREAS: [(&str, &str); 3] =
    [("engine", "rust/core/src/backend"), ("engine", "rust/core/src/completion"), ("device layer", "rust/device/src")];

/// Left out of the device layer, to compare like with like: the fake
/// driver is test support (the engine's tests run on it), and the kernel
/// descriptions and element types were weir-core's, outside the engines,
/// before the device layer took them over.
const LEFT_OUT: [&str; 3] = ["rust/device/src/fake.rs", "rust/device/src/kernel.rs", "rust/device/src/element.rs"];

/// Prints each area's code lines and the total, in the working tree or at `rev`.
pub fn command(rev: Option<&str>) -> Result {
    let mut total = 0;
    for (area, folder) in AREAS {
        let files = files(rev, folder)?;
        let mut lines = 0;
        for file in &files {
            lines += code_lines(&read(rev, file)?);
        }
        println!("{area:<13} {folder:<26} {:>4} files {lines:>6} lines", files.len());
        total += lines;
    }
    println!("{:<40} {total:>17} lines", "total");
    Ok(())
}

/// The Rust files under `folder` that count, as git lists them.
fn files(rev: Option<&str>, folder: &str) -> Result<Vec<String>> {
    let listing = match rev {
        Some(rev) => git(&["ls-tree", "-r", "--name-only", rev, "--", folder])?,
        None => git(&["ls-files", "--", folder])?,
    };
    Ok(listing
        .lines()
        .filter(|path| path.ends_with(".rs") && !path.ends_with("/tests.rs") && !path.contains("/tests/"))
        .filter(|path| !LEFT_OUT.contains(path))
        .map(str::to_owned)
        .collect())
}

fn read(rev: Option<&str>, path: &str) -> Result<String> {
    match rev {
        Some(rev) => git(&["show", &format!("{rev}:{path}")]),
        None => std::fs::read_to_string(root().join(path)).map_err(|e| format!("cannot read {path}: {e}")),
    }
}

fn git(args: &[&str]) -> Result<String> {
    let output =
        Command::new("git").args(args).current_dir(root()).output().map_err(|e| format!("cannot run git: {e}"))?;
    match output.status.success() {
        true => String::from_utf8(output.stdout).map_err(|e| format!("git {args:?} printed other than UTF-8: {e}")),
        false => Err(format!("git {args:?} failed: {}", String::from_utf8_lossy(&output.stderr).trim())),
    }
}

/// The lines of `source` that hold code, tests left out (see the module doc).
fn code_lines(source: &str) -> usize {
    let (mut count, mut depth) = (0, 0i64);
    // Inside a block comment; a test module's depth outside it; after a test gate.
    let (mut in_comment, mut test_module, mut gated) = (false, None, false);
    for line in source.lines().map(str::trim) {
        if in_comment {
            in_comment = !line.contains("*/");
            continue;
        }
        // Braces in a line comment do not open or close anything.
        let code = if line.starts_with("//") { "" } else { line };
        let opens = code.matches('{').count() as i64 - code.matches('}').count() as i64;
        if let Some(outside) = test_module {
            depth += opens;
            if depth <= outside {
                test_module = None;
            }
            continue;
        }
        if line.starts_with("/*") {
            in_comment = !line.contains("*/");
            continue;
        }
        let is_gate = line.starts_with("#[cfg(") && !line.contains("feature") && mentions_test(line);
        if gated && line.starts_with("mod ") {
            // A module of its own file (`mod tests;`) is left out with its file.
            if line.ends_with('{') {
                test_module = Some(depth);
                depth += opens;
            }
            gated = false;
            continue;
        }
        gated = is_gate || (gated && line.starts_with("#["));
        depth += opens;
        if !(line.is_empty() || line.starts_with("//") || is_gate) {
            count += 1;
        }
    }
    count
}

/// True when a `cfg` attribute names `test` as a word.
fn mentions_test(attribute: &str) -> bool {
    attribute.split(|c: char| !(c.is_alphanumeric() || c == '_')).any(|word| word == "test")
}

#[cfg(test)]
mod tests {
    use super::code_lines;

    #[test]
    fn counts_code_but_not_comments_blanks_or_test_modules() {
        let source = "\
//! A module doc.
use std::sync::Arc;

/* a block
   comment */
fn f() {
    // a comment
    let x = 1; // a trailing one
}

#[cfg(feature = \"test-support\")]
fn hook() {}

#[cfg(all(test, not(loom)))]
mod tests {
    #[test]
    fn t() {
        assert!(true);
    }
}
fn after() {}
";
        // use, fn f, let, }, the gated hook's attribute and fn, fn after.
        assert_eq!(code_lines(source), 7);
    }

    #[test]
    fn a_test_gate_before_a_mod_declaration_skips_only_that_line() {
        assert_eq!(code_lines("#[cfg(test)]\nmod tests;\nfn f() {}\n"), 1);
    }
}
