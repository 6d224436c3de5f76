# task: rmsnorm
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# Work on channels-last rows: x is (B, C, H, W); moving C to the last dim makes each RMS a contiguous row of C.
src = r"""
#include <torch/extension.h>

__global__ void rmsnorm_rows_kernel(const float* __restrict__ x, float* __restrict__ y, int rows, int C, float eps) {
    int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (warp >= rows) return;
    const float* xr = x + (size_t)warp * C;
    float ss = 0.f;
    for (int c = lane; c < C; c += 32) { float v = xr[c]; ss += v * v; }
    for (int o = 16; o; o >>= 1) ss += __shfl_xor_sync(0xffffffff, ss, o);
    float inv = rsqrtf(ss / C + eps);
    float* yr = y + (size_t)warp * C;
    for (int c = lane; c < C; c += 32) yr[c] = xr[c] * inv;
}

torch::Tensor rmsnorm_rows(torch::Tensor x, double eps) {
    const int C = x.size(-1);
    const int rows = x.numel() / C;
    auto y = torch::empty_like(x);
    const int threads = 256;
    const int blocks = (rows * 32 + threads - 1) / threads;
    rmsnorm_rows_kernel<<<blocks, threads>>>(x.data_ptr<float>(), y.data_ptr<float>(), rows, C, (float)eps);
    return y;
}
"""

ext = load_inline(name="rmsnorm_rows", cpp_sources="torch::Tensor rmsnorm_rows(torch::Tensor x, double eps);",
                  cuda_sources=src, functions=["rmsnorm_rows"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, num_features: int, eps: float = 1e-5):
        super().__init__()
        self.num_features = num_features
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x_cl = x.movedim(1, -1).contiguous()          # (B, H, W, C)
        y_cl = ext.rmsnorm_rows(x_cl, self.eps)
        return y_cl.movedim(-1, 1).contiguous()       # back to (B, C, H, W)
