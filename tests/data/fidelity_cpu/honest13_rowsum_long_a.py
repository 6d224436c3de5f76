import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = r"""
#include <torch/extension.h>

torch::Tensor row_sum(torch::Tensor x) {
    TORCH_CHECK(x.dim() == 2, "2D input");
    x = x.contiguous();
    const int64_t R = x.size(0), L = x.size(1);
    auto out = torch::empty({R}, x.options());
    const float* X = x.data_ptr<float>();
    float* O = out.data_ptr<float>();
    #pragma omp parallel for
    for (int64_t r = 0; r < R; ++r) {
        float acc = 0.0f;
        const float* row = X + r * L;
        for (int64_t i = 0; i < L; ++i) acc += row[i];
        O[r] = acc;
    }
    return out;
}
"""

rs = load_inline(name="row_sum_naive", cpp_sources=src, functions=["row_sum"],
                 extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return rs.row_sum(x)
