import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

lstm_src = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <cmath>
#include <vector>

static inline float sigmoid(float v) { return 1.f / (1.f + std::exp(-v)); }

std::vector<at::Tensor> lstm_step(at::Tensor x, at::Tensor h, at::Tensor c,
                                  at::Tensor w_ih, at::Tensor w_hh, at::Tensor b_ih, at::Tensor b_hh) {
    const int64_t B = x.size(0), I = x.size(1), H = h.size(1);
    auto h_new = at::empty({B, H}, x.options());
    auto c_new = at::empty({B, H}, x.options());
    auto X = x.accessor<float, 2>();
    auto Hp = h.accessor<float, 2>();
    auto Cp = c.accessor<float, 2>();
    auto Wi = w_ih.accessor<float, 2>();
    auto Wh = w_hh.accessor<float, 2>();
    auto bi = b_ih.accessor<float, 1>();
    auto bh = b_hh.accessor<float, 1>();
    auto HN = h_new.accessor<float, 2>();
    auto CN = c_new.accessor<float, 2>();
    at::parallel_for(0, B * H, 32, [&](int64_t s, int64_t e) {
        for (int64_t t = s; t < e; ++t) {
            const int64_t b = t / H, j = t % H;
            float g[4];
            for (int q = 0; q < 4; ++q) {
                const int64_t row = q * H + j;
                float acc = bi[row] + bh[row];
                for (int64_t k = 0; k < I; ++k) acc += X[b][k] * Wi[row][k];
                for (int64_t k = 0; k < H; ++k) acc += Hp[b][k] * Wh[row][k];
                g[q] = acc;
            }
            const float cn = sigmoid(g[1]) * Cp[b][j] + sigmoid(g[0]) * std::tanh(g[2]);
            CN[b][j] = cn;
            HN[b][j] = sigmoid(g[3]) * std::tanh(cn);
        }
    });
    return {h_new, c_new};
}
"""

lstm = load_inline(name="lstm_step_accessor", cpp_sources=lstm_src, functions=["lstm_step"],
                   extra_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, input_size, hidden_size):
        super().__init__()
        self.cell = nn.LSTMCell(input_size, hidden_size)

    @torch.inference_mode()
    def forward(self, x, h, c):
        cell = self.cell
        # returns [h', c'] straight from the extension
        return lstm.lstm_step(x.contiguous(), h.contiguous(), c.contiguous(),
                              cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh)
