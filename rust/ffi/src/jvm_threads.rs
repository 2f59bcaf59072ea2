//! Keeps Weir's threads that call into a hosting JVM attached to it.
//!
//! Kotlin and Java code runs on Weir's threads: coroutine continuations on
//! the wake thread (`weir-wake`), CPU kernels on the pool's workers
//! (`weir-cpu-worker`). A native thread that calls into the JVM through JNA
//! unattached is attached for the call and detached after it, which makes
//! every call several times dearer and gives the JVM a new `Thread` each
//! time. So when the process hosts a JVM, each such thread attaches itself
//! as it starts ([`weir_core::on_thread_start`]), as a daemon of its own
//! name, and detaches as it ends; JNA leaves a thread attached that it did
//! not attach. Elsewhere (Swift, Rust) this does nothing.

use std::ffi::{c_void, CString};

use jni_sys::{JNIEnv, JavaVM, JavaVMAttachArgs, JNI_OK, JNI_VERSION_1_8};

/// Has every thread of Weir's that runs foreign code attach itself to the
/// hosting JVM, if there is one, as it starts. Called as a runtime opens:
/// before any of those threads starts.
pub(crate) fn attach_as_they_start() {
    weir_core::on_thread_start(|name| {
        if let Some(vm) = hosting::jvm() {
            attach(vm, name);
        }
    });
}

/// This thread's `JNIEnv` in `vm`, attaching the thread (as a daemon of its
/// own name, until it ends) if it is not attached; `None` if the JVM
/// refuses.
pub(crate) fn env(vm: *mut JavaVM) -> Option<*mut JNIEnv> {
    if let Some(env) = attached_env(vm) {
        return Some(env);
    }
    attach(vm, std::thread::current().name().unwrap_or("weir"));
    attached_env(vm)
}

/// This thread's `JNIEnv` in `vm` if it is attached.
fn attached_env(vm: *mut JavaVM) -> Option<*mut JNIEnv> {
    let mut env: *mut c_void = std::ptr::null_mut();
    // SAFETY: a live JVM's invocation interface (it hosts this process).
    let got = unsafe { ((**vm).v1_2.GetEnv)(vm, &mut env, JNI_VERSION_1_8) };
    (got == JNI_OK && !env.is_null()).then_some(env.cast())
}

/// Detaches the thread from the JVM as the thread ends.
struct Attached(*mut JavaVM);

impl Drop for Attached {
    fn drop(&mut self) {
        // SAFETY: the JVM this thread attached to, which outlives its threads
        // (a process ends with its JVM); the thread runs no Java code now.
        unsafe { ((**self.0).v1_1.DetachCurrentThread)(self.0) };
    }
}

thread_local! {
    static ATTACHED: std::cell::RefCell<Option<Attached>> = const { std::cell::RefCell::new(None) };
}

/// Attaches the current thread, `name`, to `vm` as a daemon until it ends,
/// unless it is attached already.
fn attach(vm: *mut JavaVM, name: &str) {
    if attached_env(vm).is_some() {
        return;
    }
    let Ok(name) = CString::new(name) else { return };
    let mut env: *mut c_void = std::ptr::null_mut();
    let mut args = JavaVMAttachArgs {
        version: JNI_VERSION_1_8,
        // The JVM copies the name.
        name: name.as_ptr().cast_mut(),
        group: std::ptr::null_mut(),
    };
    // SAFETY: a live JVM's invocation interface; `env` and `args` live for the call.
    let attached =
        unsafe { ((**vm).v1_4.AttachCurrentThreadAsDaemon)(vm, &mut env, (&mut args as *mut JavaVMAttachArgs).cast()) };
    if attached == JNI_OK {
        ATTACHED.with(|slot| *slot.borrow_mut() = Some(Attached(vm)));
    }
}

#[cfg(unix)]
mod hosting {
    use std::sync::OnceLock;

    use jni_sys::{jint, jsize, JavaVM, JNI_OK};

    /// `JNI_GetCreatedJavaVMs`: the JVMs this process hosts.
    type CreatedVms = unsafe extern "system" fn(*mut *mut JavaVM, jsize, *mut jsize) -> jint;

    /// The JVM this process hosts, found once: the invocation interface of
    /// `libjvm` if the process loaded one (the `java` launcher does, globally).
    pub(super) fn jvm() -> Option<*mut JavaVM> {
        static FOUND: OnceLock<Option<usize>> = OnceLock::new();
        let found = FOUND.get_or_init(|| {
            let created = created_vms()?;
            let mut vm: *mut JavaVM = std::ptr::null_mut();
            let mut count: jsize = 0;
            // SAFETY: the JVM's own function, asked for at most one JVM into `vm`.
            let asked = unsafe { created(&mut vm, 1, &mut count) };
            (asked == JNI_OK && count > 0 && !vm.is_null()).then_some(vm as usize)
        });
        found.map(|vm| vm as *mut JavaVM)
    }

    /// `JNI_GetCreatedJavaVMs`, if a JVM's library is loaded: among the
    /// globally visible symbols, or in `libjvm` loaded by name.
    fn created_vms() -> Option<CreatedVms> {
        const SYMBOL: &[u8] = b"JNI_GetCreatedJavaVMs\0";
        let loaded = [libloading::os::unix::Library::this()].into_iter().chain(
            ["libjvm.so", "libjvm.dylib"].into_iter().filter_map(|name| {
                // SAFETY: only a library already loaded is opened (NOLOAD): no initialiser runs.
                unsafe { libloading::os::unix::Library::open(Some(name), libc::RTLD_NOLOAD | libc::RTLD_LAZY) }.ok()
            }),
        );
        for library in loaded {
            // SAFETY: the symbol is the JNI invocation function of that name, of this type.
            if let Ok(symbol) = unsafe { library.get::<CreatedVms>(SYMBOL) } {
                let created = *symbol;
                // The library stays loaded: the JVM in it runs this process.
                std::mem::forget(library);
                return Some(created);
            }
        }
        None
    }
}

#[cfg(not(unix))]
mod hosting {
    /// No JVM is looked for here: Weir's threads attach as a kernel first
    /// calls into one, or per call, as JNA does by default.
    pub(super) fn jvm() -> Option<*mut jni_sys::JavaVM> {
        None
    }
}
