// out[r] = (x[r] - mean) / sqrt(var + 1e-5) * gamma + beta, one thread per row.
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> gamma: array<f32>;
@group(0) @binding(2) var<storage, read> beta: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
struct Shape { rows: u32, d: u32 }
@group(0) @binding(4) var<uniform> shape: Shape;

override block_x: u32 = 64;

@compute @workgroup_size(block_x)
fn layernorm(@builtin(global_invocation_id) id: vec3<u32>) {
    let row = id.x;
    if (row >= shape.rows) {
        return;
    }
    let base = row * shape.d;
    var mean = 0.0;
    for (var i = 0u; i < shape.d; i++) {
        mean += x[base + i];
    }
    mean /= f32(shape.d);
    var variance = 0.0;
    for (var i = 0u; i < shape.d; i++) {
        let centred = x[base + i] - mean;
        variance += centred * centred;
    }
    let scale = inverseSqrt(variance / f32(shape.d) + 1e-5);
    for (var i = 0u; i < shape.d; i++) {
        out[base + i] = (x[base + i] - mean) * scale * gamma[i] + beta[i];
    }
}
