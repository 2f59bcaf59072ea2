//! The Kotlin package: natives, bindings, Maven tests and the Kotlin demo.

use std::path::PathBuf;

use crate::bindings::{self, Profile};
use crate::util::{root, run, Result};

/// The Maven project.
fn project() -> PathBuf {
    root().join("bindings/kotlin")
}

/// Where the generated Kotlin goes (a Maven source root, under `target/`).
pub fn generated_sources() -> PathBuf {
    project().join("target/generated-sources/uniffi")
}

/// Where the native library goes: a resource root, so the jar carries it
/// under JNA's platform folder.
fn generated_resources() -> PathBuf {
    project().join("target/generated-resources")
}

/// JNA's resource folder for this platform.
fn jna_platform() -> &'static str {
    if cfg!(all(target_os = "linux", target_arch = "x86_64")) {
        "linux-x86-64"
    } else if cfg!(all(target_os = "linux", target_arch = "aarch64")) {
        "linux-aarch64"
    } else if cfg!(all(target_os = "macos", target_arch = "aarch64")) {
        "darwin-aarch64"
    } else if cfg!(target_os = "macos") {
        "darwin-x86-64"
    } else {
        "win32-x86-64"
    }
}

/// Builds the native library, generates the bindings and lays the library
/// where Maven packs it.
pub fn prepare(profile: Profile) -> Result {
    let library = bindings::native(profile)?;
    bindings::generate("kotlin", &library, &generated_sources())?;
    let platform = generated_resources().join(jna_platform());
    std::fs::create_dir_all(&platform).map_err(|e| format!("cannot create {}: {e}", platform.display()))?;
    let target = platform.join(bindings::library_file());
    std::fs::copy(&library, &target)
        .map_err(|e| format!("cannot copy {} to {}: {e}", library.display(), target.display()))?;
    Ok(())
}

/// `mvn` in batch mode, in the Maven project.
fn maven() -> std::process::Command {
    let mut command = std::process::Command::new("mvn");
    command.args(["-B", "-q", "-f"]).arg(project().join("pom.xml"));
    command
}

/// Kotlin tests: natives (release), bindings, then `mvn verify` (JUnit 5).
pub fn test() -> Result {
    prepare(Profile::Release)?;
    run(maven().arg("verify"))
}

/// The Kotlin demo: a coroutine app running a two-stream pipeline.
pub fn demo(args: &[String]) -> Result {
    prepare(Profile::Release)?;
    run(maven().args(["-DskipTests", "package"]))?;
    let demo_args = args.join(" ");
    run(maven().args([
        "exec:java",
        "-Dexec.mainClass=dev.weir.demo.DemoKt",
        "-Dexec.classpathScope=test",
        &format!("-Dexec.args={demo_args}"),
    ]))
}
