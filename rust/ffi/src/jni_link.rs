//! Binds the JNI entries (`encoded.rs`, `array_copy.rs`, `jvm_kernel.rs`) to their Kotlin
//! declarations in a JVM that loaded this library through JNA only.
//!
//! The JVM links a `native` method by looking its symbol up in a library it
//! loaded itself (`System.load`), and JNA loads the library its own way: the
//! jar's copy, unpacked to a file it deletes once loaded, so the JVM would
//! have to load a second copy, with statics of its own. Instead the binding
//! calls [`weir_ffi_register_natives`] through JNA, once, and it hands the
//! JVM each entry's address (`RegisterNatives`): one library, loaded once.

use std::ffi::{c_char, c_void, CStr};

use jni_sys::{jclass, jint, JNINativeMethod, JNI_OK};

use crate::array_copy::{
    Java_dev_weir_NativeCopy_stageFloats, Java_dev_weir_NativeCopy_stageInts, Java_dev_weir_NativeCopy_toBytes,
    Java_dev_weir_NativeCopy_toDirect, Java_dev_weir_NativeCopy_toFloats, Java_dev_weir_NativeCopy_toInts,
};
use crate::encoded::Java_dev_weir_NativeExecute_execute;
use crate::jvm_kernel::Java_dev_weir_NativeKernels_bind;

/// One native method: its name, its JNI signature, its entry.
type Entry = (&'static CStr, &'static CStr, *mut c_void);

/// Every class with native methods, and its methods, as the Kotlin binding
/// declares them (`NativeLink.kt`).
fn classes() -> [(&'static CStr, Vec<Entry>); 3] {
    [
        (
            c"dev/weir/NativeKernels",
            vec![(c"bind", c"(Ldev/weir/CpuKernelFunction;)J", Java_dev_weir_NativeKernels_bind as _)],
        ),
        (c"dev/weir/NativeExecute", vec![(c"execute", c"(JJJIIJJJJ)I", Java_dev_weir_NativeExecute_execute as _)]),
        (
            c"dev/weir/NativeCopy",
            vec![
                (c"toFloats", c"(JJ[FII)Z", Java_dev_weir_NativeCopy_toFloats as _),
                (c"toInts", c"(JJ[III)Z", Java_dev_weir_NativeCopy_toInts as _),
                (c"toBytes", c"(JJ[BII)Z", Java_dev_weir_NativeCopy_toBytes as _),
                (c"toDirect", c"(JJLjava/nio/ByteBuffer;II)Z", Java_dev_weir_NativeCopy_toDirect as _),
                (c"stageFloats", c"(J[FII)J", Java_dev_weir_NativeCopy_stageFloats as _),
                (c"stageInts", c"(J[III)J", Java_dev_weir_NativeCopy_stageInts as _),
            ],
        ),
    ]
}

/// Binds every JNI entry to its Kotlin declaration: 1 once all are bound,
/// 0 if one is not (a class not found, a signature that does not match),
/// with the JVM's exception cleared; the binding then makes every call the
/// generated way.
///
/// # Safety
///
/// `env` is the calling thread's `JNIEnv`, passed by JNA from a method of a
/// class whose loader can see the classes named in [`classes`]: `FindClass`
/// looks them up with it.
#[no_mangle]
pub unsafe extern "system" fn weir_ffi_register_natives(env: *mut jni_sys::JNIEnv) -> u8 {
    for (class, methods) in classes() {
        let table: Vec<JNINativeMethod> = methods
            .iter()
            .map(|&(name, signature, entry)| JNINativeMethod {
                // The JVM only reads them: `*mut` is how the C header spells the fields.
                name: name.as_ptr().cast_mut(),
                signature: signature.as_ptr().cast_mut(),
                fnPtr: entry,
            })
            .collect();
        // SAFETY: this function's contract; the names are NUL-terminated and
        // outlive the calls, and `table` holds `methods.len()` entries.
        let bound = unsafe { bind(env, class.as_ptr(), &table) };
        if !bound {
            return 0;
        }
    }
    1
}

/// Registers `table` for the class named `class`; false (the exception
/// cleared) if the class is not found or the JVM refuses a method.
///
/// # Safety
///
/// As for [`weir_ffi_register_natives`]; `class` is NUL-terminated.
unsafe fn bind(env: *mut jni_sys::JNIEnv, class: *const c_char, table: &[JNINativeMethod]) -> bool {
    let Ok(count) = jint::try_from(table.len()) else { return false };
    // SAFETY: the thread's live `JNIEnv` (see the caller); JNI 1.1 calls.
    unsafe {
        let found: jclass = ((**env).v1_1.FindClass)(env, class);
        let bound = !found.is_null() && ((**env).v1_1.RegisterNatives)(env, found, table.as_ptr(), count) == JNI_OK;
        if !found.is_null() {
            ((**env).v1_1.DeleteLocalRef)(env, found);
        }
        if !bound {
            ((**env).v1_1.ExceptionClear)(env);
        }
        bound
    }
}
