import sys
import shutil
import threading
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_ELU_SRC = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <cmath>

template <typename scalar_t>
static void elu_impl(const scalar_t* x, scalar_t* y, int64_t n, scalar_t alpha) {
    at::parallel_for(0, n, 2048, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
            const scalar_t v = x[i];
            y[i] = v > scalar_t(0) ? v : alpha * std::expm1(v);
        }
    });
}

torch::Tensor elu(torch::Tensor x, double alpha) {
    auto xc = x.contiguous();
    auto y = at::empty_like(xc);
    AT_DISPATCH_FLOATING_TYPES(xc.scalar_type(), "elu", [&] {
        elu_impl<scalar_t>(xc.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), xc.numel(), static_cast<scalar_t>(alpha));
    });
    return y;
}
"""

_ext_cache = {}
_ext_lock = threading.Lock()


def _get_ext():
    with _ext_lock:
        if "elu" not in _ext_cache:
            if shutil.which("g++") is None and shutil.which("c++") is None:
                print("warning: no C++ compiler found on PATH", file=sys.stderr)
            _ext_cache["elu"] = load_inline(name="elu_dispatch_lazy", cpp_sources=_ELU_SRC, functions=["elu"],
                                            extra_cflags=["-O3"], verbose=False)
        return _ext_cache["elu"]


class EluCpu(nn.Module):
    def __init__(self, alpha: float = 1.0):
        super().__init__()
        self.alpha = alpha
        self._ext = _get_ext()

    def forward(self, x):
        return self._ext.elu(x, self.alpha)


ModelNew = EluCpu
