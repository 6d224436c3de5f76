import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = """
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <c10/util/Optional.h>

torch::Tensor dwconv_forward(const torch::Tensor& x, const torch::Tensor& weight,
                             const c10::optional<torch::Tensor>& bias, int64_t stride, int64_t padding) {
    TORCH_CHECK(x.scalar_type() == at::kFloat, "float32 only");
    auto xa = x.accessor<float, 4>();
    auto wa = weight.accessor<float, 4>();
    const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
    const int64_t K = weight.size(2);
    const int64_t OH = (H + 2 * padding - K) / stride + 1;
    const int64_t OW = (W + 2 * padding - K) / stride + 1;
    auto out = torch::zeros({N, C, OH, OW}, x.options());
    auto oa = out.accessor<float, 4>();
    const bool has_bias = bias.has_value();
    at::parallel_for(0, N * C, 1, [&](int64_t begin, int64_t end) {
        for (int64_t nc = begin; nc < end; ++nc) {
            const int64_t n = nc / C, c = nc % C;
            const float bv = has_bias ? bias.value()[c].item<float>() : 0.f;
            for (int64_t oh = 0; oh < OH; ++oh)
                for (int64_t ow = 0; ow < OW; ++ow) {
                    float s = 0.f;
                    for (int64_t i = 0; i < K; ++i) {
                        const int64_t ih = oh * stride - padding + i;
                        if (ih < 0 || ih >= H) continue;
                        for (int64_t j = 0; j < K; ++j) {
                            const int64_t iw = ow * stride - padding + j;
                            if (iw < 0 || iw >= W) continue;
                            s += xa[n][c][ih][iw] * wa[c][0][i][j];
                        }
                    }
                    oa[n][c][oh][ow] = s + bv;
                }
        }
    });
    return out;
}
"""

dw = load_inline(name="dwconv_accessor_optional_bias", cpp_sources=cpp_source, functions=["dwconv_forward"],
                 extra_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_channels: int, kernel_size: int, padding: int = 0, bias: bool = True):
        super().__init__()
        # keep the reference's conv module for its parameters (same init); its forward is never called
        self.conv2d = nn.Conv2d(in_channels, in_channels, kernel_size, padding=padding, groups=in_channels, bias=bias)

    def forward(self, x):
        conv = self.conv2d
        return dw.dwconv_forward(x.contiguous(), conv.weight, conv.bias, conv.stride[0], conv.padding[0])
