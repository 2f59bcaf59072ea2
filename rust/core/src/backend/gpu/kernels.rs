//! Built-in kernels (one C source for CUDA and HIP) and the kernel cache.
//!
//! Compiling is slow (NVRTC, hiprtc: tens to hundreds of milliseconds), so a
//! compiled image is kept for the life of the process, keyed by backend,
//! device architecture and source; each backend loads a source's module once.

use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::sync::{Arc, Mutex, OnceLock};

use super::driver::Driver;
use crate::device::BackendKind;
use crate::error::{Error, Result};
use crate::kernel::ScalarArg;
use crate::lock::lock;

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

/// Every entry point of [`BUILTIN_SOURCE`], in [`Entry`] order.
pub const BUILTIN_ENTRIES: [&str; 7] =
    ["weir_fill_u32", "weir_add_f32", "weir_mul_f32", "weir_scale_f32", "weir_axpy_f32", "weir_iota_u32", "weir_delay"];

/// A built-in kernel, as an index into [`BUILTIN_ENTRIES`] and into the
/// functions a backend loads when it opens: a launch then finds its function
/// without hashing the built-in source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Entry {
    Fill,
    Add,
    Mul,
    Scale,
    Axpy,
    Iota,
    Delay,
}

/// The functions of [`BUILTIN_SOURCE`], indexed by [`Entry`].
pub(crate) struct Builtins<F: Copy>([F; BUILTIN_ENTRIES.len()]);

impl<F: Copy> Builtins<F> {
    /// Loads every built-in with `load`, in [`BUILTIN_ENTRIES`] order.
    pub fn load(mut load: impl FnMut(&str) -> Result<F>) -> Result<Self> {
        let [fill, add, mul, scale, axpy, iota, delay] = BUILTIN_ENTRIES;
        Ok(Builtins([load(fill)?, load(add)?, load(mul)?, load(scale)?, load(axpy)?, load(iota)?, load(delay)?]))
    }

    pub fn get(&self, entry: Entry) -> F {
        // The enum's discriminants are exactly the array's indices.
        self.0[entry as usize]
    }
}

type ImageKey = (BackendKind, String, String);

fn images() -> &'static Mutex<HashMap<ImageKey, Arc<Vec<u8>>>> {
    static IMAGES: OnceLock<Mutex<HashMap<ImageKey, Arc<Vec<u8>>>>> = OnceLock::new();
    IMAGES.get_or_init(Default::default)
}

struct Loaded<D: Driver> {
    module: D::Module,
    functions: HashMap<String, Function<D>>,
}

/// A loaded kernel function, with its parameters' byte sizes where the
/// driver tells them (to check a launch's arguments against).
pub(crate) struct Function<D: Driver> {
    pub raw: D::Function,
    pub param_sizes: Option<Arc<[usize]>>,
}

impl<D: Driver> Clone for Function<D> {
    fn clone(&self) -> Self {
        Function { raw: self.raw, param_sizes: self.param_sizes.clone() }
    }
}

/// The modules loaded in one driver context, by source, shared by every
/// runtime of the process on that context (CUDA's primary context of a
/// device): a module load can synchronise the whole context, so a runtime
/// opened beside another's long-running work must not load its built-ins
/// again. Unloaded when the last runtime on the context lets go.
pub(crate) struct Kernels<D: Driver> {
    loaded: Mutex<HashMap<String, Loaded<D>>>,
    /// A driver on the context, to unload with (it keeps the context retained).
    driver: Arc<D>,
}

/// Every context's kernels, by driver type and context, while a runtime holds them.
type Registry = Mutex<Vec<(std::any::TypeId, u64, std::sync::Weak<dyn std::any::Any + Send + Sync>)>>;
static SHARED: Registry = Mutex::new(Vec::new());

impl<D: Driver> Kernels<D> {
    /// The kernels of `driver`'s context: those another runtime on it
    /// already loaded, or new ones (always new where the driver names no
    /// context to share).
    pub fn of_context(driver: &Arc<D>) -> Arc<Kernels<D>> {
        let fresh = || Arc::new(Kernels { loaded: Mutex::new(HashMap::new()), driver: driver.clone() });
        let Some(context) = driver.context_key() else { return fresh() };
        let kind = std::any::TypeId::of::<D>();
        let mut shared = lock(&SHARED);
        shared.retain(|(_, _, kernels)| kernels.strong_count() > 0);
        let found = shared
            .iter()
            .filter(|(of, key, _)| *of == kind && *key == context)
            .find_map(|(_, _, kernels)| kernels.upgrade()?.downcast::<Kernels<D>>().ok());
        if let Some(kernels) = found {
            return kernels;
        }
        let kernels = fresh();
        let any: Arc<dyn std::any::Any + Send + Sync> = kernels.clone();
        shared.push((kind, context, Arc::downgrade(&any)));
        kernels
    }

    /// The function `entry` of `source`, compiling and loading on first use.
    ///
    /// Called from `prepare`, before the ordering boundary, from any thread:
    /// the compile runs outside this cache's lock, so a slow compile never
    /// holds up a lookup of a kernel already loaded.
    pub fn function(&self, driver: &D, source: &str, entry: &str) -> Result<Function<D>> {
        if let Some(function) = lock(&self.loaded).get(source).and_then(|module| module.functions.get(entry)) {
            return Ok(function.clone());
        }
        let name =
            CString::new(entry).map_err(|_| Error::invalid(format!("kernel entry {entry:?} contains a NUL byte")))?;
        let image = Self::image(driver, source)?;
        let mut loaded = lock(&self.loaded);
        // Loaded under the lock (rarely, once per source), so that two threads
        // that compiled the same source do not both load it.
        if !loaded.contains_key(source) {
            let module = driver.module_load(&image)?;
            loaded.insert(source.to_owned(), Loaded { module, functions: HashMap::new() });
        }
        let module = loaded.get_mut(source).ok_or_else(|| Error::backend(D::KIND, "kernel module vanished"))?;
        if let Some(function) = module.functions.get(entry) {
            return Ok(function.clone());
        }
        // SAFETY: `module.module` was loaded by this driver and is unloaded only with the device.
        let raw = unsafe { driver.function(module.module, &name)? };
        // SAFETY: `raw` was just loaded by this driver.
        let param_sizes = match unsafe { driver.param_sizes(raw)? } {
            Some(sizes) => Some(sizes),
            None => driver.image_param_sizes(&image, entry),
        };
        let param_sizes = param_sizes.map(Arc::from);
        let function = Function { raw, param_sizes };
        module.functions.insert(entry.to_owned(), function.clone());
        Ok(function)
    }

    fn image(driver: &D, source: &str) -> Result<Arc<Vec<u8>>> {
        let key = (D::KIND, driver.arch(), source.to_owned());
        if let Some(image) = lock(images()).get(&key) {
            return Ok(image.clone());
        }
        // Compile outside the process-wide lock: other devices need not wait.
        let image = Arc::new(driver.compile(source)?);
        Ok(lock(images()).entry(key).or_insert(image).clone())
    }
}

impl<D: Driver> Drop for Kernels<D> {
    fn drop(&mut self) {
        // Unbound, the context is lost and its modules went with it.
        if self.driver.bind().is_err() {
            return;
        }
        for (_, loaded) in lock(&self.loaded).drain() {
            // SAFETY: loaded in this context (by any of its drivers), unloaded
            // once (drained), and no launch is in flight: the last runtime on
            // the context let go, its streams synchronised before it did.
            unsafe { self.driver.module_unload(loaded.module) };
        }
    }
}

/// One kernel parameter, as the launch passes it. A `Pointer` made in
/// `prepare` is a placeholder: `enqueue` writes the buffer's address.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Param<'a> {
    Pointer(u64),
    U32(u32),
    F32(f32),
    U64(u64),
    /// A user's scalar of any width, or a struct's bytes.
    Scalar(&'a ScalarArg),
}

/// Parameter storage for one launch: the values and the pointer array to them.
pub(crate) struct Params {
    /// Every parameter's bytes in whole 8-byte words of its own; inline up
    /// to eight words, so a launch of small parameters allocates nothing.
    words: smallvec::SmallVec<[u64; 8]>,
    /// The word each parameter starts at.
    starts: smallvec::SmallVec<[u32; 8]>,
}

impl Params {
    pub fn new(params: &[Param<'_>]) -> Self {
        let mut words = smallvec::SmallVec::new();
        let mut starts = smallvec::SmallVec::with_capacity(params.len());
        for param in params {
            let bytes: smallvec::SmallVec<[u8; 8]> = match *param {
                Param::Pointer(value) | Param::U64(value) => value.to_ne_bytes()[..].into(),
                Param::U32(value) => value.to_ne_bytes()[..].into(),
                Param::F32(value) => value.to_ne_bytes()[..].into(),
                Param::Scalar(scalar) => scalar.to_bytes(),
            };
            starts.push(words.len() as u32);
            // At least one word: the driver reads a zero-sized struct from a valid address.
            for chunk in bytes.chunks(8).chain((bytes.is_empty()).then_some(&[][..])) {
                let mut word = [0u8; 8];
                word[..chunk.len()].copy_from_slice(chunk);
                words.push(u64::from_ne_bytes(word));
            }
        }
        Params { words, starts }
    }

    /// Overwrites parameter `index` with a device address. False if there is no such parameter.
    pub fn set_pointer(&mut self, index: usize, address: u64) -> bool {
        match self.starts.get(index).and_then(|&start| self.words.get_mut(start as usize)) {
            Some(word) => {
                *word = address;
                true
            }
            None => false,
        }
    }

    /// The `void**` array a launch takes; valid while `self` stays where it
    /// is (the words may be inline).
    pub fn pointers(&mut self) -> smallvec::SmallVec<[*mut c_void; 8]> {
        let base = self.words.as_mut_ptr();
        // SAFETY: every start is the index of a word of `words` (see `new`).
        self.starts.iter().map(|&start| unsafe { base.add(start as usize) }.cast::<c_void>()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `len` bytes parameter `index` points at.
    fn read(params: &mut Params, index: usize, len: usize) -> Vec<u8> {
        let pointer = params.pointers()[index].cast::<u8>();
        // SAFETY: every parameter's words hold at least its bytes (see `Params::new`).
        unsafe { std::slice::from_raw_parts(pointer, len) }.to_vec()
    }

    #[test]
    fn each_parameter_points_at_its_own_bytes_whatever_its_width() {
        let wide = ScalarArg::Bytes((1..=20).collect::<Vec<u8>>().into());
        let (byte, half, double) = (ScalarArg::U8(7), ScalarArg::F16Bits(0x3c00), ScalarArg::F64(-2.5));
        let mut params = Params::new(&[
            Param::Pointer(0),
            Param::Scalar(&byte),
            Param::Scalar(&wide),
            Param::U32(5),
            Param::Scalar(&half),
            Param::Scalar(&double),
        ]);
        assert!(params.set_pointer(0, 0xdead_beef_0000_1234));
        assert!(!params.set_pointer(6, 1), "there is no parameter 6");
        assert_eq!(read(&mut params, 0, 8), 0xdead_beef_0000_1234u64.to_ne_bytes());
        assert_eq!(read(&mut params, 1, 1), [7]);
        assert_eq!(read(&mut params, 2, 20), (1..=20).collect::<Vec<u8>>());
        assert_eq!(read(&mut params, 3, 4), 5u32.to_ne_bytes());
        assert_eq!(read(&mut params, 4, 2), 0x3c00u16.to_le_bytes());
        assert_eq!(read(&mut params, 5, 8), (-2.5f64).to_le_bytes());
        // Every parameter starts on a word of its own: 8-byte aligned.
        assert!(params.pointers().iter().all(|pointer| pointer.align_offset(8) == 0));
    }
}
