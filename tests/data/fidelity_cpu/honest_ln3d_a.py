import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

ln_src = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <cmath>

// LayerNorm over the trailing `norm_numel` elements of each sample (Welford in double)
torch::Tensor layer_norm_nd(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps) {
    const int64_t norm_numel = weight.numel();
    TORCH_CHECK(x.numel() % norm_numel == 0, "normalized_shape does not divide input");
    auto xc = x.contiguous();
    auto wc = weight.contiguous();
    auto bc = bias.contiguous();
    const int64_t rows = xc.numel() / norm_numel;
    auto y = torch::empty_like(xc);
    const float* X = xc.data_ptr<float>();
    const float* Wt = wc.data_ptr<float>();
    const float* Bs = bc.data_ptr<float>();
    float* Y = y.data_ptr<float>();
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = X + r * norm_numel;
        float* yr = Y + r * norm_numel;
        // parallel Welford: each chunk keeps (count, mean, M2); merged serially
        const int64_t nchunks = 64;
        std::vector<double> cnt(nchunks, 0), mu(nchunks, 0), m2(nchunks, 0);
        const int64_t chunk = (norm_numel + nchunks - 1) / nchunks;
        at::parallel_for(0, nchunks, 1, [&](int64_t c0, int64_t c1) {
            for (int64_t c = c0; c < c1; ++c) {
                const int64_t s = c * chunk, e = std::min(norm_numel, s + chunk);
                double n = 0, m = 0, q = 0;
                for (int64_t i = s; i < e; ++i) {
                    n += 1;
                    const double d = xr[i] - m;
                    m += d / n;
                    q += d * (xr[i] - m);
                }
                cnt[c] = n; mu[c] = m; m2[c] = q;
            }
        });
        double n = 0, mean = 0, M2 = 0;
        for (int64_t c = 0; c < nchunks; ++c) {
            if (cnt[c] == 0) continue;
            const double nn_ = n + cnt[c];
            const double d = mu[c] - mean;
            mean += d * cnt[c] / nn_;
            M2 += m2[c] + d * d * n * cnt[c] / nn_;
            n = nn_;
        }
        const float rstd = (float)(1.0 / std::sqrt(M2 / n + eps));
        const float fmean = (float)mean;
        at::parallel_for(0, norm_numel, 4096, [&](int64_t s, int64_t e) {
            for (int64_t i = s; i < e; ++i) yr[i] = (xr[i] - fmean) * rstd * Wt[i] + Bs[i];
        });
    }
    return y;
}
"""

ln_ext = load_inline(name="layer_norm_nd_welford", cpp_sources=ln_src, functions=["layer_norm_nd"],
                     extra_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.normalized_shape = tuple(normalized_shape)
        self.weight = nn.Parameter(torch.ones(self.normalized_shape))
        self.bias = nn.Parameter(torch.zeros(self.normalized_shape))
        self.eps = 1e-5

    def forward(self, x):
        return ln_ext.layer_norm_nd(x, self.weight, self.bias, self.eps)
