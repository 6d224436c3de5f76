import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <cstdint>

// int32 in, int64 out (same promotion as torch.cumsum on integer inputs)
torch::Tensor cumsum_i32_to_i64(torch::Tensor x) {
    TORCH_CHECK(x.scalar_type() == torch::kInt32, "int32 input expected");
    TORCH_CHECK(x.dim() == 2, "2D input expected");
    x = x.contiguous();
    const int64_t R = x.size(0), L = x.size(1);
    auto y = torch::empty({R, L}, x.options().dtype(torch::kInt64));
    const int32_t* X = x.data_ptr<int32_t>();
    int64_t* Y = y.data_ptr<int64_t>();
    at::parallel_for(0, R, 1, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            int64_t run = 0;
            for (int64_t i = 0; i < L; ++i) { run += X[r * L + i]; Y[r * L + i] = run; }
        }
    });
    return y;
}
"""

scan = load_inline(name="cumsum_i32_i64", cpp_sources=src, functions=["cumsum_i32_to_i64"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return scan.cumsum_i32_to_i64(x)
