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
            eprintln!("skipped on {}: a WGSL-only case", runtime.info().backend.name());
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

/// The widths a kernel's scalars come in, and a struct by value: each
/// arrives as the kernel declares it, on CUDA and HIP checked against the
/// parameter's size. `out` gets every value as 32-bit words.
const WIDTHS_C: &str = r#"
struct Affine { double scale; float shift; int bias; };
extern "C" __global__ void widths(unsigned int* out, unsigned char a, short b, unsigned short half_bits, int c,
                                  long long d, unsigned long long e, double f, Affine g) {
    out[0] = a;
    out[1] = (unsigned int)(int)b;
    out[2] = half_bits;
    out[3] = (unsigned int)c;
    out[4] = (unsigned int)((unsigned long long)d & 0xffffffffull);
    out[5] = (unsigned int)((unsigned long long)d >> 32);
    out[6] = (unsigned int)(e & 0xffffffffull);
    out[7] = (unsigned int)(e >> 32);
    unsigned long long bits = (unsigned long long)__double_as_longlong(f);
    out[8] = (unsigned int)(bits & 0xffffffffull);
    out[9] = (unsigned int)(bits >> 32);
    out[10] = (unsigned int)(int)(g.scale * 2.0);
    out[11] = __float_as_uint(g.shift);
    out[12] = (unsigned int)g.bias;
}
"#;

/// `Affine` in the device's layout: a double, a float, an int, 16 bytes.
fn affine(scale: f64, shift: f32, bias: i32) -> Vec<u8> {
    let mut bytes = scale.to_le_bytes().to_vec();
    bytes.extend(shift.to_le_bytes());
    bytes.extend(bias.to_le_bytes());
    bytes
}

fn widths_kernel() -> Kernel {
    Kernel::custom("widths")
        .cpu(|args| {
            let word = |value: u64| [(value & 0xffff_ffff) as u32, (value >> 32) as u32];
            let (
                ScalarArg::U8(a),
                ScalarArg::I16(b),
                ScalarArg::F16Bits(half),
                ScalarArg::I32(c),
                ScalarArg::I64(d),
                ScalarArg::U64(e),
                ScalarArg::F64(f),
                ScalarArg::Bytes(g),
            ) = (
                args.scalar(0)?,
                args.scalar(1)?,
                args.scalar(2)?,
                args.scalar(3)?,
                args.scalar(4)?,
                args.scalar(5)?,
                args.scalar(6)?,
                args.scalar(7)?,
            )
            else {
                return Err("widths takes (u8, i16, f16, i32, i64, u64, f64, Affine)".into());
            };
            let field = |at: usize, len: usize| g.get(at..at + len).ok_or("Affine is 16 bytes");
            let scale = f64::from_le_bytes(field(0, 8)?.try_into().map_err(|_| "scale")?);
            let out = args.u32s_mut(0)?;
            out[..4].copy_from_slice(&[u32::from(a), b as i32 as u32, u32::from(half), c as u32]);
            out[4..6].copy_from_slice(&word(d as u64));
            out[6..8].copy_from_slice(&word(e));
            out[8..10].copy_from_slice(&word(f.to_bits()));
            out[10] = (scale * 2.0) as i32 as u32;
            out[11] = u32::from_le_bytes(field(8, 4)?.try_into().map_err(|_| "shift")?);
            out[12] = u32::from_le_bytes(field(12, 4)?.try_into().map_err(|_| "bias")?);
            Ok(())
        })
        .cuda(WIDTHS_C, "widths")
        .hip(WIDTHS_C, "widths")
        // WGSL has no 8-bit or 16-bit integers: its uniform cannot take the first scalar.
        .wgsl(
            "struct Widths { a: u32, b: i32 }\n@group(0) @binding(0) var<storage, read_write> out: array<u32>;\n\
             @group(0) @binding(1) var<uniform> w: Widths;\n@compute @workgroup_size(1) fn main() { out[0] = w.a; }",
            "main",
        )
        .build()
}

conformance! {
    fn scalars_of_every_width_and_a_struct_by_value_reach_the_kernel(runtime: &Runtime) {
        let s = runtime.default_stream();
        let out = s.zeros(ElementType::U32, 13).unwrap();
        let (d, e, f) = (-5_000_000_000i64, 0x1234_5678_9abc_def0u64, -2.5f64);
        let args = [
            Arg::write(&out),
            Arg::scalar(ScalarArg::U8(200)),
            Arg::scalar(ScalarArg::I16(-300)),
            Arg::scalar(ScalarArg::F16Bits(0x3c00)),
            Arg::i32(-7),
            Arg::i64(d),
            Arg::u64(e),
            Arg::f64(f),
            Arg::bytes(&affine(10.5, 0.25, -3)),
        ];
        let ran = s.execute(&widths_kernel(), Grid::linear(1, 1), &args);
        if runtime.info().backend == weir_core::BackendKind::Wgpu {
            match ran {
                Err(Error::InvalidArgument(message)) => {
                    assert!(message.contains("field `a` is u32, but scalar 0 is u8"), "{message}")
                }
                other => panic!("wgpu took a scalar its uniform layout cannot hold: {other:?}"),
            }
            return;
        }
        ran.unwrap();
        let split = |value: u64| [(value & 0xffff_ffff) as u32, (value >> 32) as u32];
        let mut expected = vec![200, -300i32 as u32, 0x3c00, -7i32 as u32];
        expected.extend(split(d as u64));
        expected.extend(split(e));
        expected.extend(split(f.to_bits()));
        expected.extend([21, 0.25f32.to_bits(), -3i32 as u32]);
        assert_eq!(s.read_as::<u32>(&out).unwrap(), expected);
    }
}
