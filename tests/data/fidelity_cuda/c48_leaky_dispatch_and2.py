# task: leaky_relu
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_code = r"""
#include <torch/extension.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAException.h>

template <typename scalar_t>
__global__ void leaky_relu_kernel(const scalar_t* __restrict__ in, scalar_t* __restrict__ out, int64_t n,
                                  at::opmath_type<scalar_t> slope) {
    using opmath_t = at::opmath_type<scalar_t>;
    for (int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)blockDim.x * gridDim.x) {
        opmath_t v = static_cast<opmath_t>(in[i]);
        out[i] = static_cast<scalar_t>(v > opmath_t(0) ? v : v * slope);
    }
}

at::Tensor leaky_relu_cuda(const at::Tensor& x, double negative_slope) {
    TORCH_CHECK(x.device().is_cuda(), "expected a CUDA tensor");
    at::cuda::CUDAGuard guard(x.device());
    at::Tensor input = x.contiguous();
    at::Tensor output = at::empty_like(input);
    const int64_t n = input.numel();
    if (n == 0) return output;
    const int threads = 512;
    const int blocks = static_cast<int>(std::min<int64_t>((n + threads - 1) / threads, 4096));
    cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), "leaky_relu_cuda", [&] {
        leaky_relu_kernel<scalar_t><<<blocks, threads, 0, stream>>>(
            input.const_data_ptr<scalar_t>(), output.mutable_data_ptr<scalar_t>(), n,
            static_cast<at::opmath_type<scalar_t>>(negative_slope));
        C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
    return output;
}
"""

cpp_code = "at::Tensor leaky_relu_cuda(const at::Tensor& x, double negative_slope);"

leaky = load_inline(name="leaky_relu_and2", cpp_sources=cpp_code, cuda_sources=cuda_code,
                    functions=["leaky_relu_cuda"], extra_cuda_cflags=["-O3", "--use_fast_math"])


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float = 0.01):
        super(ModelNew, self).__init__()
        self.negative_slope = float(negative_slope)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return leaky.leaky_relu_cuda(x, self.negative_slope)
