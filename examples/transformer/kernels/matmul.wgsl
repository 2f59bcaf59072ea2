// out[M, N] = a[M, K] · w[K, N], row-major, one thread per output element
// (the wgpu path's GEMM; CUDA's is cuBLAS).
@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
struct Shape { m: u32, n: u32, k: u32 }
@group(0) @binding(3) var<uniform> shape: Shape;

override block_x: u32 = 64;

@compute @workgroup_size(block_x)
fn matmul(@builtin(global_invocation_id) id: vec3<u32>) {
    let index = id.x;
    if (index >= shape.m * shape.n) {
        return;
    }
    let row = index / shape.n;
    let col = index % shape.n;
    var sum = 0.0;
    for (var k = 0u; k < shape.k; k++) {
        sum += a[row * shape.k + k] * w[k * shape.n + col];
    }
    out[index] = sum;
}
