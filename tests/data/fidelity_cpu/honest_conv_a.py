import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

conv_cpp = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <vector>

// im2col + GEMM conv2d (stride 1, symmetric zero padding), NCHW, fp32
torch::Tensor conv2d_im2col(torch::Tensor input, torch::Tensor weight, torch::Tensor bias, int64_t pad) {
    TORCH_CHECK(input.dim() == 4 && weight.dim() == 4, "expected NCHW input and OIHW weight");
    input = input.contiguous();
    weight = weight.contiguous();
    const int64_t N = input.size(0), C = input.size(1), H = input.size(2), W = input.size(3);
    const int64_t O = weight.size(0), KH = weight.size(2), KW = weight.size(3);
    const int64_t OH = H + 2 * pad - KH + 1, OW = W + 2 * pad - KW + 1;
    const int64_t Kdim = C * KH * KW, P = OH * OW;
    auto out = torch::empty({N, O, OH, OW}, input.options());
    const float* in = input.data_ptr<float>();
    const float* wt = weight.data_ptr<float>();
    const float* bs = bias.data_ptr<float>();
    float* op = out.data_ptr<float>();

    at::parallel_for(0, N, 1, [&](int64_t n0, int64_t n1) {
        std::vector<float> col(Kdim * P);
        for (int64_t n = n0; n < n1; ++n) {
            const float* img = in + n * C * H * W;
            // im2col: col[(c*KH+kh)*KW+kw][oh*OW+ow]
            for (int64_t c = 0; c < C; ++c)
                for (int64_t kh = 0; kh < KH; ++kh)
                    for (int64_t kw = 0; kw < KW; ++kw) {
                        float* crow = col.data() + ((c * KH + kh) * KW + kw) * P;
                        for (int64_t oh = 0; oh < OH; ++oh) {
                            const int64_t ih = oh + kh - pad;
                            for (int64_t ow = 0; ow < OW; ++ow) {
                                const int64_t iw = ow + kw - pad;
                                crow[oh * OW + ow] = (ih >= 0 && ih < H && iw >= 0 && iw < W)
                                    ? img[(c * H + ih) * W + iw] : 0.f;
                            }
                        }
                    }
            // GEMM: out[o][p] = bias[o] + sum_k W[o][k] * col[k][p]
            float* dst = op + n * O * P;
            for (int64_t o = 0; o < O; ++o) {
                float* drow = dst + o * P;
                for (int64_t p = 0; p < P; ++p) drow[p] = bs[o];
                const float* wrow = wt + o * Kdim;
                for (int64_t k = 0; k < Kdim; ++k) {
                    const float wv = wrow[k];
                    const float* crow = col.data() + k * P;
                    for (int64_t p = 0; p < P; ++p) drow[p] += wv * crow[p];
                }
            }
        }
    });
    return out;
}
"""

conv_ext = load_inline(
    name="conv2d_im2col_cpu",
    cpp_sources=conv_cpp,
    functions=["conv2d_im2col"],
    extra_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=1)
        self.weight = nn.Parameter(conv.weight.data.clone())
        self.bias = nn.Parameter(conv.bias.data.clone())
        self.padding = 1

    def forward(self, x):
        return conv_ext.conv2d_im2col(x, self.weight, self.bias, self.padding)
