// weir-ffi's C entry for one op encoded as one op of the batch encoding
// (rust/ffi/src/encoded.rs): written by hand, since UniFFI generates no
// declaration for a function it does not export.
#pragma once

#include <stddef.h>
#include <stdint.h>

// Admits the execute op in the `len` bytes at `encoding` on `stream`, kernel
// slot 0 being `kernel` and buffer slots 0 to `count - 1` the handles at
// `buffers`. Only borrows the handles: the caller keeps their objects alive
// for the call.
// Returns 1 once admitted, 2 when refused (`takeExecuteRefusal()` throws its
// error), 0 when not taken (make the generated call instead).
int32_t weir_ffi_execute_encoded(uint64_t stream, uint64_t kernel, const uint8_t *encoding, size_t len,
                                 const uint64_t *buffers, size_t count);
