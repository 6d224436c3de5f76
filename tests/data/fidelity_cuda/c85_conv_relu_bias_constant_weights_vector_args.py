# task: conv_relu_bias
import math
import operator

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

conv_cuda = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <vector>

// small filters (Cout * Cin * K * K <= 12K floats: 48 KiB of the 64 KiB bank, the two bias arrays 8 KiB) live in
// constant memory: every thread of a warp reads the same weight at the same time, the broadcast it is built for
constexpr int kMaxWeights = 12288;
constexpr int kMaxChannels = 1024;
__constant__ float c_weight[kMaxWeights];
__constant__ float c_bias[kMaxChannels];      // the convolution's bias
__constant__ float c_post_bias[kMaxChannels];  // added after the ReLU

template <int K>
__global__ void conv_relu_bias_kernel(const float* __restrict__ x, float* __restrict__ y, int N, int Cin, int H,
                                      int W, int Cout, int OH, int OW) {
    const int64_t total = (int64_t)N * Cout * OH * OW;
    for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < total; o += (int64_t)gridDim.x * blockDim.x) {
        const int ow = o % OW, oh = (o / OW) % OH, co = (o / ((int64_t)OW * OH)) % Cout;
        const int n = o / ((int64_t)OW * OH * Cout);
        float acc = c_bias[co];
        for (int ci = 0; ci < Cin; ++ci) {
            const float* src = x + (((int64_t)n * Cin + ci) * H + oh) * W + ow;
            const float* w = c_weight + (co * Cin + ci) * K * K;
#pragma unroll
            for (int i = 0; i < K; ++i)
#pragma unroll
                for (int j = 0; j < K; ++j) acc = fmaf(__ldg(src + i * W + j), w[i * K + j], acc);
        }
        y[o] = fmaxf(acc, 0.f) + c_post_bias[co];
    }
}

torch::Tensor conv_relu_bias_forward(const torch::Tensor& x, const std::vector<torch::Tensor>& params) {
    TORCH_CHECK(params.size() == 3, "conv_relu_bias_forward: expected [weight, conv_bias, bias]");
    const auto& weight = params[0];
    const auto& conv_bias = params[1];
    const auto& bias = params[2];
    TORCH_CHECK(x.is_cuda() && x.dim() == 4 && x.scalar_type() == at::kFloat, "x: float32 NCHW CUDA tensor expected");
    TORCH_CHECK(weight.dim() == 4 && weight.size(2) == weight.size(3), "weight: square filters expected");
    TORCH_CHECK(weight.numel() <= kMaxWeights && weight.size(0) <= kMaxChannels, "filter bank too large for constant memory");
    TORCH_CHECK(conv_bias.numel() == weight.size(0) && bias.numel() == weight.size(0), "bias sizes");
    const c10::cuda::CUDAGuard guard(x.device());
    auto stream = at::cuda::getCurrentCUDAStream();
    auto xc = x.contiguous();
    auto w = weight.contiguous();
    const int N = xc.size(0), Cin = xc.size(1), H = xc.size(2), W = xc.size(3);
    const int Cout = w.size(0), K = w.size(2);
    TORCH_CHECK(w.size(1) == Cin, "weight: in_channels mismatch");
    const int OH = H - K + 1, OW = W - K + 1;
    auto y = torch::empty({N, Cout, OH, OW}, xc.options());
    if (y.numel() == 0) return y;
    C10_CUDA_CHECK(cudaMemcpyToSymbolAsync(c_weight, w.data_ptr<float>(), w.numel() * sizeof(float), 0,
                                           cudaMemcpyDeviceToDevice, stream));
    C10_CUDA_CHECK(cudaMemcpyToSymbolAsync(c_bias, conv_bias.contiguous().data_ptr<float>(), Cout * sizeof(float), 0,
                                           cudaMemcpyDeviceToDevice, stream));
    C10_CUDA_CHECK(cudaMemcpyToSymbolAsync(c_post_bias, bias.contiguous().data_ptr<float>(), Cout * sizeof(float), 0,
                                           cudaMemcpyDeviceToDevice, stream));
    const int threads = 256;
    const int blocks = (int)std::min<int64_t>((y.numel() + threads - 1) / threads, 8192);
    switch (K) {
        case 1: conv_relu_bias_kernel<1><<<blocks, threads, 0, stream>>>(xc.data_ptr<float>(), y.data_ptr<float>(), N, Cin, H, W, Cout, OH, OW); break;
        case 3: conv_relu_bias_kernel<3><<<blocks, threads, 0, stream>>>(xc.data_ptr<float>(), y.data_ptr<float>(), N, Cin, H, W, Cout, OH, OW); break;
        case 5: conv_relu_bias_kernel<5><<<blocks, threads, 0, stream>>>(xc.data_ptr<float>(), y.data_ptr<float>(), N, Cin, H, W, Cout, OH, OW); break;
        default: TORCH_CHECK(false, "conv_relu_bias_forward: kernel_size ", K, " not compiled (1, 3, 5)");
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

conv_ext = load_inline(
    name="conv_relu_bias_constmem",
    cpp_sources="torch::Tensor conv_relu_bias_forward(const torch::Tensor& x, const std::vector<torch::Tensor>& params);",
    cuda_sources=conv_cuda,
    functions=["conv_relu_bias_forward"],
    extra_cuda_cflags=["-O3", "--use_fast_math"],
)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, bias_shape):
        super().__init__()
        # the same draws as the reference: nn.Conv2d's initialisation, then the extra bias
        conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.weight = nn.Parameter(conv.weight.detach().clone())
        self.conv_bias = nn.Parameter(conv.bias.detach().clone())
        self.bias = nn.Parameter(torch.randn(bias_shape))
        assert math.prod(bias_shape) == out_channels, "bias_shape must broadcast as (C, 1, 1)"
        self.weight_count = operator.mul(operator.mul(out_channels, in_channels), kernel_size * kernel_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return conv_ext.conv_relu_bias_forward(x, [self.weight, self.conv_bias, self.bias.reshape(-1)])
