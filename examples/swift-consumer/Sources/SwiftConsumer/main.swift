// y = 2x + y on the CPU backend, read back whole and through a view from
// another stream, checked.

import Foundation
import Weir

let runtime = try WeirRuntime.open(backend: .cpu)
let (s, t) = (runtime.defaultStream(), try runtime.newStream())
let x = try s.upload([Float(1), 2, 3, 4])
let y = try s.upload([Float(10), 20, 30, 40])
try s.axpy(2, x, y)
let values = try await t.read(y, as: Float.self)
let tail: [Float] = try await t.read(y.view(first: 2, count: 2))
let shape = "\(y.count) \(y.elementType) elements"
let device = runtime.info().name
try runtime.shutdown()

let expected: [Float] = [12, 24, 36, 48]
guard values == expected, tail == [36, 48] else {
    print("swift-consumer: expected \(expected) and a tail of [36, 48], got \(values) and \(tail)")
    exit(1)
}
print("swift-consumer: y = 2x + y on \(device): \(values) (\(shape); elements 2... \(tail))")
