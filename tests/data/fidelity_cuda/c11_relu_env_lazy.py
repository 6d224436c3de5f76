# task: relu
import hashlib
import os

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# Build only for Hopper: saves compile time
os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")

_SRC = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}

torch::Tensor relu_fwd(const torch::Tensor& x) {
    auto y = torch::empty_like(x);
    const int64_t n = x.numel();
    const int threads = 1024;
    const int64_t blocks = (n + threads - 1) / threads;
    relu_kernel<<<blocks, threads, 0, c10::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""
_CPP = "torch::Tensor relu_fwd(const torch::Tensor& x);"
_NAME = "relu_" + hashlib.sha1(_SRC.encode()).hexdigest()[:10]
_ext = None


def _get_ext():
    global _ext
    if _ext is None:
        _ext = load_inline(name=_NAME, cpp_sources=[_CPP], cuda_sources=[_SRC], functions=["relu_fwd"],
                           extra_cuda_cflags=["-O3"], verbose=False)
    return _ext


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        _get_ext()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        assert x.is_cuda and x.dtype == torch.float32
        if not x.is_contiguous():
            x = x.contiguous()
        return _get_ext().relu_fwd(x)
