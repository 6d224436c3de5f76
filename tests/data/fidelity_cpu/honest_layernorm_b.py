from dataclasses import dataclass
from typing import Tuple

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline


@dataclass(frozen=True)
class LNConfig:
    normalized_shape: int
    eps: float = 1e-5


CPP = r"""
#include <torch/extension.h>
#include <omp.h>
#include <cmath>
#include <vector>

void layer_norm_rows(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ b,
                     float* __restrict__ y, int64_t rows, int64_t cols, float eps) {
#pragma omp parallel for
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * cols;
        float* yr = y + r * cols;
        float s = 0.f;
        for (int64_t c = 0; c < cols; ++c) s += xr[c];
        const float mean = s / cols;
        float ss = 0.f;
        for (int64_t c = 0; c < cols; ++c) { float d = xr[c] - mean; ss += d * d; }
        const float rstd = 1.f / std::sqrt(ss / cols + eps);
        for (int64_t c = 0; c < cols; ++c) yr[c] = (xr[c] - mean) * rstd * w[c] + b[c];
    }
}

at::Tensor layer_norm(at::Tensor x, at::Tensor weight, at::Tensor bias, double eps) {
    TORCH_CHECK(x.is_contiguous() && weight.is_contiguous() && bias.is_contiguous());
    const int64_t cols = weight.numel();
    const int64_t rows = x.numel() / cols;
    at::Tensor y = at::empty_like(x);
    layer_norm_rows(x.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(), y.data_ptr<float>(),
                    rows, cols, static_cast<float>(eps));
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("layer_norm", &layer_norm, "LayerNorm forward (OpenMP)",
          pybind11::arg("x"), pybind11::arg("weight"), pybind11::arg("bias"), pybind11::arg("eps"));
}
"""

_ln = load_inline(
    name="ln_omp_pybind",
    cpp_sources=CPP,
    extra_cflags=["-O3", "-fopenmp", "-march=native"],
    extra_ldflags=["-lgomp"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: int) -> None:
        super().__init__()
        self.cfg = LNConfig(normalized_shape)
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))
        self.register_buffer("_eps", torch.tensor(self.cfg.eps), persistent=False)

    @torch.no_grad()
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.size(-1) != self.cfg.normalized_shape:
            raise ValueError(f"expected last dim {self.cfg.normalized_shape}, got {x.size(-1)}")
        x = x.contiguous()
        return _ln.layer_norm(x, self.weight, self.bias, self.cfg.eps)
