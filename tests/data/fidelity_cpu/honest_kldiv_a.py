import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

kl_source = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <cmath>
#include <vector>

// kl_div(log(p), t, reduction='batchmean') = sum(t * (log t - log p)) / batch
torch::Tensor kl_div_batchmean(torch::Tensor predictions, torch::Tensor targets) {
    auto p = predictions.contiguous();
    auto t = targets.contiguous();
    TORCH_CHECK(p.sizes() == t.sizes(), "shape mismatch");
    const int64_t batch = p.size(0);
    const int64_t row = p.numel() / batch;
    const float* P = p.data_ptr<float>();
    const float* Tt = t.data_ptr<float>();
    std::vector<double> partial(batch, 0.0);
    at::parallel_for(0, batch, 8, [&](int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b) {
            double acc = 0.0;
            for (int64_t i = 0; i < row; ++i) {
                const float tv = Tt[b * row + i];
                const float lp = std::log(P[b * row + i]);
                if (tv > 0.f) acc += (double)tv * ((double)std::log(tv) - (double)lp);
            }
            partial[b] = acc;
        }
    });
    double total = 0.0;
    for (double v : partial) total += v;
    auto out = torch::empty({}, p.options());
    *out.data_ptr<float>() = static_cast<float>(total / batch);
    return out;
}
"""

kl_ext = load_inline(name="kl_div_batchmean_cpu", cpp_sources=kl_source, functions=["kl_div_batchmean"],
                     extra_cflags=["-O2"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        return kl_ext.kl_div_batchmean(predictions, targets)
