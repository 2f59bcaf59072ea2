// Causal self-attention: qkv holds each token's q, k and v (3 × d), out each
// token's attended values (d); one thread per (head, token), head size ≤ 64.
extern "C" __global__ void attention(const float* qkv, float* out, unsigned tokens, unsigned d, unsigned heads) {
    unsigned index = blockIdx.x * blockDim.x + threadIdx.x;
    if (index >= heads * tokens) return;
    unsigned head = index / tokens, t = index % tokens, size = d / heads, stride = 3 * d;
    const float* q = qkv + (size_t)t * stride + head * size;
    float scale = rsqrtf((float)size), top = -1e30f;
    for (unsigned s = 0; s <= t; ++s) {
        const float* k = qkv + (size_t)s * stride + d + head * size;
        float dot = 0.f;
        for (unsigned i = 0; i < size; ++i) dot += q[i] * k[i];
        top = fmaxf(top, dot * scale);
    }
    float acc[64] = {0.f}, total = 0.f;
    for (unsigned s = 0; s <= t; ++s) {
        const float* k = qkv + (size_t)s * stride + d + head * size;
        const float* v = qkv + (size_t)s * stride + 2 * d + head * size;
        float dot = 0.f;
        for (unsigned i = 0; i < size; ++i) dot += q[i] * k[i];
        float w = expf(dot * scale - top);
        total += w;
        for (unsigned i = 0; i < size; ++i) acc[i] += w * v[i];
    }
    for (unsigned i = 0; i < size; ++i) out[(size_t)t * d + head * size + i] = acc[i] / total;
}
