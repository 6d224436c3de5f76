import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <algorithm>

// x: (N, C, H, W); scale: C values (shape (C,1,1)); shift: W values (shape (1,1,W))
torch::Tensor affine_clamp(torch::Tensor x, torch::Tensor scale, torch::Tensor shift, double lo, double hi) {
    TORCH_CHECK(x.dim() == 4, "x must be NCHW");
    TORCH_CHECK(scale.numel() == x.size(1), "scale must have C elements");
    TORCH_CHECK(shift.numel() == x.size(3), "shift must have W elements");
    auto xc = x.contiguous();
    auto sc = scale.contiguous();
    auto sh = shift.contiguous();
    const int64_t N = xc.size(0), C = xc.size(1), H = xc.size(2), W = xc.size(3);
    auto out = torch::empty(xc.sizes(), xc.options());
    const float* xp = xc.data_ptr<float>();
    const float* sp = sc.data_ptr<float>();
    const float* tp = sh.data_ptr<float>();
    float* op = out.data_ptr<float>();
    const float flo = (float)lo, fhi = (float)hi;
    at::parallel_for(0, N * C * H, 256, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            const int64_t c = (r / H) % C;
            const float s = sp[c];
            const float* xr = xp + r * W;
            float* orow = op + r * W;
            for (int64_t w = 0; w < W; ++w) {
                float v = xr[w] * s + tp[w];
                orow[w] = std::min(std::max(v, flo), fhi);
            }
        }
    });
    return out;
}
"""

affine_ext = load_inline(name="bcast_affine_clamp", cpp_sources=cpp_src, functions=["affine_clamp"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, scale, shift):
        return affine_ext.affine_clamp(x, scale, shift, -1.0, 1.0)
