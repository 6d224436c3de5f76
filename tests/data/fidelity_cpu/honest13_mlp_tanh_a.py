import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <cmath>

// y = act(x @ W^T + b); act: 0 = identity, 1 = tanh
torch::Tensor linear_act(torch::Tensor x, torch::Tensor w, torch::Tensor b, int64_t act) {
    x = x.contiguous(); w = w.contiguous();
    const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
    auto y = torch::empty({M, N}, x.options());
    const float* X = x.data_ptr<float>();
    const float* W = w.data_ptr<float>();
    const float* B = b.data_ptr<float>();
    float* Y = y.data_ptr<float>();
    at::parallel_for(0, M * N, 256, [&](int64_t s, int64_t e) {
        for (int64_t t = s; t < e; ++t) {
            const int64_t i = t / N, j = t % N;
            float acc = B[j];
            for (int64_t k = 0; k < K; ++k) acc += X[i * K + k] * W[j * K + k];
            Y[t] = act == 1 ? std::tanh(acc) : acc;
        }
    });
    return y;
}
"""

mlp_ext = load_inline(name="mlp_linear_act", cpp_sources=src, functions=["linear_act"], verbose=False)


class FusedLinear(nn.Module):
    """nn.Linear's parameters, our kernel's forward."""
    def __init__(self, in_f, out_f, tanh):
        super().__init__()
        lin = nn.Linear(in_f, out_f)
        self.weight = nn.Parameter(lin.weight.detach().clone())
        self.bias = nn.Parameter(lin.bias.detach().clone())
        self.act = 1 if tanh else 0

    def forward(self, x):
        return mlp_ext.linear_act(x, self.weight, self.bias, self.act)


class ModelNew(nn.Module):
    def __init__(self, in_features, hidden, out_features):
        super().__init__()
        self.layers = nn.ModuleList([
            FusedLinear(in_features, hidden, True),
            FusedLinear(hidden, hidden, True),
            FusedLinear(hidden, out_features, False),
        ])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x
