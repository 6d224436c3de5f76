import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# Registered as a PyTorch custom operator (TORCH_LIBRARY) instead of a pybind11 function.
op_src = r"""
#include <torch/extension.h>
#include <torch/library.h>
#include <cmath>

at::Tensor bn_relu_eval(const at::Tensor& x, const at::Tensor& mean, const at::Tensor& var,
                        const at::Tensor& weight, const at::Tensor& bias, double eps) {
    TORCH_CHECK(x.dim() == 4 && x.scalar_type() == at::kFloat, "float NCHW expected");
    at::Tensor xc = x.contiguous();
    at::Tensor y = at::empty_like(xc);
    const int64_t N = xc.size(0), C = xc.size(1), HW = xc.size(2) * xc.size(3);
    const float* X = xc.data_ptr<float>();
    float* Y = y.data_ptr<float>();
    const float* m = mean.data_ptr<float>();
    const float* v = var.data_ptr<float>();
    const float* g = weight.data_ptr<float>();
    const float* b = bias.data_ptr<float>();
    for (int64_t n = 0; n < N; ++n)
        for (int64_t c = 0; c < C; ++c) {
            const float inv = 1.0f / std::sqrt(v[c] + (float)eps);
            const float* xs = X + (n * C + c) * HW;
            float* ys = Y + (n * C + c) * HW;
            for (int64_t i = 0; i < HW; ++i) {
                const float t = (xs[i] - m[c]) * inv * g[c] + b[c];
                ys[i] = t > 0.f ? t : 0.f;
            }
        }
    return y;
}

TORCH_LIBRARY(fid_bn_ops, m) {
    m.def("bn_relu_eval(Tensor x, Tensor mean, Tensor var, Tensor weight, Tensor bias, float eps) -> Tensor");
}

TORCH_LIBRARY_IMPL(fid_bn_ops, CPU, m) {
    m.impl("bn_relu_eval", &bn_relu_eval);
}
"""

load_inline(name="fid_bn_ops_lib", cpp_sources=op_src, is_python_module=False, verbose=False)


class ModelNew(nn.Module):
    def __init__(self, num_features):
        super().__init__()
        self.bn = nn.BatchNorm2d(num_features)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-0.5, 0.5)
            self.bn.running_var.uniform_(0.5, 2.0)
            self.bn.weight.uniform_(0.5, 1.5)
            self.bn.bias.uniform_(-0.2, 0.2)
        self.bn.eval()

    def forward(self, x):
        bn = self.bn
        return torch.ops.fid_bn_ops.bn_relu_eval(x, bn.running_mean, bn.running_var, bn.weight, bn.bias, bn.eps)
