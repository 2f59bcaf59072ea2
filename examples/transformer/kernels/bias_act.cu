// y[i] += bias[i % n], then GELU (GPT-2's tanh form) when gelu is not 0.
extern "C" __global__ void bias_act(float* y, const float* bias, unsigned total, unsigned n, unsigned gelu) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) return;
    float v = y[i] + bias[i % n];
    if (gelu) v = 0.5f * v * (1.f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)));
    y[i] = v;
}
