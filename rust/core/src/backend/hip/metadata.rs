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
//! The bytes are untrusted in the sense that matters here: every length and
//! offset is checked, nesting is bounded, and anything malformed is `None`,
//! never a panic.

/// One argument of a kernel as its code object declares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ArgInfo {
    pub size: usize,
    pub value_kind: String,
}

impl ArgInfo {
    /// True for the arguments the runtime appends, which the caller never passes.
    pub fn is_hidden(&self) -> bool {
        self.value_kind.starts_with("hidden_")
    }
}

/// One kernel of a code object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KernelInfo {
    /// The function's name, as `hipModuleGetFunction` looks it up.
    pub name: String,
    /// The kernel descriptor's symbol (`NAME.kd`).
    pub symbol: Option<String>,
    /// Every argument in order, hidden ones included.
    pub args: Vec<ArgInfo>,
}

impl KernelInfo {
    /// Whether this is the kernel a launch of `entry` finds.
    pub fn is(&self, entry: &str) -> bool {
        self.name == entry || self.symbol.as_deref().and_then(|symbol| symbol.strip_suffix(".kd")) == Some(entry)
    }

    /// The byte size of each parameter the caller passes, in order.
    pub fn param_sizes(&self) -> Vec<usize> {
        self.args.iter().filter(|arg| !arg.is_hidden()).map(|arg| arg.size).collect()
    }
}

/// The kernels `image` declares; `None` if it is not a code object this
/// module can read.
pub(crate) fn kernels(image: &[u8]) -> Option<Vec<KernelInfo>> {
    let elf = elf::code_object(image)?;
    let note = elf::metadata_note(elf)?;
    let root = msgpack::Reader::new(note).value(0)?;
    root.get("amdhsa.kernels")?.as_array()?.iter().map(kernel).collect()
}

/// The parameter sizes of kernel `entry` in `image`; `None` if the image
/// cannot be read or declares no such kernel.
pub(crate) fn param_sizes(image: &[u8], entry: &str) -> Option<Vec<usize>> {
    kernels(image)?.into_iter().find(|kernel| kernel.is(entry)).map(|kernel| kernel.param_sizes())
}

fn kernel(value: &msgpack::Value<'_>) -> Option<KernelInfo> {
    let name = value.get(".name")?.as_str()?.to_owned();
    let symbol = match value.get(".symbol") {
        Some(symbol) => Some(symbol.as_str()?.to_owned()),
        None => None,
    };
    // A kernel without arguments may leave `.args` out.
    let args = match value.get(".args") {
        Some(args) => args.as_array()?.iter().map(arg).collect::<Option<Vec<_>>>()?,
        None => Vec::new(),
    };
    Some(KernelInfo { name, symbol, args })
}

fn arg(value: &msgpack::Value<'_>) -> Option<ArgInfo> {
    let size = usize::try_from(value.get(".size")?.as_int()?).ok()?;
    let value_kind = value.get(".value_kind")?.as_str()?.to_owned();
    Some(ArgInfo { size, value_kind })
}

/// Little-endian reads that fail instead of running off the end.
fn bytes_at<const N: usize>(bytes: &[u8], at: usize) -> Option<[u8; N]> {
    bytes.get(at..at.checked_add(N)?)?.try_into().ok()
}

fn u16_at(bytes: &[u8], at: usize) -> Option<u16> {
    bytes_at(bytes, at).map(u16::from_le_bytes)
}

fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    bytes_at(bytes, at).map(u32::from_le_bytes)
}

fn u64_at(bytes: &[u8], at: usize) -> Option<u64> {
    bytes_at(bytes, at).map(u64::from_le_bytes)
}

/// `len` bytes of `bytes` from `offset`, both as the file states them.
fn range(bytes: &[u8], offset: u64, len: u64) -> Option<&[u8]> {
    let start = usize::try_from(offset).ok()?;
    let end = start.checked_add(usize::try_from(len).ok()?)?;
    bytes.get(start..end)
}

/// The ELF and offload-bundle layers.
mod elf {
    use super::{range, u16_at, u32_at, u64_at};

    const MAGIC: &[u8] = b"\x7fELF";
    const CLASS_64: u8 = 2;
    const LITTLE_ENDIAN: u8 = 1;
    const MACHINE_AMDGPU: u16 = 224;
    const NOTE_AMDGPU_METADATA: u32 = 32;
    const BUNDLE_MAGIC: &[u8] = b"__CLANG_OFFLOAD_BUNDLE__";

    /// The AMDGPU ELF in `image`: the image itself, or the AMDGPU entry of
    /// an offload bundle.
    pub fn code_object(image: &[u8]) -> Option<&[u8]> {
        if image.starts_with(BUNDLE_MAGIC) {
            return bundled(image);
        }
        is_amdgpu_elf(image).then_some(image)
    }

    fn is_amdgpu_elf(elf: &[u8]) -> bool {
        elf.starts_with(MAGIC)
            && elf.get(4) == Some(&CLASS_64)
            && elf.get(5) == Some(&LITTLE_ENDIAN)
            && u16_at(elf, 18) == Some(MACHINE_AMDGPU)
    }

    /// The first bundle entry for an AMD GPU that is an AMDGPU ELF. Layout:
    /// the magic, an entry count, then per entry its offset, size, and the
    /// length and bytes of its target triple (all counts `u64`).
    fn bundled(image: &[u8]) -> Option<&[u8]> {
        let count = u64_at(image, BUNDLE_MAGIC.len())?;
        let mut at = BUNDLE_MAGIC.len() + 8;
        // `at` never passes the image's end, so the sums below cannot
        // overflow; each entry header takes 24 bytes, so a false count ends
        // the loop at the image's end.
        for _ in 0..count {
            let (offset, size, triple_len) = (u64_at(image, at)?, u64_at(image, at + 8)?, u64_at(image, at + 16)?);
            let triple = range(image, u64::try_from(at + 24).ok()?, triple_len)?;
            at = at.checked_add(24)?.checked_add(triple.len())?;
            let entry = range(image, offset, size)?;
            if triple.windows(6).any(|part| part == b"amdgcn") && is_amdgpu_elf(entry) {
                return Some(entry);
            }
        }
        None
    }

    /// Where an ELF header table keeps what finding notes needs: the
    /// table's offset, entry size and count in the file header; in each
    /// entry, its type, and its contents' offset and size.
    struct Table {
        offset_at: usize,
        entry_size_at: usize,
        count_at: usize,
        type_at: usize,
        note_type: u32,
        contents_at: usize,
        size_at: usize,
    }

    /// Section headers (`Elf64_Shdr`); notes are `SHT_NOTE` (7).
    const SECTIONS: Table = Table {
        offset_at: 40,
        entry_size_at: 58,
        count_at: 60,
        type_at: 4,
        note_type: 7,
        contents_at: 24,
        size_at: 32,
    };
    /// Program headers (`Elf64_Phdr`); notes are `PT_NOTE` (4).
    const SEGMENTS: Table =
        Table { offset_at: 32, entry_size_at: 54, count_at: 56, type_at: 0, note_type: 4, contents_at: 8, size_at: 32 };

    /// The description of the AMDGPU metadata note, from the note sections
    /// or, in an image without section headers, the note segments.
    pub fn metadata_note(elf: &[u8]) -> Option<&[u8]> {
        [SECTIONS, SEGMENTS].iter().find_map(|table| note_in(elf, table))
    }

    fn note_in<'a>(elf: &'a [u8], table: &Table) -> Option<&'a [u8]> {
        let start = usize::try_from(u64_at(elf, table.offset_at)?).ok()?;
        let entry_size = usize::from(u16_at(elf, table.entry_size_at)?);
        let count = usize::from(u16_at(elf, table.count_at)?);
        if entry_size < table.size_at + 8 {
            return None;
        }
        (0..count).find_map(|index| {
            let header = start.checked_add(index.checked_mul(entry_size)?)?;
            let field = |at: usize| header.checked_add(at);
            if u32_at(elf, field(table.type_at)?)? != table.note_type {
                return None;
            }
            let notes = range(elf, u64_at(elf, field(table.contents_at)?)?, u64_at(elf, field(table.size_at)?)?)?;
            find_note(notes)
        })
    }

    /// Walks the notes of one area: each a name size, description size and
    /// type (`u32`s), then the name and the description, each padded to 4 bytes.
    fn find_note(mut notes: &[u8]) -> Option<&[u8]> {
        let padded = |len: usize| len.checked_add(3).map(|len| len & !3);
        while notes.len() >= 12 {
            let name_len = usize::try_from(u32_at(notes, 0)?).ok()?;
            let description_len = usize::try_from(u32_at(notes, 4)?).ok()?;
            let kind = u32_at(notes, 8)?;
            let description_at = 12usize.checked_add(padded(name_len)?)?;
            let name = notes.get(12..12usize.checked_add(name_len)?)?;
            let description = notes.get(description_at..description_at.checked_add(description_len)?)?;
            if kind == NOTE_AMDGPU_METADATA && name.strip_suffix(b"\0").unwrap_or(name) == b"AMDGPU" {
                return Some(description);
            }
            notes = notes.get(description_at.checked_add(padded(description_len)?)?..).unwrap_or_default();
        }
        None
    }
}

/// Just enough MessagePack for the metadata: maps, arrays, strings,
/// integers, booleans and nil; floats, binaries and extensions are read past.
mod msgpack {
    /// Deeper than any metadata nests (about five levels), shallow enough
    /// that hostile input cannot exhaust the stack.
    const MAX_DEPTH: u32 = 32;

    #[derive(Debug, Clone, PartialEq)]
    pub enum Value<'a> {
        Nil,
        Bool(bool),
        Int(i128),
        Str(&'a str),
        Array(Vec<Value<'a>>),
        Map(Vec<(Value<'a>, Value<'a>)>),
        /// A float, binary or extension: present, but not read.
        Skipped,
    }

    impl<'a> Value<'a> {
        /// The value at string key `key` of a map; the first if repeated.
        pub fn get(&self, key: &str) -> Option<&Value<'a>> {
            match self {
                Value::Map(entries) => entries.iter().find(|(k, _)| *k == Value::Str(key)).map(|(_, v)| v),
                _ => None,
            }
        }

        pub fn as_array(&self) -> Option<&[Value<'a>]> {
            match self {
                Value::Array(items) => Some(items),
                _ => None,
            }
        }

        pub fn as_str(&self) -> Option<&'a str> {
            match self {
                Value::Str(text) => Some(text),
                _ => None,
            }
        }

        pub fn as_int(&self) -> Option<i128> {
            match self {
                Value::Int(value) => Some(*value),
                _ => None,
            }
        }
    }

    pub struct Reader<'a> {
        bytes: &'a [u8],
        at: usize,
    }

    impl<'a> Reader<'a> {
        pub fn new(bytes: &'a [u8]) -> Self {
            Reader { bytes, at: 0 }
        }

        fn take(&mut self, len: usize) -> Option<&'a [u8]> {
            let taken = self.bytes.get(self.at..self.at.checked_add(len)?)?;
            self.at += len;
            Some(taken)
        }

        fn byte(&mut self) -> Option<u8> {
            self.take(1)?.first().copied()
        }

        /// A big-endian unsigned integer of `width` bytes (1, 2, 4 or 8).
        fn uint(&mut self, width: usize) -> Option<u64> {
            let bytes = self.take(width)?;
            Some(bytes.iter().fold(0u64, |value, &byte| (value << 8) | u64::from(byte)))
        }

        /// A big-endian two's-complement integer of `width` bytes.
        fn int(&mut self, width: usize) -> Option<i128> {
            let raw = self.uint(width)?;
            let shift = 64 - 8 * width as u32;
            Some(i128::from(((raw << shift) as i64) >> shift))
        }

        fn len(&mut self, width: usize) -> Option<usize> {
            usize::try_from(self.uint(width)?).ok()
        }

        fn str(&mut self, len: usize) -> Option<Value<'a>> {
            std::str::from_utf8(self.take(len)?).ok().map(Value::Str)
        }

        fn skip(&mut self, len: usize) -> Option<Value<'a>> {
            self.take(len).map(|_| Value::Skipped)
        }

        fn array(&mut self, len: usize, depth: u32) -> Option<Value<'a>> {
            // Every element takes at least a byte: a false length fails at the end.
            let mut items = Vec::new();
            for _ in 0..len {
                items.push(self.value(depth + 1)?);
            }
            Some(Value::Array(items))
        }

        fn map(&mut self, len: usize, depth: u32) -> Option<Value<'a>> {
            let mut entries = Vec::new();
            for _ in 0..len {
                let key = self.value(depth + 1)?;
                entries.push((key, self.value(depth + 1)?));
            }
            Some(Value::Map(entries))
        }

        /// The value that starts here, `depth` containers deep.
        pub fn value(&mut self, depth: u32) -> Option<Value<'a>> {
            if depth > MAX_DEPTH {
                return None;
            }
            let tag = self.byte()?;
            match tag {
                0x00..=0x7f => Some(Value::Int(i128::from(tag))),
                0x80..=0x8f => self.map(usize::from(tag & 0x0f), depth),
                0x90..=0x9f => self.array(usize::from(tag & 0x0f), depth),
                0xa0..=0xbf => self.str(usize::from(tag & 0x1f)),
                0xc0 => Some(Value::Nil),
                0xc2 => Some(Value::Bool(false)),
                0xc3 => Some(Value::Bool(true)),
                // bin 8/16/32: a length, then the bytes.
                0xc4 => self.len(1).and_then(|len| self.skip(len)),
                0xc5 => self.len(2).and_then(|len| self.skip(len)),
                0xc6 => self.len(4).and_then(|len| self.skip(len)),
                // ext 8/16/32: a length, a type byte, then the bytes.
                0xc7 => self.len(1).and_then(|len| self.skip(len.checked_add(1)?)),
                0xc8 => self.len(2).and_then(|len| self.skip(len.checked_add(1)?)),
                0xc9 => self.len(4).and_then(|len| self.skip(len.checked_add(1)?)),
                0xca => self.skip(4),
                0xcb => self.skip(8),
                0xcc => self.uint(1).map(|v| Value::Int(i128::from(v))),
                0xcd => self.uint(2).map(|v| Value::Int(i128::from(v))),
                0xce => self.uint(4).map(|v| Value::Int(i128::from(v))),
                0xcf => self.uint(8).map(|v| Value::Int(i128::from(v))),
                0xd0 => self.int(1).map(Value::Int),
                0xd1 => self.int(2).map(Value::Int),
                0xd2 => self.int(4).map(Value::Int),
                0xd3 => self.int(8).map(Value::Int),
                // fixext 1/2/4/8/16: a type byte, then that many bytes.
                0xd4 => self.skip(2),
                0xd5 => self.skip(3),
                0xd6 => self.skip(5),
                0xd7 => self.skip(9),
                0xd8 => self.skip(17),
                0xd9 => self.len(1).and_then(|len| self.str(len)),
                0xda => self.len(2).and_then(|len| self.str(len)),
                0xdb => self.len(4).and_then(|len| self.str(len)),
                0xdc => self.len(2).and_then(|len| self.array(len, depth)),
                0xdd => self.len(4).and_then(|len| self.array(len, depth)),
                0xde => self.len(2).and_then(|len| self.map(len, depth)),
                0xdf => self.len(4).and_then(|len| self.map(len, depth)),
                0xe0..=0xff => Some(Value::Int(i128::from(tag as i8))),
                // 0xc1 is never used.
                _ => None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::msgpack::{Reader, Value};
    use super::*;
    use crate::backend::gpu::{BUILTIN_ENTRIES, BUILTIN_SOURCE};
    use crate::backend::hip::hiprtc;

    const TWO_KERNELS: &str = r#"
extern "C" __global__ void put(unsigned int* out, unsigned int v) { out[0] = v; }
extern "C" __global__ void mixed(float* a, const float* b, float s, unsigned long long n) { a[0] = b[0] * s + n; }
extern "C" __global__ void nothing() {}
"#;

    fn compiled(source: &str, arch: &str) -> Vec<u8> {
        hiprtc::compile(source, Some(arch)).unwrap_or_else(|error| panic!("{arch}: {error}"))
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
        assert!(say.args.len() > 2 && say.args[2..].iter().all(ArgInfo::is_hidden), "{:?}", say.args);
        assert_eq!(say.param_sizes(), [8, 4]);
    }

    #[test]
    fn the_builtins_declare_what_the_backend_passes_them() {
        let image = compiled(BUILTIN_SOURCE, "gfx90a");
        let expected: [&[usize]; 7] =
            [&[8, 4, 8], &[8, 8, 8, 8], &[8, 8, 8, 8], &[8, 8, 4, 8], &[8, 8, 4, 8], &[8, 4, 8], &[8]];
        for (entry, sizes) in BUILTIN_ENTRIES.iter().zip(expected) {
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

    fn read(bytes: &[u8]) -> Option<Value<'_>> {
        Reader::new(bytes).value(0)
    }

    #[test]
    fn messagepack_values_of_every_width_read() {
        assert_eq!(read(&[0x05]), Some(Value::Int(5)));
        assert_eq!(read(&[0xff]), Some(Value::Int(-1)));
        assert_eq!(read(&[0xcc, 0xfe]), Some(Value::Int(254)));
        assert_eq!(read(&[0xcd, 0x01, 0x00]), Some(Value::Int(256)));
        assert_eq!(read(&[0xce, 0, 1, 0, 0]), Some(Value::Int(65_536)));
        assert_eq!(read(&[0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]), Some(Value::Int(u64::MAX.into())));
        assert_eq!(read(&[0xd0, 0x80]), Some(Value::Int(-128)));
        assert_eq!(read(&[0xd1, 0xff, 0x00]), Some(Value::Int(-256)));
        assert_eq!(read(&[0xd3, 0x80, 0, 0, 0, 0, 0, 0, 0]), Some(Value::Int(i64::MIN.into())));
        assert_eq!(read(&[0xc0]), Some(Value::Nil));
        assert_eq!(read(&[0xc3]), Some(Value::Bool(true)));
        assert_eq!(read(&[0xa2, b'h', b'i']), Some(Value::Str("hi")));
        assert_eq!(read(&[0xd9, 1, b'x']), Some(Value::Str("x")));
        assert_eq!(read(&[0xcb, 0, 0, 0, 0, 0, 0, 0, 0]), Some(Value::Skipped));
        assert_eq!(read(&[0xd6, 1, 0, 0, 0, 0]), Some(Value::Skipped));
        let map = read(&[0xde, 0, 2, 0xa1, b'a', 0x92, 0x01, 0xc2, 0xa1, b'b', 0xca, 0, 0, 0, 0]).unwrap();
        assert_eq!(map.get("a"), Some(&Value::Array(vec![Value::Int(1), Value::Bool(false)])));
        assert_eq!(map.get("b"), Some(&Value::Skipped));
        assert_eq!(map.get("c"), None);
    }

    #[test]
    fn malformed_messagepack_is_refused() {
        // The unused tag, truncations, a string that is not UTF-8.
        for bytes in [&[0xc1][..], &[0xcd, 0x01], &[0xa3, b'a'], &[0xa1, 0xff], &[0x92, 0x01], &[]] {
            assert_eq!(read(bytes), None, "{bytes:?}");
        }
        // A length that promises more than there is fails without allocating it.
        assert_eq!(read(&[0xdd, 0xff, 0xff, 0xff, 0xff, 0x01]), None);
        assert_eq!(read(&[0xdf, 0xff, 0xff, 0xff, 0xff]), None);
        assert_eq!(read(&[0xc6, 0xff, 0xff, 0xff, 0xff]), None);
        // Nesting past any real metadata stops before the stack does.
        assert_eq!(read(&[0x91; 100_000]), None);
        let mut shallow = vec![0x91; 8];
        shallow.push(0x00);
        assert!(read(&shallow).is_some());
    }
}
