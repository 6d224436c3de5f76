# task: cumsum
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

scan_src = r"""
#include <torch/extension.h>
#include <cub/block/block_scan.cuh>
#include <cub/block/block_load.cuh>
#include <cub/block/block_store.cuh>
#include <ATen/cuda/CUDAContext.h>

template <int THREADS, int ITEMS>
__global__ void row_cumsum_kernel(const float* __restrict__ x, float* __restrict__ y, int cols) {
    using BlockLoad = cub::BlockLoad<float, THREADS, ITEMS, cub::BLOCK_LOAD_TRANSPOSE>;
    using BlockStore = cub::BlockStore<float, THREADS, ITEMS, cub::BLOCK_STORE_TRANSPOSE>;
    using BlockScan = cub::BlockScan<float, THREADS>;
    __shared__ union {
        typename BlockLoad::TempStorage load;
        typename BlockStore::TempStorage store;
        typename BlockScan::TempStorage scan;
    } tmp;
    const float* xr = x + (size_t)blockIdx.x * cols;
    float* yr = y + (size_t)blockIdx.x * cols;
    float carry = 0.f;
    constexpr int TILE = THREADS * ITEMS;
    for (int base = 0; base < cols; base += TILE) {
        float items[ITEMS];
        int valid = min(TILE, cols - base);
        BlockLoad(tmp.load).Load(xr + base, items, valid, 0.f);
        __syncthreads();
        float tile_total;
        BlockScan(tmp.scan).InclusiveSum(items, items, tile_total);
        __syncthreads();
        #pragma unroll
        for (int i = 0; i < ITEMS; ++i) items[i] += carry;
        BlockStore(tmp.store).Store(yr + base, items, valid);
        __syncthreads();
        carry += tile_total;
    }
}

torch::Tensor cumsum_rows(torch::Tensor x) {
    TORCH_CHECK(x.dim() == 2 && x.is_contiguous(), "expects a contiguous 2D tensor, scanned along dim 1");
    auto y = torch::empty_like(x);
    row_cumsum_kernel<256, 8><<<x.size(0), 256, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), y.data_ptr<float>(), (int)x.size(1));
    return y;
}
"""

cumsum_ext = load_inline(name="cumsum_cub_rows", cpp_sources="torch::Tensor cumsum_rows(torch::Tensor x);",
                         cuda_sources=scan_src, functions=["cumsum_rows"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super(ModelNew, self).__init__()
        self.dim = dim

    def forward(self, x):
        if self.dim not in (1, -1) or x.dim() != 2:
            raise NotImplementedError("ModelNew only implements cumsum along dim 1 of a 2D tensor")
        return cumsum_ext.cumsum_rows(x.contiguous())
