# task: layernorm_lastdim
import itertools
import math

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

ln_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

// one warp per row; two-pass mean / variance over the row held in registers (hidden = 4096 -> 128 floats a lane)
template <int PER_LANE>
__global__ void ln_warp_rows(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ b,
                             float* __restrict__ y, int rows, int hidden, float eps) {
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    if (row >= rows) return;
    const float* xr = x + (size_t)row * hidden;
    float v[PER_LANE];
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < PER_LANE; ++k) {
        const int c = k * 32 + lane;
        v[k] = c < hidden ? xr[c] : 0.f;
        s += v[k];
    }
    for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    const float mean = s / hidden;
    float q = 0.f;
#pragma unroll
    for (int k = 0; k < PER_LANE; ++k) {
        const int c = k * 32 + lane;
        const float d = c < hidden ? v[k] - mean : 0.f;
        q += d * d;
    }
    for (int o = 16; o; o >>= 1) q += __shfl_xor_sync(0xffffffffu, q, o);
    const float rstd = rsqrtf(q / hidden + eps);
    float* yr = y + (size_t)row * hidden;
#pragma unroll
    for (int k = 0; k < PER_LANE; ++k) {
        const int c = k * 32 + lane;
        if (c < hidden) yr[c] = (v[k] - mean) * rstd * w[c] + b[c];
    }
}

void layernorm_rows(torch::Tensor x, torch::Tensor w, torch::Tensor b, torch::Tensor y, int64_t row0, int64_t rows,
                    double eps) {
    const int hidden = x.size(-1);
    TORCH_CHECK(hidden <= 128 * 32, "hidden up to 4096");
    const float* xp = x.data_ptr<float>() + row0 * hidden;
    float* yp = y.data_ptr<float>() + row0 * hidden;
    const int warps = 8;
    ln_warp_rows<128><<<(unsigned)((rows + warps - 1) / warps), warps * 32, 0, at::cuda::getCurrentCUDAStream()>>>(
        xp, w.data_ptr<float>(), b.data_ptr<float>(), yp, (int)rows, hidden, (float)eps);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}
"""

ln = load_inline(
    name="ln_warp_rows_chunks",
    cpp_sources="void layernorm_rows(torch::Tensor x, torch::Tensor w, torch::Tensor b, torch::Tensor y, int64_t row0, "
                "int64_t rows, double eps);",
    cuda_sources=ln_source,
    functions=["layernorm_rows"],
    extra_cuda_cflags=["-O3", "--use_fast_math"],
)

MAX_ROWS_PER_LAUNCH = 1 << 16  # keeps every launch's grid well inside the 2^31 limit


class ModelNew(nn.Module):
    def __init__(self, hidden: int, eps: float = 1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.bias = nn.Parameter(torch.zeros(hidden))
        self.eps = eps

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        rows = x.numel() // x.size(-1)
        launches = math.ceil(rows / MAX_ROWS_PER_LAUNCH)
        for i, step in enumerate(itertools.repeat(MAX_ROWS_PER_LAUNCH, launches)):
            row0 = i * step
            ln.layernorm_rows(x, self.weight, self.bias, y, row0, min(step, rows - row0), self.eps)
        return y
