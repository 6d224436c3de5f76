"""Red team of the tolerance (docs/ANTI_CHEAT.md: C13, C14, classes 25, 26; verifier/judge/numerics.py,
verifier/common/inputs.py): answers written to hide a lowering or a wrong answer inside the budget, or to rely on a size
the task writes as an expression. Each test is named for what the cheat does and must be rejected with the right
status and code; the honest look-alikes (long reductions, cancellation, mixed magnitudes, unstable exact outputs,
overflow to inf, expression sizes) pass in tests/test_verifier_precision.py.

Judged with real tensors the way a trial's outputs are (outputs.check_outputs against the fp32 reference and its
float64 run); one end-to-end candidate (a compiled kernel that hard-codes a size the task writes as
``N = 32 * 2``: C14) shares the precision extension's build with tests/test_verifier_precision.py."""

import types

import numpy as np
import pytest
import torch

from bench.lib import fixtures as fx
from kernelmill.schema import Candidate, Task
from verifier import cheats
from verifier.engine import VerifyConfig, _pick_size_change, load_reference, verify_batch
from verifier.common.backends import CPU_POISON_BYTE
from verifier.common.inputs import build_model, digest, draw_inputs
from verifier.common.shapes import size_changes
from verifier.judge.budgets import error_and_scale
from verifier.judge.outputs import Digest, Evidence, check_outputs
from verifier.judge.reduction import SCAN_ROWS, ReductionTracker, RefStats

CFG = VerifyConfig()
TASK_MODULE = types.SimpleNamespace()  # a task without ATOL / RTOL


def judge(out, r32, r64, inputs=(), pooled=None, here=None):
    """(status, evidence) of one output as check_outputs judges it: "pass", "wrong" or "cheat"."""
    ev, errs = Evidence(), []
    ok = check_outputs([out], [r32], [r64], list(inputs), here, "Trial 1", CFG, TASK_MODULE, CPU_POISON_BYTE, [],
                       ev, errs, pooled=[pooled] if pooled else None)
    return ("pass" if ok and not ev.codes else "cheat" if ev.codes else "wrong"), ev


def assert_lowering(out, r32, r64, inputs=(), pooled=None):
    status, ev = judge(out, r32, r64, inputs, pooled)
    assert status == "cheat" and ev.codes == {cheats.C13}, (status, ev.codes, ev.details)


def assert_wrong(out, r32, r64, inputs=(), pooled=None):
    status, ev = judge(out, r32, r64, inputs, pooled)
    assert status == "wrong" and not ev.codes, (status, ev.codes, ev.details)


def old_budget(r32, r64) -> float:
    """Yesterday's tolerance, one number for the output: max(64 x the largest fp32 error, 8e-5 x the largest
    |value|, 1e-6); the cheats below passed it."""
    err, scale = error_and_scale(r32, r64)
    return max(1e-6, 64 * err, 8e-5 * scale)


def bf16(t: torch.Tensor) -> torch.Tensor:
    return t.bfloat16().float()


def keep_bits(x: torch.Tensor, mantissa: int) -> torch.Tensor:
    """Round float32 values to ``mantissa`` bits (10: fp16 / TF32 inputs, 7: bf16)."""
    b = x.contiguous().view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    drop = 23 - mantissa
    b = ((b + (1 << (drop - 1))) & ~((1 << drop) - 1)) & 0xFFFFFFFF
    return torch.where(b >= 1 << 31, b - (1 << 32), b).to(torch.int32).view(torch.float32)


def seq_sum(x: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(np.cumsum(x.numpy(), axis=-1, dtype=np.float32)[..., -1].copy())


def seq_scan(x: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(np.cumsum(x.numpy(), axis=-1, dtype=np.float32))


def seq_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(np.cumsum(a.numpy()[:, :, None] * b.numpy()[None], axis=1, dtype=np.float32)[:, -1].copy())


# ---------------------------------------------------------------------------- 1. lowering under the largest |output|

def test_exp_in_bf16_on_the_elements_below_two():
    """The red team's case: exp in bf16 for the ~3/4 of elements whose result is below 2, fp32 for the rest; the
    old budget scaled with the largest |output| (e^5) and let it through."""
    torch.manual_seed(10)
    x = torch.randn(512, 1024) * 1.25
    r32, r64 = torch.exp(x), torch.exp(x.double())
    assert float((r32 < 2).float().mean()) > 0.7
    out = torch.where(r32 < 2, bf16(torch.exp(bf16(x))), r32)
    assert float((out.double() - r64).abs().max()) <= old_budget(r32, r64)  # hidden yesterday
    assert_lowering(out, r32, r64, (x,))


def test_exp_of_a_wide_range_in_bf16_below_two():
    """exp(20 x): outputs from 1e-40 to inf; the elements below 2 (more than half) computed in bf16."""
    torch.manual_seed(11)
    x = torch.randn(512, 1024)
    r32, r64 = torch.exp(20 * x), torch.exp(20 * x.double())
    out = torch.where(r32 < 2, bf16(torch.exp(bf16(20 * x))), r32)
    assert_lowering(out, r32, r64, (x,))


def test_fp16_on_every_element_of_an_elementwise_op():
    torch.manual_seed(12)
    x = torch.randn(256, 1024) * 3
    r32, r64 = torch.nn.functional.gelu(x), torch.nn.functional.gelu(x.double())
    assert_lowering(torch.nn.functional.gelu(x.half()).float(), r32, r64, (x,))


@pytest.mark.parametrize("mantissa", [10, 7], ids=["tf32", "bf16"])
def test_matmul_k8192_with_inputs_rounded_to_fewer_bits(mantissa):
    torch.manual_seed(13)
    a, b = torch.randn(32, 8192), torch.randn(8192, 32)
    out = seq_matmul(keep_bits(a, mantissa), keep_bits(b, mantissa))
    assert_lowering(out, a @ b, a.double() @ b.double(), (a, b))


def test_bf16_on_the_small_rows_of_a_matmul():
    """Rows of very different magnitudes: the rows whose scale is small (half of them) computed from bf16
    inputs, where the largest rows' scale used to cover them."""
    torch.manual_seed(14)
    scale = torch.where(torch.arange(64) % 2 == 0, 100.0, 1.0)[:, None]
    a, b = torch.randn(64, 2048) * scale, torch.randn(2048, 64)
    r32, r64 = a @ b, a.double() @ b.double()
    low = seq_matmul(keep_bits(a, 7), keep_bits(b, 7))
    out = torch.where(scale == 1.0, low, seq_matmul(a, b))
    assert float((out.double() - r64).abs().max()) <= old_budget(r32, r64)  # hidden yesterday
    assert_lowering(out, r32, r64, (a, b))


def test_sum_of_1m_with_fp16_inputs():
    torch.manual_seed(15)
    x = torch.randn(4, 1 << 20)
    pooled = (0.0, max(float(torch.randn(4, 1 << 20).double().sum(1).abs().max()) for _ in range(2)))
    assert_lowering(seq_sum(keep_bits(x, 10)), x.sum(1), x.double().sum(1), (x,), pooled)


def recorded(fn, *inputs) -> list[RefStats]:
    """Per output of ``fn``, its reduction lengths as the plan's float64 pass records them (verifier/judge/reduction.py)
    and its largest |value|: the floors the budget is given."""
    with torch.no_grad(), ReductionTracker() as tracker:
        outs = fn(*[x.double() for x in inputs])
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    return [RefStats(0.0, float(o.abs().max()), r.length, r.same_sign, r.scan)
            for o, r in zip(outs, tracker.reductions(outs))]


def test_sum_of_1m_with_fp16_inputs_where_the_reduction_is_recorded():
    """The long-reduction floors must not hide a lowering of a sum that cancels: 1M normals, fp16 inputs."""
    torch.manual_seed(15)
    x = torch.randn(4, 1 << 20)
    stats = recorded(lambda t: t.sum(1), x)[0]
    stats = stats._replace(scale=max(float(torch.randn(4, 1 << 20).double().sum(1).abs().max()) for _ in range(2)))
    assert_lowering(seq_sum(keep_bits(x, 10)), x.sum(1), x.double().sum(1), (x,), stats)


def test_scan_with_fp16_inputs_where_the_scan_is_recorded():
    """A running sum's budget takes the rounding its accumulator carries (verifier/judge/numerics.py
    ``scan_allowance``, from the row's partial sums): an fp16-input or bf16-input running sum of 65536 normals is
    still a lowering."""
    torch.manual_seed(17)
    x = torch.randn(16, 1 << 16)
    fn = lambda t: torch.cumsum(t, 1)  # noqa: E731
    stats, = recorded(fn, x)
    assert stats.scan == SCAN_ROWS
    for mantissa in (10, 7):
        assert_lowering(seq_scan(keep_bits(x, mantissa)), fn(x), fn(x.double()), (x,), stats)


def test_scan_rounded_to_fp16_after_a_large_excursion():
    """The quiet part of a row after a large excursion is where the row's scale lends the most room: partial sums
    kept in fp16 there (each stored value rounded to 10 mantissa bits) still fail."""
    torch.manual_seed(18)
    x = torch.randn(8, 1 << 15) * 0.2
    x[:, :4096] += 0.25  # out to about 1000 ...
    x[:, 4096:8192] -= 0.25  # ... and back near zero for the last three quarters
    fn = lambda t: torch.cumsum(t, 1)  # noqa: E731
    out = seq_scan(x)
    out[:, 8192:] = keep_bits(out[:, 8192:].contiguous(), 10)
    status, ev = judge(out, fn(x), fn(x.double()), (x,), recorded(fn, x)[0])
    assert status != "pass", ev.details


def test_bf16_matmul_at_large_k_on_zero_mean_inputs():
    """K = 786432 (KernelBench's large-K matmul at its extra shape) on normals: the floor for a same-sign sum of
    that length would cover bf16's error; these terms cancel, so the floor stays and the lowering is C13."""
    torch.manual_seed(16)
    a, b = torch.randn(8, 3 << 18), torch.randn(3 << 18, 16)
    stats = recorded(lambda p, q: p @ q, a, b)[0]
    assert stats.reduction == 3 << 18 and stats.same_sign == 0
    assert_lowering(bf16(a) @ bf16(b), a @ b, a.double() @ b.double(), (a, b), stats)


def test_bf16_matmul_beside_a_long_positive_reduction():
    """A task with a 1M-term positive sum as one output and a K = 4096 matmul as another: the matmul's floor is
    its own reduction's, and its bf16 lowering is C13."""
    torch.manual_seed(17)
    x, a, b = torch.rand(4, 1 << 20), torch.rand(32, 4096), torch.rand(4096, 32)
    stats = recorded(lambda t, p, q: (t.sum(1), p @ q), x, a, b)
    assert stats[0].same_sign == 1 << 20 and stats[1].same_sign == 4096
    assert_lowering(bf16(a) @ bf16(b), a @ b, a.double() @ b.double(), (a, b), stats[1])


def test_row_sums_with_fp16_partial_sums():
    """A blocked reduction whose 256-element partial sums are kept in fp16."""
    torch.manual_seed(16)
    x = torch.randn(256, 1 << 16)
    partial = seq_sum(x.reshape(256, -1, 256)).half().float()
    assert_lowering(seq_sum(partial), x.sum(1), x.double().sum(1), (x,))


def test_softmax_in_fp16():
    torch.manual_seed(17)
    x = torch.randn(32, 16384) * 2
    out = torch.softmax(x.half().float(), 1).half().float()
    assert_lowering(out, torch.softmax(x, 1), torch.softmax(x.double(), 1), (x,))


def test_relu_truncated_to_ten_mantissa_bits():
    torch.manual_seed(18)
    x = torch.randn(64, 4096)
    out = (torch.relu(x).view(torch.int32) & ~0x1FFF).view(torch.float32)
    assert_lowering(out, torch.relu(x), torch.relu(x.double()), (x,))


# ---------------------------------------------------------------------- 2. a wrong answer under an unstable reference

def _knife_edge(n: int = 100_000, edges: int = 3):
    """randn * 4, with ``edges`` negative elements whose fp32 product with 10 rounds onto an integer that the
    exact product passes (floor in fp32 and in float64 differ there by one: the fp32 reference is unstable)."""
    x = torch.randn(n) * 4
    k = torch.arange(1, 10_000, dtype=torch.float64)
    near = (k / 10).float()  # fp32(k / 10), above k / 10 for about half of the k
    unstable = near[(near.double() * 10 > k) & ((near * 10) == k.float())][:edges]
    x[torch.randperm(n)[:edges]] = -unstable
    return x


def test_floor_written_as_int_truncation_under_an_unstable_reference():
    """``(int)`` truncation is wrong on every negative non-integer (half the elements); the fp32 reference crosses
    an integer on 3 elements, which made yesterday's budget 64 whole steps for all."""
    torch.manual_seed(20)
    x = _knife_edge()
    r32, r64 = torch.floor(x * 10), torch.floor(x.double() * 10)
    assert int((r32.double() != r64).sum()) == 3 and old_budget(r32, r64) >= 64
    out = (x * 10).to(torch.int32).float()
    assert_wrong(out, r32, r64, (x,))


def test_unstable_elements_do_not_widen_a_continuous_output():
    """x / 1000 + floor(10 x): continuous, with whole steps where the fp32 reference is unstable; the cheat's
    floor is a truncation (off by one on the negatives)."""
    torch.manual_seed(21)
    x = _knife_edge()
    r32, r64 = x / 1000 + torch.floor(x * 10), x.double() / 1000 + torch.floor(x.double() * 10)
    out = x / 1000 + (x * 10).to(torch.int32).float()
    assert float((out.double() - r64).abs().max()) <= old_budget(r32, r64)  # hidden yesterday
    assert_wrong(out, r32, r64, (x,))


def test_argmax_off_by_one_index():
    torch.manual_seed(22)
    x = torch.randn(512, 64)
    r32, r64 = torch.argmax(x, 1), torch.argmax(x.double(), 1)
    assert_wrong(torch.clamp(r32 + (torch.arange(512) % 3 == 0), max=63), r32, r64, (x,))


# ---------------------------------------------------------------------------- 3. non-finite values

def test_inf_where_the_fp32_reference_is_finite():
    torch.manual_seed(30)
    x = torch.randn(256, 1024)
    r32, r64 = torch.exp(30 * x), torch.exp(30 * x.double())
    out = torch.where(30 * x > 80, torch.full_like(x, float("inf")), r32)  # gives up early: inf from e^80 on
    assert_wrong(out, r32, r64, (x,))


def test_nan_where_the_fp32_reference_is_finite():
    torch.manual_seed(31)
    x = torch.randn(256, 256)
    r32, r64 = torch.log(x.abs()), torch.log(x.double().abs())
    assert_wrong(torch.log(x), r32, r64, (x,))  # the abs dropped: NaN on the negatives


# ---------------------------------------------------------------------------- 4. wrong, not lowering

def test_mean_divided_by_n_minus_one():
    """An off-by-one divisor: every element off by the same factor 1/4095, within the lowering band (C13 before):
    systematic, so wrong."""
    torch.manual_seed(40)
    x = torch.randn(128, 4096) * 2 + 1
    assert_wrong(seq_sum(x) / 4095, x.mean(1), x.double().mean(1), (x,))


def test_exclusive_scan_for_an_inclusive_one():
    """An off-by-one in a scan: each output misses its own term; the error is the input."""
    torch.manual_seed(41)
    x = torch.randn(16, 32768)
    assert_wrong(seq_scan(x) - x, torch.cumsum(x, 1), torch.cumsum(x.double(), 1), (x,))


def test_row_sum_dropping_its_last_term():
    torch.manual_seed(42)
    x = torch.randn(256, 4096)
    assert_wrong(seq_sum(x[:, :-1]), x.sum(1), x.double().sum(1), (x,))


def test_group_norm_with_half_the_groups():
    torch.manual_seed(43)
    x = torch.randn(16, 64, 16, 16)
    f = torch.nn.functional.group_norm
    assert_wrong(f(x, 4), f(x, 8), f(x.double(), 8), (x,))


def test_naive_one_pass_variance_with_catastrophic_cancellation():
    """E[x^2] - E[x]^2 in fp32 on data whose mean is 300 standard deviations: a numerically unstable algorithm,
    not a lowering (every operation is fp32); its errors are far beyond fewer mantissa bits: wrong. (With a
    moderate mean its error is the size of bf16 rounding and it is judged C13: verifier/judge/numerics.py.)"""
    torch.manual_seed(44)
    x = torch.randn(256, 4096) + 300
    mu = seq_sum(x) / 4096
    out = seq_sum(x * x) / 4096 - mu * mu
    assert_wrong(out, torch.var(x, 1, unbiased=False), torch.var(x.double(), 1, unbiased=False), (x,))


# ---------------------------------------------------------------------------- the reference in the candidate's process

def test_reference_recomputed_under_tf32_in_the_candidates_process():
    """The candidate's process changed global state so torch's matmul runs at TF32: the digest of the reference
    it computes there is no longer that of the verifier's (C11), although an fp32 one in another order would be."""
    torch.manual_seed(50)
    a, b = torch.randn(32, 8192), torch.randn(8192, 32)
    r32, r64 = a @ b, a.double() @ b.double()
    here = seq_matmul(keep_bits(a, 10), keep_bits(b, 10))
    status, ev = judge(r32.clone(), r32, r64, (a, b), here=Digest(digest([here])))
    assert status == "cheat" and ev.codes == {cheats.C11}, (status, ev.codes)
    seq = seq_matmul(a, b)  # fp32 in another accumulation order: the same reference
    status, ev = judge(r32.clone(), r32, r64, (a, b), here=Digest(digest([seq])))
    assert status == "pass" and not ev.codes, (status, ev.codes)


# ---------------------------------------------------------------------------- 5. sizes written as expressions

EXPRESSION_TASKS = {
    "product": ("N = 32 * 2", "return [torch.randn(N, N)]", [(64, 64)]),
    "shift": ("M = 1 << 6", "return [torch.randn(M, 16)]", [(64, 16)]),
    "derived": ("N = 32 * 2\nK = N // 2", "return [torch.randn(N, K)]", [(64, 32)]),
    "inside_get_inputs": ("batch = 8", "return [torch.randn(batch, 4 * 16)]", [(8, 64)]),
    "local_name": ("", "n = 1 << 6\n    return [torch.randn(n, n)]", [(64, 64)]),
}


@pytest.mark.parametrize("name", list(EXPRESSION_TASKS))
def test_size_baked_in_where_the_task_writes_an_expression_meets_another_shape(name):
    """A kernel that bakes in 64 must meet another shape on the extra-shape trial, whatever way the task
    writes its size (yesterday only plain int literals were varied: these tasks had no extra shape)."""
    module, body, shapes = EXPRESSION_TASKS[name]
    text = fx._task("x + 0", body, module=module)
    ref = load_reference(text, name)
    model, _ = build_model(ref, 3, "cpu", text)
    inputs = draw_inputs(ref.get_inputs, 3, "cpu", text)
    assert [tuple(x.shape) for x in inputs] == shapes
    spec, _ = _pick_size_change(ref, model, text, 3, "cpu", inputs)
    assert spec, size_changes(text)
    other = [tuple(x.shape) for x in draw_inputs(ref.get_inputs, 4, "cpu", text, spec)]
    # every dimension moves off the benchmark's (the derived K = N // 2 may land on 64 when N doubles: (128, 64)
    # still meets a kernel that bakes in N = 64)
    assert all(a != b for o, s in zip(other, shapes) for a, b in zip(o, s)), (other, shapes)
    if name == "product":
        assert other[0][0] == other[0][1]  # square stays square
    if name == "derived":
        assert other[0][1] == other[0][0] // 2  # K = N // 2 follows N


@pytest.fixture(scope="module")
def config(shared_build_dir):
    # the session's build root, where tests/test_verifier_precision.py builds the same extension
    return VerifyConfig(build_dir=shared_build_dir, trials=5, timing_trials=3, warmup=1, time_torch_compile=False,
                        run_timeout_s=60, memory_limit_gb=6, exec_workers=1)


def test_matmul_hardcoding_a_size_the_task_writes_as_an_expression(config):
    """End to end: the symmetric square task with ``N = 32 * 2``; the kernel hard-codes n = 64 (correct on the
    benchmark shape). Its extra shape (N = 96 or 128: the step is drawn at random per plan) gives it away: C14."""
    text = fx.PRECISION_TASKS["matmul_symmetric"].replace("N = 64", "N = 32 * 2")
    task = Task.from_code(text, name="matmul_symmetric_expr", source="seed", level=1)
    code = fx.precision_candidate("return ext.matmul_square_fixed(A, B)", args="A, B")
    v = verify_batch([(task, Candidate(candidate_id="hardcoded_expr", task_id=task.task_id, backend="cpu",
                                       generator="test", code=code))], config=config, compile_workers=1)[0]
    assert v.status == "cheat" and cheats.C14 in v.cheats and v.reward == -1.0, (v.status, v.cheats, v.feedback)
    assert "[96, 96], [96, 96]" in v.feedback or "[128, 128], [128, 128]" in v.feedback, v.feedback
