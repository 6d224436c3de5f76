import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# Whole MLP in one call: activations stay in thread-local scratch, double accumulation.
mlp_src = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <cmath>
#include <vector>

torch::Tensor mlp3_tanh(torch::Tensor x, torch::Tensor w1, torch::Tensor b1, torch::Tensor w2, torch::Tensor b2,
                        torch::Tensor w3, torch::Tensor b3) {
    x = x.contiguous();
    const int64_t M = x.size(0), K = x.size(1), H = w1.size(0), O = w3.size(0);
    auto y = torch::empty({M, O}, x.options());
    auto X = x.accessor<float, 2>();
    auto W1 = w1.accessor<float, 2>(); auto B1 = b1.accessor<float, 1>();
    auto W2 = w2.accessor<float, 2>(); auto B2 = b2.accessor<float, 1>();
    auto W3 = w3.accessor<float, 2>(); auto B3 = b3.accessor<float, 1>();
    auto Y = y.accessor<float, 2>();
    at::parallel_for(0, M, 1, [&](int64_t m0, int64_t m1) {
        std::vector<float> h1(H), h2(H);
        for (int64_t m = m0; m < m1; ++m) {
            for (int64_t j = 0; j < H; ++j) {
                double a = B1[j];
                for (int64_t k = 0; k < K; ++k) a += (double)X[m][k] * W1[j][k];
                h1[j] = std::tanh((float)a);
            }
            for (int64_t j = 0; j < H; ++j) {
                double a = B2[j];
                for (int64_t k = 0; k < H; ++k) a += (double)h1[k] * W2[j][k];
                h2[j] = std::tanh((float)a);
            }
            for (int64_t j = 0; j < O; ++j) {
                double a = B3[j];
                for (int64_t k = 0; k < H; ++k) a += (double)h2[k] * W3[j][k];
                Y[m][j] = (float)a;
            }
        }
    });
    return y;
}
"""

fused_mlp = load_inline(name="mlp3_tanh_fused", cpp_sources=mlp_src, functions=["mlp3_tanh"],
                        extra_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_features, hidden, out_features):
        super().__init__()
        # identical structure to the reference so the state dict lines up; only the weights are used
        self.net = nn.Sequential(
            nn.Linear(in_features, hidden),
            nn.Tanh(),
            nn.Linear(hidden, hidden),
            nn.Tanh(),
            nn.Linear(hidden, out_features),
        )

    def forward(self, x):
        l1, l2, l3 = self.net[0], self.net[2], self.net[4]
        return fused_mlp.mlp3_tanh(x, l1.weight, l1.bias, l2.weight, l2.bias, l3.weight, l3.bias)
