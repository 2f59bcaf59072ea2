// Weir for Kotlin, built with Gradle: the same sources, tests and artifact as
// pom.xml, with the versions of the repository root's gradle/libs.versions.toml
// (the root settings.gradle.kts includes this project as `:weir`).
//
// Run `cargo xtask bindings kotlin` (test hooks, for `gradle check`) or
// `cargo xtask install --kotlin` (the release library) first: it generates the
// bindings into target/generated-sources/uniffi and lays the native library in
// target/generated-resources/<jna-platform>/, which the jar carries.
plugins {
    alias(libs.plugins.kotlin.jvm)
    alias(libs.plugins.dokka)
    `maven-publish`
}

group = "dev.weir"
version = libs.versions.weir.get()

kotlin {
    jvmToolchain(17)
}

java {
    withSourcesJar()
}

sourceSets {
    main {
        kotlin.srcDir("target/generated-sources/uniffi")
        resources.srcDir("target/generated-resources")
    }
}

dependencies {
    api(libs.kotlinx.coroutines.core)
    api(libs.jna)
    testImplementation(platform(libs.junit.bom))
    testImplementation(libs.junit.jupiter)
    testRuntimeOnly(libs.junit.platform.launcher)
}

tasks.test {
    useJUnitPlatform()
    // Its own JVM at a small heap, below.
    exclude("**/HeapTest*")
}

// Sustained calls in a JVM of their own at a small heap: it must stay bounded.
val boundedHeapTest by tasks.registering(Test::class) {
    testClassesDirs = sourceSets.test.get().output.classesDirs
    classpath = sourceSets.test.get().runtimeClasspath
    useJUnitPlatform()
    filter { includeTestsMatching("dev.weir.HeapTest") }
    maxHeapSize = "128m"
}

tasks.check {
    dependsOn(boundedHeapTest)
}

// Dokka's HTML as the javadoc jar, as the Maven build's `dist` profile makes it.
val javadocJar by tasks.registering(Jar::class) {
    archiveClassifier.set("javadoc")
    from(tasks.named("dokkaGeneratePublicationHtml"))
}

dokka {
    moduleName.set("Weir")
    dokkaSourceSets.configureEach {
        includes.from("src/main/dokka/module.md")
    }
}

publishing {
    publications {
        create<MavenPublication>("weir") {
            artifactId = "weir"
            from(components["java"])
            artifact(javadocJar)
        }
    }
}
