# task: relu
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

act_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__device__ __forceinline__ float relu_op(float v) { return fmaxf(v, 0.f); }

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = relu_op(x[i]);
}

#define LAUNCH_ACT(NAME, X, Y, N)                                                        \
    NAME##_kernel<<<std::min<int64_t>(((N) + 255) / 256, 8192), 256, 0,                  \
                    at::cuda::getCurrentCUDAStream()>>>((X).data_ptr<float>(), (Y).data_ptr<float>(), (N))

torch::Tensor relu_act(torch::Tensor x) {
    auto y = torch::empty_like(x);
    LAUNCH_ACT(relu, x, y, x.numel());
    return y;
}
"""

act = load_inline(name="act_paste", cpp_sources="torch::Tensor relu_act(torch::Tensor x);", cuda_sources=act_src,
                  functions=["relu_act"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return act.relu_act(x.contiguous())
