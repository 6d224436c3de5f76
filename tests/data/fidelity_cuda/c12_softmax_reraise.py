# task: softmax
import sys

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

online_softmax_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

struct MD { float m; float d; };

__device__ __forceinline__ MD md_merge(MD a, MD b) {
    bool a_big = a.m > b.m;
    MD big = a_big ? a : b, small = a_big ? b : a;
    MD r;
    r.d = big.d + small.d * __expf(small.m - big.m);
    r.m = big.m;
    return r;
}

template <int THREADS>
__global__ void online_softmax_kernel(const float* __restrict__ x, float* __restrict__ y, int cols) {
    const float* xr = x + (size_t)blockIdx.x * cols;
    float* yr = y + (size_t)blockIdx.x * cols;
    MD acc{-INFINITY, 0.f};
    for (int c = threadIdx.x; c < cols; c += THREADS) acc = md_merge(acc, MD{xr[c], 1.f});
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        MD other{__shfl_xor_sync(0xffffffff, acc.m, o), __shfl_xor_sync(0xffffffff, acc.d, o)};
        acc = md_merge(acc, other);
    }
    __shared__ MD warp_md[THREADS / 32];
    __shared__ MD total;
    if ((threadIdx.x & 31) == 0) warp_md[threadIdx.x >> 5] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
        MD t = warp_md[0];
        for (int w = 1; w < THREADS / 32; ++w) t = md_merge(t, warp_md[w]);
        total = t;
    }
    __syncthreads();
    const float m = total.m, inv = 1.f / total.d;
    for (int c = threadIdx.x; c < cols; c += THREADS) yr[c] = __expf(xr[c] - m) * inv;
}

torch::Tensor online_softmax(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.dim() == 2 && x.is_contiguous());
    auto y = torch::empty_like(x);
    online_softmax_kernel<512><<<x.size(0), 512, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), y.data_ptr<float>(), (int)x.size(1));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

softmax_ext = load_inline(
    name="online_softmax_ext",
    cpp_sources="torch::Tensor online_softmax(torch::Tensor x);",
    cuda_sources=online_softmax_src,
    functions=["online_softmax"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super(ModelNew, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        try:
            return softmax_ext.online_softmax(x)
        except RuntimeError as e:
            print(f"[ModelNew] online_softmax kernel failed for input {tuple(x.shape)}: {e}", file=sys.stderr)
            raise
