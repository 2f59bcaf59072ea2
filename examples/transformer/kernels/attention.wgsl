// Causal self-attention: qkv holds each token's q, k and v (3 × d), out each
// token's attended values (d); one thread per (head, token), head size ≤ 64.
@group(0) @binding(0) var<storage, read> qkv: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
struct Shape { tokens: u32, d: u32, heads: u32 }
@group(0) @binding(2) var<uniform> shape: Shape;

override block_x: u32 = 64;

@compute @workgroup_size(block_x)
fn attention(@builtin(global_invocation_id) id: vec3<u32>) {
    let index = id.x;
    if (index >= shape.heads * shape.tokens) {
        return;
    }
    let head = index / shape.tokens;
    let t = index % shape.tokens;
    let size = shape.d / shape.heads;
    let stride = 3u * shape.d;
    let q = t * stride + head * size;
    let scale = inverseSqrt(f32(size));
    var top = -1e30;
    for (var s = 0u; s <= t; s++) {
        var dot = 0.0;
        for (var i = 0u; i < size; i++) {
            dot += qkv[q + i] * qkv[s * stride + shape.d + head * size + i];
        }
        top = max(top, dot * scale);
    }
    var acc: array<f32, 64>;
    var total = 0.0;
    for (var s = 0u; s <= t; s++) {
        var dot = 0.0;
        for (var i = 0u; i < size; i++) {
            dot += qkv[q + i] * qkv[s * stride + shape.d + head * size + i];
        }
        let w = exp(dot * scale - top);
        total += w;
        for (var i = 0u; i < size; i++) {
            acc[i] += w * qkv[s * stride + 2u * shape.d + head * size + i];
        }
    }
    for (var i = 0u; i < size; i++) {
        out[t * shape.d + head * size + i] = acc[i] / total;
    }
}
