import functools
import os
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CPP = r"""
#include <torch/extension.h>
#include <omp.h>
#include <cmath>

void linear_tanh_out(torch::Tensor x, torch::Tensor w, torch::Tensor b, torch::Tensor y, bool apply_tanh, int64_t nthreads) {
    const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
    const float* X = x.data_ptr<float>();
    const float* W = w.data_ptr<float>();
    const float* B = b.data_ptr<float>();
    float* Y = y.data_ptr<float>();
    #pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
            float acc = 0.f;
            for (int64_t k = 0; k < K; ++k) acc += X[i * K + k] * W[j * K + k];
            acc += B[j];
            Y[i * N + j] = apply_tanh ? std::tanh(acc) : acc;
        }
}
"""


@functools.lru_cache(maxsize=None)
def _ext():
    return load_inline(name="linear_tanh_out_lru", cpp_sources=_CPP, functions=["linear_tanh_out"],
                       extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"], verbose=True)


NUM_THREADS = max(1, min(8, os.cpu_count() or 1))


class ModelNew(nn.Module):
    def __init__(self, in_features, hidden, out_features):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, out_features)
        _ext()  # build eagerly

    def _layer(self, x, fc, tanh):
        y = x.new_empty((x.shape[0], fc.out_features))
        _ext().linear_tanh_out(x, fc.weight, fc.bias, y, tanh, NUM_THREADS)
        return y

    def forward(self, x):
        x = x.contiguous()
        x = self._layer(x, self.fc1, True)
        x = self._layer(x, self.fc2, True)
        return self._layer(x, self.fc3, False)
