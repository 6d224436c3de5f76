# task: cumsum
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

scan_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__device__ __forceinline__ float warp_inclusive_scan(float v) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        float n = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= o) v += n;
    }
    return v;
}

// one block per row; the row is walked in chunks of blockDim.x * 4 with a running carry; inclusive scans of each
// thread's 4 values, then of the warps, then of the block's warp totals
__global__ void __launch_bounds__(1024) row_cumsum(const float* __restrict__ x, float* __restrict__ y, int cols) {
    __shared__ float warp_tot[32];
    __shared__ float carry_sh;
    const float* xr = x + (size_t)blockIdx.x * cols;
    float* yr = y + (size_t)blockIdx.x * cols;
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    if (threadIdx.x == 0) carry_sh = 0.f;
    __syncthreads();
    for (int base = 0; base < cols; base += blockDim.x * 4) {
        const int i0 = base + threadIdx.x * 4;
        float v[4];
        if (i0 + 3 < cols) {
            float4 t = *reinterpret_cast<const float4*>(xr + i0);
            v[0] = t.x; v[1] = t.y; v[2] = t.z; v[3] = t.w;
        } else {
#pragma unroll
            for (int j = 0; j < 4; ++j) v[j] = (i0 + j < cols) ? xr[i0 + j] : 0.f;
        }
        v[1] += v[0]; v[2] += v[1]; v[3] += v[2];
        float incl = warp_inclusive_scan(v[3]);
        if (lane == 31) warp_tot[wid] = incl;
        __syncthreads();
        if (wid == 0) {
            float t = lane < nw ? warp_tot[lane] : 0.f;
            t = warp_inclusive_scan(t);
            if (lane < nw) warp_tot[lane] = t;
        }
        __syncthreads();
        const float carry = carry_sh;
        const float offset = carry + (wid ? warp_tot[wid - 1] : 0.f) + incl - v[3];
#pragma unroll
        for (int j = 0; j < 4; ++j) if (i0 + j < cols) yr[i0 + j] = v[j] + offset;
        __syncthreads();
        if (threadIdx.x == 0) carry_sh = carry + warp_tot[nw - 1];
        __syncthreads();
    }
}

torch::Tensor cumsum_rows(torch::Tensor x) {
    TORCH_CHECK(x.dim() == 2 && x.size(1) % 4 == 0, "2-D input, row length a multiple of 4");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    row_cumsum<<<xc.size(0), 1024, 0, at::cuda::getCurrentCUDAStream()>>>(xc.data_ptr<float>(), y.data_ptr<float>(),
                                                                          (int)xc.size(1));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

cumsum_ext = load_inline("cumsum_warp_scan", cpp_sources="torch::Tensor cumsum_rows(torch::Tensor x);",
                         cuda_sources=scan_src, functions=["cumsum_rows"], extra_cuda_cflags=["-O3"])


class ModelNew(nn.Module):
    def __init__(self, dim):
        super(ModelNew, self).__init__()
        self.dim = dim

    def forward(self, x):
        if self.dim not in (1, -1):
            x = x.transpose(self.dim, -1)
            return cumsum_ext.cumsum_rows(x.reshape(-1, x.size(-1))).view(x.shape).transpose(self.dim, -1)
        return cumsum_ext.cumsum_rows(x)
