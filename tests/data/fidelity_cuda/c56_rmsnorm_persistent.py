# task: rmsnorm
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

rms_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

// x: (B, C, S) with S = H*W contiguous; normalise over C for every (b, s).
// Persistent kernel: a grid of (SMs x blocks-per-SM) blocks takes 32-column tiles from a global counter.
__global__ void __launch_bounds__(256, 2) rmsnorm_persistent(const float* __restrict__ x, float* __restrict__ y,
                                                             unsigned int* __restrict__ tile_counter,
                                                             int B, int C, int S, float eps) {
    __shared__ float partial[8][32];
    __shared__ int tile_s;
    const int tx = threadIdx.x & 31;   // column within the tile
    const int ty = threadIdx.x >> 5;   // channel phase
    const int tiles_per_batch = (S + 31) / 32;
    const int total_tiles = B * tiles_per_batch;
    while (true) {
        if (threadIdx.x == 0) tile_s = (int)atomicAdd(tile_counter, 1u);
        __syncthreads();
        const int tile = tile_s;
        if (tile >= total_tiles) break;
        const int b = tile / tiles_per_batch;
        const int s = (tile % tiles_per_batch) * 32 + tx;
        const float* xb = x + (size_t)b * C * S;
        float* yb = y + (size_t)b * C * S;
        float ss = 0.f;
        if (s < S)
            for (int c = ty; c < C; c += 8) { float v = xb[(size_t)c * S + s]; ss += v * v; }
        partial[ty][tx] = ss;
        __syncthreads();
        if (ty == 0) {
            float t = 0.f;
#pragma unroll
            for (int k = 0; k < 8; ++k) t += partial[k][tx];
            partial[0][tx] = rsqrtf(t / C + eps);
        }
        __syncthreads();
        const float inv = partial[0][tx];
        if (s < S)
            for (int c = ty; c < C; c += 8) yb[(size_t)c * S + s] = xb[(size_t)c * S + s] * inv;
        __syncthreads();
    }
}

torch::Tensor rmsnorm_fwd(torch::Tensor x, double eps) {
    x = x.contiguous();
    const int B = x.size(0), C = x.size(1);
    const int S = x.numel() / ((int64_t)B * C);
    auto y = torch::empty_like(x);
    auto counter = torch::zeros({1}, x.options().dtype(torch::kInt32));
    const auto* props = at::cuda::getCurrentDeviceProperties();
    int per_sm = 0;
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, rmsnorm_persistent, 256, 0);
    const int grid = props->multiProcessorCount * std::max(per_sm, 1);
    rmsnorm_persistent<<<grid, 256, 0, at::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), y.data_ptr<float>(),
        reinterpret_cast<unsigned int*>(counter.data_ptr<int>()), B, C, S, (float)eps);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

rms = load_inline(name="rmsnorm_persistent_ext", cpp_sources="torch::Tensor rmsnorm_fwd(torch::Tensor x, double eps);",
                  cuda_sources=rms_src, functions=["rmsnorm_fwd"], extra_cuda_cflags=["-O3"])


class ModelNew(nn.Module):
    def __init__(self, num_features: int, eps: float = 1e-5):
        super(ModelNew, self).__init__()
        self.num_features = num_features
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        assert x.size(1) == self.num_features
        return rms.rmsnorm_fwd(x, self.eps)
