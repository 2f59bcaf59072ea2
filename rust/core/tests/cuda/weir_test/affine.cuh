// A project header, included by path: the kernels below need it found
// through an include directory, as a real project's build finds its own.
#pragma once

namespace weir_test {

// Passed by value: 16 bytes, a double, a float and an int.
struct Affine {
    double scale;
    float shift;
    int bias;
};

template <typename T>
__device__ inline T apply(const Affine& a, T x, double step) {
    return (T)(a.scale * (double)x + (double)a.shift + (double)a.bias * step);
}

}  // namespace weir_test
