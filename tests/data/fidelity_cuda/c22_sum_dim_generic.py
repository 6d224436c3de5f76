# task: sum_dim
import math

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

reduce_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

// x viewed as (outer, R, inner): out[o, i] = sum_r x[o, r, i]; threads run along inner (coalesced)
template <typename scalar_t>
__global__ void sum_mid_kernel(const scalar_t* __restrict__ x, scalar_t* __restrict__ out,
                               int64_t outer, int64_t R, int64_t inner) {
    int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (idx >= outer * inner) return;
    int64_t o = idx / inner, i = idx % inner;
    const scalar_t* p = x + o * R * inner + i;
    float acc = 0.f;
    for (int64_t r = 0; r < R; ++r) acc += static_cast<float>(p[r * inner]);
    out[idx] = static_cast<scalar_t>(acc);
}

torch::Tensor sum_mid(torch::Tensor x, int64_t outer, int64_t R, int64_t inner) {
    auto out = torch::empty({outer * inner}, x.options());
    const int threads = 256;
    const int64_t blocks = (outer * inner + threads - 1) / threads;
    AT_DISPATCH_FLOATING_TYPES_AND2(at::ScalarType::Half, at::ScalarType::BFloat16, x.scalar_type(), "sum_mid", [&] {
        sum_mid_kernel<scalar_t><<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
            x.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), outer, R, inner);
    });
    return out;
}
"""

reduce_ext = load_inline(name="sum_mid_reduce", cpp_sources="torch::Tensor sum_mid(torch::Tensor x, int64_t outer, int64_t R, int64_t inner);",
                         cuda_sources=reduce_src, functions=["sum_mid"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super(ModelNew, self).__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        dim = self.dim % x.dim()
        outer = math.prod(x.shape[:dim])
        inner = math.prod(x.shape[dim + 1:])
        out = reduce_ext.sum_mid(x, outer, x.shape[dim], inner)
        out_shape = list(x.shape)
        out_shape[dim] = 1
        return out.view(out_shape)
