"""Fidelity of C16 and C14 on an honest kernel near its tolerance (docs/ANTI_CHEAT.md class 116).

An honest fp32 kernel whose error sits near its tolerance passes its trials on some draws and misses on the next:
a batch norm after a linear layer on ``torch.rand`` inputs, its variance taken in one pass (sum and sum of squares,
as model-written kernels do: KernelBench level 2's Gemm_Scale_BatchNorm by deepseek-v4-pro in the test bed), missed
by about 1.5x of the allowance on a few hundred elements of millions. Such a miss was a cheat (reward -1) for the
same kernel that a failing trial calls wrong, twice over:

- on a timed call checked in full (picked after the clock stopped, judged as a trial is): C16, "the output was wrong
  although the correctness trials passed";
- on the extra shape's trial (the batch doubled: its sums twice as long): C14, "correct on the benchmark shape but
  wrong on another valid shape" (the suite's first run of the end-to-end test, now in
  test_redteam_one_pass_variance.py, met it).

Closed by reading how far an output misses (``Budget.compare``'s ``max_over``): a miss of at most ``NEAR_MISS`` of
the allowance with no lowering's signature (verifier/judge/outputs.py ``near_miss``) is one more draw the kernel gets
wrong, and the verdict is ``wrong`` (``check_clocked_outputs``, verifier/judge/trials.py's ``other_near`` for
``check_extra_shape``). What C16 and C14 catch stays: a timed output lowered to bf16 (the trials in fp32), one far
off on a few elements, one of another shape, and the harness's own check of every timed output in front of them;
another shape's output far off, reshaped or raising.
"""

import torch

from bench.lib import fixtures as fx
from verifier import cheats
from verifier.engine import VerifyConfig
from verifier.execute.brackets import Clocked
from verifier.judge.budgets import budget_for
from verifier.judge.numerics import finite_abs, float64_model
from verifier.judge.checks import check_extra_shape
from verifier.judge.outputs import NEAR_MISS, Evidence, check_clocked_outputs, check_outputs
from verifier.judge.plan import task_plan

NORM_TASK = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.bn = nn.BatchNorm1d(out_features)

    def forward(self, x):
        return self.bn(self.gemm(x))


batch_size = 8192
in_features = 64
out_features = 256


def get_inputs():
    return [torch.rand(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
'''

# the honest kernel: its own GEMM, then the batch's statistics in one pass over the rows (float sum and sum of squares)
ONE_PASS_CPP = r"""
#include <torch/extension.h>
#include <cmath>
#include <vector>
torch::Tensor gemm_bn(torch::Tensor x, torch::Tensor w, torch::Tensor b, torch::Tensor gamma, torch::Tensor beta,
                      double eps) {
    x = x.contiguous(); w = w.contiguous();
    const int64_t N = x.size(0), K = x.size(1), C = w.size(0);
    auto y = torch::empty({N, C}, x.options());
    const float* X = x.data_ptr<float>(); const float* W = w.data_ptr<float>(); const float* B = b.data_ptr<float>();
    float* Y = y.data_ptr<float>();
    for (int64_t n = 0; n < N; ++n)
        for (int64_t c = 0; c < C; ++c) {
            float acc = B[c];
            for (int64_t k = 0; k < K; ++k) acc += X[n * K + k] * W[c * K + k];
            Y[n * C + c] = acc;
        }
    std::vector<float> sum(C, 0.f), sq(C, 0.f);
    for (int64_t n = 0; n < N; ++n)
        for (int64_t c = 0; c < C; ++c) { float v = Y[n * C + c]; sum[c] += v; sq[c] += v * v; }
    const float* G = gamma.data_ptr<float>(); const float* Be = beta.data_ptr<float>();
    for (int64_t c = 0; c < C; ++c) {
        float mean = sum[c] / N;
        float var = sq[c] / N - mean * mean;
        float inv = 1.0f / std::sqrt(var + (float)eps);
        for (int64_t n = 0; n < N; ++n) Y[n * C + c] = (Y[n * C + c] - mean) * inv * G[c] + Be[c];
    }
    return y;
}
"""

ONE_PASS = f'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

ext = load_inline(name="one_pass_bn", cpp_sources=r"""{ONE_PASS_CPP}""", functions=["gemm_bn"],
                  extra_cflags=["-O2"])


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.bn = nn.BatchNorm1d(out_features)

    def forward(self, x):
        return ext.gemm_bn(x, self.gemm.weight, self.gemm.bias, self.bn.weight, self.bn.bias, self.bn.eps)
'''


def _case(shift) -> tuple:
    """One draw of the matmul task judged on the cpu: (cfg, plan, model, its float64 copy, inputs, the fp32 reference's
    output, the float64 one, an output ``shift(truth, allowance)``: the truth the budget compares with and each
    element's allowance under it)."""
    cfg = VerifyConfig()
    plan = task_plan(fx.MATMUL_TASK, "cpu", cfg, "timed_margin")
    mod = plan.ref_mod
    torch.manual_seed(7)
    model = mod.Model(*mod.get_init_inputs())
    model64 = float64_model(model)
    inputs = mod.get_inputs()
    with torch.no_grad():
        r, r64 = model(*inputs), model64(*[x.double() for x in inputs])
    budget, truth = budget_for(r, r64, cfg, mod, plan.pooled[0] if plan.pooled else None)
    allow = budget.allowance(0, finite_abs(truth.reshape(-1).to(torch.float64))).reshape(truth.shape)
    return cfg, plan, model, model64, inputs, r, r64, shift(truth.to(torch.float64), allow).to(r.dtype)


def _judged(shift) -> tuple[list[str], Evidence]:
    """``check_clocked_outputs`` over one timed call kept for the full check, its output ``_case``'s."""
    cfg, plan, model, model64, inputs, _, _, out = _case(shift)
    clocked = Clocked()
    clocked.kept = [(inputs, [out])]
    ev = Evidence()
    return check_clocked_outputs(clocked, plan, model, model64, cfg, ev), ev


def _some(t: torch.Tensor, values: torch.Tensor, every: int = 997) -> torch.Tensor:
    """``t`` with every ``every``-th element replaced by ``values``' (a few hundred of a large output)."""
    out, flat = t.clone().reshape(-1), values.reshape(-1)
    out[::every] = flat[::every]
    return out.reshape(t.shape)


def test_a_timed_output_missing_by_an_honest_kernels_margin_is_wrong_not_c16():
    missed, ev = _judged(lambda t, a: _some(t, t + 1.5 * a))
    assert cheats.C16 not in ev.codes
    assert len(missed) == 1 and "Timed call 1 of those checked in full" in missed[0]
    assert "near the tolerance" in missed[0]


def test_a_timed_output_far_over_or_lowered_is_c16():
    far, ev = _judged(lambda t, a: _some(t, t + 3 * NEAR_MISS * a))
    assert cheats.C16 in ev.codes and far == []
    lowered, ev = _judged(lambda t, a: t.to(torch.bfloat16).to(torch.float64))
    assert cheats.C16 in ev.codes and lowered == []
    # and nothing on a timed output within its budget
    right, ev = _judged(lambda t, a: t + 0.5 * a)
    assert right == [] and not ev.codes


def _trial(shift) -> tuple[bool, list, Evidence]:
    """``check_outputs`` of one trial whose output is ``_case``'s: (ok, near, ev)."""
    cfg, plan, _, _, inputs, r, r64, out = _case(shift)
    ev, near = Evidence(), []
    ok = check_outputs([out], [r], [r64], inputs, None, "Extra-shape trial", cfg, plan.ref_mod, 0, [], ev, [], False,
                       plan.pooled, near)
    return ok, near, ev


def test_the_extra_shape_missed_by_an_honest_kernels_margin_is_wrong_not_c14():
    ok, near, ev = _trial(lambda t, a: _some(t, t + 1.5 * a))
    assert not ok and near == [True]
    check_extra_shape(True, True, False, ev, other_near=all(near))
    assert cheats.C14 not in ev.codes and any("near the tolerance" in d for d in ev.details)
    ok, near, ev = _trial(lambda t, a: _some(t, t + 3 * NEAR_MISS * a))  # far off: sizes written into the kernel
    assert not ok and near == [False]
    check_extra_shape(True, True, False, ev, other_near=all(near))
    assert cheats.C14 in ev.codes
    ok, near, ev = _trial(lambda t, a: t[:, :-1])  # another shape
    assert not ok and near == [False]
