"""The lexer that deduplication uses gives the tokens tree-sitter's syntax trees give (the reference)."""

from __future__ import annotations

from curation_fixtures import RELU, RENAMES, SIGMOID, TANH_SCALE, elementwise_candidate, grid_stride_candidate, softmax_candidate
from curation.tokens import code_tokens, grammar_tokens, native_tokens

TRICKY = '''
import torch
from torch.utils.cpp_extension import load_inline
"""module docstring"""
src = r"""
#include <torch/extension.h>
#define BLOCK 256
#define IDX(r, c) ((r) * n + (c))
#pragma unroll
__global__ void k(const float* __restrict__ x, float* y, int n) {  // comment
    int i = blockIdx.x * blockDim.x + threadIdx.x; /* block
    comment */
    if (i < n - 1) y[i] = x[i] > 0.f ? x[i] : -1.5e-3f * x[IDX(i, 0)];
    float4 q; q.x = 1; y[i] += f(-1) + (i -1);
}
"""
cpp = 'torch::Tensor f(torch::Tensor x);'
x = [1, 2.5, 0x1F, 1e-5] + [...]
def g(a, *, b=3):
    """doc"""
    return a.numel() + b  # trailing comment'''


def test_lexer_tokens_equal_grammar_tokens_on_candidate_files():
    files = [elementwise_candidate(RELU), elementwise_candidate(SIGMOID, names=RENAMES, compact=True, comment="// c"),
             grid_stride_candidate(TANH_SCALE), softmax_candidate(), TRICKY]
    for f in files:
        assert code_tokens(f) == grammar_tokens(f)


def test_lexer_keeps_api_and_hides_names_comments_and_literals():
    toks = native_tokens("__global__ void kern(float* a) { a[threadIdx.x] = expf(a[0]); } // tail")
    assert toks[:3] == ["__global__", "void", "ID"] and "threadIdx" in toks and "expf" in toks and "x" in toks
    assert "kern" not in toks and "tail" not in toks and "NUM" in toks
    # a trailing comment without a newline is skipped, not re-read from inside
    assert code_tokens("x = 1  # a b c") == ["ID", "=", "NUM"]
