import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

fro_source = """
#include <torch/extension.h>
#include <omp.h>
#include <cmath>

torch::Tensor fro_normalize(torch::Tensor x) {
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "float32 input expected");
    auto xc = x.contiguous();
    const int64_t n = xc.numel();
    const float* in = xc.data_ptr<float>();
    double sumsq = 0.0;
    #pragma omp parallel for reduction(+:sumsq)
    for (int64_t i = 0; i < n; ++i) sumsq += (double)in[i] * (double)in[i];
    const float norm = (float)std::sqrt(sumsq);
    auto out = torch::empty_like(xc);
    float* o = out.data_ptr<float>();
    #pragma omp parallel for
    for (int64_t i = 0; i < n; ++i) o[i] = in[i] / norm;
    return out;
}
"""

fro = load_inline(name="fro_normalize_omp_double", cpp_sources=fro_source, functions=["fro_normalize"],
                  extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return fro.fro_normalize(x)
