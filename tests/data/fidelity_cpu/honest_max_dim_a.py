import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

max_src = """
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <vector>
#include <limits>

std::vector<torch::Tensor> max_dim(torch::Tensor x, int64_t dim) {
    if (dim < 0) dim += x.dim();
    auto xc = x.contiguous();
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < dim; ++d) outer *= xc.size(d);
    for (int64_t d = dim + 1; d < xc.dim(); ++d) inner *= xc.size(d);
    const int64_t R = xc.size(dim);
    std::vector<int64_t> shape;
    for (int64_t d = 0; d < xc.dim(); ++d) if (d != dim) shape.push_back(xc.size(d));
    auto values = torch::empty(shape, xc.options());
    auto indices = torch::empty(shape, xc.options().dtype(torch::kLong));
    const float* in = xc.data_ptr<float>();
    float* vo = values.data_ptr<float>();
    int64_t* io = indices.data_ptr<int64_t>();
    at::parallel_for(0, outer, 1, [&](int64_t o0, int64_t o1) {
        for (int64_t o = o0; o < o1; ++o) {
            for (int64_t i = 0; i < inner; ++i) {
                float best = -std::numeric_limits<float>::infinity();
                int64_t bi = 0;
                for (int64_t r = 0; r < R; ++r) {
                    const float v = in[(o * R + r) * inner + i];
                    if (v > best || std::isnan(v)) { best = v; bi = r; if (std::isnan(v)) break; }
                }
                vo[o * inner + i] = best;
                io[o * inner + i] = bi;
            }
        }
    });
    return {values, indices};
}
"""

max_ext = load_inline(name="max_dim_values_indices", cpp_sources=max_src, functions=["max_dim"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        values, _indices = max_ext.max_dim(x, self.dim)
        return values
