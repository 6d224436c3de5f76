# task: attention
import math

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

flash_cuda = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

// One block per (batch*head, 64-query tile); one warp-row of threads per query. K/V tiles of BC keys are staged in
// shared memory and each query keeps its running max m, running sum l and output accumulator o (online softmax).
template <int D, int BR, int BC>
__global__ void __launch_bounds__(BR) flash_attn_fwd(const float* __restrict__ Q, const float* __restrict__ K,
                                                     const float* __restrict__ V, float* __restrict__ O,
                                                     int seq, float scale) {
    extern __shared__ float smem[];
    float* Ks = smem;            // BC x D
    float* Vs = smem + BC * D;   // BC x D
    const int bh = blockIdx.y;
    const int q_idx = blockIdx.x * BR + threadIdx.x;
    const float* q_ptr = Q + ((size_t)bh * seq + q_idx) * D;
    const float* k_base = K + (size_t)bh * seq * D;
    const float* v_base = V + (size_t)bh * seq * D;

    float q[D], o[D];
    float m = -INFINITY, l = 0.f;
#pragma unroll
    for (int d = 0; d < D; ++d) {
        q[d] = q_idx < seq ? q_ptr[d] * scale : 0.f;
        o[d] = 0.f;
    }
    for (int kb = 0; kb < seq; kb += BC) {
        for (int t = threadIdx.x; t < BC * D; t += BR) {
            int r = t / D, c = t % D;
            bool ok = kb + r < seq;
            Ks[t] = ok ? k_base[(size_t)(kb + r) * D + c] : 0.f;
            Vs[t] = ok ? v_base[(size_t)(kb + r) * D + c] : 0.f;
        }
        __syncthreads();
        if (q_idx < seq) {
            const int kmax = min(BC, seq - kb);
            for (int j = 0; j < kmax; ++j) {
                float s = 0.f;
#pragma unroll
                for (int d = 0; d < D; ++d) s = fmaf(q[d], Ks[j * D + d], s);
                float m_new = fmaxf(m, s);
                float corr = __expf(m - m_new);
                float p = __expf(s - m_new);
                l = l * corr + p;
#pragma unroll
                for (int d = 0; d < D; ++d) o[d] = fmaf(p, Vs[j * D + d], o[d] * corr);
                m = m_new;
            }
        }
        __syncthreads();
    }
    if (q_idx < seq) {
        float inv_l = 1.f / l;
        float* o_ptr = O + ((size_t)bh * seq + q_idx) * D;
#pragma unroll
        for (int d = 0; d < D; ++d) o_ptr[d] = o[d] * inv_l;
    }
}

torch::Tensor flash_attention(torch::Tensor q, torch::Tensor k, torch::Tensor v, double scale) {
    TORCH_CHECK(q.size(-1) == 64, "head_dim 64 only");
    c10::cuda::CUDAGuard guard(q.device());
    q = q.contiguous(); k = k.contiguous(); v = v.contiguous();
    const int B = q.size(0), H = q.size(1), S = q.size(2);
    auto o = torch::empty_like(q);
    constexpr int D = 64, BR = 64, BC = 32;
    const size_t smem = 2 * BC * D * sizeof(float);
    auto kernel = flash_attn_fwd<D, BR, BC>;
    C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid((S + BR - 1) / BR, B * H);
    kernel<<<grid, BR, smem, at::cuda::getCurrentCUDAStream()>>>(q.data_ptr<float>(), k.data_ptr<float>(),
        v.data_ptr<float>(), o.data_ptr<float>(), S, (float)scale);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return o;
}
"""

flash_cpp = "torch::Tensor flash_attention(torch::Tensor q, torch::Tensor k, torch::Tensor v, double scale);"

flash = load_inline(name="flash_attn_online_softmax", cpp_sources=flash_cpp, cuda_sources=flash_cuda,
                    functions=["flash_attention"], extra_cuda_cflags=["-O3", "--use_fast_math", "-lineinfo"])


class ModelNew(nn.Module):
    def __init__(self):
        super(ModelNew, self).__init__()

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        scale = 1.0 / math.sqrt(q.size(-1))
        # the kernel computes in float32 whatever autocast says around the model
        with torch.autocast(device_type="cuda", enabled=False):
            return flash.flash_attention(q, k, v, scale)
