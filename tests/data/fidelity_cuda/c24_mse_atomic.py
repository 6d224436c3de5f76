# task: mse
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

mse_cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

template <unsigned int blockSize>
__device__ void warpReduce(volatile double* sdata, unsigned int tid) {
    if (blockSize >= 64) sdata[tid] += sdata[tid + 32];
    if (blockSize >= 32) sdata[tid] += sdata[tid + 16];
    if (blockSize >= 16) sdata[tid] += sdata[tid + 8];
    if (blockSize >= 8) sdata[tid] += sdata[tid + 4];
    if (blockSize >= 4) sdata[tid] += sdata[tid + 2];
    if (blockSize >= 2) sdata[tid] += sdata[tid + 1];
}

template <unsigned int blockSize>
__global__ void mse_partial_kernel(const float* __restrict__ a, const float* __restrict__ b,
                                   double* __restrict__ acc, long long n) {
    __shared__ double sdata[blockSize];
    unsigned int tid = threadIdx.x;
    double local = 0.0;
    for (long long i = blockIdx.x * (long long)blockSize + tid; i < n; i += (long long)gridDim.x * blockSize) {
        float d = a[i] - b[i];
        local += (double)d * d;
    }
    sdata[tid] = local;
    __syncthreads();
    if (blockSize >= 512) { if (tid < 256) sdata[tid] += sdata[tid + 256]; __syncthreads(); }
    if (blockSize >= 256) { if (tid < 128) sdata[tid] += sdata[tid + 128]; __syncthreads(); }
    if (blockSize >= 128) { if (tid < 64) sdata[tid] += sdata[tid + 64]; __syncthreads(); }
    if (tid < 32) warpReduce<blockSize>(sdata, tid);
    if (tid == 0) atomicAdd(acc, sdata[0]);
}

__global__ void finalize_kernel(const double* acc, float* out, long long n) { out[0] = (float)(acc[0] / (double)n); }

torch::Tensor mse_cuda(torch::Tensor predictions, torch::Tensor targets) {
    auto p = predictions.contiguous();
    auto t = targets.contiguous();
    long long n = p.numel();
    auto acc = torch::zeros({1}, p.options().dtype(torch::kFloat64));
    auto out = torch::empty({1}, p.options());
    const int blocks = 132 * 16;
    auto stream = at::cuda::getCurrentCUDAStream();
    mse_partial_kernel<512><<<blocks, 512, 0, stream>>>(p.data_ptr<float>(), t.data_ptr<float>(),
                                                         acc.data_ptr<double>(), n);
    finalize_kernel<<<1, 1, 0, stream>>>(acc.data_ptr<double>(), out.data_ptr<float>(), n);
    return out;
}
"""

mse_cpp_source = "torch::Tensor mse_cuda(torch::Tensor predictions, torch::Tensor targets);"

mse = load_inline(name="mse_atomic_double", cpp_sources=mse_cpp_source, cuda_sources=mse_cuda_source,
                  functions=["mse_cuda"], verbose=False, extra_cuda_cflags=["-O3"])


class ModelNew(nn.Module):
    def __init__(self):
        super(ModelNew, self).__init__()
        self.mse = mse

    def forward(self, predictions, targets):
        out = self.mse.mse_cuda(predictions, targets)
        return out.squeeze(0)   # 0-dim, like torch.mean
