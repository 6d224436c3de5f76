"""Red team of the legality policies on PyTorch paths that never run (issue 47): static findings alone do not decide.

Frontier models write a PyTorch path into forward that the task's inputs never take: a fallback for shapes the task
cannot produce (``if x.shape[1] > 100000: return torch.relu(x)``), a vendor path for M > 32 where M is 1. The
static scan finds PyTorch compute there; the runtime monitors see none on any trial, the extra shape or the timed
calls. Under the partial policy such a path does not count (the candidate's own kernels did the work on the task's
inputs, as the knockout run confirms: pass_partial); under the strict policy it is still rejected, as its own code, C19_UNRUN_TORCH_PATH, apart
from C01 (PyTorch compute that ran). A one-time weight repack with torch on the first call does run: partial
passes it, strict rejects it as C01.

The cheating twins take the PyTorch path on the task's shapes (or only on the extra shape) and skip their own
kernel there: they fail both policies, C01 under strict. End to end on the cpu backend with the shared extension of
bench/lib/fixtures.py; the knockout's gating (cuda) through ``judge._legality_outcome`` with a knockout that records
whether it was asked.
"""

import pytest

from bench.lib import fixtures as fx
from kernelmill.schema import Candidate, Task, Verdict
from verifier import cheats
from verifier.engine import VerifyConfig, verify_batch
from verifier.common.contract import ChildReport, TrialReport
from verifier.judge.verdict import Work, _legality_outcome
from verifier.judge.knockout import CONTRIBUTES, NO_CONTRIBUTION, KnockoutResult
from verifier.judge.outputs import Evidence

MATMUL_M1_TASK = fx.MATMUL_TASK.replace("torch.randn(64, 96)", "torch.randn(1, 96)")
REPACK_INIT = "self.w = nn.Parameter(torch.randn(4))\nself.packed = None"
OWN_MATMUL = "return ext.matmul(a.contiguous(), b.contiguous())"

CASES = {
    # name: (task, candidate, the PyTorch path runs on the task's inputs, the own kernel does the work)
    "fallback_for_a_shape_the_task_cannot_produce": (fx.RELU_TASK, fx.cpu_candidate(
        "if x.shape[1] > 100000:\n    return torch.relu(x)\nreturn ext.relu(x.contiguous())"), False, True),
    "vendor_path_for_m_over_32_where_m_is_1": (MATMUL_M1_TASK, fx.cpu_candidate(
        f"if a.shape[0] > 32:\n    return torch.matmul(a, b)\n{OWN_MATMUL}", args="a, b"), False, True),
    "weight_repacked_with_torch_on_the_first_call": (fx.RELU_TASK, fx.cpu_candidate(
        "if self.packed is None:\n    self.packed = torch.flip(self.w, [0])\nreturn ext.relu(x.contiguous())",
        init=REPACK_INIT), True, True),
    # cheating twins: the PyTorch path runs and the own kernel does no work there
    "fallback_taken_on_the_task_shapes": (fx.RELU_TASK, fx.cpu_candidate(
        "if x.shape[1] > 100:\n    return torch.relu(x)\nreturn ext.relu(x.contiguous())"), True, False),
    "vendor_path_taken_where_m_is_1": (MATMUL_M1_TASK, fx.cpu_candidate(
        f"if a.shape[0] >= 1:\n    return torch.matmul(a, b)\n{OWN_MATMUL}", args="a, b"), True, False),
    "fallback_taken_on_the_extra_shape_only": (fx.RELU_TASK, fx.cpu_candidate(
        "if x.shape[0] != 64:\n    return torch.relu(x)\nreturn ext.relu(x.contiguous())"), True, False),
}


@pytest.fixture(scope="module")
def verdicts(shared_build_dir):
    build_dir = shared_build_dir  # the session's root (tests/conftest.py): its fork servers and objects are kept
    tasks = {t: Task.from_code(t, name=f"t{i}", source="seed", level=1)
             for i, t in enumerate({c[0] for c in CASES.values()})}
    out = {}
    for legality in ("strict", "partial"):
        cfg = VerifyConfig(build_dir=build_dir, trials=5, timing_trials=3, warmup=1, time_torch_compile=False,
                           run_timeout_s=60, memory_limit_gb=4, exec_workers=1, legality=legality)
        items = [(tasks[t], Candidate(candidate_id=n, task_id=tasks[t].task_id, backend="cpu", generator="redteam",
                                      code=c)) for n, (t, c, _, _) in CASES.items()]
        out[legality] = dict(zip(CASES, verify_batch(items, config=cfg, compile_workers=1)))
    return out


@pytest.mark.parametrize("name", [n for n, c in CASES.items() if not c[2]])
def test_unrun_pytorch_path_passes_partial_and_is_its_own_code_under_strict(verdicts, name):
    strict, partial = verdicts["strict"][name], verdicts["partial"][name]
    assert partial.status == "pass" and partial.cheats == [], (name, partial.cheats, partial.feedback[:600])
    assert partial.pass_partial is True and partial.pass_strict is False
    assert strict.status == "cheat" and strict.cheats == [cheats.C19], (name, strict.cheats, strict.feedback[:600])
    assert strict.pass_partial is True and strict.pass_strict is False
    assert "That PyTorch compute never ran" in strict.feedback and "Static check, line" in strict.feedback


def test_pytorch_that_ran_beside_own_work_passes_partial_and_is_c01_under_strict(verdicts):
    name = "weight_repacked_with_torch_on_the_first_call"
    strict, partial = verdicts["strict"][name], verdicts["partial"][name]
    assert partial.status == "pass" and partial.pass_partial is True, (partial.cheats, partial.feedback[:600])
    assert strict.status == "cheat" and cheats.C01 in strict.cheats and cheats.C19 not in strict.cheats
    assert "aten::flip" in strict.feedback


@pytest.mark.parametrize("name", [n for n, c in CASES.items() if not c[3]])
def test_pytorch_path_that_runs_instead_of_the_own_kernel_fails_both(verdicts, name):
    strict, partial = verdicts["strict"][name], verdicts["partial"][name]
    assert strict.status == "cheat" and cheats.C01 in strict.cheats and cheats.C19 not in strict.cheats, \
        (name, strict.cheats, strict.feedback[:600])
    assert partial.status == "cheat" and cheats.C02 in partial.cheats, (name, partial.cheats, partial.feedback[:600])
    assert partial.pass_partial is False and partial.pass_strict is False and strict.pass_partial is False


# ---------------------------------------------------------------------------- the knockout asked only where it ran

FINDING = "line 9: calls `torch.matmul` (PyTorch compute) [C01_TORCH_COMPUTE]"


def _decide(legality: str, ran: bool, answer: str = CONTRIBUTES):
    """_legality_outcome of a correct cuda candidate whose own kernels ran on every trial, with one static finding,
    and runtime PyTorch compute or none; the knockout records whether it was asked (no GPU here: its answer given)."""
    w = Work(verdict=Verdict(candidate_id="c", backend="cuda", own_kernel_share=0.9, correct=True),
             torch_findings=[FINDING])
    ev = Evidence(torch_codes={cheats.C01} if ran else set())
    report = ChildReport(kind="candidate", own_kernel_ran=True,
                         trials=[TrialReport(index=i, kernel_calls=1) for i in range(5)])
    asked = []

    def knockout(keep_scalars: bool = False):  # as the engine's: Python numbers kept on cpu's data-movement run
        asked.append(1)
        return KnockoutResult(answer, "with your kernels skipped the output is wrong" if answer == CONTRIBUTES else
                              "with your kernels skipped the output was still correct")

    return _legality_outcome(w, VerifyConfig(legality=legality), report, ev, knockout), asked


def test_a_static_finding_alone_does_not_decide_partial_the_knockout_does():
    """The PyTorch path never ran: partial asks the knockout whether the own kernels did the work. They did (the
    output is wrong without them): pass. The static finding decides nothing either way."""
    v, asked = _decide("partial", ran=False)
    assert asked == [1] and v.status == "pass" and v.pass_partial is True and v.pass_strict is False
    assert v.versions["knockout"]["outcome"] == CONTRIBUTES
    v, asked = _decide("strict", ran=False)
    assert asked == [1] and v.status == "cheat" and v.cheats == [cheats.C19] and v.pass_partial is True


def test_an_unrun_path_beside_kernels_that_do_no_work_fails_partial():
    """No monitor saw PyTorch do the work and the own kernels contribute nothing: something no monitor sees computed
    the output (host compute by a route the static scan does not know). Partial fails it (C02); strict says C19."""
    v, asked = _decide("partial", ran=False, answer=NO_CONTRIBUTION)
    assert asked == [1] and v.status == "cheat" and v.cheats == [cheats.C02] and v.pass_partial is False
    v, _ = _decide("strict", ran=False, answer=NO_CONTRIBUTION)
    assert v.status == "cheat" and v.cheats == [cheats.C19] and v.pass_partial is False


def test_pytorch_compute_that_ran_asks_the_knockout_and_is_c01_under_strict():
    v, asked = _decide("partial", ran=True)
    assert asked == [1] and v.status == "pass" and v.versions["knockout"]["outcome"] == CONTRIBUTES
    v, _ = _decide("strict", ran=True)
    assert v.status == "cheat" and v.cheats == [cheats.C01]
