# task: layernorm_lastdim
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

ln_cuda = r"""
#include <torch/extension.h>
#include <cub/block/block_reduce.cuh>
#include <ATen/cuda/CUDAContext.h>

struct MeanM2 {
    float sum;
    float sq;
};

struct MeanM2Add {
    __device__ __forceinline__ MeanM2 operator()(const MeanM2& a, const MeanM2& b) const {
        return {a.sum + b.sum, a.sq + b.sq};
    }
};

template <int BLOCK, int VEC>
__global__ __launch_bounds__(BLOCK) void layernorm_fwd(const float* __restrict__ x, const float* __restrict__ gamma,
                                                       const float* __restrict__ beta, float* __restrict__ y,
                                                       int hidden, float eps) {
    using BlockReduce = cub::BlockReduce<MeanM2, BLOCK>;
    __shared__ typename BlockReduce::TempStorage temp;
    __shared__ float s_mean, s_rstd;
    const float* xr = x + (size_t)blockIdx.x * hidden;
    float* yr = y + (size_t)blockIdx.x * hidden;
    MeanM2 acc{0.f, 0.f};
    if constexpr (VEC == 4) {
        const float4* x4 = reinterpret_cast<const float4*>(xr);
        for (int i = threadIdx.x; i < hidden / 4; i += BLOCK) {
            float4 v = x4[i];
            acc.sum += v.x + v.y + v.z + v.w;
            acc.sq += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
        }
    } else {
        for (int i = threadIdx.x; i < hidden; i += BLOCK) {
            float v = xr[i];
            acc.sum += v;
            acc.sq += v * v;
        }
    }
    MeanM2 tot = BlockReduce(temp).Reduce(acc, MeanM2Add());
    if (threadIdx.x == 0) {
        float mean = tot.sum / hidden;
        float var = fmaxf(tot.sq / hidden - mean * mean, 0.f);
        s_mean = mean;
        s_rstd = rsqrtf(var + eps);
    }
    __syncthreads();
    const float mean = s_mean, rstd = s_rstd;
    if constexpr (VEC == 4) {
        const float4* x4 = reinterpret_cast<const float4*>(xr);
        const float4* g4 = reinterpret_cast<const float4*>(gamma);
        const float4* b4 = reinterpret_cast<const float4*>(beta);
        float4* y4 = reinterpret_cast<float4*>(yr);
        for (int i = threadIdx.x; i < hidden / 4; i += BLOCK) {
            float4 v = x4[i], g = g4[i], b = b4[i], o;
            o.x = (v.x - mean) * rstd * g.x + b.x;
            o.y = (v.y - mean) * rstd * g.y + b.y;
            o.z = (v.z - mean) * rstd * g.z + b.z;
            o.w = (v.w - mean) * rstd * g.w + b.w;
            y4[i] = o;
        }
    } else {
        for (int i = threadIdx.x; i < hidden; i += BLOCK) yr[i] = (xr[i] - mean) * rstd * gamma[i] + beta[i];
    }
}

torch::Tensor layernorm_forward(torch::Tensor x, torch::Tensor gamma, torch::Tensor beta, double eps) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous(), "x must be contiguous CUDA");
    const int hidden = x.size(-1);
    const int rows = x.numel() / hidden;
    auto y = torch::empty_like(x);
    auto stream = at::cuda::getCurrentCUDAStream().stream();
    constexpr int kBlock = 256;
    if (hidden % 4 == 0) {
        layernorm_fwd<kBlock, 4><<<rows, kBlock, 0, stream>>>(x.data_ptr<float>(), gamma.data_ptr<float>(),
            beta.data_ptr<float>(), y.data_ptr<float>(), hidden, static_cast<float>(eps));
    } else {
        layernorm_fwd<kBlock, 1><<<rows, kBlock, 0, stream>>>(x.data_ptr<float>(), gamma.data_ptr<float>(),
            beta.data_ptr<float>(), y.data_ptr<float>(), hidden, static_cast<float>(eps));
    }
    cudaError_t err = cudaGetLastError();
    TORCH_CHECK(err == cudaSuccess, "layernorm_fwd launch failed: ", cudaGetErrorString(err));
    return y;
}
"""

ln_cpp = "torch::Tensor layernorm_forward(torch::Tensor x, torch::Tensor gamma, torch::Tensor beta, double eps);"

ln_ext = load_inline(name="ln_cub_vec", cpp_sources=[ln_cpp], cuda_sources=[ln_cuda],
                     functions=["layernorm_forward"], extra_cuda_cflags=["-O3", "-std=c++17"])


class ModelNew(nn.Module):
    def __init__(self, hidden: int, eps: float = 1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.bias = nn.Parameter(torch.zeros(hidden))
        self.eps = eps

    def forward(self, x):
        return ln_ext.layernorm_forward(x.contiguous(), self.weight, self.bias, self.eps)
