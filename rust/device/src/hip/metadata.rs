//! The kernels a HIP code object declares and their arguments, read from the
//! code object itself: HIP has no driver query for a function's parameters
//! (CUDA's `cuFuncGetParamInfo`), and reading the image needs no device.
//!
//! hiprtc returns an AMDGPU code object: an ELF64 little-endian file (some
//! toolchains wrap it in a clang offload bundle, unwrapped here). Its note of
//! type `NT_AMDGPU_METADATA` named "AMDGPU" holds a MessagePack map whose
//! `amdhsa.kernels` lists each kernel with `.name`, `.symbol` and `.args`;
//! each argument has a `.size` and a `.value_kind` (`global_buffer` for a
//! pointer, `by_value` for a scalar, `hidden_*` for what the runtime passes
//! after the user's arguments, such as the printf buffer).
//!
//! The ELF is read by `object`, the MessagePack by `rmp-serde`; both check
//! every length and offset, and anything malformed is `None`, never a panic.
//! Only the offload bundle's few fields are read here.

use object::elf::{FileHeader64, EM_AMDGPU};
use object::read::elf::{FileHeader, ProgramHeader, SectionHeader};
use object::LittleEndian;
use serde::Deserialize;

use crate::image::{bundle_entries, BUNDLE_MAGIC};

/// One argument of a kernel as its code object declares it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ArgInfo {
    #[serde(rename = ".size")]
    pub size: usize,
    #[serde(rename = ".value_kind")]
    pub value_kind: String,
}

/// One kernel of a code object.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct KernelInfo {
    /// The function's name, as `hipModuleGetFunction` looks it up.
    #[serde(rename = ".name")]
    pub name: String,
    /// The kernel descriptor's symbol (`NAME.kd`).
    #[serde(rename = ".symbol", default)]
    pub symbol: Option<String>,
    /// Every argument in order, hidden ones included; a kernel without
    /// arguments may leave `.args` out.
    #[serde(rename = ".args", default)]
    pub args: Vec<ArgInfo>,
}

impl KernelInfo {
    /// Whether this is the kernel a launch of `entry` finds.
    pub fn is(&self, entry: &str) -> bool {
        self.name == entry || self.symbol.as_deref().and_then(|symbol| symbol.strip_suffix(".kd")) == Some(entry)
    }

    /// The byte size of each parameter the caller passes, in order: the
    /// `hidden_*` arguments are the runtime's, appended after them.
    pub fn param_sizes(&self) -> Vec<usize> {
        self.args.iter().filter(|arg| !arg.value_kind.starts_with("hidden_")).map(|arg| arg.size).collect()
    }
}

/// The part of the metadata map this module reads; the rest is skipped.
#[derive(Deserialize)]
struct Metadata {
    #[serde(rename = "amdhsa.kernels")]
    kernels: Vec<KernelInfo>,
}

/// Deeper than any metadata nests (about five levels), shallow enough that
/// hostile input cannot exhaust the stack.
const MAX_DEPTH: usize = 32;

/// The kernels `image` declares; `None` if it is not a code object this
/// module can read.
pub fn kernels(image: &[u8]) -> Option<Vec<KernelInfo>> {
    let note = metadata_note(code_object(image)?)?;
    let mut reader = rmp_serde::Deserializer::from_read_ref(note);
    reader.set_max_depth(MAX_DEPTH);
    Metadata::deserialize(&mut reader).ok().map(|metadata| metadata.kernels)
}

/// The parameter sizes of kernel `entry` in `image`; `None` if the image
/// cannot be read or declares no such kernel.
pub fn param_sizes(image: &[u8], entry: &str) -> Option<Vec<usize>> {
    kernels(image)?.into_iter().find(|kernel| kernel.is(entry)).map(|kernel| kernel.param_sizes())
}

const NOTE_AMDGPU_METADATA: u32 = 32;

/// The AMDGPU ELF in `image`: the image itself, or the AMDGPU entry of an
/// offload bundle.
fn code_object(image: &[u8]) -> Option<&[u8]> {
    if image.starts_with(BUNDLE_MAGIC) {
        return bundled(image);
    }
    is_amdgpu_elf(image).then_some(image)
}

fn is_amdgpu_elf(elf: &[u8]) -> bool {
    FileHeader64::<LittleEndian>::parse(elf)
        .is_ok_and(|header| header.is_little_endian() && header.e_machine(LittleEndian) == EM_AMDGPU)
}

/// The first bundle entry for an AMD GPU that is an AMDGPU ELF, looked for
/// up to the first entry that does not fit.
fn bundled(image: &[u8]) -> Option<&[u8]> {
    let amd =
        |(triple, entry): &(&[u8], &[u8])| triple.windows(6).any(|part| part == b"amdgcn") && is_amdgpu_elf(entry);
    bundle_entries(image).map_while(|entry| entry).find(amd).map(|(_, entry)| entry)
}

/// The description of the AMDGPU metadata note, from the note sections or,
/// in an image without section headers, the note segments.
fn metadata_note(elf: &[u8]) -> Option<&[u8]> {
    let header = FileHeader64::<LittleEndian>::parse(elf).ok()?;
    let sections = header.sections(LittleEndian, elf).ok();
    let sections = sections.iter().flat_map(|sections| sections.iter()).map(|section| section.notes(LittleEndian, elf));
    let segments = header.program_headers(LittleEndian, elf).ok().into_iter().flatten();
    let segments = segments.map(|segment| segment.notes(LittleEndian, elf));
    // The sections' notes first: the segments' are read only where no section has the note.
    let note = sections.chain(segments).find_map(|notes| {
        let mut notes = notes.ok()??;
        std::iter::from_fn(|| notes.next().ok().flatten())
            .find(|note| note.n_type(LittleEndian) == NOTE_AMDGPU_METADATA && note.name() == b"AMDGPU")
    })?;
    Some(note.desc())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builtin::{cuda_source, BuiltinKernel};
    use crate::hip::hiprtc;

    const TWO_KERNELS: &str = r#"
extern "C" __global__ void put(unsigned int* out, unsigned int v) { out[0] = v; }
extern "C" __global__ void mixed(float* a, const float* b, float s, unsigned long long n) { a[0] = b[0] * s + n; }
extern "C" __global__ void nothing() {}
"#;

    fn compiled(source: &str, arch: &str) -> Vec<u8> {
        hiprtc::compile(source, Some(arch), &[], None)
            .map(|compiled| compiled.image)
            .unwrap_or_else(|error| panic!("{arch}: {error}"))
    }

    #[test]
    fn a_code_object_declares_each_kernel_with_its_parameter_sizes() {
        for arch in ["gfx90a", "gfx1030"] {
            let image = compiled(TWO_KERNELS, arch);
            let kernels = kernels(&image).unwrap_or_else(|| panic!("{arch}: unreadable code object"));
            let names: Vec<&str> = kernels.iter().map(|kernel| kernel.name.as_str()).collect();
            assert_eq!(names.len(), 3, "{arch}: {names:?}");
            for name in ["put", "mixed", "nothing"] {
                assert!(names.contains(&name), "{arch}: no {name} in {names:?}");
            }
            let put = kernels.iter().find(|kernel| kernel.is("put")).unwrap();
            assert_eq!(put.symbol.as_deref(), Some("put.kd"));
            let kinds: Vec<&str> = put.args.iter().map(|arg| arg.value_kind.as_str()).collect();
            assert_eq!(kinds, ["global_buffer", "by_value"], "{arch}");
            assert_eq!(param_sizes(&image, "put"), Some(vec![8, 4]), "{arch}");
            assert_eq!(param_sizes(&image, "mixed"), Some(vec![8, 8, 4, 8]), "{arch}");
            assert_eq!(param_sizes(&image, "nothing"), Some(vec![]), "{arch}");
            assert_eq!(param_sizes(&image, "absent"), None, "{arch}");
        }
    }

    #[test]
    fn hidden_arguments_are_not_parameters() {
        // printf makes the compiler append the runtime's arguments (global
        // offsets, the hostcall buffer) after the user's.
        let image = compiled(
            r#"extern "C" __global__ void say(unsigned int* out, unsigned int v) { printf("%u\n", v); out[0] = v; }"#,
            "gfx90a",
        );
        let say = kernels(&image).and_then(|kernels| kernels.into_iter().find(|kernel| kernel.is("say"))).unwrap();
        assert!(
            say.args.len() > 2 && say.args[2..].iter().all(|arg| arg.value_kind.starts_with("hidden_")),
            "{:?}",
            say.args
        );
        assert_eq!(say.param_sizes(), [8, 4]);
    }

    #[test]
    fn the_builtins_declare_what_the_backend_passes_them() {
        let image = compiled(cuda_source(), "gfx90a");
        let expected: [&[usize]; 7] =
            [&[8, 4, 8], &[8, 8, 8, 8], &[8, 8, 8, 8], &[8, 8, 4, 8], &[8, 8, 4, 8], &[8, 4, 8], &[8]];
        for (entry, sizes) in BuiltinKernel::ALL.map(BuiltinKernel::entry).iter().zip(expected) {
            assert_eq!(param_sizes(&image, entry).as_deref(), Some(sizes), "{entry}");
        }
    }

    /// `image` wrapped in a clang offload bundle after an empty host entry.
    fn bundle(image: &[u8], count: u64) -> Vec<u8> {
        let triples: [&[u8]; 2] = [b"host-x86_64-unknown-linux", b"hipv4-amdgcn-amd-amdhsa--gfx90a"];
        let header_len = 24 + 8 + triples.iter().map(|triple| 24 + triple.len()).sum::<usize>();
        let mut bundle = b"__CLANG_OFFLOAD_BUNDLE__".to_vec();
        bundle.extend(count.to_le_bytes());
        for (triple, (offset, size)) in triples.iter().zip([(header_len, 0), (header_len, image.len())]) {
            bundle.extend((offset as u64).to_le_bytes());
            bundle.extend((size as u64).to_le_bytes());
            bundle.extend((triple.len() as u64).to_le_bytes());
            bundle.extend(*triple);
        }
        bundle.extend(image);
        bundle
    }

    #[test]
    fn a_code_object_in_an_offload_bundle_is_read() {
        let image = compiled(TWO_KERNELS, "gfx90a");
        assert_eq!(kernels(&bundle(&image, 2)), kernels(&image));
        assert!(kernels(&image).is_some());
        // Counting only the host entry, the bundle has no code object.
        assert_eq!(kernels(&bundle(&image, 1)), None);
        // A count past the entries' headers stops at the entry that fits.
        assert_eq!(kernels(&bundle(&image, u64::MAX)), kernels(&image));
    }

    #[test]
    fn without_section_headers_the_note_segment_is_read() {
        let mut image = compiled(TWO_KERNELS, "gfx90a");
        let expected = kernels(&image);
        // e_shnum = 0: no section table.
        image[60..62].copy_from_slice(&0u16.to_le_bytes());
        assert_eq!(kernels(&image), expected);
        // e_phnum = 0 as well: nothing left to find the note by.
        image[56..58].copy_from_slice(&0u16.to_le_bytes());
        assert_eq!(kernels(&image), None);
    }

    #[test]
    fn a_truncated_code_object_reads_whole_or_not_at_all() {
        let image = compiled(TWO_KERNELS, "gfx90a");
        let whole = kernels(&image);
        assert!(whole.is_some());
        for len in 0..image.len() {
            let read = kernels(&image[..len]);
            assert!(read.is_none() || read == whole, "{len} bytes read as {read:?}");
            if len < 64 {
                assert_eq!(read, None, "{len} bytes: no ELF header");
            }
        }
    }

    #[test]
    fn corrupt_bytes_never_panic() {
        let image = compiled(TWO_KERNELS, "gfx90a");
        let mut readable = 0;
        for at in 0..image.len() {
            for byte in [0x00, 0xff, 0x7f, 0xc1, 0xdd] {
                let mut corrupt = image.clone();
                corrupt[at] = byte;
                readable += usize::from(kernels(&corrupt).is_some());
            }
        }
        // Most bytes lie outside the headers and the note.
        assert!(readable > 0);
        for garbage in [&b""[..], b"\x7fELF", b"__CLANG_OFFLOAD_BUNDLE__", &[0xff; 4096]] {
            assert_eq!(kernels(garbage), None);
        }
    }

    /// A code object whose metadata note holds `metadata` instead: the
    /// compiled one with the note's description overwritten in place.
    fn with_metadata(metadata: &[u8]) -> Vec<u8> {
        let mut image = compiled(TWO_KERNELS, "gfx90a");
        let note = metadata_note(&image).expect("a compiled code object has its note");
        let at = note.as_ptr() as usize - image.as_ptr() as usize;
        assert!(metadata.len() <= note.len(), "room for {} bytes", metadata.len());
        let end = at + note.len();
        image[at..at + metadata.len()].copy_from_slice(metadata);
        // Pad with nil values the reader reads past.
        image[at + metadata.len()..end].fill(0xc0);
        image
    }

    #[test]
    fn malformed_metadata_is_refused() {
        // A map whose kernels are not an array; a truncated string; a length
        // that promises more than there is; nesting past any real metadata.
        let kernels_key = b"\xaeamdhsa.kernels";
        let mut not_an_array = vec![0x81];
        not_an_array.extend(kernels_key);
        not_an_array.push(0x05);
        let mut truncated = vec![0x81];
        truncated.extend(&kernels_key[..8]);
        let mut huge = vec![0x81];
        huge.extend(kernels_key);
        huge.extend([0xdd, 0xff, 0xff, 0xff, 0xff]);
        let mut deep = vec![0x82];
        deep.extend(b"\xa1x");
        deep.extend([0x91; 200]);
        deep.push(0x00);
        for metadata in [&not_an_array[..], &truncated, &huge, &deep, &[0xc1]] {
            assert_eq!(kernels(&with_metadata(metadata)), None, "{metadata:?}");
        }
        // Fields this module does not read are skipped, however they nest
        // within the bound.
        let mut unread = vec![0x82];
        unread.extend(b"\xa1x");
        unread.extend([0x91; 8]);
        unread.push(0x00);
        unread.extend(kernels_key);
        unread.extend([0x91, 0x81, 0xa5]);
        unread.extend(b".name");
        unread.extend(b"\xa1k");
        let read = kernels(&with_metadata(&unread)).expect("readable");
        assert_eq!(read, [KernelInfo { name: "k".into(), symbol: None, args: vec![] }]);
    }
}
