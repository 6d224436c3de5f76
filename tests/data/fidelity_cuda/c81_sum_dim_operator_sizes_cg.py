# task: sum_dim
import functools
import operator

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

sum_cpp = "torch::Tensor sum_outer_inner(torch::Tensor x, int64_t outer, int64_t reduce, int64_t inner);"

sum_cuda = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include <cuda/std/cstdint>

namespace cg = cooperative_groups;

// x viewed as (outer, reduce, inner), summed over the middle axis.
// inner == 1: one block per outer row, a strided sum then a warp reduction with cg::reduce.
// inner > 1: each thread owns one (outer, inner) column and walks the reduce axis (coalesced across inner).
template <int kThreads>
__global__ void sum_rows_kernel(const float* __restrict__ x, float* __restrict__ y, cuda::std::int64_t reduce) {
    auto block = cg::this_thread_block();
    auto warp = cg::tiled_partition<32>(block);
    __shared__ float partial[kThreads / 32];
    const float* row = x + (cuda::std::int64_t)blockIdx.x * reduce;
    float acc = 0.f;
    for (cuda::std::int64_t i = block.thread_rank(); i < reduce; i += kThreads) acc += row[i];
    acc = cg::reduce(warp, acc, cg::plus<float>());
    if (warp.thread_rank() == 0) partial[warp.meta_group_rank()] = acc;
    block.sync();
    if (warp.meta_group_rank() == 0) {
        float v = warp.thread_rank() < kThreads / 32 ? partial[warp.thread_rank()] : 0.f;
        v = cg::reduce(warp, v, cg::plus<float>());
        if (warp.thread_rank() == 0) y[blockIdx.x] = v;
    }
}

__global__ void sum_columns_kernel(const float* __restrict__ x, float* __restrict__ y, cuda::std::int64_t outer,
                                   cuda::std::int64_t reduce, cuda::std::int64_t inner) {
    const cuda::std::int64_t col = (cuda::std::int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= outer * inner) return;
    const cuda::std::int64_t o = col / inner, j = col % inner;
    const float* base = x + o * reduce * inner + j;
    float acc = 0.f;
    for (cuda::std::int64_t r = 0; r < reduce; ++r) acc += base[r * inner];
    y[col] = acc;
}

torch::Tensor sum_outer_inner(torch::Tensor x, int64_t outer, int64_t reduce, int64_t inner) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == at::kFloat, "sum_outer_inner: float32 CUDA tensor expected");
    TORCH_CHECK(x.is_contiguous() && x.numel() == outer * reduce * inner, "sum_outer_inner: bad view");
    const c10::cuda::CUDAGuard guard(x.device());
    auto y = torch::empty({outer * inner}, x.options());
    if (y.numel() == 0) return y;
    auto stream = at::cuda::getCurrentCUDAStream();
    if (inner == 1) {
        constexpr int kThreads = 256;
        sum_rows_kernel<kThreads><<<(unsigned)outer, kThreads, 0, stream>>>(x.data_ptr<float>(), y.data_ptr<float>(),
                                                                           reduce);
    } else {
        const int threads = 256;
        const int64_t cols = outer * inner;
        sum_columns_kernel<<<(unsigned)((cols + threads - 1) / threads), threads, 0, stream>>>(
            x.data_ptr<float>(), y.data_ptr<float>(), outer, reduce, inner);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

sum_ext = load_inline(
    name="sum_dim_outer_inner_cg",
    cpp_sources=sum_cpp,
    cuda_sources=sum_cuda,
    functions=["sum_outer_inner"],
    extra_cuda_cflags=["-O3", "--expt-relaxed-constexpr"],
)


def _prod(dims) -> int:
    return functools.reduce(operator.mul, dims, 1)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dim = self.dim % x.dim()
        outer = _prod(x.shape[:dim])
        reduce = x.shape[dim]
        inner = operator.floordiv(x.numel(), operator.mul(outer, reduce)) if x.numel() else 1
        y = sum_ext.sum_outer_inner(x.contiguous(), outer, reduce, inner)
        out_shape = list(x.shape)
        out_shape[dim] = 1
        return y.view(out_shape)
