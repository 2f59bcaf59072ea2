//! WGSL written the way other projects write it runs unchanged: its own
//! `@group`/`@binding` numbers, several groups, uniforms of mixed fields,
//! matched to the launch's arguments by reflection (wgpu only; skipped by
//! name where no adapter is available).
#![cfg(feature = "wgpu")]

#[path = "support/wgpu_runtime.rs"]
mod wgpu_runtime;

use weir_core::{Arg, Error, Grid, Kernel, Runtime};
use wgpu_runtime::open;

/// A particle step as a simulation project might write it: a uniform in
/// group 0, storage in groups 1 and 2 at sparse bindings, a second uniform
/// beside them, vectors and mixed scalar types laid out by WGSL's rules,
/// and a second entry point that uses one binding only.
const PARTICLES: &str = "
struct Particle {
    position: vec2<f32>,
    velocity: vec2<f32>,
}

struct SimParams {
    gravity: vec2<f32>,  // byte 0
    damping: f32,        // byte 8
    count: u32,          // byte 12
    bounds: vec4<f32>,   // byte 16: min x, min y, max x, max y
    step_index: i32,     // byte 32; the struct is 48 bytes
}

struct Frame {
    dt: f32,             // byte 0
    tint: vec3<f32>,     // byte 16
}

@group(0) @binding(0) var<uniform> frame: Frame;
@group(1) @binding(2) var<storage, read> particles_in: array<Particle>;
@group(1) @binding(5) var<storage, read_write> particles_out: array<Particle>;
@group(2) @binding(1) var<uniform> sim: SimParams;
@group(2) @binding(4) var<storage, read_write> steps: array<i32>;

@compute @workgroup_size(64)
fn integrate(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if (i >= sim.count) {
        return;
    }
    var p = particles_in[i];
    p.velocity = (p.velocity + sim.gravity * frame.dt) * sim.damping;
    p.position = clamp(p.position + p.velocity * frame.dt, sim.bounds.xy, sim.bounds.zw);
    particles_out[i] = p;
    steps[i] = sim.step_index * 10 + i32(frame.tint.y);
}

@compute @workgroup_size(64)
fn clear_steps(@builtin(global_invocation_id) id: vec3<u32>) {
    steps[id.x] = -1;
}
";

const COUNT: usize = 200;
const GRAVITY: [f32; 2] = [0.0, -9.5];
const DAMPING: f32 = 0.97;
const BOUNDS: [f32; 4] = [-4.0, -3.0, 4.0, 3.0];
const DT: f32 = 0.05;
const TINT: [f32; 3] = [0.25, 7.0, 0.5];

/// `SimParams` as its bytes: what a project passes as a struct by value.
fn sim_bytes(step: i32) -> Vec<u8> {
    let mut bytes = Vec::new();
    for value in [GRAVITY[0], GRAVITY[1], DAMPING] {
        bytes.extend(value.to_le_bytes());
    }
    bytes.extend((COUNT as u32).to_le_bytes());
    BOUNDS.iter().for_each(|value| bytes.extend(value.to_le_bytes()));
    bytes.extend(step.to_le_bytes());
    bytes
}

/// The frame's scalars, then the simulation's, value by value.
fn scalars(step: i32) -> Vec<Arg<'static>> {
    let mut args = vec![Arg::f32(DT)];
    args.extend(TINT.map(Arg::f32));
    args.extend(GRAVITY.map(Arg::f32));
    args.extend([Arg::f32(DAMPING), Arg::u32(COUNT as u32)]);
    args.extend(BOUNDS.map(Arg::f32));
    args.push(Arg::i32(step));
    args
}

/// One step on the CPU, as the shader computes it.
fn step_on_cpu(particles: &[f32]) -> Vec<f32> {
    particles
        .chunks(4)
        .flat_map(|p| {
            let v = [(p[2] + GRAVITY[0] * DT) * DAMPING, (p[3] + GRAVITY[1] * DT) * DAMPING];
            let x = (p[0] + v[0] * DT).clamp(BOUNDS[0], BOUNDS[2]);
            let y = (p[1] + v[1] * DT).clamp(BOUNDS[1], BOUNDS[3]);
            [x, y, v[0], v[1]]
        })
        .collect()
}

fn close_enough(got: &[f32], want: &[f32]) -> bool {
    got.len() == want.len() && got.iter().zip(want).all(|(a, b)| (a - b).abs() <= 1e-4 * (1.0 + b.abs()))
}

#[test]
fn a_shader_with_its_own_groups_bindings_and_uniforms_runs_unchanged_across_streams() {
    let Some(runtime) = open() else { return };
    let kernel = Kernel::custom("particles").wgsl(PARTICLES, "integrate").build();
    let clear = Kernel::custom("clear_steps").wgsl(PARTICLES, "clear_steps").build();
    let streams = [runtime.default_stream(), runtime.new_stream().unwrap(), runtime.new_stream().unwrap()];
    let start: Vec<f32> = (0..COUNT * 4).map(|i| ((i * 37 % 101) as f32 - 50.0) / 10.0).collect();
    let (a, b) = (streams[0].upload(&start).unwrap(), streams[0].upload(&start).unwrap());
    let steps = streams[0].upload(&[0i32; COUNT]).unwrap();
    let grid = Grid::linear(COUNT as u32, 64);
    // The entry point that uses one binding takes one buffer.
    streams[1].execute(&clear, Grid::linear(COUNT as u32, 64), &[Arg::write(&steps)]).unwrap();
    let mut want = start.clone();
    for round in 0..12 {
        // Ping-pong between two buffers, each round on the next stream:
        // every round reads what the one before wrote on another stream.
        let (from, to) = if round % 2 == 0 { (&a, &b) } else { (&b, &a) };
        let mut args = vec![Arg::read(from), Arg::write(to), Arg::write(&steps)];
        if round % 3 == 2 {
            // The simulation's uniform as one struct by value.
            args.extend(scalars(round)[..4].iter().cloned());
            args.push(Arg::bytes(&sim_bytes(round)));
        } else {
            args.extend(scalars(round));
        }
        streams[round as usize % 3].execute(&kernel, grid, &args).unwrap();
        want = step_on_cpu(&want);
    }
    let last = if 12 % 2 == 0 { &a } else { &b };
    let got = streams[2].read_as::<f32>(last).unwrap();
    assert!(close_enough(&got, &want), "after 12 steps: {:?} vs {:?}", &got[..8], &want[..8]);
    assert_eq!(streams[1].read_as::<i32>(&steps).unwrap(), vec![11 * 10 + TINT[1] as i32; COUNT]);
    runtime.close().unwrap();
}

/// Launches `kernel` expecting a refusal before admission naming every one of `says`.
fn refused(runtime: &Runtime, kernel: &Kernel, args: &[Arg<'_>], says: &[&str]) {
    let admitted = runtime.diagnostics().admitted_ops;
    let error = runtime.default_stream().execute(kernel, Grid::linear(COUNT as u32, 64), args).unwrap_err();
    let Error::InvalidArgument(message) = &error else { panic!("not an argument error: {error:?}") };
    for part in says {
        assert!(message.contains(part), "{message:?} does not say {part:?}");
    }
    assert_eq!(runtime.diagnostics().admitted_ops, admitted, "a refused launch was admitted");
}

#[test]
fn arguments_that_do_not_match_a_shaders_own_layout_are_refused_naming_the_binding() {
    let Some(runtime) = open() else { return };
    let kernel = Kernel::custom("particles").wgsl(PARTICLES, "integrate").build();
    let s = runtime.default_stream();
    let (a, b) = (s.upload(&[0f32; COUNT * 4]).unwrap(), s.upload(&[0f32; COUNT * 4]).unwrap());
    let steps = s.upload(&[0i32; COUNT]).unwrap();
    let tiny = s.upload(&[0f32; 1]).unwrap();
    // A binding the arguments lack.
    refused(
        &runtime,
        &kernel,
        &[[Arg::read(&a), Arg::write(&b)].as_slice(), &scalars(0)].concat(),
        &["2 buffer arguments passed", "3 storage buffers", "`steps` at @group(2) @binding(4)"],
    );
    // A scalar of another type than its field.
    let mut wrong = scalars(0);
    wrong[0] = Arg::u32(1);
    refused(
        &runtime,
        &kernel,
        &[[Arg::read(&a), Arg::write(&b), Arg::write(&steps)].as_slice(), &wrong].concat(),
        &["`frame` at @group(0) @binding(0)", "field `dt` is f32, but scalar 0 is u32"],
    );
    // Too few scalars, and too many.
    let buffers = [Arg::read(&a), Arg::write(&b), Arg::write(&steps)];
    refused(
        &runtime,
        &kernel,
        &[buffers.as_slice(), &scalars(0)[..12]].concat(),
        &["`sim` at @group(2) @binding(1) is a struct of 5 fields", "field `step_index` (i32) gets no scalar"],
    );
    refused(
        &runtime,
        &kernel,
        &[buffers.as_slice(), &scalars(0), &[Arg::u32(9)]].concat(),
        &["14 scalars passed", "the uniforms hold 13 values", "scalar 13 has no place"],
    );
    // A struct by value of another size than its uniform.
    refused(
        &runtime,
        &kernel,
        &[buffers.as_slice(), &scalars(0)[..4], &[Arg::bytes(&[0u8; 8])]].concat(),
        &["`sim` at @group(2) @binding(1)", "of 48 bytes", "scalar 4 is 8 bytes"],
    );
    // A buffer shorter than one element of the array it binds.
    refused(
        &runtime,
        &kernel,
        &[[Arg::read(&tiny), Arg::write(&b), Arg::write(&steps)].as_slice(), &scalars(0)].concat(),
        &["buffer argument 0 is 4 bytes", "`particles_in` at @group(1) @binding(2) takes at least 16"],
    );
    // Access other than declared.
    refused(
        &runtime,
        &kernel,
        &[[Arg::read(&a), Arg::read(&b), Arg::write(&steps)].as_slice(), &scalars(0)].concat(),
        &["`particles_out` at @group(1) @binding(5) is declared read_write", "passed as a read"],
    );
    // The runtime goes on: the right arguments run.
    s.execute(&kernel, Grid::linear(COUNT as u32, 64), &[buffers.as_slice(), &scalars(3)].concat()).unwrap();
    assert_eq!(s.read_as::<i32>(&steps).unwrap(), vec![37; COUNT]);
    runtime.close().unwrap();
}

/// A texture binding is refused by name: arguments are buffers and scalars.
#[test]
fn a_shader_binding_a_texture_is_refused_naming_it() {
    let Some(runtime) = open() else { return };
    let source = "
@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@group(1) @binding(0) var picture: texture_2d<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) { out[id.x] = textureLoad(picture, vec2<i32>(0, 0), 0).x; }
";
    let kernel = Kernel::custom("sampled").wgsl(source, "main").build();
    let out = runtime.default_stream().upload(&[0f32; 64]).unwrap();
    refused(&runtime, &kernel, &[Arg::write(&out)], &["`picture` at @group(1) @binding(0) is not a buffer"]);
    runtime.close().unwrap();
}

/// A group past the device's bind groups is refused by name, before wgpu
/// sees it: there it was an assertion (a panic on the compiling thread), and
/// a group index near 2^32 an allocation of a place per index.
#[test]
fn a_group_past_the_devices_bind_groups_is_refused_naming_it() {
    let Some(runtime) = open() else { return };
    let out = runtime.default_stream().upload(&[0f32; 64]).unwrap();
    for group in ["8", "4000000000"] {
        let source = format!(
            "@group({group}) @binding(0) var<storage, read_write> out: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {{ out[id.x] = 1.0; }}"
        );
        let kernel = Kernel::custom("far").wgsl(source, "main").build();
        refused(&runtime, &kernel, &[Arg::write(&out)], &[&format!("@group({group}) is past"), "max_bind_groups"]);
    }
    runtime.close().unwrap();
}

/// Dynamic shared memory asked of a WGSL kernel is refused, not dropped:
/// WGSL declares its workgroup memory in the shader.
#[test]
fn dynamic_shared_memory_for_a_wgsl_kernel_is_unsupported() {
    let Some(runtime) = open() else { return };
    let source = "@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) { out[id.x] = 1.0; }";
    let kernel = Kernel::custom("shared").wgsl(source, "main").build();
    let s = runtime.default_stream();
    let out = s.upload(&[0f32; 64]).unwrap();
    let grid = Grid::linear(64, 64).with_shared_bytes(256);
    match s.execute(&kernel, grid, &[Arg::write(&out)]) {
        Err(Error::Unsupported { .. }) => {}
        other => panic!("256 bytes of dynamic shared memory on wgpu gave {other:?}"),
    }
    s.execute(&kernel, Grid::linear(64, 64), &[Arg::write(&out)]).unwrap();
    assert_eq!(s.read_as::<f32>(&out).unwrap(), vec![1.0; 64]);
    runtime.close().unwrap();
}

/// A uniform larger than the device binds is refused by name at launch: it
/// was made at its declared size on every launch and refused only when its
/// op was recorded, failing the stream.
#[test]
fn a_uniform_past_the_devices_binding_size_is_refused_at_launch() {
    let Some(runtime) = open() else { return };
    let source = "struct Params { @size(16777216) n: u32 }
@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@group(1) @binding(0) var<uniform> params: Params;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) { out[id.x] = f32(params.n); }";
    let kernel = Kernel::custom("wide").wgsl(source, "main").build();
    let out = runtime.default_stream().upload(&[0f32; 64]).unwrap();
    refused(&runtime, &kernel, &[Arg::write(&out), Arg::u32(1)], &["max_uniform_buffer_binding_size"]);
    runtime.default_stream().fence().unwrap().wait().unwrap();
    runtime.close().unwrap();
}

/// A shader bound as Weir's own kernels are (buffers at group 0 from
/// binding 0, then one uniform of consecutive 4-byte scalars) whose uniform
/// is declared larger than its scalars (`@size`, trailing padding) gets a
/// uniform of its declared size: it was bound at the scalars' size, shorter
/// than the shader declares, which wgpu refuses when the op is recorded.
#[test]
fn a_uniform_declared_larger_than_its_scalars_is_bound_at_its_declared_size() {
    let Some(runtime) = open() else { return };
    let source = "struct Params { n: u32, @size(60) m: u32 }
@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@group(0) @binding(1) var<uniform> params: Params;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) { out[id.x] = f32(params.n * params.m); }";
    let kernel = Kernel::custom("padded").wgsl(source, "main").build();
    let s = runtime.default_stream();
    let out = s.upload(&[0f32; 64]).unwrap();
    s.execute(&kernel, Grid::linear(64, 64), &[Arg::write(&out), Arg::u32(3), Arg::u32(5)]).unwrap();
    assert_eq!(s.read_as::<f32>(&out).unwrap(), vec![15.0; 64]);
    runtime.close().unwrap();
}

/// A workgroup size declared the portable way, an override with an `@id`,
/// takes the grid's block: a pipeline names such an override by its number,
/// and naming it by its name made every launch fail to build.
#[test]
fn a_workgroup_size_override_with_an_id_takes_the_grids_block() {
    let Some(runtime) = open() else { return };
    let source = "@id(0) override block_x: u32 = 64;
@group(0) @binding(0) var<storage, read_write> out: array<u32>;
@compute @workgroup_size(block_x)
fn main(@builtin(global_invocation_id) id: vec3<u32>, @builtin(local_invocation_index) lane: u32) {
    out[id.x] = lane + 1u;
}";
    let kernel = Kernel::custom("numbered").wgsl(source, "main").build();
    let s = runtime.default_stream();
    let out = s.upload(&[0u32; 64]).unwrap();
    s.execute(&kernel, Grid::linear(64, 16), &[Arg::write(&out)]).unwrap();
    let want: Vec<u32> = (0..64).map(|i| i % 16 + 1).collect();
    assert_eq!(s.read_as::<u32>(&out).unwrap(), want);
    runtime.close().unwrap();
}

/// One override sizing two dimensions runs only with a block of the same
/// size in both: the later dimension's size silently won, so an 8 × 2 block
/// ran 2 × 2 threads.
#[test]
fn one_override_in_two_dimensions_refuses_a_block_of_two_sizes() {
    let Some(runtime) = open() else { return };
    let source = "override n: u32 = 4;
@group(0) @binding(0) var<storage, read_write> out: array<u32>;
@compute @workgroup_size(n, n)
fn main(@builtin(local_invocation_index) lane: u32) { out[lane] = 1u; }";
    let kernel = Kernel::custom("square").wgsl(source, "main").build();
    let s = runtime.default_stream();
    let out = s.upload(&[0u32; 16]).unwrap();
    refused(&runtime, &kernel, &[Arg::write(&out)], &["same size in both"]);
    // The same block in both dimensions runs every thread.
    let square = Grid::new([1, 1, 1], [4, 4, 1]);
    s.execute(&kernel, square, &[Arg::write(&out)]).unwrap();
    assert_eq!(s.read_as::<u32>(&out).unwrap(), vec![1; 16]);
    runtime.close().unwrap();
}
