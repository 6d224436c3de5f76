# task: relu
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_code = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <stdint.h>

// 128-bit streaming loads through the non-coherent path, and stores that skip L1
__device__ __forceinline__ float4 ld_nc_v4(const float4* p) {
    float4 r;
    asm volatile("ld.global.nc.L1::no_allocate.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(r.x), "=f"(r.y), "=f"(r.z), "=f"(r.w) : "l"(p));
    return r;
}

__device__ __forceinline__ void st_cs_v4(float4* p, float4 v) {
    asm volatile("st.global.cs.v4.f32 [%0], {%1, %2, %3, %4};" :: "l"(p), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w)
                 : "memory");
}

__global__ void __launch_bounds__(256, 4) relu_ptx_kernel(const float* __restrict__ in, float* __restrict__ out,
                                                          long long n) {
    long long n4 = n >> 2;
    long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long step = (long long)gridDim.x * blockDim.x;
    const float4* in4 = reinterpret_cast<const float4*>(in);
    float4* out4 = reinterpret_cast<float4*>(out);
    for (long long i = tid; i < n4; i += step) {
        float4 v = ld_nc_v4(in4 + i);
        v.x = fmaxf(v.x, 0.f); v.y = fmaxf(v.y, 0.f); v.z = fmaxf(v.z, 0.f); v.w = fmaxf(v.w, 0.f);
        st_cs_v4(out4 + i, v);
    }
    for (long long i = (n4 << 2) + tid; i < n; i += step) out[i] = fmaxf(__ldg(in + i), 0.f);
}

torch::Tensor relu_ptx(torch::Tensor input) {
    TORCH_CHECK(input.is_cuda(), "input must be on CUDA");
    TORCH_CHECK(reinterpret_cast<uintptr_t>(input.data_ptr()) % 16 == 0, "input must be 16-byte aligned");
    auto output = torch::empty_like(input);
    int dev = input.get_device();
    int sm_count = 0;
    cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, dev);
    relu_ptx_kernel<<<sm_count * 8, 256>>>(input.data_ptr<float>(), output.data_ptr<float>(), input.numel());
    cudaError_t err = cudaGetLastError();
    TORCH_CHECK(err == cudaSuccess, "relu_ptx_kernel launch failed: ", cudaGetErrorString(err));
    return output;
}
"""

module = load_inline(
    name="relu_ptx_module",
    cpp_sources=["torch::Tensor relu_ptx(torch::Tensor input);"],
    cuda_sources=[cuda_code],
    functions=["relu_ptx"],
    with_cuda=True,
    extra_cuda_cflags=["-O3", "-Xptxas", "-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return module.relu_ptx(x.contiguous())
