# task: bmm
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

bmm_cuda = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

#define TILE 16

__global__ void bmm_tiled_kernel(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                                 int M, int K, int N) {
    const int b = blockIdx.z;
    A += (size_t)b * M * K; B += (size_t)b * K * N; C += (size_t)b * M * N;
    __shared__ float As[TILE][TILE], Bs[TILE][TILE];
    int r = blockIdx.y * TILE + threadIdx.y, c = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        As[threadIdx.y][threadIdx.x] = (r < M && k0 + threadIdx.x < K) ? A[(size_t)r * K + k0 + threadIdx.x] : 0.f;
        Bs[threadIdx.y][threadIdx.x] = (k0 + threadIdx.y < K && c < N) ? B[(size_t)(k0 + threadIdx.y) * N + c] : 0.f;
        __syncthreads();
        #pragma unroll
        for (int k = 0; k < TILE; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
        __syncthreads();
    }
    if (r < M && c < N) C[(size_t)r * N + c] = acc;
}

// 4 columns per thread, float4 loads of B: for N % 4 == 0
__global__ void bmm_vec4_kernel(const float* __restrict__ A, const float4* __restrict__ B4, float4* __restrict__ C4,
                                int M, int K, int N4) {
    const int b = blockIdx.z;
    const float* Ab = A + (size_t)b * M * K;
    const float4* Bb = B4 + (size_t)b * K * N4;
    float4* Cb = C4 + (size_t)b * M * N4;
    int r = blockIdx.y * blockDim.y + threadIdx.y, c = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= M || c >= N4) return;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int k = 0; k < K; ++k) {
        float a = Ab[(size_t)r * K + k];
        float4 bv = Bb[(size_t)k * N4 + c];
        acc.x += a * bv.x; acc.y += a * bv.y; acc.z += a * bv.z; acc.w += a * bv.w;
    }
    Cb[(size_t)r * N4 + c] = acc;
}

torch::Tensor bmm_tiled(torch::Tensor A, torch::Tensor B) {
    int batch = A.size(0), M = A.size(1), K = A.size(2), N = B.size(2);
    auto C = torch::empty({batch, M, N}, A.options());
    dim3 block(TILE, TILE), grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE, batch);
    bmm_tiled_kernel<<<grid, block, 0, at::cuda::getCurrentCUDAStream()>>>(A.data_ptr<float>(), B.data_ptr<float>(),
                                                                           C.data_ptr<float>(), M, K, N);
    return C;
}

torch::Tensor bmm_vec4(torch::Tensor A, torch::Tensor B) {
    int batch = A.size(0), M = A.size(1), K = A.size(2), N = B.size(2);
    TORCH_CHECK(N % 4 == 0);
    auto C = torch::empty({batch, M, N}, A.options());
    dim3 block(32, 8), grid((N / 4 + 31) / 32, (M + 7) / 8, batch);
    bmm_vec4_kernel<<<grid, block, 0, at::cuda::getCurrentCUDAStream()>>>(
        A.data_ptr<float>(), reinterpret_cast<const float4*>(B.data_ptr<float>()),
        reinterpret_cast<float4*>(C.data_ptr<float>()), M, K, N / 4);
    return C;
}
"""

bmm_cpp = """
torch::Tensor bmm_tiled(torch::Tensor A, torch::Tensor B);
torch::Tensor bmm_vec4(torch::Tensor A, torch::Tensor B);
"""

bmm_ext = load_inline(name="bmm_two_paths", cpp_sources=bmm_cpp, cuda_sources=bmm_cuda,
                      functions=["bmm_tiled", "bmm_vec4"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super(ModelNew, self).__init__()

    def forward(self, A, B):
        A = A.contiguous()
        B = B.contiguous()
        if B.size(2) % 4 == 0 and B.data_ptr() % 16 == 0:
            return bmm_ext.bmm_vec4(A, B)
        return bmm_ext.bmm_tiled(A, B)
