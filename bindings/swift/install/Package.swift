// swift-tools-version:6.0
//
// Weir for Swift, installed: what `cargo xtask install --swift --to DIR`
// writes to DIR/Weir. It holds the bindings of a release weir-ffi built
// without test hooks, and that library in lib/. Depend on it with
//
//     .package(path: "DIR/Weir")
//     .product(name: "Weir", package: "Weir")
//
// The library is linked from lib/ beside this manifest and found there at run
// time (an rpath to this folder), so consumers need no linker flags and no
// library path. Move the folder and its consumers rebuild against the new place.
//
// (The package in the Weir repository, bindings/swift, is the development one:
// tests and demo, against a test-support build that xtask links.)

import Foundation
import PackageDescription

/// The native library's folder: lib/, beside this manifest.
let lib = URL(fileURLWithPath: Context.packageDirectory).appendingPathComponent("lib").path

let package = Package(
    name: "Weir",
    platforms: [.macOS(.v13), .iOS(.v16)],
    products: [
        .library(name: "Weir", targets: ["Weir"]),
    ],
    targets: [
        // The C header UniFFI generates, and `link "weir_ffi"`.
        .systemLibrary(name: "WeirFFI", path: "Sources/WeirFFI"),
        // Generated bindings + the idiomatic layer (cancellation, typed buffers, errors).
        .target(
            name: "Weir",
            dependencies: ["WeirFFI"],
            linkerSettings: [.unsafeFlags(["-L", lib, "-Xlinker", "-rpath", "-Xlinker", lib])]
        ),
    ],
    swiftLanguageModes: [.v6]
)
