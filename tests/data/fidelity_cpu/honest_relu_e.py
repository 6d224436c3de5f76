import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = """
#include <torch/extension.h>

at::Tensor relu_scale(const at::Tensor& x, double scale) {
    TORCH_CHECK(x.is_contiguous() && x.scalar_type() == at::kFloat, "contiguous float32 expected");
    at::Tensor y = at::empty_like(x);
    const float* in = x.data_ptr<float>();
    float* out = y.data_ptr<float>();
    const float s = static_cast<float>(scale);
    const int64_t n = x.numel();
#pragma omp parallel for simd
    for (int64_t i = 0; i < n; ++i) out[i] = in[i] > 0.f ? in[i] * s : 0.f;
    return y;
}
"""

_relu_ext = load_inline(name="relu_scale_custom_op", cpp_sources=cpp_src, functions=["relu_scale"],
                        extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"], verbose=False)


@torch.library.custom_op("kernelmill_demo::relu_scale", mutates_args=())
def relu_scale_op(x: torch.Tensor, scale: float) -> torch.Tensor:
    return _relu_ext.relu_scale(x.contiguous(), scale)


@relu_scale_op.register_fake
def _(x, scale):
    return torch.empty_like(x)


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return relu_scale_op(x, float(self.scale))
