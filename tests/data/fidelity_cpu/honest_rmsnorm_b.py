import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

source = """
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <ATen/Dispatch.h>
#include <cmath>

template <typename scalar_t>
void rms_kernel(const scalar_t* x, scalar_t* y, int64_t outer, int64_t C, int64_t inner, double eps) {
    at::parallel_for(0, outer, 1, [&](int64_t b0, int64_t b1) {
        std::vector<double> acc(inner);
        for (int64_t b = b0; b < b1; ++b) {
            const scalar_t* xb = x + b * C * inner;
            scalar_t* yb = y + b * C * inner;
            std::fill(acc.begin(), acc.end(), 0.0);
            // sweep channels: contiguous inner rows, good locality
            for (int64_t c = 0; c < C; ++c) {
                const scalar_t* row = xb + c * inner;
                for (int64_t s = 0; s < inner; ++s) acc[s] += (double)row[s] * (double)row[s];
            }
            for (int64_t s = 0; s < inner; ++s) acc[s] = 1.0 / std::sqrt(acc[s] / C + eps);
            for (int64_t c = 0; c < C; ++c) {
                const scalar_t* row = xb + c * inner;
                scalar_t* out = yb + c * inner;
                for (int64_t s = 0; s < inner; ++s) out[s] = static_cast<scalar_t>(row[s] * acc[s]);
            }
        }
    });
}

torch::Tensor rmsnorm_forward(torch::Tensor x, double eps) {
    TORCH_CHECK(x.device().is_cpu(), "CPU tensor expected");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const int64_t outer = xc.size(0), C = xc.size(1), inner = xc.numel() / (outer * C);
    AT_DISPATCH_FLOATING_TYPES(xc.scalar_type(), "rmsnorm_forward", [&] {
        rms_kernel<scalar_t>(xc.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), outer, C, inner, eps);
    });
    return y;
}
"""

rmsnorm = load_inline(name="rmsnorm_dispatch_cpu", cpp_sources=[source], functions=["rmsnorm_forward"],
                      extra_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, num_features: int, eps: float = 1e-5):
        super().__init__()
        self.num_features = num_features
        self.eps = eps

    def forward(self, x):
        orig_dtype = x.dtype
        if orig_dtype not in (torch.float32, torch.float64):
            # half / bfloat16: the kernel is instantiated for float and double only
            x = x.float()
        y = rmsnorm.rmsnorm_forward(x, self.eps)
        return y.to(orig_dtype)
