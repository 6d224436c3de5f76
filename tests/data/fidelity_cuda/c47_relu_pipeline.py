# task: relu
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

relu_cuda = r"""
#include <torch/extension.h>
#include <cuda_pipeline.h>
#include <ATen/cuda/CUDAContext.h>

constexpr int kThreads = 256;
constexpr int kStages = 4;

// each block streams its chunk through shared memory with __pipeline_memcpy_async, kStages float4 in flight
__global__ void relu_pipelined(const float4* __restrict__ x, float4* __restrict__ y, long long n4) {
    __shared__ float4 buf[kStages][kThreads];
    const long long stride = (long long)gridDim.x * kThreads;
    long long base = (long long)blockIdx.x * kThreads + threadIdx.x;
    int stage = 0;
    for (int s = 0; s < kStages; ++s) {
        long long i = base + s * stride;
        if (i < n4) __pipeline_memcpy_async(&buf[s][threadIdx.x], &x[i], sizeof(float4));
        __pipeline_commit();
    }
    for (long long i = base; i < n4; i += stride) {
        __pipeline_wait_prior(kStages - 1);
        float4 v = buf[stage][threadIdx.x];
        v.x = fmaxf(v.x, 0.f); v.y = fmaxf(v.y, 0.f); v.z = fmaxf(v.z, 0.f); v.w = fmaxf(v.w, 0.f);
        y[i] = v;
        long long nxt = i + (long long)kStages * stride;
        if (nxt < n4) __pipeline_memcpy_async(&buf[stage][threadIdx.x], &x[nxt], sizeof(float4));
        __pipeline_commit();
        stage = (stage + 1) % kStages;
    }
}

__global__ void relu_tail(const float* __restrict__ x, float* __restrict__ y, long long start, long long n) {
    long long i = start + blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = fmaxf(x[i], 0.f);
}

torch::Tensor relu_forward(const torch::Tensor& input) {
    auto x = input.contiguous();
    auto y = torch::empty_like(x);
    const long long n = x.numel();
    const long long n4 = n / 4;
    auto stream = at::cuda::getCurrentCUDAStream();
    int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
    if (n4 > 0) {
        int blocks = (int)std::min<long long>((n4 + kThreads - 1) / kThreads, (long long)sms * 8);
        relu_pipelined<<<blocks, kThreads, 0, stream>>>(reinterpret_cast<const float4*>(x.data_ptr<float>()),
                                                        reinterpret_cast<float4*>(y.data_ptr<float>()), n4);
    }
    if (n - n4 * 4 > 0) {
        relu_tail<<<1, 32, 0, stream>>>(x.data_ptr<float>(), y.data_ptr<float>(), n4 * 4, n);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

relu_ext = load_inline(
    name="relu_pipeline_async",
    cpp_sources="torch::Tensor relu_forward(const torch::Tensor& input);",
    cuda_sources=relu_cuda,
    functions=["relu_forward"],
    extra_cuda_cflags=["-O3", "-arch=sm_90a"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return relu_ext.relu_forward(x)
