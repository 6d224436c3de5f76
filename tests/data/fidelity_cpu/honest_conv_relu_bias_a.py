import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

conv_relu_bias_source = r"""
#include <torch/extension.h>
#include <omp.h>
#include <algorithm>

// valid (no padding, stride 1) conv2d + conv bias, ReLU, + extra per-channel bias
torch::Tensor conv_relu_bias_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor conv_bias,
                                     torch::Tensor extra_bias) {
    x = x.contiguous(); weight = weight.contiguous();
    const int N = x.size(0), Cin = x.size(1), H = x.size(2), W = x.size(3);
    const int Cout = weight.size(0), KH = weight.size(2), KW = weight.size(3);
    const int OH = H - KH + 1, OW = W - KW + 1;
    auto out = torch::empty({N, Cout, OH, OW}, x.options());
    const float* X = x.data_ptr<float>();
    const float* Wt = weight.data_ptr<float>();
    const float* cb = conv_bias.data_ptr<float>();
    const float* eb = extra_bias.contiguous().data_ptr<float>();
    float* Y = out.data_ptr<float>();
    #pragma omp parallel for collapse(2) num_threads(2)
    for (int n = 0; n < N; ++n) {
        for (int co = 0; co < Cout; ++co) {
            float* yplane = Y + ((int64_t)n * Cout + co) * OH * OW;
            for (int i = 0; i < OH * OW; ++i) yplane[i] = cb[co];
            for (int ci = 0; ci < Cin; ++ci) {
                const float* xplane = X + ((int64_t)n * Cin + ci) * H * W;
                const float* wk = Wt + ((int64_t)co * Cin + ci) * KH * KW;
                for (int kh = 0; kh < KH; ++kh)
                    for (int kw = 0; kw < KW; ++kw) {
                        const float wv = wk[kh * KW + kw];
                        for (int oh = 0; oh < OH; ++oh) {
                            const float* xr = xplane + (oh + kh) * W + kw;
                            float* yr = yplane + oh * OW;
                            for (int ow = 0; ow < OW; ++ow) yr[ow] += wv * xr[ow];
                        }
                    }
            }
            const float b = eb[co];
            for (int i = 0; i < OH * OW; ++i) yplane[i] = std::max(yplane[i], 0.0f) + b;
        }
    }
    return out;
}
"""

conv_relu_bias = load_inline(
    name="conv_relu_bias_fused",
    cpp_sources=conv_relu_bias_source,
    functions=["conv_relu_bias_forward"],
    extra_cflags=["-O3", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, bias_shape):
        super(ModelNew, self).__init__()
        conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.conv_weight = nn.Parameter(conv.weight.detach().clone())
        self.conv_bias = nn.Parameter(conv.bias.detach().clone())
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        return conv_relu_bias.conv_relu_bias_forward(x, self.conv_weight, self.conv_bias, self.bias)
