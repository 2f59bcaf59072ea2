//! What a custom WGSL kernel declares it binds, read from its source with
//! naga (the parser wgpu compiles it with), checked against the arguments
//! the kernel is launched with before anything is compiled or admitted.
//!
//! wgpu validates a pipeline only against the layout it is given, and a
//! layout may hold more bindings than the shader declares: three buffers
//! passed to a kernel that binds one, or scalars that the shader's uniform
//! struct does not hold, would run with the extra arguments ignored. The
//! binding convention (see [`super::pipelines`]) says exactly what a kernel
//! with these arguments must declare at group 0:
//! - one storage buffer per buffer argument, at bindings `0..n`, read-only
//!   (`var<storage, read>`) for an argument passed as a read, `read_write`
//!   otherwise;
//! - with scalars, one uniform at binding `n`: a struct of one 4-byte field
//!   per scalar, in order and of the scalar's type, or a single such scalar;
//! - nothing else.

use wgpu::naga;
use wgpu::naga::common::wgsl::TypeContext;

use crate::kernel::ScalarArg;

/// The type of one scalar argument, as the kernel's uniform must hold it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum ScalarType {
    U32,
    I32,
    F32,
}

impl ScalarType {
    /// The uniform field type of `scalar`; `None` for a width other than
    /// 4 bytes, which Weir's uniform layout does not hold.
    pub fn of(scalar: &ScalarArg) -> Option<ScalarType> {
        match scalar {
            ScalarArg::U32(_) => Some(ScalarType::U32),
            ScalarArg::I32(_) => Some(ScalarType::I32),
            ScalarArg::F32(_) => Some(ScalarType::F32),
            _ => None,
        }
    }

    fn wgsl(self) -> &'static str {
        match self {
            ScalarType::U32 => "u32",
            ScalarType::I32 => "i32",
            ScalarType::F32 => "f32",
        }
    }

    fn matches(self, scalar: naga::Scalar) -> bool {
        let kind = match self {
            ScalarType::U32 => naga::ScalarKind::Uint,
            ScalarType::I32 => naga::ScalarKind::Sint,
            ScalarType::F32 => naga::ScalarKind::Float,
        };
        scalar.kind == kind && scalar.width == 4
    }
}

/// The arguments a launch passes: per buffer, whether it is passed as a
/// read; the scalars' types in order.
pub(crate) struct Arguments<'a> {
    pub read_only: &'a [bool],
    pub scalars: &'a [ScalarType],
}

/// Checks `module`'s entry point `entry` and its resource bindings against
/// `arguments`; the error says what differs, in the source's names.
pub(crate) fn check(module: &naga::Module, entry: &str, arguments: &Arguments<'_>) -> Result<(), String> {
    if !module.entry_points.iter().any(|point| point.name == entry && point.stage == naga::ShaderStage::Compute) {
        let found: Vec<&str> = module
            .entry_points
            .iter()
            .filter(|point| point.stage == naga::ShaderStage::Compute)
            .map(|point| point.name.as_str())
            .collect();
        let found = if found.is_empty() { "none".to_owned() } else { found.join(", ") };
        return Err(format!("no compute entry point `{entry}` in the WGSL source (it has: {found})"));
    }
    let buffers = arguments.read_only.len();
    let n = buffers as u32;
    let mut storage = Vec::new();
    let mut uniform = None;
    for (_, global) in module.global_variables.iter() {
        let Some(binding) = &global.binding else { continue };
        let name = global.name.as_deref().unwrap_or("(unnamed)");
        let at = format!("`{name}` at @group({}) @binding({})", binding.group, binding.binding);
        if binding.group != 0 {
            return Err(format!("{at}: kernel arguments bind at group 0 only"));
        }
        match global.space {
            naga::AddressSpace::Storage { access } => {
                storage.push((binding.binding, at, access.contains(naga::StorageAccess::STORE)))
            }
            naga::AddressSpace::Uniform if uniform.is_none() => uniform = Some((binding.binding, at, global.ty)),
            naga::AddressSpace::Uniform => {
                return Err(format!("{at} is a second uniform: the scalars are one uniform block at binding {n}"))
            }
            _ => {
                return Err(format!(
                    "{at} is not a buffer: kernel arguments are storage buffers and one uniform block of scalars"
                ))
            }
        }
    }
    storage.sort();
    let declared = storage.len();
    if declared != buffers {
        let bindings: Vec<&str> = storage.iter().map(|(_, at, _)| at.as_str()).collect();
        let listed = if bindings.is_empty() { String::new() } else { format!(": {}", bindings.join(", ")) };
        return Err(format!(
            "{} buffer argument{} passed, but the WGSL declares {declared} storage buffer{}{listed} (one per buffer \
             argument, at bindings 0..{n})",
            buffers,
            plural(buffers),
            plural(declared)
        ));
    }
    if let Some((_, at, _)) =
        storage.iter().enumerate().find(|(index, (binding, ..))| *binding != *index as u32).map(|(_, s)| s)
    {
        return Err(format!("{at}: storage buffers bind at 0..{n} in argument order"));
    }
    for ((_, at, writable), &read) in storage.iter().zip(arguments.read_only) {
        match (writable, read) {
            (true, true) => {
                return Err(format!(
                    "{at} is declared read_write, but its argument is passed as a read: pass it writable or \
                     declare it `var<storage, read>`"
                ))
            }
            (false, false) => {
                return Err(format!(
                    "{at} is declared read-only, but its argument is passed writable: pass it as a read or \
                     declare it `var<storage, read_write>`"
                ))
            }
            _ => {}
        }
    }
    match (uniform, arguments.scalars) {
        (None, []) => Ok(()),
        (None, scalars) => Err(format!(
            "{} scalar argument{} passed, but the WGSL declares no uniform at @group(0) @binding({n}) to hold them",
            scalars.len(),
            plural(scalars.len())
        )),
        (Some((_, at, _)), []) => {
            Err(format!("{at} is a uniform, but no scalar arguments were passed (they are what it holds)"))
        }
        (Some((binding, at, _)), _) if binding != n => {
            Err(format!("{at}: the scalars' uniform binds right after the {n} buffers, at binding {n}"))
        }
        (Some((_, at, ty)), scalars) => check_scalars(module, &at, ty, scalars),
    }
}

fn plural(count: usize) -> &'static str {
    if count == 1 {
        ""
    } else {
        "s"
    }
}

/// The uniform `at` of type `ty` holds `scalars`: consecutive 4-byte fields
/// of their types, or one of them alone.
fn check_scalars(
    module: &naga::Module,
    at: &str,
    ty: naga::Handle<naga::Type>,
    scalars: &[ScalarType],
) -> Result<(), String> {
    let wanted: Vec<&str> = scalars.iter().map(|scalar| scalar.wgsl()).collect();
    let wanted = format!("{} scalar{} passed ({})", scalars.len(), plural(scalars.len()), wanted.join(", "));
    let type_name = |ty| module.types.type_to_string(ty);
    match &module.types[ty].inner {
        naga::TypeInner::Scalar(scalar) => match scalars {
            [only] if only.matches(*scalar) => Ok(()),
            _ => Err(format!("{at} is one {}, but {wanted}", type_name(ty))),
        },
        naga::TypeInner::Struct { members, .. } => {
            if members.len() != scalars.len() {
                return Err(format!(
                    "{at} is a struct of {} field{}, but {wanted}: declare one 4-byte field per scalar, in order",
                    members.len(),
                    plural(members.len())
                ));
            }
            for (index, (member, scalar)) in members.iter().zip(scalars).enumerate() {
                let field = member.name.as_deref().unwrap_or("(unnamed)");
                let fits = matches!(module.types[member.ty].inner, naga::TypeInner::Scalar(s) if scalar.matches(s));
                if !fits {
                    return Err(format!(
                        "{at}: field `{field}` is {}, but scalar {index} is {} ({wanted})",
                        type_name(member.ty),
                        scalar.wgsl()
                    ));
                }
                if member.offset != 4 * index as u32 {
                    return Err(format!(
                        "{at}: field `{field}` is at byte {}, but scalars are consecutive 4-byte words (byte {})",
                        member.offset,
                        4 * index
                    ));
                }
            }
            Ok(())
        }
        _ => Err(format!("{at} is {}, but {wanted}: declare a struct of u32/i32/f32 fields", type_name(ty))),
    }
}

/// The pipeline constants that make `entry`'s `@workgroup_size` the grid's
/// `block`: every `override` it is declared with takes the block's size in
/// its dimension. A size written as a number must already be the block's:
/// otherwise the kernel would run with another block than the grid says,
/// as CUDA and HIP never do.
pub(crate) fn block_constants(
    module: &naga::Module,
    entry: &str,
    block: [u32; 3],
) -> Result<Vec<(String, f64)>, String> {
    let Some(point) = module.entry_points.iter().find(|point| point.name == entry) else {
        return Err(format!("the source has no entry point `{entry}`"));
    };
    let overrides = point.workgroup_size_overrides.unwrap_or([None; 3]);
    let mut constants = Vec::new();
    for (axis, (expression, &wanted)) in overrides.iter().zip(&block).enumerate() {
        let name = ["x", "y", "z"][axis];
        match expression {
            None if point.workgroup_size[axis] == wanted => {}
            None => {
                return Err(format!(
                    "`{entry}` declares @workgroup_size {:?}, but the grid's block is {block:?}: the block is the \
                     grid's on every backend (declare the size with `override` constants, e.g. \
                     `override block_{name}: u32 = 64; @workgroup_size(block_{name})`, to take any block)",
                    point.workgroup_size
                ))
            }
            Some(handle) => match &module.global_expressions[*handle] {
                naga::Expression::Override(id) => match &module.overrides[*id].name {
                    Some(constant) => constants.push((constant.clone(), f64::from(wanted))),
                    None => return Err(format!("`{entry}`'s workgroup size {name} is an override without a name")),
                },
                _ => {
                    return Err(format!(
                        "`{entry}`'s workgroup size {name} is an expression: declare it as one `override` constant, \
                         which takes the grid's block"
                    ))
                }
            },
        }
    }
    Ok(constants)
}

/// Makes every storage buffer of a module writable, for a launch that may
/// bind a read-only and a writable argument in one wgpu buffer (see
/// `super::slabs`): the kernel's code is unchanged, and a custom kernel's
/// bindings were held to its arguments' accesses by [`check`].
pub(crate) fn storage_writable(module: &mut naga::Module) {
    for (_, global) in module.global_variables.iter_mut() {
        if let naga::AddressSpace::Storage { access } = &mut global.space {
            *access |= naga::StorageAccess::LOAD | naga::StorageAccess::STORE;
        }
    }
}

/// Turns the scalars' uniform of a module that passed [`check`] into
/// immediate data: the same struct, set with each dispatch instead of bound.
pub(crate) fn scalars_as_immediates(module: &mut naga::Module) {
    for (_, global) in module.global_variables.iter_mut() {
        if global.space == naga::AddressSpace::Uniform {
            global.space = naga::AddressSpace::Immediate;
            global.binding = None;
        }
    }
}
