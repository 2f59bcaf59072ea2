//! Runtime compilation (NVRTC, hiprtc): one driver of the program's life for
//! both, since the two APIs have the same shape.

use std::ffi::{c_char, CStr, CString};

use crate::error::{Error, Result};

/// One runtime compiler's calls. Each returns the library's error text on failure.
///
/// Valid usage: `program` is one `create` returned and `destroy` has not freed.
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
}

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

/// Compiles `source` with `options` to the compiler's code image. A source
/// that does not compile is an invalid argument, with the compiler's log.
pub(crate) fn compile<R: Rtc>(backend: &str, source: &str, options: &[String]) -> Result<Vec<u8>> {
    let failed = |call: &str, message: String| Error::backend(backend, format!("{} {call}: {message}", R::NAME));
    let source = CString::new(source).map_err(|_| Error::invalid("kernel source contains a NUL byte"))?;
    let options = options
        .iter()
        .map(|option| CString::new(option.as_str()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| Error::invalid("compiler option contains a NUL byte"))?;
    let pointers: Vec<*const c_char> = options.iter().map(|o| o.as_ptr()).collect();
    // SAFETY: NUL-terminated source and name.
    let program = Program::<R>(unsafe { R::create(&source, c"weir_kernels") }.map_err(|e| failed("create", e))?);
    // SAFETY: a live program; `pointers` are valid C strings that outlive the call.
    if let Err(status) = unsafe { R::compile(program.0, &pointers) } {
        return Err(Error::invalid(format!("{backend} kernel does not compile ({status}): {}", program.log())));
    }
    // SAFETY: a compiled program; the buffer has the size the compiler reported.
    unsafe {
        let size = R::code_size(program.0).map_err(|e| failed("code size", e))?;
        let mut image = vec![0u8; size];
        R::code(program.0, image.as_mut_ptr().cast()).map_err(|e| failed("code", e))?;
        Ok(image)
    }
}
