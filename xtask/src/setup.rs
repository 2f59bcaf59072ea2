//! What the tests need from the system, installed before they run: so that
//! `cargo xtask test` on a fresh machine of the kind CI uses (Rust, a JDK
//! and Maven, or not; no Vulkan driver, no ROCm headers) runs everything
//! rather than skipping parts, and CI's script only calls it.
//!
//! As root with `apt-get`, what is missing is installed; otherwise the one
//! command that would install it is printed, and the parts that need it
//! report themselves skipped as before.

use std::path::Path;
use std::process::Command;

use crate::util::{run, Result};

/// Where ROCm's Debian packages put the HIP headers (`libamdhip64-dev`).
pub const SYSTEM_HIP: &str = "/usr";

/// A system package the tests need, and how to tell it is there.
struct Need {
    packages: &'static [&'static str],
    why: &'static str,
    present: fn() -> bool,
}

fn on_path(program: &str) -> bool {
    Command::new("sh").args(["-c", &format!("command -v {program}")]).output().is_ok_and(|out| out.status.success())
}

/// lavapipe: a Vulkan loader and Mesa's software ICD.
fn lavapipe() -> bool {
    let icd = Path::new("/usr/share/vulkan/icd.d");
    let has_icd = std::fs::read_dir(icd)
        .map(|entries| entries.flatten().any(|entry| entry.file_name().to_string_lossy().starts_with("lvp_icd")))
        .unwrap_or(false);
    let has_loader = ["/usr/lib/x86_64-linux-gnu/libvulkan.so.1", "/usr/lib/aarch64-linux-gnu/libvulkan.so.1"]
        .iter()
        .any(|path| Path::new(path).exists());
    has_icd && has_loader
}

/// The ROCm install the HIP build uses: `HIP_PATH` if set, else the
/// system's, where its headers are.
pub fn hip_path() -> Option<std::ffi::OsString> {
    let has_headers = |root: &Path| root.join("include/hip/hip_runtime_api.h").is_file();
    match std::env::var_os("HIP_PATH") {
        Some(path) => has_headers(Path::new(&path)).then_some(path),
        None => has_headers(Path::new(SYSTEM_HIP)).then(|| SYSTEM_HIP.into()),
    }
}

const NEEDS: &[Need] = &[
    Need {
        packages: &["mesa-vulkan-drivers", "libvulkan1"],
        why: "the wgpu backend's tests on lavapipe (software Vulkan)",
        present: lavapipe,
    },
    Need {
        packages: &["maven", "openjdk-17-jdk-headless"],
        why: "the Kotlin and Java suites",
        present: || on_path("mvn"),
    },
    Need {
        packages: &["debootstrap"],
        why: "the Swift suites' toolchain chroot (no swift on PATH)",
        present: || on_path("swift") || on_path("debootstrap"),
    },
    Need {
        packages: &["chromium"],
        why: "the timeline picture's check in a real headless browser",
        present: || on_path("chromium"),
    },
    Need {
        packages: &["libamdhip64-dev"],
        why: "the HIP backend's build and its tests (hiprtc runs without an AMD GPU)",
        present: || hip_path().is_some(),
    },
];

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .is_some_and(|uid| uid.trim() == "0")
}

/// Installs (as root, with apt-get) or names what the tests need and the
/// machine lacks, and the lint components of the Rust toolchain.
pub fn ensure() -> Result {
    let missing: Vec<&Need> = NEEDS.iter().filter(|need| !(need.present)()).collect();
    if !missing.is_empty() {
        let packages: Vec<&str> = missing.iter().flat_map(|need| need.packages.iter().copied()).collect();
        for need in &missing {
            eprintln!("xtask: missing {} for {}", need.packages.join(" "), need.why);
        }
        if is_root() && on_path("apt-get") {
            run(Command::new("apt-get").args(["update", "-qq"]).env("DEBIAN_FRONTEND", "noninteractive"))?;
            run(Command::new("apt-get")
                .args(["install", "-y", "-qq"])
                .args(&packages)
                .env("DEBIAN_FRONTEND", "noninteractive"))?;
        } else {
            eprintln!(
                "xtask: install them with `sudo apt-get install -y {}`; until then those parts are skipped",
                packages.join(" ")
            );
        }
    }
    // `cargo xtask test` lints first; a toolchain without the components
    // would stop there. Adding a component that is there is a no-op.
    if on_path("rustup") {
        run(Command::new("rustup").args(["component", "add", "rustfmt", "clippy"]))?;
    }
    Ok(())
}
