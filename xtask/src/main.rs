//! `cargo xtask`: the one entry point for building natives, generating
//! bindings, testing, benchmarking and running the demos.

mod bindings;
mod bundle;
mod docs;
mod kotlin;
mod lines;
mod rust;
mod setup;
mod swift;
mod util;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};

use bindings::Profile;

/// The one entry point for building natives, generating bindings, testing,
/// benchmarking and running the demos.
#[derive(Parser)]
#[command(
    name = "cargo xtask",
    bin_name = "cargo xtask",
    after_help = "environment:\n  WEIR_REQUIRE_BACKENDS=cpu,wgpu   fail (instead of skip) when a listed backend is unavailable"
)]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

/// Which language's side of a command runs; none: every one.
#[derive(Args)]
#[group(multiple = false)]
struct Side {
    /// Rust only
    #[arg(long)]
    rust: bool,
    /// Kotlin (and Java) only
    #[arg(long)]
    kotlin: bool,
    /// Swift only
    #[arg(long)]
    swift: bool,
}

/// Which language a program runs from: Rust unless one of these says otherwise.
#[derive(Args)]
#[group(multiple = false)]
struct RunFrom {
    /// From Kotlin coroutines
    #[arg(long)]
    kotlin: bool,
    /// From Swift Tasks
    #[arg(long)]
    swift: bool,
}

/// The bindings' languages.
#[derive(Clone, Copy, ValueEnum)]
enum Language {
    Kotlin,
    Swift,
}

/// Arguments passed on, as given, to the program a command runs.
#[derive(Args)]
struct PassedOn {
    /// e.g. --backend NAME; see the program's own options
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, value_name = "ARGS")]
    args: Vec<String>,
}

#[derive(Subcommand)]
enum Task {
    /// Every check of the project: lints (rustfmt, clippy, rustdoc, warnings as errors;
    /// the Maven and Gradle builds' versions in step), Rust tests (all available
    /// backends, then the loom model checks of the completion cell, a lane and its progress), Kotlin (the suites,
    /// then the installed artifact and the consumer project), Swift
    Test {
        /// The lints alone
        #[arg(long, conflicts_with_all = ["rust", "kotlin", "swift"])]
        lint: bool,
        #[command(flatten)]
        side: Side,
    },
    /// The main job: a multi-stream pipeline, timed fence by fence (Rust, or from
    /// Kotlin coroutines or Swift Tasks); --backend NAME and the demo's own options follow
    Demo {
        #[command(flatten)]
        from: RunFrom,
        #[command(flatten)]
        passed_on: PassedOn,
    },
    /// Run the transformer example (README, "A real workload"): from Rust, --kotlin or --swift
    /// (which, given `-- --backend cuda`, first run the raw single-stream version for its rate)
    Transformer {
        #[command(flatten)]
        from: RunFrom,
        #[command(flatten)]
        passed_on: PassedOn,
    },
    /// Build the native library and generate one language's bindings
    Bindings {
        language: Language,
        /// A release library (default: debug)
        #[arg(long)]
        release: bool,
        /// Where the bindings go (Kotlin default: the Maven project's build; Swift: target/bindings/swift)
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
    /// Install for apps: --kotlin puts the release library without test hooks, its
    /// bindings and the jar, sources jar and Dokka javadoc jar of dev.weir:weir into the
    /// local Maven repository; --swift --to DIR writes the Swift package DIR/Weir
    /// (depend on it with .package(path: "DIR/Weir"))
    Install {
        /// The Kotlin/Java artifact
        #[arg(long, required_unless_present = "swift", conflicts_with = "swift")]
        kotlin: bool,
        /// The Swift package
        #[arg(long, requires = "to")]
        swift: bool,
        /// Where the Swift package goes (DIR/Weir)
        #[arg(long, value_name = "DIR")]
        to: Option<PathBuf>,
        /// Cargo features of the Swift package's library
        #[arg(long, value_name = "LIST")]
        features: Option<String>,
    },
    /// A long mixed run (default 10^6 ops from 4 threads on cpu) with stream, buffer,
    /// fence and cancel churn: a JSON line and a table row every tenth; fails unless
    /// threads, live counters and RSS end flat (--ops N, --threads T, --backend NAME)
    Soak {
        #[command(flatten)]
        passed_on: PassedOn,
    },
    /// The suites and benchmarks for a machine with a GPU and no toolchain: the Rust ones
    /// as stripped binaries with a run.sh (default DIR .device/bundle); --kotlin, the
    /// JUnit suites with a jlinked Java runtime; --swift, the Swift test binary with its runtime
    Bundle {
        /// The Kotlin and Java suites (default DIR .device/bundle-kotlin)
        #[arg(long, conflicts_with = "swift")]
        kotlin: bool,
        /// The Swift suites (default DIR .device/bundle-swift)
        #[arg(long)]
        swift: bool,
        /// Where the bundle goes
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
    /// The API documentation side by side: rustdoc in rust/, Dokka's HTML in kotlin/,
    /// a DocC archive in swift/
    Docs {
        /// Where it goes (default target/docs)
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
    /// Lines of code of the engine and the device layer, no tests, comments or blanks
    /// (in the working tree, or --rev REV)
    Lines {
        /// A git revision to count instead of the working tree
        #[arg(long, value_name = "REV")]
        rev: Option<String>,
    },
    /// Benchmarks beside their raw baselines: JSON lines, then a table; Rust on every
    /// backend, then the Kotlin and Swift call overhead (cpu by default; --backend NAME)
    Bench {
        #[command(flatten)]
        side: Side,
        #[command(flatten)]
        passed_on: PassedOn,
    },
}

fn run_task(task: Task) -> util::Result {
    match task {
        Task::Test { lint: true, .. } => rust::lint().and_then(|()| kotlin::check_versions()),
        Task::Test { side: Side { rust: true, .. }, .. } => rust::test(),
        Task::Test { side: Side { kotlin: true, .. }, .. } => kotlin::test(),
        Task::Test { side: Side { swift: true, .. }, .. } => swift::test(),
        Task::Test { .. } => setup::ensure()
            .and_then(|()| rust::lint())
            .and_then(|()| kotlin::check_versions())
            .inspect(|()| util::report_progress("lints"))
            .and_then(|()| rust::test())
            .inspect(|()| util::report_progress("Rust tests"))
            .and_then(|()| kotlin::test())
            .inspect(|()| util::report_progress("Kotlin and Java tests"))
            .and_then(|()| swift::test()),
        Task::Demo { from: RunFrom { kotlin: true, .. }, passed_on } => kotlin::demo(&passed_on.args),
        Task::Demo { from: RunFrom { swift: true, .. }, passed_on } => swift::demo(&passed_on.args),
        Task::Demo { passed_on, .. } => rust::demo(&passed_on.args),
        Task::Transformer { from: RunFrom { kotlin: true, .. }, passed_on } => {
            kotlin::transformer(&rust::with_raw_transformer_rate(&passed_on.args)?)
        }
        Task::Transformer { from: RunFrom { swift: true, .. }, passed_on } => {
            swift::transformer(&rust::with_raw_transformer_rate(&passed_on.args)?)
        }
        Task::Transformer { passed_on, .. } => rust::transformer(&passed_on.args),
        Task::Bindings { language, release, out } => {
            let profile = if release { Profile::Release } else { Profile::Debug };
            match language {
                Language::Kotlin => bindings::command("kotlin", profile, out),
                Language::Swift => bindings::command("swift", profile, out),
            }
        }
        Task::Install { swift: true, to: Some(to), features, .. } => swift::install(&to, features.as_deref()),
        Task::Install { .. } => kotlin::install(),
        Task::Soak { passed_on } => rust::soak(&passed_on.args),
        Task::Bundle { kotlin: true, out, .. } => kotlin::bundle(out),
        Task::Bundle { swift: true, out, .. } => swift::bundle(out),
        Task::Bundle { out, .. } => bundle::bundle(out),
        Task::Docs { out } => docs::command(out),
        Task::Lines { rev } => lines::command(rev.as_deref()),
        Task::Bench { side: Side { rust: true, .. }, passed_on } => rust::bench(&passed_on.args),
        Task::Bench { side: Side { kotlin: true, .. }, passed_on } => kotlin::bench(&passed_on.args),
        Task::Bench { side: Side { swift: true, .. }, passed_on } => swift::bench(&passed_on.args),
        Task::Bench { passed_on, .. } => rust::bench(&passed_on.args)
            .and_then(|()| kotlin::bench(&passed_on.args))
            .and_then(|()| swift::bench(&passed_on.args)),
    }
}

fn main() -> ExitCode {
    match run_task(Cli::parse().task) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("xtask: {message}");
            ExitCode::FAILURE
        }
    }
}
