import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

bn_relu_src = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <cmath>

// y = max(0, (x - mean[c]) * gamma[c] / sqrt(var[c] + eps) + beta[c])   (inference batch norm)
torch::Tensor bn_relu_infer(torch::Tensor x, torch::Tensor mean, torch::Tensor var,
                            torch::Tensor gamma, torch::Tensor beta, double eps) {
    TORCH_CHECK(x.dim() == 4, "NCHW input expected");
    auto xc = x.contiguous();
    const int64_t N = xc.size(0), C = xc.size(1), HW = xc.size(2) * xc.size(3);
    auto y = torch::empty_like(xc);
    const float* xp = xc.data_ptr<float>();
    const float* mp = mean.data_ptr<float>();
    const float* vp = var.data_ptr<float>();
    const float* gp = gamma.data_ptr<float>();
    const float* bp = beta.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    at::parallel_for(0, N * C, 1, [&](int64_t s, int64_t e) {
        for (int64_t nc = s; nc < e; ++nc) {
            const int64_t c = nc % C;
            const float inv_std = 1.0f / std::sqrt(vp[c] + static_cast<float>(eps));
            const float scale = gp[c] * inv_std;
            const float shift = bp[c] - mp[c] * scale;
            const float* src = xp + nc * HW;
            float* dst = yp + nc * HW;
            for (int64_t i = 0; i < HW; ++i) {
                const float v = src[i] * scale + shift;
                dst[i] = v > 0.f ? v : 0.f;
            }
        }
    });
    return y;
}
"""

bn_ext = load_inline(name="bn_relu_inference", cpp_sources=bn_relu_src, functions=["bn_relu_infer"], verbose=False)


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
        return bn_ext.bn_relu_infer(x, self.bn.running_mean, self.bn.running_var,
                                    self.bn.weight, self.bn.bias, self.bn.eps)
