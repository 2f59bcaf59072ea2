//! Copies between JVM arrays (and direct buffers) and Rust's host memory, through JNI.
//!
//! JNA copies into a Java array with the JVM's own element loop
//! (`Pointer.read`, which is JNI's `Set<Type>ArrayRegion`), and NIO into a
//! direct buffer likewise. On a large server, copying 256 MiB that way took
//! 47–51 ms; the C library's `memcpy` took 24 ms into a direct buffer, but
//! 39–41 ms into a Java array (the JVM's heap takes stores more slowly than
//! `malloc`'s memory there; why, we did not find). So these entries take the
//! elements in place (`GetPrimitiveArrayCritical`; a direct buffer's
//! address), copy with `memcpy`, and split a large slice of an array among
//! up to [`COPY_THREADS`] threads. Slices bound how long a critical section
//! holds the JVM's collector back.
//!
//! Uploads go the other way: [`Java_dev_weir_NativeCopy_stageFloats`] and
//! its siblings fill staging memory of the runtime's (page-locked on CUDA
//! and HIP) from an array in the same way, and hand it back as a new
//! [`HostBytes`] for the binding's `writeHost`, where the binding used to
//! fill it with NIO's copy.
//!
//! Every range is checked here against the [`HostBytes`] and the array's (or
//! buffer's) real length: a bad one copies nothing and answers `false`, as
//! does a JVM that cannot lend the elements; the binding then copies the
//! generated way, which raises the error if there is one.

use std::sync::Arc;

use jni_sys::{jarray, jclass, jobject, JNI_ABORT};

use crate::bulk::HostBytes;
use crate::encoded::borrowed;
use crate::stream::WeirStream;

/// A `JNIEnv*`: the calling thread's pointer to the JVM's table of JNI
/// functions, typed as the JNI specification lays it out (`jni-sys`). The
/// table's parts are read by the JNI version that added each function (1.1,
/// 1.2, 1.4): every JVM the Kotlin bindings run on (Java 17) has them all.
type Env = *mut jni_sys::JNIEnv;

/// Bytes copied per critical section: a few milliseconds of copying.
const SLICE_BYTES: usize = 32 << 20;

/// Threads that copy one slice into an array at most (the calling one included).
const COPY_THREADS: usize = 4;

/// Bytes per copying thread at least: below it, a thread costs more than it saves.
const BYTES_PER_THREAD: usize = 4 << 20;

/// `host`'s bytes `host_offset..host_offset + len`, when they exist.
fn source(host: &HostBytes, host_offset: i64, len: usize) -> Option<&[u8]> {
    let start = usize::try_from(host_offset).ok()?;
    host.as_bytes().get(start..start.checked_add(len)?)
}

/// Copies `count` `WIDTH`-byte elements of `host` from byte `host_offset`
/// into the Java array `array` from element `at`: true once all are copied.
///
/// # Safety
///
/// `env` is the calling thread's `JNIEnv`, `array` a live local reference to
/// a Java primitive array of `WIDTH`-byte elements, and `host` a live UniFFI
/// handle of a [`HostBytes`] that the caller keeps alive for the call.
unsafe fn to_array<const WIDTH: usize>(
    env: Env,
    host: i64,
    host_offset: i64,
    array: jarray,
    at: i32,
    count: i32,
) -> u8 {
    // SAFETY: the caller passes a live handle and keeps it for the call.
    let host = unsafe { borrowed::<HostBytes>(host) };
    // SAFETY: as this function's own contract.
    let Some(range) = (unsafe { array_range::<WIDTH>(env, array, at, count) }) else { return 0 };
    let Some(bytes) = source(host, host_offset, range.len()) else { return 0 };
    // SAFETY: as this function's own contract; the host bytes are not the JVM's.
    let copied = unsafe {
        with_elements(env, array, range.clone(), JNI_COMMIT_AND_FREE, |elements, slice| {
            copy_in_parts(&bytes[slice.start - range.start..slice.end - range.start], elements.add(slice.start));
        })
    };
    u8::from(copied)
}

/// Fills new staging memory of `stream`'s runtime with `count` `WIDTH`-byte
/// elements of the Java array `array` from element `at`: its [`HostBytes`]
/// handle (owned by the caller), or 0 if it made none.
///
/// # Safety
///
/// `env` is the calling thread's `JNIEnv`, `array` a live local reference to
/// a Java primitive array of `WIDTH`-byte elements, and `stream` a live
/// UniFFI handle of a [`WeirStream`] that the caller keeps alive for the call.
unsafe fn stage_array<const WIDTH: usize>(env: Env, stream: i64, array: jarray, at: i32, count: i32) -> i64 {
    // SAFETY: the caller passes a live handle and keeps it for the call.
    let stream = unsafe { borrowed::<WeirStream>(stream) };
    // SAFETY: as this function's own contract.
    let Some(range) = (unsafe { array_range::<WIDTH>(env, array, at, count) }) else { return 0 };
    let Ok(mut staging) = stream.core().staging_buffer(range.len()) else { return 0 };
    let Some(bytes) = staging.get_mut().filter(|bytes| bytes.len() == range.len()) else { return 0 };
    let to = bytes.as_mut_ptr();
    // SAFETY: as this function's own contract; `to` holds `range.len()`
    // bytes of fresh staging memory nothing else holds.
    let copied = unsafe {
        with_elements(env, array, range.clone(), JNI_ABORT, |elements, slice| {
            let from = std::slice::from_raw_parts(elements.add(slice.start), slice.len());
            copy_in_parts(from, to.add(slice.start - range.start));
        })
    };
    if !copied {
        return 0;
    }
    let host = Arc::new(HostBytes::new(staging));
    <HostBytes as uniffi::HandleAlloc<crate::UniFfiTag>>::new_handle(host).as_raw() as i64
}

/// The bytes of elements `at..at + count` of `array`, checked against its
/// length; `None` for a range outside it.
///
/// # Safety
///
/// `env` is the calling thread's `JNIEnv` and `array` a live local reference
/// to a Java primitive array of `WIDTH`-byte elements.
unsafe fn array_range<const WIDTH: usize>(
    env: Env,
    array: jarray,
    at: i32,
    count: i32,
) -> Option<std::ops::Range<usize>> {
    // SAFETY: `env` is the thread's live `JNIEnv` (of JNI 1.1 or later) and
    // `array` a live reference to an array (the caller's promise).
    let elements = usize::try_from(unsafe { ((**env).v1_1.GetArrayLength)(env, array) }).ok()?;
    let (at, count) = (usize::try_from(at).ok()?, usize::try_from(count).ok()?);
    let end = at.checked_add(count).filter(|&end| end <= elements)?;
    Some(at * WIDTH..end * WIDTH)
}

/// Release mode 0: written back if the JVM lent a copy, then released
/// (`JNI_ABORT`: released without writing back, nothing changed).
const JNI_COMMIT_AND_FREE: i32 = 0;

/// Runs `copy` over `range` (bytes of `array`) in slices of at most
/// [`SLICE_BYTES`], each with the array's elements held in place (the
/// elements' address and the slice's byte range); false, after the slices
/// done so far, if the JVM would not lend them.
///
/// # Safety
///
/// `env` is the calling thread's `JNIEnv`, `array` a live local reference to
/// a Java primitive array whose bytes include `range`, and `copy` makes no
/// JNI call and waits for nothing of the JVM's, as a critical section
/// requires; `mode` says whether the array was written.
unsafe fn with_elements(
    env: Env,
    array: jarray,
    range: std::ops::Range<usize>,
    mode: i32,
    mut copy: impl FnMut(*mut u8, std::ops::Range<usize>),
) -> bool {
    // SAFETY: `env` is the thread's live `JNIEnv` (the caller's promise), of
    // JNI 1.2 or later (see `Env`).
    let (get, release) =
        unsafe { ((**env).v1_2.GetPrimitiveArrayCritical, (**env).v1_2.ReleasePrimitiveArrayCritical) };
    let mut start = range.start;
    while start < range.end {
        let end = range.end.min(start + SLICE_BYTES);
        // SAFETY: a live array reference; while the elements are held this
        // thread makes no JNI call and waits only for the copying threads,
        // which are not the JVM's and call nothing of it.
        let elements = unsafe { get(env, array, std::ptr::null_mut()) };
        if elements.is_null() {
            return false;
        }
        copy(elements.cast::<u8>(), start..end);
        // SAFETY: the elements just taken, released once, in `mode`.
        unsafe { release(env, array, elements, mode) };
        start = end;
    }
    true
}

/// Copies `from` to `to`, split among up to [`COPY_THREADS`] threads; the
/// calling thread copies the first part, and any part whose thread could
/// not be started.
///
/// # Safety
///
/// `to` is valid for writes of `from.len()` bytes that nothing else reads
/// or writes during the call, and does not overlap `from`.
unsafe fn copy_in_parts(from: &[u8], to: *mut u8) {
    let parallelism = std::thread::available_parallelism().map_or(1, usize::from);
    let threads = (from.len() / BYTES_PER_THREAD).clamp(1, COPY_THREADS.min(parallelism));
    let part = from.len().div_ceil(threads).max(1);
    // An address, not a pointer, so that the parts can cross to their threads.
    let to = to as usize;
    let copy = move |index: usize, source: &[u8]| {
        // SAFETY: part `index` lands at `to + index × part`, inside the
        // `from.len()` bytes the caller lends, and no two parts overlap.
        unsafe { std::ptr::copy_nonoverlapping(source.as_ptr(), (to + index * part) as *mut u8, source.len()) }
    };
    let mut parts = from.chunks(part).enumerate();
    let first = parts.next();
    std::thread::scope(|scope| {
        for (index, source) in parts {
            let thread = std::thread::Builder::new().name("weir-copy".into());
            if thread.spawn_scoped(scope, move || copy(index, source)).is_err() {
                copy(index, source);
            }
        }
        if let Some((index, source)) = first {
            copy(index, source);
        }
    });
}

/// One JNI entry per Java array type.
macro_rules! to_array_entry {
    ($($entry:ident: $java:literal, $width:literal;)*) => {$(
        #[doc = concat!("A `dev.weir.NativeCopy` method: copies `count` elements of `host` from byte `host_offset` into the `", $java, "` `array` from index `at`; 1 once done, 0 if it copied nothing (a bad range, or the JVM did not lend the elements).")]
        ///
        /// # Safety
        ///
        /// Called by the JVM for that native method, whose array parameter
        #[doc = concat!("is a `", $java, "`, with `host` a live UniFFI handle of a")]
        /// [`HostBytes`] the caller keeps alive for the call.
        #[no_mangle]
        pub unsafe extern "system" fn $entry(
            env: Env,
            _class: jclass,
            host: i64,
            host_offset: i64,
            array: jarray,
            at: i32,
            count: i32,
        ) -> u8 {
            // SAFETY: the JVM passes an array of this width's elements (the
            // method's declared type), and the caller keeps `host` alive.
            unsafe { to_array::<$width>(env, host, host_offset, array, at, count) }
        }
    )*};
}

to_array_entry! {
    Java_dev_weir_NativeCopy_toFloats: "float[]", 4;
    Java_dev_weir_NativeCopy_toInts: "int[]", 4;
    Java_dev_weir_NativeCopy_toBytes: "byte[]", 1;
}

/// One staging entry per Java array type.
macro_rules! stage_array_entry {
    ($($entry:ident: $java:literal, $width:literal;)*) => {$(
        #[doc = concat!("A `dev.weir.NativeCopy` method: new staging memory of `stream`'s runtime holding `count` elements of the `", $java, "` `array` from index `at`, as a `HostBytes` handle the caller owns; 0 if it made none (a bad range, no memory, or the JVM did not lend the elements).")]
        ///
        /// # Safety
        ///
        /// Called by the JVM for that native method, whose array parameter
        #[doc = concat!("is a `", $java, "`, with `stream` a live UniFFI handle of a")]
        /// [`WeirStream`] the caller keeps alive for the call.
        #[no_mangle]
        pub unsafe extern "system" fn $entry(env: Env, _class: jclass, stream: i64, array: jarray, at: i32, count: i32) -> i64 {
            // SAFETY: the JVM passes an array of this width's elements (the
            // method's declared type), and the caller keeps `stream` alive.
            unsafe { stage_array::<$width>(env, stream, array, at, count) }
        }
    )*};
}

stage_array_entry! {
    Java_dev_weir_NativeCopy_stageFloats: "float[]", 4;
    Java_dev_weir_NativeCopy_stageInts: "int[]", 4;
}

/// `dev.weir.NativeCopy.toDirect`: copies `len` bytes of `host` from byte
/// `host_offset` into the direct `java.nio.ByteBuffer` `buffer` from byte
/// `at` (of its capacity); 1 once done, 0 if it copied nothing (a bad range,
/// or a buffer that is not direct).
///
/// # Safety
///
/// Called by the JVM for that native method, with `host` a live UniFFI
/// handle of a [`HostBytes`] the caller keeps alive for the call, and a
/// `buffer` whose memory nothing frees during the call (the reference keeps
/// a direct buffer's memory alive).
#[no_mangle]
pub unsafe extern "system" fn Java_dev_weir_NativeCopy_toDirect(
    env: Env,
    _class: jclass,
    host: i64,
    host_offset: i64,
    buffer: jobject,
    at: i32,
    len: i32,
) -> u8 {
    // SAFETY: the caller passes a live handle and keeps it for the call.
    let host = unsafe { borrowed::<HostBytes>(host) };
    // SAFETY: the thread's live `JNIEnv` (JNI 1.4 or later, see `Env`) and a
    // live reference; either call answers null / -1 for a buffer that is
    // not direct.
    let (address, capacity) = unsafe {
        (((**env).v1_4.GetDirectBufferAddress)(env, buffer), ((**env).v1_4.GetDirectBufferCapacity)(env, buffer))
    };
    let (Ok(at), Ok(len), Ok(capacity)) = (usize::try_from(at), usize::try_from(len), usize::try_from(capacity)) else {
        return 0;
    };
    if address.is_null() || at.checked_add(len).is_none_or(|end| end > capacity) {
        return 0;
    }
    let Some(bytes) = source(host, host_offset, len) else { return 0 };
    // SAFETY: `at..at + len` lies inside the buffer's capacity (checked
    // above), whose memory lives as long as the reference. A direct buffer
    // may be a view of these very host bytes, so the copy allows overlap.
    unsafe { std::ptr::copy(bytes.as_ptr(), address.cast::<u8>().add(at), len) };
    1
}
