import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
#include <omp.h>
#include <cmath>

torch::Tensor frobenius_norm_div(torch::Tensor x) {
    x = x.contiguous();
    const float* __restrict__ p = x.data_ptr<float>();
    const int64_t n = x.numel();
    float sum = 0.0f;
    #pragma omp parallel for simd reduction(+:sum) num_threads(2)
    for (int64_t i = 0; i < n; ++i) sum += p[i] * p[i];
    const float inv = 1.0f / std::sqrt(sum);
    auto y = torch::empty_like(x);
    float* __restrict__ q = y.data_ptr<float>();
    #pragma omp parallel for simd num_threads(2)
    for (int64_t i = 0; i < n; ++i) q[i] = p[i] * inv;
    return y;
}
"""

frob = load_inline(
    name="frobenius_norm_div_fp32",
    cpp_sources=cpp_source,
    functions=["frobenius_norm_div"],
    extra_cflags=["-O3", "-fopenmp", "-march=native"],
    extra_ldflags=["-fopenmp"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super(ModelNew, self).__init__()

    def forward(self, x):
        return frob.frobenius_norm_div(x)
