# task: gelu
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

gelu_cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void gelu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        y[i] = 0.5f * v * (1.0f + erff(v * M_SQRT1_2));
    }
}

void gelu_out(torch::Tensor x, torch::Tensor y) {
    const int64_t n = x.numel();
    gelu_kernel<<<(unsigned)((n + 511) / 512), 512, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), y.data_ptr<float>(), n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}
"""

_gelu = load_inline(name="gelu_custom_op_ext", cpp_sources="void gelu_out(torch::Tensor x, torch::Tensor y);",
                    cuda_sources=gelu_cuda_src, functions=["gelu_out"], extra_cuda_cflags=["-O3"])


@torch.library.custom_op("kb::gelu", mutates_args=())
def gelu(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    y = torch.empty_like(x)
    _gelu.gelu_out(x, y)
    return y


@gelu.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return gelu(x)
