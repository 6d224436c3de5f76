# task: layernorm_lastdim
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

ln_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void ln_row_kernel(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ b,
                              float* __restrict__ y, int H, float eps) {
    extern __shared__ float red[];
    const float* xr = x + (size_t)blockIdx.x * H;
    float s = 0.f;
    for (int i = threadIdx.x; i < H; i += blockDim.x) s += xr[i];
    red[threadIdx.x] = s;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k >>= 1) {
        if (threadIdx.x < k) red[threadIdx.x] += red[threadIdx.x + k];
        __syncthreads();
    }
    const float mean = red[0] / H;
    __syncthreads();
    float v = 0.f;
    for (int i = threadIdx.x; i < H; i += blockDim.x) { float d = xr[i] - mean; v += d * d; }
    red[threadIdx.x] = v;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k >>= 1) {
        if (threadIdx.x < k) red[threadIdx.x] += red[threadIdx.x + k];
        __syncthreads();
    }
    const float rstd = rsqrtf(red[0] / H + eps);
    float* yr = y + (size_t)blockIdx.x * H;
    for (int i = threadIdx.x; i < H; i += blockDim.x) yr[i] = (xr[i] - mean) * rstd * w[i] + b[i];
}

torch::Tensor layer_norm_rows(torch::Tensor x, torch::Tensor w, torch::Tensor b, double eps) {
    const int H = w.numel();
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const int threads = 256;
    ln_row_kernel<<<xc.numel() / H, threads, threads * sizeof(float), at::cuda::getCurrentCUDAStream()>>>(
        xc.data_ptr<float>(), w.data_ptr<float>(), b.data_ptr<float>(), y.data_ptr<float>(), H, (float)eps);
    return y;
}
"""

_ln = load_inline(name="ln_rows_shared",
                  cpp_sources="torch::Tensor layer_norm_rows(torch::Tensor x, torch::Tensor w, torch::Tensor b, double eps);",
                  cuda_sources=ln_src, functions=["layer_norm_rows"], verbose=False)


class CUDALayerNorm(nn.Module):
    """Drop-in for nn.LayerNorm over the last dimension."""

    def __init__(self, hidden: int, eps: float = 1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.bias = nn.Parameter(torch.zeros(hidden))
        self.eps = eps

    def forward(self, x):
        return _ln.layer_norm_rows(x, self.weight, self.bias, self.eps)


class ModelNew(nn.Module):
    def __init__(self, hidden: int, eps: float = 1e-5):
        super().__init__()
        self.norm = CUDALayerNorm(hidden, eps)

    def forward(self, x):
        return self.norm(x)
