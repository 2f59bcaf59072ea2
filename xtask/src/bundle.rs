//! `cargo xtask bundle`: the Rust suites and benchmarks, built here, for a
//! machine with a GPU and no Rust toolchain.
//!
//! The bundle is a folder of stripped, gzipped binaries and a `run.sh` that
//! unpacks and runs them: the conformance suite, the CUDA and wgpu backend
//! tests (test-support builds, debug), the users' CUDA kernels (with the
//! source nvcc builds their modules from, there), and the benchmarks, the
//! soak and the demo (release). Copy the folder over, then `sh run.sh` there; set
//! `LD_LIBRARY_PATH` to where the CUDA libraries (and a Vulkan loader) are.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::util::{cargo, root, run, target_dir, Result};

/// The most a bundle may weigh: what one carry to the GPU machine takes.
const MAX_BUNDLE_BYTES: u64 = 64 * 1024 * 1024;

/// The folders of a language's bundle while it is made: `out` (emptied),
/// and the staging folder `out/NAME` with its `lib/`, packed by [`Staged::pack`].
pub struct Staged {
    pub out: PathBuf,
    pub staging: PathBuf,
    pub lib: PathBuf,
    name: &'static str,
}

impl Staged {
    /// `out`, else `.device/bundle-NAME`, emptied.
    pub fn new(out: Option<PathBuf>, name: &'static str) -> Result<Staged> {
        let out = out.map_or_else(|| root().join(format!(".device/bundle-{name}")), |out| root().join(out));
        if out.exists() {
            std::fs::remove_dir_all(&out).map_err(|e| format!("cannot empty {}: {e}", out.display()))?;
        }
        let staging = out.join(name);
        let lib = staging.join("lib");
        std::fs::create_dir_all(&lib).map_err(|e| format!("cannot create {}: {e}", lib.display()))?;
        Ok(Staged { out, staging, lib, name })
    }

    /// Packs the staging folder into `NAME.tar.gz` beside `run-NAME.sh`
    /// (`script`), and fails if the two weigh more than one carry.
    pub fn pack(self, script: &str) -> Result {
        let Staged { out, staging, name, .. } = self;
        let packed = out.join(format!("{name}.tar.gz"));
        run(Command::new("tar").arg("-czf").arg(&packed).arg("-C").arg(&out).arg(name))?;
        std::fs::remove_dir_all(&staging).map_err(|e| format!("cannot remove {}: {e}", staging.display()))?;
        let run_script = out.join(format!("run-{name}.sh"));
        std::fs::write(&run_script, script).map_err(|e| format!("cannot write {}: {e}", run_script.display()))?;
        let size = size_of(&packed)? + size_of(&run_script)?;
        eprintln!("xtask: {name} bundle in {} ({:.1} MiB)", out.display(), size as f64 / (1024.0 * 1024.0));
        if size > MAX_BUNDLE_BYTES {
            return Err(format!("the {name} bundle is {size} bytes, over {MAX_BUNDLE_BYTES}"));
        }
        Ok(())
    }
}

fn size_of(path: &Path) -> Result<u64> {
    Ok(std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?.len())
}

const TESTS: [&str; 12] = [
    "conformance",
    "cuda_backend",
    "cuda_device_lost",
    "cuda_kernels",
    "device_group",
    "devices",
    "process_group",
    "transformer_example",
    "wgpu_adapter",
    "wgpu_backend",
    "wgpu_device_faults",
    "wgsl_layouts",
];
const EXAMPLES: [&str; 4] = ["bench", "soak", "demo", "transformer"];

pub fn bundle(out: Option<PathBuf>) -> Result {
    let out = out.map_or_else(|| root().join(".device/bundle"), |out| root().join(out));
    std::fs::create_dir_all(&out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    let mut tests = cargo();
    tests.args(["test", "--no-run", "-p", "weir-core", "--features", "test-support", "--message-format=json"]);
    for test in TESTS {
        tests.args(["--test", test]);
    }
    let built = tests.current_dir(root()).output().map_err(|e| format!("cannot build the tests: {e}"))?;
    if !built.status.success() {
        return Err(format!("building the tests failed:\n{}", String::from_utf8_lossy(&built.stderr)));
    }
    for (name, path) in executables(&String::from_utf8_lossy(&built.stdout)) {
        pack(&path, &out.join(name))?;
    }
    let mut examples = cargo();
    examples.args(["build", "--release", "-p", "weir-core", "--features", "test-support"]);
    for example in EXAMPLES {
        examples.args(["--example", example]);
    }
    run(&mut examples)?;
    for example in EXAMPLES {
        pack(&target_dir().join("release/examples").join(example), &out.join(example))?;
    }
    // The users' kernels the CUDA suite also loads as nvcc's modules, built there.
    let kernels = root().join("rust/core/tests/cuda");
    std::fs::create_dir_all(out.join("cuda/weir_test")).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    for file in ["kernels.cu", "weir_test/affine.cuh"] {
        std::fs::copy(kernels.join(file), out.join("cuda").join(file))
            .map_err(|e| format!("cannot copy {file}: {e}"))?;
    }
    let script = RUN.replace("@TESTS@", &TESTS.join(" "));
    std::fs::write(out.join("run.sh"), script).map_err(|e| format!("cannot write run.sh: {e}"))?;
    eprintln!("xtask: bundle in {}", out.display());
    Ok(())
}

/// The (target name, path) of every test executable in cargo's JSON messages.
fn executables(messages: &str) -> Vec<(String, PathBuf)> {
    let field = |line: &str, key: &str| -> Option<String> {
        let start = line.find(&format!("\"{key}\":\""))? + key.len() + 4;
        Some(line[start..].split('"').next()?.to_owned())
    };
    messages
        .lines()
        .filter(|line| line.contains("\"executable\":\""))
        .filter_map(|line| {
            let name = field(line, "name")?;
            TESTS.contains(&name.as_str()).then_some(())?;
            Some((name, PathBuf::from(field(line, "executable")?)))
        })
        .collect()
}

/// Copies `from` to `to.gz`, stripped and compressed.
fn pack(from: &Path, to: &Path) -> Result {
    std::fs::copy(from, to).map_err(|e| format!("cannot copy {}: {e}", from.display()))?;
    run(Command::new("strip").arg(to))?;
    run(Command::new("gzip").args(["-9", "-f"]).arg(to))
}

/// Unpacks the binaries, builds the users' kernels as PTX, CUBIN and fatbin
/// where `nvcc` is (for `cuda_kernels`), then runs the suites, the demo (on
/// `WEIR_DEMO_BACKEND`, default cuda) and the benchmarks; extra
/// arguments go to every test binary (a filter, `--test-threads=1`).
const RUN: &str = r#"#!/bin/sh
# Made by `cargo xtask bundle`. Runs the Rust suites, then the benchmarks.
set -u
cd "$(dirname "$0")"
for packed in *.gz; do gunzip -f "$packed" && chmod +x "${packed%.gz}"; done
status=0
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
if [ -x "$nvcc" ]; then
    # The device's architecture (9.0 -> sm_90), and another for the module that must be refused.
    cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d '. ')
    arch=sm_${cap:-90}; other=sm_80; [ "$arch" = sm_80 ] && other=sm_90
    mkdir -p modules
    ( cd cuda && "$nvcc" -I. -ptx kernels.cu -o ../modules/kernels.ptx &&
      "$nvcc" -I. -cubin -arch=$arch kernels.cu -o ../modules/kernels.cubin &&
      "$nvcc" -I. -fatbin -gencode arch=compute_${arch#sm_},code=$arch kernels.cu -o ../modules/kernels.fatbin &&
      "$nvcc" -I. -cubin -arch=$other kernels.cu -o ../modules/kernels_other_arch.cubin ) &&
        export WEIR_CUDA_MODULES="$PWD/modules" || echo "nvcc could not build the users' kernels"
fi
for test in @TESTS@; do
    echo "== $test"
    ./"$test" "$@" > "$test.log" 2>&1 || status=1
    # Failures, skips and the totals; the whole output stays in $test.log.
    grep -E 'FAILED|panicked|skipped|running on|test result' "$test.log" | sort | uniq -c | sort -rn | head -40
done
echo "== demo"
./demo --backend "${WEIR_DEMO_BACKEND:-cuda}" || status=1
echo "== bench"
./bench || status=1
exit $status
"#;
