import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# Numerically careful matmul: every dot product uses Kahan-compensated float summation, walking B column-wise (no transposed copy).
kahan_src = r"""
#include <torch/extension.h>

torch::Tensor kahan_matmul(const torch::Tensor& A_in, const torch::Tensor& B_in) {
    TORCH_CHECK(A_in.size(1) == B_in.size(0), "inner dimensions must match");
    auto A = A_in.contiguous();
    auto Bm = B_in.contiguous();   // (K, N), read down columns
    const int64_t M = A.size(0), K = A.size(1), N = Bm.size(1);
    auto C = torch::empty({M, N}, A.options());
    auto a = A.accessor<float, 2>();
    auto b = Bm.accessor<float, 2>();
    auto c = C.accessor<float, 2>();
    for (int64_t i = 0; i < M; ++i) {
        for (int64_t j = 0; j < N; ++j) {
            float sum = 0.f, comp = 0.f;
            for (int64_t k = 0; k < K; ++k) {
                const float y = a[i][k] * b[k][j] - comp;
                const float t = sum + y;
                comp = (t - sum) - y;
                sum = t;
            }
            c[i][j] = sum;
        }
    }
    return C;
}
"""

kahan = load_inline(name="kahan_matmul_colwalk", cpp_sources=kahan_src, functions=["kahan_matmul"],
                    extra_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return kahan.kahan_matmul(A, B)
