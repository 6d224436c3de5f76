"""The budget's floor for long reductions (issue 35: technoabsurdist-l1-p6, a textbook tiled matmul with
K = 524288, judged `wrong` on an H100): an honest sequential fp32 accumulation of K same-sign terms errs past the
fixed relative floor on every element once K ~ 6e5, while a bf16 lowering of the same sum is within it
(bench/results/accumulation_budget_cpu.md). The plan's float64 pass records each output's reduction length
(verifier/judge/reduction.py) and the budget's floors rise with it (verifier/judge/reduction.py ``accumulation_floors``, used by verifier/judge/budgets.py).

- the recorded lengths: mm / bmm / linear K, conv C_in x kernel, sum / mean / softmax / norm sizes, carried
  through elementwise ops and views, the longest on the way;
- the plan records them for a task's outputs (``_float64_check``);
- the honest sequential matmul at the extra-shape trial's K = 786432 passes with the recorded length and is
  rejected without it (the fault);
- the cheats the fixed floor caught are still caught: a bf16 lowering at K = 4096 (the floor is unchanged there)
  and at K = 786432 on zero-mean inputs (tests/redteam/test_redteam_precision.py has the red-team cases)."""

import types

import numpy as np
import pytest
import torch

from verifier import cheats
from verifier.engine import VerifyConfig
from verifier.common.backends import CPU_POISON_BYTE
from verifier.judge.outputs import Evidence, check_outputs
from verifier.judge.plan import _float64_check
from verifier.judge.reduction import SCAN_NONE, SCAN_OTHER, SCAN_ROWS, ReductionTracker, RefStats, accumulation_floors

CFG = VerifyConfig()


def judge(out, r32, r64, pooled):
    ev, errs = Evidence(), []
    ok = check_outputs([out], [r32], [r64], [], None, "Trial 1", CFG, types.SimpleNamespace(), CPU_POISON_BYTE, [],
                       ev, errs, pooled=[pooled])
    return ("pass" if ok and not ev.codes else "cheat" if ev.codes else "wrong"), ev


def sequential_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """One fp32 accumulator per output over K in order (the tiled kernel's order), a row at a time."""
    bt = b.t().contiguous().numpy()
    rows = [np.cumsum(a[i].numpy()[None, :] * bt, axis=1, dtype=np.float32)[:, -1] for i in range(a.shape[0])]
    return torch.from_numpy(np.stack(rows))


def reductions(fn, *inputs) -> list:
    """Per output of ``fn``, what the plan's float64 pass records of it (``Reduction``)."""
    with torch.no_grad(), ReductionTracker() as tracker:
        outs = fn(*[x.double() for x in inputs])
    return tracker.reductions(list(outs) if isinstance(outs, (list, tuple)) else [outs])


def recorded(fn, *inputs) -> list[tuple[int, int]]:
    return [(r.length, r.same_sign) for r in reductions(fn, *inputs)]


R, P = torch.randn, torch.rand  # zero-mean terms (their sums cancel), positive terms (one sign)
LENGTHS = {
    # name: (function, inputs, per output (longest reduction, longest same-sign reduction))
    "mm K, mixed signs": (lambda a, b: a @ b, (R(4, 300), R(300, 5)), [(300, 0)]),
    "mm K, positive": (lambda a, b: a @ b, (P(4, 300), P(300, 5)), [(300, 300)]),
    "bmm K": (lambda a, b: torch.matmul(a, b), (P(2, 3, 70), P(2, 70, 4)), [(70, 70)]),
    "linear then relu": (lambda x, w: torch.relu(torch.nn.functional.linear(x, w)), (R(3, 130), R(6, 130)),
                         [(130, 0)]),
    "conv2d C_in x kernel": (lambda x, w: torch.nn.functional.conv2d(x, w), (R(1, 3, 9, 9), R(5, 3, 3, 3)),
                             [(27, 0)]),
    "row sum of normals": (lambda x: x.sum(1), (R(4, 1000),), [(1000, 0)]),
    "full mean of positives": (lambda x: x.mean(), (P(4, 1000),), [(4000, 4000)]),
    "softmax: exponentials share a sign": (lambda x: torch.softmax(x, -1), (R(4, 512),), [(512, 512)]),
    "layer norm: squares share a sign": (lambda x: torch.nn.functional.layer_norm(x, (64,)), (R(8, 64),),
                                         [(64, 64)]),
    "vector norm": (lambda x: torch.linalg.vector_norm(x, dim=1), (R(3, 777),), [(777, 777)]),
    "elementwise only": (lambda x: torch.tanh(x) * 2 + 1, (R(4, 100),), [(1, 0)]),
    # the matmul's K = 50 is longer than the sum over its 12 outputs, which cancel
    "the longest on the way, through a view": (lambda a, b: (a @ b).reshape(-1).sum(), (R(4, 50), R(50, 3)),
                                               [(50, 0)]),
    "two outputs, each its own": (lambda a, b: (a @ b, a * 2), (P(4, 90), P(90, 3)), [(90, 90), (1, 0)]),
}


@pytest.mark.parametrize("name", list(LENGTHS))
def test_reduction_lengths_recorded_per_output(name):
    fn, inputs, want = LENGTHS[name]
    got = recorded(fn, *inputs)
    assert got == want, (name, got)


def test_the_plan_records_each_outputs_reduction_length():
    class Model(torch.nn.Module):
        def forward(self, a, b):
            return torch.matmul(a, b), a.abs()

    a, b = torch.rand(8, 4096), torch.rand(4096, 16)
    outs = [list(Model()(a, b))]
    why, pooled, _ = _float64_check(Model(), [[a, b]], outs, a.numel() * 4 + b.numel() * 4, 1 << 34, CFG)
    assert why == "" and [(p.reduction, p.same_sign) for p in pooled] == [(4096, 4096), (1, 0)]
    assert all(isinstance(p, RefStats) and p.scale > 0 for p in pooled)


def test_floors_unchanged_for_short_reductions_and_rising_for_long_ones():
    t = CFG.tol_scale
    assert accumulation_floors(0, 0, t) == (t, t) == accumulation_floors(16384, 16384, t)
    assert accumulation_floors(1 << 20, 0, t) == (t, t)  # a zero-mean 1M sum: its error is under the floor
    s, r = accumulation_floors(786432, 786432, t)
    assert r > 1e-3 and s == t
    assert accumulation_floors(1 << 24, 0, t)[0] > t


@pytest.fixture(scope="module")
def large_k():
    """The extra-shape trial of KernelBench 6_Matmul_with_large_K_dimension: K = 786432, positive inputs."""
    torch.manual_seed(0)
    k = 3 << 18
    a, b = torch.rand(8, k), torch.rand(k, 16)
    return a, b, a @ b, a.double() @ b.double(), k


def test_honest_sequential_matmul_at_large_k_passes_with_its_reduction_length(large_k):
    a, b, r32, r64, k = large_k
    out = sequential_matmul(a, b)
    status, ev = judge(out, r32, r64, RefStats(0.0, float(r64.abs().max()), k, k))
    assert status == "pass", ev.details


def test_honest_sequential_matmul_at_large_k_was_rejected_by_the_fixed_floor(large_k):
    """The fault: without the reduction length (the floor of earlier versions) the honest order is `wrong`."""
    a, b, r32, r64, _ = large_k
    status, ev = judge(sequential_matmul(a, b), r32, r64, RefStats(0.0, float(r64.abs().max())))
    assert status != "pass"


def test_bf16_lowering_of_a_short_matmul_is_still_c13():
    torch.manual_seed(3)
    a, b = torch.rand(32, 4096), torch.rand(4096, 32)
    out = a.bfloat16().float() @ b.bfloat16().float()
    status, ev = judge(out, a @ b, a.double() @ b.double(), RefStats(0.0, 0.0, 4096, 4096))
    assert status == "cheat" and ev.codes == {cheats.C13}, (status, ev.details)


# ---------------------------------------------------------------------------- scans (a running sum's accumulator)
# An element of a sequential scan carries the rounding of every term before it on its line: after an excursion
# the walk may come back near zero, its late blocks small, their error the excursion's. The budget's scale of a
# block of a scan's output is the largest partial sum of its row (verifier/judge/numerics.py ``scan_scale``); the
# test_verifier_precision case cumsum_32768_fp32 failed this way about once in 3,000 plans at its extra shape
# (16 x 65536) before it. The lowered scans stay C13: tests/redteam/test_redteam_precision.py.

def scanned(x: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(np.cumsum(x.numpy(), axis=-1, dtype=np.float32))


def excursion(rows: int = 8, length: int = 32768, height: float = 1000.0) -> torch.Tensor:
    """Increments of a signal that rises to about ``height`` over the first half of each row and comes back to
    zero, then small noise that stays near zero (an integration task's inputs)."""
    t = torch.linspace(0, 1, length // 2 + 1, dtype=torch.float64)
    path = torch.sin(torch.pi * t)[None] * (height * (1 + torch.rand(rows, 1, dtype=torch.float64)))
    up = torch.diff(path, dim=1)
    tail = 0.5 * torch.randn(rows, length - length // 2, dtype=torch.float64)
    return torch.cat([up, torch.diff(tail, dim=1, prepend=torch.zeros(rows, 1, dtype=torch.float64))], 1).float()


def scan_kinds(fn, *inputs) -> list[int]:
    return [r.scan for r in reductions(fn, *inputs)]


def test_scans_are_recorded_with_the_dimension_they_run_along():
    x = torch.randn(6, 70)
    assert scan_kinds(lambda t: torch.cumsum(t, 1), x) == [SCAN_ROWS]
    assert scan_kinds(lambda t: torch.cumsum(t, -1) * 2 + 1, x) == [SCAN_ROWS]  # elementwise after it
    assert scan_kinds(lambda t: torch.flip(torch.cumsum(torch.flip(t, [1]), 1), [1]), x) == [SCAN_ROWS]  # reversed
    assert scan_kinds(lambda t: torch.cumsum(t, 0), x) == [SCAN_OTHER]
    assert scan_kinds(lambda t: torch.cumsum(t, 1).t(), x) == [SCAN_OTHER]  # its rows are no longer the output's
    assert scan_kinds(lambda t: torch.cumsum(t, 1).reshape(-1, 35), x) == [SCAN_OTHER]
    sq = torch.randn(8, 8)  # a transpose of a square keeps the shape, not the rows
    assert scan_kinds(lambda t: torch.cumsum(t, 1).transpose(0, 1).contiguous(), sq) == [SCAN_OTHER]
    assert scan_kinds(lambda t: (torch.cumsum(t, 1), t.sum(1), t * 3), x) == [SCAN_ROWS, SCAN_NONE, SCAN_NONE]
    assert scan_kinds(lambda t: torch.cumprod(t, 1), x) == [SCAN_NONE]  # relative error: the rtol term
    # only while the values stay partial sums: a mean so far (a factor per row) keeps the mark, an exp or a
    # factor per element drops it (the budget of earlier versions then), a difference of two sums keeps it
    assert scan_kinds(lambda t: torch.cumsum(t, 1) / torch.arange(1, 71, dtype=t.dtype)[None], x) == [SCAN_NONE]
    assert scan_kinds(lambda t: torch.cumsum(t, 1) / t.shape[1], x) == [SCAN_ROWS]
    assert scan_kinds(lambda t: torch.cumsum(t, 1) / t.abs().sum(1, keepdim=True), x) == [SCAN_ROWS]
    assert scan_kinds(lambda t: torch.exp(torch.cumsum(t, 1)), x) == [SCAN_NONE]
    assert scan_kinds(lambda t: torch.cumsum(t, 1) @ t.t(), x) == [SCAN_NONE]
    segsum = lambda t: (lambda c: c[..., :, None] - c[..., None, :])(torch.cumsum(t, -1))  # noqa: E731
    assert scan_kinds(segsum, x) == [SCAN_OTHER]
    assert scan_kinds(lambda t: torch.exp(segsum(t)), x) == [SCAN_NONE]  # Mamba's segment sums


def test_the_plan_records_a_scan_on_an_output():
    class Model(torch.nn.Module):
        def forward(self, x):
            return torch.cumsum(x, dim=1), x.sum(1)

    x = torch.randn(4, 512)
    why, pooled, _ = _float64_check(Model(), [[x]], [list(Model()(x))], x.numel() * 4, 1 << 34, CFG)
    assert why == "" and [(p.reduction, p.scan) for p in pooled] == [(512, SCAN_ROWS), (512, SCAN_NONE)]


@pytest.mark.parametrize("along", ["rows", "rows reversed", "columns"])
def test_an_honest_sequential_scan_back_near_zero_after_an_excursion_passes(along):
    torch.manual_seed(5)
    x = excursion()
    if along == "rows":
        fn, out = (lambda t: torch.cumsum(t, 1)), scanned(x)
    elif along == "rows reversed":  # from the right: the excursion first
        x = x.flip(1).contiguous()
        fn, out = (lambda t: torch.flip(torch.cumsum(torch.flip(t, [1]), 1), [1])), scanned(x.flip(1)).flip(1)
    else:
        x = x.t().contiguous()
        fn, out = (lambda t: torch.cumsum(t, 0)), scanned(x.t().contiguous()).t().contiguous()
    r32, r64 = fn(x), fn(x.double())
    r, = reductions(fn, x)
    status, ev = judge(out, r32, r64, RefStats(0.0, float(r64.abs().max()), r.length, r.same_sign, r.scan))
    assert status == "pass", ev.details
    # the fault: with the block's own scale (the budget of earlier versions) the same honest order failed, 15% of
    # its elements over budget, and was taken for a lowering (C13)
    status, ev = judge(out, r32, r64, RefStats(0.0, float(r64.abs().max()), r.length, r.same_sign))
    assert status != "pass", ev.details


def test_a_tiled_scan_missing_a_carry_after_the_excursion_still_fails():
    """The wider scale is the rounding the accumulator can carry, not room for a logic error: a tiled scan whose
    tile at 24576 does not add the carry of the tiles before it is off by that partial sum (of the size of the
    row's values there) on the rest of the row."""
    torch.manual_seed(5)
    x = excursion()
    out = scanned(x)
    out[:, 24576:] = scanned(x[:, 24576:].contiguous())
    fn = lambda t: torch.cumsum(t, 1)  # noqa: E731
    r64 = fn(x.double())
    r, = reductions(fn, x)
    assert r.scan == SCAN_ROWS
    status, ev = judge(out, fn(x), r64, RefStats(0.0, float(r64.abs().max()), r.length, r.same_sign, r.scan))
    assert status != "pass", ev.details
    assert "differ from the reference" in ev.details[0], ev.details
