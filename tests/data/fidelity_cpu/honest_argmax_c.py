import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_argmax_cpp = r"""
#include <torch/extension.h>
#include <algorithm>
#include <iterator>
#include <vector>
#include <omp.h>

// argmax along the last axis of a contiguous 2D view; the task's dim is moved last on the Python side
torch::Tensor argmax_last(torch::Tensor x) {
    TORCH_CHECK(x.dim() == 2, "expected 2D");
    TORCH_CHECK(x.is_contiguous(), "expected contiguous");
    const int64_t rows = x.size(0), n = x.size(1);
    torch::Tensor out = torch::empty({rows}, torch::TensorOptions().dtype(torch::kInt64).device(x.device()));
    const float* p = x.data_ptr<float>();
    int64_t* o = out.data_ptr<int64_t>();
    #pragma omp parallel for
    for (int64_t r = 0; r < rows; ++r) {
        const float* row = p + r * n;
        o[r] = std::distance(row, std::max_element(row, row + n));
    }
    return out;
}
"""

argmax_mod = load_inline(
    name="argmax_last_omp",
    cpp_sources=_argmax_cpp,
    functions=["argmax_last"],
    extra_cflags=["-O3", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dim = self.dim % x.dim()
        xt = x.transpose(dim, -1).contiguous()      # reduction axis last
        out_shape = xt.shape[:-1]
        idx = argmax_mod.argmax_last(xt.view(-1, xt.shape[-1]))
        idx = idx.view(out_shape)
        if dim != x.dim() - 1:
            idx = idx.movedim(dim, -1)   # put the remaining axes back in order
        return idx.contiguous()
