// y[i] += bias[i % n], then GELU (GPT-2's tanh form) when gelu is not 0.
@group(0) @binding(0) var<storage, read_write> y: array<f32>;
@group(0) @binding(1) var<storage, read> bias: array<f32>;
struct Shape { total: u32, n: u32, gelu: u32 }
@group(0) @binding(2) var<uniform> shape: Shape;

override block_x: u32 = 64;

@compute @workgroup_size(block_x)
fn bias_act(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if (i >= shape.total) {
        return;
    }
    var v = y[i] + bias[i % shape.n];
    if (shape.gelu != 0u) {
        v = 0.5 * v * (1.0 + tanh(0.7978845608 * (v + 0.044715 * v * v * v)));
    }
    y[i] = v;
}
