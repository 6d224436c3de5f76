import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

source = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <vector>

// out[b, o] = bias[o] + sum_d W[o, d] * mean_l E[idx[b, l], d]
torch::Tensor embed_mean_proj(torch::Tensor idx, torch::Tensor table, torch::Tensor weight, torch::Tensor bias) {
    TORCH_CHECK(idx.scalar_type() == torch::kLong, "indices must be int64");
    TORCH_CHECK(table.scalar_type() == torch::kFloat, "embedding table must be float32");
    TORCH_CHECK(idx.dim() == 2, "idx must be (B, L)");
    idx = idx.contiguous();
    table = table.contiguous();
    weight = weight.contiguous();
    const int64_t B = idx.size(0), L = idx.size(1), V = table.size(0), D = table.size(1), O = weight.size(0);
    auto out = torch::empty({B, O}, table.options());
    const int64_t* ip = idx.data_ptr<int64_t>();
    const float* E = table.data_ptr<float>();
    const float* W = weight.data_ptr<float>();
    const float* bp = bias.data_ptr<float>();
    float* op = out.data_ptr<float>();
    at::parallel_for(0, B, 1, [&](int64_t b0, int64_t b1) {
        std::vector<float> pooled(D);
        for (int64_t b = b0; b < b1; ++b) {
            std::fill(pooled.begin(), pooled.end(), 0.f);
            for (int64_t l = 0; l < L; ++l) {
                const int64_t row = ip[b * L + l];
                TORCH_CHECK(row >= 0 && row < V, "index out of range");
                const float* e = E + row * D;
                for (int64_t d = 0; d < D; ++d) pooled[d] += e[d];
            }
            const float inv = 1.0f / static_cast<float>(L);
            for (int64_t d = 0; d < D; ++d) pooled[d] *= inv;
            for (int64_t o = 0; o < O; ++o) {
                float acc = bp[o];
                const float* w = W + o * D;
                for (int64_t d = 0; d < D; ++d) acc += w[d] * pooled[d];
                op[b * O + o] = acc;
            }
        }
    });
    return out;
}
"""

_ext = load_inline(name="embed_mean_proj_ext", cpp_sources=source, functions=["embed_mean_proj"],
                   extra_cflags=["-O2"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, num_embeddings, embedding_dim, out_features):
        super().__init__()
        self.emb = nn.Embedding(num_embeddings, embedding_dim)
        self.proj = nn.Linear(embedding_dim, out_features)

    def forward(self, idx):
        return _ext.embed_mean_proj(idx, self.emb.weight, self.proj.weight, self.proj.bias)
