"""A reference timing that failed for want of the device's memory is measured again; any other failure is kept; and a
compiled part that was not timed says why in the verdicts it joins (verifier/runs.py ``_timed``, ``add_compiled``).
Seen on one H200 shared by ten pytest workers' verifiers: torch.compile's reference failed 'CUDA error: out of memory'
and its task's ten verdicts came without compile_us and without a word."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kernelmill.schema import Verdict
from verifier import runs
from verifier.common.config import VerifyConfig
from verifier.common.contract import ChildReport
from verifier.judge.verdict import Work

OOM = "AcceleratorError: CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported"


@pytest.fixture
def measured(monkeypatch, tmp_path):
    """``_timed`` over a scripted sequence of outcomes (an error string, or '' for a timed part): the measurements it
    took, in order, and the timing it returned."""
    monkeypatch.setattr(runs, "_REF_TIMINGS", {})
    monkeypatch.setattr(runs, "SHORTAGE_PAUSES_S", (0.0, 0.0))
    cfg = VerifyConfig(build_dir=str(tmp_path), prep_cache=False)

    def run(outcomes: list[str], text: str):
        calls = []

        def measure():
            error = outcomes[len(calls)]
            calls.append(error)
            clocked = {} if error else {"compile_s": 1e-5}
            return runs.ReferenceTiming(ChildReport(kind="reference", compile_error=error), clocked)

        timing = runs._timed(SimpleNamespace(text=text), "cpu", cfg, tmp_path, runs.COMPILED, measure)
        return calls, timing
    return run


def test_a_part_short_of_device_memory_is_measured_again_and_the_timed_one_kept(measured):
    calls, timing = measured([OOM, ""], "task a")
    assert calls == [OOM, ""]
    assert timing.clocked == {"compile_s": 1e-5} and not timing.report.compile_error


def test_a_part_short_of_device_memory_every_time_is_tried_three_times_and_its_failure_kept(measured):
    calls, timing = measured([OOM, OOM, OOM, ""], "task b")
    assert calls == [OOM, OOM, OOM]
    assert timing.report.compile_error == OOM


def test_a_part_that_fails_for_any_other_reason_is_measured_once(measured):
    unsupported = "BackendCompilerFailed: backend='inductor' raised: NotImplementedError: aten.foo"
    calls, timing = measured([unsupported, ""], "task c")
    assert calls == [unsupported]
    assert timing.report.compile_error == unsupported


def test_a_compiled_part_not_timed_says_why_in_the_verdict():
    v = Verdict(candidate_id="c", task_id="t", backend="cuda", status="pass", runtime_us=10.0, eager_us=20.0,
                feedback="Your kernel is correct.", versions={"timing": {}})
    w = Work(verdict=v, compiled_pending=True)
    runs.add_compiled(w, runs.ReferenceTiming(ChildReport(kind="reference", compile_error=OOM), {}))
    assert not w.compiled_pending and v.compile_us is None and v.status == "pass"
    assert "torch.compile's reference was not timed (not your kernel's doing): AcceleratorError: CUDA error: out of " \
           "memory" in v.feedback, v.feedback


def test_a_timed_compiled_part_adds_no_such_line():
    v = Verdict(candidate_id="c", task_id="t", backend="cuda", status="pass", runtime_us=10.0, eager_us=20.0,
                feedback="Your kernel is correct.", versions={"timing": {}})
    runs.add_compiled(Work(verdict=v), runs.ReferenceTiming(ChildReport(kind="reference"), {"compile_s": 5e-6}))
    assert v.compile_us == 5.0 and "not timed" not in v.feedback
