# task: relu
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAException.h>

__global__ void relu_vec4_kernel(const float4* __restrict__ in, float4* __restrict__ out, int64_t n4) {
    int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = idx; i < n4; i += stride) {
        float4 v = in[i];
        v.x = fmaxf(v.x, 0.f);
        v.y = fmaxf(v.y, 0.f);
        v.z = fmaxf(v.z, 0.f);
        v.w = fmaxf(v.w, 0.f);
        out[i] = v;
    }
}

__global__ void relu_tail_kernel(const float* __restrict__ in, float* __restrict__ out, int64_t start, int64_t n) {
    int64_t i = start + blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) out[i] = fmaxf(in[i], 0.f);
}

torch::Tensor relu_cuda(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "x must be float32");
    auto xc = x.contiguous();
    auto out = torch::empty_like(xc);
    int64_t n = xc.numel();
    int64_t n4 = n / 4;
    const int threads = 256;
    if (n4 > 0) {
        int blocks = (int)std::min<int64_t>((n4 + threads - 1) / threads, 65535 * 8);
        relu_vec4_kernel<<<blocks, threads>>>(reinterpret_cast<const float4*>(xc.data_ptr<float>()),
                                              reinterpret_cast<float4*>(out.data_ptr<float>()), n4);
    }
    int64_t tail = n - n4 * 4;
    if (tail > 0) {
        relu_tail_kernel<<<1, threads>>>(xc.data_ptr<float>(), out.data_ptr<float>(), n4 * 4, n);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

cpp_source = "torch::Tensor relu_cuda(torch::Tensor x);"

relu_ext = load_inline(
    name="relu_ext_vec4",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["relu_cuda"],
    verbose=False,
    extra_cuda_cflags=["-O3", "--use_fast_math"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super(ModelNew, self).__init__()
        self.relu_ext = relu_ext

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu_ext.relu_cuda(x)
