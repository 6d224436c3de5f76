import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

int_src = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <tuple>

std::tuple<torch::Tensor, torch::Tensor> mulmod_and_gt(torch::Tensor a, torch::Tensor b) {
    TORCH_CHECK(a.scalar_type() == torch::kInt64 && b.scalar_type() == torch::kInt64, "int64 inputs expected");
    TORCH_CHECK(a.sizes() == b.sizes(), "same shapes expected");
    a = a.contiguous();
    b = b.contiguous();
    auto r = torch::empty_like(a);
    auto gt = torch::empty(a.sizes(), a.options().dtype(torch::kBool));
    const int64_t n = a.numel();
    const int64_t* ap = a.data_ptr<int64_t>();
    const int64_t* bp = b.data_ptr<int64_t>();
    int64_t* rp = r.data_ptr<int64_t>();
    bool* gp = gt.data_ptr<bool>();
    at::parallel_for(0, n, 4096, [&](int64_t s, int64_t e) {
        for (int64_t i = s; i < e; ++i) {
            int64_t v = (ap[i] * bp[i] + 7) % 97;
            if (v < 0) v += 97;  // Python/torch.remainder semantics: result has the divisor's sign
            rp[i] = v;
            gp[i] = ap[i] > bp[i];
        }
    });
    return {r, gt};
}
"""

int_ext = load_inline(name="int_mulmod_gt", cpp_sources=int_src, functions=["mulmod_and_gt"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        r, gt = int_ext.mulmod_and_gt(a, b)
        return r, gt
