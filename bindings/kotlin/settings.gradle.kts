// The Gradle build of Weir for Kotlin, beside the Maven one (pom.xml), which
// CI runs. Versions: gradle/libs.versions.toml (Gradle reads it as `libs`).
rootProject.name = "weir"

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
