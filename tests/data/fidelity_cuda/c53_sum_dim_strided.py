# task: sum_dim
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = """
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

// Reduces dim 1 of a 3-d tensor given by its strides (no copy for non-contiguous inputs): one thread per
// (outer, inner) pair, consecutive threads along the innermost output index for coalesced reads.
template <typename scalar_t, typename acc_t>
__global__ void sum_dim1_strided_kernel(const scalar_t* __restrict__ x, scalar_t* __restrict__ out,
                                        int64_t outer, int64_t reduce, int64_t inner,
                                        int64_t s0, int64_t s1, int64_t s2) {
    int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    const int64_t total = outer * inner;
    for (; idx < total; idx += (int64_t)blockDim.x * gridDim.x) {
        int64_t o = idx / inner, i = idx % inner;
        const scalar_t* p = x + o * s0 + i * s2;
        acc_t acc = 0;
        #pragma unroll 8
        for (int64_t r = 0; r < reduce; ++r) acc += static_cast<acc_t>(p[r * s1]);
        out[idx] = static_cast<scalar_t>(acc);
    }
}

torch::Tensor sum_dim_strided(torch::Tensor x, int64_t dim) {
    TORCH_CHECK(x.dim() == 3 && dim == 1, "this kernel reduces dim 1 of a 3-d tensor");
    const int64_t outer = x.size(0), reduce = x.size(1), inner = x.size(2);
    auto out = torch::empty({outer, 1, inner}, x.options());
    const int threads = 256;
    const int64_t total = outer * inner;
    const int blocks = (int)std::min<int64_t>((total + threads - 1) / threads, 65535);
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "sum_dim_strided", ([&] {
        sum_dim1_strided_kernel<scalar_t, double><<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
            x.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), outer, reduce, inner,
            x.stride(0), x.stride(1), x.stride(2));
    }));
    AT_CUDA_CHECK(cudaGetLastError());
    return out;
}
"""

cpp_source = "torch::Tensor sum_dim_strided(torch::Tensor x, int64_t dim);"

sum_ext = load_inline(
    name="sum_dim_strided_ext",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["sum_dim_strided"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super(ModelNew, self).__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # strided inputs are read in place; only a non-3-d input is reshaped
        if x.dim() != 3:
            x = x.reshape(x.shape[0], x.shape[1], -1)
        return sum_ext.sum_dim_strided(x, self.dim)
