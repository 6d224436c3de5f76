# task: layernorm
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>
#include <cub/cub.cuh>
#include <ATen/cuda/CUDAContext.h>

constexpr int kThreads = 1024;

// One block per sample: normalised over (features, dim1, dim2); two-pass in double for the long rows.
__global__ void ln_stats_kernel(const float* __restrict__ x, double* __restrict__ stats, long long per_sample) {
    using BlockReduce = cub::BlockReduce<double, kThreads>;
    __shared__ typename BlockReduce::TempStorage tmp;
    __shared__ double s_mean;
    const float* xs = x + (long long)blockIdx.x * per_sample;
    double sum = 0.0;
    for (long long i = threadIdx.x; i < per_sample; i += kThreads) sum += (double)xs[i];
    double total = BlockReduce(tmp).Sum(sum);
    if (threadIdx.x == 0) s_mean = total / (double)per_sample;
    __syncthreads();
    const double mean = s_mean;
    double sq = 0.0;
    for (long long i = threadIdx.x; i < per_sample; i += kThreads) {
        double d = (double)xs[i] - mean;
        sq += d * d;
    }
    double total_sq = BlockReduce(tmp).Sum(sq);
    if (threadIdx.x == 0) {
        stats[2 * blockIdx.x] = mean;
        stats[2 * blockIdx.x + 1] = total_sq / (double)per_sample;
    }
}

__global__ void ln_apply_kernel(const float* __restrict__ x, const double* __restrict__ stats,
                                const float* __restrict__ w, const float* __restrict__ b, float* __restrict__ y,
                                long long per_sample, long long total, float eps) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        long long s = i / per_sample, j = i - s * per_sample;
        float mean = (float)stats[2 * s];
        float rstd = (float)(1.0 / sqrt(stats[2 * s + 1] + (double)eps));
        y[i] = (x[i] - mean) * rstd * w[j] + b[j];
    }
}

torch::Tensor layer_norm_cuda(torch::Tensor x, torch::Tensor w, torch::Tensor b, double eps) {
    auto xc = x.contiguous();
    long long per_sample = w.numel();
    long long samples = xc.numel() / per_sample;
    auto stats = torch::empty({samples, 2}, xc.options().dtype(torch::kFloat64));
    auto y = torch::empty_like(xc);
    auto stream = at::cuda::getCurrentCUDAStream();
    ln_stats_kernel<<<samples, kThreads, 0, stream>>>(xc.data_ptr<float>(), stats.data_ptr<double>(), per_sample);
    long long total = xc.numel();
    int blocks = (int)std::min<long long>((total + 255) / 256, 132LL * 64);
    ln_apply_kernel<<<blocks, 256, 0, stream>>>(xc.data_ptr<float>(), stats.data_ptr<double>(),
                                                w.contiguous().data_ptr<float>(), b.contiguous().data_ptr<float>(),
                                                y.data_ptr<float>(), per_sample, total, (float)eps);
    return y;
}
"""

cpp_src = "torch::Tensor layer_norm_cuda(torch::Tensor x, torch::Tensor w, torch::Tensor b, double eps);"

ln_module = load_inline(name="ln_cub_two_pass", cpp_sources=cpp_src, cuda_sources=cuda_src,
                        functions=["layer_norm_cuda"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super(ModelNew, self).__init__()
        self.normalized_shape = tuple(normalized_shape)
        self.weight = nn.Parameter(torch.ones(self.normalized_shape))
        self.bias = nn.Parameter(torch.zeros(self.normalized_shape))
        self.eps = 1e-5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ln_module.layer_norm_cuda(x, self.weight, self.bias, self.eps)
