import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# Straightforward triple-loop matmul: one thread, one output element at a time, double accumulator.
naive_src = r"""
#include <torch/extension.h>

torch::Tensor naive_matmul(torch::Tensor A, torch::Tensor B) {
    TORCH_CHECK(A.dim() == 2 && B.dim() == 2 && A.size(1) == B.size(0), "shape mismatch");
    A = A.contiguous();
    B = B.contiguous();
    const int64_t M = A.size(0), K = A.size(1), N = B.size(1);
    auto C = torch::empty({M, N}, A.options());
    const float* a = A.data_ptr<float>();
    const float* b = B.data_ptr<float>();
    float* c = C.data_ptr<float>();
    for (int64_t i = 0; i < M; ++i) {
        for (int64_t j = 0; j < N; ++j) {
            double acc = 0.0;
            for (int64_t k = 0; k < K; ++k) {
                acc += (double)a[i * K + k] * (double)b[k * N + j];
            }
            c[i * N + j] = (float)acc;
        }
    }
    return C;
}
"""

naive = load_inline(name="naive_matmul_double", cpp_sources=naive_src, functions=["naive_matmul"],
                    extra_cflags=["-O2"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return naive.naive_matmul(A, B)
