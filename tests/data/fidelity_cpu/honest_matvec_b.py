import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>   // not used directly: the compiler vectorises the 8-lane loop below

static inline float row_dot(const float* __restrict__ r, const float* __restrict__ v, int64_t K) {
    float lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t k = 0;
    for (; k + 8 <= K; k += 8) {
        #pragma GCC unroll 8
        for (int l = 0; l < 8; ++l) lanes[l] += r[k + l] * v[k + l];
    }
    float s = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
    for (; k < K; ++k) s += r[k] * v[k];
    return s;
}

torch::Tensor gemv(torch::Tensor A, torch::Tensor B) {
    auto a = A.contiguous();
    auto b = B.contiguous();
    const int64_t M = a.size(0), K = a.size(1);
    auto out = at::empty({M, 1}, a.options());
    const float* ap = a.data_ptr<float>();
    const float* bp = b.data_ptr<float>();
    float* op = out.data_ptr<float>();
    at::parallel_for(0, M, 1, [&](int64_t s, int64_t e) {
        for (int64_t i = s; i < e; ++i) op[i] = row_dot(ap + i * K, bp, K);
    });
    return out;
}
"""

gemv_ext = load_inline(name="gemv_lanes8", cpp_sources=src, functions=["gemv"],
                       extra_cflags=["-O3", "-march=native"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return gemv_ext.gemv(A, B)
