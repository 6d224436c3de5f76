# task: gelu
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

gelu_cu = r"""
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdint>

#define CUDA_CHECK(expr)                                                                  \
    do {                                                                                  \
        cudaError_t err__ = (expr);                                                       \
        if (err__ != cudaSuccess)                                                         \
            fprintf(stderr, "CUDA error %s at %s:%d\n", cudaGetErrorString(err__), __FILE__, __LINE__); \
    } while (0)

__global__ void gelu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)blockDim.x * gridDim.x) {
        const float v = x[i];
        y[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752440f));
    }
}

void gelu_launcher(const float* x, float* y, int64_t n, cudaStream_t stream) {
    int dev = 0, sms = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    const int threads = 256;
    const int64_t want = (n + threads - 1) / threads;
    const int blocks = (int)std::min<int64_t>(want, (int64_t)sms * 16);
    gelu_kernel<<<blocks, threads, 0, stream>>>(x, y, n);
    CUDA_CHECK(cudaGetLastError());
}
"""

gelu_cpp = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

void gelu_launcher(const float* x, float* y, int64_t n, cudaStream_t stream);

at::Tensor gelu(const at::Tensor& x) {
    TORCH_CHECK(x.is_cuda(), "x must be CUDA");
    auto xc = x.contiguous();
    auto y = at::empty_like(xc);
    gelu_launcher(xc.data_ptr<float>(), y.data_ptr<float>(), xc.numel(), at::cuda::getCurrentCUDAStream().stream());
    return y;
}
"""

module = load_inline(
    name="gelu_plain_launcher",
    cpp_sources=[gelu_cpp],
    cuda_sources=[gelu_cu],
    functions=["gelu"],
    extra_cuda_cflags=["-O3", "--use_fast_math"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return module.gelu(x)
