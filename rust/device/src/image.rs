//! Module images a caller hands over, checked before a driver reads them.
//!
//! `cuModuleLoadData` and `hipModuleLoadData` take a pointer and no length:
//! the driver trusts the sizes and offsets written inside the image, so a
//! truncated or forged one would have it read past the caller's bytes.
//! Every range an image's headers name must lie inside it; what an image's
//! contents mean is still the driver's to judge.

use object::elf::{FileHeader64, SHT_NOBITS};
use object::read::elf::{FileHeader, ProgramHeader, SectionHeader};
use object::Endianness;

pub(crate) const ELF_MAGIC: &[u8] = b"\x7fELF";
/// A CUDA fat binary's first word, little-endian.
#[cfg_attr(not(any(feature = "cuda", test)), allow(dead_code))]
pub(crate) const FATBIN_MAGIC: u32 = 0xBA55_ED50;
/// A fat binary *wrapper*'s first word, little-endian: the structure a
/// host program embeds, holding a pointer to its fat binary.
#[cfg_attr(not(any(feature = "cuda", test)), allow(dead_code))]
const FATBIN_WRAPPER_MAGIC: u32 = 0x4662_43B1;

/// What a CUDA module image is, checked: true for a CUBIN or fat binary
/// (whose headers must fit its bytes), false for PTX (text). A fat binary
/// wrapper is refused: the driver would follow the pointer written in it,
/// reading wherever a forged one points.
#[cfg_attr(not(any(feature = "cuda", test)), allow(dead_code))]
pub(crate) fn check_cuda_image(image: &[u8]) -> Result<bool, String> {
    if image.starts_with(ELF_MAGIC) {
        check_elf(image).map(|()| true)
    } else if image.starts_with(&FATBIN_MAGIC.to_le_bytes()) {
        check_fatbin(image).map(|()| true)
    } else if image.starts_with(&FATBIN_WRAPPER_MAGIC.to_le_bytes()) {
        Err("a fat binary wrapper, which points at its fat binary, is no module image: pass the fat binary".into())
    } else {
        Ok(false)
    }
}

/// A clang offload bundle's first bytes (HIP code objects for several targets).
#[cfg_attr(not(any(feature = "hip", test)), allow(dead_code))]
pub(crate) const BUNDLE_MAGIC: &[u8] = b"__CLANG_OFFLOAD_BUNDLE__";

/// Refuses a 64-bit ELF image whose header, section table, sections or
/// segments reach past its end.
pub(crate) fn check_elf(image: &[u8]) -> Result<(), String> {
    let broken =
        |error: &dyn std::fmt::Display| format!("a module image whose ELF headers do not fit its bytes: {error}");
    let header = FileHeader64::<Endianness>::parse(image).map_err(|e| broken(&e))?;
    let endian = header.endian().map_err(|e| broken(&e))?;
    for section in header.section_headers(endian, image).map_err(|e| broken(&e))? {
        if section.sh_type(endian) != SHT_NOBITS {
            section.data(endian, image).map_err(|e| broken(&e))?;
        }
    }
    for segment in header.program_headers(endian, image).map_err(|e| broken(&e))? {
        segment.data(endian, image).map_err(|()| broken(&"a segment past the image's end"))?;
    }
    Ok(())
}

/// Refuses a CUDA fat binary whose header says it is longer than its bytes.
/// Layout: the magic (`u32`), a version (`u16`), the header's size (`u16`),
/// then the size of what follows it (`u64`), all little-endian.
#[cfg_attr(not(any(feature = "cuda", test)), allow(dead_code))]
pub(crate) fn check_fatbin(image: &[u8]) -> Result<(), String> {
    let field = |at: usize, len: usize| image.get(at..at + len);
    let fits = field(6, 2).zip(field(8, 8)).is_some_and(|(header, body)| {
        let header = u64::from(u16::from_le_bytes([header[0], header[1]]));
        let body = u64::from_le_bytes(body.try_into().unwrap_or_default());
        header >= 16 && header.checked_add(body).is_some_and(|len| len <= image.len() as u64)
    });
    fits.then_some(()).ok_or_else(|| "a fat binary whose header does not fit its bytes".to_owned())
}

/// The entries of clang offload bundle `image`, in order, each its target
/// triple and its bytes; an entry that does not fit the image (or a count
/// that cannot be read) comes as one `None`, which ends them. Layout: the
/// magic, an entry count, then per entry its offset, size, and the length
/// and bytes of its target triple (all counts little-endian `u64`).
#[cfg_attr(not(any(feature = "hip", test)), allow(dead_code))]
pub(crate) fn bundle_entries(image: &[u8]) -> impl Iterator<Item = Option<(&[u8], &[u8])>> {
    let u64_at =
        |at: usize| -> Option<u64> { Some(u64::from_le_bytes(image.get(at..at.checked_add(8)?)?.try_into().ok()?)) };
    let range = |offset: u64, len: u64| -> Option<&[u8]> {
        let start = usize::try_from(offset).ok()?;
        image.get(start..start.checked_add(usize::try_from(len).ok()?)?)
    };
    let mut count = u64_at(BUNDLE_MAGIC.len());
    let (mut at, mut ended) = (BUNDLE_MAGIC.len() + 8, false);
    // Each entry moves `at` on by 24 bytes at least and `at` stays inside
    // the image, so a false count ends in a `None`, not a long loop.
    std::iter::from_fn(move || {
        let entry = match count {
            _ if ended => return None,
            Some(0) => return None,
            Some(left) => {
                count = Some(left - 1);
                (|| {
                    let (offset, size, triple_len) = (u64_at(at)?, u64_at(at + 8)?, u64_at(at + 16)?);
                    let triple = range(u64::try_from(at + 24).ok()?, triple_len)?;
                    at = at.checked_add(24)?.checked_add(triple.len())?;
                    Some((triple, range(offset, size)?))
                })()
            }
            None => None,
        };
        ended = entry.is_none();
        Some(entry)
    })
}

/// Refuses a clang offload bundle whose entries reach past its end, or
/// whose ELF entries do (see [`check_elf`]).
#[cfg_attr(not(any(feature = "hip", test)), allow(dead_code))]
pub(crate) fn check_bundle(image: &[u8]) -> Result<(), String> {
    for entry in bundle_entries(image) {
        let (_, entry) = entry.ok_or("an offload bundle whose entries do not fit its bytes")?;
        if entry.starts_with(ELF_MAGIC) {
            check_elf(entry)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An ELF file of this host: the test binary itself.
    fn some_elf() -> Vec<u8> {
        std::fs::read(std::env::current_exe().unwrap()).unwrap()
    }

    #[test]
    fn a_whole_elf_passes_and_a_cut_or_forged_one_is_refused() {
        let elf = some_elf();
        if !elf.starts_with(ELF_MAGIC) {
            return eprintln!("skipped: this host's executables are not ELF files");
        }
        assert_eq!(check_elf(&elf), Ok(()));
        assert!(check_elf(ELF_MAGIC).is_err(), "the magic alone");
        assert!(check_elf(&elf[..elf.len() / 2]).is_err(), "cut in half: the section table is past the end");
        let mut forged = elf.clone();
        // e_shoff, the section table's offset, pointed past the end.
        forged[0x28..0x30].copy_from_slice(&(elf.len() as u64).to_le_bytes());
        assert!(check_elf(&forged).is_err());
    }

    #[test]
    fn an_elf_is_read_wherever_it_lies_in_memory() {
        // A bundle's entry, or a caller's slice, need not start on an 8-byte
        // boundary: `object` reads the headers unaligned.
        let elf = some_elf();
        if !elf.starts_with(ELF_MAGIC) {
            return eprintln!("skipped: this host's executables are not ELF files");
        }
        let mut shifted = vec![0u8; 1];
        shifted.extend(&elf);
        assert_eq!(check_elf(&shifted[1..]), Ok(()));
    }

    #[test]
    fn a_fat_binary_must_hold_the_bytes_its_header_names() {
        let mut fatbin = FATBIN_MAGIC.to_le_bytes().to_vec();
        fatbin.extend(1u16.to_le_bytes());
        fatbin.extend(16u16.to_le_bytes());
        fatbin.extend(8u64.to_le_bytes());
        assert!(check_fatbin(&fatbin).is_err(), "8 bytes named, none there");
        fatbin.extend([0; 8]);
        assert_eq!(check_fatbin(&fatbin), Ok(()));
        fatbin[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(check_fatbin(&fatbin).is_err(), "a size that overflows");
        assert!(check_fatbin(&FATBIN_MAGIC.to_le_bytes()).is_err(), "the magic alone");
    }

    #[test]
    fn a_fat_binary_wrapper_is_refused_and_text_is_ptx() {
        let mut wrapper = FATBIN_WRAPPER_MAGIC.to_le_bytes().to_vec();
        wrapper.extend(1u32.to_le_bytes());
        wrapper.extend(0xdead_beef_u64.to_le_bytes()); // where its fat binary would be
        assert!(check_cuda_image(&wrapper).unwrap_err().contains("wrapper"));
        assert_eq!(check_cuda_image(b".version 8.0\n.target sm_90\n"), Ok(false));
        assert!(check_cuda_image(&FATBIN_MAGIC.to_le_bytes()).is_err(), "a fat binary is checked");
    }

    #[test]
    fn an_offload_bundle_must_hold_its_entries() {
        let triple = b"hipv4-amdgcn-amd-amdhsa--gfx90a";
        let entry = |offset: u64, size: u64| {
            let mut bytes = offset.to_le_bytes().to_vec();
            bytes.extend(size.to_le_bytes());
            bytes.extend((triple.len() as u64).to_le_bytes());
            bytes.extend(triple);
            bytes
        };
        let mut bundle = BUNDLE_MAGIC.to_vec();
        bundle.extend(1u64.to_le_bytes());
        let payload_at = (bundle.len() + 24 + triple.len()) as u64;
        let mut whole = bundle.clone();
        whole.extend(entry(payload_at, 4));
        whole.extend(b"code");
        assert_eq!(check_bundle(&whole), Ok(()));
        assert_eq!(bundle_entries(&whole).collect::<Vec<_>>(), [Some((&triple[..], &b"code"[..]))]);
        let mut past = bundle.clone();
        past.extend(entry(payload_at, 1 << 40));
        assert!(check_bundle(&past).is_err(), "an entry past the end");
        let mut counted = BUNDLE_MAGIC.to_vec();
        counted.extend(u64::MAX.to_le_bytes());
        assert!(check_bundle(&counted).is_err(), "more entries than bytes");
        assert_eq!(bundle_entries(&counted).collect::<Vec<_>>(), [None], "one None ends them");
        assert_eq!(bundle_entries(BUNDLE_MAGIC).collect::<Vec<_>>(), [None], "no count");
    }
}
