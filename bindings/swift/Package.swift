// swift-tools-version:6.0
//
// Weir for Swift: the UniFFI bindings of weir-ffi plus a small idiomatic layer.
//
// This is the development package (demo, tests), built by xtask only:
// Sources/WeirFFI/generated/ and Sources/Weir/Generated/ are written by
// `cargo xtask test --swift` (UniFFI library mode) and are not in git; the
// test-support native library is linked from `.native/debug` or
// `.native/release` with flags xtask passes. Apps depend on the installed
// package instead (`cargo xtask install --swift`, install/Package.swift). See README.md.

import PackageDescription

let package = Package(
    name: "Weir",
    platforms: [.macOS(.v13), .iOS(.v16)],
    products: [
        .library(name: "Weir", targets: ["Weir"]),
        .executable(name: "weir-demo", targets: ["WeirDemo"]),
        .executable(name: "weir-bench", targets: ["WeirBench"]),
        .executable(name: "weir-transformer", targets: ["WeirTransformerMain"]),
    ],
    targets: [
        // The C header UniFFI generates, and `link "weir_ffi"`.
        .systemLibrary(name: "WeirFFI", path: "Sources/WeirFFI"),
        // Generated bindings + the idiomatic layer (cancellation, typed buffers).
        .target(name: "Weir", dependencies: ["WeirFFI"]),
        .executableTarget(name: "WeirDemo", dependencies: ["Weir"]),
        // `cargo xtask bench --swift`: the Swift call overhead beside Rust's.
        .executableTarget(name: "WeirBench", dependencies: ["Weir"]),
        // The transformer example (README): its model, and the command that runs it.
        .target(name: "WeirTransformer", dependencies: ["Weir"]),
        .executableTarget(name: "WeirTransformerMain", dependencies: ["Weir", "WeirTransformer"]),
        .testTarget(name: "WeirTests", dependencies: ["Weir", "WeirTransformer"]),
    ],
    swiftLanguageModes: [.v6]
)
