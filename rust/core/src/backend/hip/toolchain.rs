//! hiprtc's output read without a device, for the tests of the toolchain
//! and of the argument check (test support only).

use crate::backend::KernelArg;
use crate::device::BackendKind;
use crate::error::{Error, Result};
use crate::kernel::{DeviceCode, Kernel};
use weir_device::hip::{hiprtc, metadata};

/// Compiles the built-in kernels for an AMD GPU architecture (`gfx90a`, …)
/// without a device; returns the code object. For tests of the toolchain.
#[doc(hidden)]
pub fn compile_builtins_for(arch: &str) -> Result<Vec<u8>> {
    compile_for(arch, weir_device::builtin::cuda_source())
}

/// Compiles HIP C `source` for an AMD GPU architecture without a device.
#[doc(hidden)]
pub fn compile_for(arch: &str, source: &str) -> Result<Vec<u8>> {
    hiprtc::compile(source, Some(arch), &[], None).map(|compiled| compiled.image)
}

/// The byte size of each parameter of kernel `entry` in a code object from
/// [`compile_for`], hidden arguments left out, as a launch reads them. An
/// entry the code object lacks is an invalid argument naming it.
#[doc(hidden)]
pub fn param_sizes_in(image: &[u8], entry: &str) -> Result<Vec<usize>> {
    let kernels = metadata::kernels(image)
        .ok_or_else(|| Error::backend(BackendKind::Hip, "the code object's kernel metadata cannot be read"))?;
    kernels
        .iter()
        .find(|kernel| kernel.is(entry))
        .map(metadata::KernelInfo::param_sizes)
        .ok_or_else(|| Error::invalid(format!("no kernel named {entry:?} in its source")))
}

/// Checks `args` (buffers and scalars, as a launch passes them; the spans'
/// buffers are not looked at) against the parameters of `kernel`'s HIP
/// source compiled for `arch`, without a device: the sizes its code object
/// declares, compared by the check a launch's `prepare` makes.
#[doc(hidden)]
pub fn check_arguments_for(arch: &str, kernel: &Kernel, args: &[KernelArg<()>]) -> Result<()> {
    let custom =
        kernel.as_custom().ok_or_else(|| Error::invalid(format!("{} is not a custom kernel", kernel.name())))?;
    let source = custom
        .hip
        .as_ref()
        .ok_or_else(|| Error::unsupported(BackendKind::Hip, format!("kernel {} has no HIP C source", custom.name)))?;
    let sizes = match &source.code {
        DeviceCode::Source(code) => {
            // As a launch finds it: as written, else resolved as a C++ name.
            let plain = hiprtc::compile(code, Some(arch), &source.options, None)?;
            match param_sizes_in(&plain.image, &source.entry) {
                Ok(sizes) => sizes,
                Err(not_found) => {
                    let resolved = hiprtc::compile(code, Some(arch), &source.options, Some(&source.entry))
                        .map_err(|_| not_found)?;
                    param_sizes_in(&resolved.image, resolved.lowered.as_deref().unwrap_or(&source.entry))?
                }
            }
        }
        DeviceCode::Module(image) => param_sizes_in(image, &source.entry)?,
    };
    super::HipBackend::check_params(custom, &sizes, args)
}
