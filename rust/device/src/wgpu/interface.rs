//! What a custom WGSL kernel binds, read from its source with naga (the
//! parser wgpu compiles it with), matched to the arguments the kernel is
//! launched with before anything is compiled or admitted.
//!
//! wgpu validates a pipeline only against the layout it is given, and a
//! layout may hold more bindings than the shader uses: three buffers passed
//! to a kernel that binds one, or scalars that no uniform holds, would run
//! with the extra arguments ignored. So every resource the entry point uses
//! is matched to exactly one argument:
//! - the storage buffers, in `@group`/`@binding` order, take the buffer
//!   arguments in order: read-only (`var<storage, read>`) for an argument
//!   passed as a read, `read_write` otherwise;
//! - the uniforms, in the same order, are filled from the scalars in order:
//!   each value of a uniform (a field, a vector's or a matrix's component, an
//!   array's element, in declaration order) takes one scalar of its type, at
//!   the offset the WGSL layout rules give it; a [`crate::kernel::ScalarArg::Bytes`] scalar
//!   fills a whole uniform instead (a struct passed by value);
//! - nothing else (a texture or sampler is refused by name).
//!
//! A shader that binds as Weir's own kernels do (everything at group 0,
//! buffers at `0..n`, one uniform of consecutive 4-byte values at `n`) has
//! no [`OwnLayout`]: its scalars may go as immediate data. Any other layout,
//! another project's shader unchanged, is its own.

use wgpu::naga;

use super::uniform_fill::{fill_uniforms, plural, ScalarType, Uniform};

/// The arguments a launch passes: per buffer, whether it is passed as a
/// read; the scalars' types in order.
pub struct Arguments<'a> {
    pub read_only: &'a [bool],
    pub scalars: &'a [ScalarType],
}

/// A shader's own layout (groups and bindings): where each argument binds.
#[derive(Debug, Clone, PartialEq)]
pub struct OwnLayout {
    /// The resources of each group the shader uses, by group index.
    pub groups: Vec<(u32, Vec<Resource>)>,
    /// The uniforms, in the order the scalars fill them.
    pub uniforms: Vec<Uniform>,
    /// Per buffer argument: the fewest bytes its binding takes (the fixed
    /// part of its type, and one element of a runtime-sized array), and
    /// where it binds, for the error that refuses a shorter one.
    pub buffers: Vec<(u64, String)>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Resource {
    pub binding: u32,
    pub kind: ResourceKind,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ResourceKind {
    /// Buffer argument `argument`, read-only or not.
    Buffer { argument: usize, read_only: bool },
    /// Uniform `index` of [`OwnLayout::uniforms`].
    Uniform { index: usize },
}

/// A resource the entry point uses, as the source declares it.
struct Declared {
    group: u32,
    binding: u32,
    /// `` `name` at @group(g) @binding(b) ``, for messages.
    at: String,
    space: naga::AddressSpace,
    ty: naga::Handle<naga::Type>,
}

/// Matches `module`'s entry point `entry` and the resources it uses to
/// `arguments`: the shader's own layout, or `None` where it binds as Weir's
/// kernels do (see the module doc); the error says what differs, in the
/// source's names.
pub fn check(module: &naga::Module, entry: &str, arguments: &Arguments<'_>) -> Result<Option<OwnLayout>, String> {
    let Some(point) =
        module.entry_points.iter().position(|point| point.name == entry && point.stage == naga::ShaderStage::Compute)
    else {
        let found: Vec<&str> = module
            .entry_points
            .iter()
            .filter(|point| point.stage == naga::ShaderStage::Compute)
            .map(|point| point.name.as_str())
            .collect();
        let found = if found.is_empty() { "none".to_owned() } else { found.join(", ") };
        return Err(format!("no compute entry point `{entry}` in the WGSL source (it has: {found})"));
    };
    // Which resources the entry point uses, from naga's analysis; a module
    // that does not validate is matched on everything it declares (wgpu
    // then says what is wrong with it).
    let info = naga::valid::Validator::new(naga::valid::ValidationFlags::all(), naga::valid::Capabilities::all())
        .validate(module)
        .ok();
    let mut declared = Vec::new();
    for (handle, global) in module.global_variables.iter() {
        let Some(naga::ResourceBinding { group, binding }) = global.binding else { continue };
        if info.as_ref().is_some_and(|info| info.get_entry_point(point)[handle].is_empty()) {
            continue;
        }
        let name = global.name.as_deref().unwrap_or("(unnamed)");
        let at = format!("`{name}` at @group({group}) @binding({binding})");
        if !matches!(global.space, naga::AddressSpace::Storage { .. } | naga::AddressSpace::Uniform) {
            return Err(format!(
                "{at} is not a buffer: kernel arguments are storage buffers and uniforms filled from scalars"
            ));
        }
        declared.push(Declared { group, binding, at, space: global.space, ty: global.ty });
    }
    declared.sort_by_key(|resource| (resource.group, resource.binding));
    let storage: Vec<&Declared> =
        declared.iter().filter(|resource| matches!(resource.space, naga::AddressSpace::Storage { .. })).collect();
    check_buffers(&storage, arguments.read_only)?;
    let uniforms: Vec<(&str, naga::Handle<naga::Type>)> = declared
        .iter()
        .filter(|resource| resource.space == naga::AddressSpace::Uniform)
        .map(|resource| (resource.at.as_str(), resource.ty))
        .collect();
    let filled = fill_uniforms(module, &uniforms, arguments.scalars, arguments.read_only.len())?;
    if is_short(module, &declared, arguments, &filled) {
        return Ok(None);
    }
    let mut groups: Vec<(u32, Vec<Resource>)> = Vec::new();
    let (mut buffers, mut uniform_index) = (0, 0);
    for resource in &declared {
        let kind = match resource.space {
            naga::AddressSpace::Uniform => {
                uniform_index += 1;
                ResourceKind::Uniform { index: uniform_index - 1 }
            }
            _ => {
                buffers += 1;
                ResourceKind::Buffer { argument: buffers - 1, read_only: arguments.read_only[buffers - 1] }
            }
        };
        let entry = Resource { binding: resource.binding, kind };
        match groups.last_mut() {
            Some((group, entries)) if *group == resource.group => entries.push(entry),
            _ => groups.push((resource.group, vec![entry])),
        }
    }
    let buffers = storage
        .iter()
        .map(|resource| {
            let size = module.types[resource.ty].inner.try_size(module.to_ctx()).unwrap_or(0);
            (u64::from(size), resource.at.clone())
        })
        .collect();
    Ok(Some(OwnLayout { groups, uniforms: filled, buffers }))
}

/// The storage buffers take the buffer arguments, in order and with their accesses.
fn check_buffers(storage: &[&Declared], read_only: &[bool]) -> Result<(), String> {
    let buffers = read_only.len();
    if storage.len() != buffers {
        let bindings: Vec<&str> = storage.iter().map(|resource| resource.at.as_str()).collect();
        let listed = if bindings.is_empty() { String::new() } else { format!(": {}", bindings.join(", ")) };
        return Err(format!(
            "{buffers} buffer argument{} passed, but the WGSL declares {} storage buffer{} its entry point uses{listed} \
             (one per buffer argument, in @group/@binding order)",
            plural(buffers),
            storage.len(),
            plural(storage.len())
        ));
    }
    for (resource, &read) in storage.iter().zip(read_only) {
        let naga::AddressSpace::Storage { access } = resource.space else { continue };
        let (declared, passed, pass, declare) = match (access.contains(naga::StorageAccess::STORE), read) {
            (true, true) => ("read_write", "as a read", "writable", "read"),
            (false, false) => ("read-only", "writable", "as a read", "read_write"),
            _ => continue,
        };
        return Err(format!(
            "{} is declared {declared}, but its argument is passed {passed}: pass it {pass} or declare it \
             `var<storage, {declare}>`",
            resource.at
        ));
    }
    Ok(())
}

/// True when the resources bind as Weir's own kernels do: all at group 0,
/// buffers at `0..n`, and at most one uniform, at `n`, of consecutive 4-byte
/// values and nothing else. (That uniform is bound, or set as immediate
/// data, at its scalars' bytes: one declared larger, by `@size` or padding,
/// binds as written, at its declared size.)
fn is_short(module: &naga::Module, declared: &[Declared], arguments: &Arguments<'_>, filled: &[Uniform]) -> bool {
    let n = arguments.read_only.len();
    let in_place = declared.iter().enumerate().all(|(index, resource)| {
        resource.group == 0
            && resource.binding == index as u32
            && (index < n) == matches!(resource.space, naga::AddressSpace::Storage { .. })
    });
    let consecutive = match filled {
        [] => true,
        [uniform] => {
            uniform
                .values
                .iter()
                .enumerate()
                .all(|(index, &(offset, scalar))| offset == 4 * index as u32 && scalar == index)
                && declared.iter().filter(|resource| resource.space == naga::AddressSpace::Uniform).all(|resource| {
                    module.types[resource.ty].inner.try_size(module.to_ctx()) == Some(4 * uniform.values.len() as u32)
                })
                && arguments
                    .scalars
                    .iter()
                    .all(|ty| matches!(ty, ScalarType::Uint(4) | ScalarType::Sint(4) | ScalarType::Float(4)))
        }
        _ => false,
    };
    in_place && consecutive
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
                naga::Expression::Override(id) => {
                    let declared = &module.overrides[*id];
                    // A pipeline names an override by its `@id` where it has one, as WebGPU does.
                    let key = match (declared.id, &declared.name) {
                        (Some(number), _) => number.to_string(),
                        (None, Some(constant)) => constant.clone(),
                        (None, None) => {
                            return Err(format!("`{entry}`'s workgroup size {name} is an override without a name"))
                        }
                    };
                    // One override in two dimensions takes one size: the block's must agree there,
                    // or the kernel would run with another block than the grid says.
                    match constants.iter().find(|(other, _)| *other == key) {
                        Some((_, size)) if *size != f64::from(wanted) => {
                            return Err(format!(
                                "`{entry}` sizes its workgroup with one override in two dimensions, so the \
                                 grid's block must be the same size in both; it is {block:?}"
                            ))
                        }
                        Some(_) => {}
                        None => constants.push((key, f64::from(wanted))),
                    }
                }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(source: &str) -> Option<OwnLayout> {
        let module = naga::front::wgsl::parse_str(source).expect("parses");
        let arguments = Arguments { read_only: &[false], scalars: &[ScalarType::Uint(4), ScalarType::Uint(4)] };
        check(&module, "main", &arguments).expect("matches its arguments")
    }

    #[test]
    fn only_a_uniform_of_exactly_its_scalars_binds_the_short_way() {
        let body = "@group(0) @binding(0) var<storage, read_write> out: array<u32>;
            @group(0) @binding(1) var<uniform> p: P;
            @compute @workgroup_size(1) fn main() { out[0] = p.n + p.m; }";
        assert_eq!(layout(&format!("struct P {{ n: u32, m: u32 }} {body}")), None);
        // Declared larger than its two scalars: bound as written, at its size.
        let padded = layout(&format!("struct P {{ n: u32, @size(60) m: u32 }} {body}")).expect("its own layout");
        assert_eq!(padded.uniforms, vec![Uniform { size: 64, values: vec![(0, 0), (4, 1)] }]);
    }
}
