# task: mse
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

source = r"""
#include <torch/extension.h>
#include <cub/device/device_reduce.cuh>
#include <ATen/cuda/CUDAContext.h>

__global__ void squared_diff_kernel(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ d,
                                    int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float t = a[i] - b[i];
        d[i] = t * t;
    }
}

__global__ void scale_kernel(const float* __restrict__ sum, float* __restrict__ out, double inv_n) {
    out[0] = (float)((double)sum[0] * inv_n);
}

torch::Tensor mse_cub(torch::Tensor pred, torch::Tensor target) {
    auto a = pred.contiguous();
    auto b = target.contiguous();
    const int64_t n = a.numel();
    auto diff = torch::empty({n}, a.options());
    auto total = torch::empty({1}, a.options());
    auto out = torch::empty({}, a.options());
    cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    int threads = 256;
    int blocks = (int)std::min<int64_t>((n + threads - 1) / threads, 65535);
    squared_diff_kernel<<<blocks, threads, 0, stream>>>(a.data_ptr<float>(), b.data_ptr<float>(),
                                                        diff.data_ptr<float>(), n);
    size_t temp_bytes = 0;
    cub::DeviceReduce::Sum(nullptr, temp_bytes, diff.data_ptr<float>(), total.data_ptr<float>(), (int)n, stream);
    auto temp = torch::empty({(int64_t)temp_bytes}, a.options().dtype(torch::kUInt8));
    cub::DeviceReduce::Sum(temp.data_ptr(), temp_bytes, diff.data_ptr<float>(), total.data_ptr<float>(), (int)n,
                           stream);
    scale_kernel<<<1, 1, 0, stream>>>(total.data_ptr<float>(), out.data_ptr<float>(), 1.0 / (double)n);
    AT_CUDA_CHECK(cudaGetLastError());
    return out;
}
"""

mse_module = load_inline(
    name="mse_cub_device_reduce",
    cpp_sources="torch::Tensor mse_cub(torch::Tensor pred, torch::Tensor target);",
    cuda_sources=source,
    functions=["mse_cub"],
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        return mse_module.mse_cub(predictions, targets)
