// The Gradle build of Weir's JVM parts, beside the Maven ones CI runs: the
// Kotlin bindings (`:weir`, bindings/kotlin) and the Kotlin example that
// depends on them (`:kotlin-consumer`, examples/kotlin-consumer). Versions:
// gradle/libs.versions.toml, which Gradle reads as `libs`.
rootProject.name = "weir-jvm"

pluginManagement {
    repositories {
        gradlePluginPortal()
        mavenCentral()
    }
}

dependencyResolutionManagement {
    repositories {
        mavenCentral()
    }
}

include(":weir")
project(":weir").projectDir = file("bindings/kotlin")

include(":kotlin-consumer")
project(":kotlin-consumer").projectDir = file("examples/kotlin-consumer")
