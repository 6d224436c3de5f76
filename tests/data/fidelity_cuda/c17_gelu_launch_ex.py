# task: gelu
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cuda_runtime.h>

__global__ void gelu_tanh_free_kernel(const float* __restrict__ x, float* __restrict__ y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        y[i] = 0.5f * v * (1.0f + erff(v * 0.7071067811865475f));
    }
}

torch::Tensor gelu_launch_ex(torch::Tensor x) {
    auto y = torch::empty_like(x);
    int n = x.numel();
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3((n + 255) / 256);
    config.blockDim = dim3(256);
    config.dynamicSmemBytes = 0;
    config.stream = at::cuda::getCurrentCUDAStream();
    cudaLaunchAttribute attrs[1];
    attrs[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[0].val.programmaticStreamSerializationAllowed = 1;
    config.attrs = attrs;
    config.numAttrs = 1;
    const float* xp = x.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    cudaError_t err = cudaLaunchKernelEx(&config, gelu_tanh_free_kernel, xp, yp, n);
    TORCH_CHECK(err == cudaSuccess, cudaGetErrorString(err));
    return y;
}
"""

gelu_mod = load_inline(
    name="gelu_launch_ex",
    cpp_sources="torch::Tensor gelu_launch_ex(torch::Tensor x);",
    cuda_sources=CUDA_SRC,
    functions=["gelu_launch_ex"],
    extra_cuda_cflags=["-O3", "-std=c++17"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return gelu_mod.gelu_launch_ex(x.contiguous())
