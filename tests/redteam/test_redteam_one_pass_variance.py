"""Fidelity of the budget on a one-pass variance, and the lowerings it must still catch (docs/ANTI_CHEAT.md class 117).

Model-written normalisation kernels take a group's variance in one pass (a running sum and sum of squares, then
E[x^2] - E[x]^2). Its error relative to the variance is the sums' relative error times E[x^2] / Var of the group: a
batch norm after a linear layer on ``torch.rand`` inputs has channels whose mean lies several standard deviations
from zero (E[x^2] / Var 24..48), and its honest kernel missed the budget's relative floor, a fixed 8e-5, on a few
hundred elements of those channels on most draws (``wrong``: test_redteam_timed_margin.py kept it from being a
cheat, not from failing).

Closed per element, not per output: the plan's float64 pass records where a training batch norm, a layer or group
norm or a var / std lies on an output's way (verifier/judge/reduction.py ``variance_lengths``: the op's same-sign
length x E[x^2] / Var of the element's group, at most ``KAPPA_MAX``, carried through pointwise ops and reshapes), and
every judged float64 run of such a task records it again for its own weights and inputs (a job draws its own
weights: verifier/judge/outputs.py ``reference64_judged``; the extra shape's trial its own reduction lengths too); the
budget's relative floor of each element is the same-sign floor of that length (verifier/judge/budgets.py
``variance_floor``). A channel near zero mean keeps the tight floor, so a lowering (an fp16 output, TF32 products)
still misses on most elements and is C13.
"""

import types

import pytest
import torch
import torch.nn as nn

from kernelmill.schema import Candidate, Task
from tests.redteam.test_redteam_timed_margin import NORM_TASK, ONE_PASS
from verifier import cheats
from verifier.common.backends import CPU_POISON_BYTE
from verifier.engine import VerifyConfig, verify_batch
from verifier.judge.budgets import budget_for
from verifier.judge.numerics import broadcast_take, float64_model
from verifier.judge.outputs import Evidence, check_outputs, reference64_judged
from verifier.judge.plan import _float64_outputs
from verifier.judge.reduction import ACC_FOLDED, EPS32, FOLDED_TRACKED, KAPPA_MAX, ReductionTracker, RefStats

CFG = VerifyConfig()


def spreads(fn, *inputs) -> list:
    with ReductionTracker() as tracker:
        outs = fn(*inputs)
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    return [r.spread for r in tracker.reductions(outs)]


def kappa(h: torch.Tensor, dims) -> torch.Tensor:
    var, mean = torch.var_mean(h, dim=dims, correction=0, keepdim=True)
    return (1 + mean * mean / var).clamp(1, KAPPA_MAX)


def test_the_plan_records_each_group_s_amplification_per_element():
    """Training batch norm: per channel (its length x E[x^2] / Var); eval: none (running statistics, no sums); layer
    norm: per row; group norm: per (sample, group); var: per reduced group; through pointwise ops and a reshape
    (instance norm reshapes around a batch norm), dropped through a matmul (the other floors judge what it mixes)."""
    torch.manual_seed(0)
    x = torch.rand(512, 32, dtype=torch.float64)
    lin = nn.Linear(32, 16).double()
    bn = nn.BatchNorm1d(16).double()
    (s,) = spreads(lambda v: torch.relu(bn(lin(v))) * 2 + 1, x)
    with torch.no_grad():
        want = 512 * kappa(lin(x), [0])
    assert s.shape == (1, 16) and torch.allclose(s.double(), want, rtol=1e-5), (s, want)
    assert float(s.max()) > 2 * 512  # a channel far from zero mean
    bn.eval()
    assert spreads(lambda v: bn(lin(v)), x) == [None]
    ln = nn.LayerNorm(64).double()
    y = torch.rand(8, 64, dtype=torch.float64) + torch.arange(8, dtype=torch.float64)[:, None]
    (s,) = spreads(ln, y)
    assert s.shape == (8, 1) and torch.allclose(s.double(), 64 * kappa(y, [1]), rtol=1e-5)
    gn = nn.GroupNorm(2, 4).double()
    z = torch.rand(3, 4, 5, 5, dtype=torch.float64)
    (s,) = spreads(gn, z)
    want = (50 * kappa(z.reshape(3, 2, -1), [2])).repeat_interleave(2, dim=1).reshape(3, 4, 1, 1)
    assert s.shape == (3, 4, 1, 1) and torch.allclose(s.double(), want, rtol=1e-5)
    (s,) = spreads(nn.InstanceNorm2d(4).double(), z)
    assert s.shape == z.shape and torch.allclose(s.double(), (25 * kappa(z, [2, 3])).expand(z.shape), rtol=1e-5)
    (s,) = spreads(lambda v: v.var(1), y)
    assert s.shape == (8,) and torch.allclose(s.double(), 64 * kappa(y, [1]).reshape(8), rtol=1e-5)
    assert spreads(lambda v: bn.train()(lin(v)) @ torch.ones(16, 3, dtype=torch.float64), x) == [None]


def test_an_op_that_mixes_the_elements_folds_the_floor_into_the_scale_term():
    """Through a matmul (or a permutation, which moves the elements off their channels) the per-element record goes
    and its largest goes on as a share of the scale (``Reduction.folded``: ACC_FOLDED x EPS32 x it)."""
    torch.manual_seed(0)
    x = torch.rand(512, 32, dtype=torch.float64) * 2 + 3
    bn = nn.BatchNorm1d(32).double()
    with ReductionTracker() as tracker:
        y = bn(x)
        mixed = y @ torch.ones(32, 3, dtype=torch.float64)
        moved = y.t()
    own, r_mixed, r_moved = tracker.reductions([y, mixed, moved])
    assert own.spread is not None and own.folded == 0.0
    want = ACC_FOLDED * EPS32 * float(own.spread.max())
    for r in (r_mixed, r_moved):
        assert r.spread is None and r.folded == pytest.approx(want, rel=1e-6), r


def test_broadcast_take_reads_the_broadcast_tensor_without_making_it():
    small = torch.arange(12, dtype=torch.float32).reshape(1, 3, 1, 4)
    shape = (2, 3, 5, 4)
    idx = torch.tensor([0, 7, 19, 20, 59, 60, 119])
    assert torch.equal(broadcast_take(small, shape, idx), small.expand(shape).reshape(-1)[idx].double())
    assert torch.equal(broadcast_take(small.reshape(3, 1, 4), shape, idx), small.expand(shape).reshape(-1)[idx].double())


def one_pass_bn(h: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """The honest kernel's batch norm in fp32: one sequential pass of float sums over the rows, then E[x^2] - E[x]^2."""
    s = torch.zeros(h.shape[1])
    q = torch.zeros(h.shape[1])
    for row in h:
        s += row
        q += row * row
    mean = s / h.shape[0]
    var = q / h.shape[0] - mean * mean
    return (h - mean) / torch.sqrt(var + eps)


def _judge(out, r32, r64, pooled) -> tuple[str, Evidence]:
    ev, errs = Evidence(), []
    ok = check_outputs([out], [r32], [r64], [], None, "Trial 1", CFG, types.SimpleNamespace(), CPU_POISON_BYTE, [], ev,
                       errs, pooled=pooled)
    return ("pass" if ok and not ev.codes else "cheat" if ev.codes else "wrong"), ev


ROWS = 32768  # the batch: a one-pass sum's error grows with it (on this draw it misses the fixed floor)


@pytest.fixture(scope="module")
def gemm_bn():
    """The batch norm task's reference on one draw: (the linear layer's fp32 output, the fp32 reference's output,
    the float64 reference's, the stats the judge reads: the plan's marked, this run's spread)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 256), nn.BatchNorm1d(256))
    x = torch.rand(ROWS, 256)
    with torch.no_grad():
        h = model[0](x)
        r32 = model(x)
    plan_stats = [RefStats(0.0, float(r32.abs().max()), ROWS, ROWS, variance=True)]
    refs64, pooled = reference64_judged(float64_model(model), [x], False, plan_stats)
    return h, r32, refs64[0], pooled, model, x


def test_an_honest_one_pass_variance_passes_and_needs_its_channels_floor(gemm_bn):
    """The one-pass output passes with its channels' floors and misses without them (the fault this closes)."""
    h, r32, r64, pooled, _, _ = gemm_bn
    out = one_pass_bn(h)
    assert pooled[0].spread is not None and float(pooled[0].spread.max()) > 10 * ROWS
    assert _judge(out, r32, r64, pooled)[0] == "pass"
    assert _judge(out, r32, r64, [pooled[0]._replace(spread=None)])[0] == "wrong"


def test_a_lowering_is_still_c13_under_the_channels_floors(gemm_bn):
    """Red team: an exact batch norm rounded to fp16, and TF32 products in the linear layer, are C13 though the
    budget now widens the channels far from zero mean: the channels near it keep the tight floor."""
    _, r32, r64, pooled, model, x = gemm_bn
    b, _ = budget_for(r32, r64, CFG, None, pooled[0])
    assert b.rel_e is not None and float(b.rel_e.min()) < 1e-4 < 4e-4 < float(b.rel_e.max())
    fp16 = r64.to(torch.float16).to(torch.float32)
    status, ev = _judge(fp16, r32, r64, pooled)
    assert status == "cheat" and cheats.C13 in ev.codes, ev.codes

    h_tf32 = (tf32(x).double() @ tf32(model[0].weight.detach()).double().t() + model[0].bias.detach().double())
    lowered = nn.functional.batch_norm(h_tf32, None, None, training=True).float()
    status, ev = _judge(lowered, r32, r64, pooled)
    assert status == "cheat" and cheats.C13 in ev.codes, ev.codes


def tf32(t):
    return (t.view(torch.int32) + 0x1000 & ~0x1FFF).view(torch.float32)


@pytest.fixture(scope="module")
def bn_gemm():
    """A batch norm before a linear layer, on inputs of mean / std 7 (E[x^2] / Var 49 in every channel): (the
    input, the model, the fp32 reference's output, the float64 reference's, the stats the judge reads)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.BatchNorm1d(128), nn.Linear(128, 128))
    x = torch.rand(8192, 128) * 2 + 3
    with torch.no_grad():
        r32 = model(x)
    plan_stats = [RefStats(0.0, float(r32.abs().max()), 8192, 8192, variance=True)]
    refs64, pooled = reference64_judged(float64_model(model), [x], False, plan_stats)
    return x, model, r32, refs64[0], pooled


def test_an_honest_one_pass_norm_before_a_linear_layer_passes_by_the_folded_floor(bn_gemm):
    """The honest kernel's one-pass batch norm, then its fp32 linear layer: a pass with the folded floor, wrong on
    elements of ordinary size without it (the fault this closes: the per-element floor went at the matmul)."""
    x, model, r32, r64, pooled = bn_gemm
    assert pooled[0].spread is None and pooled[0].folded > 1e-4
    lin = model[1]
    with torch.no_grad():
        out = one_pass_bn(x) @ lin.weight.t() + lin.bias
    assert _judge(out, r32, r64, pooled)[0] == "pass"
    assert _judge(out, r32, r64, [pooled[0]._replace(folded=0.0)])[0] == "wrong"


def test_tf32_products_after_the_norm_are_still_c13(bn_gemm):
    """Red team: an exact batch norm whose linear layer multiplies in TF32 (10-bit mantissas) errs by a share of the
    output's size as the one-pass variance does; the folded floor is the measured share of an honest sum's error,
    not the budget's margin over it, so the lowering still misses on many elements (C13)."""
    x, model, r32, r64, pooled = bn_gemm
    bn, lin = model
    with torch.no_grad():
        h = nn.functional.batch_norm(x.double(), None, None, training=True, eps=bn.eps).float()
        lowered = (tf32(h).double() @ tf32(lin.weight.detach()).double().t() + lin.bias.double()).float()
    status, ev = _judge(lowered, r32, r64, pooled)
    assert status == "cheat" and cheats.C13 in ev.codes, ev.codes


def test_a_one_pass_batch_norm_before_a_convolution_passes_and_tf32_does_not():
    """The fold through a convolution (a ResNet's or a DenseNet's norm, then its 3x3 convolution): the honest
    one-pass BatchNorm2d over N x H x W positions, then an fp32 convolution, passes (wrong without the fold); the
    same convolution with TF32 products after an exact norm is rejected."""
    torch.manual_seed(0)
    bn, conv = nn.BatchNorm2d(16), nn.Conv2d(16, 16, 3, padding=1)
    model = nn.Sequential(bn, conv)
    x = torch.rand(16, 16, 24, 24) * 2 + 3
    with torch.no_grad():
        r32 = model(x)
        _, (plan,), _ = _float64_outputs(model, [[x]], [[r32]])
        plan = plan._replace(scale=float(r32.abs().max()))
        refs64, pooled = reference64_judged(float64_model(model), [x], False, [plan])
        xn = one_pass_bn(x.permute(0, 2, 3, 1).reshape(-1, 16)).reshape(16, 24, 24, 16).permute(0, 3, 1, 2)
        honest = conv(xn.contiguous())
        exact = nn.functional.batch_norm(x.double(), None, None, training=True).float().contiguous()
        lowered = nn.functional.conv2d(tf32(exact), tf32(conv.weight.detach()), conv.bias, padding=1)
    assert pooled[0].folded > FOLDED_TRACKED and pooled[0].variance
    assert _judge(honest, r32, refs64[0], pooled)[0] == "pass"
    assert _judge(honest, r32, refs64[0], [pooled[0]._replace(folded=0.0)])[0] == "wrong"
    assert _judge(lowered, r32, refs64[0], pooled)[0] != "pass"


def test_the_plan_tracks_every_judged_run_only_where_the_folded_floor_can_matter():
    """A folded floor far below the budget's relative floor (batch norms of zero-mean activations, then
    convolutions, as in a ResNet) keeps the plan's value: no judged run pays the tracker (~3 ms an op); one that can
    matter (every channel far from zero mean) is recorded again by each judged run, for its job's own weights."""
    torch.manual_seed(0)
    resnetish = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 8, 3))
    x = torch.randn(4, 8, 12, 12)
    far = nn.Sequential(nn.BatchNorm1d(64), nn.Linear(64, 32))
    y = torch.rand(4096, 64) * 2 + 3
    for model, inputs, tracked in ((resnetish, [x], False), (far, [y], True)):
        with torch.no_grad():
            out = [model(*inputs)]
        _, (stats,), _ = _float64_outputs(model, [inputs], [out])
        assert stats.folded > 0 and stats.spread is None
        assert stats.variance is tracked and (stats.folded > FOLDED_TRACKED) is tracked, stats


def test_a_job_s_floors_are_its_own_weights_not_the_plan_s():
    """The channels' floors come from the judged run (its weights, its inputs): another draw of the weights moves
    the channels far from zero mean, and the floors follow them."""
    torch.manual_seed(1)
    a = nn.Sequential(nn.Linear(64, 32), nn.BatchNorm1d(32)).double()
    torch.manual_seed(2)
    b = nn.Sequential(nn.Linear(64, 32), nn.BatchNorm1d(32)).double()
    x = torch.rand(1024, 64, dtype=torch.float64)
    marked = [RefStats(0.0, 1.0, 1024, 1024, variance=True)]
    (_, (sa,)), (_, (sb,)) = reference64_judged(a, [x], False, marked), reference64_judged(b, [x], False, marked)
    assert sa.spread is not None and sb.spread is not None
    assert int(sa.spread.argmax()) != int(sb.spread.argmax()) or not torch.allclose(sa.spread, sb.spread)
    unmarked = [RefStats(0.0, 1.0, 1024, 1024)]
    assert reference64_judged(a, [x], False, unmarked)[1][0].spread is None


def test_the_extra_shape_s_floors_are_its_own_lengths():
    """At another shape (the batch doubled), the run's own reduction lengths set the floors, not the plan's."""
    m = nn.Sequential(nn.Linear(16, 8), nn.BatchNorm1d(8)).double()
    plan_stats = [RefStats(0.0, 1.0, 512, 512, variance=True)]
    _, (s,) = reference64_judged(m, [torch.rand(1024, 16, dtype=torch.float64)], False, plan_stats, other_shape=True)
    assert (s.reduction, s.same_sign) == (1024, 1024) and float(s.spread.min()) >= 1024


def test_an_honest_one_pass_batch_norm_passes_end_to_end(shared_build_dir):
    """End to end on the cpu backend (its trials, the extra shape's, the timed calls' full checks): a pass."""
    task = Task.from_code(NORM_TASK, name="one_pass_bn", source="seed", level=2)
    cfg = VerifyConfig(build_dir=shared_build_dir, timing_trials=5, warmup=1, time_torch_compile=False,
                       run_timeout_s=120, memory_limit_gb=4)
    (v,) = verify_batch([(task, Candidate(candidate_id="one_pass", task_id=task.task_id, backend="cpu",
                                          generator="t", code=ONE_PASS))], config=cfg)
    assert v.status == "pass", v.feedback
