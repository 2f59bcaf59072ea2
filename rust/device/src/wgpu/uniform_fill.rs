//! How a launch's scalars fill the uniforms of a WGSL kernel with a layout
//! of its own (see [`super::interface`]): each value a uniform holds (a
//! field, a vector's or a matrix's component, an array's element, in
//! declaration order) takes one scalar of its type, at the offset WGSL's
//! layout rules give it; a bytes scalar fills a whole uniform (a struct
//! passed by value).

use wgpu::naga;
use wgpu::naga::common::wgsl::{TryToWgsl, TypeContext};

use crate::kernel::ScalarArg;

/// The type of one scalar argument, as a uniform must hold it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScalarType {
    /// An unsigned integer of this many bytes.
    Uint(u8),
    /// A signed integer of this many bytes.
    Sint(u8),
    /// A float of this many bytes (2: f16 bits).
    Float(u8),
    /// Raw bytes, this many: a whole uniform's.
    Bytes(u32),
}

impl ScalarType {
    pub fn of(scalar: &ScalarArg) -> ScalarType {
        let width = scalar.size() as u8;
        match scalar {
            ScalarArg::U8(_) | ScalarArg::U16(_) | ScalarArg::U32(_) | ScalarArg::U64(_) => ScalarType::Uint(width),
            ScalarArg::I8(_) | ScalarArg::I16(_) | ScalarArg::I32(_) | ScalarArg::I64(_) => ScalarType::Sint(width),
            ScalarArg::F16Bits(_) | ScalarArg::F32(_) | ScalarArg::F64(_) => ScalarType::Float(width),
            ScalarArg::Bytes(bytes) => ScalarType::Bytes(u32::try_from(bytes.len()).unwrap_or(u32::MAX)),
        }
    }

    fn name(self) -> String {
        match self {
            ScalarType::Uint(width) => format!("u{}", 8 * u32::from(width)),
            ScalarType::Sint(width) => format!("i{}", 8 * u32::from(width)),
            ScalarType::Float(width) => format!("f{}", 8 * u32::from(width)),
            ScalarType::Bytes(len) => format!("{len} bytes"),
        }
    }

    fn matches(self, scalar: naga::Scalar) -> bool {
        let (kind, width) = match self {
            ScalarType::Uint(width) => (naga::ScalarKind::Uint, width),
            ScalarType::Sint(width) => (naga::ScalarKind::Sint, width),
            ScalarType::Float(width) => (naga::ScalarKind::Float, width),
            ScalarType::Bytes(_) => return false,
        };
        scalar.kind == kind && scalar.width == width
    }
}

/// One uniform's bytes, and which scalar goes where in them.
#[derive(Debug, Clone, PartialEq)]
pub struct Uniform {
    pub size: u32,
    /// (byte offset, index of the scalar written there).
    pub values: Vec<(u32, usize)>,
}

impl Uniform {
    /// The uniform's bytes, filled from a launch's `scalars`.
    pub fn bytes(&self, scalars: &[&ScalarArg]) -> Vec<u8> {
        let mut bytes = vec![0u8; self.size as usize];
        for &(offset, index) in &self.values {
            let Some(scalar) = scalars.get(index) else { continue };
            let number;
            let value: &[u8] = match scalar {
                ScalarArg::Bytes(raw) => raw,
                other => {
                    number = other.to_bytes();
                    &number
                }
            };
            let at = offset as usize;
            if let Some(slot) = bytes.get_mut(at..at + value.len()) {
                slot.copy_from_slice(value);
            }
        }
        bytes
    }
}

pub(super) fn plural(count: usize) -> &'static str {
    if count == 1 {
        ""
    } else {
        "s"
    }
}

/// One value a uniform holds: where, of what type, and its name in the source.
struct Value {
    offset: u32,
    scalar: naga::Scalar,
    name: String,
}

/// Fills `uniforms`, in order, from `scalars`: one scalar per value, or a
/// bytes scalar for a whole uniform (see the module doc).
pub(super) fn fill_uniforms(
    module: &naga::Module,
    uniforms: &[(&str, naga::Handle<naga::Type>)],
    scalars: &[ScalarType],
    buffers: usize,
) -> Result<Vec<Uniform>, String> {
    let names: Vec<String> = scalars.iter().map(|scalar| scalar.name()).collect();
    let wanted = format!("{} scalar{} passed ({})", scalars.len(), plural(scalars.len()), names.join(", "));
    if uniforms.is_empty() && !scalars.is_empty() {
        return Err(format!(
            "{} scalar argument{} passed, but the WGSL declares no uniform to hold them (Weir's layout: at \
             @group(0) @binding({buffers}))",
            scalars.len(),
            plural(scalars.len())
        ));
    }
    if let ([first, ..], []) = (uniforms, scalars) {
        return Err(format!("{} is a uniform, but no scalar arguments were passed (they are what it holds)", first.0));
    }
    let mut filled = Vec::new();
    let mut next = 0;
    for &(at, handle) in uniforms {
        let ty = &module.types[handle];
        let size = ty.inner.try_size(module.to_ctx()).unwrap_or(0);
        let padded = size.div_ceil(16).max(1) * 16;
        let described = describe(module, handle);
        if let Some(&ScalarType::Bytes(len)) = scalars.get(next) {
            let used = used_bytes(module, handle);
            if len < used || len > size {
                return Err(format!(
                    "{at} is {described} of {size} bytes (its last value ends at byte {used}), but scalar {next} is \
                     {len} bytes"
                ));
            }
            filled.push(Uniform { size: padded, values: vec![(0, next)] });
            next += 1;
            continue;
        }
        // Flattened no further than the scalars left could fill, and one
        // more to name the first that gets none: a uniform array may hold
        // millions of values, each a name and a place.
        let mut values = Vec::new();
        flatten(module, handle, 0, "", scalars.len() - next + 1, &mut values)?;
        let mut placed = Vec::with_capacity(values.len());
        for value in values {
            let field = if value.name.is_empty() { "its value".to_owned() } else { format!("field `{}`", value.name) };
            let shown = value.scalar.to_wgsl_for_diagnostics();
            let Some(&scalar) = scalars.get(next) else {
                return Err(format!("{at} is {described}, but {wanted}: {field} ({shown}) gets no scalar"));
            };
            if !scalar.matches(value.scalar) {
                return Err(format!("{at}: {field} is {shown}, but scalar {next} is {} ({wanted})", scalar.name()));
            }
            placed.push((value.offset, next));
            next += 1;
        }
        filled.push(Uniform { size: padded, values: placed });
    }
    if next < scalars.len() {
        let held: Vec<&str> = uniforms.iter().map(|(at, _)| *at).collect();
        return Err(format!(
            "{wanted}, but the uniforms hold {next} value{}: {} (scalar {next} has no place)",
            plural(next),
            held.join(", ")
        ));
    }
    Ok(filled)
}

/// "a struct of 2 fields", "one f32", "a `vec4<f32>`", for messages.
fn describe(module: &naga::Module, ty: naga::Handle<naga::Type>) -> String {
    match &module.types[ty].inner {
        naga::TypeInner::Struct { members, .. } => {
            format!("a struct of {} field{}", members.len(), plural(members.len()))
        }
        naga::TypeInner::Scalar(_) => format!("one {}", module.types.type_to_string(ty)),
        _ => format!("a {}", module.types.type_to_string(ty)),
    }
}

/// The values of a value of type `ty` at `offset`, in declaration order,
/// until `values` holds `most`.
fn flatten(
    module: &naga::Module,
    ty: naga::Handle<naga::Type>,
    offset: u32,
    name: &str,
    most: usize,
    values: &mut Vec<Value>,
) -> Result<(), String> {
    if values.len() >= most {
        return Ok(());
    }
    // A top-level value's name has no leading dot (and so no name below it starts with one).
    let part = |suffix: &str| format!("{name}{suffix}").trim_start_matches('.').to_owned();
    match &module.types[ty].inner {
        naga::TypeInner::Scalar(scalar) => values.push(Value { offset, scalar: *scalar, name: name.to_owned() }),
        naga::TypeInner::Vector { size, scalar } => {
            for (index, component) in ["x", "y", "z", "w"].iter().take(*size as usize).enumerate() {
                let at = offset + index as u32 * u32::from(scalar.width);
                values.push(Value { offset: at, scalar: *scalar, name: part(&format!(".{component}")) });
            }
        }
        naga::TypeInner::Matrix { columns, rows, scalar } => {
            // A column is aligned as a vector of its rows: 2 rows to twice a
            // value's width, 3 and 4 to four times.
            let column = if *rows as u32 == 2 { 2 } else { 4 } * u32::from(scalar.width);
            for c in 0..*columns as u32 {
                for r in 0..*rows as u32 {
                    let at = offset + c * column + r * u32::from(scalar.width);
                    values.push(Value { offset: at, scalar: *scalar, name: part(&format!("[{c}][{r}]")) });
                }
            }
        }
        naga::TypeInner::Array { base, size, stride } => {
            let Ok(naga::proc::IndexableLength::Known(count)) = size.resolve(module.to_ctx()) else {
                return Err(format!("`{name}` is an array of no fixed length: scalars fill fixed-size values only"));
            };
            for index in 0..count {
                if values.len() >= most {
                    break;
                }
                flatten(module, *base, offset + index * stride, &part(&format!("[{index}]")), most, values)?;
            }
        }
        naga::TypeInner::Struct { members, .. } => {
            for member in members {
                let field = member.name.as_deref().unwrap_or("(unnamed)");
                flatten(module, member.ty, offset + member.offset, &part(&format!(".{field}")), most, values)?;
            }
        }
        _ => {
            return Err(format!(
                "`{name}` is {}: a uniform filled from scalars holds numbers, vectors, matrices, arrays and structs",
                module.types.type_to_string(ty)
            ))
        }
    }
    Ok(())
}

/// Where the last value of a `ty` ends: the fewest bytes of a struct passed
/// whole. Read from the type's shape, not its values (an array's last
/// element ends it); a type no scalar fills counts whole.
fn used_bytes(module: &naga::Module, ty: naga::Handle<naga::Type>) -> u32 {
    let whole = || module.types[ty].inner.try_size(module.to_ctx()).unwrap_or(0);
    match &module.types[ty].inner {
        naga::TypeInner::Scalar(scalar) => u32::from(scalar.width),
        naga::TypeInner::Vector { size, scalar } => *size as u32 * u32::from(scalar.width),
        naga::TypeInner::Matrix { columns, rows, scalar } => {
            let column = if *rows as u32 == 2 { 2 } else { 4 } * u32::from(scalar.width);
            (*columns as u32 - 1) * column + *rows as u32 * u32::from(scalar.width)
        }
        naga::TypeInner::Array { base, size, stride } => match size.resolve(module.to_ctx()) {
            Ok(naga::proc::IndexableLength::Known(count)) if count > 0 => {
                (count - 1).saturating_mul(*stride).saturating_add(used_bytes(module, *base))
            }
            _ => whole(),
        },
        naga::TypeInner::Struct { members, .. } => {
            members.iter().map(|member| member.offset + used_bytes(module, member.ty)).max().unwrap_or(0)
        }
        _ => whole(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `source`'s module and the type of its global `name`.
    fn uniform(source: &str, name: &str) -> (naga::Module, naga::Handle<naga::Type>) {
        let module = naga::front::wgsl::parse_str(source).expect("WGSL parses");
        let ty =
            module.global_variables.iter().find(|(_, var)| var.name.as_deref() == Some(name)).expect("declared").1.ty;
        (module, ty)
    }

    /// 2^24 `vec4<u32>`: a 256 MiB uniform, 2^26 values.
    const HUGE: &str = "@group(0) @binding(1) var<uniform> p: array<vec4<u32>, 16777216>;";

    #[test]
    fn a_huge_uniform_array_is_read_only_as_far_as_the_scalars_go() {
        let (module, ty) = uniform(HUGE, "p");
        // One scalar: its value is placed, the next is the first with none (and
        // the rest are never named: a name and a place each, 2^26 of them, ran
        // to gigabytes).
        let refused =
            fill_uniforms(&module, &[("p", ty)], &[ScalarType::Uint(4)], 1).expect_err("one scalar for 2^26 values");
        assert!(refused.contains("`[0].y` (u32) gets no scalar"), "{refused}");
        let mut values = Vec::new();
        flatten(&module, ty, 0, "", 3, &mut values).expect("flattens");
        assert_eq!(values.len(), 4, "one element, whole, and no further");
    }

    #[test]
    fn a_whole_uniform_passed_as_bytes_is_measured_by_its_shape() {
        let (module, ty) = uniform(HUGE, "p");
        assert_eq!(used_bytes(&module, ty), 1 << 28);
        let (module, ty) = uniform(
            "struct S { a: f32, m: mat3x2<f32>, v: array<vec3<f32>, 3>, }
             @group(0) @binding(0) var<uniform> s: S;",
            "s",
        );
        // `v`'s last element starts at 32 + 2 × 16 and holds 12 bytes; the struct is 80.
        assert_eq!(used_bytes(&module, ty), 76);
        let filled = fill_uniforms(&module, &[("s", ty)], &[ScalarType::Bytes(76)], 0).expect("76 bytes fill it");
        assert_eq!(filled, vec![Uniform { size: 80, values: vec![(0, 0)] }]);
        let short = fill_uniforms(&module, &[("s", ty)], &[ScalarType::Bytes(75)], 0).expect_err("75 bytes do not");
        assert!(short.contains("its last value ends at byte 76"), "{short}");
    }
}
