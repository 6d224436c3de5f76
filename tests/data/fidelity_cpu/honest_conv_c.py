import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

# Direct 3x3 convolution, output-channel-blocked; padding applied by the kernel (no padded copy of the input).
source = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>

torch::Tensor conv2d_forward(torch::Tensor input, torch::Tensor weight, c10::optional<torch::Tensor> bias,
                             int64_t stride, int64_t padding) {
    TORCH_CHECK(input.scalar_type() == at::kFloat, "float32 only");
    auto x = input.contiguous();
    auto w = weight.contiguous();
    const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
    const int64_t O = w.size(0), KH = w.size(2), KW = w.size(3);
    const int64_t OH = (H + 2 * padding - KH) / stride + 1;
    const int64_t OW = (W + 2 * padding - KW) / stride + 1;
    auto y = at::empty({N, O, OH, OW}, x.options());
    auto xa = x.accessor<float, 4>();
    auto wa = w.accessor<float, 4>();
    auto ya = y.accessor<float, 4>();
    const bool has_bias = bias.has_value() && bias->defined();
    const float* bp = has_bias ? bias->data_ptr<float>() : nullptr;
    at::parallel_for(0, N * O, 1, [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) {
            const int64_t n = t / O, o = t % O;
            const float b = has_bias ? bp[o] : 0.f;
            for (int64_t oh = 0; oh < OH; ++oh)
                for (int64_t ow = 0; ow < OW; ++ow) ya[n][o][oh][ow] = b;
            for (int64_t c = 0; c < C; ++c)
                for (int64_t kh = 0; kh < KH; ++kh)
                    for (int64_t kw = 0; kw < KW; ++kw) {
                        const float wv = wa[o][c][kh][kw];
                        for (int64_t oh = 0; oh < OH; ++oh) {
                            const int64_t ih = oh * stride - padding + kh;
                            if (ih < 0 || ih >= H) continue;
                            for (int64_t ow = 0; ow < OW; ++ow) {
                                const int64_t iw = ow * stride - padding + kw;
                                if (iw < 0 || iw >= W) continue;
                                ya[n][o][oh][ow] += wv * xa[n][c][ih][iw];
                            }
                        }
                    }
        }
    });
    return y;
}
"""

conv_module = load_inline(name="conv2d_direct_optbias", cpp_sources=source, functions=["conv2d_forward"],
                          extra_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        conv = self.conv
        return conv_module.conv2d_forward(x, conv.weight, conv.bias, conv.stride[0], conv.padding[0])
