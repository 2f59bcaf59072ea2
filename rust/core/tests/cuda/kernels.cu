// Kernels written the way CUDA projects write them, launched by Weir without
// edits: templates in a namespace, cooperative groups, a project header,
// size_t and double parameters, a struct by value. The tests compile this
// file with NVRTC and load it as PTX, CUBIN and fatbin built by nvcc.
#include <cooperative_groups.h>

#include "weir_test/affine.cuh"

namespace cg = cooperative_groups;

namespace weir_test {

// y[i] = apply(a, x[i], step), over a block-stride loop.
template <typename T>
__global__ void affine(const T* x, T* y, Affine a, double step, size_t n) {
    cg::thread_block block = cg::this_thread_block();
    size_t stride = (size_t)gridDim.x * block.size();
    for (size_t i = blockIdx.x * (size_t)block.size() + block.thread_rank(); i < n; i += stride) {
        y[i] = apply(a, x[i], step);
    }
}

// sums[b] = the sum of block b's elements of x, reduced a warp tile at a time.
template <typename T>
__global__ void block_sums(const T* x, T* sums, size_t n) {
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
    __shared__ T partial[32];
    size_t i = blockIdx.x * (size_t)block.size() + block.thread_rank();
    T value = i < n ? x[i] : T(0);
    for (unsigned offset = warp.size() / 2; offset > 0; offset /= 2) {
        value += warp.shfl_down(value, offset);
    }
    if (warp.thread_rank() == 0) {
        partial[warp.meta_group_rank()] = value;
    }
    block.sync();
    if (block.thread_rank() == 0) {
        T total = T(0);
        for (unsigned w = 0; w < warp.meta_group_size(); ++w) {
            total += partial[w];
        }
        sums[blockIdx.x] = total;
    }
}

template __global__ void affine<float>(const float*, float*, Affine, double, size_t);
template __global__ void affine<double>(const double*, double*, Affine, double, size_t);
template __global__ void block_sums<float>(const float*, float*, size_t);

}  // namespace weir_test
