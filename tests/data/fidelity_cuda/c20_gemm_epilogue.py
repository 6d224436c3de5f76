# task: gemm_bias_gelu_scale
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

fused_gemm_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

namespace {

constexpr int BM = 64, BN = 64, BK = 16, TM = 4, TN = 4;   // 16 x 16 threads, 4 x 4 outputs each

__device__ __forceinline__ float gelu_exact(float v) { return 0.5f * v * (1.f + erff(v * 0.70710678f)); }

__global__ void gemm_bias_gelu_scale_kernel(const float* __restrict__ X, const float* __restrict__ W,
                                            const float* __restrict__ bias, const float* __restrict__ bias2,
                                            float* __restrict__ Y, int M, int N, int K, float scale) {
    __shared__ float Xs[BK][BM + 4];
    __shared__ float Ws[BK][BN + 4];
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    float acc[TM][TN];
    #pragma unroll
    for (int i = 0; i < TM; ++i)
        #pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.f;
    for (int k0 = 0; k0 < K; k0 += BK) {
        for (int idx = threadIdx.x; idx < BM * BK; idx += 256) {
            int r = idx / BK, c = idx % BK;
            Xs[c][r] = (m0 + r < M && k0 + c < K) ? X[(size_t)(m0 + r) * K + k0 + c] : 0.f;
            Ws[c][r] = (n0 + r < N && k0 + c < K) ? W[(size_t)(n0 + r) * K + k0 + c] : 0.f;
        }
        __syncthreads();
        #pragma unroll
        for (int k = 0; k < BK; ++k) {
            #pragma unroll
            for (int i = 0; i < TM; ++i)
                #pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += Xs[k][ty * TM + i] * Ws[k][tx * TN + j];
        }
        __syncthreads();
    }
    #pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int m = m0 + ty * TM + i;
        #pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int n = n0 + tx * TN + j;
            if (m < M && n < N) Y[(size_t)m * N + n] = gelu_exact(acc[i][j] + bias[n]) * scale + bias2[n];
        }
    }
}

}  // namespace

torch::Tensor fused_forward(torch::Tensor x, torch::Tensor w, torch::Tensor b, torch::Tensor b2, double scale) {
    const at::cuda::CUDAGuard guard(x.device());
    const int M = x.size(0), K = x.size(1), N = w.size(0);
    auto y = torch::empty({M, N}, x.options());
    dim3 grid((N + BN - 1) / BN, (M + BM - 1) / BM);
    gemm_bias_gelu_scale_kernel<<<grid, 256, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), w.data_ptr<float>(), b.data_ptr<float>(), b2.data_ptr<float>(), y.data_ptr<float>(),
        M, N, K, static_cast<float>(scale));
    AT_CUDA_CHECK(cudaGetLastError());
    return y;
}
"""

fused_gemm = load_inline(
    name="fused_gemm_bias_gelu_scale",
    cpp_sources="torch::Tensor fused_forward(torch::Tensor x, torch::Tensor w, torch::Tensor b, torch::Tensor b2, double scale);",
    cuda_sources=fused_gemm_source,
    functions=["fused_forward"],
    extra_cuda_cflags=["-O3", "--use_fast_math"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, scale):
        super(ModelNew, self).__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.scale = scale
        self.bias2 = nn.Parameter(torch.randn(out_features) * 0.02)

    def forward(self, x):
        return fused_gemm.fused_forward(x.contiguous(), self.gemm.weight, self.gemm.bias, self.bias2, self.scale)
