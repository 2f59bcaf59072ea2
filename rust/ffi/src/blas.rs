//! cuBLAS GEMMs as admitted ops, for Kotlin, Java and Swift: each reads `a`
//! and `b` and writes `c` under Weir's ordering, like any kernel (see
//! weir-core's `Blas`). Exported by every build; a library built without
//! CUDA, or a runtime of another backend, refuses with `Unsupported`.

use std::sync::Arc;

use crate::buffer::Buffer;
use crate::error::Result;
use crate::runtime::WeirRuntime;
use crate::stream::WeirStream;

/// `C = alpha · op(A) · op(B) + beta · C`, column-major as cuBLAS reads it:
/// `C` is `m × n`, `op(A)` `m × k`, `op(B)` `k × n`, each stored densely
/// (`A` is `m × k`, or `k × m` when transposed). Row-major data computes
/// `Cᵀ = Bᵀ · Aᵀ`: swap `a` and `b`, `m` and `n`.
#[derive(Debug, Clone, Copy, PartialEq, uniffi::Record)]
pub struct Gemm {
    pub m: u32,
    pub n: u32,
    pub k: u32,
    #[uniffi(default = false)]
    pub transpose_a: bool,
    #[uniffi(default = false)]
    pub transpose_b: bool,
    #[uniffi(default = 1.0)]
    pub alpha: f32,
    #[uniffi(default = 0.0)]
    pub beta: f32,
}

/// cuBLAS on one CUDA runtime: GEMMs admitted on its streams, each waiting
/// for exactly the versions of `a`, `b` (and `c` when `beta` is not zero) it
/// reads, publishing `c`; a failed input fails the GEMM and what it writes.
/// cuBLAS is loaded at run time: `Unavailable` without the library.
#[derive(Debug, uniffi::Object)]
pub struct Blas {
    #[cfg(feature = "cuda")]
    inner: weir_core::Blas,
    /// Without CUDA no `Blas` is ever made.
    #[cfg(not(feature = "cuda"))]
    inner: std::convert::Infallible,
}

#[uniffi::export]
impl Blas {
    /// cuBLAS for `runtime`; `Unsupported` unless it is a CUDA runtime.
    #[uniffi::constructor]
    pub fn new(runtime: Arc<WeirRuntime>) -> Result<Arc<Self>> {
        #[cfg(feature = "cuda")]
        return Ok(Arc::new(Blas { inner: weir_core::Blas::new(runtime.core())? }));
        #[cfg(not(feature = "cuda"))]
        return Err(weir_core::Error::unsupported(
            runtime.core().info().backend,
            "cuBLAS GEMMs (a CUDA runtime of a library built with CUDA has them)",
        )
        .into());
    }

    /// Admits one GEMM on `stream`; returns once admitted. Bad shapes, a
    /// buffer that is not f32 or too small, a stream of another runtime:
    /// `InvalidArgument`, nothing admitted.
    #[cfg_attr(not(feature = "cuda"), allow(unused_variables))]
    pub fn sgemm(&self, stream: &WeirStream, gemm: Gemm, a: &Buffer, b: &Buffer, c: &Buffer) -> Result<()> {
        #[cfg(feature = "cuda")]
        return Ok(self.inner.sgemm(stream.core(), &gemm.into(), a.core(), b.core(), c.core())?);
        #[cfg(not(feature = "cuda"))]
        match self.inner {}
    }

    /// Admits `count` GEMMs of one shape on `stream` as one op (cuBLAS's
    /// strided batched call): matrix `i` of each buffer follows matrix `i - 1`.
    #[cfg_attr(not(feature = "cuda"), allow(unused_variables))]
    pub fn sgemm_batched(
        &self,
        stream: &WeirStream,
        gemm: Gemm,
        count: u32,
        a: &Buffer,
        b: &Buffer,
        c: &Buffer,
    ) -> Result<()> {
        #[cfg(feature = "cuda")]
        return Ok(self.inner.sgemm_batched(stream.core(), &gemm.into(), count, a.core(), b.core(), c.core())?);
        #[cfg(not(feature = "cuda"))]
        match self.inner {}
    }
}

#[cfg(feature = "cuda")]
impl From<Gemm> for weir_core::Gemm {
    fn from(gemm: Gemm) -> weir_core::Gemm {
        weir_core::Gemm {
            m: gemm.m,
            n: gemm.n,
            k: gemm.k,
            transpose_a: gemm.transpose_a,
            transpose_b: gemm.transpose_b,
            alpha: gemm.alpha,
            beta: gemm.beta,
        }
    }
}
