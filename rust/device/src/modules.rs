//! The kernels a driver launches: the built-ins (one C source for CUDA and
//! HIP) and users' kernels, compiled, loaded and found, with their
//! parameters packed for a launch.
//!
//! Compiling is slow (NVRTC, hiprtc: tens to hundreds of milliseconds), so a
//! compiled image is kept for the life of the process, keyed by backend,
//! device architecture and source; each backend loads a source's module once.

use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::sync::{Arc, Mutex, OnceLock};

use crate::builtin::{cuda_source, BuiltinKernel};
use crate::driver::Driver;
use crate::error::{Error, Result};
use crate::info::BackendKind;
use crate::kernel::{DeviceCode, DeviceKernel, ScalarArg};
use crate::lock::lock;
use crate::rtc::Compiled;
use crate::symbols::{is_identifier, symbol_named};

/// The functions of the built-ins' source ([`cuda_source`]), indexed by
/// kernel: a launch finds its function without hashing the source.
pub struct Builtins<F: Copy>([F; BuiltinKernel::ALL.len()]);

impl<F: Copy> Builtins<F> {
    /// Loads every built-in with `load`, given its entry point.
    pub fn load(mut load: impl FnMut(&str) -> Result<F>) -> Result<Self> {
        let [fill, add, mul, scale, axpy, iota, delay] = BuiltinKernel::ALL.map(BuiltinKernel::entry);
        Ok(Builtins([load(fill)?, load(add)?, load(mul)?, load(scale)?, load(axpy)?, load(iota)?, load(delay)?]))
    }

    pub fn get(&self, kernel: BuiltinKernel) -> F {
        // The kernels' discriminants are exactly their places in `ALL`.
        self.0[kernel as usize]
    }
}

/// What a module is loaded from: source with its options (and the C++ name
/// the compiler resolved in it, if it was asked to), or a module's bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum ModuleKey {
    Source { code: String, options: Vec<String>, name_expression: Option<String> },
    Image(Arc<[u8]>),
}

/// A compiled image and the symbol its name expression resolved to.
struct Image {
    bytes: Arc<[u8]>,
    lowered: Option<String>,
}

type ImageKey = (BackendKind, String, ModuleKey);

fn images() -> &'static Mutex<HashMap<ImageKey, Arc<Image>>> {
    static IMAGES: OnceLock<Mutex<HashMap<ImageKey, Arc<Image>>>> = OnceLock::new();
    IMAGES.get_or_init(Default::default)
}

struct Loaded<D: Driver> {
    module: D::Module,
    image: Arc<Image>,
    /// By the name the caller gave.
    functions: HashMap<String, Function<D>>,
}

/// One module's place in [`Kernels`]: empty until it loaded (a failed load
/// leaves it empty, for the next caller to try again).
type Slot<D> = Mutex<Option<Loaded<D>>>;

/// A loaded kernel function, with its parameters' byte sizes where the
/// driver tells them (to check a launch's arguments against).
pub struct Function<D: Driver> {
    pub raw: D::Function,
    pub param_sizes: Option<Arc<[usize]>>,
}

impl<D: Driver> Clone for Function<D> {
    fn clone(&self) -> Self {
        Function { raw: self.raw, param_sizes: self.param_sizes.clone() }
    }
}

/// The modules loaded in one driver context, by what they were loaded
/// from, shared by every runtime of the process on that context (CUDA's
/// primary context of a device): a module load can synchronise the whole
/// context, so a runtime opened beside another's long-running work must
/// not load its built-ins again. Unloaded when the last runtime on the
/// context lets go.
pub struct Kernels<D: Driver> {
    /// A slot per module, its own lock held while the module loads and its
    /// functions are looked up: a load can synchronise the context, and
    /// only the callers of that module wait for it.
    loaded: Mutex<HashMap<ModuleKey, Arc<Slot<D>>>>,
    /// A driver on the context, to unload with (it keeps the context retained).
    driver: Arc<D>,
}

/// What the runtimes on one context share (its kernels, its page-locked
/// staging), by type and context, while a runtime holds it.
type Registry = Mutex<Vec<(std::any::TypeId, u64, std::sync::Weak<dyn std::any::Any + Send + Sync>)>>;
static SHARED: Registry = Mutex::new(Vec::new());

/// The `T` of `driver`'s context: the one another runtime on it made, or a
/// new one from `make` (always new where the driver names no context to share).
pub fn of_context<T: Send + Sync + 'static, D: Driver>(driver: &D, make: impl FnOnce() -> T) -> Arc<T> {
    let Some(context) = driver.context_key() else { return Arc::new(make()) };
    let kind = std::any::TypeId::of::<T>();
    let mut shared = lock(&SHARED);
    shared.retain(|(_, _, value)| value.strong_count() > 0);
    let found = shared
        .iter()
        .filter(|(of, key, _)| *of == kind && *key == context)
        .find_map(|(_, _, value)| value.upgrade()?.downcast::<T>().ok());
    if let Some(value) = found {
        return value;
    }
    let value = Arc::new(make());
    let any: Arc<dyn std::any::Any + Send + Sync> = value.clone();
    shared.push((kind, context, Arc::downgrade(&any)));
    value
}

impl<D: Driver> Kernels<D> {
    /// The kernels of `driver`'s context: those another runtime on it
    /// already loaded, or new ones.
    pub fn of_context(driver: &Arc<D>) -> Arc<Kernels<D>> {
        of_context(&**driver, || Kernels { loaded: Mutex::new(HashMap::new()), driver: driver.clone() })
    }

    /// The function `kernel` names, compiling and loading on first use.
    ///
    /// Called from `prepare`, before the ordering boundary, from any thread:
    /// the compile runs outside this cache's lock, and a module's load
    /// under its own, so neither a slow compile nor a load (which can
    /// synchronise the context) holds up another module's kernels. A source whose kernel
    /// is named as a C linker would keep it is compiled once for all its
    /// kernels; any other name (a template instance, a namespace, a C++
    /// function's plain name) has the compiler resolve it, once per name.
    pub fn function(&self, driver: &D, kernel: &DeviceKernel) -> Result<Function<D>> {
        let entry = &kernel.entry;
        let source = |name_expression: Option<&String>| match &kernel.code {
            DeviceCode::Source(code) => ModuleKey::Source {
                code: code.clone(),
                options: kernel.options.clone(),
                name_expression: name_expression.cloned(),
            },
            DeviceCode::Module(image) => ModuleKey::Image(image.clone()),
        };
        let found = match &kernel.code {
            DeviceCode::Module(_) if !kernel.options.is_empty() => {
                return Err(Error::invalid(format!(
                    "kernel {entry:?}: compiler options were given for a module built elsewhere, which is not compiled"
                )))
            }
            DeviceCode::Module(_) => self.function_in(driver, source(None), entry)?,
            DeviceCode::Source(_) => {
                let as_written =
                    if is_identifier(entry) { self.function_in(driver, source(None), entry)? } else { None };
                match as_written {
                    Some(function) => Some(function),
                    // A C++ kernel's symbol is mangled: the compiler resolves its name.
                    None => match self.function_in(driver, source(Some(entry)), entry) {
                        // The compiler refused the name, or the source: the
                        // source compiled alone says which.
                        Err(Error::InvalidArgument(why)) => {
                            Self::image(driver, &source(None))?;
                            return Err(Error::invalid(format!("no kernel named {entry:?} in its source: {why}")));
                        }
                        resolved => resolved?,
                    },
                }
            }
        };
        found.ok_or_else(|| Error::invalid(format!("no kernel named {entry:?} in its source")))
    }

    /// Function `entry` of the built-in source, loaded with the device.
    pub fn builtin(&self, driver: &D, entry: &str) -> Result<Function<D>> {
        let key = ModuleKey::Source { code: cuda_source().to_owned(), options: Vec::new(), name_expression: None };
        self.function_in(driver, key, entry)?
            .ok_or_else(|| Error::backend(D::KIND, format!("the built-in kernels lack {entry}")))
    }

    /// Function `entry` of the module `key` names, loading it first; `None`
    /// if the module has no such kernel.
    fn function_in(&self, driver: &D, key: ModuleKey, entry: &str) -> Result<Option<Function<D>>> {
        let slot = lock(&self.loaded).get(&key).cloned();
        if let Some(function) = slot.and_then(|slot| lock(&slot).as_ref()?.functions.get(entry).cloned()) {
            return Ok(Some(function));
        }
        let image = Self::image(driver, &key)?;
        let symbol = image.lowered.as_deref().unwrap_or(entry);
        let name =
            CString::new(symbol).map_err(|_| Error::invalid(format!("kernel name {entry:?} contains a NUL byte")))?;
        let slot = lock(&self.loaded).entry(key).or_default().clone();
        // Loaded under the slot's lock, so that two threads that compiled the
        // same source do not both load it; other modules' callers go on.
        let mut slot = lock(&slot);
        let module = match &mut *slot {
            Some(module) => module,
            empty => {
                let module = driver.module_load(&image.bytes)?;
                empty.insert(Loaded { module, image: image.clone(), functions: HashMap::new() })
            }
        };
        if let Some(function) = module.functions.get(entry) {
            return Ok(Some(function.clone()));
        }
        // SAFETY: `module.module` was loaded by this driver and is unloaded only with the device.
        let raw = match unsafe { driver.function(module.module, &name)? } {
            Some(raw) => raw,
            // A module built elsewhere has no compiler to resolve a C++ name:
            // its kernels' symbols, demangled, say which one it names.
            None if image.lowered.is_none() => {
                // SAFETY: as above.
                let Some(symbols) = (unsafe { driver.kernel_symbols(module.module)? }) else { return Ok(None) };
                let Some(symbol) = symbol_named(&symbols, entry)? else { return Ok(None) };
                let symbol =
                    CString::new(symbol).map_err(|_| Error::backend(D::KIND, "a kernel symbol holds a NUL byte"))?;
                // SAFETY: as above.
                let Some(raw) = (unsafe { driver.function(module.module, &symbol)? }) else { return Ok(None) };
                raw
            }
            None => return Ok(None),
        };
        // SAFETY: `raw` was just loaded by this driver, from this image.
        let param_sizes = unsafe { driver.param_sizes(raw, &module.image.bytes, symbol)? }.map(Arc::from);
        let function = Function { raw, param_sizes };
        module.functions.insert(entry.to_owned(), function.clone());
        Ok(Some(function))
    }

    /// What `key` loads: a module's own bytes, or its source compiled for
    /// this device's architecture, once per process.
    fn image(driver: &D, key: &ModuleKey) -> Result<Arc<Image>> {
        let (code, options, name_expression) = match key {
            ModuleKey::Image(bytes) => return Ok(Arc::new(Image { bytes: bytes.clone(), lowered: None })),
            ModuleKey::Source { code, options, name_expression } => (code, options, name_expression),
        };
        let cache_key = (D::KIND, driver.arch(), key.clone());
        if let Some(image) = lock(images()).get(&cache_key) {
            return Ok(image.clone());
        }
        // Compile outside the process-wide lock: other devices need not wait.
        let Compiled { image, lowered } = driver.compile(code, options, name_expression.as_deref())?;
        let image = Arc::new(Image { bytes: image.into(), lowered });
        Ok(lock(images()).entry(cache_key).or_insert(image).clone())
    }
}

impl<D: Driver> Drop for Kernels<D> {
    fn drop(&mut self) {
        // Unbound, the context is lost and its modules went with it.
        if self.driver.bind().is_err() {
            return;
        }
        for (_, slot) in lock(&self.loaded).drain() {
            let Some(loaded) = lock(&slot).take() else { continue };
            // SAFETY: loaded in this context (by any of its drivers), unloaded
            // once (taken), and no launch is in flight: the last runtime on
            // the context let go, its streams synchronised before it did.
            unsafe { self.driver.module_unload(loaded.module) };
        }
    }
}

/// One kernel parameter, as the launch passes it. A `Pointer` made in
/// `prepare` is a placeholder: `enqueue` writes the buffer's address.
#[derive(Debug, Clone, Copy)]
pub enum Param<'a> {
    Pointer(u64),
    U32(u32),
    U64(u64),
    /// A user's scalar of any width, or a struct's bytes.
    Scalar(&'a ScalarArg),
}

/// Parameter storage for one launch: the values and the pointer array to them.
pub struct Params {
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
            starts.push(words.len() as u32);
            match *param {
                Param::Pointer(value) | Param::U64(value) => words.push(value),
                Param::U32(value) => words.push(word(&value.to_ne_bytes())),
                // A struct's bytes as given, without a copy of their own.
                Param::Scalar(ScalarArg::Bytes(bytes)) => push_bytes(&mut words, bytes),
                Param::Scalar(scalar) => push_bytes(&mut words, &scalar.to_bytes()),
            }
        }
        Params { words, starts }
    }

    /// Overwrites parameter `index` with a device address. False if there is no such parameter.
    pub fn set_pointer(&mut self, index: usize, address: u64) -> bool {
        let word = self.starts.get(index).and_then(|&start| self.words.get_mut(start as usize));
        word.map(|word| *word = address).is_some()
    }

    /// The `void**` array a launch takes; valid while `self` stays where it
    /// is (the words may be inline).
    pub fn pointers(&mut self) -> smallvec::SmallVec<[*mut c_void; 8]> {
        let base = self.words.as_mut_ptr();
        // SAFETY: every start is the index of a word of `words` (see `new`).
        self.starts.iter().map(|&start| unsafe { base.add(start as usize) }.cast::<c_void>()).collect()
    }
}

/// `bytes` in whole words of their own, at least one: the driver reads a
/// zero-sized struct from a valid address.
fn push_bytes(words: &mut smallvec::SmallVec<[u64; 8]>, bytes: &[u8]) {
    if bytes.is_empty() {
        words.push(0);
    }
    words.extend(bytes.chunks(8).map(word));
}

/// Up to eight bytes as a word holding them in memory order.
fn word(bytes: &[u8]) -> u64 {
    let mut word = [0u8; 8];
    word[..bytes.len()].copy_from_slice(bytes);
    u64::from_ne_bytes(word)
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

    #[test]
    fn an_empty_struct_still_has_a_word_of_its_own() {
        let (empty, after) = (ScalarArg::Bytes(Vec::new().into()), ScalarArg::U32(9));
        let mut params = Params::new(&[Param::Scalar(&empty), Param::Scalar(&after)]);
        let pointers = params.pointers();
        assert_eq!(pointers[1] as usize - pointers[0] as usize, 8, "the empty struct's word");
        assert_eq!(read(&mut params, 1, 4), 9u32.to_ne_bytes());
    }
}
