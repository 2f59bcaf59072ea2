//! The Swift toolchain: `swift` on PATH, or else Debian trixie's `swiftlang`
//! (Swift 6.0) in a chroot built once and cached outside the repository.
//!
//! The chroot lives at `$WEIR_SWIFT_CHROOT`, else
//! `${XDG_CACHE_HOME:-$HOME/.cache}/weir/swift-trixie`. It is reused when its
//! marker file names the current recipe, and rebuilt (as root, with
//! `debootstrap`) when absent or stale: a cache, never a dependency.
//!
//! Inside it, `/proc` and `/dev` (with `/dev/pts`) are mounted and the workspace is bind-mounted
//! at its own absolute path, so every path (sources, libraries, rpaths, error
//! messages) reads the same inside and out. The mounts are made in a private
//! mount namespace (`unshare --mount`) of the command: they vanish with it,
//! however it ends (Ctrl-C and kill included), and neither the host nor a
//! concurrent run sharing the cache ever sees them.

use std::fs;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;

use crate::util::{root, Result};

/// What the chroot holds. Change it and every cached chroot is rebuilt.
/// libc6-dev: the C headers swiftc needs (only recommended by gcc). libvulkan1 and
/// mesa-vulkan-drivers let a wgpu-enabled library find lavapipe.
const RECIPE: &str = "debian trixie minbase; swiftlang libc6-dev libvulkan1 mesa-vulkan-drivers; v2";
const PACKAGES: &[&str] = &["swiftlang", "libc6-dev", "libvulkan1", "mesa-vulkan-drivers"];
const MARKER: &str = ".weir-swift-recipe";
const SUITE: &str = "trixie";
const DEFAULT_MIRROR: &str = "http://deb.debian.org/debian";
const CHROOT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Where `swift` runs.
pub enum Toolchain {
    /// `swift` on PATH.
    Host,
    /// `swift` inside the cached chroot at this directory.
    Chroot(PathBuf),
}

impl Toolchain {
    /// `swift` on PATH if there is one, else the chroot (built if needed).
    pub fn find() -> Result<Toolchain> {
        if Command::new("swift")
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
        {
            eprintln!("swift: using the toolchain on PATH");
            return Ok(Toolchain::Host);
        }
        let dir = chroot_dir()?;
        if is_ready(&dir) {
            eprintln!("swift: no swift on PATH; using the cached chroot {}", dir.display());
        } else {
            eprintln!("swift: no swift on PATH and no cached chroot; building {} (a few minutes)", dir.display());
            build(&dir)?;
        }
        Ok(Toolchain::Chroot(dir))
    }

    /// Runs `swift args…` in `dir` (inside the workspace) with extra `env`,
    /// echoing its output as it comes; returns that output.
    pub fn swift(&self, dir: &Path, args: &[String], env: &[(String, String)]) -> Result<String> {
        let mut command = match self {
            Toolchain::Host => {
                let mut command = Command::new("swift");
                command.args(args).current_dir(dir).envs(env.iter().map(|(k, v)| (k, v)));
                // `cargo run` puts target/*/ on the library path, ahead of every
                // rpath: binaries must find the library their rpath names.
                command.env_remove("LD_LIBRARY_PATH");
                command
            }
            Toolchain::Chroot(chroot) => {
                let mut command = in_chroot(chroot, &[root()], env);
                // `sh -c 'cd "$0" && exec "$@"' DIR swift ARGS…`: no quoting of ARGS.
                command.args(["/bin/sh", "-c", "cd \"$0\" && exec \"$@\""]);
                command.arg(dir).arg("swift").args(args);
                command
            }
        };
        capture(&mut command)
    }
}

impl Toolchain {
    /// Runs DocC (`docc args…`, beside `swift`) in `dir`, echoing its output.
    pub fn docc(&self, dir: &Path, args: &[String]) -> Result<String> {
        let mut command = match self {
            Toolchain::Host => {
                let mut command = Command::new("docc");
                command.args(args).current_dir(dir);
                command
            }
            Toolchain::Chroot(chroot) => {
                let mut command = in_chroot(chroot, &[root()], &[]);
                // The Debian toolchain keeps docc beside the real `swift`, off PATH.
                command.args([
                    "/bin/sh",
                    "-c",
                    "cd \"$0\" && exec \"$(dirname \"$(readlink -f \"$(command -v swift)\")\")/docc\" \"$@\"",
                ]);
                command.arg(dir).args(args);
                command
            }
        };
        capture(&mut command)
    }

    /// Runs `program args…` where `swift` runs (on the host, or in the chroot
    /// with the workspace mounted), without echoing; returns its stdout.
    pub fn run_quietly(&self, program: &str, args: &[String]) -> Result<String> {
        let mut command = match self {
            Toolchain::Host => Command::new(program),
            Toolchain::Chroot(chroot) => {
                let mut command = in_chroot(chroot, &[root()], &[]);
                command.arg(program);
                command
            }
        };
        command.args(args);
        let output = command.output().map_err(|e| format!("cannot run {command:?}: {e}"))?;
        if !output.status.success() {
            return Err(format!("{command:?} failed: {}", String::from_utf8_lossy(&output.stderr)));
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// Where a file at `path` as the toolchain sees it lies on this machine.
    pub fn host_path(&self, path: &Path) -> PathBuf {
        match self {
            Toolchain::Host => path.to_owned(),
            Toolchain::Chroot(chroot) if !path.starts_with(root()) => {
                chroot.join(path.strip_prefix("/").unwrap_or(path))
            }
            Toolchain::Chroot(_) => path.to_owned(),
        }
    }
}

/// Mounts /proc, /dev and each bind (at its own path) in `$root`, then runs
/// `chroot $root COMMAND…`. Arguments: ROOT BIND… -- COMMAND….
const MOUNT_AND_CHROOT: &str = r#"set -e
root=$1; shift
mount -t proc proc "$root/proc"
mount --rbind /dev "$root/dev"
while [ "$1" != "--" ]; do mkdir -p "$root$1"; mount --bind "$1" "$root$1"; shift; done
shift
exec chroot "$root" "$@""#;

/// A command that runs `env -i … ARGS` (ARGS: appended by the caller) in the
/// chroot, with `binds` bind-mounted at their own paths, in a private mount
/// namespace: every mount disappears when the command exits, whatever happens.
fn in_chroot(chroot: &Path, binds: &[PathBuf], env: &[(String, String)]) -> Command {
    let mut command = Command::new("unshare");
    command.args(["--mount", "--propagation", "private", "/bin/sh", "-c", MOUNT_AND_CHROOT, "sh"]);
    command.arg(chroot).args(binds).arg("--");
    command.args(["/usr/bin/env", "-i", "HOME=/root", "LANG=C.UTF-8"]);
    command.arg(format!("PATH={CHROOT_PATH}"));
    command.args(env.iter().map(|(k, v)| format!("{k}={v}")));
    command
}

/// Runs `command`, echoing stdout and stderr as they come; returns both
/// (interleaved by line); fails on a non-zero exit.
fn capture(command: &mut Command) -> Result<String> {
    eprintln!("+ {command:?}");
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start {command:?}: {e}"))?;
    let (sender, receiver) = std::sync::mpsc::channel::<String>();
    let pipes: Vec<Box<dyn Read + Send>> = vec![
        Box::new(child.stdout.take().expect("stdout is piped")),
        Box::new(child.stderr.take().expect("stderr is piped")),
    ];
    let readers: Vec<_> = pipes
        .into_iter()
        .map(|pipe| {
            let sender = sender.clone();
            thread::spawn(move || {
                for line in BufReader::new(pipe).lines().map_while(std::result::Result::ok) {
                    eprintln!("{line}");
                    let _ = sender.send(line);
                }
            })
        })
        .collect();
    drop(sender);
    let output: Vec<String> = receiver.iter().collect();
    for reader in readers {
        let _ = reader.join();
    }
    let status = child.wait().map_err(|e| format!("waiting for {command:?}: {e}"))?;
    if status.success() {
        Ok(output.join("\n"))
    } else {
        Err(format!("{command:?} failed with {status}"))
    }
}

fn chroot_dir() -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os("WEIR_SWIFT_CHROOT") {
        return Ok(PathBuf::from(dir));
    }
    let cache = match std::env::var_os("XDG_CACHE_HOME") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => PathBuf::from(std::env::var_os("HOME").ok_or("neither XDG_CACHE_HOME nor HOME is set")?).join(".cache"),
    };
    Ok(cache.join("weir").join("swift-trixie"))
}

fn is_ready(dir: &Path) -> bool {
    // `usr/bin/swift` is an absolute symlink, meaningful only inside the chroot.
    fs::symlink_metadata(dir.join("usr/bin/swift")).is_ok()
        && fs::read_to_string(dir.join(MARKER)).is_ok_and(|recipe| recipe.trim() == RECIPE)
}

/// Builds the chroot next to `dir`, then moves it into place, so an
/// interrupted build never looks ready.
fn build(dir: &Path) -> Result {
    let started = std::time::Instant::now();
    let uid = Command::new("id").arg("-u").output().map_err(|e| format!("cannot run id: {e}"))?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return Err("no swift on PATH, and building the Swift chroot needs root \
                    (debootstrap, chroot, mount): install Swift 6, or run as root"
            .to_owned());
    }
    if Command::new("debootstrap").arg("--version").output().is_err() {
        return Err("no swift on PATH, and building the Swift chroot needs debootstrap: \
                    `apt-get install -y debootstrap`, or install Swift 6"
            .to_owned());
    }
    let partial = dir.with_file_name(format!(
        "{}.partial",
        dir.file_name().and_then(|name| name.to_str()).unwrap_or("swift-trixie")
    ));
    remove_chroot(&partial)?;
    remove_chroot(dir)?;
    if let Some(parent) = partial.parent() {
        fs::create_dir_all(parent).map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    }
    let mirror = debian_mirror();
    crate::util::run(Command::new("debootstrap").args(["--variant=minbase", SUITE]).arg(&partial).arg(&mirror))?;
    // Marks the directory as ours (so a failed build can be deleted) but not ready.
    fs::write(partial.join(MARKER), "incomplete\n").map_err(|e| format!("cannot write the chroot marker: {e}"))?;
    fs::copy("/etc/resolv.conf", partial.join("etc/resolv.conf"))
        .map_err(|e| format!("cannot copy resolv.conf into the chroot: {e}"))?;
    let script = format!(
        "apt-get update -q && apt-get install -y -q --no-install-recommends {} && apt-get clean",
        PACKAGES.join(" ")
    );
    let mut command = in_chroot(&partial, &[], &[("DEBIAN_FRONTEND".to_owned(), "noninteractive".to_owned())]);
    command.args(["/bin/sh", "-c", &script]);
    crate::util::run(&mut command)?;
    fs::write(partial.join(MARKER), format!("{RECIPE}\n"))
        .map_err(|e| format!("cannot write the chroot marker: {e}"))?;
    fs::rename(&partial, dir).map_err(|e| format!("cannot move {} to {}: {e}", partial.display(), dir.display()))?;
    eprintln!("swift: chroot ready in {:.0?}", started.elapsed());
    Ok(())
}

/// The Debian mirror this machine's apt uses, else deb.debian.org.
/// `WEIR_DEBIAN_MIRROR` overrides it.
fn debian_mirror() -> String {
    if let Ok(mirror) = std::env::var("WEIR_DEBIAN_MIRROR") {
        return mirror;
    }
    let mut texts: Vec<String> = Vec::new();
    texts.extend(fs::read_to_string("/etc/apt/sources.list").ok());
    if let Ok(entries) = fs::read_dir("/etc/apt/sources.list.d") {
        let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        paths.sort();
        texts.extend(paths.iter().filter_map(|path| fs::read_to_string(path).ok()));
    }
    texts
        .iter()
        .flat_map(|text| text.lines())
        .map(str::trim)
        .filter(|line| !line.starts_with('#'))
        .flat_map(|line| line.split_whitespace())
        .map(|word| word.trim_end_matches('/'))
        .find(|word| word.starts_with("http") && word.ends_with("/debian"))
        .map_or_else(|| DEFAULT_MIRROR.to_owned(), str::to_owned)
}

/// Deletes a chroot directory, after making sure nothing is mounted in it
/// (a bind-mounted workspace must never be deleted with it).
fn remove_chroot(dir: &Path) -> Result {
    if !dir.exists() {
        return Ok(());
    }
    let ours = dir.join(MARKER).exists()
        || dir.join("debootstrap").exists()
        || fs::read_dir(dir).is_ok_and(|mut entries| entries.next().is_none());
    if !ours {
        return Err(format!(
            "{} exists but is not a Weir Swift chroot; not deleting it (move it away or set WEIR_SWIFT_CHROOT)",
            dir.display()
        ));
    }
    // Our mounts never outlive their command, but never delete through a mount.
    if let Some(point) = mounts_under(dir).first() {
        return Err(format!("{} is mounted inside {}; not deleting it", point.display(), dir.display()));
    }
    eprintln!("swift: removing {}", dir.display());
    fs::remove_dir_all(dir).map_err(|e| format!("cannot remove {}: {e}", dir.display()))
}

/// Mount points at or below `dir` (in this mount namespace).
fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let Ok(table) = fs::read_to_string("/proc/self/mounts") else {
        return Vec::new();
    };
    table
        .lines()
        .filter_map(|line| line.split_whitespace().nth(1))
        // /proc/mounts escapes spaces and the like as octal.
        .map(|point| PathBuf::from(point.replace("\\040", " ")))
        .filter(|point| point.starts_with(dir))
        .collect()
}
