# task: conv_relu_bias
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

conv_relu_bias_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

// direct 3x3 valid convolution, fused + conv bias, ReLU, + per-channel bias
__global__ void conv3x3_relu_bias_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                         const float* __restrict__ conv_b, const float* __restrict__ extra_b,
                                         float* __restrict__ y, int N, int C, int H, int W, int K) {
    const int OH = H - 2, OW = W - 2;
    long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    long long total = (long long)N * K * OH * OW;
    if (idx >= total) return;
    int ox = idx % OW;
    int oy = (idx / OW) % OH;
    int k = (idx / ((long long)OW * OH)) % K;
    int n = idx / ((long long)OW * OH * K);
    float acc = conv_b[k];
    for (int c = 0; c < C; ++c) {
        const float* xp = x + (((long long)n * C + c) * H + oy) * W + ox;
        const float* wp = w + ((long long)k * C + c) * 9;
        #pragma unroll
        for (int ky = 0; ky < 3; ++ky)
            #pragma unroll
            for (int kx = 0; kx < 3; ++kx) acc += xp[ky * W + kx] * wp[ky * 3 + kx];
    }
    y[idx] = fmaxf(acc, 0.f) + extra_b[k];
}

torch::Tensor conv_relu_bias(torch::Tensor x, torch::Tensor w, torch::Tensor conv_b, torch::Tensor extra_b) {
    const int N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3), K = w.size(0);
    auto y = torch::empty({N, K, H - 2, W - 2}, x.options());
    long long total = y.numel();
    conv3x3_relu_bias_kernel<<<(total + 255) / 256, 256, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), w.data_ptr<float>(), conv_b.data_ptr<float>(), extra_b.data_ptr<float>(),
        y.data_ptr<float>(), N, C, H, W, K);
    return y;
}
"""

_ops = load_inline(
    name="conv_relu_bias_fused",
    cpp_sources="torch::Tensor conv_relu_bias(torch::Tensor x, torch::Tensor w, torch::Tensor conv_b, torch::Tensor extra_b);",
    cuda_sources=conv_relu_bias_src,
    functions=["conv_relu_bias"],
    verbose=False,
)


class FusedConvReLUBias(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, bias_shape):
        super().__init__()
        assert kernel_size == 3
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        return _ops.conv_relu_bias(x.contiguous(), self.conv.weight.contiguous(), self.conv.bias,
                                   self.bias.reshape(-1).contiguous())


ModelNew = FusedConvReLUBias
