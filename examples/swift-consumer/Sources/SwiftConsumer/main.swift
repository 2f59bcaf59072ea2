// y = 2x + y on the CPU backend, read back from another stream, checked.

import Foundation
import Weir

let runtime = try WeirRuntime.open(backend: .cpu)
let (s, t) = (runtime.defaultStream(), try runtime.newStream())
let x = try s.upload([Float(1), 2, 3, 4])
let y = try s.upload([Float(10), 20, 30, 40])
try s.axpy(2, x, y)
let values = try await t.read(y, as: Float.self)
let device = runtime.info().name
try runtime.shutdown()

let expected: [Float] = [12, 24, 36, 48]
guard values == expected else {
    print("swift-consumer: expected \(expected), got \(values)")
    exit(1)
}
print("swift-consumer: y = 2x + y on \(device): \(values)")
