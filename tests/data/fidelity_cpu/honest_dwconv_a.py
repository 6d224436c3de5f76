import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

dw_source = r"""
#include <torch/extension.h>
#include <omp.h>

torch::Tensor depthwise_conv2d(torch::Tensor input, torch::Tensor weight, torch::Tensor bias, int64_t padding) {
    TORCH_CHECK(input.dim() == 4 && weight.dim() == 4, "NCHW input and (C,1,KH,KW) weight expected");
    auto x = input.contiguous();
    auto w = weight.contiguous();
    const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
    const int64_t KH = w.size(2), KW = w.size(3);
    const int64_t OH = H + 2 * padding - KH + 1;
    const int64_t OW = W + 2 * padding - KW + 1;
    auto y = torch::empty({N, C, OH, OW}, x.options());
    const float* xp = x.data_ptr<float>();
    const float* wp = w.data_ptr<float>();
    const float* bp = bias.defined() ? bias.data_ptr<float>() : nullptr;
    float* yp = y.data_ptr<float>();
    #pragma omp parallel for collapse(2) schedule(static)
    for (int64_t n = 0; n < N; ++n) {
        for (int64_t c = 0; c < C; ++c) {
            const float* xin = xp + (n * C + c) * H * W;
            const float* wk = wp + c * KH * KW;
            float* yo = yp + (n * C + c) * OH * OW;
            const float b = bp ? bp[c] : 0.0f;
            for (int64_t oh = 0; oh < OH; ++oh) {
                for (int64_t ow = 0; ow < OW; ++ow) {
                    float acc = b;
                    for (int64_t kh = 0; kh < KH; ++kh) {
                        const int64_t ih = oh - padding + kh;
                        if (ih < 0 || ih >= H) continue;
                        for (int64_t kw = 0; kw < KW; ++kw) {
                            const int64_t iw = ow - padding + kw;
                            if (iw < 0 || iw >= W) continue;
                            acc += xin[ih * W + iw] * wk[kh * KW + kw];
                        }
                    }
                    yo[oh * OW + ow] = acc;
                }
            }
        }
    }
    return y;
}
"""

dwconv = load_inline(
    name="depthwise_conv2d_cpu_omp",
    cpp_sources=dw_source,
    functions=["depthwise_conv2d"],
    extra_cflags=["-O3", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, in_channels: int, kernel_size: int, padding: int = 0, bias: bool = True):
        super().__init__()
        ref = nn.Conv2d(in_channels, in_channels, kernel_size, padding=padding, groups=in_channels, bias=bias)
        self.weight = nn.Parameter(ref.weight.data.clone())
        self.bias = nn.Parameter(ref.bias.data.clone()) if bias else None
        self.padding = padding

    def forward(self, x):
        b = self.bias if self.bias is not None else torch.empty(0)
        return dwconv.depthwise_conv2d(x, self.weight, b, self.padding)
