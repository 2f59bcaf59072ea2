//! `cargo xtask install --kotlin`: the artifact other projects depend on, in
//! the local Maven repository; and the consumer project that checks it.

use std::path::Path;

use super::{lay_out, maven_in, project, versions};
use crate::bindings::{self, Natives, Profile};
use crate::util::{root, run, Result};

/// The largest jar an install may make: a release library is a few MB, a
/// debug one (or one with the test hooks' debug info) tens of MB.
const MAX_JAR_BYTES: u64 = 10 * 1024 * 1024;

/// Builds the release library without the test hooks, generates its
/// bindings and installs `dev.weir:weir:<version>` (jar with the library
/// under JNA's platform folder, sources jar, Dokka javadoc jar) into the
/// local Maven repository. Leaves `bindings/kotlin/target` laid out for that
/// library: `cargo xtask test --kotlin` lays it out for the suites again.
pub fn install() -> Result {
    let library = bindings::build_native(Profile::Release, Natives::Installed)?;
    lay_out(&library)?;
    refuse_test_hooks()?;
    // No tests: they need the hooks this library does not have.
    run(maven_in(&project()).args(["-Pdist", "-Dmaven.test.skip=true", "install"]))?;
    let version = versions::project_version()?;
    let target = project().join("target");
    let jar = target.join(format!("weir-{version}.jar"));
    let size = file_size(&jar)?;
    for classifier in ["sources", "javadoc"] {
        let extra = target.join(format!("weir-{version}-{classifier}.jar"));
        eprintln!("xtask: {} is {}", extra.display(), megabytes(file_size(&extra)?));
    }
    eprintln!("xtask: installed dev.weir:weir:{version}; its jar is {} ({size} bytes)", megabytes(size));
    if size > MAX_JAR_BYTES {
        return Err(format!(
            "{} is {}, over {}: not a release library?",
            jar.display(),
            megabytes(size),
            megabytes(MAX_JAR_BYTES)
        ));
    }
    Ok(())
}

/// `cargo xtask install --kotlin`, then the consumer project, run as its
/// README says: `mvn compile exec:java` in `examples/kotlin-consumer`.
pub fn consumer() -> Result {
    install()?;
    run(maven_in(&root().join("examples/kotlin-consumer")).args(["compile", "exec:java"]))
}

/// Fails unless the laid-out bindings lack the test hooks (a hook in an
/// installed artifact would be a test-support library).
fn refuse_test_hooks() -> Result {
    let file = super::generated_sources().join("dev/weir/weir.kt");
    let text = std::fs::read_to_string(&file).map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    for hook in ["fun `hold`(", "fun `debugErrorProbe`(", "DELAY"] {
        if text.contains(hook) {
            return Err(format!("{}: the installed bindings have the test hook {hook}", file.display()));
        }
    }
    Ok(())
}

fn file_size(path: &Path) -> Result<u64> {
    Ok(std::fs::metadata(path).map_err(|e| format!("{} was not made: {e}", path.display()))?.len())
}

fn megabytes(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}
