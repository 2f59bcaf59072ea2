//! The built-in ops that run as kernels on CUDA and HIP: one C source for
//! both, and its entry points in the engine's order.

/// The built-in ops that run as kernels (zeroing and copies use the driver's own).
/// HIP C accepts this CUDA-style source; the clock and pause differ.
pub const BUILTIN_SOURCE: &str = r#"
typedef unsigned long long weir_u64;

#if defined(__HIPCC_RTC__) || defined(__HIP__)
__device__ static inline weir_u64 weir_clock() { return wall_clock64(); }
__device__ static inline void weir_pause() { __builtin_amdgcn_s_sleep(127); }
#else
__device__ static inline weir_u64 weir_clock() {
    weir_u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
__device__ static inline void weir_pause() { __nanosleep(1000); }
#endif

#define WEIR_FOR_EACH(i, n) \
    for (weir_u64 i = (weir_u64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
         i += (weir_u64)gridDim.x * blockDim.x)

extern "C" __global__ void weir_fill_u32(unsigned int* out, unsigned int word, weir_u64 n) {
    WEIR_FOR_EACH(i, n) out[i] = word;
}

extern "C" __global__ void weir_add_f32(const float* a, const float* b, float* out, weir_u64 n) {
    WEIR_FOR_EACH(i, n) out[i] = a[i] + b[i];
}

extern "C" __global__ void weir_mul_f32(const float* a, const float* b, float* out, weir_u64 n) {
    WEIR_FOR_EACH(i, n) out[i] = a[i] * b[i];
}

extern "C" __global__ void weir_scale_f32(const float* x, float* out, float alpha, weir_u64 n) {
    WEIR_FOR_EACH(i, n) out[i] = alpha * x[i];
}

extern "C" __global__ void weir_axpy_f32(const float* x, float* y, float alpha, weir_u64 n) {
    WEIR_FOR_EACH(i, n) y[i] = alpha * x[i] + y[i];
}

extern "C" __global__ void weir_iota_u32(unsigned int* out, unsigned int start, weir_u64 n) {
    WEIR_FOR_EACH(i, n) out[i] = start + (unsigned int)i;
}

/* Holds the stream: one thread sleeps on the device clock until `ticks` passed. */
extern "C" __global__ void weir_delay(weir_u64 ticks) {
    weir_u64 start = weir_clock();
    while (weir_clock() - start < ticks) weir_pause();
}
"#;

/// Every entry point of [`BUILTIN_SOURCE`], in the engine's order (its `Entry` enum).
pub const BUILTIN_ENTRIES: [&str; 7] =
    ["weir_fill_u32", "weir_add_f32", "weir_mul_f32", "weir_scale_f32", "weir_axpy_f32", "weir_iota_u32", "weir_delay"];
