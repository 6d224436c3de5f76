# task: layernorm
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

layer_norm_src = r"""
#include <torch/extension.h>
#include <cooperative_groups.h>
#include <ATen/cuda/CUDAContext.h>

namespace cg = cooperative_groups;

// normalised over the last three dims (features*dim1*dim2 = 4M elements per sample): split each sample over many
// blocks; pass 1 writes per-block (sum, sumsq) partials, pass 2 combines them in double and normalises.
__global__ void ln_partial_kernel(const float* __restrict__ x, double2* __restrict__ partials, long long per_sample,
                                  int blocks_per_sample) {
    cg::thread_block cta = cg::this_thread_block();
    cg::thread_block_tile<32> tile = cg::tiled_partition<32>(cta);
    __shared__ double2 warp_part[32];
    const int sample = blockIdx.x / blocks_per_sample;
    const int part = blockIdx.x % blocks_per_sample;
    const long long chunk = (per_sample + blocks_per_sample - 1) / blocks_per_sample;
    const long long begin = part * chunk;
    const long long end = min(per_sample, begin + chunk);
    const float* xs = x + (size_t)sample * per_sample;
    double s = 0.0, ss = 0.0;
    for (long long i = begin + cta.thread_rank(); i < end; i += cta.size()) {
        double v = xs[i];
        s += v;
        ss += v * v;
    }
    for (int o = tile.size() / 2; o > 0; o /= 2) {
        s += tile.shfl_down(s, o);
        ss += tile.shfl_down(ss, o);
    }
    if (tile.thread_rank() == 0) warp_part[tile.meta_group_rank()] = make_double2(s, ss);
    cta.sync();
    if (cta.thread_rank() == 0) {
        double2 t = make_double2(0.0, 0.0);
        for (int w = 0; w < (int)tile.meta_group_size(); ++w) { t.x += warp_part[w].x; t.y += warp_part[w].y; }
        partials[blockIdx.x] = t;
    }
}

__global__ void ln_apply_kernel(const float* __restrict__ x, const double2* __restrict__ partials,
                                const float* __restrict__ gamma, const float* __restrict__ beta, float* __restrict__ y,
                                long long per_sample, int blocks_per_sample, float eps) {
    __shared__ float s_mean, s_rstd;
    const int sample = blockIdx.y;
    if (threadIdx.x == 0) {
        double s = 0.0, ss = 0.0;
        for (int p = 0; p < blocks_per_sample; ++p) {
            s += partials[sample * blocks_per_sample + p].x;
            ss += partials[sample * blocks_per_sample + p].y;
        }
        double mean = s / per_sample;
        double var = ss / per_sample - mean * mean;
        s_mean = (float)mean;
        s_rstd = (float)(1.0 / sqrt(var + eps));
    }
    __syncthreads();
    const float* xs = x + (size_t)sample * per_sample;
    float* ys = y + (size_t)sample * per_sample;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < per_sample;
         i += (long long)gridDim.x * blockDim.x)
        ys[i] = (xs[i] - s_mean) * s_rstd * gamma[i] + beta[i];
}

torch::Tensor layer_norm_nd(torch::Tensor x, torch::Tensor gamma, torch::Tensor beta, double eps) {
    x = x.contiguous();
    const int batch = x.size(0);
    const long long per_sample = gamma.numel();
    auto y = torch::empty_like(x);
    int min_grid = 0, block = 0;
    cudaOccupancyMaxPotentialBlockSize(&min_grid, &block, ln_partial_kernel, 0, 0);
    const int blocks_per_sample = std::max(1, min_grid / std::max(batch, 1)) * 4;
    auto partials = torch::empty({(long long)batch * blocks_per_sample * 2}, x.options().dtype(torch::kFloat64));
    auto stream = at::cuda::getCurrentCUDAStream();
    ln_partial_kernel<<<batch * blocks_per_sample, block, 0, stream>>>(x.data_ptr<float>(),
        reinterpret_cast<double2*>(partials.data_ptr<double>()), per_sample, blocks_per_sample);
    dim3 grid2(256, batch);
    ln_apply_kernel<<<grid2, 256, 0, stream>>>(x.data_ptr<float>(),
        reinterpret_cast<const double2*>(partials.data_ptr<double>()), gamma.contiguous().data_ptr<float>(),
        beta.contiguous().data_ptr<float>(), y.data_ptr<float>(), per_sample, blocks_per_sample, (float)eps);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

ln_mod = load_inline(name="layernorm_nd_cg",
                     cpp_sources="torch::Tensor layer_norm_nd(torch::Tensor x, torch::Tensor gamma, torch::Tensor beta, double eps);",
                     cuda_sources=layer_norm_src, functions=["layer_norm_nd"], extra_cuda_cflags=["-O3"])


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super(ModelNew, self).__init__()
        self.normalized_shape = tuple(normalized_shape)
        self.weight = nn.Parameter(torch.ones(self.normalized_shape))
        self.bias = nn.Parameter(torch.zeros(self.normalized_shape))
        self.eps = 1e-5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ln_mod.layer_norm_nd(x, self.weight, self.bias, self.eps)
