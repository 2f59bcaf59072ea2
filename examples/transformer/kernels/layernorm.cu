// out[r] = (x[r] - mean) / sqrt(var + 1e-5) * gamma + beta, one thread per row.
extern "C" __global__ void layernorm(const float* x, const float* gamma, const float* beta, float* out,
                                     unsigned rows, unsigned d) {
    unsigned row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    const float* in = x + (size_t)row * d;
    float mean = 0.f;
    for (unsigned i = 0; i < d; ++i) mean += in[i];
    mean /= d;
    float variance = 0.f;
    for (unsigned i = 0; i < d; ++i) {
        float centred = in[i] - mean;
        variance += centred * centred;
    }
    float scale = rsqrtf(variance / d + 1e-5f);
    for (unsigned i = 0; i < d; ++i) out[(size_t)row * d + i] = (in[i] - mean) * scale * gamma[i] + beta[i];
}
