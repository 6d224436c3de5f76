# task: gelu
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void gelu_gs_kernel(const float* __restrict__ x, float* __restrict__ y, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        float v = x[i];
        y[i] = 0.5f * v * (1.f + erff(v * 0.7071067811865476f));
    }
}

torch::Tensor gelu_gs(torch::Tensor x, int64_t num_blocks) {
    auto y = torch::empty_like(x);
    gelu_gs_kernel<<<(unsigned)num_blocks, 256, 0, at::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(),
                                                                                        y.data_ptr<float>(), x.numel());
    return y;
}
"""

ext = load_inline(name="gelu_grid_stride", cpp_sources="torch::Tensor gelu_gs(torch::Tensor x, int64_t num_blocks);",
                  cuda_sources=src, functions=["gelu_gs"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        # size the grid to the GPU: a few waves of blocks per SM
        try:
            sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
        except (RuntimeError, AssertionError):
            sms = 132  # H100 SXM
        self.num_blocks = sms * 8

    def forward(self, x):
        return ext.gelu_gs(x.contiguous(), self.num_blocks)
