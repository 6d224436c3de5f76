import math
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

linear_src = """
#include <torch/extension.h>
#include <ATen/Parallel.h>

torch::Tensor linear_fwd(torch::Tensor x, torch::Tensor w, torch::Tensor b) {
    auto x2 = x.reshape({-1, x.size(-1)}).contiguous();
    auto wc = w.contiguous();
    const int64_t M = x2.size(0), K = x2.size(1), N = wc.size(0);
    auto y = torch::empty({M, N}, x2.options());
    auto xa = x2.accessor<float, 2>();
    auto wa = wc.accessor<float, 2>();
    auto ba = b.accessor<float, 1>();
    auto ya = y.accessor<float, 2>();
    at::parallel_for(0, M, 4, [&](int64_t s, int64_t e) {
        for (int64_t i = s; i < e; ++i)
            for (int64_t j = 0; j < N; ++j) {
                float acc = ba[j];
                for (int64_t k = 0; k < K; ++k) acc += xa[i][k] * wa[j][k];
                ya[i][j] = acc;
            }
    });
    auto shape = x.sizes().vec();
    shape.back() = N;
    return y.view(shape);
}
"""

attention_src = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <cmath>
#include <vector>

// q, k, v: (B, H, T, D) contiguous. Causal softmax(q k^T * scale) v with an online softmax per query row.
torch::Tensor causal_attention(torch::Tensor q, torch::Tensor k, torch::Tensor v, double scale) {
    TORCH_CHECK(q.is_contiguous() && k.is_contiguous() && v.is_contiguous(), "q, k, v must be contiguous");
    const int64_t BH = q.size(0) * q.size(1), T = q.size(2), D = q.size(3);
    auto out = torch::empty_like(q);
    const float* Q = q.data_ptr<float>();
    const float* K = k.data_ptr<float>();
    const float* V = v.data_ptr<float>();
    float* O = out.data_ptr<float>();
    const float sc = (float)scale;
    at::parallel_for(0, BH * T, 8, [&](int64_t r0, int64_t r1) {
        std::vector<float> acc(D);
        for (int64_t r = r0; r < r1; ++r) {
            const int64_t bh = r / T, i = r % T;
            const float* qi = Q + r * D;
            const float* Kb = K + bh * T * D;
            const float* Vb = V + bh * T * D;
            float m = -INFINITY, l = 0.f;
            std::fill(acc.begin(), acc.end(), 0.f);
            for (int64_t j = 0; j <= i; ++j) {
                float s = 0.f;
                for (int64_t d = 0; d < D; ++d) s += qi[d] * Kb[j * D + d];
                s *= sc;
                const float m_new = std::max(m, s);
                const float corr = std::exp(m - m_new);
                const float p = std::exp(s - m_new);
                l = l * corr + p;
                for (int64_t d = 0; d < D; ++d) acc[d] = acc[d] * corr + p * Vb[j * D + d];
                m = m_new;
            }
            float* oi = O + r * D;
            for (int64_t d = 0; d < D; ++d) oi[d] = acc[d] / l;
        }
    });
    return out;
}
"""

linear_mod = load_inline(name="attn_linear_accessor_c", cpp_sources=linear_src, functions=["linear_fwd"],
                         extra_cflags=["-O3"], verbose=False)
attention_mod = load_inline(name="attn_causal_online_softmax_c", cpp_sources=attention_src,
                            functions=["causal_attention"], extra_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, n_embd, n_head, attn_pdrop, resid_pdrop, max_seqlen):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.attn_dropout = nn.Dropout(attn_pdrop)
        self.resid_dropout = nn.Dropout(resid_pdrop)
        self.register_buffer("bias", torch.tril(torch.ones(max_seqlen, max_seqlen)).view(1, 1, max_seqlen, max_seqlen))
        self.n_head = n_head
        self.n_embd = n_embd

    def forward(self, x):
        B, T, C = x.size()
        hs = C // self.n_head
        qkv = linear_mod.linear_fwd(x, self.c_attn.weight, self.c_attn.bias)
        q, k, v = qkv.split(self.n_embd, dim=2)
        q = q.view(B, T, self.n_head, hs).transpose(1, 2).contiguous()
        k = k.view(B, T, self.n_head, hs).transpose(1, 2).contiguous()
        v = v.view(B, T, self.n_head, hs).transpose(1, 2).contiguous()
        y = attention_mod.causal_attention(q, k, v, 1.0 / math.sqrt(hs))
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        y = linear_mod.linear_fwd(y, self.c_proj.weight, self.c_proj.bias)
        return self.resid_dropout(y)  # p = 0.0 here: identity
