import math
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

attn_cpp = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <cmath>
#include <vector>
#include <limits>

static void linear_rows(const float* X, const float* W, const float* b, float* Y,
                        int64_t rows, int64_t in, int64_t out) {
    at::parallel_for(0, rows, 1, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            const float* x = X + r * in;
            for (int64_t o = 0; o < out; ++o) {
                const float* w = W + o * in;
                float acc = 0.f;
                for (int64_t k = 0; k < in; ++k) acc += x[k] * w[k];
                Y[r * out + o] = acc + b[o];
            }
        }
    });
}

torch::Tensor causal_self_attention(torch::Tensor x, torch::Tensor w_attn, torch::Tensor b_attn,
                                    torch::Tensor w_proj, torch::Tensor b_proj, int64_t n_head) {
    TORCH_CHECK(x.dim() == 3, "x must be (B, T, C)");
    x = x.contiguous();
    const int64_t B = x.size(0), T = x.size(1), C = x.size(2);
    const int64_t hs = C / n_head;
    TORCH_CHECK(hs * n_head == C, "C must be divisible by n_head");
    auto qkv = torch::empty({B, T, 3 * C}, x.options());
    linear_rows(x.data_ptr<float>(), w_attn.contiguous().data_ptr<float>(), b_attn.data_ptr<float>(),
                qkv.data_ptr<float>(), B * T, C, 3 * C);
    auto y = torch::empty({B, T, C}, x.options());
    const float* QKV = qkv.data_ptr<float>();
    float* Yp = y.data_ptr<float>();
    const float scale = 1.0f / std::sqrt((float)hs);
    at::parallel_for(0, B * n_head, 1, [&](int64_t p0, int64_t p1) {
        std::vector<float> scores(T);
        for (int64_t p = p0; p < p1; ++p) {
            const int64_t b = p / n_head, h = p % n_head;
            for (int64_t i = 0; i < T; ++i) {
                const float* q = QKV + (b * T + i) * 3 * C + h * hs;
                float mx = -std::numeric_limits<float>::infinity();
                for (int64_t j = 0; j <= i; ++j) {           // causal: keys up to i
                    const float* k = QKV + (b * T + j) * 3 * C + C + h * hs;
                    float s = 0.f;
                    for (int64_t d = 0; d < hs; ++d) s += q[d] * k[d];
                    s *= scale;
                    scores[j] = s;
                    mx = std::max(mx, s);
                }
                float denom = 0.f;
                for (int64_t j = 0; j <= i; ++j) { scores[j] = std::exp(scores[j] - mx); denom += scores[j]; }
                const float inv = 1.f / denom;
                float* yo = Yp + (b * T + i) * C + h * hs;
                for (int64_t d = 0; d < hs; ++d) yo[d] = 0.f;
                for (int64_t j = 0; j <= i; ++j) {
                    const float* v = QKV + (b * T + j) * 3 * C + 2 * C + h * hs;
                    const float a = scores[j] * inv;
                    for (int64_t d = 0; d < hs; ++d) yo[d] += a * v[d];
                }
            }
        }
    });
    auto out = torch::empty({B, T, C}, x.options());
    linear_rows(Yp, w_proj.contiguous().data_ptr<float>(), b_proj.data_ptr<float>(), out.data_ptr<float>(),
                B * T, C, C);
    return out;
}
"""

attn_ext = load_inline(
    name="causal_self_attention_fused_cpu",
    cpp_sources=attn_cpp,
    functions=["causal_self_attention"],
    extra_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, n_embd, n_head, attn_pdrop, resid_pdrop, max_seqlen):
        super().__init__()
        assert n_embd % n_head == 0
        c_attn = nn.Linear(n_embd, 3 * n_embd)
        c_proj = nn.Linear(n_embd, n_embd)
        self.w_attn = nn.Parameter(c_attn.weight.detach().clone())
        self.b_attn = nn.Parameter(c_attn.bias.detach().clone())
        self.w_proj = nn.Parameter(c_proj.weight.detach().clone())
        self.b_proj = nn.Parameter(c_proj.bias.detach().clone())
        self.n_head = n_head
        self.n_embd = n_embd
        # dropout probabilities are 0 in this task; the kernel applies none
        assert attn_pdrop == 0.0 and resid_pdrop == 0.0

    def forward(self, x):
        return attn_ext.causal_self_attention(x, self.w_attn, self.b_attn, self.w_proj, self.b_proj, self.n_head)
