//! The versions the Maven builds (the bindings' and the example's poms) and
//! the Gradle build (the root's version catalog, which every `build.gradle.kts`
//! takes its versions from) name, kept in step: `cargo xtask test --lint`
//! fails on a mismatch, or on a Gradle file that names a version itself.

use super::project;
use crate::util::{root, Result};

/// (pom property, version catalog key) of every version both builds name.
const SHARED: [(&str, &str); 5] = [
    ("kotlin.version", "kotlin"),
    ("coroutines.version", "coroutines"),
    ("jna.version", "jna"),
    ("junit.version", "junit"),
    ("dokka.version", "dokka"),
];

/// The Gradle build's files: the root's settings and each project's build.
const GRADLE_FILES: [&str; 3] =
    ["settings.gradle.kts", "bindings/kotlin/build.gradle.kts", "examples/kotlin-consumer/build.gradle.kts"];

/// A `"group:name:version"` dependency or a `version "…"` plugin in a Gradle
/// file: a version the catalog should hold.
fn pinned_coordinate(gradle: &str) -> Option<String> {
    gradle.lines().filter(|line| !line.trim_start().starts_with("//")).find_map(|line| {
        let quoted = line.split('"').skip(1).step_by(2);
        let coordinate = quoted.clone().find(|text| text.split(':').count() == 3 && !text.contains(' '));
        let plugin = line.contains(") version \"").then(|| line.trim().to_owned());
        coordinate.map(str::to_owned).or(plugin)
    })
}

fn read(path: &std::path::Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

/// The text of the first `<tag>…</tag>` in `xml` at or after `from`.
fn element<'a>(xml: &'a str, tag: &str, from: usize) -> Option<&'a str> {
    let open = format!("<{tag}>");
    let start = xml[from..].find(&open)? + from + open.len();
    let end = xml[start..].find(&format!("</{tag}>"))? + start;
    Some(xml[start..end].trim())
}

/// The project's own version: the `<version>` after `<artifactId>weir</artifactId>`.
fn pom_version(pom: &str) -> Option<&str> {
    element(pom, "version", pom.find("<artifactId>weir</artifactId>")?)
}

/// The Kotlin package's version, from its pom.
pub fn project_version() -> Result<String> {
    let pom = read(&project().join("pom.xml"))?;
    pom_version(&pom).map(str::to_owned).ok_or_else(|| "bindings/kotlin/pom.xml names no version".to_owned())
}

/// A property of the Kotlin package's pom (`junit.version`, …).
pub fn pom_property(name: &str) -> Result<String> {
    let pom = read(&project().join("pom.xml"))?;
    element(&pom, name, 0).map(str::to_owned).ok_or_else(|| format!("bindings/kotlin/pom.xml has no {name}"))
}

/// `key = "value"` in the `[versions]` table of a version catalog.
fn catalog_version<'a>(catalog: &'a str, key: &str) -> Option<&'a str> {
    let table = &catalog[catalog.find("[versions]")? + "[versions]".len()..];
    let table = &table[..table.find("\n[").unwrap_or(table.len())];
    table.lines().find_map(|line| {
        let (name, value) = line.split_once('=')?;
        (name.trim() == key).then(|| value.trim().trim_matches('"'))
    })
}

/// Fails unless the pom, the Gradle version catalog and the consumer's pom agree.
pub fn check() -> Result {
    let pom = read(&project().join("pom.xml"))?;
    let catalog = read(&root().join("gradle/libs.versions.toml"))?;
    let consumer = read(&root().join("examples/kotlin-consumer/pom.xml"))?;
    let mut mismatches = Vec::new();
    let mut expect = |what: String, want: Option<&str>, got: Option<&str>| match (want, got) {
        (Some(want), Some(got)) if want == got => {}
        _ => mismatches.push(format!(
            "{what} is {}; pom.xml says {}",
            got.unwrap_or("missing"),
            want.unwrap_or("nothing")
        )),
    };
    let version = pom_version(&pom);
    expect("gradle/libs.versions.toml's weir".into(), version, catalog_version(&catalog, "weir"));
    expect("examples/kotlin-consumer/pom.xml's weir.version".into(), version, element(&consumer, "weir.version", 0));
    for (property, key) in SHARED {
        expect(
            format!("gradle/libs.versions.toml's {key} (pom.xml: {property})"),
            element(&pom, property, 0),
            catalog_version(&catalog, key),
        );
    }
    expect(
        "the consumer's kotlin.version".into(),
        element(&pom, "kotlin.version", 0),
        element(&consumer, "kotlin.version", 0),
    );
    for file in GRADLE_FILES {
        if let Some(coordinate) = pinned_coordinate(&read(&root().join(file))?) {
            mismatches.push(format!("{file} names {coordinate} itself; take it from gradle/libs.versions.toml"));
        }
    }
    if mismatches.is_empty() {
        eprintln!("xtask: the Maven and Gradle builds and the consumer name the same versions");
        Ok(())
    } else {
        Err(format!("Kotlin build versions out of step:\n  {}", mismatches.join("\n  ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gradle_file_naming_a_version_itself_is_found() {
        assert_eq!(
            pinned_coordinate("dependencies {\n    implementation(\"net.java.dev.jna:jna:5.17.0\")\n}"),
            Some("net.java.dev.jna:jna:5.17.0".to_owned())
        );
        assert!(pinned_coordinate("plugins {\n    id(\"org.jetbrains.dokka\") version \"2.2.0\"\n}").is_some());
        // The catalog's aliases and a project dependency name none.
        assert_eq!(pinned_coordinate("implementation(project(\":weir\"))\nalias(libs.plugins.kotlin.jvm)"), None);
        // A comment may.
        assert_eq!(pinned_coordinate("// e.g. \"a:b:1.0\""), None);
    }

    #[test]
    fn reads_a_catalog_version_only_from_its_versions_table() {
        let catalog = "[versions]\nkotlin = \"2.2.21\"\njna= \"5.17.0\"\n\n[libraries]\nkotlin = { module = \"x\" }\n";
        assert_eq!(catalog_version(catalog, "kotlin"), Some("2.2.21"));
        assert_eq!(catalog_version(catalog, "jna"), Some("5.17.0"));
        assert_eq!(catalog_version(catalog, "junit"), None);
    }

    #[test]
    fn reads_the_project_version_not_a_dependency_version() {
        let pom = "<groupId>dev.weir</groupId>\n<artifactId>weir</artifactId>\n<version>0.1.0</version>\n\
                   <dependency><artifactId>jna</artifactId><version>5</version></dependency>";
        assert_eq!(pom_version(pom), Some("0.1.0"));
        assert_eq!(element(pom, "version", pom.find("jna").unwrap_or(0)), Some("5"));
    }
}
