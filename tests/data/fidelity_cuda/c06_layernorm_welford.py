# task: layernorm_lastdim
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

layernorm_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

struct WelfordData { float mean; float m2; float count; };

__device__ __forceinline__ WelfordData welford_combine(WelfordData a, WelfordData b) {
    float count = a.count + b.count;
    if (count == 0.f) return {0.f, 0.f, 0.f};
    float delta = b.mean - a.mean;
    float nb = b.count / count;
    WelfordData r;
    r.mean = a.mean + delta * nb;
    r.m2 = a.m2 + b.m2 + delta * delta * a.count * nb;
    r.count = count;
    return r;
}

__device__ __forceinline__ WelfordData warp_welford(WelfordData d) {
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        WelfordData other;
        other.mean = __shfl_down_sync(0xffffffffu, d.mean, o);
        other.m2 = __shfl_down_sync(0xffffffffu, d.m2, o);
        other.count = __shfl_down_sync(0xffffffffu, d.count, o);
        d = welford_combine(d, other);
    }
    return d;
}

template <int THREADS>
__global__ void layernorm_fwd_kernel(const float* __restrict__ x, const float* __restrict__ gamma,
                                     const float* __restrict__ beta, float* __restrict__ y, int hidden, float eps) {
    const int row = blockIdx.x;
    const float* xr = x + (size_t)row * hidden;
    float* yr = y + (size_t)row * hidden;
    WelfordData d{0.f, 0.f, 0.f};
    for (int i = threadIdx.x; i < hidden; i += THREADS) {
        float v = xr[i];
        d.count += 1.f;
        float delta = v - d.mean;
        d.mean += delta / d.count;
        d.m2 += delta * (v - d.mean);
    }
    d = warp_welford(d);
    __shared__ WelfordData shared[THREADS / 32];
    __shared__ float s_mean, s_rstd;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) shared[warp] = d;
    __syncthreads();
    if (warp == 0) {
        d = lane < THREADS / 32 ? shared[lane] : WelfordData{0.f, 0.f, 0.f};
        d = warp_welford(d);
        if (lane == 0) {
            s_mean = d.mean;
            s_rstd = rsqrtf(d.m2 / d.count + eps);
        }
    }
    __syncthreads();
    const float mean = s_mean, rstd = s_rstd;
    for (int i = threadIdx.x; i < hidden; i += THREADS) {
        yr[i] = (xr[i] - mean) * rstd * gamma[i] + beta[i];
    }
}

torch::Tensor layernorm_forward(torch::Tensor x, torch::Tensor gamma, torch::Tensor beta, double eps) {
    TORCH_CHECK(x.is_cuda() && gamma.is_cuda() && beta.is_cuda(), "all tensors must be CUDA");
    const c10::cuda::CUDAGuard guard(x.device());
    auto xc = x.contiguous();
    const int hidden = gamma.numel();
    const int rows = xc.numel() / hidden;
    auto y = torch::empty_like(xc);
    layernorm_fwd_kernel<256><<<rows, 256, 0, at::cuda::getCurrentCUDAStream()>>>(
        xc.data_ptr<float>(), gamma.data_ptr<float>(), beta.data_ptr<float>(), y.data_ptr<float>(), hidden, (float)eps);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

layernorm_cpp = "torch::Tensor layernorm_forward(torch::Tensor x, torch::Tensor gamma, torch::Tensor beta, double eps);"

layernorm_ext = load_inline(
    name="layernorm_welford",
    cpp_sources=[layernorm_cpp],
    cuda_sources=[layernorm_source],
    functions=["layernorm_forward"],
    extra_cuda_cflags=["-O3", "--use_fast_math"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, hidden: int, eps: float = 1e-5):
        super().__init__()
        ln = nn.LayerNorm(hidden, eps=eps)
        self.weight = nn.Parameter(ln.weight.detach().clone())
        self.bias = nn.Parameter(ln.bias.detach().clone())
        self.eps = eps

    def forward(self, x):
        return layernorm_ext.layernorm_forward(x, self.weight, self.bias, self.eps)
