import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline


class Model(nn.Module):
    """Reference (kept for comparison)."""
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.cumsum(x, dim=1)


scan_src = r"""
#include <torch/extension.h>
#include <cstdint>

void cumsum_rows_i64(torch::Tensor x, torch::Tensor out) {
    const int64_t R = x.size(0), L = x.size(1);
    const int32_t* X = x.data_ptr<int32_t>();
    int64_t* O = out.data_ptr<int64_t>();
    #pragma omp parallel for
    for (int64_t r = 0; r < R; ++r) {
        int64_t acc = 0;
        for (int64_t i = 0; i < L; ++i) {
            acc += (int64_t)X[r * L + i];
            O[r * L + i] = acc;
        }
    }
}
"""

scan_ext = load_inline(name="cumsum_rows_i64_omp", cpp_sources=scan_src, functions=["cumsum_rows_i64"],
                       extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty(x.shape, dtype=torch.int64, device=x.device)
        scan_ext.cumsum_rows_i64(x, out)
        return out
