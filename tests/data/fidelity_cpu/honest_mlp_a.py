import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>

namespace {
// out[m, n] = act(sum_k a[m, k] * w[n, k] + b[n]) (+ res[m, n])
template <bool RELU, bool RESIDUAL>
void gemm_bias(const float* a, const float* w, const float* b, const float* res, float* out,
               int64_t M, int64_t N, int64_t K) {
    at::parallel_for(0, M * N, 256, [&](int64_t begin, int64_t end) {
        for (int64_t idx = begin; idx < end; ++idx) {
            const int64_t m = idx / N, n = idx % N;
            const float* ar = a + m * K;
            const float* wr = w + n * K;
            float acc = 0.f;
            for (int64_t k = 0; k < K; ++k) acc += ar[k] * wr[k];
            acc += b[n];
            if (RELU) acc = acc > 0.f ? acc : 0.f;
            if (RESIDUAL) acc += res[idx];
            out[idx] = acc;
        }
    });
}
}  // namespace

torch::Tensor linear_relu(torch::Tensor x, torch::Tensor w, torch::Tensor b) {
    TORCH_CHECK(x.is_contiguous() && w.is_contiguous() && b.is_contiguous(), "inputs must be contiguous");
    const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
    auto out = torch::empty({M, N}, x.options());
    gemm_bias<true, false>(x.data_ptr<float>(), w.data_ptr<float>(), b.data_ptr<float>(), nullptr,
                           out.data_ptr<float>(), M, N, K);
    return out;
}

torch::Tensor linear_residual(torch::Tensor h, torch::Tensor w, torch::Tensor b, torch::Tensor res) {
    TORCH_CHECK(h.is_contiguous() && w.is_contiguous() && res.is_contiguous(), "inputs must be contiguous");
    const int64_t M = h.size(0), K = h.size(1), N = w.size(0);
    TORCH_CHECK(res.size(0) == M && res.size(1) == N, "residual shape mismatch");
    auto out = torch::empty({M, N}, h.options());
    gemm_bias<false, true>(h.data_ptr<float>(), w.data_ptr<float>(), b.data_ptr<float>(), res.data_ptr<float>(),
                           out.data_ptr<float>(), M, N, K);
    return out;
}
"""

_ext = load_inline(
    name="mlp_residual_cpu_ext",
    cpp_sources=_SOURCE,
    functions=["linear_relu", "linear_residual"],
    extra_cflags=["-O3", "-funroll-loops"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    @torch.no_grad()
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        h = _ext.linear_relu(x, self.fc1.weight, self.fc1.bias)
        return _ext.linear_residual(h, self.fc2.weight, self.fc2.bias, x)
