import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# Channels-last kernel: the channel loop is innermost and contiguous, so it vectorises.
nhwc_src = r"""
#include <torch/extension.h>
#include <algorithm>

void avgpool_nhwc(const torch::Tensor& x, torch::Tensor& y, int64_t k, int64_t s, int64_t p) {
    const int64_t N = x.size(0), H = x.size(1), W = x.size(2), C = x.size(3);
    const int64_t OH = y.size(1), OW = y.size(2);
    const float* X = x.data_ptr<float>();
    float* Y = y.data_ptr<float>();
    #pragma omp parallel for collapse(2)
    for (int64_t n = 0; n < N; ++n)
        for (int64_t oh = 0; oh < OH; ++oh) {
            const int64_t hs = oh * s - p, he = std::min(hs + k, H + p);
            for (int64_t ow = 0; ow < OW; ++ow) {
                const int64_t ws = ow * s - p, we = std::min(ws + k, W + p);
                const float inv = 1.0f / (float)((he - hs) * (we - ws));
                float* yo = Y + ((n * OH + oh) * OW + ow) * C;
                for (int64_t c = 0; c < C; ++c) yo[c] = 0.f;
                for (int64_t ih = std::max<int64_t>(hs, 0); ih < std::min(he, H); ++ih)
                    for (int64_t iw = std::max<int64_t>(ws, 0); iw < std::min(we, W); ++iw) {
                        const float* xi = X + ((n * H + ih) * W + iw) * C;
                        for (int64_t c = 0; c < C; ++c) yo[c] += xi[c];
                    }
                for (int64_t c = 0; c < C; ++c) yo[c] *= inv;
            }
        }
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("avgpool_nhwc", &avgpool_nhwc, "avg pool 2d, NHWC layout",
          pybind11::arg("x"), pybind11::arg("y"), pybind11::arg("k"), pybind11::arg("s"), pybind11::arg("p"));
}
"""

_nhwc = load_inline(name="avgpool_nhwc_omp", cpp_sources=[nhwc_src],
                    extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, kernel_size, stride, padding):
        super().__init__()
        self.k, self.s, self.p = kernel_size, stride, padding

    def forward(self, x):
        N, C, H, W = x.shape
        OH = (H + 2 * self.p - self.k) // self.s + 1
        OW = (W + 2 * self.p - self.k) // self.s + 1
        x_nhwc = x.permute(0, 2, 3, 1).contiguous()
        y_nhwc = torch.empty((N, OH, OW, C), dtype=x.dtype, device=x.device)
        _nhwc.avgpool_nhwc(x_nhwc, y_nhwc, self.k, self.s, self.p)
        return y_nhwc.permute(0, 3, 1, 2).contiguous()
