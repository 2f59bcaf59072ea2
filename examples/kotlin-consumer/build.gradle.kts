// The Kotlin example in the root Gradle build (../../settings.gradle.kts):
// the same application as pom.xml, depending on the bindings' project
// instead of the installed artifact. `gradle :kotlin-consumer:run` after
// `cargo xtask bindings kotlin` (see bindings/kotlin/build.gradle.kts).
plugins {
    alias(libs.plugins.kotlin.jvm)
    application
}

kotlin {
    jvmToolchain(17)
}

dependencies {
    implementation(project(":weir"))
}

application {
    mainClass = "example.MainKt"
}
