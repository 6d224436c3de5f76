# task: relu
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# The .cu part is plain CUDA (no torch): kernel + launcher on raw pointers; the C++ part wraps it for torch.
cuda_src = r"""
#include <cuda_runtime.h>
#include <cstdint>

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) y[i] = fmaxf(x[i], 0.0f);
}

void launch_relu(const float* x, float* y, int64_t n, cudaStream_t stream) {
    const int threads = 256;
    const int64_t blocks = (n + threads - 1) / threads;
    relu_kernel<<<(unsigned)blocks, threads, 0, stream>>>(x, y, n);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) {
        throw std::runtime_error(std::string("relu_kernel launch failed: ") + cudaGetErrorString(err));
    }
}
"""

cpp_src = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAStream.h>

void launch_relu(const float* x, float* y, int64_t n, cudaStream_t stream);

torch::Tensor relu(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "float32 CUDA tensor expected");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    launch_relu(xc.data_ptr<float>(), y.data_ptr<float>(), xc.numel(), c10::cuda::getCurrentCUDAStream());
    return y;
}
"""

relu_ext = load_inline(name="relu_plain_cuda", cpp_sources=cpp_src, cuda_sources=cuda_src, functions=["relu"],
                       extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return relu_ext.relu(x)
