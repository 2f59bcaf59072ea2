//! Kotlin and Java CPU kernels called through JNI.
//!
//! A CPU kernel's body written in Kotlin reaches Rust as a `CpuKernelBody`.
//! Called through UniFFI's callback, each call is a JNA callback: its
//! arguments and return buffer are JNA structures built and read by
//! reflection, about 20–40 µs a call, where the kernel itself may take one.
//! So where the binding's JNI entries are bound (`jni_link.rs`), it binds
//! the body here instead ([`Java_dev_weir_NativeKernels_bind`]: a global
//! reference to it, under a token) and takes the Rust body made for that
//! token ([`cpu_kernel_bound_in_jvm`]), which the worker calls: one JNI
//! call to `NativeKernels.run`, on a thread the library keeps attached
//! (`jvm_threads.rs`), with the call's arguments packed in one `long[]`
//! ([`CpuKernelCall::packed`]): the binding reads them there, with no call
//! per argument and no UniFFI object to make and close.

use std::collections::HashMap;
use std::ffi::CStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use jni_sys::{jclass, jmethodID, jobject, jvalue, JNIEnv, JavaVM, JNI_OK};

use crate::error::{Result, WeirError};
use crate::host_kernel::{CpuKernelBody, CpuKernelCall};
use crate::jvm_threads;
use crate::lock::lock;

/// `NativeKernels` and its `run`, as a global reference and a method id:
/// valid while the class is loaded, which the global reference ensures.
struct Entry {
    class: jclass,
    run: jmethodID,
}

// SAFETY: a global reference and a method id may be used from any thread
// attached to their JVM; neither is ever freed (the class stays loaded).
unsafe impl Send for Entry {}
// SAFETY: as above; they are only read.
unsafe impl Sync for Entry {}

static ENTRY: OnceLock<Entry> = OnceLock::new();

/// Bodies bound and not yet taken, by token.
static BOUND: Mutex<Option<HashMap<u64, Arc<JvmBody>>>> = Mutex::new(None);
static NEXT_TOKEN: AtomicU64 = AtomicU64::new(1);

/// A Kotlin body, held by a global reference.
pub(crate) struct JvmBody {
    vm: *mut JavaVM,
    body: jobject,
}

// SAFETY: the JVM pointer is process-wide, and a global reference may be
// used from any thread attached to its JVM, which every use here is.
unsafe impl Send for JvmBody {}
// SAFETY: as above; both are only read.
unsafe impl Sync for JvmBody {}

/// `dev.weir.NativeKernels.bind`: holds `body` (a `CpuKernelFunction`)
/// by a global reference under a new token, for [`cpu_kernel_bound_in_jvm`];
/// 0 if it cannot (the JVM refused a reference, or `run` was not found).
///
/// # Safety
///
/// Called by the JVM for that native method: `env` is the thread's live
/// `JNIEnv`, `class` is `NativeKernels`, `body` a live local reference.
#[no_mangle]
pub unsafe extern "system" fn Java_dev_weir_NativeKernels_bind(env: *mut JNIEnv, class: jclass, body: jobject) -> i64 {
    // SAFETY: this function's contract; JNI 1.4 calls (see `array_copy::Env`).
    unsafe {
        let functions = &(**env).v1_4;
        if ENTRY.get().is_none() {
            let run = (functions.GetStaticMethodID)(
                env,
                class,
                c"run".as_ptr(),
                c"(Ldev/weir/CpuKernelFunction;[J)Ljava/lang/String;".as_ptr(),
            );
            let global = (functions.NewGlobalRef)(env, class);
            if run.is_null() || global.is_null() {
                (functions.ExceptionClear)(env);
                return 0;
            }
            if ENTRY.set(Entry { class: global, run }).is_err() {
                // Another thread bound one first: the same class.
                (functions.DeleteGlobalRef)(env, global);
            }
        }
        let mut vm: *mut JavaVM = std::ptr::null_mut();
        let held = (functions.NewGlobalRef)(env, body);
        if held.is_null() || (functions.GetJavaVM)(env, &mut vm) != JNI_OK || vm.is_null() {
            if !held.is_null() {
                (functions.DeleteGlobalRef)(env, held);
            }
            (functions.ExceptionClear)(env);
            return 0;
        }
        let token = NEXT_TOKEN.fetch_add(1, Ordering::Relaxed);
        lock(&BOUND).get_or_insert_with(HashMap::new).insert(token, Arc::new(JvmBody { vm, body: held }));
        token as i64
    }
}

/// The CPU kernel body bound in the JVM under `token` (once): for the
/// Kotlin binding's `cpuKernel`, which binds a body through JNI first. An
/// unknown token (or one taken already) is `InvalidArgument`.
#[uniffi::export]
pub fn cpu_kernel_bound_in_jvm(token: u64) -> Result<Arc<dyn CpuKernelBody>> {
    let bound = lock(&BOUND).as_mut().and_then(|bound| bound.remove(&token));
    match bound {
        Some(body) => Ok(body),
        None => Err(WeirError::invalid(format!("no CPU kernel body is bound in the JVM under token {token}"))),
    }
}

impl CpuKernelBody for JvmBody {
    fn run(&self, call: Arc<CpuKernelCall>) -> Option<String> {
        let Some(entry) = ENTRY.get() else { return Some("the JVM's kernel entry is not bound".to_owned()) };
        let Some(env) = jvm_threads::env(self.vm) else {
            return Some("this thread could not be attached to the JVM".to_owned());
        };
        // The arguments go as one array of numbers, read without a call per argument.
        let packed = match call.packed() {
            Ok(packed) => packed,
            Err(error) => return Some(error.to_string()),
        };
        let Ok(length) = i32::try_from(packed.len()) else {
            return Some("the kernel call has more arguments than one JVM array holds".to_owned());
        };
        // SAFETY: `env` is this thread's, attached; the class, method and
        // body references are live global ones; the array is made here with
        // `length` elements and filled from `packed`, which holds as many;
        // the arguments match `run`'s signature. The local frame frees what
        // the call makes.
        unsafe {
            let functions = &(**env).v1_4;
            if (functions.PushLocalFrame)(env, 4) != JNI_OK {
                (functions.ExceptionClear)(env);
                return Some("the JVM refused a local frame for the kernel call".to_owned());
            }
            let array = (functions.NewLongArray)(env, length);
            if array.is_null() {
                (functions.ExceptionClear)(env);
                (functions.PopLocalFrame)(env, std::ptr::null_mut());
                return Some("the JVM refused an array for the kernel's arguments".to_owned());
            }
            (functions.SetLongArrayRegion)(env, array, 0, length, packed.as_ptr());
            let args = [jvalue { l: self.body }, jvalue { l: array }];
            let returned = (functions.CallStaticObjectMethodA)(env, entry.class, entry.run, args.as_ptr());
            let outcome = if (functions.ExceptionCheck)(env) {
                (functions.ExceptionClear)(env);
                Some("the kernel's call into the JVM threw".to_owned())
            } else if returned.is_null() {
                None
            } else {
                let chars = (functions.GetStringUTFChars)(env, returned, std::ptr::null_mut());
                let message = match chars.is_null() {
                    true => {
                        // It raised an `OutOfMemoryError`: left pending, the
                        // next kernel's JNI calls on this thread would be made
                        // with an exception pending, which JNI forbids.
                        (functions.ExceptionClear)(env);
                        "the kernel failed (its message could not be read)".to_owned()
                    }
                    false => {
                        let message = CStr::from_ptr(chars).to_string_lossy().into_owned();
                        (functions.ReleaseStringUTFChars)(env, returned, chars);
                        message
                    }
                };
                Some(message)
            };
            (functions.PopLocalFrame)(env, std::ptr::null_mut());
            outcome
        }
    }
}

impl Drop for JvmBody {
    fn drop(&mut self) {
        // Dropped wherever the kernel goes: attached for the call if need be.
        if let Some(env) = jvm_threads::env(self.vm) {
            // SAFETY: a live global reference of this JVM, deleted once.
            unsafe { ((**env).v1_4.DeleteGlobalRef)(env, self.body) };
        }
    }
}
