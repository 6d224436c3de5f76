# task: gelu
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

gelu_cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/Dispatch.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda/std/array>
#include <cuda/std/type_traits>

__device__ __forceinline__ float gelu_erf(float v) { return 0.5f * v * (1.f + erff(v * 0.70710678118654752f)); }

// VEC elements per thread through one aligned vector load; the value type's float conversions by overloads
__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ float to_f(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T from_f(float v) {
    if constexpr (cuda::std::is_same_v<T, __half>) return __float2half_rn(v);
    else if constexpr (cuda::std::is_same_v<T, __nv_bfloat16>) return __float2bfloat16_rn(v);
    else return v;
}

template <typename T, int VEC>
struct alignas(sizeof(T) * VEC) Packet { cuda::std::array<T, VEC> v; };

template <typename T, int VEC>
__global__ void gelu_vec_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t n) {
    const int64_t nvec = n / VEC;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < nvec; i += stride) {
        Packet<T, VEC> p = reinterpret_cast<const Packet<T, VEC>*>(x)[i];
#pragma unroll
        for (int k = 0; k < VEC; ++k) p.v[k] = from_f<T>(gelu_erf(to_f(p.v[k])));
        reinterpret_cast<Packet<T, VEC>*>(y)[i] = p;
    }
    for (int64_t i = nvec * VEC + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        y[i] = from_f<T>(gelu_erf(to_f(x[i])));
}

template <typename T>
void launch(const torch::Tensor& x, torch::Tensor& y, cudaStream_t stream) {
    constexpr int VEC = 16 / sizeof(T);
    const int64_t n = x.numel();
    const int threads = 256;
    const int64_t blocks = std::min<int64_t>((n / VEC + threads - 1) / threads + 1, 65535);
    gelu_vec_kernel<T, VEC><<<(unsigned)blocks, threads, 0, stream>>>(
        reinterpret_cast<const T*>(x.data_ptr()), reinterpret_cast<T*>(y.data_ptr()), n);
}

torch::Tensor gelu_forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "gelu_forward: CUDA tensor expected");
    const c10::cuda::CUDAGuard guard(x.device());
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    if (xc.numel() == 0) return y;
    TORCH_CHECK(reinterpret_cast<uintptr_t>(xc.data_ptr()) % 16 == 0, "gelu_forward: 16-byte aligned input expected");
    auto stream = at::cuda::getCurrentCUDAStream().stream();
    switch (xc.scalar_type()) {
        case at::kFloat: launch<float>(xc, y, stream); break;
        case at::kHalf: launch<__half>(xc, y, stream); break;
        case at::kBFloat16: launch<__nv_bfloat16>(xc, y, stream); break;
        default: TORCH_CHECK(false, "gelu_forward: unsupported dtype ", xc.scalar_type());
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

gelu_ext = load_inline(
    name="gelu_vec_packets",
    cpp_sources=["torch::Tensor gelu_forward(torch::Tensor x);"],
    cuda_sources=[gelu_cuda_src],
    functions={"gelu_forward": "exact (erf) GELU, 16-byte packets per thread"},
    extra_cuda_cflags=["-O3", "-std=c++17", "--expt-relaxed-constexpr"],
)


@torch.compiler.allow_in_graph
def gelu_op(x: torch.Tensor) -> torch.Tensor:
    """The extension call as one opaque node when the model is compiled; in eager mode just the call."""
    return gelu_ext.gelu_forward(x)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.untyped_storage().data_ptr() % 16 or x.storage_offset() % 4:
            x = x.clone(memory_format=torch.contiguous_format)
        return gelu_op(x)
