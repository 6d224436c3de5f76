import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

maxpool_cpp = r"""
#include <torch/extension.h>
#include <omp.h>
#include <limits>
#include <algorithm>

torch::Tensor maxpool2d_forward(torch::Tensor input, int64_t kernel_size, int64_t stride, int64_t padding) {
    TORCH_CHECK(input.dim() == 4, "input must be NCHW");
    auto x = input.contiguous();
    const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
    const int64_t OH = (H + 2 * padding - kernel_size) / stride + 1;
    const int64_t OW = (W + 2 * padding - kernel_size) / stride + 1;
    auto out = torch::empty({N, C, OH, OW}, x.options());
    const float* in = x.data_ptr<float>();
    float* o = out.data_ptr<float>();
    #pragma omp parallel for collapse(2)
    for (int64_t n = 0; n < N; ++n) {
        for (int64_t c = 0; c < C; ++c) {
            const float* plane = in + (n * C + c) * H * W;
            float* oplane = o + (n * C + c) * OH * OW;
            for (int64_t oh = 0; oh < OH; ++oh) {
                const int64_t hs = oh * stride - padding;
                const int64_t h0 = std::max<int64_t>(hs, 0), h1 = std::min<int64_t>(hs + kernel_size, H);
                for (int64_t ow = 0; ow < OW; ++ow) {
                    const int64_t ws = ow * stride - padding;
                    const int64_t w0 = std::max<int64_t>(ws, 0), w1 = std::min<int64_t>(ws + kernel_size, W);
                    float m = -std::numeric_limits<float>::infinity();
                    for (int64_t h = h0; h < h1; ++h)
                        for (int64_t w = w0; w < w1; ++w) m = std::max(m, plane[h * W + w]);
                    oplane[oh * OW + ow] = m;
                }
            }
        }
    }
    return out;
}
"""

maxpool = load_inline(
    name="maxpool2d_omp_cpu",
    cpp_sources=maxpool_cpp,
    functions=["maxpool2d_forward"],
    extra_cflags=["-O3", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, kernel_size: int, stride: int, padding: int):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride
        self.padding = padding

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return maxpool.maxpool2d_forward(x, self.kernel_size, self.stride, self.padding)
