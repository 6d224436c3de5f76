import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

# "valid" (no padding) direct conv kernel; the zero padding is done on the Python side with F.pad (a copy).
conv_src = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>

torch::Tensor conv2d_valid(const torch::Tensor& xp, const torch::Tensor& w, const torch::Tensor& b) {
    TORCH_CHECK(xp.is_contiguous() && w.is_contiguous(), "contiguous inputs expected");
    const int64_t N = xp.size(0), C = xp.size(1), Hp = xp.size(2), Wp = xp.size(3);
    const int64_t O = w.size(0), KH = w.size(2), KW = w.size(3);
    const int64_t OH = Hp - KH + 1, OW = Wp - KW + 1;
    auto y = torch::empty({N, O, OH, OW}, xp.options());
    const float* X = xp.data_ptr<float>();
    const float* Wt = w.data_ptr<float>();
    const float* Bs = b.data_ptr<float>();
    float* Y = y.data_ptr<float>();
    at::parallel_for(0, N * O * OH, 4, [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) {
            const int64_t oh = t % OH, o = (t / OH) % O, n = t / (OH * O);
            float* yrow = Y + ((n * O + o) * OH + oh) * OW;
            for (int64_t ow = 0; ow < OW; ++ow) yrow[ow] = Bs[o];
            for (int64_t c = 0; c < C; ++c)
                for (int64_t kh = 0; kh < KH; ++kh) {
                    const float* xrow = X + ((n * C + c) * Hp + oh + kh) * Wp;
                    const float* wrow = Wt + ((o * C + c) * KH + kh) * KW;
                    for (int64_t kw = 0; kw < KW; ++kw) {
                        const float wv = wrow[kw];
                        for (int64_t ow = 0; ow < OW; ++ow) yrow[ow] += wv * xrow[ow + kw];
                    }
                }
        }
    });
    return y;
}
"""

conv_valid = load_inline(name="conv2d_valid_fpad", cpp_sources=conv_src, functions=["conv2d_valid"],
                         extra_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=1)
        self.pad = 1

    def forward(self, x):
        x_padded = F.pad(x, (self.pad, self.pad, self.pad, self.pad), mode="constant", value=0.0).contiguous()
        return conv_valid.conv2d_valid(x_padded, self.conv.weight.contiguous(), self.conv.bias)
