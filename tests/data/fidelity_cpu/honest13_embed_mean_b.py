import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp = r"""
#include <torch/extension.h>
#include <cstdint>

// Stage 1: gather + mean pool using int32 indices, pairwise (tree) reduction over the sequence.
static double pairwise_sum(const float* E, const int32_t* ids, int64_t n, int64_t D, int64_t d) {
    if (n <= 8) {
        double s = 0.0;
        for (int64_t i = 0; i < n; ++i) s += E[(int64_t)ids[i] * D + d];
        return s;
    }
    const int64_t h = n / 2;
    return pairwise_sum(E, ids, h, D, d) + pairwise_sum(E, ids + h, n - h, D, d);
}

void gather_mean(const torch::Tensor& ids, const torch::Tensor& table, torch::Tensor& pooled) {
    const int64_t B = ids.size(0), L = ids.size(1), D = table.size(1);
    const int32_t* ip = ids.data_ptr<int32_t>();
    const float* E = table.data_ptr<float>();
    float* P = pooled.data_ptr<float>();
    #pragma omp parallel for
    for (int64_t b = 0; b < B; ++b)
        for (int64_t d = 0; d < D; ++d)
            P[b * D + d] = (float)(pairwise_sum(E, ip + b * L, L, D, d) / (double)L);
}

// Stage 2: y = pooled @ W^T + b with W stored (O, D)
void linear_fwd(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& bias, torch::Tensor& y) {
    const int64_t B = x.size(0), D = x.size(1), O = w.size(0);
    const float* X = x.data_ptr<float>();
    const float* W = w.data_ptr<float>();
    const float* bb = bias.data_ptr<float>();
    float* Y = y.data_ptr<float>();
    #pragma omp parallel for collapse(2)
    for (int64_t b = 0; b < B; ++b)
        for (int64_t o = 0; o < O; ++o) {
            float acc = 0.f;
            for (int64_t d = 0; d < D; ++d) acc += X[b * D + d] * W[o * D + d];
            Y[b * O + o] = acc + bb[o];
        }
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("gather_mean", &gather_mean);
    m.def("linear_fwd", &linear_fwd);
}
"""

ops = load_inline(name="embed_pool_i32", cpp_sources=cpp, extra_cflags=["-O3", "-fopenmp"],
                  extra_ldflags=["-fopenmp"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, num_embeddings, embedding_dim, out_features):
        super().__init__()
        emb = nn.Embedding(num_embeddings, embedding_dim)
        lin = nn.Linear(embedding_dim, out_features)
        self.table = nn.Parameter(emb.weight.detach().clone())
        self.weight = nn.Parameter(lin.weight.detach().clone())
        self.bias = nn.Parameter(lin.bias.detach().clone())
        self.embedding_dim = embedding_dim
        self.out_features = out_features

    @torch.no_grad()
    def forward(self, idx):
        ids = idx.to(torch.int32).contiguous()   # indices fit in int32; halves index bandwidth
        B = ids.shape[0]
        pooled = torch.empty(B, self.embedding_dim, dtype=self.table.dtype)
        ops.gather_mean(ids, self.table, pooled)
        out = torch.empty(B, self.out_features, dtype=self.table.dtype)
        ops.linear_fwd(pooled, self.weight, self.bias, out)
        return out
