"""Red team of the partial legality policy on the cpu backend: an own function called for show beside PyTorch doing
the work must not pass partial (the known gap until now: on cpu there is no kernel launch to skip, so the policy's
only rule there was that own functions are called on every trial).

The knockout run on cpu (verifier/judge/knockout.py, verifier/child/knockout.py ``knock_call``): one more correctness
trial in a fresh child where every call of the candidate's own extension functions runs on copies of its arguments
and hands back what a call that did no work would: its argument of the result's shape passed through, else zeros.
Still correct: the own functions produce no part of the output (C02 under partial). The thirteenth session's red team
passed partial with the rule before (a result of NaN): an own function that passes its input through beside PyTorch
doing the work (``relu`` of what ``torch.relu`` made non-negative already), and one whose result is added times zero,
each made every NaN reach the output and so "contributed" what it never computed. End to end on the cpu backend with the shared
extension of bench/lib/fixtures.py, under both policies; the honest partial twins (own relu after torch's matmul, as
a returned tensor and written into an output argument) pass partial and are C01 under strict.
"""

import math

import pytest
import torch

from bench.lib import fixtures as fx
from kernelmill.schema import Candidate, Task
from verifier import cheats
from verifier.child.knockout import knocked_out
from verifier.engine import VerifyConfig, verify_batch

RELU_MM_TASK = fx.MATMUL_TASK.replace("return torch.matmul(a, b)", "return torch.relu(torch.matmul(a, b))")

CASES = {
    # name: (task, candidate, the own functions produce part of the output)
    "empty_function_called_for_show": (fx.MATMUL_TASK, fx.cpu_candidate(
        "c = torch.matmul(a, b)\next.touch(c)\nreturn c", args="a, b"), False),
    "own_result_computed_and_discarded": (fx.RELU_TASK, fx.cpu_candidate(
        "y = ext.relu(x.contiguous())\nreturn torch.relu(x)"), False),
    "own_function_passing_its_input_through": (RELU_MM_TASK, fx.cpu_candidate(
        "c = torch.relu(torch.matmul(a, b)).contiguous()\nreturn ext.relu(c)", args="a, b"), False),
    "own_result_added_times_zero": (RELU_MM_TASK, fx.cpu_candidate(
        "c = torch.relu(torch.matmul(a, b)).contiguous()\nreturn c + ext.relu(c)[0] * 0.0", args="a, b"), False),
    "own_relu_after_torch_matmul": (RELU_MM_TASK, fx.cpu_candidate(
        "c = torch.matmul(a, b)\nreturn ext.relu(c.contiguous())", args="a, b"), True),
    "own_relu_into_an_output_argument": (RELU_MM_TASK, fx.cpu_candidate(
        "c = torch.matmul(a, b).contiguous()\nout = torch.empty_like(c)\next.relu_into(c, out)\nreturn out",
        args="a, b"), True),
}


@pytest.fixture(scope="module")
def verdicts(shared_build_dir):
    tasks = {t: Task.from_code(t, name=f"pc{i}", source="seed", level=1)
             for i, t in enumerate(sorted({c[0] for c in CASES.values()}))}
    out = {}
    for legality in ("strict", "partial"):
        cfg = VerifyConfig(build_dir=shared_build_dir, trials=5, timing_trials=0, warmup=1, time_torch_compile=False,
                           run_timeout_s=60, memory_limit_gb=4, exec_workers=1, legality=legality)
        items = [(tasks[t], Candidate(candidate_id=n, task_id=tasks[t].task_id, backend="cpu", generator="redteam",
                                      code=c)) for n, (t, c, _) in CASES.items()]
        out[legality] = dict(zip(CASES, verify_batch(items, config=cfg, compile_workers=1)))
    return out


@pytest.mark.parametrize("name", [n for n, c in CASES.items() if not c[2]])
def test_own_functions_that_produce_nothing_fail_partial_on_cpu(verdicts, name):
    partial, strict = verdicts["partial"][name], verdicts["strict"][name]
    assert partial.status == "cheat" and partial.cheats == [cheats.C02], (partial.cheats, partial.feedback[:600])
    assert partial.pass_partial is False and strict.pass_partial is False
    knock = partial.versions["knockout"]
    assert knock["outcome"] == "no_contribution" and sum(knock["skipped"].values()) >= 1, knock
    assert "do not contribute" in partial.feedback
    assert strict.status == "cheat" and cheats.C01 in strict.cheats  # PyTorch compute ran


@pytest.mark.parametrize("name", [n for n, c in CASES.items() if c[2]])
def test_own_functions_that_produce_part_of_the_output_pass_partial_on_cpu(verdicts, name):
    partial, strict = verdicts["partial"][name], verdicts["strict"][name]
    assert partial.status == "pass" and partial.pass_partial is True, (partial.cheats, partial.feedback[:600])
    assert partial.versions["knockout"]["outcome"] == "contributes", partial.versions["knockout"]
    assert strict.status == "cheat" and cheats.C01 in strict.cheats and strict.pass_partial is True


def test_a_knocked_out_result_is_what_a_call_that_did_no_work_hands_back():
    """A tensor result: the call's argument of its shape, dtype and device (passed through), else zeros (floating)
    or the complement (integers, booleans); scalars wrong; structure kept."""
    x = torch.randn(3, 4)
    i = torch.arange(-3, 5, dtype=torch.int32)
    b = torch.tensor([True, False])
    through = knocked_out(x * 2, [x, 7])
    assert torch.equal(through, x) and through.data_ptr() != x.data_ptr()
    kf, ki, kb = knocked_out((x.sum(0), [i, b]))[0], knocked_out((x.sum(0), [i, b]))[1][0], \
        knocked_out((x.sum(0), [i, b]))[1][1]
    assert kf.shape == (4,) and kf.dtype == x.dtype and bool((kf == 0).all())
    assert ki.dtype == i.dtype and bool((ki != i).all()) and bool((kb != b).all())
    assert torch.equal(knocked_out(i + 1, [i]), i)  # an integer result with a matching argument: passed through
    assert math.isnan(knocked_out(2.5)) and knocked_out(7) != 7 and knocked_out(True) is False
    assert knocked_out(None) is None and knocked_out("s") == "s"
