import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# Raw-pointer interface: Python passes data_ptr() addresses, avoiding Tensor marshalling per argument.
src = r"""
#include <torch/extension.h>
#include <cstdint>
#include <algorithm>

void affine_clamp_ptr(uintptr_t x_addr, uintptr_t scale_addr, uintptr_t shift_addr, uintptr_t out_addr,
                      int64_t N, int64_t C, int64_t H, int64_t W) {
    const float* x = reinterpret_cast<const float*>(x_addr);
    const float* sc = reinterpret_cast<const float*>(scale_addr);
    const float* sh = reinterpret_cast<const float*>(shift_addr);
    float* out = reinterpret_cast<float*>(out_addr);
    #pragma omp parallel for collapse(2)
    for (int64_t n = 0; n < N; ++n)
        for (int64_t c = 0; c < C; ++c)
            for (int64_t h = 0; h < H; ++h) {
                const int64_t base = ((n * C + c) * H + h) * W;
                for (int64_t w = 0; w < W; ++w)
                    out[base + w] = std::min(1.0f, std::max(-1.0f, x[base + w] * sc[c] + sh[w]));
            }
}
"""

ptr_ext = load_inline(name="affine_clamp_rawptr", cpp_sources=src, functions=["affine_clamp_ptr"],
                      extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, scale, shift):
        x = x.contiguous()
        scale = scale.contiguous()
        shift = shift.contiguous()
        N, C, H, W = x.shape
        out = torch.empty_like(x)
        ptr_ext.affine_clamp_ptr(x.data_ptr(), scale.data_ptr(), shift.data_ptr(), out.data_ptr(), N, C, H, W)
        return out
