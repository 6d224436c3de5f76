# task: layernorm_lastdim
import functools
import operator

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

layernorm_cpp = r"""
#include <torch/extension.h>

torch::Tensor layernorm_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps);

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.doc() = "Fused LayerNorm over the last dimension (one block per row, warp-shuffle reductions)";
    m.def("layernorm_forward", &layernorm_forward, "LayerNorm forward (CUDA)",
          py::arg("x"), py::arg("weight"), py::arg("bias"), py::arg("eps") = 1e-5);
    m.attr("__version__") = "0.3.1";
    m.attr("BLOCK_THREADS") = py::int_(512);
}
"""

layernorm_cuda = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/OpMathType.h>
#include <ATen/Dispatch.h>
#include <c10/cuda/CUDAGuard.h>

constexpr int kBlockThreads = 512;
constexpr int kWarps = kBlockThreads / 32;

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffff, v, offset);
    return v;
}

template <typename T>
__device__ __forceinline__ T block_sum(T v, T* smem) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_sum(v);
    if (lane == 0) smem[warp] = v;
    __syncthreads();
    v = threadIdx.x < kWarps ? smem[lane] : T(0);
    if (warp == 0) v = warp_sum(v);
    if (threadIdx.x == 0) smem[0] = v;
    __syncthreads();
    T total = smem[0];
    __syncthreads();
    return total;
}

template <typename scalar_t>
__global__ void __launch_bounds__(kBlockThreads) layernorm_rows_kernel(
        const scalar_t* __restrict__ x, const scalar_t* __restrict__ gamma, const scalar_t* __restrict__ beta,
        scalar_t* __restrict__ y, int64_t hidden, float eps) {
    using acc_t = at::opmath_type<scalar_t>;
    __shared__ acc_t smem[kWarps];
    const scalar_t* row = x + blockIdx.x * hidden;
    scalar_t* out = y + blockIdx.x * hidden;

    acc_t sum = 0;
    for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) sum += static_cast<acc_t>(row[i]);
    const acc_t mean = block_sum(sum, smem) / static_cast<acc_t>(hidden);

    acc_t sq = 0;
    for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) {
        const acc_t d = static_cast<acc_t>(row[i]) - mean;
        sq += d * d;
    }
    const acc_t rstd = rsqrtf(block_sum(sq, smem) / static_cast<acc_t>(hidden) + eps);

    for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) {
        const acc_t v = (static_cast<acc_t>(row[i]) - mean) * rstd;
        out[i] = static_cast<scalar_t>(v * static_cast<acc_t>(gamma[i]) + static_cast<acc_t>(beta[i]));
    }
}

torch::Tensor layernorm_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps) {
    TORCH_CHECK(x.is_cuda(), "layernorm_forward: x must be a CUDA tensor");
    TORCH_CHECK(x.dim() == 2, "layernorm_forward: expected a 2D (rows, hidden) view, got ", x.dim(), "D");
    TORCH_CHECK(weight.numel() == x.size(1) && bias.numel() == x.size(1), "layernorm_forward: affine size mismatch");
    const c10::cuda::CUDAGuard device_guard(x.device());
    auto xc = x.contiguous();
    auto w = weight.contiguous();
    auto b = bias.contiguous();
    auto y = torch::empty_like(xc);
    const int64_t rows = xc.size(0), hidden = xc.size(1);
    if (rows == 0) return y;
    cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    AT_DISPATCH_FLOATING_TYPES_AND2(at::ScalarType::Half, at::ScalarType::BFloat16, xc.scalar_type(),
                                    "layernorm_rows_kernel", [&] {
        layernorm_rows_kernel<scalar_t><<<rows, kBlockThreads, 0, stream>>>(
            xc.data_ptr<scalar_t>(), w.data_ptr<scalar_t>(), b.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), hidden,
            static_cast<float>(eps));
    });
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

ln_ext = load_inline(
    name="layernorm_lastdim_pybind",
    cpp_sources=layernorm_cpp,
    cuda_sources=layernorm_cuda,
    extra_cuda_cflags=["-O3", "--use_fast_math"],
    verbose=False,
)


class ModelNew(nn.Module):
    """LayerNorm(hidden) with the affine parameters nn.LayerNorm would hold, computed by one CUDA kernel."""

    def __init__(self, hidden: int, eps: float = 1e-5):
        super().__init__()
        normalized_shape = (hidden,) if isinstance(hidden, int) else tuple(hidden)
        self.normalized_shape = normalized_shape
        self.hidden = functools.reduce(operator.mul, normalized_shape, 1)
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = operator.floordiv(x.numel(), self.hidden)
        y = ln_ext.layernorm_forward(x.reshape(rows, self.hidden), self.weight.reshape(-1), self.bias.reshape(-1),
                                     eps=self.eps)
        return y.view_as(x)
