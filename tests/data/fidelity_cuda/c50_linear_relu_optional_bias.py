# task: linear_relu
import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: F401  (kept from the reference's imports)
from torch.utils.cpp_extension import load_inline

gemm_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <optional>

#define TM 8
#define TN 8
#define BM 128
#define BN 128
#define BK 8

// y = relu(x @ w^T + b): register-tiled SGEMM, each thread owns a TM x TN block of C
__global__ void __launch_bounds__(256) linear_relu_kernel(const float* __restrict__ X, const float* __restrict__ W,
                                                          const float* __restrict__ bias, float* __restrict__ Y,
                                                          int M, int N, int K) {
    __shared__ float Xs[BK][BM];
    __shared__ float Ws[BK][BN];
    const int tx = threadIdx.x % (BN / TN), ty = threadIdx.x / (BN / TN);
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    float acc[TM][TN] = {0.f};
    float a_reg[TM], b_reg[TN];
    for (int k0 = 0; k0 < K; k0 += BK) {
        for (int i = threadIdx.x; i < BM * BK; i += 256) {
            int r = i / BK, c = i % BK;
            Xs[c][r] = (row0 + r < M && k0 + c < K) ? X[(size_t)(row0 + r) * K + k0 + c] : 0.f;
            Ws[c][r] = (col0 + r < N && k0 + c < K) ? W[(size_t)(col0 + r) * K + k0 + c] : 0.f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
#pragma unroll
            for (int i = 0; i < TM; ++i) a_reg[i] = Xs[kk][ty * TM + i];
#pragma unroll
            for (int j = 0; j < TN; ++j) b_reg[j] = Ws[kk][tx * TN + j];
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a_reg[i], b_reg[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        int r = row0 + ty * TM + i;
        if (r >= M) continue;
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            int c = col0 + tx * TN + j;
            if (c < N) {
                float v = acc[i][j] + (bias ? bias[c] : 0.f);
                Y[(size_t)r * N + c] = v > 0.f ? v : 0.f;
            }
        }
    }
}

torch::Tensor linear_relu(torch::Tensor x, torch::Tensor weight, std::optional<torch::Tensor> bias) {
    x = x.contiguous();
    weight = weight.contiguous();
    const int M = x.size(0), K = x.size(1), N = weight.size(0);
    auto y = torch::empty({M, N}, x.options());
    const float* b = nullptr;
    torch::Tensor bias_c;
    if (bias.has_value() && bias->defined()) {
        bias_c = bias->contiguous();
        b = bias_c.data_ptr<float>();
    }
    dim3 grid((N + BN - 1) / BN, (M + BM - 1) / BM);
    linear_relu_kernel<<<grid, 256, 0, at::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(),
        weight.data_ptr<float>(), b, y.data_ptr<float>(), M, N, K);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

gemm_cpp = "torch::Tensor linear_relu(torch::Tensor x, torch::Tensor weight, std::optional<torch::Tensor> bias);"

linear_relu_ext = load_inline(name="linear_relu_regtile", cpp_sources=gemm_cpp, cuda_sources=gemm_source,
                              functions=["linear_relu"], extra_cuda_cflags=["-O3", "-Xptxas", "-O3"])


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias: bool = True):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=bias)

    def forward(self, x):
        return linear_relu_ext.linear_relu(x, self.linear.weight, self.linear.bias)
