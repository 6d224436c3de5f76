# task: relu
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

relu_cuda = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cstdint>

// 16-byte vector path: every thread loads and stores one float4; the scalar kernel takes what is left
__global__ void relu_vec4_kernel(const float4* __restrict__ x, float4* __restrict__ y, int64_t n4) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
        float4 v = __ldg(&x[i]);
        v.x = fmaxf(v.x, 0.f); v.y = fmaxf(v.y, 0.f); v.z = fmaxf(v.z, 0.f); v.w = fmaxf(v.w, 0.f);
        y[i] = v;
    }
}

__global__ void relu_scalar_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t begin, int64_t n) {
    const int64_t i = begin + (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = fmaxf(x[i], 0.f);
}

torch::Tensor relu_forward(torch::Tensor x, bool vectorized) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == at::kFloat, "relu_forward: float32 CUDA tensor expected");
    TORCH_CHECK(x.is_contiguous(), "relu_forward: contiguous input expected");
    const c10::cuda::CUDAGuard guard(x.device());
    auto y = torch::empty_like(x);
    const int64_t n = x.numel();
    if (n == 0) return y;
    auto stream = at::cuda::getCurrentCUDAStream();
    const int threads = 256;
    const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
    int64_t done = 0;
    if (vectorized) {
        const int64_t n4 = n / 4;
        const int blocks = (int)std::min<int64_t>((n4 + threads - 1) / threads, (int64_t)sms * 8);
        if (n4 > 0) {
            relu_vec4_kernel<<<blocks, threads, 0, stream>>>(reinterpret_cast<const float4*>(x.data_ptr<float>()),
                                                              reinterpret_cast<float4*>(y.data_ptr<float>()), n4);
        }
        done = n4 * 4;
    }
    if (done < n) {
        const int64_t rest = n - done;
        relu_scalar_kernel<<<(unsigned)((rest + threads - 1) / threads), threads, 0, stream>>>(
            x.data_ptr<float>(), y.data_ptr<float>(), done, n);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

relu_ext = load_inline(
    name="relu_custom_op_vec4",
    cpp_sources="torch::Tensor relu_forward(torch::Tensor x, bool vectorized);",
    cuda_sources=relu_cuda,
    functions=["relu_forward"],
    extra_cuda_cflags=["-O3"],
)


def _is_16b_aligned(t: torch.Tensor) -> bool:
    # the tensor's own address and its storage's: a view at an odd offset is not 16-byte aligned even when the
    # allocation is
    base = t.untyped_storage().data_ptr()
    return base % 16 == 0 and t.data_ptr() % 16 == 0 and t.storage_offset() % 4 == 0


@torch.library.custom_op("kmfast::relu", mutates_args=(), device_types="cuda")
def fast_relu(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    return relu_ext.relu_forward(x, _is_16b_aligned(x))


@fast_relu.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return fast_relu(x)
