# task: conv_relu_bias
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

conv_relu_bias_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

// valid 3x3 convolution (input already padded by the caller if needed), + conv bias, relu, + extra bias per channel.
// weights for all output channels live in constant-size shared memory (OC*C*9 floats: 16*3*9 here).
__global__ void conv_relu_bias_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                      const float* __restrict__ conv_b, const float* __restrict__ extra_b,
                                      float* __restrict__ y, int N, int C, int H, int W, int OC, int KS) {
    extern __shared__ float w_s[];
    const int wcount = OC * C * KS * KS;
    for (int i = threadIdx.x; i < wcount; i += blockDim.x) w_s[i] = w[i];
    __syncthreads();
    const int OH = H - KS + 1, OW = W - KS + 1;
    const long long total = (long long)N * OC * OH * OW;
    for (long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x; idx < total;
         idx += (long long)gridDim.x * blockDim.x) {
        int ow = idx % OW;
        int oh = (idx / OW) % OH;
        int oc = (idx / ((long long)OW * OH)) % OC;
        int n = idx / ((long long)OW * OH * OC);
        float acc = conv_b[oc];
        for (int c = 0; c < C; ++c)
            for (int kh = 0; kh < KS; ++kh)
                for (int kw = 0; kw < KS; ++kw)
                    acc += x[(((size_t)n * C + c) * H + oh + kh) * W + ow + kw] * w_s[((oc * C + c) * KS + kh) * KS + kw];
        y[idx] = fmaxf(acc, 0.f) + extra_b[oc];
    }
}

torch::Tensor conv_relu_bias(torch::Tensor x, torch::Tensor w, torch::Tensor conv_b, torch::Tensor extra_b) {
    x = x.contiguous();
    const int N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
    const int OC = w.size(0), KS = w.size(2);
    auto y = torch::empty({N, OC, H - KS + 1, W - KS + 1}, x.options());
    const size_t smem = (size_t)OC * C * KS * KS * sizeof(float);
    const long long total = y.numel();
    const int blocks = (int)std::min<long long>((total + 255) / 256, 4096);
    conv_relu_bias_kernel<<<blocks, 256, smem, at::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(),
        w.contiguous().data_ptr<float>(), conv_b.data_ptr<float>(), extra_b.contiguous().data_ptr<float>(),
        y.data_ptr<float>(), N, C, H, W, OC, KS);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

fused = load_inline(
    name="conv_relu_bias_fused",
    cpp_sources="torch::Tensor conv_relu_bias(torch::Tensor x, torch::Tensor w, torch::Tensor conv_b, torch::Tensor extra_b);",
    cuda_sources=conv_relu_bias_src,
    functions=["conv_relu_bias"],
)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, bias_shape, padding: int = 0):
        super(ModelNew, self).__init__()
        self.padding = padding
        self.weight = nn.Parameter(torch.empty(out_channels, in_channels, kernel_size, kernel_size))
        self.conv_bias = nn.Parameter(torch.empty(out_channels))
        # nn.Conv2d.reset_parameters, written out
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        fan_in, _ = nn.init._calculate_fan_in_and_fan_out(self.weight)
        bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
        nn.init.uniform_(self.conv_bias, -bound, bound)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        if self.padding:
            x = F.pad(x, (self.padding,) * 4)
        return fused.conv_relu_bias(x, self.weight, self.conv_bias, self.bias.view(-1))
