# task: gelu
import functools

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

GELU_SRC = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__device__ __forceinline__ float gelu_erf(float x) {
    return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f));
}

__global__ void gelu_vec4_kernel(const float4* __restrict__ in, float4* __restrict__ out, int64_t n4) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += (int64_t)gridDim.x * blockDim.x) {
        float4 v = in[i];
        out[i] = make_float4(gelu_erf(v.x), gelu_erf(v.y), gelu_erf(v.z), gelu_erf(v.w));
    }
}

__global__ void gelu_scalar_kernel(const float* __restrict__ in, float* __restrict__ out, int64_t start, int64_t n) {
    int64_t i = start + (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = gelu_erf(in[i]);
}

torch::Tensor gelu_forward(torch::Tensor x) {
    auto in = x.contiguous();
    auto out = torch::empty_like(in);
    int64_t n = in.numel();
    int64_t n4 = n >> 2;
    auto stream = at::cuda::getCurrentCUDAStream();
    if (n4) {
        int blocks = (int)std::min<int64_t>((n4 + 255) / 256, 8192);
        gelu_vec4_kernel<<<blocks, 256, 0, stream>>>(reinterpret_cast<const float4*>(in.data_ptr<float>()),
                                                     reinterpret_cast<float4*>(out.data_ptr<float>()), n4);
    }
    if (n & 3) gelu_scalar_kernel<<<1, 4, 0, stream>>>(in.data_ptr<float>(), out.data_ptr<float>(), n4 << 2, n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""


@functools.lru_cache(maxsize=1)
def _gelu_ext():
    return load_inline(
        name="gelu_cached_ext",
        cpp_sources="torch::Tensor gelu_forward(torch::Tensor x);",
        cuda_sources=GELU_SRC,
        functions=["gelu_forward"],
        extra_cuda_cflags=["-O3", "--use_fast_math"],
        verbose=False,
    )


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._ext = _gelu_ext()

    @torch.no_grad()
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._ext.gelu_forward(x)
