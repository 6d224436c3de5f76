# task: relu
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

relu_op_source = r"""
#include <torch/extension.h>
#include <torch/library.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void relu_grid_stride(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)blockDim.x * gridDim.x) {
        const float v = x[i];
        y[i] = v > 0.f ? v : 0.f;
    }
}

at::Tensor kb_relu_cuda(const at::Tensor& x) {
    auto xc = x.contiguous();
    auto y = at::empty_like(xc);
    const int64_t n = xc.numel();
    const int threads = 256;
    const int blocks = (int)std::min<int64_t>((n + threads - 1) / threads, 132 * 16);
    relu_grid_stride<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(xc.data_ptr<float>(),
                                                                               y.data_ptr<float>(), n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}

TORCH_LIBRARY(kb_ops, m) {
    m.def("relu(Tensor x) -> Tensor");
}

TORCH_LIBRARY_IMPL(kb_ops, CUDA, m) {
    m.impl("relu", &kb_relu_cuda);
}
"""

load_inline(
    name="kb_ops_relu",
    cpp_sources="",
    cuda_sources=relu_op_source,
    is_python_module=False,
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    """ReLU through a registered custom operator (torch.ops.kb_ops.relu), so it composes with torch.compile."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.kb_ops.relu(x)
