//! Runtime compilation (NVRTC, hiprtc): one driver of the program's life for
//! both, since the two APIs have the same shape.
// What NVRTC and hiprtc share: unused in a build with neither.
#![cfg_attr(not(any(feature = "cuda", feature = "hip")), allow(dead_code))]

use std::ffi::{c_char, CStr, CString};

use crate::error::{Error, Result};
use crate::info::BackendKind;

/// One runtime compiler's calls. Each returns the library's error text on failure.
///
/// # Safety
///
/// Every method calls into the compiler's library, which must be loaded. A
/// `program` passed to one is one that `create` returned and `destroy` has
/// not freed, used by one thread at a time. `options` are pointers to
/// NUL-terminated strings that live for the call; `into` points to at least
/// as many writable bytes as `log_size` (for `log`) or `code_size` (for
/// `code`) answered for that program.
pub(crate) trait Rtc {
    type Program: Copy;
    /// How errors name the compiler.
    const NAME: &'static str;

    unsafe fn create(source: &CStr, name: &CStr) -> Result<Self::Program, String>;
    unsafe fn compile(program: Self::Program, options: &[*const c_char]) -> Result<(), String>;
    unsafe fn log_size(program: Self::Program) -> Result<usize, String>;
    unsafe fn log(program: Self::Program, into: *mut c_char) -> Result<(), String>;
    unsafe fn code_size(program: Self::Program) -> Result<usize, String>;
    unsafe fn code(program: Self::Program, into: *mut c_char) -> Result<(), String>;
    unsafe fn destroy(program: Self::Program);
    /// Asks the compiler to resolve `name` (a C++ expression naming a
    /// kernel: `ops::scale<float>`), before compiling.
    unsafe fn add_name_expression(program: Self::Program, name: &CStr) -> Result<(), String>;
    /// The symbol `name` resolved to, after compiling.
    unsafe fn lowered_name(program: Self::Program, name: &CStr) -> Result<String, String>;
}

/// Implements [`Rtc`] for a compiler from its seven functions in module
/// `$api`, each status read by `$check`.
///
/// hiprtc copies NVRTC's API call for call, so the two implementations differ
/// only in names; with the calls written once, here, each compiler's module
/// keeps only what really differs: its names, its statuses and its options.
#[cfg(any(feature = "cuda", feature = "hip"))]
macro_rules! rtc_calls {
    (
        impl Rtc for $rtc:ident { NAME: $name:literal, Program: $program:ty, calls: $api:ident, check: $check:ident }
        create: $create:ident,
        compile: $compile:ident,
        destroy: $destroy:ident,
        log_size: $log_size:ident,
        log: $log:ident,
        code_size: $code_size:ident,
        code: $code:ident,
        add_name_expression: $add_name:ident,
        lowered_name: $lowered:ident $(,)?
    ) => {
        impl $crate::rtc::Rtc for $rtc {
            type Program = $program;
            const NAME: &'static str = $name;

            unsafe fn create(
                source: &::std::ffi::CStr,
                name: &::std::ffi::CStr,
            ) -> ::std::result::Result<$program, String> {
                let mut program = ::std::ptr::null_mut();
                // SAFETY: NUL-terminated strings; no headers.
                let result = unsafe {
                    $api::$create(
                        &mut program,
                        source.as_ptr(),
                        name.as_ptr(),
                        0,
                        ::std::ptr::null(),
                        ::std::ptr::null(),
                    )
                };
                $check(result).map(|()| program)
            }

            unsafe fn compile(
                program: $program,
                options: &[*const ::std::ffi::c_char],
            ) -> ::std::result::Result<(), String> {
                // SAFETY: a live program (trait contract) and valid option strings.
                $check(unsafe { $api::$compile(program, options.len() as i32, options.as_ptr()) })
            }

            unsafe fn log_size(program: $program) -> ::std::result::Result<usize, String> {
                let mut size = 0;
                // SAFETY: a live program (trait contract).
                $check(unsafe { $api::$log_size(program, &mut size) }).map(|()| size)
            }

            unsafe fn log(program: $program, into: *mut ::std::ffi::c_char) -> ::std::result::Result<(), String> {
                // SAFETY: `into` holds `log_size` bytes (trait contract).
                $check(unsafe { $api::$log(program, into) })
            }

            unsafe fn code_size(program: $program) -> ::std::result::Result<usize, String> {
                let mut size = 0;
                // SAFETY: a compiled program (trait contract).
                $check(unsafe { $api::$code_size(program, &mut size) }).map(|()| size)
            }

            unsafe fn code(program: $program, into: *mut ::std::ffi::c_char) -> ::std::result::Result<(), String> {
                // SAFETY: `into` holds `code_size` bytes (trait contract).
                $check(unsafe { $api::$code(program, into) })
            }

            unsafe fn destroy(mut program: $program) {
                // SAFETY: a live program, destroyed once by its owner (trait contract).
                let _ = unsafe { $api::$destroy(&mut program) };
            }

            unsafe fn add_name_expression(
                program: $program,
                name: &::std::ffi::CStr,
            ) -> ::std::result::Result<(), String> {
                // SAFETY: a live program, not yet compiled (trait contract); a NUL-terminated name.
                $check(unsafe { $api::$add_name(program, name.as_ptr()) })
            }

            unsafe fn lowered_name(
                program: $program,
                name: &::std::ffi::CStr,
            ) -> ::std::result::Result<String, String> {
                let mut lowered: *const ::std::ffi::c_char = ::std::ptr::null();
                // SAFETY: a compiled program to which `name` was added (trait
                // contract); the compiler owns the string it points `lowered`
                // at until the program is destroyed, so it is copied at once.
                unsafe {
                    $check($api::$lowered(program, name.as_ptr(), &mut lowered))?;
                    if lowered.is_null() {
                        return Err("no lowered name".to_owned());
                    }
                    Ok(::std::ffi::CStr::from_ptr(lowered).to_string_lossy().into_owned())
                }
            }
        }
    };
}
#[cfg(any(feature = "cuda", feature = "hip"))]
pub(crate) use rtc_calls;

/// A program, destroyed once.
struct Program<R: Rtc>(R::Program);

impl<R: Rtc> Drop for Program<R> {
    fn drop(&mut self) {
        // SAFETY: made by `R::create` and destroyed only here.
        unsafe { R::destroy(self.0) };
    }
}

impl<R: Rtc> Program<R> {
    fn log(&self) -> String {
        // SAFETY: a live program; the buffer has the size the compiler reported.
        let log = unsafe {
            R::log_size(self.0).and_then(|size| {
                let mut log = vec![0u8; size.max(1)];
                R::log(self.0, log.as_mut_ptr().cast()).map(|()| log)
            })
        };
        log.map(|log| String::from_utf8_lossy(&log).trim_end_matches('\0').trim().to_owned()).unwrap_or_default()
    }
}

/// A compiled program: its code image, and the symbol its name expression
/// resolved to, if it was given one.
#[derive(Debug)]
pub struct Compiled {
    pub image: Vec<u8>,
    pub lowered: Option<String>,
}

/// Compiles `source` with `options` to the compiler's code image, resolving
/// `name_expression` (a C++ name of a kernel) if given. A source that does
/// not compile, or names no such kernel, is an invalid argument, with the
/// compiler's log.
pub(crate) fn compile<R: Rtc>(
    backend: BackendKind,
    source: &str,
    options: &[String],
    name_expression: Option<&str>,
) -> Result<Compiled> {
    let failed = |call: &str, message: String| Error::backend(backend, format!("{} {call}: {message}", R::NAME));
    let source = CString::new(source).map_err(|_| Error::invalid("kernel source contains a NUL byte"))?;
    let options = options
        .iter()
        .map(|option| CString::new(option.as_str()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| Error::invalid("compiler option contains a NUL byte"))?;
    let pointers: Vec<*const c_char> = options.iter().map(|o| o.as_ptr()).collect();
    let name = name_expression
        .map(|name| CString::new(name).map_err(|_| Error::invalid(format!("kernel name {name:?} contains a NUL byte"))))
        .transpose()?;
    // SAFETY: NUL-terminated source and name.
    let program = Program::<R>(unsafe { R::create(&source, c"weir_kernels") }.map_err(|e| failed("create", e))?);
    if let Some(name) = &name {
        // SAFETY: a live program, not yet compiled; a NUL-terminated name.
        unsafe { R::add_name_expression(program.0, name) }.map_err(|e| failed("add name expression", e))?;
    }
    // SAFETY: a live program; `pointers` are valid C strings that outlive the call.
    if let Err(status) = unsafe { R::compile(program.0, &pointers) } {
        return Err(Error::invalid(format!("{backend} kernel does not compile ({status}): {}", program.log())));
    }
    let lowered = match (&name, name_expression) {
        // SAFETY: a compiled program to which `name` was added.
        (Some(name), Some(expression)) => Some(
            unsafe { R::lowered_name(program.0, name) }
                .map_err(|status| Error::invalid(format!("no kernel named {expression:?} in its source ({status})")))?,
        ),
        _ => None,
    };
    // SAFETY: a compiled program; the buffer has the size the compiler reported.
    unsafe {
        let size = R::code_size(program.0).map_err(|e| failed("code size", e))?;
        let mut image = vec![0u8; size];
        R::code(program.0, image.as_mut_ptr().cast()).map_err(|e| failed("code", e))?;
        Ok(Compiled { image, lowered })
    }
}
