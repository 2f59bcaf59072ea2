//! One op admitted through a single call with only handles and integers:
//! a JNI entry for Kotlin, a C entry for Swift.
//!
//! `WeirStream::execute` takes its grid and argument list as a record and a
//! sequence, which UniFFI passes as `RustBuffer`s. In Kotlin each of those is
//! a JNA structure passed by value (allocated by a call of its own, written
//! and read reflectively): about 3 µs apiece, where admitting the op costs
//! 0.3 µs in Rust; and every handle argument is cloned by a JNA call of its
//! own first (0.1 µs each). So the Kotlin binding encodes the op, as one op
//! of the batch encoding (`batch.rs`), into memory of its own and calls
//! [`Java_dev_weir_NativeExecute_execute`] once, through JNI, lending the
//! stream's, the kernel's and up to four buffers' handles for the call.
//!
//! This entry only admits. An op the core refuses is not made again: its
//! error waits in this thread for the binding to raise it through the
//! generated [`take_execute_refusal`], typed as every error is (a refusal may
//! have published failed versions, which a second call would publish again).
//! What this entry cannot take (a malformed encoding, a panic while it
//! decodes) admits nothing, and the binding makes the call the generated
//! way. A panic inside the core's admission is a refusal (`Bug`), not
//! "not taken": the op may be half admitted, and a second call would admit
//! it again.
//!
//! Swift passes a `RustBuffer` as a plain C struct, but its generated call
//! still serialises the grid and the argument list into two of them (each
//! allocated and freed by Rust), which Rust then parses: the Swift binding's
//! built-in ops encode the op on the stack instead and call
//! [`weir_ffi_execute_encoded`], the same admission through C, lending the
//! handles as Kotlin does: a Swift object hands one over only by a cloning
//! call into Rust of its own (and a release here), three of them for a fill.

use std::ops::Deref;
use std::panic::AssertUnwindSafe;

use crate::batch::{Reader, OP_EXECUTE};
use crate::buffer::Buffer;
use crate::error::{Result, WeirError};
use crate::kernel::Kernel;
use crate::stream::WeirStream;

/// What the JNI entry did with an op, as it returns it to the binding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
enum Outcome {
    /// Not taken: admitted nothing; the binding makes the generated call.
    NotTaken = 0,
    Admitted = 1,
    /// Refused by the core, its error kept for [`take_execute_refusal`].
    Refused = 2,
}

thread_local! {
    /// The error of the last op this thread's JNI entry saw refused.
    static REFUSAL: std::cell::RefCell<Option<WeirError>> = const { std::cell::RefCell::new(None) };
}

/// Raises the error of the op that the JNI entry last refused on this
/// thread, once; nothing if there is none. The Kotlin binding calls it when
/// the entry answers that it refused an op.
#[uniffi::export]
pub fn take_execute_refusal() -> Result<()> {
    match REFUSAL.with(|refusal| refusal.borrow_mut().take()) {
        Some(error) => Err(error),
        None => Ok(()),
    }
}

impl WeirStream {
    /// Admits the execute op encoded in `bytes`, whose kernel slot 0 is
    /// `kernel` and whose buffer slots index `buffers`; an error of the core
    /// is kept for [`take_execute_refusal`].
    fn admit_encoded<B: Deref<Target = Buffer>>(&self, kernel: &Kernel, bytes: &[u8], buffers: &[B]) -> Outcome {
        match self.decode_and_admit(kernel, bytes, buffers) {
            Ok(()) => Outcome::Admitted,
            Err(Some(refused)) => {
                REFUSAL.with(|refusal| *refusal.borrow_mut() = Some(refused));
                Outcome::Refused
            }
            Err(None) => Outcome::NotTaken,
        }
    }

    /// [`WeirStream::admit_encoded`] with buffer slot `i` being `buffer(i)`,
    /// for `i` below `count`: up to four with no allocation (the entries'
    /// common case: no built-in op takes more).
    fn admit_encoded_each<'b>(
        &self,
        kernel: &Kernel,
        bytes: &[u8],
        count: usize,
        buffer: impl Fn(usize) -> &'b Buffer,
    ) -> Outcome {
        match count {
            0 => self.admit_encoded::<&Buffer>(kernel, bytes, &[]),
            1 => self.admit_encoded(kernel, bytes, &[buffer(0)]),
            2 => self.admit_encoded(kernel, bytes, &[buffer(0), buffer(1)]),
            3 => self.admit_encoded(kernel, bytes, &[buffer(0), buffer(1), buffer(2)]),
            4 => self.admit_encoded(kernel, bytes, &[buffer(0), buffer(1), buffer(2), buffer(3)]),
            _ => self.admit_encoded(kernel, bytes, &(0..count).map(buffer).collect::<Vec<_>>()),
        }
    }

    /// Admits the op in `bytes`: `Err(None)` where it does not decode (nothing
    /// admitted), `Err(Some(error))` where the core refused it.
    fn decode_and_admit<B: Deref<Target = Buffer>>(
        &self,
        kernel: &Kernel,
        bytes: &[u8],
        buffers: &[B],
    ) -> std::result::Result<(), Option<WeirError>> {
        let kernels = [kernel];
        let mut args = Vec::new();
        let Ok((kernel, grid)) = decode(bytes, &kernels, buffers, &mut args) else { return Err(None) };
        core_admission(|| self.core().execute(kernel, grid, &args))
    }
}

/// The execute op in `bytes`, its arguments into `args`, or why it does not decode.
fn decode<'s, B: Deref<Target = Buffer>>(
    bytes: &[u8],
    kernels: &'s [&Kernel],
    buffers: &'s [B],
    args: &mut Vec<weir_core::Arg<'s>>,
) -> Result<(&'s weir_core::Kernel, weir_core::Grid)> {
    let mut reader = Reader::new(bytes);
    let tag = reader.u8()?;
    if tag != OP_EXECUTE {
        return Err(reader.error(format!("op tag {tag}, but only an execute op ({OP_EXECUTE}) is taken here")));
    }
    let op = reader.execute(kernels, buffers, args)?;
    if !reader.is_done() {
        return Err(reader.error("bytes after the op"));
    }
    Ok(op)
}

/// The core's answer to one admission; a panic in it is a refusal (`Bug`).
fn core_admission(admit: impl FnOnce() -> weir_core::Result<()>) -> std::result::Result<(), Option<WeirError>> {
    match std::panic::catch_unwind(AssertUnwindSafe(admit)) {
        Ok(admitted) => admitted.map_err(|refused| Some(refused.into())),
        Err(_) => Err(Some(WeirError::Bug { description: "the core panicked while it admitted an op".to_owned() })),
    }
}

/// The object behind a UniFFI handle of a Rust object: UniFFI makes the
/// handle from `Arc::into_raw` (`uniffi::Handle::from_arc`), so it is a
/// pointer to the object.
///
/// # Safety
///
/// `handle` is a live UniFFI handle of a `T`, which the caller keeps alive
/// for `'a`.
pub(crate) unsafe fn borrowed<'a, T>(handle: i64) -> &'a T {
    // SAFETY: by the caller's promise the pointer is the `Arc`'s, alive for 'a.
    unsafe { &*uniffi::Handle::from_raw_unchecked(handle as u64).as_pointer::<T>() }
}

/// `dev.weir.NativeExecute.execute`, the Kotlin binding's JNI entry (see the
/// module docs): admits the execute op in the `len` bytes at `encoding` on
/// `stream`, kernel slot 0 being `kernel` and buffer slots 0 to `count - 1`
/// being `buffer0` to `buffer3`. Returns 1 once admitted, 2 when the core
/// refused it (its error waits for [`take_execute_refusal`]), 0 when it
/// did not take it (the binding then makes the call the generated way).
///
/// # Safety
///
/// The caller (the Kotlin binding, through the JVM) passes live UniFFI
/// handles of a `WeirStream`, a `Kernel` and `count` (at most 4) `Buffer`s,
/// which it keeps alive for the call without lending them to Rust to keep
/// (Rust only borrows them), and the address of `len` bytes that nothing
/// writes during the call.
#[no_mangle]
#[allow(clippy::too_many_arguments)] // the JNI signature: one handle per parameter
pub unsafe extern "system" fn Java_dev_weir_NativeExecute_execute(
    _env: *mut jni_sys::JNIEnv,
    _class: jni_sys::jclass,
    stream: i64,
    kernel: i64,
    encoding: i64,
    len: i32,
    count: i32,
    buffer0: i64,
    buffer1: i64,
    buffer2: i64,
    buffer3: i64,
) -> i32 {
    let (Ok(len), Ok(count)) = (usize::try_from(len), usize::try_from(count)) else { return Outcome::NotTaken as i32 };
    // No bytes (a null address, as C passes none) hold no op; a slice made
    // over a null address would be undefined behaviour even when empty.
    if count > 4 || len == 0 || encoding == 0 {
        return Outcome::NotTaken as i32;
    }
    let admitted = std::panic::catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the caller passes live handles of these types and keeps
        // them alive for the call, and `len` bytes at `encoding` that nothing
        // writes meanwhile (this function's contract); the same for the
        // first `count` buffer handles, the only ones read.
        let (stream, kernel, bytes) = unsafe {
            (
                borrowed::<WeirStream>(stream),
                borrowed::<Kernel>(kernel),
                std::slice::from_raw_parts(encoding as usize as *const u8, len),
            )
        };
        let handles = [buffer0, buffer1, buffer2, buffer3];
        // SAFETY: as above, for the first `count` handles (`count` <= 4).
        stream.admit_encoded_each(kernel, bytes, count, |i| unsafe { borrowed::<Buffer>(handles[i]) })
    }));
    admitted.unwrap_or(Outcome::NotTaken) as i32
}

/// The Swift binding's entry (see the module docs): admits the execute op
/// in the `len` bytes at `encoding` on `stream`, kernel slot 0 being
/// `kernel` and buffer slots 0 to `count - 1` the handles at `buffers`.
/// Returns as the JNI entry does: 1 admitted, 2 refused (its error waits
/// for [`take_execute_refusal`]), 0 not taken (then the binding makes the
/// generated call). Like the JNI entry it only borrows the handles: the
/// binding reads them in place, without the clone per object that UniFFI's
/// Swift objects make to hand one over.
///
/// # Safety
///
/// `stream`, `kernel` and the `count` handles at `buffers` are live UniFFI
/// handles of a `WeirStream`, a `Kernel` and `Buffer`s, which the caller
/// keeps alive for the call without lending them to Rust to keep (Rust only
/// borrows them); `encoding` points to `len` bytes that nothing writes
/// during the call.
#[no_mangle]
pub unsafe extern "C" fn weir_ffi_execute_encoded(
    stream: u64,
    kernel: u64,
    encoding: *const u8,
    len: usize,
    buffers: *const u64,
    count: usize,
) -> i32 {
    // As the JNI entry: no bytes hold no op, and no slice is made over a null address.
    if len == 0 || encoding.is_null() || (count > 0 && buffers.is_null()) {
        return Outcome::NotTaken as i32;
    }
    let admitted = std::panic::catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the caller passes live handles of these types, kept alive
        // for the call, `count` of them at `buffers`, and `len` bytes at
        // `encoding` that nothing writes meanwhile (this function's contract).
        let (stream, kernel, handles, bytes) = unsafe {
            (
                borrowed::<WeirStream>(stream as i64),
                borrowed::<Kernel>(kernel as i64),
                if count == 0 { &[][..] } else { std::slice::from_raw_parts(buffers, count) },
                std::slice::from_raw_parts(encoding, len),
            )
        };
        // SAFETY: as above, for each of the `count` buffer handles.
        stream.admit_encoded_each(kernel, bytes, count, |i| unsafe { borrowed::<Buffer>(handles[i] as i64) })
    }));
    admitted.unwrap_or(Outcome::NotTaken) as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_bytes_at_a_null_address_are_not_taken_before_any_handle_is_read() {
        // The handles are not live: an entry that read them, or made a slice
        // over the null address, would crash here instead of answering.
        // SAFETY: the contract's pointers are null with lengths 0, which the
        // entry refuses before it reads anything.
        let swift = unsafe { weir_ffi_execute_encoded(0, 0, std::ptr::null(), 0, std::ptr::null(), 0) };
        assert_eq!(swift, Outcome::NotTaken as i32);
        // SAFETY: as above.
        let swift = unsafe { weir_ffi_execute_encoded(0, 0, [0u8].as_ptr(), 1, std::ptr::null(), 1) };
        assert_eq!(swift, Outcome::NotTaken as i32, "a buffer count with no handles");
        // SAFETY: as above; the JNI entry reads neither its environment nor its class.
        let jvm = unsafe {
            Java_dev_weir_NativeExecute_execute(std::ptr::null_mut(), std::ptr::null_mut(), 0, 0, 0, 0, 0, 0, 0, 0, 0)
        };
        assert_eq!(jvm, Outcome::NotTaken as i32);
    }

    #[test]
    fn a_panic_in_the_core_admission_is_a_refusal_not_a_second_chance() {
        // "Not taken" would make the binding admit the op again the generated
        // way, though the core may have admitted part of it.
        let outcome = core_admission(|| panic!("a broken invariant"));
        assert!(matches!(outcome, Err(Some(WeirError::Bug { .. }))), "{outcome:?}");
        assert!(core_admission(|| Ok(())).is_ok());
        let refused = core_admission(|| Err(weir_core::Error::Closed));
        assert!(matches!(refused, Err(Some(WeirError::Closed { .. }))), "{refused:?}");
    }
}
