//! Element types: what a buffer holds, so that ops can refuse the wrong one.

/// The element type of a buffer. Sizes, offsets and counts of a buffer are
/// in its elements; a [`ElementType::Bytes`] buffer counts single bytes and
/// takes any data, the one way to reinterpret memory on purpose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum ElementType {
    /// Raw bytes, with no claim about what they hold.
    Bytes,
    F32,
    I32,
    U32,
}

impl ElementType {
    /// Bytes per element.
    pub fn size_bytes(self) -> u64 {
        match self {
            ElementType::Bytes => 1,
            ElementType::F32 | ElementType::I32 | ElementType::U32 => 4,
        }
    }

    /// Lower-case name, as Rust spells the type (`u8` for bytes).
    pub fn name(self) -> &'static str {
        match self {
            ElementType::Bytes => "u8",
            ElementType::F32 => "f32",
            ElementType::I32 => "i32",
            ElementType::U32 => "u32",
        }
    }

    /// What counts of this type are counted in, for messages: "bytes", "f32 elements".
    #[doc(hidden)]
    pub fn unit(self) -> String {
        match self {
            ElementType::Bytes => "bytes".to_owned(),
            other => format!("{} elements", other.name()),
        }
    }

    /// True when a buffer of this type may be used as `wanted`: the same
    /// type, or raw bytes, whose meaning the caller owns.
    #[doc(hidden)]
    pub fn serves(self, wanted: ElementType) -> bool {
        self == wanted || self == ElementType::Bytes
    }

    /// True when buffers of this type and `other` may be copied into each
    /// other: one type, or raw bytes on either side.
    #[doc(hidden)]
    pub fn agrees_with(self, other: ElementType) -> bool {
        self.serves(other) || other.serves(self)
    }
}

impl std::fmt::Display for ElementType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A Rust type that buffers hold: `u8` (raw bytes), `f32`, `i32`, `u32`.
pub trait Element: bytemuck::Pod + sealed::Sealed {
    /// Its element type.
    const TYPE: ElementType;
}

macro_rules! element {
    ($($rust:ty => $kind:ident),*) => {$(
        impl sealed::Sealed for $rust {}
        impl Element for $rust {
            const TYPE: ElementType = ElementType::$kind;
        }
    )*};
}

element!(u8 => Bytes, f32 => F32, i32 => I32, u32 => U32);
