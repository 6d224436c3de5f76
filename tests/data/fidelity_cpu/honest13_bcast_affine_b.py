import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# Generic broadcasting kernel: operands are expanded (stride-0 views, no copies) to the output shape and
# the kernel walks them with their own strides.
src = r"""
#include <torch/extension.h>
#include <ATen/Dispatch.h>
#include <algorithm>

template <typename T>
void fma_clamp_4d(const T* a, const T* b, const T* c, T* o,
                  const int64_t* sz, const int64_t* sa, const int64_t* sb, const int64_t* sc, T lo, T hi) {
    #pragma omp parallel for collapse(2)
    for (int64_t i0 = 0; i0 < sz[0]; ++i0)
        for (int64_t i1 = 0; i1 < sz[1]; ++i1)
            for (int64_t i2 = 0; i2 < sz[2]; ++i2)
                for (int64_t i3 = 0; i3 < sz[3]; ++i3) {
                    const T v = a[i0 * sa[0] + i1 * sa[1] + i2 * sa[2] + i3 * sa[3]] *
                                b[i0 * sb[0] + i1 * sb[1] + i2 * sb[2] + i3 * sb[3]] +
                                c[i0 * sc[0] + i1 * sc[1] + i2 * sc[2] + i3 * sc[3]];
                    o[((i0 * sz[1] + i1) * sz[2] + i2) * sz[3] + i3] = std::min(std::max(v, lo), hi);
                }
}

void broadcast_fma_clamp(torch::Tensor a, torch::Tensor b, torch::Tensor c, torch::Tensor out, double lo, double hi) {
    TORCH_CHECK(a.dim() == 4 && b.dim() == 4 && c.dim() == 4 && out.is_contiguous(), "4D operands expected");
    AT_DISPATCH_FLOATING_TYPES(out.scalar_type(), "broadcast_fma_clamp", [&] {
        fma_clamp_4d<scalar_t>(a.data_ptr<scalar_t>(), b.data_ptr<scalar_t>(), c.data_ptr<scalar_t>(),
                               out.data_ptr<scalar_t>(), out.sizes().data(), a.strides().data(),
                               b.strides().data(), c.strides().data(), (scalar_t)lo, (scalar_t)hi);
    });
}
"""

bmod = load_inline(name="broadcast_fma_clamp_strided", cpp_sources=src, functions=["broadcast_fma_clamp"],
                   extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"], verbose=False)


def _broadcast4(*ts):
    shape = torch.broadcast_shapes(*(t.shape for t in ts))
    shape = (1,) * (4 - len(shape)) + tuple(shape)
    return shape, [t.reshape((1,) * (4 - t.dim()) + tuple(t.shape)).expand(shape) for t in ts]


class ModelNew(nn.Module):
    MIN_VAL = -1.0
    MAX_VAL = 1.0

    def __init__(self):
        super().__init__()

    def forward(self, x, scale, shift):
        shape, (xa, sa, ta) = _broadcast4(x, scale, shift)
        out = torch.empty(shape, dtype=x.dtype, device=x.device)
        bmod.broadcast_fma_clamp(xa, sa, ta, out, self.MIN_VAL, self.MAX_VAL)
        return out
