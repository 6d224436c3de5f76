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

All candidates share one C++ extension (verifier/fixtures.py PRECISION_CPP): the session builds it once."""

import dataclasses

import pytest

from kernelmill.schema import Candidate, Task
from verifier import cheats
from verifier import fixtures as fx
from verifier.api import VerifyConfig, verify_batch
from verifier.metrics import summarize_verdicts
from verifier.static import scan

P = fx.precision_candidate
CASES = {
    # name: (task, candidate, expected status, cheat code that must be present or None)
    "matmul_k8192_fp32": ("matmul_long_k", P("return ext.matmul_f32(a, b)", args="a, b"), "pass", None),
    "matmul_k8192_tf32": ("matmul_long_k", P("return ext.matmul_tf32(a, b)", args="a, b"), "cheat", cheats.C13),
    "matmul_k8192_bf16": ("matmul_long_k", P("return ext.matmul_bf16(a, b)", args="a, b"), "cheat", cheats.C13),
    "sum_1m_fp32": ("sum_1m", P("return ext.sum_rows(x)"), "pass", None),
    "sum_1m_fp16_inputs": ("sum_1m", P("return ext.sum_rows_half(x)"), "cheat", cheats.C13),
    "cumsum_32768_fp32": ("cumsum_long", P("return ext.cumsum_rows(x)"), "pass", None),
    "fro_norm_2m_fp32": ("fro_norm_2m", P("return ext.fro_normalize(x)"), "pass", None),
    "gelu_erf": ("gelu", P("return ext.gelu_erf(x)"), "pass", None),
    "gelu_crude_approximation": ("gelu", P("return ext.gelu_crude(x)"), "cheat", cheats.C13),
    "prod_underflow_honest": ("prod_underflow", P("return ext.prod_rows(x)"), "task_error", None),
    "centred_mean_rounding_only": ("centred_mean", P("return ext.sum_rows(x)"), "task_error", None),
    "symmetric_square_honest": ("matmul_symmetric", P("return ext.matmul_square(A, B)", args="A, B"), "pass", None),
    "symmetric_square_hardcoded": ("matmul_symmetric", P("return ext.matmul_square_fixed(A, B)", args="A, B"),
                                   "cheat", cheats.C14),
    "linear_init_like_nn_linear": ("linear", fx.linear_candidate(), "pass", None),
    "linear_torch_then_own_relu": ("linear_relu", fx.linear_candidate(
        "return ext.relu(torch.nn.functional.linear(x, self.weight, self.bias))"), "cheat", cheats.C01),
}
TASKS = {name: Task.from_code(code, name=name, source="seed", level=1) for name, code in fx.PRECISION_TASKS.items()}


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    return VerifyConfig(build_dir=str(tmp_path_factory.mktemp("precision-builds")), trials=5, timing_trials=3,
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
    """N = 64 becomes 96 for both inputs (square, symmetric by the task's own get_inputs): six trials, all passed."""
    v = verdicts["symmetric_square_honest"]
    assert v.trials == 6, v.feedback
    bad = verdicts["symmetric_square_hardcoded"].feedback
    assert "[96, 96], [96, 96]" in bad, bad


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
    from verifier.judge import _warm_up_failed

    ours = "[verifier] warm execution process ready in 0.00 s before this job\nwarm-up failed:\nTraceback ..."
    assert _warm_up_failed(ours)
    assert not _warm_up_failed("[verifier] warm execution process ready in 0.01 s before this job\nrunning\n"
                               "warm-up failed: (printed by the candidate)")
    assert not _warm_up_failed("warm-up failed:\n")
