//! cuBLAS GEMMs as admitted ops: each is an external op that reads `a` and
//! `b` and writes `c` (reads it too when `beta` is not zero), so it waits for
//! exactly the versions it needs, publishes `c` like any kernel, and a failed
//! input fails it and what it writes. cuBLAS is loaded at run time (cudarc's
//! `cublas`), so nothing of the toolkit is needed to build.

use std::sync::{Arc, Mutex};

use crate::backend::cuda::cudarc::cublas::{result, sys};
use crate::backend::RawAccess;
use crate::buffer::Buffer;
use crate::device::BackendKind;
use crate::element::ElementType;
use crate::error::{Error, Result};
use crate::kernel::Access;
use crate::lock::lock;
use crate::runtime::Runtime;
use crate::stream::Stream;

/// Every cuBLAS function used here, checked before the first call: cudarc
/// panics on a missing one.
const SYMBOLS: [&str; 5] =
    ["cublasCreate_v2", "cublasDestroy_v2", "cublasSetStream_v2", "cublasSgemm_v2", "cublasSgemmStridedBatched"];

/// `C = alpha · op(A) · op(B) + beta · C`, column-major as cuBLAS reads it:
/// `C` is `m × n`, `op(A)` `m × k`, `op(B)` `k × n`; each matrix is stored
/// densely, its leading dimension its stored row count (`A` is `m × k`, or
/// `k × m` when transposed). A row-major caller computes `Cᵀ = Bᵀ · Aᵀ`:
/// swap `a` and `b`, `m` and `n`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gemm {
    pub m: u32,
    pub n: u32,
    pub k: u32,
    pub transpose_a: bool,
    pub transpose_b: bool,
    pub alpha: f32,
    pub beta: f32,
}

impl Gemm {
    /// `C = A · B`, neither transposed.
    pub fn new(m: u32, n: u32, k: u32) -> Gemm {
        Gemm { m, n, k, transpose_a: false, transpose_b: false, alpha: 1.0, beta: 0.0 }
    }

    /// The stored rows and columns of A, B and C.
    fn shapes(&self) -> [(u32, u32); 3] {
        let a = if self.transpose_a { (self.k, self.m) } else { (self.m, self.k) };
        let b = if self.transpose_b { (self.n, self.k) } else { (self.k, self.n) };
        [a, b, (self.m, self.n)]
    }
}

/// cuBLAS on one CUDA runtime: a handle, made at the first GEMM (on the
/// device's context) and destroyed in the background when the last clone
/// goes. Cheap to clone; GEMMs from several threads take turns on the handle.
#[derive(Clone)]
pub struct Blas {
    runtime: Runtime,
    handle: Arc<Mutex<Option<Handle>>>,
}

impl std::fmt::Debug for Blas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Blas").finish_non_exhaustive()
    }
}

/// A cuBLAS handle, destroyed once.
struct Handle(sys::cublasHandle_t);

// SAFETY: a cuBLAS handle may be used from any thread, one at a time; `Blas`
// keeps it behind a mutex.
unsafe impl Send for Handle {}

impl Drop for Handle {
    fn drop(&mut self) {
        /// The handle on its way to the thread that destroys it.
        struct Destroy(sys::cublasHandle_t);
        // SAFETY: as for `Handle`; only that thread uses it from here on.
        unsafe impl Send for Destroy {}
        impl Destroy {
            fn run(self) {
                // SAFETY: made by `create_handle`, destroyed only here.
                let _ = unsafe { result::destroy_handle(self.0) };
            }
        }
        let destroy = Destroy(self.0);
        // cublasDestroy synchronises the device: never on the dropping thread.
        let _ = std::thread::Builder::new().name("weir-cublas-destroy".to_owned()).spawn(move || destroy.run());
    }
}

impl Blas {
    /// cuBLAS for `runtime`, a CUDA runtime; `Unavailable` without the
    /// library, `Unsupported` on another backend.
    pub fn new(runtime: &Runtime) -> Result<Blas> {
        if runtime.info().backend != BackendKind::Cuda {
            return Err(Error::unsupported(runtime.info().backend, "cuBLAS GEMMs (a CUDA runtime has them)"));
        }
        // SAFETY: only tries to load the library; no symbol is called.
        if !unsafe { sys::is_culib_present() } {
            return Err(Error::unavailable(
                BackendKind::Cuda,
                "the cuBLAS library (libcublas.so) was not found; add the CUDA toolkit's lib64 to the library path",
            ));
        }
        // SAFETY: the library is present (checked above), so `culib` returns it.
        let library = unsafe { sys::culib() };
        // SAFETY: looks a symbol up without calling it.
        if let Some(missing) = SYMBOLS.iter().find(|name| unsafe { library.get::<*const ()>(**name) }.is_err()) {
            return Err(Error::unavailable(BackendKind::Cuda, format!("cuBLAS lacks {missing}")));
        }
        Ok(Blas { runtime: runtime.clone(), handle: Arc::default() })
    }

    /// Admits `C = alpha · op(A) · op(B) + beta · C` on `stream`, f32 buffers.
    pub fn sgemm(&self, stream: &Stream, gemm: &Gemm, a: &Buffer, b: &Buffer, c: &Buffer) -> Result<()> {
        let fills_c = self.check(stream, gemm, 1, [a, b, c])?;
        let (lda, ldb, ldc) = leading(gemm);
        let (m, n, k) = (gemm.m as i32, gemm.n as i32, gemm.k as i32);
        self.admit(stream, gemm, fills_c, [a, b, c], |handle, [a, b, c]| {
            // SAFETY: three live allocations of this runtime, each holding the
            // matrix `check` sized it for, ordered by the op's admission.
            unsafe {
                result::sgemm(
                    handle,
                    operation(gemm.transpose_a),
                    operation(gemm.transpose_b),
                    m,
                    n,
                    k,
                    &gemm.alpha,
                    a as usize as *const f32,
                    lda,
                    b as usize as *const f32,
                    ldb,
                    &gemm.beta,
                    c as usize as *mut f32,
                    ldc,
                )
            }
        })
    }

    /// Admits `count` GEMMs of one shape on `stream`: matrix `i` of A, B and
    /// C starts `i` matrices into its buffer (densely packed batches).
    pub fn sgemm_batched(
        &self,
        stream: &Stream,
        gemm: &Gemm,
        count: u32,
        a: &Buffer,
        b: &Buffer,
        c: &Buffer,
    ) -> Result<()> {
        let fills_c = self.check(stream, gemm, count, [a, b, c])?;
        let (lda, ldb, ldc) = leading(gemm);
        let [sa, sb, sc] = gemm.shapes().map(|(rows, columns)| i64::from(rows) * i64::from(columns));
        let (m, n, k) = (gemm.m as i32, gemm.n as i32, gemm.k as i32);
        self.admit(stream, gemm, fills_c, [a, b, c], |handle, [a, b, c]| {
            // SAFETY: as in `sgemm`, for `count` matrices of each.
            unsafe {
                result::sgemm_strided_batched(
                    handle,
                    operation(gemm.transpose_a),
                    operation(gemm.transpose_b),
                    m,
                    n,
                    k,
                    &gemm.alpha,
                    a as usize as *const f32,
                    lda,
                    sa,
                    b as usize as *const f32,
                    ldb,
                    sb,
                    &gemm.beta,
                    c as usize as *mut f32,
                    ldc,
                    sc,
                    count as i32,
                )
            }
        })
    }

    /// Refuses what cuBLAS would read past or misread: a shape beyond its
    /// `int`s, a buffer that is not f32 or too small for its matrices, a
    /// stream or buffer of another runtime. Returns whether C holds exactly
    /// the product (the GEMM then writes all of it).
    fn check(&self, stream: &Stream, gemm: &Gemm, count: u32, buffers: [&Buffer; 3]) -> Result<bool> {
        if !Runtime::same_engine(stream.engine(), &self.runtime.engine) {
            return Err(Error::invalid("a GEMM on a stream of another runtime than its Blas's"));
        }
        let fits = |value: u32| i32::try_from(value).is_ok();
        if [gemm.m, gemm.n, gemm.k, count].iter().any(|&value| value == 0 || !fits(value)) {
            return Err(Error::invalid(format!(
                "a GEMM's m, n, k and batch count are 1 to {}: got {} × {} × {}, {count} of them",
                i32::MAX,
                gemm.m,
                gemm.n,
                gemm.k
            )));
        }
        let mut fills = false;
        for ((name, buffer), (rows, columns)) in ["a", "b", "c"].iter().zip(buffers).zip(gemm.shapes()) {
            if !matches!(buffer.element_type(), ElementType::F32 | ElementType::Bytes) {
                return Err(Error::invalid(format!("sgemm's {name} holds {}, not f32", buffer.element_type())));
            }
            // Each factor may be up to 2^31 - 1, so the product may pass a
            // u64: wrapped, it let a batch far past its buffers through.
            let needs = u64::from(rows)
                .checked_mul(u64::from(columns))
                .and_then(|elements| elements.checked_mul(u64::from(count)))
                .and_then(|elements| elements.checked_mul(4));
            if needs.is_none_or(|needs| buffer.size_bytes() < needs) {
                return Err(Error::invalid(format!(
                    "sgemm's {name} is {rows} × {columns}{}: {} bytes, but its buffer holds {}",
                    if count > 1 { format!(" × {count}") } else { String::new() },
                    needs.map_or_else(|| "more than 2^64".to_owned(), |needs| needs.to_string()),
                    buffer.size_bytes()
                )));
            }
            // C comes last: whether the product covers it.
            fills = needs == Some(buffer.size_bytes());
        }
        Ok(fills)
    }

    /// Admits the call as an external op on `stream` and makes it there with
    /// the handle on that stream and the buffers' device addresses.
    fn admit(
        &self,
        stream: &Stream,
        gemm: &Gemm,
        fills_c: bool,
        [a, b, c]: [&Buffer; 3],
        call: impl Fn(sys::cublasHandle_t, [u64; 3]) -> Result<(), result::CublasError>,
    ) -> Result<()> {
        // With beta 0, C is written whole only where the product fills it: a
        // larger C keeps its tail, so it is read too (a failed tail declared
        // overwritten would have been healed).
        let c_access = if gemm.beta == 0.0 && fills_c { Access::Write } else { Access::ReadWrite };
        stream.external(&[(a, Access::Read), (b, Access::Read), (c, c_access)], |raw| {
            let RawAccess::Cuda { stream: raw_stream, buffers } = raw else {
                return Err(Error::internal("a CUDA runtime's external op got another backend's handles"));
            };
            let mut handle = lock(&self.handle);
            if handle.is_none() {
                // The device's context is current here (an external op's closure).
                *handle = Some(Handle(result::create_handle().map_err(failed)?));
            }
            let Some(Handle(handle)) = handle.as_ref() else { return Err(Error::internal("no cuBLAS handle")) };
            // SAFETY: a live handle (held under its lock) and the op's own stream.
            unsafe { result::set_stream(*handle, raw_stream as sys::cudaStream_t) }.map_err(failed)?;
            call(*handle, [buffers[0].ptr, buffers[1].ptr, buffers[2].ptr]).map_err(failed)
        })
    }
}

fn operation(transpose: bool) -> sys::cublasOperation_t {
    match transpose {
        true => sys::cublasOperation_t::CUBLAS_OP_T,
        false => sys::cublasOperation_t::CUBLAS_OP_N,
    }
}

/// Each matrix's leading dimension: its stored row count.
fn leading(gemm: &Gemm) -> (i32, i32, i32) {
    let [a, b, c] = gemm.shapes().map(|(rows, _)| rows as i32);
    (a, b, c)
}

fn failed(error: result::CublasError) -> Error {
    Error::backend(BackendKind::Cuda, format!("cuBLAS: {error}"))
}
