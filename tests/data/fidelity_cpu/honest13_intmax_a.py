import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = r"""
#include <torch/extension.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <tuple>

template <typename T>
void max_dim1_kernel(const T* x, T* vals, int64_t* idx, int64_t B, int64_t R, int64_t I) {
    at::parallel_for(0, B, 1, [&](int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b) {
            const T* xb = x + b * R * I;
            T* vb = vals + b * I;
            int64_t* ib = idx + b * I;
            for (int64_t i = 0; i < I; ++i) { vb[i] = xb[i]; ib[i] = 0; }
            for (int64_t r = 1; r < R; ++r) {
                const T* row = xb + r * I;
                for (int64_t i = 0; i < I; ++i)
                    if (row[i] > vb[i]) { vb[i] = row[i]; ib[i] = r; }   // strict: first max wins
            }
        }
    });
}

std::tuple<torch::Tensor, torch::Tensor> max_dim1(torch::Tensor x) {
    TORCH_CHECK(x.dim() == 3, "3D input expected");
    x = x.contiguous();
    const int64_t B = x.size(0), R = x.size(1), I = x.size(2);
    auto vals = torch::empty({B, I}, x.options());
    auto idx = torch::empty({B, I}, x.options().dtype(torch::kLong));
    AT_DISPATCH_INTEGRAL_TYPES(x.scalar_type(), "max_dim1", [&] {
        max_dim1_kernel<scalar_t>(x.data_ptr<scalar_t>(), vals.data_ptr<scalar_t>(), idx.data_ptr<int64_t>(), B, R, I);
    });
    return std::make_tuple(vals, idx);
}
"""

ext = load_inline(name="int_max_dim1", cpp_sources=src, functions=["max_dim1"], extra_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        assert dim == 1
        self.dim = dim

    def forward(self, x):
        return ext.max_dim1(x)
