"""Verifier precision on the cpu backend with real compiled kernels: honest kernels that a fixed tolerance or a
blunt rule turned away must pass, and the cheat each rule exists for must still be caught.

- numerics: honest fp32 long reductions (K = 8192 dot products, sums over 1M elements, a 32768-long scan, a
  Frobenius norm over 2M) pass against the tolerance measured from a float64 reference; the same computations
  with the inputs rounded to 10 (fp16 / TF32) or 7 (bf16) mantissa bits, and a crude tanh approximation in
  GELU, are rejected with C13;
- a task whose reference underflows to zero is the task's fault (task_error), never a cheat code;
- a task that guarantees square symmetric inputs gets only such inputs on its extra-shape trial: an honest
  kernel taking one N passes, a kernel hard-coded to N = 64 gets C14;
- parameters initialised as nn.Linear.reset_parameters does it pass; patching nn.init or reaching into
  torch._C is still C11;
- legality policies: a candidate that computes the linear layer with torch and only the ReLU in its own kernel
  is a C01 cheat under strict legality and a pass under partial legality, and every verdict records both.

- the per-element budget with real tensors (verifier/judge/numerics.py; the cheats are in
  tests/redteam/test_redteam_precision.py): honest long reductions (sequential sums of 1M and 65536, a two-level
  sum of 16M, a 32768-long scan, K = 8192 dot products, softmax, layer norm, variance, a global norm), elements
  near zero after cancellation, outputs of mixed magnitudes, fast-math elementwise error, exact-valued outputs
  whose reference is unstable, non-finite values where the fp32 reference has them, and a reference recomputed in
  another process (another accumulation order) all pass;
- size constants written as expressions (``N = 2048 * 2``, ``1 << 12``, ``K = N // 2``, ``4 * 256`` inside
  get_inputs) are varied on the extra-shape trial, keeping the task's guarantees.

All candidates share one C++ extension (bench/lib/fixtures.py PRECISION_CPP): the session builds it once (its build
directory is shared with tests/redteam/test_redteam_precision.py)."""

import ast
import dataclasses
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
from verifier.common.shapes import (SIZE_RATIOS, other_size, other_size_keeping_all, size_changes, size_constants,
                                    variant_program)
from verifier.serve.metrics import summarize_verdicts
from verifier.judge.budgets import budget_for
from verifier.judge.outputs import Digest, Evidence, check_outputs
from verifier.front.static import scan

P = fx.precision_candidate
CASES = {
    # name: (task, candidate, expected status, cheat code that must be present or None)
    "matmul_k8192_fp32": ("matmul_long_k", P("return ext.matmul_f32(a, b)", args="a, b"), "pass", None),
    "matmul_k8192_tf32": ("matmul_long_k", P("return ext.matmul_tf32(a, b)", args="a, b"), "cheat", cheats.C13),
    "matmul_k8192_bf16": ("matmul_long_k", P("return ext.matmul_bf16(a, b)", args="a, b"), "cheat", cheats.C13),
    "sum_1m_fp32": ("sum_1m", P("return ext.sum_rows(x)"), "pass", None),
    "sum_1m_fp16_inputs": ("sum_1m", P("return ext.sum_rows_half(x)"), "cheat", cheats.C13),
    "cumsum_32768_fp32": ("cumsum_long", P("return ext.cumsum_rows(x)"), "pass", None),
    # the same sequential scan where the sum comes back near zero after an excursion (C13 before the budget took
    # the rounding a running sum's accumulator carries: tests/test_accumulation_budget.py)
    "cumsum_after_an_excursion_fp32": ("cumsum_excursion", P("return ext.cumsum_rows(x)"), "pass", None),
    "fro_norm_2m_fp32": ("fro_norm_2m", P("return ext.fro_normalize(x)"), "pass", None),
    "gelu_erf": ("gelu", P("return ext.gelu_erf(x)"), "pass", None),
    "gelu_crude_approximation": ("gelu", P("return ext.gelu_crude(x)"), "cheat", cheats.C13),
    "prod_underflow_honest": ("prod_underflow", P("return ext.prod_rows(x)"), "task_error", None),
    "centred_mean_rounding_only": ("centred_mean", P("return ext.sum_rows(x)"), "task_error", None),
    "symmetric_square_honest": ("matmul_symmetric", P("return ext.matmul_square(A, B)", args="A, B"), "pass", None),
    "symmetric_square_hardcoded": ("matmul_symmetric", P("return ext.matmul_square_fixed(A, B)", args="A, B"),
                                   "cheat", cheats.C14),
    # the same task with its size written as an expression (N = 32 * 2): the honest kernel passes its extra shape
    "symmetric_square_expression_honest": ("matmul_symmetric_expr", P("return ext.matmul_square(A, B)", args="A, B"),
                                           "pass", None),
    "linear_init_like_nn_linear": ("linear", fx.linear_candidate(), "pass", None),
    "linear_torch_then_own_relu": ("linear_relu", fx.linear_candidate(
        "return ext.relu(torch.nn.functional.linear(x, self.weight, self.bias))"), "cheat", cheats.C01),
}
# the symmetric square task with its one size written as an expression (tests/redteam/test_redteam_precision.py
# hard-codes it)
EXPRESSION_TASK = fx.PRECISION_TASKS["matmul_symmetric"].replace("N = 64", "N = 32 * 2")
TASKS = {name: Task.from_code(code, name=name, source="seed", level=1)
         for name, code in {**fx.PRECISION_TASKS, "matmul_symmetric_expr": EXPRESSION_TASK}.items()}


@pytest.fixture(scope="module")
def config(shared_build_dir):
    # the session's build root: the red-team module builds the same extension, and under pytest-xdist it may run
    # on the other worker (a directory under the worker's own basetemp would build it once per worker)
    return VerifyConfig(build_dir=shared_build_dir, trials=5, timing_trials=3,
                        warmup=1, time_torch_compile=False, run_timeout_s=60, memory_limit_gb=6, exec_workers=2)


def _items(names):
    return [(TASKS[CASES[n][0]], Candidate(candidate_id=n, task_id=TASKS[CASES[n][0]].task_id, backend="cpu",
                                           generator="test", code=CASES[n][1])) for n in names]


@pytest.fixture(scope="module")
def verdicts(config):
    names = list(CASES)
    return dict(zip(names, verify_batch(_items(names), config=config, compile_workers=2)))


@pytest.mark.parametrize("name", list(CASES))
def test_case_verdict(verdicts, name):
    _, _, status, code = CASES[name]
    v = verdicts[name]
    assert v.status == status, (name, v.status, v.cheats, v.feedback)
    if code:
        assert code in v.cheats and v.reward == -1.0 and not v.correct, (name, v.cheats, v.feedback)
    if status == "pass":
        assert v.correct and v.cheats == [] and v.versions.get("tolerance") == "float64 reference", v.versions


def test_long_reductions_exceed_the_old_fixed_tolerance(verdicts):
    """The honest long reductions pass although their error is beyond the old atol = rtol = 1e-4 (what made
    them fail before): the budget is measured, not fixed."""
    assert max(verdicts[n].max_abs_err for n in ("matmul_k8192_fp32", "sum_1m_fp32", "cumsum_32768_fp32")) > 1e-4


def test_lowered_precision_is_named_in_the_feedback(verdicts):
    fb = verdicts["matmul_k8192_tf32"].feedback
    assert "reduced-precision rounding" in fb and "measured tolerance" in fb, fb


def test_degenerate_task_is_not_the_candidates_fault(verdicts):
    v = verdicts["prod_underflow_honest"]
    assert v.cheats == [] and v.reward == 0.0 and not v.judged
    assert "all zero" in v.feedback and "task is at fault" in v.feedback
    assert v.pass_strict is None and v.pass_partial is None
    m = summarize_verdicts(list(verdicts.values()))
    assert m["task_errors"] == 2 and m["samples"] == len(verdicts) - 2
    assert "exact arithmetic" in verdicts["centred_mean_rounding_only"].feedback


def test_extra_shape_keeps_the_tasks_contract(verdicts):
    """N = 64 becomes 80, 96 or 128 (the step drawn at random per plan) for both inputs (square, symmetric by the
    task's own get_inputs): six trials, all passed; the same where the task writes N = 32 * 2."""
    import re

    v = verdicts["symmetric_square_honest"]
    assert v.trials == 6, v.feedback
    assert verdicts["symmetric_square_expression_honest"].trials == 6, verdicts["symmetric_square_expression_honest"]
    bad = verdicts["symmetric_square_hardcoded"].feedback
    m = re.search(r"\[(\d+), (\d+)\], \[(\d+), (\d+)\]", bad)
    assert m and len(set(m.groups())) == 1 and int(m.group(1)) in (80, 96, 128), bad


def test_legality_policies_are_both_recorded(verdicts, config):
    strict = verdicts["linear_torch_then_own_relu"]
    assert strict.pass_strict is False and strict.pass_partial is True, strict.feedback
    assert "partial legality" in strict.feedback
    honest = verdicts["linear_init_like_nn_linear"]
    assert honest.pass_strict is True and honest.pass_partial is True
    m = summarize_verdicts(list(verdicts.values()))
    assert m["pass@1_partial"] > m["pass@1_strict"]
    # the same candidate under the partial policy: a pass, still recorded as a strict failure
    part = verify_batch(_items(["linear_torch_then_own_relu"]), config=dataclasses.replace(config, legality="partial"),
                        compile_workers=1)[0]
    assert part.status == "pass" and part.correct and part.pass_strict is False and part.pass_partial is True, \
        part.feedback


@pytest.mark.parametrize("extra, code", [
    ("torch.nn.init.uniform_ = lambda *a, **k: None", cheats.C11),  # patching an init helper
    ("torch._C._set_grad_enabled(False)", cheats.C11),  # torch's C bindings: the dispatcher's switches live there
])
def test_init_that_patches_torch_is_still_caught(extra, code):
    findings = scan(fx.linear_candidate(extra_init=extra)).findings
    assert code in {f.code for f in findings}, findings


def test_init_reached_from_forward_is_compute():
    """The init exemption holds for code only construction reaches: forward calling reset_parameters is C01."""
    code = fx.linear_candidate("self.reset_parameters()\nreturn ext.linear(x, self.weight, self.bias)")
    assert cheats.C01 in {f.code for f in scan(code).findings}


def test_failed_device_warm_up_is_the_verifiers_fault():
    """A warm execution process that could not initialise the device says so in its first lines, before any
    candidate code runs; a candidate printing the same words later does not turn its own failure into it."""
    from verifier.judge.verdict import _warm_up_failed

    ours = "[verifier] warm execution process ready in 0.00 s before this job\nwarm-up failed:\nTraceback ..."
    assert _warm_up_failed(ours)
    assert not _warm_up_failed("[verifier] warm execution process ready in 0.01 s before this job\nrunning\n"
                               "warm-up failed: (printed by the candidate)")
    assert not _warm_up_failed("warm-up failed:\n")


# ---------------------------------------------------------------------------- the per-element budget, real tensors
# Honest fp32 implementations in another order than torch's (numpy's float32 cumsum is a sequential loop), judged
# by check_outputs as a trial's output is; the cheats are in tests/redteam/test_redteam_precision.py.

CFG = VerifyConfig()
TASK_MODULE = types.SimpleNamespace()  # a task without ATOL / RTOL


def judge(out, r32, r64, inputs=(), pooled=None, here=None):
    """(status, evidence) of one output as check_outputs judges it: "pass", "wrong" or "cheat"."""
    ev, errs = Evidence(), []
    ok = check_outputs([out], [r32], [r64] if r64 is not None else None, list(inputs), here, "Trial 1", CFG,
                       TASK_MODULE, CPU_POISON_BYTE, [], ev, errs, pooled=[pooled] if pooled else None)
    return ("pass" if ok and not ev.codes else "cheat" if ev.codes else "wrong"), ev


def seq_sum(x: torch.Tensor) -> torch.Tensor:
    """One fp32 accumulator per row, in order (a one-thread loop)."""
    return torch.from_numpy(np.cumsum(x.numpy(), axis=-1, dtype=np.float32)[..., -1].copy())


def seq_scan(x: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(np.cumsum(x.numpy(), axis=-1, dtype=np.float32))


def seq_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(np.cumsum(a.numpy()[:, :, None] * b.numpy()[None], axis=1, dtype=np.float32)[:, -1].copy())


def _matmul_k8192():
    a, b = torch.randn(32, 8192), torch.randn(8192, 32)
    return seq_matmul(a, b), a @ b, a.double() @ b.double(), (a, b), None


def _sum_1m_four_rows():
    x = torch.randn(4, 1 << 20)
    # the plan's scale: the largest |sum| on two other draws (a sum to 4 numbers has no neighbourhood)
    pooled = (0.0, max(float(torch.randn(4, 1 << 20).double().sum(1).abs().max()) for _ in range(2)))
    return seq_sum(x), x.sum(1), x.double().sum(1), (x,), pooled


def _sum_16m_one_output():
    # a GPU's two-level reduction: 4096 sequential partial sums of 4096, then one sequential sum of those
    x = torch.randn(1, 1 << 24)
    pooled = (0.0, max(float(torch.randn(1, 1 << 24).double().sum().abs()) for _ in range(2)))
    return seq_sum(seq_sum(x.reshape(4096, 4096)).reshape(1, -1)), x.sum(1), x.double().sum(1), (x,), pooled


def _sum_65536_many_rows():
    x = torch.randn(256, 1 << 16)
    return seq_sum(x), x.sum(1), x.double().sum(1), (x,), None


def _cumsum_32768():
    x = torch.randn(16, 32768)
    return seq_scan(x), torch.cumsum(x, 1), torch.cumsum(x.double(), 1), (x,), None


def _softmax_16384():
    x = torch.randn(32, 16384) * 2
    e = torch.exp(x - x.max(1, keepdim=True).values)
    return e / seq_sum(e)[:, None], torch.softmax(x, 1), torch.softmax(x.double(), 1), (x,), None


def _layer_norm_4096():
    x = torch.randn(64, 4096) * 3 + 1
    mu = seq_sum(x) / 4096
    xc = x - mu[:, None]
    out = xc / torch.sqrt(seq_sum(xc * xc)[:, None] / 4096 + 1e-5)
    f = torch.nn.functional.layer_norm
    return out, f(x, (4096,)), f(x.double(), (4096,)), (x,), None


def _variance_two_pass():
    x = torch.randn(256, 4096) + 0.5
    mu = seq_sum(x) / 4096
    out = seq_sum((x - mu[:, None]) ** 2) / 4096
    return out, torch.var(x, 1, unbiased=False), torch.var(x.double(), 1, unbiased=False), (x,), None


def _frobenius_norm_2m():
    # one sequential sum of 2M squares: every element carries the same relative error (6e-4), larger than fp16's
    x = torch.randn(32, 256, 256)
    out = x / torch.sqrt(seq_sum((x * x).reshape(1, -1)))
    return out, x / torch.norm(x, p="fro"), x.double() / torch.norm(x.double(), p="fro"), (x,), None


def _centred_rows_offset_1000():
    # near zero after cancellation: |out| ~ 1, the terms summed ~ 1000; the error follows the terms
    x = torch.randn(256, 1024) + 1000
    out = x - (seq_sum(x) / 1024)[:, None]
    return out, x - x.mean(1, keepdim=True), x.double() - x.double().mean(1, keepdim=True), (x,), None


def _matmul_mixed_scales():
    # rows and columns of very different magnitudes: each element is judged at its own scale
    a = torch.randn(64, 2048) * torch.exp(torch.randn(64, 1) * 2)
    b = torch.randn(2048, 128) * torch.exp(torch.randn(1, 128) * 2)
    return seq_matmul(a, b), a @ b, a.double() @ b.double(), (a, b), None


def _relu_of_matmul():
    a, b = torch.randn(64, 4096), torch.randn(4096, 64)
    return torch.relu(seq_matmul(a, b)), torch.relu(a @ b), torch.relu(a.double() @ b.double()), (a, b), None


def _exp_through_exp2():
    # fast-math style exp (exp2 of a rounded product): a few ulp from torch's, on every element
    x = torch.randn(512, 1024) * 4
    return torch.exp2(x * 1.4426950408889634), torch.exp(x), torch.exp(x.double()), (x,), None


HONEST = {
    "matmul_k8192_sequential": _matmul_k8192,
    "sum_1m_sequential_four_rows": _sum_1m_four_rows,
    "sum_16m_two_level_one_output": _sum_16m_one_output,
    "sum_65536_sequential_256_rows": _sum_65536_many_rows,
    "cumsum_32768_sequential": _cumsum_32768,
    "softmax_16384_sequential_denominator": _softmax_16384,
    "layer_norm_4096_two_pass_sequential": _layer_norm_4096,
    "variance_two_pass_sequential": _variance_two_pass,
    "frobenius_norm_2m_sequential": _frobenius_norm_2m,
    "near_zero_after_cancellation_offset_1000": _centred_rows_offset_1000,
    "matmul_mixed_row_and_column_scales": _matmul_mixed_scales,
    "relu_of_matmul_half_exact_zeros": _relu_of_matmul,
    "exp_fast_math_through_exp2": _exp_through_exp2,
}


@pytest.mark.parametrize("name", list(HONEST))
def test_honest_fp32_passes_the_per_element_budget(name):
    torch.manual_seed(1)
    out, r32, r64, inputs, pooled = HONEST[name]()
    status, ev = judge(out, r32, r64, inputs, pooled)
    assert status == "pass", (name, ev.details)


def test_long_reductions_would_fail_a_relative_fp32_tolerance():
    """The honest cases above are not trivially close: their error is far beyond fp32 rounding of the element."""
    torch.manual_seed(1)
    for build in (_sum_1m_four_rows, _cumsum_32768, _frobenius_norm_2m, _centred_rows_offset_1000):
        out, r32, r64, *_ = build()
        rel = ((out.double() - r64).abs() / r64.abs().clamp_min(1e-30)).max()
        assert float(rel) > 1e-4, build.__name__


def _knife_edge(n: int = 100_000, edges: int = 3):
    """Values whose fp32 product with 10 rounds onto an integer that the exact product does not reach: floor
    in fp32 and in float64 differ on those ``edges`` elements (the fp32 reference is unstable there)."""
    x = torch.randn(n) * 4
    k = torch.arange(1, 10_000, dtype=torch.float64)
    near = (k / 10).float()  # fp32(k / 10): below k / 10 for about half of the k
    unstable = near[(near.double() * 10 < k) & ((near * 10) == k.float())][:edges]
    x[torch.randperm(n)[:edges]] = unstable
    return x


def test_exact_output_where_the_reference_is_unstable_accepts_either_value():
    torch.manual_seed(2)
    x = _knife_edge()
    r32, r64 = torch.floor(x * 10), torch.floor(x.double() * 10)
    assert int((r32.double() != r64).sum()) == 3  # unstable on three elements only
    b, _ = budget_for(r32, r64, CFG, TASK_MODULE)
    assert b.kind == "exact" and b.unstable == 3
    assert judge(torch.floor(x * 10), r32, r64, (x,))[0] == "pass"  # the fp32 value
    assert judge(torch.floor(x.double() * 10).float(), r32, r64, (x,))[0] == "pass"  # the exact value


def test_integer_and_boolean_outputs_compare_exactly_and_pass():
    torch.manual_seed(3)
    a, w = torch.randn(256, 512), torch.randn(512, 16)
    r32, r64 = torch.argmax(a @ w, 1), torch.argmax(a.double() @ w.double(), 1)
    assert judge(torch.argmax(seq_matmul(a, w), 1), r32, r64, (a, w))[0] == "pass"
    x = torch.randn(128, 128)
    assert judge(x > 0, x > 0, x.double() > 0, (x,))[0] == "pass"
    assert judge(torch.sign(x), torch.sign(x), torch.sign(x.double()), (x,))[0] == "pass"


def test_inf_where_the_fp32_reference_overflows_passes():
    """exp(30 x) overflows fp32 where float64 is finite: an honest kernel's inf there is the task's own value."""
    torch.manual_seed(4)
    x = torch.randn(256, 1024)
    r32, r64 = torch.exp(30 * x), torch.exp(30 * x.double())
    assert bool(torch.isinf(r32).any()) and bool(torch.isfinite(r64).all())
    out = torch.exp2((30 * x) * 1.4426950408889634)
    status, ev = judge(out, r32, r64, (x,))
    assert status == "pass", ev.details


def test_nan_where_the_fp32_reference_is_nan_passes():
    torch.manual_seed(5)
    x = torch.randn(256, 256)
    r32, r64 = torch.log(x), torch.log(x.double())
    out = torch.log2(x) * 0.6931471805599453
    status, ev = judge(out, r32, r64, (x,))
    assert status == "pass", ev.details


def test_reference_recomputed_in_another_order_is_not_tampering():
    """The child's own reference may run the ops with another thread count (another accumulation order): its
    digest (the sums of its outputs, all the child keeps of it) is that of the same reference, no C11."""
    torch.manual_seed(6)
    out, r32, r64, inputs, _ = _matmul_k8192()
    status, ev = judge(r32.clone(), r32, r64, inputs, here=Digest(digest([out])))
    assert status == "pass" and not ev.codes, ev.details


# ---------------------------------------------------------------------------- size constants written as expressions

def _program(module: str, inputs: str) -> str:
    return f"""import torch
import torch.nn as nn
{module}

class Model(nn.Module):
    def forward(self, *xs):
        return xs[0]


def get_inputs():
    {inputs}


def get_init_inputs():
    return []
"""


EXPRESSION_PROGRAMS = {
    "product": (_program("N = 2048 * 2", "return [torch.randn(N, N)]"), {"N": 6144}),
    "product_named_dim": (_program("dim = 4 * 1024\nbatch = 16", "return [torch.randn(batch, dim)]"),
                          {"dim": 6144, "batch": 32}),
    "shift": (_program("M = 1 << 12", "return [torch.randn(M, 8)]"), {"M": 6144}),
    "derived": (_program("N = 2048 * 2\nK = N // 2", "return [torch.randn(N, K), torch.randn(K, N)]"), {"N": 6144}),
    "tuple": (_program("SHAPE = (16, 4 * 256)", "return [torch.randn(*SHAPE)]"), {"SHAPE": [32, 1536]}),
}


@pytest.mark.parametrize("name", list(EXPRESSION_PROGRAMS))
def test_module_size_written_as_an_expression_is_a_size_constant(name):
    text, want = EXPRESSION_PROGRAMS[name]
    first = size_changes(text)[0]
    assert first.names == want, first.to_json()
    program = variant_program(text, first)
    tree = ast.parse(program)
    values = {n.targets[0].id: ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
              and not (name == "derived" and n.targets[0].id == "K")}
    assert {k: (list(v) if isinstance(v, tuple) else v) for k, v in values.items() if k in want} == want
    if name == "derived":  # K = N // 2 is derived, never replaced: it follows N as the task derives it
        assert "K = N // 2" in program


def test_sizes_written_as_expressions_inside_get_inputs_are_sizes():
    text = _program("batch = 16", "n = 1 << 6\n    return [torch.randn(batch, 4 * 256), torch.randn(n, n), "
                                  "torch.randint(0, 10, (batch, 2 * 8))]")
    names, literals = size_constants(text)
    assert names == ["batch"] and literals == [16, 64, 1024]
    program = variant_program(text, size_changes(text)[0])
    assert "torch.randn(batch, 1536)" in program and "n = 96" in program
    assert "torch.randint(0, 10, (batch, 32))" in program  # randint's value range stays, its size changes


def test_other_size_keeps_the_tasks_divisibility():
    assert [other_size(v) for v in (64, 1024, 3072, 1000, 100, 224, 4095, 3)] == \
        [96, 1536, 4608, 1400, 140, 320, 5985, 4]
    for v in (96, 224, 3072, 1000):  # the fallback variant keeps every small factor
        assert other_size_keeping_all(v) % np.gcd(v, 32 * 9 * 25 * 7) == 0 and other_size_keeping_all(v) > v
    text = _program("N = 32 * 3", "return [torch.randn(N, N).view(-1, 3)]")
    assert [c.names for c in size_changes(text)] == [{"N": 128}, {"N": 192}]


def test_extra_shape_of_an_expression_task_keeps_square_and_symmetric():
    """The plan's pick on the task that writes N = 32 * 2: one new N for both inputs, still symmetric. The step is
    drawn at random among SIZE_RATIOS in the verifier's process, so the test holds for every step the draw can give."""
    ref = load_reference(EXPRESSION_TASK, "expr")
    model, _ = build_model(ref, 7, "cpu", EXPRESSION_TASK)
    inputs = draw_inputs(ref.get_inputs, 7, "cpu", EXPRESSION_TASK)
    allowed = {c.names["N"] for r in SIZE_RATIOS for c in size_changes(EXPRESSION_TASK, r)}
    assert 96 in allowed and 64 not in allowed
    picked = set()
    for _ in range(8):
        spec, out_bytes = _pick_size_change(ref, model, EXPRESSION_TASK, 7, "cpu", inputs)
        other = draw_inputs(ref.get_inputs, 8, "cpu", EXPRESSION_TASK, spec)
        (n, m), second = tuple(other[0].shape), tuple(other[1].shape)
        assert n == m and second == (n, n) and n in allowed
        picked.add(n)
        assert out_bytes == sum(o.numel() * o.element_size() for o in [model(*other)])  # measured on that shape
        assert all(torch.equal(x, x.T) for x in other)
    assert picked <= allowed  # that the step is drawn at random: tests/redteam/test_redteam_extra_shape.py
