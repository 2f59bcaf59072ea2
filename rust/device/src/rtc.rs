//! Runtime compilation (NVRTC, hiprtc): the program's whole life written
//! once for both (`rtc_compile!`), since the two APIs have the same shape.
// What NVRTC and hiprtc share: unused in a build with neither.
#![cfg_attr(not(any(feature = "cuda", feature = "hip")), allow(dead_code))]

use std::ffi::{c_char, CString};

use crate::error::{Error, Result};

/// A compiled program: its code image, and the symbol its name expression
/// resolved to, if it was given one.
#[derive(Debug)]
pub struct Compiled {
    pub image: Vec<u8>,
    pub lowered: Option<String>,
}

/// What a compile hands the compiler, as C strings.
pub(crate) struct Inputs {
    pub source: CString,
    pub options: Vec<CString>,
    pub name: Option<CString>,
}

impl Inputs {
    pub fn new(source: &str, options: &[String], name_expression: Option<&str>) -> Result<Self> {
        let source = CString::new(source).map_err(|_| Error::invalid("kernel source contains a NUL byte"))?;
        let options = options
            .iter()
            .map(|option| CString::new(option.as_str()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| Error::invalid("compiler option contains a NUL byte"))?;
        let name = name_expression
            .map(|name| {
                CString::new(name).map_err(|_| Error::invalid(format!("kernel name {name:?} contains a NUL byte")))
            })
            .transpose()?;
        Ok(Inputs { source, options, name })
    }

    /// The options as the compile call takes them, valid while `self` is.
    pub fn option_pointers(&self) -> Vec<*const c_char> {
        self.options.iter().map(|option| option.as_ptr()).collect()
    }
}

/// The compiler's log as text, tidied; empty where it could not be read.
pub(crate) fn log_text(log: Result<Vec<u8>, String>) -> String {
    log.map(|log| String::from_utf8_lossy(&log).trim_end_matches('\0').trim().to_owned()).unwrap_or_default()
}

/// Writes `fn compile_program(source, options, name_expression)`, which
/// compiles `source` with `options` to the compiler's code image, resolving
/// `name_expression` (a C++ name of a kernel: `ops::scale<float>`) if
/// given. A source that does not compile, or names no such kernel, is an
/// invalid argument, with the compiler's log; errors name the compiler `$name`.
///
/// The calls are the compiler's functions in module `$api`, each status
/// read by `$check` (the library's text on failure). hiprtc copies NVRTC's
/// API call for call, so the two differ only in names; with the compile
/// written once, here, each compiler's module keeps only what really
/// differs: its names, its statuses and its options.
#[cfg(any(feature = "cuda", feature = "hip"))]
macro_rules! rtc_compile {
    (
        $backend:expr, $name:literal, calls: $api:ident, check: $check:ident;
        create: $create:ident,
        add_name_expression: $add_name:ident,
        compile: $compile:ident,
        log_size: $log_size:ident,
        log: $log:ident,
        lowered_name: $lowered:ident,
        code_size: $code_size:ident,
        code: $code:ident,
        destroy: $destroy:ident $(,)?
    ) => {
        fn compile_program(
            source: &str,
            options: &[String],
            name_expression: Option<&str>,
        ) -> $crate::error::Result<$crate::rtc::Compiled> {
            use ::std::ptr::{null, null_mut};
            use $crate::error::Error;
            let failed = |call: &str, message: String| Error::backend($backend, format!("{} {call}: {message}", $name));
            let inputs = $crate::rtc::Inputs::new(source, options, name_expression)?;
            let mut program = null_mut();
            // SAFETY: NUL-terminated source and name; no headers.
            let created = unsafe {
                $api::$create(&mut program, inputs.source.as_ptr(), c"weir_kernels".as_ptr(), 0, null(), null())
            };
            $check(created).map_err(|e| failed("create", e))?;
            // Destroys the program however its compile ends.
            // SAFETY: a live program (the guard's copy of the handle), destroyed
            // once, here, after its last use below.
            let _destroy = scopeguard::guard(program, |mut program| {
                let _ = unsafe { $api::$destroy(&mut program) };
            });
            if let Some(name) = &inputs.name {
                // SAFETY: a live program, not yet compiled; a NUL-terminated name.
                $check(unsafe { $api::$add_name(program, name.as_ptr()) })
                    .map_err(|e| failed("add name expression", e))?;
            }
            let pointers = inputs.option_pointers();
            // SAFETY: a live program; `pointers` are C strings that outlive the call.
            if let Err(status) = $check(unsafe { $api::$compile(program, pointers.len() as i32, pointers.as_ptr()) }) {
                let mut size = 0;
                // SAFETY: a live program; the buffer has the size the compiler reported.
                let log = unsafe {
                    $check($api::$log_size(program, &mut size)).and_then(|()| {
                        let mut log = vec![0u8; size.max(1)];
                        $check($api::$log(program, log.as_mut_ptr().cast())).map(|()| log)
                    })
                };
                let log = $crate::rtc::log_text(log);
                return Err(Error::invalid(format!("{} kernel does not compile ({status}): {log}", $backend)));
            }
            let lowered = match (&inputs.name, name_expression) {
                (Some(name), Some(expression)) => {
                    let mut lowered: *const ::std::ffi::c_char = null();
                    // SAFETY: a compiled program to which `name` was added; the
                    // compiler owns the string it points `lowered` at until the
                    // program is destroyed, so it is copied at once.
                    let resolved = unsafe {
                        $check($api::$lowered(program, name.as_ptr(), &mut lowered)).and_then(|()| {
                            match lowered.is_null() {
                                true => Err("no lowered name".to_owned()),
                                false => Ok(::std::ffi::CStr::from_ptr(lowered).to_string_lossy().into_owned()),
                            }
                        })
                    };
                    let no_kernel =
                        |status| Error::invalid(format!("no kernel named {expression:?} in its source ({status})"));
                    Some(resolved.map_err(no_kernel)?)
                }
                _ => None,
            };
            let mut size = 0;
            // SAFETY: a compiled program.
            $check(unsafe { $api::$code_size(program, &mut size) }).map_err(|e| failed("code size", e))?;
            let mut image = vec![0u8; size];
            // SAFETY: a compiled program; the buffer has the size the compiler reported.
            $check(unsafe { $api::$code(program, image.as_mut_ptr().cast()) }).map_err(|e| failed("code", e))?;
            Ok($crate::rtc::Compiled { image, lowered })
        }
    };
}
#[cfg(any(feature = "cuda", feature = "hip"))]
pub(crate) use rtc_compile;
