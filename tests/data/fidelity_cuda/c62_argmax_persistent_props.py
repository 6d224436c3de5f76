# task: argmax_dim
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

argmax_cuda = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAStream.h>

// argmax over dim 1 of (B, R, I): a warp per 32 consecutive inner indices, blocks persistent over (b, inner tile)
__global__ void argmax_dim1_kernel(const float* __restrict__ x, int64_t* __restrict__ out, int B, int R, int I) {
    const int lane = threadIdx.x & 31;
    const int warp_global = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int warps_total = (gridDim.x * blockDim.x) >> 5;
    const int tiles_inner = (I + 31) / 32;
    for (int t = warp_global; t < B * tiles_inner; t += warps_total) {
        const int b = t / tiles_inner;
        const int i = (t % tiles_inner) * 32 + lane;
        if (i >= I) continue;
        const float* p = x + (size_t)b * R * I + i;
        float best = p[0];
        int best_r = 0;
        for (int r = 1; r < R; ++r) {
            float v = p[(size_t)r * I];
            if (v > best || (isnan(v) && !isnan(best))) { best = v; best_r = r; }
        }
        out[(size_t)b * I + i] = best_r;
    }
}

torch::Tensor argmax_dim1(torch::Tensor x) {
    TORCH_CHECK(x.dim() == 3, "3-d input");
    x = x.contiguous();
    const int B = x.size(0), R = x.size(1), I = x.size(2);
    auto out = torch::empty({B, I}, x.options().dtype(torch::kLong));
    cudaDeviceProp* prop = at::cuda::getCurrentDeviceProperties();
    const int blocks = prop->multiProcessorCount * (prop->maxThreadsPerMultiProcessor / 256);
    c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream();
    argmax_dim1_kernel<<<blocks, 256, 0, stream.stream()>>>(x.data_ptr<float>(), out.data_ptr<int64_t>(), B, R, I);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

argmax_mod = load_inline(name="argmax_persistent", cpp_sources="torch::Tensor argmax_dim1(torch::Tensor x);",
                         cuda_sources=argmax_cuda, functions=["argmax_dim1"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        if dim != 1:
            raise ValueError("this kernel reduces dim 1")
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return argmax_mod.argmax_dim1(x)
