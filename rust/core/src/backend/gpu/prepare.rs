//! What `prepare` makes of a command, outside the scheduler's ordering
//! boundary: the built-ins' launches, custom kernels compiled and loaded
//! (their arguments checked against their parameters), and upload bytes
//! staged in page-locked memory; everything but the buffers' addresses.

use std::sync::Arc;

use super::device::Loan;
use super::staging::Staged;
use super::{Driver, GpuBackend};
use crate::backend::{KernelArg, Span};
use crate::device::BackendKind;
use crate::error::{Error, Result};
use crate::kernel::{CustomKernel, Grid};
use crate::lock::lock;
use weir_device::builtin::BuiltinKernel;
use weir_device::modules::{Function, Param, Params};

/// Threads per block of the built-in kernels.
const BLOCK: u32 = 256;
/// The built-ins loop over their elements, so a bounded grid covers any size.
const MAX_GROUPS: u64 = 65_535;

/// What [`Backend::prepare`](crate::backend::Backend::prepare) made for one command: everything its driver
/// calls need but its buffers' addresses, which only `enqueue` may read.
pub(crate) enum Prepared<D: Driver> {
    /// Memsets and device copies: the driver call is all there is.
    Direct,
    /// A kernel launch.
    Launch(PreparedLaunch<D>),
    /// An upload: the host bytes already in page-locked memory, and how many.
    Upload(Staged, u64),
    /// A download: the page-locked memory the bytes will land in.
    Download(Loan),
}

/// A launch made ready outside the boundary: the function compiled and
/// loaded, the grid, and every parameter but the buffer addresses.
pub(crate) struct PreparedLaunch<D: Driver> {
    pub(super) launch: ReadyLaunch<D>,
    /// The parameters that take buffer addresses, in the order the command
    /// names its buffers.
    pub(super) pointers: smallvec::SmallVec<[usize; 8]>,
}

/// A launch with every parameter filled: what the driver call takes, and
/// no more, since it is queued by value for the issuing thread to read.
pub(crate) struct ReadyLaunch<D: Driver> {
    pub(super) function: D::Function,
    pub(super) grid: Grid,
    pub(super) params: Params,
}

impl<D: Driver> GpuBackend<D> {
    /// A built-in launch over the 4-byte words of `operands`, the last the
    /// one it writes: a placeholder pointer per operand, filled by `enqueue`,
    /// then the scalar's bits, if any, then the word count (every built-in's
    /// last parameter).
    pub(super) fn builtin<R>(&self, kernel: BuiltinKernel, operands: &[&Span<R>], scalar: Option<u32>) -> Prepared<D> {
        let words = operands.last().map_or(0, |over| over.len / 4);
        let groups = words.div_ceil(u64::from(BLOCK)).clamp(1, MAX_GROUPS) as u32;
        let grid = Grid::new([groups, 1, 1], [BLOCK, 1, 1]);
        // On the stack: a built-in takes at most five parameters.
        let mut params: smallvec::SmallVec<[Param; 8]> = smallvec::SmallVec::new();
        for _ in operands {
            params.push(Param::Pointer(0));
        }
        if let Some(scalar) = scalar {
            params.push(Param::U32(scalar));
        }
        params.push(Param::U64(words));
        Prepared::Launch(PreparedLaunch::new(self.builtins.get(kernel), grid, &params))
    }

    /// The test hooks' delay: one thread that spins for `duration`.
    #[cfg(feature = "test-support")]
    pub(super) fn delay(&self, duration: std::time::Duration) -> Prepared<D> {
        let ticks = self.driver().delay_ticks(duration);
        let grid = Grid::new([1, 1, 1], [1, 1, 1]);
        Prepared::Launch(PreparedLaunch::new(self.builtins.get(BuiltinKernel::Delay), grid, &[Param::U64(ticks)]))
    }

    fn custom_source(kernel: &CustomKernel) -> Option<&crate::DeviceKernel> {
        match D::KIND {
            BackendKind::Cuda => kernel.cuda.as_ref(),
            BackendKind::Hip => kernel.hip.as_ref(),
            _ => None,
        }
    }

    /// The loaded function of `kernel`: from the per-kernel cache, else
    /// compiled (or found by its source) and loaded; a source that does not
    /// compile is an invalid argument carrying the compiler's log.
    fn custom_function(&self, kernel: &Arc<CustomKernel>) -> Result<Function<D>> {
        // Keyed by the kernel's address, checked against a weak handle: a
        // kernel dropped and another made at the same address is not mistaken
        // for it. Saves hashing the source on every launch.
        let key = Arc::as_ptr(kernel) as usize;
        if let Some((known, function)) = lock(&self.by_kernel).get(&key) {
            // A live kernel's address is its own: same address and alive is the same kernel.
            if known.strong_count() > 0 && std::ptr::eq(known.as_ptr(), Arc::as_ptr(kernel)) {
                return Ok(function.clone());
            }
        }
        let source = Self::custom_source(kernel).ok_or_else(|| {
            Error::unsupported(D::KIND, format!("kernel {} has no {} source", kernel.name, D::KIND.name()))
        })?;
        // Module loads need the device current on this thread, which may be any.
        self.driver().bind()?;
        let function = self.device.kernels.function(self.driver(), source)?;
        let mut by_kernel = lock(&self.by_kernel);
        by_kernel.retain(|_, (known, _)| known.strong_count() > 0);
        by_kernel.insert(key, (Arc::downgrade(kernel), function.clone()));
        Ok(function)
    }

    /// A launch of a custom kernel, its arguments checked against its parameters.
    pub(super) fn prepare_custom<R>(
        &self,
        kernel: &Arc<CustomKernel>,
        grid: &Grid,
        args: &[KernelArg<R>],
    ) -> Result<Prepared<D>> {
        let function = self.custom_function(kernel)?;
        if let Some(sizes) = &function.param_sizes {
            Self::check_params(kernel, sizes, args)?;
        }
        let function = function.raw;
        let mut params: smallvec::SmallVec<[Param; 8]> = smallvec::SmallVec::with_capacity(args.len());
        for arg in args {
            params.push(match arg {
                KernelArg::Buffer(..) => Param::Pointer(0),
                KernelArg::Scalar(scalar) => Param::Scalar(scalar),
            });
        }
        Ok(Prepared::Launch(PreparedLaunch::new(function, *grid, &params)))
    }

    /// Refuses arguments that do not match the kernel's parameters, which
    /// the device would otherwise read as garbage: one parameter per
    /// argument, a pointer (8 bytes) for each buffer, each scalar its own
    /// width, a struct's bytes its size.
    pub(crate) fn check_params<R>(kernel: &CustomKernel, sizes: &[usize], args: &[KernelArg<R>]) -> Result<()> {
        let size = |arg: &KernelArg<R>| match arg {
            KernelArg::Buffer(..) => 8,
            KernelArg::Scalar(scalar) => scalar.size(),
        };
        if sizes.len() == args.len() && sizes.iter().zip(args).all(|(&declared, arg)| declared == size(arg)) {
            return Ok(());
        }
        let expected: Vec<usize> = args.iter().map(size).collect();
        let describe = |sizes: &[usize]| sizes.iter().map(|size| format!("{size}")).collect::<Vec<_>>().join(", ");
        Err(Error::invalid(format!(
            "kernel {} takes {} parameters of ({}) bytes, but its {} arguments need ({}) bytes: \
             each buffer is a pointer (8 bytes) and each scalar its own width, in the order given",
            kernel.name,
            sizes.len(),
            describe(sizes),
            args.len(),
            describe(&expected),
        )))
    }

    /// `data`, to be uploaded into `dst`, in page-locked memory.
    pub(super) fn stage_upload<R>(&self, dst: &Span<R>, data: &[u8]) -> Result<Prepared<D>> {
        if data.len() as u64 != dst.len {
            return Err(Error::invalid("upload size differs from its destination"));
        }
        // Page-locked allocations need the device current on this thread, which may be any.
        self.driver().bind()?;
        let mut loan = self.device.stage(data.len())?;
        // SAFETY: a fresh loan of at least `data.len()` bytes; no copy uses it yet.
        unsafe { loan.bytes_mut(data.len()) }.copy_from_slice(data);
        Ok(Prepared::Upload(Staged::Loan(loan), dst.len))
    }
}

impl<D: Driver> PreparedLaunch<D> {
    pub(super) fn new(function: D::Function, grid: Grid, params: &[Param<'_>]) -> Self {
        let mut pointers = smallvec::SmallVec::new();
        for (index, param) in params.iter().enumerate() {
            if let Param::Pointer(_) = param {
                pointers.push(index);
            }
        }
        PreparedLaunch { launch: ReadyLaunch { function, grid, params: Params::new(params) }, pointers }
    }
}
