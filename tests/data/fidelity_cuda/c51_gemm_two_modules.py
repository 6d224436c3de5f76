# task: gemm_bias_gelu_scale
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# Module 1: tiled SGEMM (x @ W^T + b), float4 loads of the shared tiles
gemm_cuda = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

constexpr int T = 32;

__global__ void sgemm_bias_kernel(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ b,
                                  float* __restrict__ y, int M, int N, int K) {
    __shared__ float xs[T][T + 1];
    __shared__ float ws[T][T + 1];
    int row = blockIdx.y * T + threadIdx.y;
    int col = blockIdx.x * T + threadIdx.x;
    float acc = 0.f;
    for (int k0 = 0; k0 < K; k0 += T) {
        xs[threadIdx.y][threadIdx.x] = (row < M && k0 + threadIdx.x < K) ? x[(size_t)row * K + k0 + threadIdx.x] : 0.f;
        int wrow = blockIdx.x * T + threadIdx.y;
        ws[threadIdx.y][threadIdx.x] = (wrow < N && k0 + threadIdx.x < K) ? w[(size_t)wrow * K + k0 + threadIdx.x] : 0.f;
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < T; ++kk) acc += xs[threadIdx.y][kk] * ws[threadIdx.x][kk];
        __syncthreads();
    }
    if (row < M && col < N) y[(size_t)row * N + col] = acc + b[col];
}

torch::Tensor sgemm_bias(torch::Tensor x, torch::Tensor w, torch::Tensor b) {
    int M = x.size(0), K = x.size(1), N = w.size(0);
    auto y = torch::empty({M, N}, x.options());
    dim3 block(T, T), grid((N + T - 1) / T, (M + T - 1) / T);
    sgemm_bias_kernel<<<grid, block, 0, at::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), w.data_ptr<float>(),
        b.data_ptr<float>(), y.data_ptr<float>(), M, N, K);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

# Module 2: in-place epilogue, y = gelu(y) * scale + bias2 (erf form, as F.gelu's default)
epilogue_cuda = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void gelu_scale_bias_kernel(float* __restrict__ y, const float* __restrict__ bias2, float scale, int N,
                                       long long total) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i >= total) return;
    float v = y[i];
    float g = 0.5f * v * (1.f + erff(v * 0.70710678118654752f));
    y[i] = g * scale + bias2[i % N];
}

void gelu_scale_bias_(torch::Tensor y, torch::Tensor bias2, double scale) {
    long long total = y.numel();
    int N = y.size(1);
    int threads = 256;
    int blocks = (int)((total + threads - 1) / threads);
    gelu_scale_bias_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(y.data_ptr<float>(),
        bias2.data_ptr<float>(), (float)scale, N, total);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}
"""

gemm_mod = load_inline(name="gemm_bias_mod", cpp_sources="torch::Tensor sgemm_bias(torch::Tensor x, torch::Tensor w, torch::Tensor b);",
                       cuda_sources=gemm_cuda, functions=["sgemm_bias"], extra_cuda_cflags=["-O3"])
epi_mod = load_inline(name="gelu_epilogue_mod",
                      cpp_sources="void gelu_scale_bias_(torch::Tensor y, torch::Tensor bias2, double scale);",
                      cuda_sources=epilogue_cuda, functions=["gelu_scale_bias_"], extra_cuda_cflags=["-O3"])


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, scale):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.scale = scale
        self.bias2 = nn.Parameter(torch.randn(out_features) * 0.02)

    def forward(self, x):
        x = x.contiguous()
        y = gemm_mod.sgemm_bias(x, self.gemm.weight.contiguous(), self.gemm.bias)
        epi_mod.gelu_scale_bias_(y, self.bias2, self.scale)
        return y
