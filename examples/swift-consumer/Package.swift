// swift-tools-version:6.0
//
// A small app that depends on Weir as bindings/swift/README.md tells a user:
// `cargo xtask install --swift --to Dependencies` from the Weir checkout puts
// the package in Dependencies/Weir (not in git), then `swift run`.

import PackageDescription

let package = Package(
    name: "swift-consumer",
    dependencies: [
        .package(path: "Dependencies/Weir"),
    ],
    targets: [
        .executableTarget(
            name: "SwiftConsumer",
            dependencies: [.product(name: "Weir", package: "Weir")]
        ),
    ],
    swiftLanguageModes: [.v6]
)
