//! One custom kernel, a source per backend, launched with one grid and one
//! argument list everywhere: the block size is the grid's on every backend
//! (WGSL through `override` constants), and the arguments are buffers in
//! order, then scalars in order (CUDA/HIP parameters; WGSL bindings `0..n`,
//! then one uniform struct of the scalars).

use weir_core::{Arg, ElementType, Error, Grid, Kernel, ScalarArg};

/// `out[i] = a · x[i] + threadIdx.x` for `i < n`: the thread's index in its
/// block shows which block size ran.
const WGSL: &str = "
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
struct Scalars { a: f32, n: u32 }
@group(0) @binding(2) var<uniform> p: Scalars;
override block_x: u32 = 64;
@compute @workgroup_size(block_x)
fn main(@builtin(global_invocation_id) id: vec3<u32>, @builtin(local_invocation_id) local: vec3<u32>) {
    if (id.x < p.n) { out[id.x] = p.a * x[id.x] + f32(local.x); }
}";

const CUDA_C: &str = "extern \"C\" __global__ void scaled(const float* x, float* out, float a, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { out[i] = a * x[i] + (float)threadIdx.x; }
}";

fn portable_kernel() -> Kernel {
    Kernel::custom("scaled")
        .cpu(|args| {
            let block = args.grid.block[0] as usize;
            let (ScalarArg::F32(a), ScalarArg::U32(n)) = (args.scalar(0)?, args.scalar(1)?) else {
                return Err("scaled takes (f32 a, u32 n)".into());
            };
            let x = args.f32s(0)?.to_vec();
            let out = args.f32s_mut(1)?;
            for i in 0..n as usize {
                out[i] = a * x[i] + (i % block) as f32;
            }
            Ok(())
        })
        .wgsl(WGSL, "main")
        .cuda(CUDA_C, "scaled")
        .hip(CUDA_C, "scaled")
        .build()
}

/// A kernel that writes `value` to its buffer's first word, in each backend's language.
fn writing(value: u32) -> Kernel {
    // CUDA C and HIP C read the same.
    let c_source = format!("extern \"C\" __global__ void write_value(unsigned int* out) {{ out[0] = {value}u; }}");
    Kernel::custom("write_value")
        .cpu(move |args| {
            args.u32s_mut(0)?[0] = value;
            Ok(())
        })
        .wgsl(
            format!(
                "@group(0) @binding(0) var<storage, read_write> out: array<u32>;\n\
                 @compute @workgroup_size(1)\nfn main() {{ out[0] = {value}u; }}"
            ),
            "main",
        )
        .cuda(c_source.clone(), "write_value")
        .hip(c_source, "write_value")
        .build()
}

conformance! {
    fn a_kernel_made_after_another_was_dropped_runs_its_own_source(runtime: &Runtime) {
        // Backends find a kernel's compiled form by its address: a new
        // kernel at a dropped one's address must not be taken for it.
        let s = runtime.default_stream();
        let out = s.zeros(ElementType::U32, 1).unwrap();
        for value in 1..=12u32 {
            let kernel = writing(value);
            s.execute(&kernel, Grid::linear(1, 1), &[Arg::write(&out)]).unwrap();
            assert_eq!(s.read_as::<u32>(&out).unwrap(), vec![value], "kernel {value} ran another's source");
        }
    }

    fn one_kernel_runs_with_the_grid_s_block_and_the_same_arguments_everywhere(runtime: &Runtime) {
        let s = runtime.default_stream();
        let n = 1000u32;
        let x: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let xs = s.upload(&x).unwrap();
        let kernel = portable_kernel();
        for block in [32u32, 128] {
            let out = s.zeros(ElementType::F32, u64::from(n)).unwrap();
            s.execute(&kernel, Grid::linear(n, block), &[Arg::read(&xs), Arg::write(&out), Arg::f32(2.0), Arg::u32(n)])
                .unwrap();
            let expected: Vec<f32> = (0..n).map(|i| 2.0 * i as f32 + (i % block) as f32).collect();
            assert_eq!(s.read_as::<f32>(&out).unwrap(), expected, "block {block}");
        }
    }

    fn a_wgsl_kernel_with_a_fixed_size_refuses_another_block(runtime: &Runtime) {
        if runtime.info().backend != weir_core::BackendKind::Wgpu {
            return;
        }
        let s = runtime.default_stream();
        let fixed = Kernel::custom("fixed")
            .wgsl(
                "@group(0) @binding(0) var<storage, read_write> out: array<u32>;\n\
                 @compute @workgroup_size(64)\nfn main(@builtin(global_invocation_id) id: vec3<u32>) { out[id.x] = 1u; }",
                "main",
            )
            .build();
        let out = s.zeros(ElementType::U32, 64).unwrap();
        match s.execute(&fixed, Grid::linear(64, 32), &[Arg::write(&out)]) {
            Err(Error::InvalidArgument(message)) => {
                assert!(message.contains("[64, 1, 1]") && message.contains("[32, 1, 1]") && message.contains("override"), "{message}")
            }
            other => panic!("a block other than the declared size was accepted: {other:?}"),
        }
        // The declared size itself is fine.
        s.execute(&fixed, Grid::linear(64, 64), &[Arg::write(&out)]).unwrap();
        assert_eq!(s.read_as::<u32>(&out).unwrap(), vec![1; 64]);
    }
}
