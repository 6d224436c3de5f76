import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

source = """
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <ATen/Dispatch.h>

template <typename scalar_t>
void gemm_kernel(const at::TensorAccessor<scalar_t, 2> a,
                 const at::TensorAccessor<scalar_t, 2> b,
                 at::TensorAccessor<scalar_t, 2> c,
                 int64_t row_begin, int64_t row_end) {
    const int64_t K = a.size(1);
    const int64_t N = b.size(1);
    for (int64_t i = row_begin; i < row_end; ++i) {
        for (int64_t j = 0; j < N; ++j) c[i][j] = scalar_t(0);
        for (int64_t k = 0; k < K; ++k) {
            const scalar_t aik = a[i][k];
            for (int64_t j = 0; j < N; ++j) {
                c[i][j] += aik * b[k][j];
            }
        }
    }
}

at::Tensor custom_matmul(const at::Tensor& A, const at::Tensor& B) {
    TORCH_CHECK(A.device().is_cpu(), "A must be a CPU tensor");
    TORCH_CHECK(A.size(1) == B.size(0), "shape mismatch: ", A.sizes(), " x ", B.sizes());
    auto C = at::empty({A.size(0), B.size(1)}, A.options());
    AT_DISPATCH_FLOATING_TYPES(A.scalar_type(), "custom_matmul", [&] {
        auto a = A.accessor<scalar_t, 2>();
        auto b = B.accessor<scalar_t, 2>();
        auto c = C.accessor<scalar_t, 2>();
        at::parallel_for(0, A.size(0), 8, [&](int64_t begin, int64_t end) {
            gemm_kernel<scalar_t>(a, b, c, begin, end);
        });
    });
    return C;
}
"""

custom_matmul = load_inline(
    name="custom_matmul_dispatch",
    cpp_sources=source,
    functions=["custom_matmul"],
    verbose=False,
    extra_cflags=["-O3", "-march=native"],
)


class ModelNew(nn.Module):
    """C = A @ B with a templated, at::parallel_for-parallelised CPU GEMM."""

    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return custom_matmul.custom_matmul(A, B)
