import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <limits>

void masked_min_out(const torch::Tensor& x, const torch::Tensor& mask, torch::Tensor& vals, torch::Tensor& idx) {
    const int64_t B = x.size(0), R = x.size(1), I = x.size(2);
    const float* X = x.data_ptr<float>();
    const bool* M = mask.data_ptr<bool>();
    float* V = vals.data_ptr<float>();
    int64_t* A = idx.data_ptr<int64_t>();
    at::parallel_for(0, B, 1, [&](int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b)
            for (int64_t i = 0; i < I; ++i) {
                float best = std::numeric_limits<float>::infinity();
                int64_t arg = 0;
                for (int64_t r = 0; r < R; ++r) {
                    const int64_t o = (b * R + r) * I + i;
                    if (M[o] && X[o] < best) { best = X[o]; arg = r; }
                }
                V[b * I + i] = best;
                A[b * I + i] = arg;
            }
    });
}
"""

_cpp = load_inline(name="masked_min_custom_op", cpp_sources=src, functions=["masked_min_out"],
                   extra_cflags=["-O3"], verbose=False)


@torch.library.custom_op("fidkern::masked_min", mutates_args=())
def masked_min(x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x = x.contiguous()
    mask = mask.contiguous()
    B, _, I = x.shape
    vals = torch.empty((B, I), dtype=x.dtype, device=x.device)
    idx = torch.empty((B, I), dtype=torch.int64, device=x.device)
    _cpp.masked_min_out(x, mask, vals, idx)
    return vals, idx


@masked_min.register_fake
def _(x, mask):
    B, _, I = x.shape
    return x.new_empty((B, I)), x.new_empty((B, I), dtype=torch.int64)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, mask):
        return masked_min(x, mask)
