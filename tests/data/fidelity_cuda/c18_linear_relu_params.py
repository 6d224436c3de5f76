# task: linear_relu
import math

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

linear_relu_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

#define TILE 32

// y = relu(x @ W^T + b); x: (M, K), W: (N, K) as nn.Linear stores it
__global__ void linear_relu_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                   const float* __restrict__ b, float* __restrict__ y, int M, int N, int K) {
    __shared__ float xs[TILE][TILE];
    __shared__ float ws[TILE][TILE + 1];
    int row = blockIdx.y * TILE + threadIdx.y;
    int col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.f;
    for (int t = 0; t < (K + TILE - 1) / TILE; ++t) {
        int kx = t * TILE + threadIdx.x;
        xs[threadIdx.y][threadIdx.x] = (row < M && kx < K) ? x[(size_t)row * K + kx] : 0.f;
        int wrow = blockIdx.x * TILE + threadIdx.y;
        ws[threadIdx.y][threadIdx.x] = (wrow < N && kx < K) ? w[(size_t)wrow * K + kx] : 0.f;
        __syncthreads();
        #pragma unroll
        for (int k = 0; k < TILE; ++k) acc += xs[threadIdx.y][k] * ws[threadIdx.x][k];
        __syncthreads();
    }
    if (row < M && col < N) y[(size_t)row * N + col] = fmaxf(acc + b[col], 0.f);
}

torch::Tensor linear_relu(torch::Tensor x, torch::Tensor w, torch::Tensor b) {
    const int M = x.size(0), K = x.size(1), N = w.size(0);
    auto y = torch::empty({M, N}, x.options());
    dim3 block(TILE, TILE);
    dim3 grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);
    linear_relu_kernel<<<grid, block, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), w.data_ptr<float>(), b.data_ptr<float>(), y.data_ptr<float>(), M, N, K);
    return y;
}
"""

ext = load_inline(
    name="linear_relu_tiled",
    cpp_sources="torch::Tensor linear_relu(torch::Tensor x, torch::Tensor w, torch::Tensor b);",
    cuda_sources=linear_relu_src,
    functions=["linear_relu"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super(ModelNew, self).__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        self.bias = nn.Parameter(torch.empty(out_features))
        self.reset_parameters()

    def reset_parameters(self):
        # same initialisation as nn.Linear
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        fan_in, _ = nn.init._calculate_fan_in_and_fan_out(self.weight)
        bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
        nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x):
        return ext.linear_relu(x.contiguous(), self.weight, self.bias)
