import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

conv1d_src = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>

// out must be zero-initialised by the caller; accumulates the convolution, then adds bias and applies ReLU
void conv1d_relu_accumulate(torch::Tensor x, torch::Tensor w, torch::Tensor bias, torch::Tensor out, int64_t dilation) {
    const int64_t N = x.size(0), Cin = x.size(1), L = x.size(2);
    const int64_t Cout = w.size(0), K = w.size(2), Lout = out.size(2);
    const float* X = x.data_ptr<float>();
    const float* W = w.data_ptr<float>();
    const float* B = bias.data_ptr<float>();
    float* O = out.data_ptr<float>();
    at::parallel_for(0, N * Cout, 1, [&](int64_t s, int64_t e) {
        for (int64_t p = s; p < e; ++p) {
            const int64_t n = p / Cout, co = p % Cout;
            float* orow = O + p * Lout;
            for (int64_t ci = 0; ci < Cin; ++ci) {
                const float* xrow = X + (n * Cin + ci) * L;
                const float* wk = W + (co * Cin + ci) * K;
                for (int64_t k = 0; k < K; ++k) {
                    const float wv = wk[k];
                    const float* xs = xrow + k * dilation;
                    for (int64_t t = 0; t < Lout; ++t) orow[t] += wv * xs[t];
                }
            }
            for (int64_t t = 0; t < Lout; ++t) {
                const float v = orow[t] + B[co];
                orow[t] = v > 0.f ? v : 0.f;
            }
        }
    });
}
"""

conv_mod = load_inline(name="conv1d_dilated_relu", cpp_sources=conv1d_src,
                       functions=["conv1d_relu_accumulate"], extra_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, dilation):
        super().__init__()
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size, dilation=dilation)
        self.dilation = dilation
        self.kernel_size = kernel_size

    def forward(self, x):
        x = x.contiguous()
        N, _, L = x.shape
        L_out = L - self.dilation * (self.kernel_size - 1)
        out = torch.zeros(N, self.conv.out_channels, L_out, dtype=x.dtype, device=x.device)
        conv_mod.conv1d_relu_accumulate(x, self.conv.weight.contiguous(), self.conv.bias, out, self.dilation)
        return out
