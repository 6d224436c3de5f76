import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp = """
#include <torch/extension.h>
#include <cmath>

void layernorm_rows_(torch::Tensor out, torch::Tensor x2d, torch::Tensor gamma, torch::Tensor beta, double eps) {
    const int64_t rows = x2d.size(0), cols = x2d.size(1);
    const float* x = static_cast<const float*>(x2d.data_ptr());
    const float* g = static_cast<const float*>(gamma.data_ptr());
    const float* b = static_cast<const float*>(beta.data_ptr());
    float* o = static_cast<float*>(out.data_ptr());
#pragma omp parallel for
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * cols;
        float sum = 0.f, sq = 0.f;
#pragma omp simd reduction(+:sum)
        for (int64_t c = 0; c < cols; ++c) sum += xr[c];
        const float mean = sum / cols;
#pragma omp simd reduction(+:sq)
        for (int64_t c = 0; c < cols; ++c) { const float d = xr[c] - mean; sq += d * d; }
        const float inv = 1.0f / std::sqrt(sq / cols + (float)eps);
        float* orow = o + r * cols;
#pragma omp simd
        for (int64_t c = 0; c < cols; ++c) orow[c] = (xr[c] - mean) * inv * g[c] + b[c];
    }
}
"""

_lib = load_inline("layernorm_rows_inplace", cpp, functions="layernorm_rows_",
                   extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"])


class ModelNew(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.normalized_shape = (normalized_shape,)
        self.eps = 1e-5
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))

    @staticmethod
    def _as_rows(x: torch.Tensor) -> torch.Tensor:
        return x.reshape(-1, x.shape[-1]).contiguous()

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}"

    def forward(self, x):
        orig_shape = x.shape
        rows = self._as_rows(x)
        out = rows.new_empty(rows.shape)
        _lib.layernorm_rows_(out, rows, self.weight.contiguous(), self.bias.contiguous(), self.eps)
        return out.view(orig_shape)
