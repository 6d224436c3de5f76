import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <cmath>
#include <tuple>

std::tuple<torch::Tensor, torch::Tensor> lstm_cell_fwd(torch::Tensor x, torch::Tensor h, torch::Tensor c,
                                                       torch::Tensor w_ih, torch::Tensor w_hh,
                                                       torch::Tensor b_ih, torch::Tensor b_hh) {
    x = x.contiguous(); h = h.contiguous(); c = c.contiguous();
    const int64_t B = x.size(0), I = x.size(1), H = h.size(1);
    auto gates = torch::empty({B, 4 * H}, x.options());
    const float *X = x.data_ptr<float>(), *Hp = h.data_ptr<float>(), *Cp = c.data_ptr<float>();
    const float *Wi = w_ih.data_ptr<float>(), *Wh = w_hh.data_ptr<float>();
    const float *bi = b_ih.data_ptr<float>(), *bh = b_hh.data_ptr<float>();
    float* G = gates.data_ptr<float>();
    at::parallel_for(0, B * 4 * H, 64, [&](int64_t s, int64_t e) {
        for (int64_t t = s; t < e; ++t) {
            const int64_t b = t / (4 * H), g = t % (4 * H);
            float acc = bi[g] + bh[g];
            for (int64_t k = 0; k < I; ++k) acc += X[b * I + k] * Wi[g * I + k];
            for (int64_t k = 0; k < H; ++k) acc += Hp[b * H + k] * Wh[g * H + k];
            G[t] = acc;
        }
    });
    auto h_out = torch::empty({B, H}, x.options());
    auto c_out = torch::empty({B, H}, x.options());
    float *HO = h_out.data_ptr<float>(), *CO = c_out.data_ptr<float>();
    auto sg = [](float v) { return 1.f / (1.f + std::exp(-v)); };
    for (int64_t b = 0; b < B; ++b)
        for (int64_t j = 0; j < H; ++j) {
            const float* gb = G + b * 4 * H;
            const float cn = sg(gb[H + j]) * Cp[b * H + j] + sg(gb[j]) * std::tanh(gb[2 * H + j]);
            CO[b * H + j] = cn;
            HO[b * H + j] = sg(gb[3 * H + j]) * std::tanh(cn);
        }
    return {h_out, c_out};
}
"""

lstm_ext = load_inline(name="lstm_cell_warmup", cpp_sources=src, functions=["lstm_cell_fwd"],
                       extra_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, input_size, hidden_size):
        super().__init__()
        self.cell = nn.LSTMCell(input_size, hidden_size)
        # warm-up call so the first real forward does not pay for lazy initialisation
        with torch.no_grad():
            dummy_x = torch.zeros(1, input_size)
            dummy_h = torch.zeros(1, hidden_size)
            self._run(dummy_x, dummy_h, dummy_h.clone())

    def _run(self, x, h, c):
        return lstm_ext.lstm_cell_fwd(x, h, c, self.cell.weight_ih, self.cell.weight_hh,
                                      self.cell.bias_ih, self.cell.bias_hh)

    def forward(self, x, h, c):
        h1, c1 = self._run(x, h, c)
        return h1, c1
